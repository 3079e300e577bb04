"""Environment throughput: ``rl_envs`` vs TorchRL 0.14's ``torchrl.envs`` vs a floor without a container.

Usage::

    python benchmarks/bench_envs.py [--quick] [--out PATH] [--threads N] [--filter SUBSTR,...] [--list]

Same method as ``bench_tdict.py`` (one process, interleaved rounds, paired medians, 1 thread by
default). One call of every workload is a 1000-step rollout (``break_when_any_done=False``: done
sub-envs are reset, so every implementation runs exactly 1000 steps per env, which is cross-checked).

Workloads (issue 4's targets in brackets):

- ``PendulumEnv`` rollout at batch ``[]`` and ``[64]``; peer: ``torchrl.envs.PendulumEnv`` (at ``[64]``
  fed ``env.gen_params(batch_size=[64])``, as TorchRL's stateless pendulum needs); floor: the same
  dynamics written as a plain torch loop [ours >= 5x torchrl at ``[]``, >= 2x at ``[64]``].
- ``GymEnv("Pendulum-v1")`` and ``TransformedEnv(GymEnv("HalfCheetah-v5"), StepCounter())`` rollouts; peer:
  TorchRL's ``GymEnv``; floor: a raw gymnasium loop (``env.step(env.action_space.sample())``, reset
  when terminated or truncated) [ours >= 0.75x the raw loop's steps/s, i.e. ours/floor <= 1.33x].
- The per-step cost of ``Compose(StepCounter(), RewardSum(), DoubleToFloat())`` on ``PendulumEnv``;
  peer: the same chain in TorchRL; floor: the bare ``PendulumEnv`` rollout [at most 15 µs per step
  over the bare env].
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import warnings
from pathlib import Path
from types import SimpleNamespace as NS

import torch

from _harness import (
    import_ours,
    Comparison,
    Impl,
    Workload,
    machine_info,
    render,
    run_all,
    run_config,
    summarize,
    write_report,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STEPS = 1000
BATCH = 64
OVERHEAD_TARGET_US = 15.0


def _import_ours():
    return import_ours("rl_envs")[0]


def load() -> list[Impl]:
    impls = [Impl("ours", "rl_envs", "td", wrap=None, TensorDict=_import_ours(), version=_import_ours().__version__)]
    try:
        import torchrl
        import torchrl.envs

        impls.append(Impl("torchrl", "torchrl", "td", wrap=None, TensorDict=torchrl.envs, version=torchrl.__version__))
    except ImportError as e:
        print(f"note: skipping torchrl ({e})")
    impls.append(Impl("plain", "floor", "plain", wrap=None))
    return impls


def _steps(out) -> int:
    """Env steps taken by one call: a rollout's batch numel, or the count a raw loop returns."""
    return int(out) if isinstance(out, int) else int(out.batch_size.numel())


def _observe(ctx: NS, out) -> int:
    return _steps(out)


def _rollout(env, **kwargs):
    def op():
        return env.rollout(STEPS, break_when_any_done=False, **kwargs)

    return op


# ----------------------------------------------------------------------------- floors
def _pendulum_loop(batch: tuple):
    """Pendulum-v1 dynamics as a plain torch loop: random torque, no container, no reset (no time limit)."""
    gen = torch.Generator().manual_seed(0)
    max_speed, max_torque, dt_, g, m, l = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0  # noqa: E741

    def op() -> int:
        th = torch.empty(batch).uniform_(-math.pi, math.pi, generator=gen)
        thdot = torch.empty(batch).uniform_(-1.0, 1.0, generator=gen)
        for _ in range(STEPS):
            u = torch.empty(batch).uniform_(-max_torque, max_torque, generator=gen)
            norm = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
            reward = -(norm * norm + 0.1 * thdot * thdot + 0.001 * u * u)  # noqa: F841 (computed as the envs do)
            thdot = (thdot + (3 * g / (2 * l) * torch.sin(th) + 3.0 / (m * l * l) * u) * dt_).clamp(
                -max_speed, max_speed
            )
            th = th + thdot * dt_
            obs = torch.stack([th.cos(), th.sin(), thdot], -1)  # noqa: F841
        return STEPS * max(1, math.prod(batch))

    return op


