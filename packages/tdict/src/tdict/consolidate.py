"""Consolidation: every leaf of a collection as a view into ONE contiguous byte storage.

``td.consolidate()`` copies the leaves into a single ``uint8`` tensor (each leaf at an offset
aligned to ``max(8, itemsize)`` bytes, row-major) and returns a locked copy of ``td`` whose leaves
are views into it; the root keeps ``td._consolidated = {"storage": <the uint8 storage>, "metadata": <the
structure>}`` (as tensordict does). Such a collection:

* pickles as one storage plus a small structure description (``TensorDict.__getstate__`` asks
  :func:`_getstate`), so ``pickle`` copies one buffer and ``multiprocessing`` passes one
  shared-memory handle instead of one per leaf; the receiver rebuilds the views, still
  consolidated;
* moves with one copy: ``td.to(device)`` copies the storage and rebuilds the views;
* with ``filename=`` lives in one memory-mapped file, written crash-safely (temp file, ``fsync``,
  atomic rename) in this layout::

      [leaf bytes ... (data_nbytes)][metadata JSON (utf-8)][JSON length: 8 bytes LE][b"TDCONS01"]

  :func:`from_consolidated` maps it back (no pickle: the metadata is JSON, non-tensor payloads use
  :func:`tdict.persistence.encode_payload`).

Writes through the leaves (``td["a"][0] = 1``, ``td.set_``) land in the storage, so they travel
too. The structure is locked; ``unlock_()`` ends the consolidation (as in tensordict): the
collection keeps its leaves but pickles and moves leaf by leaf again. If a leaf is swapped
another way, :func:`is_consolidated` notices too (it checks that every leaf still is the view it
was).

Examples:
    >>> import torch
    >>> from tdict import TensorDict
    >>> td = TensorDict({"a": torch.zeros(3), "b": {"c": torch.ones(3, dtype=torch.int8)}}, [3])
    >>> c = td.consolidate()
    >>> c.is_consolidated(), c["a"].untyped_storage().data_ptr() == c["b", "c"].untyped_storage().data_ptr()
    (True, True)
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch

from ._core.utils import content_of, parse_device
from .base import is_tensor_collection
from .metadata import _class_from_tag, _metadata_tag
from .unbatched import UNBATCHED_TYPES, _unbatched_error
from .files import atomic_write_to
from .memmap import MemoryMappedTensor

__all__ = ["consolidate", "from_consolidated", "is_consolidated"]

_MAGIC = b"TDCONS01"
_LAZY = "LazyStackedTensorDict"
_TRAILER = 16
_FILE_VERSION = 1


class _NotConsolidated(Exception):
    pass


def _align(offset: int, dtype: torch.dtype) -> int:
    step = max(8, dtype.itemsize)
    return -(-offset // step) * step


def _is_tensorclass(obj: Any) -> bool:
    return getattr(type(obj), "_is_tensorclass", False)


# --------------------------------------------------------------------------------------------- #
# describing a tree
# --------------------------------------------------------------------------------------------- #


def _walk(td: Any, on_leaf: Any, path: tuple) -> dict:
    """The structure of ``td``; ``on_leaf(tensor, key path)`` gives each leaf's byte offset."""
    if getattr(td, "_is_lazy", False) and hasattr(td, "tensordicts"):
        return {
            "type": _LAZY,
            "stack_dim": td.stack_dim,
            "batch_size": list(td.batch_size),
            "stack_dim_name": getattr(td, "_stack_dim_name", None),
            "members": [_walk(m, on_leaf, path + (i,)) for i, m in enumerate(td.tensordicts)],
        }
    if getattr(td, "_is_lazy", False) or not hasattr(td, "_items_raw"):
        raise TypeError(f"consolidate: {type(td).__name__} at {path or '<root>'!r} is not supported.")
    content = content_of(td)
    entries = []
    for key, value in content._items_raw():
        if type(value) in UNBATCHED_TYPES:
            raise _unbatched_error("consolidate", path + (key,) if path else key)
        if isinstance(value, torch.Tensor) and value.is_nested and value.layout == torch.jagged:
            entries.append([key, _describe_jagged(value, on_leaf, path + (key,))])
        elif isinstance(value, torch.Tensor):
            entries.append(
                [
                    key,
                    {
                        "type": "tensor",
                        "dtype": value.dtype,
                        "shape": list(value.shape),
                        "offset": on_leaf(value, path + (key,)),
                    },
                ]
            )
        elif getattr(type(value), "_is_non_tensor", False):
            entries.append([key, _describe_non_tensor(value, f"consolidate: key {path + (key,)!r}")])
        elif is_tensor_collection(value):
            entries.append([key, _walk(value, on_leaf, path + (key,))])
        else:
            raise TypeError(f"consolidate: key {path + (key,)!r} holds a {type(value).__name__}.")
    names = content._maybe_names() if hasattr(content, "_maybe_names") else None
    meta = {
        "type": "tensorclass" if _is_tensorclass(td) else "TensorDict",
        "batch_size": list(td.batch_size),
        "device": None if td.device is None else str(td.device),
        "names": None if names is None else list(names),
        "entries": entries,
    }
    if _is_tensorclass(td):
        meta["class"] = type(td)
    return meta


