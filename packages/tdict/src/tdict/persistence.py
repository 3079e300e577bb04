"""Saving and loading tensor collections: memory-mapped directories and state dicts.

On-disk layout of ``td.memmap_(prefix)`` / ``td.save(prefix)``::

    prefix/
        tdict_meta.json                 # the commit point: JSON, written last, replaced atomically
        .tdict.lock                     # flock'ed by writers (one writer per prefix at a time)
        obs.3f9c0a1b2c3d4e5f.memmap     # one raw file per tensor leaf: row-major bytes, no header
        next/
            reward.3f9c0a1b2c3d4e5f.memmap

A leaf file holds exactly ``numel * itemsize`` bytes. Its name is the escaped key
(characters outside ``[A-Za-z0-9_-]`` become ``%XX``; over-long names are shortened and
suffixed with a hash) plus the *token* of the write that created it; sub-collections are
sub-directories. ``tdict_meta.json`` describes everything else: format name and version, batch
sizes, devices, dim names, dtypes, shapes, byte sizes, key order, the file of every leaf,
non-tensor payloads (as tagged JSON, see :func:`encode_payload`; a non-tensor root, such as
a saved NonTensorStack, is one such entry) and the import path of tensorclasses. Readers look only at the files that ``tdict_meta.json`` names.

Crash safety (a ``kill -9`` at any moment leaves the old or the new state; with
``fsync=True`` a power loss does too):

1. Every leaf is written to a *new* file (a fresh random token in its name), so files that
   the committed metadata points to are never modified by a later write.
2. With ``fsync=True`` the new files are ``fsync``'ed, then their directories. Without it the
   data sits in the page cache, which a killed process cannot lose; only an OS crash or power
   loss could (tensordict makes the same trade-off, and never fsyncs).
3. The metadata is written to ``.tdict_meta.json.<token>.tmp`` (``fsync``'ed when asked) and
   renamed over ``tdict_meta.json`` with ``os.replace`` (atomic). This rename is the commit:
   before it the old metadata (and its untouched files) is what loads; after it the new
   metadata, whose files are all complete.
4. Only then are the files of older writes (and leftovers of interrupted ones) deleted.

A leaf that is already a whole-file ``MemoryMappedTensor`` committed under the same prefix (a
collection loaded from, or memmapped to, ``prefix``) is not copied: the new metadata points
to the same file. Old files are removed after each commit, so a collection that still maps
them keeps its data (POSIX keeps an unlinked file alive while mapped) but its ``filename``
no longer exists; re-load it from ``prefix`` to follow later writes.

Integrity: the metadata carries ``"sha256"``, the SHA-256 of the canonical JSON of everything
else in it (:func:`metadata_checksum`), so that a damaged file (a flipped byte that still parses,
say a renamed key) is refused instead of loading different data. Format version 1 (files written
before the checksum existed) has no ``"sha256"``: such files still load, with the structural
checks below only; every write produces version 2. The checksum detects corruption, not
tampering (anyone can recompute it): the structural checks and the no-pickle rule still apply.

:func:`load_memmap` never unpickles: it parses the JSON, checks the format, version, fields and
checksum, checks that every named file is inside ``prefix`` and has exactly the expected size,
and raises :class:`MemmapLoadError` (naming the path and the problem) for missing or bad
metadata and missing or short files. Non-tensor payloads must be JSON-able (str, numbers, bools, None,
lists, tuples, dicts, bytes); anything else raises ``TypeError`` before anything is written.
Tensorclasses are re-created from their recorded ``module:qualname`` only when that module
is already imported (loading never imports a module named in a file).

This module holds the public API and the write path (lock, write, commit, clean up). The
format itself (file names, the write plan, metadata and payload encoding) lives in
``tdict._io.memmap_layout``; validating and rebuilding on load in ``tdict._io.memmap_load``.

State dicts (:func:`state_dict` / :func:`load_state_dict`, implemented in ``tdict._io.state_dict``) are
``OrderedDict`` s of tensors (``"."`` keys, or nested) with the batch sizes, devices and non-tensor
payloads in their ``_metadata`` attribute (tensordict 0.14's layout), which round-trip through
``torch.save`` / ``torch.load(weights_only=True)``.

Examples:
    >>> import tempfile, torch
    >>> from tdict import TensorDict
    >>> from tdict.persistence import load_memmap
    >>> prefix = tempfile.mkdtemp()
    >>> td = TensorDict({"obs": torch.arange(6.0).view(3, 2), "next": {"r": torch.ones(3)}}, [3])
    >>> _ = td.memmap(prefix)
    >>> load_memmap(prefix)["next", "r"].tolist()
    [1.0, 1.0, 1.0]
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from typing import Any, Iterator

import torch

from ._io.memmap_layout import (
    _LAZY,
    _NON_TENSOR,
    _TMP_PREFIX,
    _TOKEN_RE,
    FORMAT,
    LOCK_NAME,
    META_NAME,
    VERSION,
    MemmapLoadError,
    _dtype_name,
    _encode_non_tensor,
    _iter_tensor_entries,
    _Leaf,
    _Node,
    _plan,
    _wrap_tensorclass,
    decode_payload,
    encode_payload,
    metadata_checksum,
)
from ._io.memmap_load import _bad, _load_node, _parse_meta, _read_meta_bytes
from ._io.state_dict import load_state_dict, state_dict  # noqa: F401  (re-exported; base.py delegates here)
from ._core.utils import parse_device
from .errors import SymlinkError
from .files import fsync_path
from .memmap import MemoryMappedTensor

__all__ = [
    "MemmapLoadError",
    "decode_payload",
    "encode_payload",
    "load",
    "load_memmap",
    "load_state_dict",
    "memmap",
    "memmap_",
    "memmap_like",
    "metadata_checksum",
    "save",
    "state_dict",
]


@contextlib.contextmanager
def _locked(prefix: str) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(os.path.join(prefix, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _as_prefix(prefix: Any) -> str:
    try:
        path = os.fspath(prefix)
    except TypeError:
        raise TypeError(
            f"prefix must be a str or os.PathLike (or None), got {type(prefix).__name__}: {prefix!r}"
        ) from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return os.path.abspath(path)


def _committed_files(prefix: str) -> dict[str, int]:
    """``{absolute file: nbytes}`` of the currently committed metadata (empty if none or unreadable)."""
    raw = _read_meta_bytes(prefix)
    if raw is None:
        return {}
    try:
        meta = _parse_meta(raw, prefix)
    except MemmapLoadError:
        return {}
    out = {}
    for entry in _iter_tensor_entries(meta["root"]):
        out[os.path.normpath(os.path.join(prefix, entry["file"]))] = entry["nbytes"]
    return out


# --------------------------------------------------------------------------------------------- #
# memmap_: plan (validate everything, see tdict._io.memmap_layout), write, commit, rebuild
# --------------------------------------------------------------------------------------------- #


def _refuse_symlinked_dirs(prefix: str, rel: str) -> None:
    """Raise if a directory on the way from ``prefix`` to the file ``rel`` is a symbolic link: files are
    never written through one (it may point anywhere); ``prefix`` itself is the caller's choice."""
    current = prefix
    rel_dir = os.path.dirname(rel)
    for part in rel_dir.split(os.sep) if rel_dir else ():
        current = os.path.join(current, part)
        if os.path.islink(current):
            raise SymlinkError(
                f"{current!r} is a symbolic link (to {os.readlink(current)!r}); refusing to write a memory-mapped "
                f"TensorDict through symlink (the file {rel!r} would land in it): remove it or pass another prefix."
            )


