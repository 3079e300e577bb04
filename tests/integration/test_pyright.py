"""The packages' sources pass pyright in basic mode (configuration: ``[tool.pyright]`` in
pyproject.toml; pyright is pinned in the tests environment, since its checks change between
releases). Run it by hand with ``python -m pyright`` from the repository root."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytest.importorskip("pyright", reason="pyright is installed in the tests environment (hatch.toml)")


def test_pyright_basic_mode_reports_no_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pyright", "--pythonpath", sys.executable, "--outputjson"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(proc.stdout)
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    lines = [
        f"{Path(d['file']).relative_to(REPO)}:{d['range']['start']['line'] + 1}: {d['message']} ({d.get('rule')})"
        for d in errors
    ]
    assert not errors, f"{len(errors)} pyright errors:\n" + "\n".join(lines[:60])
    assert report["summary"]["filesAnalyzed"] > 200  # the whole of every package was checked
