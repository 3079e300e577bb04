"""The example in rl-objectives' README runs and gives what it says."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "packages" / "rl-objectives" / "README.md"


def test_readme_ppo_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "no python example in the README"
    scope: dict = {}
    exec(compile(blocks[0], str(README), "exec"), scope)
    losses = scope["losses"]
    assert {"loss_objective", "loss_critic", "loss_entropy"} <= set(losses.keys())
    assert "advantage" not in scope["rollout"].keys()  # estimated on a copy, as in TorchRL
    assert all(p.grad is not None for p in scope["actor"].parameters())
