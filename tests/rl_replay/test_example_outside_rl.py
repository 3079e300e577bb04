"""examples/replay_outside_rl.py runs with rl-replay, rl-tdict and torch only, and its epochs match the dataset."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "replay_outside_rl.py"

# run the example as __main__ with rl_envs (and the other siblings) made unimportable
_RUNNER = """
import runpy, sys
for name in ("rl_envs", "rl_collect", "rl_objectives", "rl_llm"):
    sys.modules[name] = None
sys.argv = [{path!r}, "--size", "600", "--batch-size", "64", "--epochs", "2"]
runpy.run_path({path!r}, run_name="__main__")
"""


def test_example_runs_without_sibling_packages():
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER.format(path=str(EXAMPLE))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    counts = re.search(r"per-class counts \[([0-9, ]+)\]", out)
    assert counts is not None, out
    counts = [int(c) for c in counts.group(1).split(",")]
    assert sum(counts) == 600 and len(counts) == 10
    epochs = re.findall(
        r"\[memory\] epoch (\d+): (\d+) batches, each image once: (\w+), class counts match dataset: (\w+)", out
    )
    assert [e[0] for e in epochs] == ["0", "1"]
    for _, n_batches, once, match in epochs:
        assert int(n_batches) == 10  # ceil(600 / 64)
        assert once == "True" and match == "True"
    assert "LazyTensorStorage: 600 items stored" in out
    assert out.rstrip().endswith("all epochs consistent with the dataset: True")


def test_example_dataset_counts_match_reference():
    # the example's dataset, rebuilt here: the printed counts equal a numpy-free reference count
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("replay_outside_rl", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = module.make_dataset(300)
    labels = data["label"].tolist()
    reference = [labels.count(c) for c in range(10)]
    assert torch.bincount(data["label"], minlength=10).tolist() == reference
    assert data["image"].dtype == torch.uint8 and data["image"].shape == (300, 3, 32, 32)
