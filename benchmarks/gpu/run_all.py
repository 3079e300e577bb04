"""Checks and times every rl-kernels op against its reference on the GPU, and writes one table.

Each ``bench_<topic>.py`` beside this file defines ``run(dry_run) -> list[dict]`` (rows: op, case,
impl, median_ms, peak_mem_mb, max_abs_err, ratio, target, met, note). This script runs them one
after the other (a failing module becomes a row with its error and the others still run) and writes
``<out>/gpu_kernels_<name>.json`` and ``.md``.

    python benchmarks/gpu/run_all.py                 # on a CUDA machine
    python benchmarks/gpu/run_all.py --dry-run       # CPU, tiny shapes, Triton's interpreter (CI)

``benchmarks/gpu/run.sh`` runs the GPU-marked tests first, then this.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TOPICS = ("scan", "recurrent", "trees", "log_probs")
COLUMNS = ("op", "case", "impl", "median_ms", "peak_mem_mb", "max_abs_err", "ratio", "target", "met", "note")


def _setup_paths(dry_run: bool) -> None:
    if dry_run:  # must precede the first import of any kernel module
        os.environ.setdefault("TRITON_INTERPRET", "1")
    for src in sorted(ROOT.glob("packages/*/src")):
        if str(src) not in sys.path:
            sys.path.insert(0, str(src))
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))


def run_topics(topics: tuple[str, ...], dry_run: bool) -> list[dict]:
    """Runs each topic's ``run(dry_run)``; a topic that raises gives one row naming the error."""
    _setup_paths(dry_run)
    rows: list[dict] = []
    for topic in topics:
        start = time.perf_counter()
        try:
            module = importlib.import_module(f"bench_{topic}")
            got = module.run(dry_run)
        except Exception as exc:  # report and go on: one broken kernel must not hide the others
            traceback.print_exc()
            got = [{"op": topic, "impl": "(failed)", "note": f"{type(exc).__name__}: {exc}"[:300]}]
        for row in got:
            rows.append({col: row.get(col) for col in COLUMNS})
        print(f"[{topic}] {len(got)} rows in {time.perf_counter() - start:.1f} s", flush=True)
    return rows


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e-2 or abs(value) >= 1e4 else f"{value:.3f}".rstrip("0").rstrip(".")
    return str(value).replace("|", "/")


def markdown(rows: list[dict], header: str) -> str:
    """The rows as a Markdown table under ``header``."""
    lines = [header, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cell(row.get(col)) for col in COLUMNS) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def describe_machine() -> str:
    """One line: device, torch, triton, Python."""
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "absent"
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (Triton interpreter)"
    return f"{device}; torch {torch.__version__}; triton {triton_version}; Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, Triton's interpreter")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--name", default=None, help="file name suffix (default: h200-like device name or 'dry_run')")
    parser.add_argument("--topics", nargs="*", default=list(TOPICS), choices=TOPICS)
    args = parser.parse_args(argv)
    rows = run_topics(tuple(args.topics), args.dry_run)
    machine = describe_machine()
    name = args.name or ("dry_run" if args.dry_run else machine.split(";")[0].split()[-1].lower())
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d")
    (args.out / f"gpu_kernels_{name}.json").write_text(
        json.dumps({"date": stamp, "machine": machine, "rows": rows}, indent=1) + "\n"
    )
    table = markdown(rows, f"rl-kernels on {machine}, {stamp} (benchmarks/gpu/run.sh)")
    (args.out / f"gpu_kernels_{name}.md").write_text(table)
    print(table)
    failed = [row for row in rows if row["impl"] == "(failed)"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