def _write(node: _Node, prefix: str, like: bool, created: list, dirs: set, fsync: bool) -> dict:
    """Write the leaves of ``node``; return its metadata (JSON-able)."""
    if node.meta["type"] == _LAZY:
        return dict(
            node.meta, members=[_write(member, prefix, like, created, dirs, fsync) for _, member in node.entries]
        )
    if node.meta["type"] in _NON_TENSOR:  # a non-tensor root, encoded by the plan
        return node.meta
    entries = []
    for key, item in node.entries:
        if isinstance(item, _Leaf):
            src, rel = item.src, item.rel
            assert rel is not None  # planned with a prefix: every leaf has its file
            if item.reuse:
                item.out = src
            else:
                path = os.path.join(prefix, rel)
                parent = os.path.dirname(path)
                if parent not in dirs:
                    _refuse_symlinked_dirs(prefix, rel)
                    os.makedirs(parent, exist_ok=True)
                    while parent not in dirs:  # new sub-directories: their entries must be fsynced too
                        dirs.add(parent)
                        parent = os.path.dirname(parent)
                created.append(path)
                if like:
                    item.out = MemoryMappedTensor.empty_like(src, filename=path)
                else:
                    item.out = MemoryMappedTensor.from_tensor(src, filename=path, copy_existing=True)
                if fsync:
                    item.out.flush()
            entries.append(
                [
                    key,
                    {
                        "type": "tensor",
                        "file": rel.replace(os.sep, "/"),
                        "dtype": _dtype_name(src.dtype),
                        "shape": list(src.shape),
                        "nbytes": src.numel() * src.dtype.itemsize,
                        "device": str(src.device),
                    },
                ]
            )
        elif isinstance(item, _Node):
            entries.append([key, _write(item, prefix, like, created, dirs, fsync)])
        else:
            entries.append([key, _encode_non_tensor(item, key)])
    meta = dict(node.meta)
    meta["entries"] = entries
    return meta


