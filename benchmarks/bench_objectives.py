"""Value estimators and losses: ``rl_objectives`` vs TorchRL 0.14's ``torchrl.objectives`` vs hand-written torch.

Usage::

    python benchmarks/bench_objectives.py [--quick] [--out PATH] [--threads N] [--samples N]

Same method as ``bench_tdict.py`` (one process, interleaved rounds, paired medians, 1 thread by
default). Every implementation gets the same seeded rollout: ours as ``[N, T]`` tensors (time last,
no trailing dim), TorchRL's as ``[N, T, 1]`` (its layout). For the estimators the floor is the
textbook reverse loop over time written here with plain torch ops, and each run's advantage is
checked against it (within 1e-4) before timing. For the losses the floor is the same step written
out on tensors (no TensorDict, no modules); a loss step is forward plus backward on identical
networks and data (its values are checked by the tests, here only that it is a finite scalar).
"""

from __future__ import annotations

import argparse
import math
import datetime as dt
import platform
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace as NS

import torch
from torch import nn

from _harness import Comparison, Impl, Workload, module_versions, render, run_all, run_config, summarize, write_report

HERE = Path(__file__).resolve().parent
GAMMA, LMBDA = 0.99, 0.95
OBS = 8


def rollout(n: int, t: int, seed: int = 0) -> dict:
    """Values, rewards and trajectory ends for ``n`` envs and ``t`` steps (time last)."""
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(n, t, generator=g) < 0.01
    truncated = (torch.rand(n, t, generator=g) < 0.01) & ~terminated
    return {
        "obs": torch.randn(n, t, OBS, generator=g),
        "next_obs": torch.randn(n, t, OBS, generator=g),
        "value": torch.randn(n, t, generator=g),
        "next_value": torch.randn(n, t, generator=g),
        "reward": torch.randn(n, t, generator=g),
        "done": terminated | truncated,
        "terminated": terminated,
    }


def reference_gae(d: dict, gamma: float = GAMMA, lmbda: float = LMBDA) -> torch.Tensor:
    """The textbook reverse loop: delta_t + gamma * lambda * A_{t+1}, reset at trajectory ends."""
    not_term, not_done = (~d["terminated"]).float(), (~d["done"]).float()
    delta = d["reward"] + gamma * not_term * d["next_value"] - d["value"]
    adv = torch.empty_like(delta)
    running = torch.zeros_like(delta[..., 0])
    for t in range(delta.shape[-1] - 1, -1, -1):
        running = delta[..., t] + gamma * lmbda * not_done[..., t] * running
        adv[..., t] = running
    return adv


def value_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(OBS, 1)


# ----------------------------------------------------------------------------- implementations
def _ours() -> NS | None:
    try:
        import rl_objectives.functional as F
        from rl_objectives import ClipPPOLoss, SACLoss, SoftUpdate
        from rl_objectives.modules import IndependentNormal, ProbabilisticActor, TanhNormal, ValueOperator
        from rl_objectives.value import GAE
        from tdict import TensorDict
        from tdict.nn import NormalParamExtractor, TensorDictModule
    except Exception as e:  # noqa: BLE001
        print(f"note: skipping ours ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    return NS(
        F=F,
        GAE=GAE,
        TensorDict=TensorDict,
        TensorDictModule=TensorDictModule,
        trailing=False,
        ClipPPOLoss=ClipPPOLoss,
        SACLoss=SACLoss,
        SoftUpdate=SoftUpdate,
        ProbabilisticActor=ProbabilisticActor,
        ValueOperator=ValueOperator,
        IndependentNormal=IndependentNormal,
        TanhNormal=TanhNormal,
        NormalParamExtractor=NormalParamExtractor,
    )


def _torchrl() -> NS | None:
    try:
        import torchrl.objectives.value.functional as F
        from tensordict import TensorDict
        from tensordict.nn import NormalParamExtractor, TensorDictModule
        from torchrl.modules import IndependentNormal, ProbabilisticActor, TanhNormal, ValueOperator
        from torchrl.objectives import ClipPPOLoss, SACLoss, SoftUpdate
        from torchrl.objectives.value import GAE
    except Exception as e:  # noqa: BLE001
        print(f"note: skipping torchrl ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    return NS(
        F=F,
        GAE=GAE,
        TensorDict=TensorDict,
        TensorDictModule=TensorDictModule,
        trailing=True,
        ClipPPOLoss=ClipPPOLoss,
        SACLoss=SACLoss,
        SoftUpdate=SoftUpdate,
        ProbabilisticActor=ProbabilisticActor,
        ValueOperator=ValueOperator,
        IndependentNormal=IndependentNormal,
        TanhNormal=TanhNormal,
        NormalParamExtractor=NormalParamExtractor,
    )


