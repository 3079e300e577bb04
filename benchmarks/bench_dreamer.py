"""DreamerV3 world-model update: ``rl_objectives`` vs TorchRL 0.14's ``torchrl`` vs hand-written torch.

Usage::

    python benchmarks/bench_dreamer.py [--quick] [--out PATH] [--threads N]

Same method as ``bench_objectives.py`` (one process, interleaved rounds, paired medians, 1 thread by
default). One timed call is ``DreamerV3ModelLoss`` forward plus backward (the world-model update
without the optimizer step) on a batch of 16 replayed sequences x 64 steps of vector observations
(17-dim observations, 6-dim actions in [-1, 1], a reward, a terminal flag, episode starts).

The world model, built identically in both libraries from the same sizes and seeds (DreamerV3's
"small" layout, scaled to what a CPU handles):

- observation encoder: ``DreamerV3MLP(17, None, depth=2, num_cells=512)`` on the symlog observation
  (the loss compares in symlog space; the encoder sees raw observations here);
- ``RSSMRolloutV3`` over ``RSSMPriorV3`` / ``RSSMPosteriorV3``: 32 categoricals x 32 classes,
  belief (deter) 512, hidden 512, unimix 1%; the prior's recurrent core is TorchRL's default
  ``"gru"`` (a projection into a ``GRUCell``) in one workload and DreamerV3's ``"block_gru"`` (8
  blocks, RMS-normalised prior and posterior heads) in the other;
- observation decoder ``DreamerV3MLP(1536, 17, 2, 512)``, two-hot reward head
  ``DreamerV3MLP(1536, 255, 2, 512, outscale=0)``, continue head ``DreamerV3MLP(1536, 1, 2, 512)``,
  all on the posterior ``(state, belief)``;
- ``DreamerV3ModelLoss(kl_mode="separate", lambda_dynamic=0.5, lambda_representation=0.1,
  unimix=0.01, free_bits=1.0, lambda_continue=1.0)``, 255 reward bins.

Weights: every module of the two libraries has the same parameter layout, so TorchRL's model gets a
copy of ours (state-dict values in order, shapes checked). Before timing, the script checks that
with those weights the deterministic parts agree (encoder, one prior and one posterior step, the
heads; within 1e-5) and that both losses give the same values on the same world-model output (the
rollout draws its categorical states at random, and each library consumes the random stream in its
own way, so full-update values are not compared). The timed call's result is checked as finite loss terms of the same names.

The floor (``hand-written``) is the same update written out on tensors: the same weights, a Python
loop over time with ``torch`` ops, the loss terms computed inline; no TensorDict, no modules'
``forward``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
from pathlib import Path
from types import SimpleNamespace as NS

import torch
import torch.nn.functional as F

from _harness import Comparison, Impl, Workload, module_versions, render, run_all, run_config, summarize, write_report

HERE = Path(__file__).resolve().parent
B, T, OBS, ACT = 16, 64, 17, 6
CATS, CLASSES, BELIEF, HIDDEN, WIDTH, DEPTH, BINS = 32, 32, 512, 512, 512, 2, 255
STOCH = CATS * CLASSES
FEAT = STOCH + BELIEF
UNIMIX, FREE_NATS, L_DYN, L_REP = 0.01, 1.0, 0.5, 0.1


# ----------------------------------------------------------------------------- implementations
def _ours() -> NS | None:
    try:
        from rl_objectives import DreamerV3ModelLoss
        from rl_objectives.modules import DreamerV3MLP, RSSMPosteriorV3, RSSMPriorV3, RSSMRolloutV3
        from tdict import TensorDict
        from tdict.nn import TensorDictModule, TensorDictSequential
    except Exception as e:  # noqa: BLE001
        print(f"note: skipping ours ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    return NS(
        name="ours",
        trailing=False,  # per-step scalars carry the batch shape (DESIGN.md §3)
        Loss=DreamerV3ModelLoss,
        MLP=DreamerV3MLP,
        Prior=RSSMPriorV3,
        Posterior=RSSMPosteriorV3,
        Rollout=RSSMRolloutV3,
        TensorDict=TensorDict,
        TensorDictModule=TensorDictModule,
        TensorDictSequential=TensorDictSequential,
    )


def _torchrl() -> NS | None:
    try:
        from tensordict import TensorDict
        from tensordict.nn import TensorDictModule, TensorDictSequential
        from torchrl.modules import DreamerV3MLP, RSSMPosteriorV3, RSSMPriorV3, RSSMRolloutV3
        from torchrl.objectives import DreamerV3ModelLoss
    except Exception as e:  # noqa: BLE001
        print(f"note: skipping torchrl ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    return NS(
        name="torchrl",
        trailing=True,  # TorchRL's layout: a trailing dim of 1
        Loss=DreamerV3ModelLoss,
        MLP=DreamerV3MLP,
        Prior=RSSMPriorV3,
        Posterior=RSSMPosteriorV3,
        Rollout=RSSMRolloutV3,
        TensorDict=TensorDict,
        TensorDictModule=TensorDictModule,
        TensorDictSequential=TensorDictSequential,
    )


OURS, TORCHRL = _ours(), _torchrl()


def load_impls() -> list[Impl]:
    impls = [Impl(m.name, m.name, "td", wrap=lambda d, bs, m=m: m, TensorDict=m) for m in (OURS, TORCHRL) if m]
    impls.append(Impl("plain", "hand-written", "plain", wrap=lambda d, bs: None))
    return impls


# ----------------------------------------------------------------------------- the world model
def build_nets(m: NS, recurrent: str) -> NS:
    """The world model's networks (plain ``nn.Module`` s of library ``m``), seeded."""
    torch.manual_seed(0)
    block = recurrent == "block_gru"
    return NS(
        encoder=m.MLP(OBS, None, DEPTH, WIDTH),
        prior=m.Prior(
            action_shape=(ACT,),
            hidden_dim=HIDDEN,
            rnn_hidden_dim=BELIEF,
            num_categoricals=CATS,
            num_classes=CLASSES,
            action_dim=ACT,
            recurrent_model=recurrent,
            unimix=UNIMIX,
        ),
        posterior=m.Posterior(
            HIDDEN, CATS, CLASSES, rnn_hidden_dim=BELIEF, obs_embed_dim=WIDTH, use_rms_norm=block, unimix=UNIMIX
        ),
        decoder=m.MLP(FEAT, OBS, DEPTH, WIDTH),
        reward=m.MLP(FEAT, BINS, DEPTH, WIDTH, outscale=0.0),
        cont=m.MLP(FEAT, 1, DEPTH, WIDTH),
    )