def _fill_anonymous(node: _Node, like: bool) -> None:
    for _, item in node.entries:
        if isinstance(item, _Leaf):
            if item.reuse:
                item.out = item.src
            elif like:
                item.out = MemoryMappedTensor.empty_like(item.src)
            else:
                item.out = MemoryMappedTensor.from_tensor(item.src, copy_existing=True)
        elif isinstance(item, _Node):
            _fill_anonymous(item, like)


def _build(node: _Node) -> Any:
    """A new collection with the memmapped leaves (non-tensor entries are shared)."""
    from .tensordict import TensorDict

    if node.meta["type"] in _NON_TENSOR:
        return node.src.copy()
    if node.meta["type"] == _LAZY:
        from .lazy import LazyStackedTensorDict

        return LazyStackedTensorDict._new_unsafe(
            [_build(m) for _, m in node.entries],
            node.meta["stack_dim"],
            node.src.batch_size,
            node.meta["stack_dim_name"],
        )
    entries = {}
    for key, item in node.entries:
        if isinstance(item, _Leaf):
            entries[key] = item.out
        elif isinstance(item, _Node):
            entries[key] = _build(item)
        else:
            entries[key] = item
    device = node.src.device
    if device is not None and device.type != "cpu":
        device = torch.device("cpu")  # memory-mapped tensors live on the CPU
    td = TensorDict._new_unsafe(entries, node.src.batch_size, device, node.meta["names"])
    return _wrap_tensorclass(node.tc_class, td) if node.tc_class is not None else td


def _apply_inplace(node: _Node) -> None:
    content = node.content  # None for a lazy stack, whose entries are all member nodes
    for key, item in node.entries:
        if isinstance(item, _Leaf):
            if item.out is not item.src:
                content._set_str(key, item.out, inplace=False, validated=True, ignore_lock=True)
        elif isinstance(item, _Node):
            _apply_inplace(item)


def _check_inplace_devices(node: _Node) -> None:
    device = node.src.device
    if device is not None and device.type != "cpu":
        raise RuntimeError(
            f"memmap_ (in place) of a collection on {device}: memory-mapped tensors live on the CPU. "
            "Use td.memmap() (returns a CPU copy) or td.cpu().memmap_()."
        )
    for _, item in node.entries:
        if isinstance(item, _Node):
            _check_inplace_devices(item)


def memmap_(
    td: Any,
    prefix: Any = None,
    *,
    copy_existing: bool = False,
    existsok: bool = True,
    inplace: bool = True,
    like: bool = False,
    fsync: bool = False,
) -> Any:
    """Write every tensor leaf of ``td`` to memory-mapped storage (crash-safe, see the module doc).

    Args:
        td: the collection.
        prefix: directory to write; ``None`` uses anonymous shared memory (no files).
        copy_existing: copy leaves that are memory-mapped elsewhere (else ``RuntimeError``).
        existsok: overwrite a collection already saved at ``prefix`` (else ``FileExistsError``).
        inplace: replace the leaves of ``td`` with the memory-mapped ones and lock it; otherwise
            return a new locked collection and leave ``td`` untouched.
        like: allocate only (contents of new files read as zeros), see :func:`memmap_like`.
        fsync: also survive an OS crash or power loss (fsync data, directories and metadata
            before the commit); a killed process never leaves a partial state either way.

    Returns:
        ``td`` itself (``inplace``) or the new collection.
    """
    token = secrets.token_hex(8)
    path = None if prefix is None else _as_prefix(prefix)
    if path is not None and os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"prefix {path!r} exists and is not a directory.")
    if path is None:
        plan = _plan(td, None, "", (), copy_existing=copy_existing, like=like, committed={}, token=token, taken=set())
        if inplace:
            _check_inplace_devices(plan)
        _fill_anonymous(plan, like)
    else:
        os.makedirs(path, exist_ok=True)
        with _locked(path):
            committed = _committed_files(path)
            if not existsok and _read_meta_bytes(path) is not None:
                raise FileExistsError(f"a collection is already saved at {path!r}; pass existsok=True to overwrite it.")
            plan = _plan(
                td, path, "", (), copy_existing=copy_existing, like=like, committed=committed, token=token, taken=set()
            )
            if inplace:
                _check_inplace_devices(plan)
            _commit(plan, path, token, like, fsync)
    if inplace:
        _apply_inplace(plan)
        td.lock_()
        return td
    out = _build(plan)
    out.lock_()
    return out


