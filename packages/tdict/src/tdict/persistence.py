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
non-tensor payloads (as tagged JSON, see :func:`encode_payload`) and the import path of
tensorclasses. Readers look only at the files that ``tdict_meta.json`` names.

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

:func:`load_memmap` never unpickles: it parses the JSON, checks the format and version,
checks that every named file is inside ``prefix`` and has exactly the expected size, and raises
:class:`MemmapLoadError` (naming the path and the problem) for missing or bad metadata and
missing or short files. Non-tensor payloads must be JSON-able (str, numbers, bools, None,
lists, tuples, dicts, bytes); anything else raises ``TypeError`` before anything is written.
Tensorclasses are re-created from their recorded ``module:qualname`` only when that module
is already imported (loading never imports a module named in a file).

State dicts (:func:`state_dict` / :func:`load_state_dict`, implemented in ``tdict._state_dict``) are plain (nested, or flat with
``"."`` keys) dicts of tensors plus ``"__batch_size"`` / ``"__device"`` entries per level, which
round-trip through ``torch.save`` / ``torch.load(weights_only=True)``.

Example:
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

import base64
import contextlib
import errno
import hashlib
import json
import math
import os
import re
import secrets
import sys
from typing import Any, Iterator

import torch

from ._state_dict import load_state_dict, state_dict  # noqa: F401  (re-exported; base.py delegates here)
from ._utils import parse_device
from .base import is_tensor_collection
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
    "save",
    "state_dict",
]

FORMAT = "tdict.memmap"
VERSION = 1
META_NAME = "tdict_meta.json"
LOCK_NAME = ".tdict.lock"
_TMP_PREFIX = "." + META_NAME + "."
_TOKEN_RE = re.compile(r"\.[0-9a-f]{16}\.memmap\Z")
_MAX_META_BYTES = 1 << 30
_LAZY = "LazyStackedTensorDict"


class MemmapLoadError(RuntimeError):
    """A memmapped directory cannot be loaded: missing or corrupt metadata, missing or short files."""


# --------------------------------------------------------------------------------------------- #
# JSON payloads of non-tensor entries
# --------------------------------------------------------------------------------------------- #


