"""Crash-safety driver for tests/rl_replay/test_checkpoint.py (run as a script in a subprocess).

Usage: python _replay_ckpt_crash.py ROOT

Imports torch once, then forks one grandchild per kill point:

- systematic: the checkpoint holds state A; a grandchild dumps state B and SIGKILLs itself at
  its N-th filesystem call (os.open/write/rename/replace/mkdir/unlink/rmdir/fsync, open()), for
  N = 0, 1, 2, ... until a dump completes. After each kill the driver loads the checkpoint into
  a fresh buffer and reports which state it holds ("A", "B" or "ERROR ..."), then re-dumps A
  (which must recover and clean up leftovers) before the next N.
- random: a grandchild dumps A and B alternately in a loop and is SIGKILLed from outside after
  a random delay; the driver loads and reports.

Prints one JSON line: {"systematic": [...], "random": [...], "leftovers": [...]}.
"""

from __future__ import annotations

import builtins
import json
import os
import random
import signal
import sys
import time

import torch

torch.set_num_threads(1)

from rl_replay import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
from tdict import TensorDict

ROOT = sys.argv[1]
PATH = os.path.join(ROOT, "ckpt")


def make(n: int, seed: int) -> ReplayBuffer:
    rb = ReplayBuffer(
        storage=LazyTensorStorage(64),
        sampler=SamplerWithoutReplacement(),
        generator=torch.Generator().manual_seed(seed),
        batch_size=4,
    )
    g = torch.Generator().manual_seed(100 + n)
    rb.extend(TensorDict(obs=torch.randn(n, 3, generator=g), nxt={"r": torch.arange(n)}, batch_size=[n]))
    rb.sample()
    return rb


A, B = make(10, 1), make(20, 2)
REF = {"A": A, "B": B}


def which() -> str:
    rb = ReplayBuffer(storage=LazyTensorStorage(64), sampler=SamplerWithoutReplacement(), batch_size=4)
    try:
        rb.loads(PATH)
    except Exception as err:  # noqa: BLE001 - reported to the test
        return f"ERROR {type(err).__name__}: {err}"
    name = {10: "A", 20: "B"}.get(len(rb))
    if name is None:
        return f"ERROR len {len(rb)}"
    ref = REF[name]
    n = len(rb)
    same = (
        torch.equal(rb.storage._storage[:n]["obs"], ref.storage._storage[:n]["obs"])
        and torch.equal(rb.storage._storage[:n]["nxt", "r"], ref.storage._storage[:n]["nxt", "r"])
        and rb.writer.state_dict() == ref.writer.state_dict()
        and rb.sampler.state_dict() == ref.sampler.state_dict()
        and torch.equal(rb._rng.get_state(), ref._rng.get_state())
    )
    return name if same else f"ERROR content of {name}"


_FS = ["open", "rename", "replace", "mkdir", "unlink", "rmdir"]  # every step that changes the tree


def die_at(n: int) -> None:
    """Patch filesystem calls so that the n-th one SIGKILLs this process before running."""
    count = [0]

    def wrap(fn):
        def inner(*args, **kwargs):
            if count[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)
            count[0] += 1
            return fn(*args, **kwargs)

        return inner

    for name in _FS:
        setattr(os, name, wrap(getattr(os, name)))
    builtins.open = wrap(builtins.open)  # file writes through open() count too


def leftovers() -> list:
    return sorted(e for e in os.listdir(ROOT) if e not in ("ckpt", ".ckpt.lock"))  # the lock file stays


def systematic(limit: int = 400) -> list:
    out = []
    for n in range(limit):
        A.dumps(PATH)
        if leftovers():
            out.append(f"ERROR leftovers after a clean dump: {leftovers()}")
        pid = os.fork()
        if pid == 0:  # grandchild
            try:
                die_at(n)
                B.dumps(PATH)
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status)
        out.append([n, killed, which()])
        if not killed:
            break
    return out


def random_kills(rounds: int = 12) -> list:
    rng = random.Random(0)
    out = []
    for i in range(rounds):
        pid = os.fork()
        if pid == 0:
            try:
                while True:
                    A.dumps(PATH)
                    B.dumps(PATH)
            finally:
                os._exit(0)
        time.sleep(rng.uniform(0.0, 0.03) * (1 + i % 4))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        out.append(which())
    return out


if __name__ == "__main__":
    result = {"systematic": systematic(), "random": random_kills()}
    A.dumps(PATH)
    result["leftovers"] = leftovers()
    print(json.dumps(result))
