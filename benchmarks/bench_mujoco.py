"""Native batched MuJoCo: ``rl_envs.HalfCheetahEnv(num_envs=N)`` vs Gymnasium's vector env and EnvPool.

Usage::

    python benchmarks/bench_mujoco.py [--num-envs 64] [--threads 1,2] [--rounds 15] [--quick] [--out PATH]

Each sample steps the batch ``STEPS`` times with pre-drawn random actions, auto-resetting episodes
that end (ours: ``step_and_maybe_reset``, the collectors' loop, TensorDicts in and out; Gymnasium's
``SyncVectorEnv(N)`` over ``HalfCheetah-v5``: its own loop, one thread by design; EnvPool's
``HalfCheetah-v5`` with ``num_threads`` workers: its C++ thread pool). Rounds interleave the
implementations (the order rotates); figures are medians of steps/s and of per-round ratios.
One torch thread; ours steps its simulations on ``num_threads`` threads, as EnvPool.

The one-thread rows add the floor: MuJoCo's ``mj_step`` alone (the task's 5 physics steps per env
step) over the same 64 ``MjData`` in a plain loop, no observation, reward or reset. No one-thread
implementation of the same physics runs faster than that.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
TASK = "HalfCheetah-v5"


def make_ours(n: int, threads: int):
    from rl_envs import HalfCheetahEnv

    env = HalfCheetahEnv(num_envs=n, seed=0, num_threads=threads)
    actions = torch.rand(64, n, 6, generator=torch.Generator().manual_seed(0)) * 2 - 1
    state = {"td": env.reset()}

    def run(steps: int) -> None:
        td = state["td"]
        for t in range(steps):
            _, td = env.step_and_maybe_reset(td.set("action", actions[t % 64]))
        state["td"] = td

    return run, env.close


def make_floor(n: int):
    import mujoco
    from rl_envs import HalfCheetahEnv

    env = HalfCheetahEnv(num_envs=1)
    model, frame_skip = env.model, env.frame_skip
    data = [mujoco.MjData(model) for _ in range(n)]
    for d in data:
        mujoco.mj_forward(model, d)
    actions = np.random.default_rng(0).uniform(-1, 1, (64, n, 6))

    def run(steps: int) -> None:
        for t in range(steps):
            row = actions[t % 64]
            for i, d in enumerate(data):
                d.ctrl[:] = row[i]
                mujoco.mj_step(model, d, frame_skip)

    return run, env.close


def make_gym(n: int):
    import gymnasium as gym

    envs = gym.vector.SyncVectorEnv([lambda: gym.make(TASK) for _ in range(n)])
    envs.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (64, n, 6)).astype(np.float32)

    def run(steps: int) -> None:
        for t in range(steps):
            envs.step(actions[t % 64])

    return run, envs.close


def make_envpool(n: int, threads: int):
    import envpool

    envs = envpool.make(TASK, env_type="gymnasium", num_envs=n, batch_size=n, num_threads=threads, seed=0)
    envs.reset()
    actions = np.random.default_rng(0).uniform(-1, 1, (64, n, 6)).astype(np.float32)

    def run(steps: int) -> None:
        for t in range(steps):
            envs.step(actions[t % 64])

    return run, envs.close


def measure(impls: dict, n: int, steps: int, rounds: int) -> dict[str, list[float]]:
    for run, _ in impls.values():
        run(steps)  # warm-up
    rates: dict[str, list[float]] = {name: [] for name in impls}
    names = list(impls)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            run = impls[name][0]
            start = time.perf_counter()
            run(steps)
            rates[name].append(n * steps / (time.perf_counter() - start))
    return rates


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-envs", type=int, default=64)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="3 rounds of 10 steps")
    ap.add_argument("--out", default=str(HERE / "results" / "mujoco.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rounds, steps = (3, 10) if args.quick else (args.rounds, args.steps)
    n = args.num_envs
    versions = {}
    for module in ("torch", "mujoco", "gymnasium", "envpool"):
        try:
            versions[module] = __import__(module).__version__
        except ImportError:
            versions[module] = None
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        impls = {"ours": make_ours(n, threads), "gymnasium SyncVectorEnv": make_gym(n)}
        if versions["envpool"] is not None:
            impls["envpool"] = make_envpool(n, threads)
        if threads == 1:
            impls["mj_step floor"] = make_floor(n)
        rates = measure(impls, n, steps, rounds)
        row = {"threads": threads, "num_envs": n, "steps_per_s": {k: statistics.median(v) for k, v in rates.items()}}
        row["ours_over"] = {
            k: statistics.median(o / p for o, p in zip(rates["ours"], v)) for k, v in rates.items() if k != "ours"
        }
        rows.append(row)
        for _, close in impls.values():
            close()
        print(
            f"{TASK} x {n}, {threads} thread(s): "
            + ", ".join(f"{k} {v:,.0f} steps/s" for k, v in row["steps_per_s"].items())
            + "; ours / "
            + ", ours / ".join(f"{k} {v:.2f}x" for k, v in row["ours_over"].items()),
            flush=True,
        )
    report = {
        "benchmark": "mujoco",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "python benchmarks/bench_mujoco.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "environment": {"versions": versions, "python": platform.python_version(), "platform": platform.platform()},
        "method": {"rounds": rounds, "steps_per_sample": steps},
        "rows": rows,
    }
    if not args.quick:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
