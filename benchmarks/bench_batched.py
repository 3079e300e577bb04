"""Batched envs: ``rl_envs`` SerialEnv/ParallelEnv vs TorchRL 0.14's vs Gymnasium's vector envs.

Usage::

    python benchmarks/bench_batched.py [--quick] [--out PATH]

Same method as the other scripts (one process, interleaved rounds, paired medians, 1 torch thread
in the parent). Each call is a 200-step rollout with random actions: of 4 Pendulum envs (ours and
TorchRL's run their native ``PendulumEnv`` in each worker), of 8 ``GymEnv("CartPole-v1")`` in a
``SerialEnv`` and of 2 ``GymEnv("HalfCheetah-v5")`` in a ``ParallelEnv``. The floor is Gymnasium's
``SyncVectorEnv`` / ``AsyncVectorEnv`` over the same envs stepped in a plain loop (the cost of the
vector env alone, no TensorDict).
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace as NS

import torch

from _harness import Comparison, Impl, Workload, module_versions, render, run_all, run_config, summarize, write_report

HERE = Path(__file__).resolve().parent
WORKERS, STEPS = 4, 200


def _ours() -> NS | None:
    try:
        from rl_envs import GymEnv, ParallelEnv, PendulumEnv, SerialEnv
    except Exception as e:  # noqa: BLE001
        print(f"note: skipping ours ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    return NS(ParallelEnv=ParallelEnv, SerialEnv=SerialEnv, PendulumEnv=PendulumEnv, GymEnv=GymEnv)


def _torchrl() -> NS | None:
    try:
        from torchrl.envs import GymEnv, ParallelEnv, PendulumEnv, SerialEnv
    except Exception as e:  # noqa: BLE001
        print(f"note: skipping torchrl ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    return NS(ParallelEnv=ParallelEnv, SerialEnv=SerialEnv, PendulumEnv=PendulumEnv, GymEnv=GymEnv)


def load_impls() -> list[Impl]:
    impls = [
        Impl(name, name, "td", wrap=lambda d, bs, m=m: m, TensorDict=m)
        for name, m in (("ours", _ours()), ("torchrl", _torchrl()))
        if m is not None
    ]
    impls.append(Impl("plain", "gymnasium vector env", "plain", wrap=lambda d, bs: None))
    return impls


class _GymMaker:
    """A picklable ``lambda: GymEnv(env_id)`` of one library (ParallelEnv sends it to its workers)."""

    def __init__(self, gym_env: type, env_id: str) -> None:
        self.gym_env, self.env_id = gym_env, env_id

    def __call__(self) -> object:
        return self.gym_env(self.env_id)


def s_batched(kind: str, workers: int = WORKERS, env_id: str | None = None):
    """``kind`` (SerialEnv / ParallelEnv) of ``workers`` native Pendulums, or of ``GymEnv(env_id)``."""

    def setup(impl: Impl) -> NS:
        if impl.kind == "plain":
            import gymnasium as gym

            vector = gym.vector.AsyncVectorEnv if kind == "ParallelEnv" else gym.vector.SyncVectorEnv
            envs = vector([lambda: gym.make(env_id or "Pendulum-v1") for _ in range(workers)])
            envs.reset(seed=0)
            envs.action_space.seed(0)
            return NS(envs=envs)
        m = impl.TensorDict
        make = m.PendulumEnv if env_id is None else _GymMaker(m.GymEnv, env_id)
        env = getattr(m, kind)(workers, make)
        env.set_seed(0)
        env.rollout(2)  # workers started
        return NS(env=env)

    return setup


def td_rollout(c: NS):
    return lambda: c.env.rollout(STEPS, break_when_any_done=False)


def gym_loop(c: NS):
    def run():
        envs = c.envs
        for _ in range(STEPS):
            envs.step(envs.action_space.sample())

    return run


def close(c: NS) -> None:
    for name in ("env", "envs"):
        obj = getattr(c, name, None)
        if obj is not None:
            obj.close()


# fmt: off
WORKLOADS = [
    Workload(f"SerialEnv({WORKERS} x Pendulum).rollout({STEPS})", "batched", s_batched("SerialEnv"),
             td=td_rollout, plain=gym_loop, observe=lambda c, out: "ran", teardown=close,
             note="floor: gymnasium SyncVectorEnv(Pendulum-v1), random actions"),
    Workload(f"ParallelEnv({WORKERS} x Pendulum).rollout({STEPS})", "batched", s_batched("ParallelEnv"),
             td=td_rollout, plain=gym_loop, observe=lambda c, out: "ran", teardown=close,
             note="one process per worker; floor: gymnasium AsyncVectorEnv(Pendulum-v1), random actions"),
    Workload(f"SerialEnv(8 x GymEnv(CartPole-v1)).rollout({STEPS})", "batched", s_batched("SerialEnv", 8, "CartPole-v1"),
             td=td_rollout, plain=gym_loop, observe=lambda c, out: "ran", teardown=close,
             note="issue 16's target: >= 1.0x SyncVectorEnv(8); random actions, episodes end and reset"),
    Workload(f"ParallelEnv(2 x GymEnv(HalfCheetah-v5)).rollout({STEPS})", "batched",
             s_batched("ParallelEnv", 2, "HalfCheetah-v5"),
             td=td_rollout, plain=gym_loop, observe=lambda c, out: "ran", teardown=close,
             note="issue 16's target: >= 1.0x AsyncVectorEnv(2); random actions"),
]
# fmt: on


def startup_seconds(impl: Impl, repeats: int = 3) -> float:
    """Median time from ``ParallelEnv(2, GymEnv("HalfCheetah-v5"))`` to its first step done (target < 2 s)."""
    times = []
    for _ in range(repeats):
        m = impl.TensorDict
        start = time.perf_counter()
        env = m.ParallelEnv(2, _GymMaker(m.GymEnv, "HalfCheetah-v5"))
        env.rand_step(env.reset())
        times.append(time.perf_counter() - start)
        env.close()
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "batched.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = run_config(args.quick)
    impls = load_impls()
    versions = module_versions("torch", "torchrl", "gymnasium")
    header = f"{', '.join(f'{k} {v}' for k, v in versions.items())}; python {platform.python_version()}; 1 torch thread in the parent"
    print(header + "\n", flush=True)
    results = run_all(WORKLOADS, impls, cfg, reference="plain")
    cmp = Comparison(
        "ours",
        "torchrl",
        "plain",
        {"ours": "ours", "torchrl": "torchrl", "plain": "gymnasium vector env"},
        max_over_floor=float("inf"),
        min_geomean_speedup=None,
    )
    rows, summary = summarize(results, cmp)
    table = render(rows, summary, cmp)
    startup = {impl.name: startup_seconds(impl) for impl in impls if impl.kind == "td"}
    table += "\n\nParallelEnv(2 x GymEnv(HalfCheetah-v5)): construction to first step done, median of 3: " + ", ".join(
        f"{name} {seconds:.2f} s" for name, seconds in startup.items()
    )
    summary["parallel_startup_s"] = startup
    print("\n" + table)
    report = {
        "benchmark": "batched",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": {"versions": versions, "python": platform.python_version(), "platform": platform.platform()},
        "method": {"samples": cfg.samples, "target_sample_s": cfg.target_sample_s, "warmup_s": cfg.warmup_s},
        "summary": summary,
        "workloads": rows,
    }
    write_report(args.out, report, table=header + "\n\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