def encode_payload(obj: Any, where: str = "payload") -> Any:
    """Encode a Python object as JSON-able data, losslessly, or raise ``TypeError``.

    ``None``, bools, ints, finite or non-finite floats and strings stay as they are; lists
    stay lists; tuples, dicts (any JSON-able hashable keys) and bytes become one-key tagged
    objects (``{"tuple": [...]}``, ``{"dict": [[k, v], ...]}``, ``{"bytes": "<base64>"}``,
    ``{"float": "nan"}``), so that every JSON object in the output is a tag.

    Example:
        >>> decode_payload(encode_payload({"a": (1, 2.5), 3: [None, b"x"]}))
        {'a': (1, 2.5), 3: [None, b'x']}
    """
    kind = type(obj)
    if obj is None or kind is bool or kind is int or kind is str:
        return obj
    if kind is float:
        return obj if math.isfinite(obj) else {"float": repr(obj)}
    if kind is list:
        return [encode_payload(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if kind is tuple:
        return {"tuple": [encode_payload(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
    if kind is dict:
        return {"dict": [[encode_payload(k, f"{where} key"), encode_payload(v, f"{where}[{k!r}]")] for k, v in obj.items()]}
    if kind is bytes:
        return {"bytes": base64.b64encode(obj).decode("ascii")}
    raise TypeError(
        f"{where}: cannot store a {kind.__module__}.{kind.__qualname__} as JSON (allowed: None, bool, int, "
        "float, str, bytes and lists, tuples and dicts of those). tdict never pickles saved data: convert "
        "the value to one of these types or to a tensor, or exclude the key before saving."
    )


def decode_payload(obj: Any, where: str = "payload") -> Any:
    """Inverse of :func:`encode_payload`; raises ``ValueError`` on anything it did not produce."""
    kind = type(obj)
    if obj is None or kind is bool or kind is int or kind is str or kind is float:
        return obj
    if kind is list:
        return [decode_payload(v, where) for v in obj]
    if kind is dict and len(obj) == 1:
        (tag, value), = obj.items()
        if tag == "tuple" and type(value) is list:
            return tuple(decode_payload(v, where) for v in value)
        if tag == "dict" and type(value) is list and all(type(p) is list and len(p) == 2 for p in value):
            try:
                return {decode_payload(k, where): decode_payload(v, where) for k, v in value}
            except TypeError as err:  # unhashable key
                raise ValueError(f"{where}: bad dict key in encoded payload ({err})") from None
        if tag == "bytes" and type(value) is str:
            try:
                return base64.b64decode(value.encode("ascii"), validate=True)
            except ValueError as err:
                raise ValueError(f"{where}: bad base64 in encoded payload ({err})") from None
        if tag == "float" and value in ("nan", "inf", "-inf"):
            return float(value)
    raise ValueError(f"{where}: not an encoded payload: {str(obj)[:200]!r}")


# --------------------------------------------------------------------------------------------- #
# names: dtypes, devices, files, classes
# --------------------------------------------------------------------------------------------- #


def _dtype_table() -> dict[str, torch.dtype]:
    table = {}
    for name in dir(torch):
        value = getattr(torch, name, None)
        if isinstance(value, torch.dtype):
            table[str(value).removeprefix("torch.")] = value
    return table


_DTYPES = _dtype_table()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _escape(key: str) -> str:
    """A file-name-safe, injective rendering of ``key`` (``"a.b"`` -> ``"a%2Eb"``)."""
    out = []
    for ch in key:
        if ch.isascii() and (ch.isalnum() or ch in "_-"):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    name = "".join(out) or "%"
    if len(name) > 120:  # keep well below the usual 255-byte limit once the token is added
        name = name[:80] + "~" + hashlib.sha1(key.encode("utf-8")).hexdigest()
    return name


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve_class(path: str, where: str) -> type:
    """The class at ``module:qualname``, from an *already imported* module only."""
    module_name, _, qualname = path.partition(":")
    module = sys.modules.get(module_name)
    if module is None:
        raise MemmapLoadError(
            f"{where}: the saved collection is a {path!r}, but module {module_name!r} is not imported; "
            f"import it before loading (tdict never imports a module named in a file)."
        )
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if not isinstance(obj, type) or not getattr(obj, "_is_tensorclass", False):
        raise MemmapLoadError(f"{where}: {path!r} does not name a tensorclass in the imported module {module_name!r}.")
    return obj


def _is_tensorclass(obj: Any) -> bool:
    return getattr(type(obj), "_is_tensorclass", False)


def _is_non_tensor(obj: Any) -> bool:
    return not isinstance(obj, torch.Tensor) and is_tensor_collection(obj) and type(obj)._is_non_tensor


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as err:  # some filesystems refuse fsync on directories
        if err.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


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
        raise TypeError(f"prefix must be a str or os.PathLike (or None), got {type(prefix).__name__}: {prefix!r}") from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return os.path.abspath(path)


def _read_meta_bytes(prefix: str) -> bytes | None:
    path = os.path.join(prefix, META_NAME)
    try:
        with open(path, "rb") as f:
            return f.read(_MAX_META_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as err:  # a directory, no permission, I/O error
        raise _bad(prefix, f"cannot read {path!r}: {err}") from None


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


def _iter_tensor_entries(node: dict) -> Iterator[dict]:
    if node["type"] == _LAZY:
        for member in node["members"]:
            yield from _iter_tensor_entries(member)
        return
    for _, entry in node["entries"]:
        kind = entry["type"]
        if kind == "tensor":
            yield entry
        elif kind in ("TensorDict", "tensorclass", _LAZY):
            yield from _iter_tensor_entries(entry)


# --------------------------------------------------------------------------------------------- #
# memmap_: plan (validate everything), write, commit, rebuild
# --------------------------------------------------------------------------------------------- #


class _Leaf:
    __slots__ = ("src", "rel", "reuse", "out")

    def __init__(self, src: torch.Tensor, rel: str | None, reuse: bool):
        self.src, self.rel, self.reuse, self.out = src, rel, reuse, None


class _Node:
    __slots__ = ("src", "content", "entries", "meta", "tc_class")

    def __init__(self, src: Any, content: Any, meta: dict, tc_class: type | None):
        self.src, self.content, self.meta, self.tc_class = src, content, meta, tc_class
        self.entries: list[tuple[str, Any]] = []  # (key, _Leaf | _Node | non-tensor object)


def _content_of(collection: Any) -> Any:
    """The TensorDict that holds a collection's entries (a tensorclass wraps one)."""
    return collection._tensordict if _is_tensorclass(collection) else collection


def _device_str(device: Any) -> str | None:
    return None if device is None else str(device)


def _plan(td: Any, prefix: str | None, rel_dir: str, path: tuple, *, copy_existing: bool, like: bool,
          committed: dict[str, int], token: str, taken: set) -> _Node:
    tc_class = None
    if _is_tensorclass(td):
        tc_class = type(td)
        if prefix is not None and "<locals>" in tc_class.__qualname__:
            raise TypeError(
                f"key {path or '<root>'!r}: tensorclass {_class_path(tc_class)!r} is defined inside a function; "
                "it could not be found again when loading. Define it at module level."
            )
    elif getattr(td, "_is_lazy", False) and hasattr(td, "tensordicts"):
        # a lazy stack: its members in sub-directories 0, 1, ... of its own directory
        meta = {"type": _LAZY, "stack_dim": td.stack_dim, "batch_size": list(td.batch_size),
                "stack_dim_name": getattr(td, "_stack_dim_name", None)}
        node = _Node(td, None, meta, None)
        for i, member in enumerate(td.tensordicts):
            sub_dir = os.path.join(rel_dir, str(i)) if rel_dir else str(i)
            node.entries.append((str(i), _plan(member, prefix, sub_dir, path + (i,), copy_existing=copy_existing, like=like,
                                               committed=committed, token=token, taken=taken)))
        return node
    elif getattr(td, "_is_lazy", False) or not hasattr(td, "_items_raw"):
        raise TypeError(
            f"key {path or '<root>'!r}: memmap does not support {type(td).__name__} entries yet "
            "(supported: TensorDict, tensorclasses, tensors and non-tensor data)."
        )
    content = _content_of(td)
    meta = {
        "type": "tensorclass" if tc_class is not None else "TensorDict",
        "batch_size": list(td.batch_size),
        "device": _device_str(td.device),
        "names": content._maybe_names() if hasattr(content, "_maybe_names") else None,
    }
    if meta["names"] is not None:
        meta["names"] = list(meta["names"])
    if tc_class is not None:
        meta["class"] = _class_path(tc_class)
    node = _Node(td, content, meta, tc_class)
    for key, value in content._items_raw():
        full = path + (key,)
        if isinstance(value, torch.Tensor):
            node.entries.append((key, _plan_leaf(value, prefix, rel_dir, key, full, copy_existing, like, committed, token, taken)))
        elif _is_non_tensor(value):
            if prefix is not None:  # validate now, before any write
                _encode_non_tensor(value, f"key {full!r}")
            node.entries.append((key, value))
        elif is_tensor_collection(value):
            sub_dir = os.path.join(rel_dir, _escape(key)) if rel_dir else _escape(key)
            node.entries.append((key, _plan(value, prefix, sub_dir, full, copy_existing=copy_existing, like=like,
                                            committed=committed, token=token, taken=taken)))
        else:
            raise TypeError(f"key {full!r}: cannot memmap an entry of type {type(value).__name__}.")
    return node


def _plan_leaf(value: torch.Tensor, prefix, rel_dir, key, full, copy_existing, like, committed, token, taken) -> _Leaf:
    if value.layout != torch.strided or value.is_nested:
        raise TypeError(f"key {full!r}: only dense (strided) tensors can be memory-mapped, got layout {value.layout}.")
    if value.is_meta:
        raise TypeError(f"key {full!r}: a meta tensor has no data to memory-map.")
    own = value.filename if isinstance(value, MemoryMappedTensor) else None
    if prefix is None:
        # anonymous shared memory: tensors that are already memory-mapped stay as they are
        return _Leaf(value, None, isinstance(value, MemoryMappedTensor) and not like)
    if own is not None and not like:
        own = os.path.normpath(own)
        size = committed.get(own)
        if size is not None and value.storage_offset() == 0 and value.is_contiguous() and value.numel() * value.dtype.itemsize == size:
            return _Leaf(value, os.path.relpath(own, prefix), True)
        if not copy_existing and size is None:
            raise RuntimeError(
                f"key {full!r}: the tensor is already memory-mapped at {own!r}, outside {prefix!r}; pass "
                "copy_existing=True to copy it there."
            )
    name = _escape(key)
    rel = os.path.join(rel_dir, f"{name}.{token}.memmap") if rel_dir else f"{name}.{token}.memmap"
    if rel.casefold() in taken:
        # escaping is injective, but "Obs" and "obs" are one file on a case-insensitive filesystem
        digest = hashlib.sha1(repr(full).encode("utf-8")).hexdigest()[:16]
        rel = os.path.join(rel_dir, f"{name}~{digest}.{token}.memmap") if rel_dir else f"{name}~{digest}.{token}.memmap"
    taken.add(rel.casefold())
    return _Leaf(value, rel, False)


def _write(node: _Node, prefix: str, like: bool, created: list, dirs: set, fsync: bool) -> dict:
    """Write the leaves of ``node``; return its metadata (JSON-able)."""
    if node.meta["type"] == _LAZY:
        return dict(node.meta, members=[_write(member, prefix, like, created, dirs, fsync) for _, member in node.entries])
    entries = []
    for key, item in node.entries:
        if isinstance(item, _Leaf):
            src = item.src
            if item.reuse:
                item.out = src
            else:
                path = os.path.join(prefix, item.rel)
                parent = os.path.dirname(path)
                if parent not in dirs:
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
            entries.append([key, {
                "type": "tensor",
                "file": item.rel.replace(os.sep, "/"),
                "dtype": _dtype_name(src.dtype),
                "shape": list(src.shape),
                "nbytes": src.numel() * src.dtype.itemsize,
                "device": str(src.device),
            }])
        elif isinstance(item, _Node):
            entries.append([key, _write(item, prefix, like, created, dirs, fsync)])
        else:
            entries.append([key, _encode_non_tensor(item, key)])
    meta = dict(node.meta)
    meta["entries"] = entries
    return meta


def _encode_non_tensor(value: Any, where: str) -> dict:
    if getattr(value, "_is_lazy", False):  # NonTensorStack: ids of the batch shape into a payload table
        origins, table = value._compact()
        return {
            "type": "non_tensor_stack",
            "origins": origins.reshape(-1).tolist(),
            "shape": list(origins.shape),
            "table": [encode_payload(p, where) for p in table],
            "device": _device_str(value.device),
        }
    return {
        "type": "non_tensor",
        "data": encode_payload(value.data, where),
        "batch_size": list(value.batch_size),
        "device": _device_str(value.device),
    }


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

    if node.meta["type"] == _LAZY:
        from .lazy import LazyStackedTensorDict

        return LazyStackedTensorDict._new_unsafe([_build(m) for _, m in node.entries], node.meta["stack_dim"],
                                                 node.src.batch_size, node.meta["stack_dim_name"])
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


def _wrap_tensorclass(cls: type, td: Any) -> Any:
    return cls._from_tensordict(td)


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


def memmap_(td: Any, prefix: Any = None, *, copy_existing: bool = False, existsok: bool = True,
            inplace: bool = True, like: bool = False, fsync: bool = False) -> Any:
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
            plan = _plan(td, path, "", (), copy_existing=copy_existing, like=like, committed=committed, token=token, taken=set())
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
                _fsync_path(d)
        meta = {"format": FORMAT, "version": VERSION, "token": token, "root": root}
        data = json.dumps(meta, separators=(",", ":"), allow_nan=False).encode("utf-8")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
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
        _fsync_path(prefix)
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


def memmap(td: Any, prefix: Any = None, *, copy_existing: bool = False, existsok: bool = True, fsync: bool = False) -> Any:
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
# load_memmap
# --------------------------------------------------------------------------------------------- #


def _bad(prefix: str, what: str) -> MemmapLoadError:
    return MemmapLoadError(f"cannot load the memmapped collection at {prefix!r}: {what}")


def _parse_meta(raw: bytes, prefix: str) -> dict:
    if len(raw) > _MAX_META_BYTES:
        raise _bad(prefix, f"{META_NAME} is larger than {_MAX_META_BYTES} bytes.")
    try:
        text = raw.decode("utf-8")
        meta = json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as err:
        raise _bad(prefix, f"{META_NAME} is not valid JSON ({type(err).__name__}: {err}); the file is corrupt "
                           "or was not written by tdict.") from None
    if type(meta) is not dict:
        raise _bad(prefix, f"{META_NAME} holds a JSON {type(meta).__name__}, expected an object.")
    if meta.get("format") != FORMAT:
        raise _bad(prefix, f"{META_NAME} has format {meta.get('format')!r}, expected {FORMAT!r}.")
    if meta.get("version") != VERSION:
        raise _bad(prefix, f"{META_NAME} has format version {meta.get('version')!r}; this tdict reads version {VERSION}.")
    _check_node(meta.get("root"), prefix, ())
    return meta


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _is_int_list(x: Any) -> bool:
    return type(x) is list and all(type(d) is int and d >= 0 for d in x)


def _check_node(node: Any, prefix: str, path: tuple) -> None:
    where = f"entry {path!r}" if path else "the root"
    if type(node) is dict and node.get("type") == _LAZY:
        members, bs, sd = node.get("members"), node.get("batch_size"), node.get("stack_dim")
        if not (type(members) is list and _is_int_list(bs) and type(sd) is int and 0 <= sd < len(bs) and bs[sd] == len(members)
                and (node.get("stack_dim_name") is None or type(node.get("stack_dim_name")) is str)):
            raise _bad(prefix, f"{where}: malformed lazy stack metadata.")
        member_bs = bs[:sd] + bs[sd + 1:]
        for i, member in enumerate(members):
            _check_node(member, prefix, path + (i,))
            if member["batch_size"] != member_bs:
                raise _bad(prefix, f"entry {path + (i,)!r}: member batch size {member['batch_size']} does not fit the stack {bs}.")
        return
    if type(node) is not dict or node.get("type") not in ("TensorDict", "tensorclass"):
        raise _bad(prefix, f"{where}: malformed collection metadata.")
    if not _is_int_list(node.get("batch_size")):
        raise _bad(prefix, f"{where}: malformed batch_size {node.get('batch_size')!r}.")
    if not (node.get("device") is None or type(node.get("device")) is str):
        raise _bad(prefix, f"{where}: malformed device {node.get('device')!r}.")
    names = node.get("names")
    if not (names is None or (type(names) is list and len(names) == len(node["batch_size"])
                              and all(n is None or type(n) is str for n in names))):
        raise _bad(prefix, f"{where}: malformed names {names!r}.")
    if node["type"] == "tensorclass" and type(node.get("class")) is not str:
        raise _bad(prefix, f"{where}: tensorclass without a class path.")
    entries = node.get("entries")
    if type(entries) is not list:
        raise _bad(prefix, f"{where}: malformed entries.")
    bs = node["batch_size"]
    for pair in entries:
        if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str or type(pair[1]) is not dict:
            raise _bad(prefix, f"{where}: malformed entry {str(pair)[:100]!r}.")
        key, entry = pair
        full = path + (key,)
        kind = entry.get("type")
        if kind == "tensor":
            dtype, shape, nbytes, file = entry.get("dtype"), entry.get("shape"), entry.get("nbytes"), entry.get("file")
            if dtype not in _DTYPES:
                raise _bad(prefix, f"entry {full!r}: unknown dtype {dtype!r}.")
            if not _is_int_list(shape) or shape[: len(bs)] != bs:
                raise _bad(prefix, f"entry {full!r}: malformed shape {shape!r} for batch size {bs}.")
            if nbytes != math.prod(shape) * _DTYPES[dtype].itemsize:
                raise _bad(prefix, f"entry {full!r}: nbytes {nbytes!r} does not match shape {shape} and dtype {dtype}.")
            if type(file) is not str or not file or file.startswith("/") or "\\" in file or ".." in file.split("/") or "\0" in file:
                raise _bad(prefix, f"entry {full!r}: bad file name {str(file)[:200]!r} (must be relative, inside the prefix).")
        elif kind == "non_tensor":
            if not _is_int_list(entry.get("batch_size")) or "data" not in entry:
                raise _bad(prefix, f"entry {full!r}: malformed non-tensor metadata.")
        elif kind == "non_tensor_stack":
            shape, origins, table = entry.get("shape"), entry.get("origins"), entry.get("table")
            if not (_is_int_list(shape) and _is_int_list(origins) and type(table) is list and len(origins) == math.prod(shape)
                    and all(i < len(table) for i in origins)):
                raise _bad(prefix, f"entry {full!r}: malformed non-tensor stack metadata.")
        elif kind in ("TensorDict", "tensorclass", _LAZY):
            _check_node(entry, prefix, full)
            if entry["batch_size"][: len(bs)] != bs:
                raise _bad(prefix, f"entry {full!r}: batch size {entry['batch_size']} does not start with {bs}.")
        else:
            raise _bad(prefix, f"entry {full!r}: unknown entry type {kind!r}.")


def _load_node(node: dict, prefix: str, path: tuple, real: str) -> Any:
    from .tensordict import TensorDict

    if node["type"] == _LAZY:
        from .lazy import LazyStackedTensorDict

        members = [_load_node(m, prefix, path + (i,), real) for i, m in enumerate(node["members"])]
        return LazyStackedTensorDict._new_unsafe(members, node["stack_dim"], torch.Size(node["batch_size"]), node["stack_dim_name"])
    entries = {}
    bs = torch.Size(node["batch_size"])
    device = None if node["device"] is None else torch.device("cpu")
    for key, entry in node["entries"]:
        full = path + (key,)
        kind = entry["type"]
        if kind == "tensor":
            entries[key] = _load_leaf(entry, prefix, full, real)
        elif kind == "non_tensor":
            try:
                data = decode_payload(entry["data"], f"entry {full!r}")
            except ValueError as err:
                raise _bad(prefix, str(err)) from None
            from .non_tensor import NonTensorData

            entries[key] = NonTensorData(data=data, batch_size=entry["batch_size"], device=device)
        elif kind == "non_tensor_stack":
            from .non_tensor import NonTensorStack

            try:
                table = [decode_payload(p, f"entry {full!r}") for p in entry["table"]]
            except ValueError as err:
                raise _bad(prefix, str(err)) from None
            origins = torch.tensor(entry["origins"], dtype=torch.long).reshape(entry["shape"])
            entries[key] = NonTensorStack._new(origins, table, device)
        else:
            entries[key] = _load_node(entry, prefix, full, real)
    td = TensorDict._new_unsafe(entries, bs, device, node["names"])
    if node["type"] == "tensorclass":
        try:
            cls = _resolve_class(node["class"], f"entry {path!r}" if path else "the root")
        except MemmapLoadError as err:
            raise _bad(prefix, str(err)) from None
        return _wrap_tensorclass(cls, td)
    return td


def _load_leaf(entry: dict, prefix: str, full: tuple, real_prefix: str) -> MemoryMappedTensor:
    path = os.path.normpath(os.path.join(prefix, *entry["file"].split("/")))
    if os.path.commonpath([path, prefix]) != prefix:
        raise _bad(prefix, f"entry {full!r}: file {entry['file']!r} is outside the prefix.")
    try:
        if os.path.commonpath([os.path.realpath(path), real_prefix]) != real_prefix:
            raise _bad(prefix, f"entry {full!r}: file {entry['file']!r} links outside the prefix.")
        st = os.stat(path)
    except FileNotFoundError:
        raise _bad(prefix, f"entry {full!r}: data file {path!r} is missing.") from None
    if not os.path.isfile(path):
        raise _bad(prefix, f"entry {full!r}: {path!r} is not a regular file.")
    if st.st_size != entry["nbytes"]:
        raise _bad(prefix, f"entry {full!r}: data file {path!r} has {st.st_size} bytes, expected {entry['nbytes']} "
                           f"(shape {entry['shape']}, dtype {entry['dtype']}); it is truncated or not ours.")
    return MemoryMappedTensor.from_filename(path, _DTYPES[entry["dtype"]], entry["shape"])


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
            hint = " (it holds tensordict's meta.json: tdict does not read tensordict's format)" if os.path.exists(os.path.join(path, "meta.json")) else ""
            raise _bad(path, f"{META_NAME} is missing: this is not a tdict memmap directory, or its first write "
                             f"was interrupted before committing{hint}.")
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
