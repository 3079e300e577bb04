"""Crash-safe folder replacement, the one implementation every package uses (checkpoints, datasets).

:func:`atomic_dir` writes a new folder ``.<name>.tmp-<token>`` beside ``<name>`` (the token is
random, so concurrent writers never share one), then swaps it in with two renames: ``<name>`` to
``.<name>.old-<token>``, the new folder to ``<name>`` (the commit), and deletes the old one. The
writer puts a *marker* file in last: a folder holding its marker is complete.

A ``kill -9`` at any moment leaves ``<name>`` with the old or the new content, or (killed between
the two renames) no ``<name>`` but a complete leftover, which :func:`committed_dir` finds and the
next :func:`atomic_dir` renames back into place.

Concurrent processes coordinate through ``flock`` on ``.<name>.lock`` beside the folder (kept):

- the swap and the cleanup run under the exclusive lock, readers hold the shared lock
  (:func:`reading_dir`): a reader never sees the gap between the renames, and no folder it reads is
  renamed or deleted while it reads;
- each writer holds an exclusive ``flock`` on its own temporary folder from its creation to its
  commit; the cleanup deletes only temporary folders nobody holds (those of writers that died).

Locks die with their process. Without ``fcntl`` (Windows) the locks are skipped: kills stay safe,
concurrent processes are not coordinated.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterator

from .files import fsync_path, fsync_tree

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

__all__ = ["atomic_dir", "committed_dir", "reading_dir"]


def _split(path: str | os.PathLike) -> tuple[str, str, str]:
    path = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(path)
    if not name:
        raise ValueError(f"folder path {path!r} has no final name.")
    return path, parent, name


@contextlib.contextmanager
def _path_lock(parent: str, name: str, exclusive: bool) -> Iterator[None]:
    if fcntl is None:  # pragma: no cover - not POSIX
        yield
        return
    try:
        fd = os.open(os.path.join(parent, f".{name}.lock"), os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        if exclusive:
            raise
        yield  # a reader of a read-only or missing folder: nobody can be writing there
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


def _claim(folder: str) -> int | None:
    """An open fd holding the exclusive lock of ``folder``; ``None`` if a live process holds it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
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


def _abandoned(folder: str) -> bool:
    """True for a temporary folder whose writer is gone (nobody holds its lock)."""
    fd = _claim(folder)
    if fd is None:
        return False
    os.close(fd)
    return True


def _leftovers(parent: str, name: str) -> tuple[list[str], list[str]]:
    """(temporary folders, old folders) beside ``parent/name``: of interrupted or running swaps."""
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


@contextlib.contextmanager
def reading_dir(path: str | os.PathLike) -> Iterator[None]:
    """Holds the shared lock of the folder at ``path``: no :func:`atomic_dir` swaps or deletes it meanwhile.

    Examples:
        >>> import tempfile, pathlib
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> atomic_dir(target, lambda d: pathlib.Path(d, "done").write_text("1"), marker="done")
        True
        >>> with reading_dir(target):
        ...     print(pathlib.Path(committed_dir(target, "done"), "done").read_text())
        1
    """
    _, parent, name = _split(path)
    with _path_lock(parent, name, exclusive=False):
        yield


def committed_dir(path: str | os.PathLike, marker: str) -> str:
    """The folder holding the last committed content for ``path``: ``path`` itself, or a complete
    leftover when a swap was killed between its two renames. Call it under :func:`reading_dir`.

    Raises:
        FileNotFoundError: nothing complete (no folder holding ``marker``) exists for ``path``.
        NotADirectoryError: ``path`` is a file.
    """
    path, parent, name = _split(path)
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise NotADirectoryError(f"{path!r} is a file, not a folder.")
    tmp, old = _leftovers(parent, name)
    # the newer state (a complete folder of a dead writer) first, then the previous one
    newest_first = sorted(tmp, key=_mtime, reverse=True)
    complete_tmp = [d for d in newest_first if os.path.isfile(os.path.join(d, marker)) and _abandoned(d)]
    for candidate in complete_tmp + sorted(old, key=_mtime, reverse=True):
        if os.path.isfile(os.path.join(candidate, marker)):
            return candidate
    raise FileNotFoundError(f"nothing committed at {path!r} (no folder holding {marker!r}).")


def _refuse_foreign(path: str, marker: str) -> None:
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"{path!r} exists and is not a folder.")
    if os.path.isdir(path) and os.listdir(path) and not os.path.isfile(os.path.join(path, marker)):
        raise FileExistsError(
            f"{path!r} exists and was not written by atomic_dir (no {marker}); refusing to replace it."
        )


def atomic_dir(
    path: str | os.PathLike, write: Callable[[str], None], *, marker: str, fsync: bool = True, overwrite: bool = True
) -> bool:
    """Replaces the folder ``path`` by the one ``write(temporary_folder)`` fills, atomically.

    ``write`` must create the file ``marker`` last: it is what marks a folder complete. A folder
    already at ``path`` that holds no ``marker`` (someone else's data) is never replaced. If ``write``
    raises, the temporary folder is removed and ``path`` is untouched. With ``fsync`` every written
    file and the folder entries reach the disk before the commit (surviving a power loss, not only a
    kill). With ``overwrite=False`` a complete folder found at commit time (another process got there
    first) is kept and this one dropped.

    Returns:
        ``True`` when this call's folder was committed, ``False`` when ``overwrite=False`` kept another.

    Examples:
        >>> import tempfile, pathlib
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
        >>> def write(folder):
        ...     pathlib.Path(folder, "weights.txt").write_text("0.5")
        ...     pathlib.Path(folder, "done").write_text("")  # the marker, last
        >>> atomic_dir(target, write, marker="done")
        True
        >>> sorted(p.name for p in target.iterdir())
        ['done', 'weights.txt']
    """
    path, parent, name = _split(path)
    os.makedirs(parent, exist_ok=True)
    token = secrets.token_hex(8)
    tmp = os.path.join(parent, f".{name}.tmp-{token}")
    with _path_lock(parent, name, exclusive=True):
        _refuse_foreign(path, marker)  # before writing anything
        os.mkdir(tmp)
        claim = _claim(tmp)  # claimed before any cleanup can see it
    try:
        write(tmp)
        if not os.path.isfile(os.path.join(tmp, marker)):
            raise RuntimeError(f"atomic_dir: the writer did not create the marker {marker!r}; {path!r} is unchanged.")
        if fsync:
            fsync_tree(tmp)
        with _path_lock(parent, name, exclusive=True):
            _refuse_foreign(path, marker)
            if not os.path.exists(path):  # a swap died between its renames: put its result back first
                with contextlib.suppress(FileNotFoundError):
                    os.rename(committed_dir(path, marker), path)
            if not overwrite and os.path.isfile(os.path.join(path, marker)):
                shutil.rmtree(tmp, ignore_errors=True)
                return False
            if os.path.exists(path):
                os.rename(path, os.path.join(parent, f".{name}.old-{token}"))
            os.rename(tmp, path)  # the commit
            if fsync:
                fsync_path(parent)
            stale_tmp, stale_old = _leftovers(parent, name)
            for leftover in stale_old + [d for d in stale_tmp if _abandoned(d)]:
                shutil.rmtree(leftover, ignore_errors=True)
        return True
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if claim is not None:
            os.close(claim)
