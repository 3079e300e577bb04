"""The documentation: every tutorial's Python blocks run, in order, as one script (what the pages
show is what the code does), and the site builds strictly (a warning fails it; mkdocstrings reads
every package's docstrings). The build needs mkdocs-material and mkdocstrings (tests environment)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TUTORIALS = sorted((REPO / "docs" / "tutorials").glob("*.md"))
NEEDS = {"llm-post-training": "transformers", "recipe-end-to-end": "hydra"}


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)


def test_every_tutorial_of_the_site_is_here() -> None:
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert {p.name for p in TUTORIALS} == set(re.findall(r"tutorials/([\w-]+\.md)", nav))
    assert all(python_blocks(p) for p in TUTORIALS)


@pytest.mark.parametrize("page", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if page.stem in NEEDS:
        pytest.importorskip(NEEDS[page.stem])
    monkeypatch.chdir(REPO)  # the pages say: run from the repository root
    monkeypatch.setattr(sys, "path", list(sys.path))  # a page may put examples/ on the path
    namespace: dict = {"__name__": f"tutorial_{page.stem.replace('-', '_')}"}
    for block in python_blocks(page):
        exec(compile(block, str(page), "exec"), namespace)


def test_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs-material and mkdocstrings are in the tests environment")
    pytest.importorskip("mkdocstrings")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    api = (tmp_path / "site" / "api" / "rl-envs" / "index.html").read_text(encoding="utf-8")
    assert 'id="rl_envs.PendulumEnv"' in api and 'id="rl_envs.NormalizeReward"' in api