def _gym_loop(env_id: str):
    import gymnasium as gym

    env = gym.make(env_id)
    env.reset(seed=0)
    env.action_space.seed(0)

    def op() -> int:
        for _ in range(STEPS):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
        return STEPS

    return NS(op=op, close=env.close)


# ----------------------------------------------------------------------------- setups
def s_pendulum(batch: tuple):
    def setup(impl: Impl) -> NS:
        if impl.name == "plain":
            return NS(op=_pendulum_loop(batch))
        torch.manual_seed(0)
        if impl.name == "ours":
            return NS(op=_rollout(impl.TensorDict.PendulumEnv(batch_size=list(batch), seed=0)))
        env = impl.TensorDict.PendulumEnv()
        env.set_seed(0)
        if not batch:
            return NS(op=_rollout(env))
        params = env.gen_params(batch_size=list(batch))
        return NS(op=_rollout(env, tensordict=params, auto_reset=True))

    return setup


def s_gym(env_id: str, step_counter: bool):
    def setup(impl: Impl) -> NS:
        if impl.name == "plain":
            return _gym_loop(env_id)
        lib = impl.TensorDict
        env = lib.GymEnv(env_id)
        env.set_seed(0)
        if step_counter:
            env = lib.TransformedEnv(env, lib.StepCounter())
        torch.manual_seed(0)
        return NS(op=_rollout(env), close=env.close)

    return setup


def s_transformed(impl: Impl) -> NS:
    torch.manual_seed(0)
    if impl.name == "plain":  # the floor: ours, bare
        return NS(op=_rollout(_import_ours().PendulumEnv(seed=0)))
    lib = impl.TensorDict
    base = lib.PendulumEnv(seed=0) if impl.name == "ours" else lib.PendulumEnv()
    env = lib.TransformedEnv(base, lib.Compose(lib.StepCounter(), lib.RewardSum(), lib.DoubleToFloat()))
    env.set_seed(0)
    return NS(op=_rollout(env))


def _teardown(ctx: NS) -> None:
    close = getattr(ctx, "close", None)
    if close is not None:
        close()


def _w(name: str, group: str, setup, note: str) -> Workload:
    return Workload(
        name, group, setup, td=lambda c: c.op, plain=lambda c: c.op, note=note, observe=_observe, teardown=_teardown
    )


PENDULUM_1 = f"PendulumEnv rollout({STEPS}), batch []"
PENDULUM_N = f"PendulumEnv rollout({STEPS}), batch [{BATCH}]"
GYM_PENDULUM = f'GymEnv("Pendulum-v1") rollout({STEPS})'
GYM_CHEETAH = f'GymEnv("HalfCheetah-v5")+StepCounter rollout({STEPS})'
TRANSFORMED = f"PendulumEnv+StepCounter+RewardSum+DoubleToFloat rollout({STEPS})"

# fmt: off
WORKLOADS = [
    _w(PENDULUM_1, "native", s_pendulum(()), "floor: the dynamics as a plain torch loop"),
    _w(PENDULUM_N, "native", s_pendulum((BATCH,)), "torchrl: PendulumEnv + gen_params(batch_size=[64]); floor: plain torch loop"),
    _w(GYM_PENDULUM, "gymnasium", s_gym("Pendulum-v1", False), "floor: raw gymnasium loop with random actions"),
    _w(GYM_CHEETAH, "gymnasium", s_gym("HalfCheetah-v5", True), "floor: raw gymnasium loop (mujoco)"),
    _w(TRANSFORMED, "transforms", s_transformed, "floor: bare rl_envs PendulumEnv (the transforms' cost)"),
]
# fmt: on


