"""benchmarks/gpu/run.sh, the project's one GPU check, in its CPU dry-run mode.

The dry run collects every GPU-marked test (so a GPU run does not die on an import) and runs each
kernel benchmark on tiny shapes under Triton's interpreter, writing the same table a GPU run writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("triton")


def test_dry_run_writes_a_row_for_every_kernel(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("TRITON_INTERPRET", None)  # the script sets it
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu" / "run.sh"), "--dry-run", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads((tmp_path / "gpu_kernels_dry_run.json").read_text())
    rows = report["rows"]
    ops = " ".join(row["op"] for row in rows)
    for kernel in ("scan", "lstm_with_resets", "gru_with_resets", "update", "sample", "chunked_log_probs"):
        assert kernel in ops, f"no benchmark row for {kernel}: {sorted({row['op'] for row in rows})}"
    assert not [row for row in rows if row["impl"] == "(failed)"]
    measured = [row for row in rows if row["median_ms"] is not None]
    assert measured and all(row["median_ms"] > 0 for row in measured)
    checked = [row for row in rows if row["max_abs_err"] is not None]
    assert checked and all(row["max_abs_err"] < 1e-3 for row in checked)
    table = (tmp_path / "gpu_kernels_dry_run.md").read_text()
    assert table.count("\n|") == len(rows) + 2  # header, rule, one line per row