def load_impls() -> list[Impl]:
    impls = []
    for name, mod in (("ours", _ours()), ("torchrl", _torchrl())):
        if mod is not None:
            impls.append(Impl(name, name, "td", wrap=lambda d, bs, m=mod: m, TensorDict=mod))
    impls.append(Impl("plain", "hand-written", "plain", wrap=lambda d, bs: None))
    return impls


# ----------------------------------------------------------------------------- workloads
def s_tensors(n: int, t: int):
    def setup(impl: Impl) -> NS:
        d = rollout(n, t)
        ref = reference_gae(d)
        m = impl.TensorDict
        if m is not None and m.trailing:
            d = {k: v.unsqueeze(-1) if k not in ("obs", "next_obs") else v for k, v in d.items()}
        return NS(m=m, d=d, ref=ref)

    return setup


def s_module(n: int, t: int):
    """A rollout TensorDict and a GAE module over a linear value network (values computed by it)."""

    def setup(impl: Impl) -> NS:
        d = rollout(n, t)
        m, net = impl.TensorDict, value_net()
        with torch.no_grad():
            ref = reference_gae({**d, "value": net(d["obs"]).squeeze(-1), "next_value": net(d["next_obs"]).squeeze(-1)})
        if m is None:
            return NS(d=d, net=net, ref=ref)
        ex = (lambda x: x.unsqueeze(-1)) if m.trailing else (lambda x: x)
        td = m.TensorDict(
            {
                "observation": d["obs"],
                "next": {
                    "observation": d["next_obs"],
                    "reward": ex(d["reward"]),
                    "done": ex(d["done"]),
                    "terminated": ex(d["terminated"]),
                },
            },
            batch_size=[n, t],
        )
        critic = nn.Sequential(net) if m.trailing else _Squeeze(net)
        module = m.TensorDictModule(critic, in_keys=["observation"], out_keys=["state_value"])
        gae = m.GAE(gamma=GAMMA, lmbda=LMBDA, value_network=module)
        return NS(td=td, gae=gae, ref=ref, trailing=m.trailing)

    return setup


class _Squeeze(nn.Module):
    """Our value heads have no trailing 1 (DESIGN: per-step scalars carry the batch shape)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


def gae_call(c: NS, vectorized: bool):
    d, m = c.d, c.m
    fn = m.F.vec_generalized_advantage_estimate if vectorized else m.F.generalized_advantage_estimate
    time_dim = -2 if m.trailing else -1
    return partial(
        fn, GAMMA, LMBDA, d["value"], d["next_value"], d["reward"], d["done"], d["terminated"], time_dim=time_dim
    )


def module_call(c: NS):
    def run():
        with torch.no_grad():
            return c.gae(c.td.clone(False))

    return run


def plain_module(c: NS):
    def run():
        with torch.no_grad():
            d = {**c.d, "value": c.net(c.d["obs"]).squeeze(-1), "next_value": c.net(c.d["next_obs"]).squeeze(-1)}
            return reference_gae(d)

    return run


# ----------------------------------------------------------------------------- losses
ACT = 2
HIDDEN = 64


def _net(n_in: int, n_out: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)  # the same weights for every implementation
    return nn.Sequential(nn.Linear(n_in, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, n_out))


def _actor(m: NS, dist: str) -> object:
    body = m.TensorDictModule(
        nn.Sequential(_net(OBS, 2 * ACT, 0), m.NormalParamExtractor()),
        in_keys=["observation"],
        out_keys=["loc", "scale"],
    )
    cls = m.IndependentNormal if dist == "normal" else m.TanhNormal
    return m.ProbabilisticActor(body, in_keys=["loc", "scale"], distribution_class=cls, return_log_prob=True)


def _batch(m: NS, n: int, lp_key: str, seed: int = 3) -> object:
    """A flat batch of transitions: obs, action, its behaviour log-prob, advantage, targets, next."""
    g = torch.Generator().manual_seed(seed)
    ex = (lambda x: x.unsqueeze(-1)) if m.trailing else (lambda x: x)
    done = torch.rand(n, generator=g) < 0.05
    return m.TensorDict(
        {
            "observation": torch.randn(n, OBS, generator=g),
            "action": torch.rand(n, ACT, generator=g) * 1.8 - 0.9,
            lp_key: ex(torch.randn(n, generator=g) - 2.0),
            "advantage": ex(torch.randn(n, generator=g)),
            "value_target": ex(torch.randn(n, generator=g)),
            "next": {
                "observation": torch.randn(n, OBS, generator=g),
                "reward": ex(torch.randn(n, generator=g)),
                "done": ex(done),
                "terminated": ex(done.clone()),
            },
        },
        batch_size=[n],
    )


def s_ppo(n: int):
    def setup(impl: Impl) -> NS:
        m = impl.TensorDict
        if m is None:
            return NS(n=n)
        critic = m.ValueOperator(_net(OBS, 1, 1), in_keys=["observation"])
        loss = m.ClipPPOLoss(_actor(m, "normal"), critic, clip_epsilon=0.2, entropy_bonus=True, entropy_coeff=0.01)
        return NS(loss=loss, td=_batch(m, n, loss.tensor_keys.sample_log_prob), params=list(loss.parameters()))

    return setup


class _Concat(nn.Module):
    """A Q-network over (observation, action): the two inputs concatenated."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, action], -1))