def _commit(plan: _Node, prefix: str, token: str, like: bool, fsync: bool) -> None:
    created: list[str] = []
    dirs: set[str] = {prefix}
    tmp = os.path.join(prefix, f"{_TMP_PREFIX}{token}.tmp")
    try:
        root = _write(plan, prefix, like, created, dirs, fsync)
        if fsync:  # the directory entries of the new files must be durable before the metadata names them
            for d in sorted(dirs, key=len, reverse=True):
                fsync_path(d)
        meta = {"format": FORMAT, "version": VERSION, "token": token, "root": root}
        meta["sha256"] = metadata_checksum(meta)
        data = json.dumps(meta, separators=(",", ":"), allow_nan=False).encode("utf-8")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(prefix, META_NAME))  # the commit
    except BaseException:
        # nothing was committed: remove what this write created; the old state is untouched
        for p in created + [tmp]:
            with contextlib.suppress(OSError):
                os.unlink(p)
        raise
    if fsync:
        fsync_path(prefix)
    keep = {os.path.normpath(os.path.join(prefix, e["file"])) for e in _iter_tensor_entries(root)}
    _collect_garbage(prefix, keep)


def _collect_garbage(prefix: str, keep: set[str]) -> None:
    """Delete leaf files of older writes and temp files of interrupted ones (under the lock).

    Only names this module writes are touched (``*.<16 hex>.memmap`` and the metadata temp
    files); a directory is removed only when these deletions left it empty.
    """
    touched: set[str] = set()
    for root, _, filenames in os.walk(prefix, topdown=False):  # children before parents
        for name in filenames:
            full = os.path.normpath(os.path.join(root, name))
            stale_tmp = root == prefix and name.startswith(_TMP_PREFIX) and name.endswith(".tmp")
            if stale_tmp or (_TOKEN_RE.search(name) and full not in keep):
                with contextlib.suppress(OSError):
                    os.unlink(full)
                    touched.add(root)
        if root != prefix and root in touched:
            with contextlib.suppress(OSError):
                os.rmdir(root)  # fails (and is skipped) unless empty
                touched.add(os.path.dirname(root))


def memmap(
    td: Any, prefix: Any = None, *, copy_existing: bool = False, existsok: bool = True, fsync: bool = False
) -> Any:
    """Module-level :meth:`TensorDictBase.memmap`: a memory-mapped copy of ``td`` (``td`` untouched)."""
    return memmap_(td, prefix, copy_existing=copy_existing, existsok=existsok, inplace=False, fsync=fsync)


def memmap_like(td: Any, prefix: Any = None, existsok: bool = True) -> Any:
    """A new locked collection with ``td``'s structure, memory-mapped leaves of the same shapes
    and dtypes, and uninitialised contents (new files read as zeros). Non-tensor entries are kept."""
    return memmap_(td, prefix, copy_existing=True, existsok=existsok, inplace=False, like=True)


def save(td: Any, prefix: Any, *, copy_existing: bool = False, existsok: bool = True, fsync: bool = False) -> Any:
    """Save ``td`` to ``prefix`` (the memmap layout); returns ``td`` unchanged."""
    if prefix is None:
        raise TypeError("save needs a prefix (a directory path), got None.")
    memmap_(td, prefix, copy_existing=copy_existing, existsok=existsok, inplace=False, fsync=fsync)
    return td


# --------------------------------------------------------------------------------------------- #
# load_memmap (validation and rebuilding: tdict._io.memmap_load)
# --------------------------------------------------------------------------------------------- #


def load_memmap(prefix: Any, device: Any = None, non_blocking: bool = False, *, out: Any = None) -> Any:
    """Open a collection saved by ``memmap_``/``memmap``/``save`` (never unpickles).

    Leaves are ``MemoryMappedTensor``\\ s mapping the saved files (writes go to the files);
    ``device`` moves them (a copy). ``out``, if given, receives the values in place
    (``out.update_(loaded)``) and is returned.

    Raises:
        FileNotFoundError: ``prefix`` does not exist.
        MemmapLoadError: metadata missing, not JSON, of another format or version, or a data
            file missing, outside ``prefix`` or of the wrong size.
    """
    path = _as_prefix(prefix)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"cannot load a memmapped collection: {path!r} is not a directory.")
    for attempt in range(3):
        raw = _read_meta_bytes(path)
        if raw is None:
            hint = (
                " (it holds tensordict's meta.json: tdict does not read tensordict's format)"
                if os.path.exists(os.path.join(path, "meta.json"))
                else ""
            )
            raise _bad(
                path,
                f"{META_NAME} is missing: this is not a tdict memmap directory, or its first write "
                f"was interrupted before committing{hint}.",
            )
        meta = _parse_meta(raw, path)
        try:
            td = _load_node(meta["root"], path, (), os.path.realpath(path))
            break
        except MemmapLoadError:
            # a concurrent writer may have committed and removed the old files meanwhile
            if attempt == 2 or _read_meta_bytes(path) == raw:
                raise
    if device is not None:
        td = td.to(parse_device(device), non_blocking=non_blocking)
    if out is not None:
        out.update_(td)
        return out
    return td


load = load_memmap
