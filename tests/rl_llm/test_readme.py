"""The package README's example runs and reaches what it claims (GRPO raises the rule reward)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "packages" / "rl-llm" / "README.md"


def test_readme_example_runs_and_learns(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert len(blocks) == 1
    scope: dict = {}
    exec(compile(blocks[0], str(README), "exec"), scope)  # noqa: S102 - our own README
    assert scope["batch"]["reward"].mean().item() > 0.5
    assert "mean reward" in capsys.readouterr().out
