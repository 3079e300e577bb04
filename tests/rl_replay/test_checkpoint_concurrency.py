"""Two processes dumping one checkpoint path while a third loads it: no dump fails, every load
holds exactly one of the two complete checkpoints, and no temp dir is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from rl_replay import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "_replay_ckpt_concurrent.py")


def test_concurrent_dumpers_and_a_loader(tmp_path):
    n = 200
    procs = [
        subprocess.Popen(
            [sys.executable, SCRIPT, role, str(tmp_path), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role in ("dump-A", "dump-B", "load")
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    dump_a, dump_b, load = results
    for result in results:
        assert result["n_errors"] == 0, result
    assert dump_a["count"] >= n and dump_b["count"] >= n
    assert load["count"] == n and load["seen"]["A"] + load["seen"]["B"] == n
    assert load["seen"]["A"] > 0 and load["seen"]["B"] > 0, load  # the loads ran while both dumped
    # only the committed checkpoint (and the lock) remain; it loads
    leftovers = sorted(e for e in os.listdir(tmp_path) if e.startswith(".ckpt."))
    assert leftovers == [".ckpt.lock"], leftovers
    rb = ReplayBuffer(storage=LazyTensorStorage(64), sampler=SamplerWithoutReplacement())
    rb.loads(tmp_path / "ckpt")
    assert len(rb) in (10, 20)
    assert torch.equal(rb[: len(rb)]["nxt", "r"], torch.arange(len(rb)))


def test_a_dump_keeps_the_temp_dir_of_a_live_dumper(tmp_path):
    fcntl = pytest.importorskip("fcntl")
    rb = ReplayBuffer(storage=LazyTensorStorage(8))
    rb.extend(torch.arange(3.0))
    live, dead = tmp_path / ".ck.tmp-live", tmp_path / ".ck.tmp-dead"
    live.mkdir()
    dead.mkdir()
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what a dumper in progress holds on its temp dir
    try:
        rb.dumps(tmp_path / "ck")
        assert live.is_dir() and not dead.exists()
    finally:
        os.close(fd)
    rb.dumps(tmp_path / "ck")  # once its dumper is gone, the next dump removes it
    assert sorted(os.listdir(tmp_path)) == [".ck.lock", "ck"]
