"""Exact resume: a SAC run killed with SIGKILL and resumed from its last checkpoint ends bit for bit
where the uninterrupted run ends (CPU, one thread).

The demo (examples/sac_pendulum.py) checkpoints every ``--save-every`` frames: the weights and
target networks, the optimizer, the replay buffer with its items, the collector with the step its
pendulums are at, the envs' generators, every global RNG and the counters. A run is killed as soon
as its first checkpoint exists, then resumed with ``--resume``; its final checkpoint must equal
the uninterrupted run's in every tensor, and its replay buffer must hold the same bytes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from tdict import is_tensor_collection
from rl_replay import LazyTensorStorage, ReplayBuffer

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "sac_pendulum.py"
ARGS = [
    "--frames",
    "768",
    "--frames-per-batch",
    "64",
    "--init-random-frames",
    "128",
    "--utd",
    "0.125",
    "--batch-size",
    "64",
    "--save-every",
    "192",
    "--eval-every",
    "384",
    "--eval-envs",
    "2",
]


def _run(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.Popen(
        [sys.executable, str(DEMO), *ARGS, "--runs-dir", str(cwd / "runs"), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    return out


def _assert_equal(a, b, path="checkpoint"):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), path
    elif is_tensor_collection(a):  # a storage's items in its state dict
        assert is_tensor_collection(b) and a.batch_size == b.batch_size, path
        keys = set(a.keys(True, True))
        assert keys == set(b.keys(True, True)), path
        for key in keys:
            assert torch.equal(a.get(key), b.get(key)), f"{path}/{key}"
    elif isinstance(a, dict):
        assert set(a) == set(b), path
        for key in a:
            if key != "__dumped_to__":  # the buffer folder's random name
                _assert_equal(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_equal(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _buffer(run: Path, ckpt: dict):
    """The replay buffer saved with a checkpoint, loaded into a fresh one."""
    buffer = ReplayBuffer(storage=LazyTensorStorage(768), batch_size=64)
    buffer.loads(run / ckpt["replay_buffer"]["__dumped_to__"])
    return buffer


def test_a_killed_sac_run_resumes_bit_for_bit(tmp_path: Path) -> None:
    _finish(_run(["--name", "whole"], tmp_path))

    proc = _run(["--name", "cut"], tmp_path)
    ckpt = tmp_path / "runs" / "cut" / "checkpoint.pt"
    deadline = time.monotonic() + 300
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    killed_at = torch.load(ckpt, weights_only=True)["state"]["collected_frames"]
    assert 0 < killed_at < 768

    out = _finish(_run(["--name", "cut", "--resume"], tmp_path))
    assert f"resumed from {ckpt} at frame {killed_at}" in out

    whole = torch.load(tmp_path / "runs" / "whole" / "checkpoint.pt", weights_only=True)
    resumed = torch.load(ckpt, weights_only=True)
    assert resumed["state"]["collected_frames"] == 768
    _assert_equal(whole, resumed)
    a, b = _buffer(tmp_path / "runs" / "whole", whole), _buffer(tmp_path / "runs" / "cut", resumed)
    assert len(a) == len(b) == 768
    assert (a[:] == b[:]).all()  # the items, transition by transition
    _assert_equal(a.state_dict(), b.state_dict())  # sampler, writer and generator
    # one buffer folder per run: the ones of earlier checkpoints (and of the killed run) are gone
    assert len([p for p in (tmp_path / "runs" / "cut").iterdir() if p.name.startswith("checkpoint.pt.")]) == 1