def s_sac(n: int):
    def setup(impl: Impl) -> NS:
        m = impl.TensorDict
        if m is None:
            return NS(n=n)
        qnet = m.ValueOperator(_Concat(_net(OBS + ACT, 1, 2)), in_keys=["observation", "action"])
        loss = m.SACLoss(_actor(m, "tanh"), qnet, num_qvalue_nets=2, target_entropy=-float(ACT))
        # as in training: without a target updater both libraries warn on every read of the targets
        updater = m.SoftUpdate(loss, tau=0.005)
        td = _batch(m, n, loss.tensor_keys.log_prob)
        return NS(loss=loss, td=td, params=list(loss.parameters()), updater=updater)

    return setup


def loss_step(c: NS):
    """One loss evaluation and backward pass (what a training step costs besides the optimizer)."""

    def run():
        for p in c.params:
            p.grad = None
        out = c.loss(c.td.copy())
        total = sum(v for k, v in out.items() if k.startswith("loss_"))
        total.backward()
        return total.detach()

    return run


def scale_mapping(raw: torch.Tensor) -> torch.Tensor:
    """The actors' scale: ``softplus(x + b) + 0.01`` with ``b`` such that 0 maps to 1, at least 1e-4
    (``NormalParamExtractor``'s default "biased_softplus_1.0" in TorchRL and ours)."""
    return (torch.nn.functional.softplus(raw + _SOFTPLUS_BIAS) + 0.01).clamp_min(1e-4)


_SOFTPLUS_BIAS = math.log(math.expm1(1.0 - 0.01))


def plain_ppo(c: NS):
    """The clipped PPO step written out on tensors: Gaussian policy, MLP critic, same sizes, and
    the same outputs as the losses (clip fraction, approximate KL, effective sample size, explained
    variance, entropy)."""
    torch.manual_seed(0)
    pi, v = _net(OBS, 2 * ACT, 0), _net(OBS, 1, 1)
    g = torch.Generator().manual_seed(3)
    obs, act = torch.randn(c.n, OBS, generator=g), torch.rand(c.n, ACT, generator=g) * 1.8 - 0.9
    old_lp, adv, target = (
        torch.randn(c.n, generator=g) - 2.0,
        torch.randn(c.n, generator=g),
        torch.randn(c.n, generator=g),
    )
    params = list(pi.parameters()) + list(v.parameters())

    def run():
        for p in params:
            p.grad = None
        loc, scale = pi(obs).chunk(2, -1)
        scale = scale_mapping(scale)
        dist = torch.distributions.Independent(torch.distributions.Normal(loc, scale), 1)
        log_ratio = dist.log_prob(act) - old_lp
        ratio = log_ratio.exp()
        clipped = ratio.clamp(0.8, 1.2)
        objective = -torch.min(ratio * adv, clipped * adv).mean()
        value = v(obs).squeeze(-1)
        critic = torch.nn.functional.smooth_l1_loss(value, target)
        entropy = dist.entropy().mean()
        total = objective + critic - 0.01 * entropy
        with torch.no_grad():  # the diagnostics ClipPPOLoss returns (as TorchRL's does)
            w = torch.softmax(log_ratio, 0)
            diagnostics = (
                (clipped != ratio).float().mean(),  # clip fraction
                -log_ratio.mean(),  # approximate KL
                1.0 / (w.square().sum() * w.numel()),  # normalised effective sample size
                1.0 - (value - target).square().mean() / target.var(correction=0),  # explained variance
            )
        total.backward()
        return total.detach() + 0 * diagnostics[0]

    return run