def _describe_jagged(value: torch.Tensor, on_leaf: Any, key: tuple) -> dict:
    """A nested jagged tensor: its ``values``, ``offsets`` and ``lengths`` (if any) are stored as leaves."""

    def part(t: torch.Tensor) -> dict:
        return {"type": "tensor", "dtype": t.dtype, "shape": list(t.shape), "offset": on_leaf(t, key)}

    lengths = value.lengths()  # pyright: ignore[reportAttributeAccessIssue]
    return {
        "type": "jagged",
        "ragged_idx": value._ragged_idx,  # pyright: ignore[reportAttributeAccessIssue]
        "values": part(value.values()),
        "offsets": part(value.offsets()),  # pyright: ignore[reportAttributeAccessIssue]
        "lengths": None if lengths is None else part(lengths),
    }


def _layout(td: Any) -> tuple[dict, list, int]:
    """Structure with fresh offsets, the ``(leaf, offset)`` pairs to copy, and the total size."""
    leaves: list = []
    end = 0

    def place(value: torch.Tensor, key: tuple) -> int:
        nonlocal end
        if value.layout != torch.strided or value.is_nested:
            raise TypeError(f"consolidate: key {key!r} is not a dense tensor (layout {value.layout}).")
        start = _align(end, value.dtype)
        end = start + value.numel() * value.dtype.itemsize
        leaves.append((value, start))
        return start

    meta = _walk(td, place, ())
    return meta, leaves, end


def _describe_non_tensor(value: Any, where: str = "consolidate") -> dict:
    if getattr(type(value), "_is_lazy", False):
        origins, table = value._compact()
        return {
            "type": "non_tensor_stack",
            "origins": origins.reshape(-1).tolist(),
            "shape": list(origins.shape),
            "table": list(table),
        }
    out = {"type": "non_tensor", "data": value.data, "batch_size": list(value.batch_size)}
    tag = _metadata_tag(value, where)
    if tag is not None:  # a MetaData (of type T): rebuilt as one
        out["metadata"] = tag
    return out


def _current(td: Any, storage: torch.Tensor) -> dict:
    """The structure of ``td`` if every leaf is still a contiguous view of ``storage``, else raise."""
    base = storage.data_ptr()
    end = base + storage.numel()
    sid = storage.untyped_storage().data_ptr()

    def locate(value: torch.Tensor, key: tuple) -> int:
        nbytes = value.numel() * value.dtype.itemsize
        if not nbytes:
            return 0
        ptr = value.data_ptr()
        if value.untyped_storage().data_ptr() != sid or not value.is_contiguous() or not base <= ptr <= end - nbytes:
            raise _NotConsolidated
        return ptr - base

    try:
        return _walk(td, locate, ())
    except TypeError:
        raise _NotConsolidated from None


# --------------------------------------------------------------------------------------------- #
# rebuilding a tree from a storage
# --------------------------------------------------------------------------------------------- #


