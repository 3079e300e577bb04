"""RayCollector next to MultiSyncCollector: frames/s and per-batch latency on the 1 ms-per-step env.

Usage::

    python benchmarks/bench_collect_ray.py [--batches N] [--out PATH]

Ray binds to a non-loopback address unless it starts in a loopback-only network namespace, so the
script re-runs itself under ``unshare -n`` (with ``lo`` up) and starts a local Ray there; without
``unshare`` permission it says so and exits. Both collectors use 2 workers, the env of
``bench_collect.py`` whose step costs 1 ms of CPU and the same 2x64 MLP policy; one batch is 100
frames. Reported: median per-batch latency (time between two yields) and frames/s over the run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_collect  # noqa: E402  (the slow env and the policy of the collector benchmark)

WORKERS = 2
FRAMES = bench_collect.SLOW_FRAMES


def _time_batches(collector, batches: int) -> dict:
    it = iter(collector)
    next(it)  # warm-up: workers started, first batch out
    gaps, frames = [], 0
    start = last = time.perf_counter()
    for _ in range(batches):
        batch = next(it)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
        frames += batch.numel()
    total = time.perf_counter() - start
    return {"median_batch_ms": statistics.median(gaps) * 1e3, "frames_per_s": frames / total, "batches": batches}


def inner(batches: int, out: str) -> int:
    import ray
    import torch
    from rl_collect import MultiSyncCollector, RayCollector

    torch.set_num_threads(1)
    ray.cloudpickle.register_pickle_by_value(bench_collect)  # the env factory travels by value to the actors
    ray.init(num_cpus=WORKERS + 1, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    try:
        total = FRAMES * (batches + 2)
        factories = [bench_collect.make_slow_pendulum] * WORKERS
        multi = MultiSyncCollector(factories, bench_collect._our_policy(), frames_per_batch=FRAMES, total_frames=total)
        rows = {"MultiSyncCollector(2)": _time_batches(multi, batches)}
        multi.shutdown()
        ray_collector = RayCollector(
            bench_collect.make_slow_pendulum,
            bench_collect._our_policy(),
            frames_per_batch=FRAMES,
            total_frames=total,
            num_collectors=WORKERS,
        )
        rows["RayCollector(2)"] = _time_batches(ray_collector, batches)
        ray_collector.shutdown()
    finally:
        ray.shutdown()
    for name, row in rows.items():
        print(f"{name:24s} median batch {row['median_batch_ms']:8.2f} ms   {row['frames_per_s']:9.1f} frames/s")
    Path(out).write_text(json.dumps({"frames_per_batch": FRAMES, "workers": WORKERS, "results": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--out", default=str(HERE / "results" / "collect_ray.json"))
    args = ap.parse_args(argv)
    if os.environ.get("RL_COLLECT_RAY_NETNS") == "1":
        return inner(args.batches, args.out)
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode:
        print("skipped: `unshare -n` is not available here (Ray must run in a loopback-only namespace)")
        return 0
    cmd = f"ip link set lo up && exec {sys.executable} {Path(__file__).resolve()} --batches {args.batches} --out {args.out}"
    env = {**os.environ, "RL_COLLECT_RAY_NETNS": "1"}
    return subprocess.run(["unshare", "-n", "sh", "-c", cmd], env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