def copy_weights(src: NS, dst: NS) -> None:
    """``dst``'s parameters := ``src``'s: by name where the names agree, else in order (the layouts
    agree, the names of the block GRU's parts do not); shapes checked."""
    for name in vars(src):
        a, b = getattr(src, name).state_dict(), getattr(dst, name).state_dict()
        pairs = {k: a[k] for k in b} if a.keys() == b.keys() else dict(zip(b, a.values(), strict=True))
        if len(a) != len(b) or any(pairs[k].shape != v.shape for k, v in b.items()):
            raise RuntimeError(f"{name}: parameter layouts differ")
        getattr(dst, name).load_state_dict(pairs)


def world_model(m: NS, nets: NS):
    tdm = m.TensorDictModule
    post = [("next", "state"), ("next", "belief")]
    return m.TensorDictSequential(
        tdm(nets.encoder, in_keys=[("next", "observation")], out_keys=[("next", "encoded_latents")]),
        m.Rollout(
            tdm(
                nets.prior,
                in_keys=["state", "belief", "action"],
                out_keys=[("next", "prior_logits"), ("next", "state"), ("next", "belief")],
            ),
            tdm(
                nets.posterior,
                in_keys=[("next", "belief"), ("next", "encoded_latents")],
                out_keys=[("next", "posterior_logits"), ("next", "state")],
            ),
        ),
        tdm(nets.decoder, in_keys=post, out_keys=[("next", "reco_observation")]),
        tdm(nets.reward, in_keys=post, out_keys=[("next", "reward_logits")]),
        tdm(nets.cont, in_keys=post, out_keys=[("next", "continue_pred")]),
    )


