"""Crash-safe file writing, the one implementation every package uses.

A file is written to a temporary file in the same folder, flushed to disk, then renamed over its
target with ``os.replace`` (atomic on POSIX and Windows): a process killed at any moment leaves
the old file or the new one, never a mix. With ``fsync=True`` (the default) the data and the
folder entry are on disk before the call returns, so the new file also survives a power loss.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "atomic_write_to", "fsync_path", "fsync_tree"]


def fsync_path(path: str | os.PathLike) -> None:
    """Flushes a file, or a folder's entries, to disk (a folder on a filesystem that refuses it is skipped).

    Examples:
        >>> import tempfile
        >>> fsync_path(tempfile.gettempdir())
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as err:  # some filesystems refuse fsync on folders
        if err.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def fsync_tree(path: str | os.PathLike) -> None:
    """:func:`fsync_path` on every file and folder under ``path`` (files first, then their folder)."""
    for root, _, files in os.walk(path):
        for name in files:
            fsync_path(os.path.join(root, name))
        fsync_path(root)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_to(
    path: str | os.PathLike, write: Callable[[str], None], *, suffix: str = ".tmp", fsync: bool = True
) -> Path:
    """Writes ``path`` through ``write(temporary_path)`` (for writers that take a file name), atomically.

    ``write`` fills the temporary file (in the same folder; ``suffix`` lets writers that pick a format
    from the extension see the right one); it is then renamed over ``path``. If ``write`` raises, the
    temporary file is removed and ``path`` is untouched. Returns ``path``.

    Examples:
        >>> import tempfile, pathlib
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "note.txt"
        >>> _ = atomic_write_to(target, lambda tmp: pathlib.Path(tmp).write_text("hello"))
        >>> target.read_text()
        'hello'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would make every checkpoint and log private
        os.close(fd)
        write(tmp)
        if fsync:
            fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if fsync:
        fsync_path(path.parent)
    return path


def atomic_write(
    path: str | os.PathLike, write: Callable[[IO[Any]], object], *, binary: bool = True, fsync: bool = True
) -> Path:
    """Writes ``path`` through ``write(file)`` (an open file object), atomically: see :func:`atomic_write_to`.

    Examples:
        >>> import json, tempfile, pathlib
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "config.json"
        >>> _ = atomic_write(target, lambda f: json.dump({"lr": 3e-4}, f), binary=False)
        >>> json.loads(target.read_text())
        {'lr': 0.0003}
    """

    def fill(tmp: str) -> None:
        with open(tmp, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            write(f)

    return atomic_write_to(path, fill, fsync=fsync)