def _rebuild(meta: dict, storage: torch.Tensor, device: Any, views: list | None = None) -> Any:
    """The tree described by ``meta`` over ``storage``; ``views`` (if given) receives every leaf
    view in the order of :func:`_layout`'s leaves."""
    from .non_tensor import NonTensorData
    from .non_tensor_stack import NonTensorStack
    from .tensordict import TensorDict

    def leaf(entry: dict) -> torch.Tensor:
        dtype, shape, start = entry["dtype"], entry["shape"], entry["offset"]
        n = 1
        for d in shape:
            n *= d
        view = storage[start : start + n * dtype.itemsize].view(dtype).view(shape)
        if views is not None:
            views.append(view)
        return view

    def build(node: dict) -> Any:
        if node["type"] == _LAZY:
            from .lazy import LazyStackedTensorDict

            return LazyStackedTensorDict._new_unsafe(
                [build(m) for m in node["members"]],
                node["stack_dim"],
                torch.Size(node["batch_size"]),
                node["stack_dim_name"],
            )
        entries = {}
        for key, entry in node["entries"]:
            kind = entry["type"]
            if kind == "tensor":
                entries[key] = leaf(entry)
            elif kind == "jagged":
                values, offsets = leaf(entry["values"]), leaf(entry["offsets"])
                lengths = None if entry["lengths"] is None else leaf(entry["lengths"])
                entries[key] = torch.nested.nested_tensor_from_jagged(
                    values, offsets, lengths, jagged_dim=entry["ragged_idx"]
                )
            elif kind == "non_tensor":
                cls = NonTensorData if "metadata" not in entry else _class_from_tag(entry["metadata"])
                entries[key] = cls._new(entry["data"], torch.Size(entry["batch_size"]), device)
            elif kind == "non_tensor_stack":
                origins = torch.tensor(entry["origins"], dtype=torch.long).reshape(entry["shape"])
                entries[key] = NonTensorStack._new(origins, list(entry["table"]), device)
            else:
                entries[key] = build(entry)
        td = TensorDict._new_unsafe(entries, torch.Size(node["batch_size"]), device, node["names"])
        if node["type"] == "tensorclass":
            return node["class"]._from_tensordict(td)
        return td

    out = build(meta)
    out._consolidated = {"storage": storage, "metadata": meta}
    out.lock_()
    return out


# --------------------------------------------------------------------------------------------- #
# public API
# --------------------------------------------------------------------------------------------- #


# a storage up to this size is zeroed whole (one fill) rather than gap by gap (one op per gap)
_ZERO_WHOLE_BYTES = 1 << 16


def consolidate(
    td: Any, filename: Any = None, device: Any = None, share_memory: bool = False, pin_memory: bool = False
) -> Any:
    """A locked copy of ``td`` whose leaves are views into one contiguous ``uint8`` storage.

    Args:
        td: the collection (nested TensorDicts, tensorclasses and non-tensor data allowed).
        filename: write the storage (and a JSON description) to this single memory-mapped file;
            :func:`from_consolidated` opens it again.
        device: where the storage lives (default: ``td.device``, else the leaves' device).
        share_memory: allocate the storage in shared memory (CPU).
        pin_memory: allocate the storage in pinned memory (needs CUDA).

    Examples:
        >>> import pickle, torch
        >>> from tdict import TensorDict
        >>> c = TensorDict(a=torch.arange(3), b=torch.ones(3, dtype=torch.bool), batch_size=[3]).consolidate()
        >>> pickle.loads(pickle.dumps(c))["a"].tolist()
        [0, 1, 2]
    """
    if sum(map(bool, (filename is not None, share_memory, pin_memory))) > 1:
        raise ValueError("consolidate: filename=, share_memory=True and pin_memory=True are mutually exclusive.")
    if getattr(td, "_is_lazy", False):
        raise TypeError(
            "consolidate: the root must be a TensorDict or a tensorclass; put the lazy stack in one: TensorDict({'stack': s}, s.batch_size[:1])."
        )
    meta, leaves, total = _layout(td)
    device = out_device = parse_device(device)
    if device is None:
        device = out_device = td.device
    if device is None:
        devices = {leaf.device for leaf, _ in leaves}
        if len(devices) > 1:
            raise ValueError(
                f"consolidate: the leaves are on several devices {sorted(map(str, devices))}; pass device=."
            )
        device = devices.pop() if devices else torch.device("cpu")
    if (filename is not None or share_memory) and device.type != "cpu":
        raise ValueError(f"consolidate: filename= and share_memory=True need device='cpu', got {device}.")
    if filename is not None:
        return _consolidate_to_file(td, meta, leaves, total, filename)
    zeroed = total <= _ZERO_WHOLE_BYTES
    storage = (torch.zeros if zeroed else torch.empty)(total, dtype=torch.uint8, device=device, pin_memory=pin_memory)
    if share_memory:
        storage.share_memory_()
    views: list = []
    out = _rebuild(meta, storage, out_device, views)
    with torch.no_grad():  # each leaf goes into the view the result holds: no second set of views
        for (leaf, _), view in zip(leaves, views):
            view.copy_(leaf)
        if not zeroed:
            _zero_padding(storage, leaves)
    return out


