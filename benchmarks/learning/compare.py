"""The learning benchmark: our recipes against Stable-Baselines3, run side by side, each on its own core.

For every task and seed, our run and SB3's run start at the same time, each pinned to its own
core with ``taskset`` and one torch thread (so that both see the same machine). Each records, at
every evaluation (10 episodes, deterministic), the frames, training CPU and wall-clock seconds so
far (evaluations excluded) and the mean return (run_ours.py, run_sb3.py). The table reports
medians over seeds: frames, CPU seconds and wall-clock seconds to the threshold (the first
evaluation at or above it; "-" when never reached), CPU time per frame over the whole run, the
final return, and our/SB3 ratios.

    hatch run bench:learning                       # every task, 3 seeds (about an hour)
    hatch run bench:learning --tasks sac-pendulum --seeds 0 --best
    hatch run bench:learning --tasks td3-pendulum --best --update   # rerun one task, keep the others' rows

``--best`` adds our recipe at its own preset per seed ("each library at its best", against SB3
with RL-zoo's settings), two seeds at a time after the task's pairs. Results: benchmarks/results/learning.json and
learning_table.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from settings import TASKS  # noqa: E402

RESULTS = HERE.parent / "results"


def _command(lib: str, task: str, seed: int, out: Path, frames: int | None = None) -> list[str]:
    script = HERE / ("run_sb3.py" if lib == "sb3" else "run_ours.py")
    extra = (["--best"] if lib == "ours-best" else []) + ([f"--frames={frames}"] if frames else [])
    return [sys.executable, str(script), task, "--seed", str(seed), "--out", str(out), *extra]


def run_pair(task: str, seed: int, libs: list[str], cores: list[int], frames: int | None = None) -> list[dict]:
    """Runs ``libs`` for one task and seed at the same time, one core each; returns their records."""
    return run_runs([(lib, task, seed) for lib in libs], cores, frames)


def run_runs(runs: list[tuple], cores: list[int], frames: int | None = None) -> list[dict]:
    """Runs ``(lib, task, seed)`` runs at the same time, one core each; returns their records."""
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for i, (lib, task, seed) in enumerate(runs):
            out = Path(tmp) / f"{lib}-{seed}.json"
            cmd = _command(lib, task, seed, out, frames)
            if cores:
                cmd = ["taskset", "-c", str(cores[i % len(cores)]), *cmd]
            env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            procs.append(
                (
                    (lib, task, seed),
                    out,
                    subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
                )
            )
        records = []
        for (lib, task, seed), out, proc in procs:
            text, _ = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"{lib} {task} seed {seed} failed:\n{text[-3000:]}")
            records.append(json.loads(out.read_text()))
        return records


def to_threshold(record: dict, threshold: float) -> dict | None:
    """The first evaluation at or above the threshold (its frames, CPU and wall seconds)."""
    return next((p for p in record["points"] if p["return"] >= threshold), None)


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarise(records: list[dict]) -> dict:
    """Per task and library: medians over seeds."""
    out: dict = {}
    for task_name, task in TASKS.items():
        for lib in sorted({r["lib"] for r in records if r["task"] == task_name}):
            runs = [r for r in records if r["task"] == task_name and r["lib"] == lib]
            hits = [to_threshold(r, task.threshold) for r in runs]
            out.setdefault(task_name, {})[lib] = {
                "seeds": [r["seed"] for r in runs],
                "reached": sum(h is not None for h in hits),
                "frames_to_threshold": _median([h and h["frames"] for h in hits]),
                "cpu_s_to_threshold": _median([h and h["cpu_s"] for h in hits]),
                "wall_s_to_threshold": _median([h and h["wall_s"] for h in hits]),
                "cpu_ms_per_frame": _median([1e3 * r["train_cpu_s"] / r["frames"] for r in runs]),
                "wall_s": _median([r["train_wall_s"] for r in runs]),
                "final_return": _median([r["final_return"] for r in runs]),
            }
    return out


def _fmt(value, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def _ratio(a, b) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def table(summary: dict) -> str:
    lines = [
        "| task | library | reached | frames to threshold | CPU s to threshold | wall s to threshold | CPU ms / frame | final return | "
        "frames ratio | CPU/frame ratio | wall-to-threshold ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task_name, libs in summary.items():
        sb3 = libs.get("sb3", {})
        for lib, s in libs.items():
            ours = lib != "sb3"
            lines.append(
                f"| {task_name} (>= {TASKS[task_name].threshold:g}) | {lib} | {s['reached']}/{len(s['seeds'])} | "
                f"{_fmt(s['frames_to_threshold'])} | {_fmt(s['cpu_s_to_threshold'], '.1f')} | {_fmt(s['wall_s_to_threshold'], '.1f')} | "
                f"{_fmt(s['cpu_ms_per_frame'], '.2f')} | {_fmt(s['final_return'], '.1f')} | "
                + (
                    f"{_ratio(s['frames_to_threshold'], sb3.get('frames_to_threshold'))} | "
                    f"{_ratio(s['cpu_ms_per_frame'], sb3.get('cpu_ms_per_frame'))} | "
                    f"{_ratio(s['wall_s_to_threshold'], sb3.get('wall_s_to_threshold'))} |"
                    if ours
                    else "| | |"
                )
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, of {sorted(TASKS)}")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--best", action="store_true", help="also run our recipe at its own preset")
    parser.add_argument("--cores", default="0,1", help="cores to pin the runs to ('' : no pinning)")
    parser.add_argument("--out", default=str(RESULTS / "learning.json"))
    parser.add_argument("--frames", type=int, default=None, help="shorter runs than the tasks' (smoke tests)")
    parser.add_argument("--update", action="store_true", help="keep --out's records of the tasks not run now")
    args = parser.parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        parser.error(f"unknown tasks {unknown}; choose from {sorted(TASKS)}")
    cores = [int(c) for c in args.cores.split(",") if c]
    libs = ["ours", "sb3"] + (["ours-best"] if args.best else [])
    records = []
    seeds = [int(s) for s in args.seeds.split(",")]
    for task in tasks:
        for seed in seeds:
            records += run_pair(task, seed, libs[:2], cores, args.frames)
        if args.best:  # our preset, two seeds at a time (one per core)
            for i in range(0, len(seeds), max(1, len(cores))):
                records += run_runs(
                    [("ours-best", task, seed) for seed in seeds[i : i + max(1, len(cores))]], cores, args.frames
                )
        for seed in seeds:
            print(
                f"{task} seed {seed}: "
                + ", ".join(
                    f"{r['lib']} final {r['final_return']:.1f}"
                    for r in records
                    if r["task"] == task and r["seed"] == seed
                ),
                flush=True,
            )
    commands = []
    if args.update and Path(args.out).is_file():  # the kept rows came from the earlier commands
        old = json.loads(Path(args.out).read_text())
        kept = [r for r in old["records"] if r["task"] not in tasks]
        records = sorted(kept + records, key=lambda r: list(TASKS).index(r["task"]))
        commands = old["meta"].get("commands", [old["meta"].get("command")]) if kept else []
    summary = summarise(records)
    text = table(summary)
    print(text)
    meta = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "commands": [
            *commands,
            " ".join(["python", str(Path(__file__).resolve().relative_to(HERE.parents[1])), *sys.argv[1:]]),
        ],
    }
    Path(args.out).write_text(json.dumps({"meta": meta, "records": records, "summary": summary}, indent=1) + "\n")
    Path(args.out).with_name(Path(args.out).stem + "_table.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
