"""Targets for the child processes of tests/rl_replay/test_multiprocess.py.

Importable by name from a fresh interpreter (pytest's importlib mode does not make test modules
importable), so spawn / forkserver children can unpickle them. The test puts this folder on
``sys.path``; children inherit it. Keep imports minimal.
"""

from __future__ import annotations

import os
import signal
import time

import torch
from tdict import TensorDict


def rows(start: int, n: int) -> TensorDict:
    """Items whose entries are all derived from their id (a torn row would break the relation)."""
    ids = torch.arange(start, start + n)
    return TensorDict({"id": ids, "obs": torch.stack([ids, 2 * ids, 3 * ids], -1).float()}, batch_size=[n])


def extend_rows(buffer, start: int, n: int, chunk: int = 10, pause: float = 0.0) -> None:
    """Extends the shared buffer with items ``start .. start + n`` in chunks."""
    for s in range(start, start + n, chunk):
        buffer.extend(rows(s, min(chunk, start + n - s)))
        if pause:
            time.sleep(pause)


def extend_then_fail(buffer, start: int, n: int) -> None:
    buffer.extend(rows(start, n))
    raise ValueError(f"writer failed after {n} items")


def die_hard(buffer) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def hang(buffer) -> None:
    time.sleep(600)


def extend_worker_id(buffer, worker_id: int) -> None:
    """Writes two items holding ``worker_id`` (a first write may race with the other workers')."""
    buffer.extend(TensorDict({"x": torch.full((2,), worker_id)}, batch_size=[2]))


def extend_and_report_revision(buffer, out) -> None:
    """Writes two items, then puts the storage's mutation revision and last cursor on ``out``."""
    buffer.extend(TensorDict({"x": torch.arange(2)}, batch_size=[2]))
    out.put((buffer.storage._mutation_revision, buffer.storage._last_cursor_index))