def _zero_padding(storage: torch.Tensor, leaves: list) -> None:
    """Zero the alignment bytes between the leaves, so that equal collections give equal storages."""
    end = 0
    for leaf, start in leaves:
        if start > end:
            storage[end:start].zero_()
        end = max(end, start + leaf.numel() * leaf.dtype.itemsize)


def _copy_leaves(meta: dict, leaves: list, storage: torch.Tensor) -> None:
    with torch.no_grad():
        for leaf, start in leaves:
            nbytes = leaf.numel() * leaf.dtype.itemsize
            if nbytes:
                storage[start : start + nbytes].view(leaf.dtype).view(leaf.shape).copy_(leaf)
        _zero_padding(storage, leaves)


def _storage_of(td: Any) -> torch.Tensor | None:
    """The storage recorded by :func:`consolidate` on ``td`` (``None`` if there is none)."""
    record = getattr(td, "_consolidated", None)
    return None if record is None else record["storage"]


def is_consolidated(td: Any) -> bool:
    """True when ``td`` was made by :func:`consolidate` and every leaf still is its view of the storage."""
    storage = _storage_of(td)
    if storage is None:
        return False
    try:
        _current(td, storage)
    except _NotConsolidated:
        return False
    return True


# --------------------------------------------------------------------------------------------- #
# hooks used by TensorDict (pickling, .to)
# --------------------------------------------------------------------------------------------- #


def _consolidated_state(td: Any) -> tuple | None:
    """``(storage, structure)`` while ``td`` is still consolidated, else ``None``."""
    storage = _storage_of(td)
    if storage is None:
        return None
    try:
        return storage, _current(td, storage)
    except _NotConsolidated:
        return None


def _getstate(td: Any) -> dict | None:
    """Pickle state for a consolidated ``td``: one storage + structure; ``None`` if no longer consolidated."""
    found = _consolidated_state(td)
    if found is None:
        return None
    storage, meta = found
    return {"consolidated": storage, "meta": meta, "device": td.device, "locked": td.is_locked}


def _setstate(td: Any, state: dict) -> None:
    built = _rebuild(state["meta"], state["consolidated"], state["device"])
    for name in ("_tensordict", "_batch_size", "_device", "_names", "_consolidated"):
        setattr(td, name, getattr(built, name))
    td._lock_ops = None
    td._set_lock(state["locked"])


def _to(td: Any, device: torch.device, non_blocking: bool) -> Any | None:
    """``td.to(device)`` with one storage copy; ``None`` when ``td`` is no longer consolidated."""
    found = _consolidated_state(td)
    if found is None:
        return None
    storage, meta = found
    if isinstance(storage, MemoryMappedTensor) and device.type == "cpu":
        moved = storage
    else:
        moved = storage.to(device, non_blocking=non_blocking)
    return _rebuild(meta, moved, device)


# --------------------------------------------------------------------------------------------- #
# single-file variant
# --------------------------------------------------------------------------------------------- #


def _json_meta(meta: dict, where: tuple = ()) -> dict:
    from ._io.memmap_layout import _class_path, _dtype_name, encode_payload

    if meta["type"] == _LAZY:
        return dict(meta, members=[_json_meta(m, where + (i,)) for i, m in enumerate(meta["members"])])
    out = {k: v for k, v in meta.items() if k not in ("entries", "class")}
    if meta["type"] == "tensorclass":
        cls = meta["class"]
        if "<locals>" in cls.__qualname__:
            raise TypeError(
                f"consolidate(filename=...): tensorclass {cls.__qualname__!r} at {where or '<root>'!r} is local to a function; it could not be found when loading."
            )
        out["class"] = _class_path(cls)
    entries = []
    for key, entry in meta["entries"]:
        full = where + (key,)
        kind = entry["type"]
        if kind == "tensor":
            entries.append([key, dict(entry, dtype=_dtype_name(entry["dtype"]))])
        elif kind == "jagged":
            parts = {
                name: None if entry[name] is None else dict(entry[name], dtype=_dtype_name(entry[name]["dtype"]))
                for name in ("values", "offsets", "lengths")
            }
            entries.append([key, dict(entry, **parts)])
        elif kind == "non_tensor":
            entries.append([key, dict(entry, data=encode_payload(entry["data"], f"key {full!r}"))])
        elif kind == "non_tensor_stack":
            entries.append([key, dict(entry, table=[encode_payload(p, f"key {full!r}") for p in entry["table"]])])
        else:
            entries.append([key, _json_meta(entry, full)])
    out["entries"] = entries
    return out