def plain_sac(c: NS):
    """The SAC step written out on tensors: tanh-Gaussian actor, twin MLP critics with targets, alpha.
    The actor's loss reads the critics with their parameters frozen (as SACLoss and TorchRL's detach
    them): its gradient reaches the actor only."""
    import copy

    pi = _net(OBS, 2 * ACT, 0)
    qs = [_net(OBS + ACT, 1, 2), _net(OBS + ACT, 1, 5)]
    targets = [copy.deepcopy(q) for q in qs]
    log_alpha = torch.zeros((), requires_grad=True)
    g = torch.Generator().manual_seed(3)
    obs, act = torch.randn(c.n, OBS, generator=g), torch.rand(c.n, ACT, generator=g) * 1.8 - 0.9
    nobs, rew = torch.randn(c.n, OBS, generator=g), torch.randn(c.n, generator=g)
    term = torch.rand(c.n, generator=g) < 0.05
    critic_params = [p for q in qs for p in q.parameters()]
    params = [*pi.parameters(), *critic_params, log_alpha]

    def policy(o):
        loc, scale = pi(o).chunk(2, -1)
        base = torch.distributions.Normal(loc, scale_mapping(scale))
        u = base.rsample()
        a = torch.tanh(u)
        return a, (base.log_prob(u) - torch.log1p(-a.pow(2) + 1e-6)).sum(-1)

    def run():
        for p in params:
            p.grad = None
        alpha = log_alpha.exp()
        with torch.no_grad():
            na, nlp = policy(nobs)
            nq = torch.min(*(t(torch.cat([nobs, na], -1)).squeeze(-1) for t in targets)) - alpha * nlp
            y = rew + 0.99 * (~term) * nq
        q_loss = sum(torch.nn.functional.smooth_l1_loss(q(torch.cat([obs, act], -1)).squeeze(-1), y) for q in qs)
        a, lp = policy(obs)
        for p in critic_params:  # the actor's loss trains the actor only
            p.requires_grad_(False)
        q_pi = torch.min(*(q(torch.cat([obs, a], -1)).squeeze(-1) for q in qs))
        for p in critic_params:
            p.requires_grad_(True)
        actor_loss = (alpha.detach() * lp - q_pi).mean()
        alpha_loss = -(log_alpha * (lp.detach() - ACT)).mean()
        entropy = -lp.detach().mean()  # reported by SACLoss, with alpha
        total = q_loss + actor_loss + alpha_loss + 0 * entropy
        total.backward()
        return total.detach()

    return run


def finite_scalar(ctx: NS, out) -> bool:
    return bool(out.shape == () and torch.isfinite(out))


def matches_reference(ctx: NS, out) -> bool:
    adv = out[0] if isinstance(out, tuple) else out if isinstance(out, torch.Tensor) else out["advantage"]
    adv = adv.squeeze(-1) if adv.shape != ctx.ref.shape else adv
    return bool(torch.allclose(adv, ctx.ref, atol=1e-4))


# fmt: off
WORKLOADS = [
    Workload("vec GAE, 16 envs x 1000 steps", "functional", s_tensors(16, 1000),
             td=lambda c: gae_call(c, True), plain=lambda c: partial(reference_gae, c.d), observe=matches_reference),
    Workload("loop GAE, 16 envs x 256 steps", "functional", s_tensors(16, 256),
             td=lambda c: gae_call(c, False), plain=lambda c: partial(reference_gae, c.d), observe=matches_reference),
    Workload("GAE module (linear critic), 16 x 256 rollout", "module", s_module(16, 256),
             td=module_call, plain=plain_module, observe=matches_reference,
             note="values computed by the critic on observation and next observation; then the vectorised estimate"),
    Workload("ClipPPOLoss forward+backward, batch 256", "loss", s_ppo(256),
             td=loss_step, plain=plain_ppo, observe=finite_scalar,
             note="Gaussian policy and critic (MLP 64); advantage and value target given"),
    Workload("SACLoss forward+backward, batch 256", "loss", s_sac(256),
             td=loss_step, plain=plain_sac, observe=finite_scalar,
             note="tanh-Gaussian policy, 2 Q-nets with targets (MLP 64), learnt alpha"),
]
# fmt: on


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "objectives.json"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--samples", type=int, default=None, help="rounds per workload (default 101; --quick 7)")
    args = ap.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    # a loss step is a few ms: 101 rounds of one or two calls each keep the paired ratios within about 1%
    cfg = run_config(args.quick, args.samples or (None if args.quick else 101))
    impls = load_impls()
    versions = module_versions("torch", "torchrl", "tensordict", "rl_objectives")
    header = f"{', '.join(f'{k} {v}' for k, v in versions.items())}; python {platform.python_version()}; {torch.get_num_threads()} thread(s)"
    print(header + "\n", flush=True)
    results = run_all(WORKLOADS, impls, cfg, reference="plain")
    cmp = Comparison(
        "ours",
        "torchrl",
        "plain",
        {"ours": "ours", "torchrl": "torchrl", "plain": "hand-written"},
        max_over_floor=float("inf"),
        min_geomean_speedup=None,
    )
    rows, summary = summarize(results, cmp)
    table = render(rows, summary, cmp)
    print("\n" + table)
    report = {
        "benchmark": "objectives",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": {
            "versions": versions,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "torch_num_threads": torch.get_num_threads(),
        },
        "method": {"samples": cfg.samples, "target_sample_s": cfg.target_sample_s, "warmup_s": cfg.warmup_s},
        "summary": summary,
        "workloads": rows,
    }
    write_report(args.out, report, table=header + "\n\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
