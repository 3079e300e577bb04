"""Checkpoint directories replaced atomically, safe against kills and against other processes.

A dump writes ``.<name>.tmp-<token>`` next to ``<name>`` (the token is random per dump, so
concurrent dumpers never share a temp dir), then swaps it in with two renames: ``<name>`` to
``.<name>.old-<token>``, the temp dir to ``<name>`` (the commit), and deletes the old one.

Concurrency, through ``flock`` on ``.<name>.lock`` next to the checkpoint (kept between dumps):

- the swap and the cleanup run under the exclusive lock, a load reads under the shared lock: a
  load never sees the gap between the two renames, and no directory it reads is renamed or deleted
  while it reads (it sees the old or the new complete checkpoint);
- each dumper holds an exclusive ``flock`` on its own temp dir from its creation (made under the
  exclusive lock) to its commit; the cleanup deletes only temp dirs whose lock it can take, i.e.
  those of dumpers that died, never another live dumper's.

A ``kill -9`` at any moment leaves ``<name>`` holding the old or the new checkpoint, or (killed
between the two renames) no ``<name>`` but a complete leftover, which :func:`resolve` finds and the
next dump renames back into place. Locks die with their process. Without ``fcntl`` (Windows) the
locks are skipped: kills stay safe, concurrent processes are not.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from typing import Any

from tdict.files import fsync_path, fsync_tree

from ._checkpoint_io import CheckpointError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

__all__ = ["atomic_dir", "reading", "resolve"]


def _split(path: Any) -> tuple[str, str, str]:
    path = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(path)
    if not name:
        raise ValueError(f"checkpoint path {path!r} has no final name.")
    return path, parent, name


# ============================================================================================ #
# locks
# ============================================================================================ #
@contextlib.contextmanager
def _path_lock(parent: str, name: str, exclusive: bool) -> Iterator[None]:
    if fcntl is None:  # pragma: no cover - not POSIX
        yield
        return
    lock = os.path.join(parent, f".{name}.lock")
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        if exclusive:
            raise
        fd = None  # a reader on a read-only or missing directory: nobody can be dumping there
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


def _claim(directory: str) -> int | None:
    """An open fd holding the exclusive lock of ``directory``; ``None`` if a live process holds it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return None
    if fcntl is None:  # pragma: no cover - not POSIX
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _abandoned(directory: str) -> bool:
    """True for a temp dir whose dumper is gone (nobody holds its lock)."""
    fd = _claim(directory)
    if fd is None:
        return False
    os.close(fd)
    return True


@contextlib.contextmanager
def reading(path: Any) -> Iterator[None]:
    """Holds the shared lock of the checkpoint at ``path``: no dump swaps or deletes it meanwhile."""
    _, parent, name = _split(path)
    with _path_lock(parent, name, exclusive=False):
        yield


# ============================================================================================ #
# finding and replacing
# ============================================================================================ #
def _leftovers(parent: str, name: str) -> tuple[list[str], list[str]]:
    """(temp dirs, old dirs) next to ``parent/name``: of interrupted dumps, or of dumps in progress."""
    tmp, old = [], []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir(parent):
            if entry.startswith(f".{name}.tmp-"):
                tmp.append(os.path.join(parent, entry))
            elif entry.startswith(f".{name}.old-"):
                old.append(os.path.join(parent, entry))
    return tmp, old


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return -1.0


def resolve(path: Any, marker: str) -> str:
    """The directory holding the committed checkpoint for ``path`` (a complete leftover if a dump
    was killed between its two renames). Call it under :func:`reading` or the exclusive lock."""
    path, parent, name = _split(path)
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise CheckpointError(f"{path!r} is not a directory: not a checkpoint.")
    tmp, old = _leftovers(parent, name)
    # the new state (a complete temp dir of a dead dumper) first, then the previous one
    tmp = [
        d for d in sorted(tmp, key=_mtime, reverse=True) if os.path.isfile(os.path.join(d, marker)) and _abandoned(d)
    ]
    for candidate in tmp + sorted(old, key=_mtime, reverse=True):
        if os.path.isfile(os.path.join(candidate, marker)):
            return candidate
    raise CheckpointError(f"no checkpoint at {path!r}.")


def _refuse_foreign(path: str, marker: str) -> None:
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"checkpoint path {path!r} exists and is not a directory.")
    if os.path.isdir(path) and os.listdir(path) and not os.path.isfile(os.path.join(path, marker)):
        raise FileExistsError(f"{path!r} exists and is not a checkpoint (no {marker}); refusing to replace it.")


def atomic_dir(path: Any, marker: str, write: Callable[[str], None], fsync: bool) -> None:
    """Runs ``write(tmp_dir)`` (which writes ``marker`` last), then swaps ``tmp_dir`` in for ``path``."""
    path, parent, name = _split(path)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{name}.tmp-{secrets.token_hex(8)}")
    with _path_lock(parent, name, exclusive=True):
        _refuse_foreign(path, marker)  # before writing anything
        os.mkdir(tmp)
        claim = _claim(tmp)  # claimed before any cleanup can see it
    try:
        write(tmp)
        if fsync:
            fsync_tree(tmp)
        with _path_lock(parent, name, exclusive=True):
            _refuse_foreign(path, marker)
            if not os.path.exists(path):  # a dump died between its renames: put its result back first
                with contextlib.suppress(CheckpointError):
                    os.rename(resolve(path, marker), path)
            old = os.path.join(parent, f".{name}.old-{os.path.basename(tmp).rsplit('-', 1)[1]}")
            if os.path.exists(path):
                os.rename(path, old)
            os.rename(tmp, path)  # the commit
            if fsync:
                fsync_path(parent)
            stale_tmp, stale_old = _leftovers(parent, name)
            for leftover in stale_old + [d for d in stale_tmp if _abandoned(d)]:
                shutil.rmtree(leftover, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if claim is not None:
            os.close(claim)