def _consolidate_to_file(td: Any, meta: dict, leaves: list, total: int, filename: Any) -> Any:
    path = os.path.abspath(os.fspath(filename))
    meta = dict(meta, device="cpu")  # the file's leaves live on the CPU (the root is never a lazy stack)
    header = json.dumps(
        {"format": "tdict.consolidated", "version": _FILE_VERSION, "data_nbytes": total, "root": _json_meta(meta)},
        separators=(",", ":"),
        allow_nan=False,
    ).encode("utf-8")

    mapped: list = []  # the mapping outlives the rename: the result reads its pages

    def fill(tmp: str) -> None:
        mapped.append(MemoryMappedTensor.empty(total, dtype=torch.uint8, filename=tmp, existsok=True))
        _copy_leaves(meta, leaves, mapped[0].as_subclass(torch.Tensor))
        fd = os.open(tmp, os.O_WRONLY | os.O_APPEND)
        try:
            view = memoryview(header + len(header).to_bytes(8, "little") + _MAGIC)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    # the fsync of the file also flushes the pages written through the mapping
    atomic_write_to(path, fill)
    storage = MemoryMappedTensor.from_storage(
        mapped[0].as_subclass(torch.Tensor).untyped_storage(), dtype=torch.uint8, shape=(total,), filename=path
    )
    return _rebuild(meta, storage, torch.device("cpu"))