def targets(rows: list[dict]) -> tuple[dict, dict]:
    """Issue 4's performance targets, from the paired ratios and medians."""
    by = {r["name"]: r for r in rows}
    derived: dict = {}
    checks: dict = {}

    def speedup(name):
        return by[name]["speedup_vs_peer"] if name in by else None

    def over_floor(name):
        return by[name]["ours_over_floor"] if name in by else None

    for name, need in ((PENDULUM_1, 5.0), (PENDULUM_N, 2.0)):
        s = speedup(name)
        derived[f"{name}: speed-up vs torchrl"] = s
        checks[f"{name}: >= {need:g}x torchrl"] = s is not None and s >= need
    for name in (GYM_PENDULUM, GYM_CHEETAH):
        o = over_floor(name)
        frac = None if o is None else 1.0 / o
        derived[f"{name}: steps/s as a fraction of the raw gymnasium loop"] = frac
        p = by.get(name, {}).get("peer_over_floor")
        derived[f"{name}: torchrl steps/s as a fraction of the raw loop"] = None if p is None else 1.0 / p
        checks[f"{name}: >= 0.75x the raw gymnasium loop's steps/s"] = frac is not None and frac >= 0.75
    if TRANSFORMED in by:
        med = by[TRANSFORMED]["median_us"]
        ours = None if med["ours"] is None or med["plain"] is None else (med["ours"] - med["plain"]) / STEPS
        peer = None if med["torchrl"] is None or med["plain"] is None else (med["torchrl"] - med["plain"]) / STEPS
        derived["transforms: µs per step over the bare env (ours)"] = ours
        derived["transforms: µs per step over our bare env (torchrl's chain, for reference)"] = peer
        checks[f"transforms: <= {OVERHEAD_TARGET_US:g} µs per step"] = ours is not None and ours <= OVERHEAD_TARGET_US
    return derived, checks


def environment(impls: list[Impl]) -> dict:
    return machine_info(impls, "gymnasium", "mujoco", "tensordict", "tdict")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples (about a minute)")
    ap.add_argument("--out", default=str(HERE / "results" / "envs.json"))
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1; 0 = torch's default)")
    ap.add_argument("--samples", type=int, help="samples per workload and implementation (overrides the mode)")
    ap.add_argument("--filter", default="", help="comma-separated substrings of workload names (case-insensitive)")
    ap.add_argument("--list", action="store_true", help="print the workload names and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(w.name for w in WORKLOADS))
        return 0
    if args.threads > 0:
        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(1)
    warnings.filterwarnings("ignore")  # gymnasium/torchrl deprecation chatter would drown the table
    # a 1000-step rollout takes tens of ms: fewer samples than the µs-scale benchmarks still give stable medians
    cfg = run_config(args.quick, args.samples or (5 if args.quick else 15))
    wanted = [s.strip().lower() for s in args.filter.split(",") if s.strip()]
    workloads = [w for w in WORKLOADS if not wanted or any(s in w.name.lower() for s in wanted)]
    impls = load()
    env = environment(impls)
    print(
        f"torch {env['torch']}; {torch.get_num_threads()} thread(s); "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items())
        + "\n",
        flush=True,
    )
    results = run_all(workloads, impls, cfg, reference="plain")
    cmp = Comparison(
        "ours",
        "torchrl",
        "plain",
        {"ours": "rl_envs", "torchrl": "torchrl", "plain": "floor"},
        max_over_floor=float("inf"),
    )
    rows, summary = summarize(results, cmp)
    table = render(rows, summary, cmp)
    derived, checks = targets(rows)
    lines = [table, "", f"per step (µs), {STEPS} steps per call:"]
    for r in rows:
        per = {k: (None if v is None else v / STEPS) for k, v in r["median_us"].items()}
        n = BATCH if r["name"] == PENDULUM_N else 1
        cells = ", ".join(f"{cmp.labels[k]} {'—' if v is None else f'{v:.2f}'}" for k, v in per.items())
        lines.append(f"  {r['name']}: {cells}" + (f" (per step of {n} envs)" if n > 1 else ""))
    lines.append("")
    for name, value in derived.items():
        lines.append(f"  {name}: {'—' if value is None else f'{value:.2f}'}")
    for name, ok in checks.items():
        lines.append(f"  {'met' if ok else 'NOT MET'}: {name}")
    text = "\n".join(lines)
    print("\n" + text)
    report = {
        "benchmark": "envs",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": env,
        "steps_per_call": STEPS,
        "method": {"samples": cfg.samples, "target_sample_s": cfg.target_sample_s, "warmup_s": cfg.warmup_s},
        "derived": derived,
        "targets_met": checks,
        "summary": summary,
        "workloads": rows,
    }
    write_report(args.out, report, table=text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