def make_loss(m: NS, model) -> object:
    loss = m.Loss(
        model,
        lambda_continue=1.0,
        kl_mode="separate",
        lambda_dynamic=L_DYN,
        lambda_representation=L_REP,
        unimix=UNIMIX,
        free_bits=FREE_NATS,
        num_reward_bins=BINS,
    )
    loss.set_keys(pixels="observation", reco_pixels="reco_observation")
    return loss


def sequences(seed: int = 3) -> dict:
    """16 replayed sequences x 64 steps; episode starts at step 0 and where a terminal step ended one."""
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(B, T, generator=g) < 0.01
    is_init = torch.zeros(B, T, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[:, 1:] = terminated[:, :-1]
    return {
        "observation": torch.randn(B, T, OBS, generator=g),
        "action": torch.rand(B, T, ACT, generator=g) * 2 - 1,
        "reward": torch.randn(B, T, generator=g),
        "terminated": terminated,
        "is_init": is_init,
    }


def batch(m: NS, d: dict) -> object:
    ex = (lambda x: x.unsqueeze(-1)) if m.trailing else (lambda x: x)
    return m.TensorDict(
        {
            "state": torch.zeros(B, T, STOCH),
            "belief": torch.zeros(B, T, BELIEF),
            "action": d["action"].clone(),
            "is_init": ex(d["is_init"].clone()),
            "next": {
                "observation": d["observation"].clone(),
                "reward": ex(d["reward"].clone()),
                "terminated": ex(d["terminated"].clone()),
            },
        },
        batch_size=[B, T],
    )


# ----------------------------------------------------------------------------- cross-checks
def check_equivalence(recurrent: str) -> str:
    """Same weights -> same deterministic outputs and same loss values; returns a one-line verdict."""
    assert OURS is not None and TORCHRL is not None
    ours, theirs = build_nets(OURS, recurrent), build_nets(TORCHRL, recurrent)
    copy_weights(ours, theirs)
    g = torch.Generator().manual_seed(11)
    n = 8
    obs, act = torch.randn(n, OBS, generator=g), torch.rand(n, ACT, generator=g) * 2 - 1
    state = F.one_hot(torch.randint(CLASSES, (n, CATS), generator=g), CLASSES).float().flatten(-2)
    belief, feat = torch.randn(n, BELIEF, generator=g), torch.randn(n, FEAT, generator=g)
    worst = 0.0
    with torch.no_grad():
        pairs = [(ours.encoder(obs), theirs.encoder(obs))]
        for name in ("decoder", "reward", "cont"):
            pairs.append((getattr(ours, name)(feat), getattr(theirs, name)(feat)))
        (lo, _, bo), (lt, _, bt) = ours.prior(state, belief, act), theirs.prior(state, belief, act)
        pairs += [(lo, lt), (bo, bt)]
        emb = ours.encoder(obs)
        pairs.append((ours.posterior(belief, emb)[0], theirs.posterior(belief, emb)[0]))
    for a, b in pairs:
        if a.shape != b.shape:
            raise AssertionError(f"{recurrent}: shapes differ {list(a.shape)} vs {list(b.shape)}")
        worst = max(worst, (a - b).abs().max().item())
    if worst > 1e-5:
        raise AssertionError(f"{recurrent}: module outputs differ by {worst:.2e}")

    # the losses on one world-model output (TorchRL's rollout, replayed to both losses)
    d = sequences()
    torch.manual_seed(5)
    with torch.no_grad():
        produced = world_model(TORCHRL, theirs)(batch(TORCHRL, d).copy())
    keys = ["prior_logits", "posterior_logits", "reco_observation", "reward_logits", "continue_pred"]
    outputs = {k: produced["next", k] for k in keys}
    values = {}
    for m in (OURS, TORCHRL):
        replay = _Replay(outputs)
        losses, _ = make_loss(m, replay)(batch(m, d))
        values[m.name] = {k: float(v) for k, v in losses.items()}
    if values["ours"].keys() != values["torchrl"].keys():
        raise AssertionError(f"{recurrent}: loss terms differ: {sorted(values['ours'])} vs {sorted(values['torchrl'])}")
    gap = max(
        abs(values["ours"][k] - values["torchrl"][k]) / max(1.0, abs(values["torchrl"][k])) for k in values["ours"]
    )
    if gap > 1e-5:
        raise AssertionError(f"{recurrent}: loss values differ: {values}")
    return f"{recurrent}: module outputs within {worst:.1e}, loss terms within {gap:.1e} ({len(values['ours'])} terms)"


class _Replay(torch.nn.Module):
    """A stand-in world model writing fixed outputs (to compare the two losses on the same values)."""

    def __init__(self, outputs: dict) -> None:
        super().__init__()
        self.outputs = outputs

    def forward(self, td):
        for k, v in self.outputs.items():
            td.set(("next", k), v)
        return td


# ----------------------------------------------------------------------------- workloads
def s_update(recurrent: str):
    def setup(impl: Impl) -> NS:
        m = impl.TensorDict
        nets = build_nets(OURS or TORCHRL, recurrent)  # type: ignore[arg-type]
        if m is None:
            return NS(nets=nets, d=sequences(), recurrent=recurrent)
        if m is not OURS:
            mine = nets
            nets = build_nets(m, recurrent)
            copy_weights(mine, nets)
        loss = make_loss(m, world_model(m, nets))
        return NS(loss=loss, td=batch(m, sequences()), params=list(loss.parameters()))

    return setup


def loss_step(c: NS):
    """One world-model loss evaluation and backward pass."""

    def run():
        for p in c.params:
            p.grad = None
        losses, _ = c.loss(c.td.copy())
        total = sum(v for k, v in losses.items() if k.startswith("loss_"))
        total.backward()
        return {k: v.detach() for k, v in losses.items()}

    return run


# ----------------------------------------------------------------------------- the floor
def _symlog(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.log1p(x.abs())


def _mlp(layers: list, x: torch.Tensor) -> torch.Tensor:
    """Hidden layers ``(weight, bias, norm weight or None)``: linear, RMS norm (where there is one),
    SiLU; then the output layer ``(weight, bias)`` unless it is None."""
    for w, b, nw in layers[:-1]:
        x = F.linear(x, w, b)
        x = F.silu(x if nw is None else F.rms_norm(x, (w.shape[0],), nw, 1e-4))
    return x if layers[-1] is None else F.linear(x, *layers[-1])


def _mlp_params(seq) -> list:
    """The parameters of a (linear, [RMS norm], SiLU)* [linear] stack, as ``_mlp`` takes them."""
    mods, hidden, i = list(seq), [], 0
    while i + 1 < len(mods) and isinstance(mods[i], torch.nn.Linear):
        norm = mods[i + 1] if not isinstance(mods[i + 1], torch.nn.SiLU) else None
        hidden.append((mods[i].weight, mods[i].bias, None if norm is None else norm.weight))
        i += 2 if norm is None else 3
    out = (mods[i].weight, mods[i].bias) if i < len(mods) else None
    return [*hidden, out]


def _draw(logits: torch.Tensor) -> torch.Tensor:
    probs = torch.softmax(logits, -1) * (1 - UNIMIX) + UNIMIX / CLASSES
    cdf = probs.detach().cumsum(-1)  # inverse-CDF draw, one uniform per categorical
    index = (cdf / cdf[..., -1:] <= torch.rand(*cdf.shape[:-1], 1)).sum(-1)
    return (F.one_hot(index, CLASSES).to(probs.dtype) + probs - probs.detach()).flatten(-2)


def plain_update(c: NS):
    """The update written out on tensors (same sizes and weights as the libraries' models)."""
    n = c.nets
    enc, dec, rew, cont = (_mlp_params(getattr(n, k).model) for k in ("encoder", "decoder", "reward", "cont"))
    prior, post = n.prior, n.posterior
    block = c.recurrent == "block_gru"
    head = _mlp_params(prior.rnn_to_prior_projector)
    post_head = _mlp_params(post.obs_rnn_to_post_projector)
    if block:
        gru = prior.rnn
        ins = [_mlp_params(s)[:-1] for s in (gru.belief_in, gru.state_in, gru.action_in)]
        hid = [
            (lin.weight, lin.bias, norm.weight) for lin, norm in zip(gru.hidden[0::3], gru.hidden[1::3], strict=True)
        ]
        gates = (gru.gates.weight, gru.gates.bias)
    else:
        proj = (prior.action_state_projector[0].weight, prior.action_state_projector[0].bias)
        cell = prior.rnn
    params = [p for k in vars(n) for p in getattr(n, k).parameters()]
    d = c.d
    obs, action, reward = d["observation"], d["action"], d["reward"]
    keep = (~d["is_init"]).float()
    bins = _bins()
    nb = 8

    def block_linear(x, w, bias):
        y = torch.einsum("...bi,bio->...bo", x.reshape(*x.shape[:-1], nb, -1), w)
        return y.flatten(-2) + bias

    def gru_step(state, belief, a):
        if not block:
            x = F.silu(F.linear(torch.cat([state, a], -1), *proj))
            return cell(x, belief)
        a = a / a.detach().abs().clamp_min(1.0)
        feats = torch.cat([_mlp([*p, None], v) for p, v in zip(ins, (belief, state, a), strict=True)], -1)
        size = BELIEF // nb
        x = torch.cat([belief.reshape(-1, nb, size), feats.unsqueeze(-2).expand(-1, nb, -1)], -1).flatten(-2)
        for w, bias, nw in hid:
            x = F.silu(F.rms_norm(block_linear(x, w, bias), (BELIEF,), nw, 1e-4))
        r, cand, u = block_linear(x, *gates).reshape(-1, nb, 3, size).unbind(-2)
        r, u = torch.sigmoid(r.flatten(-2)), torch.sigmoid(u.flatten(-2) - 1.0)
        return u * torch.tanh(r * cand.flatten(-2)) + (1 - u) * belief

    def run():
        for p in params:
            p.grad = None
        emb = _mlp(enc, obs)
        state, belief = torch.zeros(B, STOCH), torch.zeros(B, BELIEF)
        priors, posts, states, beliefs = [], [], [], []
        for t in range(T):
            k = keep[:, t, None]
            state, belief = state * k, belief * k
            belief = gru_step(state, belief, action[:, t] * k)
            prior_logits = _mlp(head, belief).unflatten(-1, (CATS, CLASSES))
            _draw(prior_logits)  # the prior's draw (its state is replaced by the posterior's)
            post_logits = _mlp(post_head, torch.cat([belief, emb[:, t]], -1)).unflatten(-1, (CATS, CLASSES))
            state = _draw(post_logits)
            priors.append(prior_logits), posts.append(post_logits), states.append(state), beliefs.append(belief)
        prior_logits, post_logits = torch.stack(priors, 1), torch.stack(posts, 1)
        feat = torch.cat([torch.stack(states, 1), torch.stack(beliefs, 1)], -1)
        q = torch.softmax(post_logits, -1) * (1 - UNIMIX) + UNIMIX / CLASSES
        p = torch.softmax(prior_logits, -1) * (1 - UNIMIX) + UNIMIX / CLASSES
        lq, lp = q.log(), p.log()
        dyn = (q.detach() * (lq.detach() - lp)).sum((-2, -1)).clamp_min(FREE_NATS).mean()
        rep = (q * (lq - lp.detach())).sum((-2, -1)).clamp_min(FREE_NATS).mean()
        reco = (_symlog(obs) - _symlog(_mlp(dec, feat))).square().sum(-1).mean()
        logits = _mlp(rew, feat)
        r = reward.clamp(bins[0], bins[-1])
        lo = (torch.searchsorted(bins, r.contiguous(), right=True) - 1).clamp(0, BINS - 2)
        w_hi = (r - bins[lo]) / (bins[lo + 1] - bins[lo])
        log_p = torch.log_softmax(logits, -1)
        reward_loss = (
            -(log_p.gather(-1, lo[..., None]).squeeze(-1) * (1 - w_hi)).mean()
            - (log_p.gather(-1, (lo + 1)[..., None]).squeeze(-1) * w_hi).mean()
        )
        target = (~d["terminated"]).float()
        cont_loss = F.binary_cross_entropy_with_logits(_mlp(cont, feat).squeeze(-1), target)
        out = {
            "loss_model_dynamic": L_DYN * dyn,
            "loss_model_representation": L_REP * rep,
            "loss_model_reco": reco,
            "loss_model_reward": reward_loss,
            "loss_model_continue": cont_loss,
        }
        sum(out.values()).backward()
        return {k: v.detach().reshape(1) for k, v in out.items()}

    return run


def _bins() -> torch.Tensor:
    half = torch.linspace(-20.0, 20.0, BINS, dtype=torch.float64)[: BINS // 2]
    half = torch.sign(half) * torch.expm1(half.abs())
    return torch.cat([half, torch.zeros(1, dtype=torch.float64), -half.flip(0)]).float()


def finite_terms(ctx: NS, out) -> dict:
    """What is compared across implementations: the loss terms' names, each finite and of shape [1]."""
    return {k: bool(v.shape == (1,) and torch.isfinite(v).all()) for k, v in dict(out.items()).items()}


# fmt: off
WORKLOADS = [
    Workload("DreamerV3ModelLoss fwd+bwd, 16 x 64, gru", "loss", s_update("gru"),
             td=loss_step, plain=plain_update, observe=finite_terms,
             note="TorchRL's default recurrent core (projection + GRUCell), plain MLP prior/posterior heads"),
    Workload("DreamerV3ModelLoss fwd+bwd, 16 x 64, block_gru", "loss", s_update("block_gru"),
             td=loss_step, plain=plain_update, observe=finite_terms,
             note="DreamerV3's block GRU (8 blocks), RMS-normalised prior and posterior heads"),
]
# fmt: on


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "dreamer.json"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--filter", default="", help="run only workloads whose name contains this text")
    args = ap.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(1)
    cfg = run_config(args.quick)
    impls = load_impls()
    versions = module_versions("torch", "torchrl", "tensordict", "rl_objectives")
    header = (
        f"{', '.join(f'{k} {v}' for k, v in versions.items())}; python {platform.python_version()}; "
        f"{torch.get_num_threads()} thread(s); batch {B} x {T} steps, obs {OBS}, action {ACT}, latents "
        f"{CATS}x{CLASSES}, belief {BELIEF}, hidden {HIDDEN}, MLPs {DEPTH}x{WIDTH}, {BINS} reward bins"
    )
    print(header + "\n", flush=True)
    workloads = [w for w in WORKLOADS if args.filter in w.name]
    checks = []
    if OURS is not None and TORCHRL is not None:
        for w in workloads:
            recurrent = w.name.rsplit(", ", 1)[-1]
            checks.append(check_equivalence(recurrent))
            print("check: " + checks[-1], flush=True)
    results = run_all(workloads, impls, cfg, reference="plain")
    cmp = Comparison(
        "ours",
        "torchrl",
        "plain",
        {"ours": "ours", "torchrl": "torchrl", "plain": "hand-written"},
        max_over_floor=float("inf"),
        min_geomean_speedup=None,
    )
    rows, summary = summarize(results, cmp)
    for row in rows:
        s = row["speedup_vs_peer"]
        row["ours_over_torchrl"] = 1 / s if s else None
        if s and 1 / s > 0.7:
            row["flags"].append(f"ours/torchrl {1 / s:.2f}x > 0.7x (target)")
    table = render(rows, summary, cmp)
    table += "\n\nours/torchrl (target <= 0.70x): " + ", ".join(
        f"{r['name'].rsplit(', ', 1)[-1]} {r['ours_over_torchrl']:.2f}x" for r in rows if r["ours_over_torchrl"]
    )
    table += "\n" + "\n".join("check: " + c for c in checks)
    print("\n" + table)
    report = {
        "benchmark": "dreamer",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": {
            "versions": versions,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "torch_num_threads": torch.get_num_threads(),
        },
        "sizes": {
            "batch": B,
            "steps": T,
            "observation": OBS,
            "action": ACT,
            "num_categoricals": CATS,
            "num_classes": CLASSES,
            "belief": BELIEF,
            "hidden": HIDDEN,
            "mlp_depth": DEPTH,
            "mlp_width": WIDTH,
            "reward_bins": BINS,
        },
        "method": {"samples": cfg.samples, "target_sample_s": cfg.target_sample_s, "warmup_s": cfg.warmup_s},
        "checks": checks,
        "summary": summary,
        "workloads": rows,
    }
    write_report(args.out, report, table=header + "\n\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
