"""The examples run to completion (``hatch run demo`` is the project's main job)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.py"))
# a short run of the scripts whose default run trains an agent
QUICK = {
    "train.py": [
        "algo=sac",
        "env=pendulum",
        "collector.total_frames=512",
        "collector.init_random_frames=256",
        "logger.eval_every=512",
        "env.eval_envs=2",
        "logger.progress=false",
    ],
}


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # examples with a long default run (the demo trains an agent) offer --quick for this check
    quick = QUICK.get(script.name, ["--quick"] if '"--quick"' in script.read_text() else [])
    proc = subprocess.run(
        [sys.executable, str(script), *quick],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"{script.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip(), f"{script.name} printed nothing"


@pytest.mark.slow
def test_demo_learns_the_pendulum(tmp_path: Path) -> None:
    """The demo's SAC agent swings the pendulum up (a random policy scores about -1400)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "sac_pendulum.py"), "--frames", "12000"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = float(proc.stdout.strip().splitlines()[-1].split("final eval return ")[1].split()[0])
    assert final > -400, proc.stdout


@pytest.mark.slow
def test_ppo_example_balances_the_cart_pole(tmp_path: Path) -> None:
    """PPO's greedy policy keeps the pole up for most of the 500 steps (a random policy: about 22)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "ppo_cartpole.py")],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    final = float(proc.stdout.strip().splitlines()[-1].split("final greedy return ")[1].split()[0])
    assert final > 350, proc.stdout
