"""The repository passes its linter and formatter: ``ruff check .`` and ``ruff format --check .``
(configuration in pyproject.toml; ruff is pinned in the tests environment, since formatting changes
between releases). Fix with ``ruff check --fix .`` and ``ruff format .`` from the repository root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytest.importorskip("ruff", reason="ruff is installed in the tests environment (hatch.toml)")


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff(command: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", *command], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
