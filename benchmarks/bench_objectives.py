"""Value estimators: ``rl_objectives`` vs TorchRL 0.14's ``torchrl.objectives.value`` vs a hand loop.

Usage::

    python benchmarks/bench_objectives.py [--quick] [--out PATH] [--threads N]

Same method as ``bench_tdict.py`` (one process, interleaved rounds, paired medians, 1 thread by
default). Every implementation gets the same seeded rollout: ours as ``[N, T]`` tensors (time last,
no trailing dim), TorchRL's as ``[N, T, 1]`` (its layout). The floor is the textbook reverse loop over
time written here with plain torch ops. Each run's advantage is checked against that loop (within
1e-4) before timing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace as NS

import torch
from torch import nn

from _harness import Comparison, Impl, Workload, render, run_all, run_config, summarize, write_report

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
        from rl_objectives.value import GAE
        from tdict import TensorDict
        from tdict.nn import TensorDictModule
    except Exception as e:  # noqa: BLE001
        print(f"note: skipping ours ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    return NS(F=F, GAE=GAE, TensorDict=TensorDict, TensorDictModule=TensorDictModule, trailing=False)


def _torchrl() -> NS | None:
    try:
        import torchrl.objectives.value.functional as F
        from tensordict import TensorDict
        from tensordict.nn import TensorDictModule
        from torchrl.objectives.value import GAE
    except Exception as e:  # noqa: BLE001
        print(f"note: skipping torchrl ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    return NS(F=F, GAE=GAE, TensorDict=TensorDict, TensorDictModule=TensorDictModule, trailing=True)


def load_impls() -> list[Impl]:
    impls = []
    for name, mod in (("ours", _ours()), ("torchrl", _torchrl())):
        if mod is not None:
            impls.append(Impl(name, name, "td", wrap=lambda d, bs, m=mod: m, TensorDict=mod))
    impls.append(Impl("plain", "hand loop", "plain", wrap=lambda d, bs: None))
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
                "next": {"observation": d["next_obs"], "reward": ex(d["reward"]), "done": ex(d["done"]), "terminated": ex(d["terminated"])},
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
    return partial(fn, GAMMA, LMBDA, d["value"], d["next_value"], d["reward"], d["done"], d["terminated"], time_dim=time_dim)


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
]
# fmt: on


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "objectives.json"))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cfg = run_config(args.quick)
    impls = load_impls()
    versions = {}
    for mod in ("torch", "torchrl", "tensordict", "rl_objectives"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            versions[mod] = None
    header = f"{', '.join(f'{k} {v}' for k, v in versions.items())}; python {platform.python_version()}; {torch.get_num_threads()} thread(s)"
    print(header + "\n", flush=True)
    results = run_all(WORKLOADS, impls, cfg, reference="plain")
    cmp = Comparison("ours", "torchrl", "plain", {"ours": "ours", "torchrl": "torchrl", "plain": "hand loop"}, max_over_floor=float("inf"))
    rows, summary = summarize(results, cmp)
    table = render(rows, summary, cmp)
    print("\n" + table)
    report = {
        "benchmark": "objectives",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": {"versions": versions, "python": platform.python_version(), "platform": platform.platform(),
                        "torch_num_threads": torch.get_num_threads()},
        "method": {"samples": cfg.samples, "target_sample_s": cfg.target_sample_s, "warmup_s": cfg.warmup_s},
        "summary": summary,
        "workloads": rows,
    }
    write_report(args.out, report, table=header + "\n\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