def from_consolidated(filename: Any) -> Any:
    """Open a file written by ``consolidate(filename=...)``: leaves map the file (never unpickles).

    Raises:
        FileNotFoundError: no such file.
        tdict.persistence.MemmapLoadError: not a consolidated file, truncated, or bad metadata.

    Examples:
        >>> import os, tempfile, torch
        >>> from tdict import TensorDict
        >>> path = os.path.join(tempfile.mkdtemp(), "td.bin")
        >>> _ = TensorDict(a=torch.arange(4.0), batch_size=[4]).consolidate(filename=path)
        >>> from_consolidated(path)["a"].tolist()
        [0.0, 1.0, 2.0, 3.0]
    """
    from ._io.memmap_layout import _DTYPES, MemmapLoadError, _resolve_class, decode_payload

    path = os.path.abspath(os.fspath(filename))

    def bad(what: str) -> MemmapLoadError:
        return MemmapLoadError(f"cannot load the consolidated file {path!r}: {what}")

    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if size < _TRAILER:
            raise bad(f"it has {size} bytes, too short for the trailer.")
        f.seek(size - _TRAILER)
        trailer = f.read(_TRAILER)
        if trailer[8:] != _MAGIC:
            raise bad("no tdict trailer at the end (truncated, or not a consolidated file).")
        n = int.from_bytes(trailer[:8], "little")
        if n > size - _TRAILER:
            raise bad(f"metadata length {n} exceeds the file size {size}.")
        f.seek(size - _TRAILER - n)
        raw = f.read(n)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise bad(f"metadata is not valid JSON ({err}).") from None
    if type(doc) is not dict or doc.get("format") != "tdict.consolidated":
        raise bad("metadata of another format.")
    if doc.get("version") != _FILE_VERSION:
        raise bad(f"format version {doc.get('version')!r}; this tdict reads version {_FILE_VERSION}.")
    total = doc.get("data_nbytes")
    if type(total) is not int or total != size - _TRAILER - n:
        raise bad(
            f"data size {total!r} does not match the file layout ({size - _TRAILER - n} bytes before the metadata)."
        )

    def tensor_entry(entry: dict, full: tuple, bs: list) -> dict:
        if entry["type"] != "tensor":
            raise ValueError(f"key {full!r}: expected a tensor entry, got {entry['type']!r}")
        dtype = _DTYPES[entry["dtype"]]
        shape = [int(d) for d in entry["shape"]]
        start = int(entry["offset"])
        nbytes = dtype.itemsize
        for d in shape:
            if d < 0:
                raise ValueError(f"negative dim in {shape}")
            nbytes *= d
        if start < 0 or start % dtype.itemsize or start + nbytes > total or shape[: len(bs)] != bs:
            raise ValueError(f"leaf {full!r} (offset {start}, {nbytes} bytes, shape {shape}) does not fit the data")
        return {"type": "tensor", "dtype": dtype, "shape": shape, "offset": start}

    def convert(node: Any, where: tuple) -> dict:
        try:
            if node["type"] == _LAZY:
                members = [convert(m, where + (i,)) for i, m in enumerate(node["members"])]
                sd = int(node["stack_dim"])
                name = node["stack_dim_name"]
                if not (name is None or type(name) is str):
                    raise ValueError(f"bad stack_dim_name {name!r}")
                return {
                    "type": _LAZY,
                    "stack_dim": sd,
                    "batch_size": [int(d) for d in node["batch_size"]],
                    "stack_dim_name": name,
                    "members": members,
                }
            if node["type"] not in ("TensorDict", "tensorclass"):
                raise ValueError(f"unknown collection type {node['type']!r}")
            bs = [int(d) for d in node["batch_size"]]
            out = {
                "type": node["type"],
                "batch_size": bs,
                "device": node["device"],
                "names": node["names"],
                "entries": [],
            }
            if node["type"] == "tensorclass":
                out["class"] = _resolve_class(node["class"], f"entry {where!r}")
            for key, entry in node["entries"]:
                if type(key) is not str:
                    raise ValueError(f"bad key {key!r}")
                full = where + (key,)
                kind = entry["type"]
                if kind == "tensor":
                    out["entries"].append([key, tensor_entry(entry, full, bs)])
                elif kind == "jagged":
                    parts = {
                        name: None if entry[name] is None else tensor_entry(entry[name], full, [])
                        for name in ("values", "offsets", "lengths")
                    }
                    if parts["values"] is None or parts["offsets"] is None:
                        raise ValueError(f"key {full!r}: a jagged entry needs values and offsets")
                    out["entries"].append([key, dict(parts, type="jagged", ragged_idx=int(entry["ragged_idx"]))])
                elif kind == "non_tensor":
                    out["entries"].append(
                        [
                            key,
                            {
                                "type": "non_tensor",
                                "data": decode_payload(entry["data"], f"key {full!r}"),
                                "batch_size": [int(d) for d in entry["batch_size"]],
                            },
                        ]
                    )
                    if "metadata" in entry:  # checked now: an unknown type fails the load, not the rebuild
                        _class_from_tag(entry["metadata"])
                        out["entries"][-1][1]["metadata"] = entry["metadata"]
                elif kind == "non_tensor_stack":
                    table = [decode_payload(p, f"key {full!r}") for p in entry["table"]]
                    origins = [int(i) for i in entry["origins"]]
                    if any(not 0 <= i < len(table) for i in origins):
                        raise ValueError(f"key {full!r}: stack ids out of range")
                    out["entries"].append(
                        [
                            key,
                            {
                                "type": "non_tensor_stack",
                                "origins": origins,
                                "shape": [int(d) for d in entry["shape"]],
                                "table": table,
                            },
                        ]
                    )
                else:
                    out["entries"].append([key, convert(entry, full)])
            return out
        except MemmapLoadError:
            raise
        except (KeyError, TypeError, ValueError) as err:
            raise bad(f"malformed metadata at {where or '<root>'!r}: {type(err).__name__}: {err}") from None

    meta = convert(doc.get("root"), ())
    if total:
        storage = MemoryMappedTensor.from_storage(
            torch.from_file(path, shared=True, size=total, dtype=torch.uint8).untyped_storage(),
            dtype=torch.uint8,
            shape=(total,),
            filename=path,
        )
    else:
        storage = torch.empty(0, dtype=torch.uint8)
    return _rebuild(meta, storage, None if meta["device"] is None else torch.device("cpu"))
