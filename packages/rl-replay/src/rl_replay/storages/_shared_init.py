"""Shared first allocation: the process that writes first allocates memory-mapped files, the others map them.

A lazy storage built with ``shared_init=True`` keeps a small control directory (made by the
constructing process, so every process forked or spawned later knows it) holding a lock file and a
marker written once the items' files exist. Allocation runs under the lock: the first writer
allocates and writes the marker, later ones (and readers that never wrote) map the same files.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import weakref
from typing import Any, Callable, Iterator

from tdict.persistence import load_memmap

__all__ = ["SharedInit"]

_LOCK = "lock"
_WRITE_LOCK = "write.lock"
_READY = "ready"


def _remove(path: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # only the constructing process removes the control directory
        shutil.rmtree(path, ignore_errors=True)


class SharedInit:
    """The control directory of a ``shared_init`` storage (picklable: a path)."""

    def __init__(self) -> None:
        self.control_dir = tempfile.mkdtemp(prefix="rl_replay_shared_init_")
        open(os.path.join(self.control_dir, _LOCK), "a").close()
        open(os.path.join(self.control_dir, _WRITE_LOCK), "a").close()
        self._finalizer = weakref.finalize(self, _remove, self.control_dir, os.getpid())

    def __getstate__(self) -> dict:
        return {"control_dir": self.control_dir, "_finalizer": None}

    def _locked(self) -> Any:
        return self._file_lock(_LOCK)

    def write_lock(self) -> Any:
        """A lock held by one process at a time: a buffer's writes (cursor moves and copies) run under it."""
        return self._file_lock(_WRITE_LOCK)

    @contextlib.contextmanager
    def _file_lock(self, name: str) -> Iterator[None]:
        with open(os.path.join(self.control_dir, name), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def ready(self) -> str | None:
        """The directory of the items' files if some process allocated them (``None``: not yet)."""
        marker = os.path.join(self.control_dir, _READY)
        if not os.path.exists(marker):
            return None
        with open(marker) as f:
            return f.read()

    def allocate_or_open(self, allocate: Callable[[], str]) -> Any:
        """Under the lock: maps the files if they exist, else runs ``allocate()`` (which writes the
        files and returns their directory) and records them. Returns the mapped collection."""
        with self._locked():
            where = self.ready()
            if where is None:
                where = allocate()
                tmp = os.path.join(self.control_dir, _READY + ".tmp")
                with open(tmp, "w") as f:
                    f.write(where)
                os.replace(tmp, os.path.join(self.control_dir, _READY))
            return load_memmap(where)
