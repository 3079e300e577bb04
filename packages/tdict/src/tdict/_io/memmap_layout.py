"""The on-disk format of memmapped collections: names, metadata encoding and the write plan.

Used by :mod:`tdict.persistence` (which documents the layout and its crash safety) on both
sides: the writer plans every file name and metadata entry here before writing anything; the
reader (:mod:`tdict._io.memmap_load`) decodes what this module encodes. Nothing here touches
the filesystem.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
import sys
from typing import Any, Iterator

import torch

from .._core.utils import content_of
from ..base import is_tensor_collection
from ..memmap import MemoryMappedTensor
from ..metadata import _metadata_tag
from ..unbatched import UNBATCHED_TYPES, _unbatched_error

FORMAT = "tdict.memmap"
VERSION = 2  # 2: the metadata carries a checksum ("sha256"); 1: written before it, still read (unchecked)
LEGACY_VERSION = 1
META_NAME = "tdict_meta.json"
LOCK_NAME = ".tdict.lock"
_TMP_PREFIX = "." + META_NAME + "."
_TOKEN_RE = re.compile(r"\.[0-9a-f]{16}\.memmap\Z")
_MAX_META_BYTES = 1 << 30
_LAZY = "LazyStackedTensorDict"
_NON_TENSOR = ("non_tensor", "non_tensor_stack")  # entry types of non-tensor data (also valid as the root)


class MemmapLoadError(RuntimeError):
    """A memmapped directory cannot be loaded: missing or corrupt metadata, missing or short files."""

    __module__ = "tdict.persistence"  # its public home (re-exported there)


# --------------------------------------------------------------------------------------------- #
# the integrity check of the metadata
# --------------------------------------------------------------------------------------------- #


def metadata_checksum(body: dict) -> str:
    """SHA-256 (hex) of the canonical JSON of ``body``: the metadata without its ``"sha256"`` field.

    Canonical: keys sorted, no whitespace, ASCII only, so that the digest depends on the parsed
    content and not on how the file spells it.
    """
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


# --------------------------------------------------------------------------------------------- #
# JSON payloads of non-tensor entries
# --------------------------------------------------------------------------------------------- #


def encode_payload(obj: Any, where: str = "payload") -> Any:
    """Encode a Python object as JSON-able data, losslessly, or raise ``TypeError``.

    ``None``, bools, ints, finite or non-finite floats and strings stay as they are; lists
    stay lists; tuples, dicts (any JSON-able hashable keys) and bytes become one-key tagged
    objects (``{"tuple": [...]}``, ``{"dict": [[k, v], ...]}``, ``{"bytes": "<base64>"}``,
    ``{"float": "nan"}``), so that every JSON object in the output is a tag.

    Examples:
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
        return {
            "dict": [[encode_payload(k, f"{where} key"), encode_payload(v, f"{where}[{k!r}]")] for k, v in obj.items()]
        }
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
        ((tag, value),) = obj.items()
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
    """The class at ``module:qualname``, from an *already imported* module only (a class defined
    inside a function: while its definition is alive in this process)."""
    module_name, _, qualname = path.partition(":")
    if "<locals>" in qualname:
        from ..tensorclass import local_tensorclass

        found = local_tensorclass(path)
        if found is None:
            raise MemmapLoadError(
                f"{where}: the saved collection is a {path!r}, a tensorclass defined inside a function, and no live "
                "class of that name exists in this process; run the code defining it first, or define it at module "
                "level (tdict never unpickles a class)."
            )
        return found
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


def _iter_tensor_entries(node: dict) -> Iterator[dict]:
    if node["type"] in _NON_TENSOR:  # a non-tensor root: no files
        return
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
# the write plan (validate everything, name every file) and the metadata of its entries
# --------------------------------------------------------------------------------------------- #


class _Leaf:
    __slots__ = ("src", "rel", "reuse", "out")

    def __init__(self, src: torch.Tensor, rel: str | None, reuse: bool):
        self.src, self.rel, self.reuse = src, rel, reuse
        self.out: torch.Tensor | None = None  # the memory-mapped tensor, once written


class _Node:
    __slots__ = ("src", "content", "entries", "meta", "tc_class")

    def __init__(self, src: Any, content: Any, meta: dict, tc_class: type | None):
        self.src, self.content, self.meta, self.tc_class = src, content, meta, tc_class
        self.entries: list[tuple[str, Any]] = []  # (key, _Leaf | _Node | non-tensor object)


def _device_str(device: Any) -> str | None:
    return None if device is None else str(device)


def _plan(
    td: Any,
    prefix: str | None,
    rel_dir: str,
    path: tuple,
    *,
    copy_existing: bool,
    like: bool,
    committed: dict[str, int],
    token: str,
    taken: set,
) -> _Node:
    tc_class = None
    if _is_non_tensor(td):  # a non-tensor root (NonTensorData / NonTensorStack): one JSON node, no files
        meta = _encode_non_tensor(td, "the root") if prefix is not None else {"type": "non_tensor"}
        return _Node(td, None, meta, None)
    if _is_tensorclass(td):
        tc_class = type(td)
    elif getattr(td, "_is_lazy", False) and hasattr(td, "tensordicts"):
        # a lazy stack: its members in sub-directories 0, 1, ... of its own directory
        meta = {
            "type": _LAZY,
            "stack_dim": td.stack_dim,
            "batch_size": list(td.batch_size),
            "stack_dim_name": getattr(td, "_stack_dim_name", None),
        }
        node = _Node(td, None, meta, None)
        for i, member in enumerate(td.tensordicts):
            sub_dir = os.path.join(rel_dir, str(i)) if rel_dir else str(i)
            node.entries.append(
                (
                    str(i),
                    _plan(
                        member,
                        prefix,
                        sub_dir,
                        path + (i,),
                        copy_existing=copy_existing,
                        like=like,
                        committed=committed,
                        token=token,
                        taken=taken,
                    ),
                )
            )
        return node
    elif getattr(td, "_is_lazy", False) or not hasattr(td, "_items_raw"):
        raise TypeError(
            f"key {path or '<root>'!r}: memmap does not support {type(td).__name__} entries yet "
            "(supported: TensorDict, tensorclasses, tensors and non-tensor data)."
        )
    content = content_of(td)
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
        if type(value) in UNBATCHED_TYPES:
            raise _unbatched_error("memmap", full if len(full) > 1 else key)
        if isinstance(value, torch.Tensor):
            node.entries.append(
                (key, _plan_leaf(value, prefix, rel_dir, key, full, copy_existing, like, committed, token, taken))
            )
        elif _is_non_tensor(value):
            if prefix is not None:  # validate now, before any write
                _encode_non_tensor(value, f"key {full!r}")
            node.entries.append((key, value))
        elif is_tensor_collection(value):
            sub_dir = os.path.join(rel_dir, _escape(key)) if rel_dir else _escape(key)
            node.entries.append(
                (
                    key,
                    _plan(
                        value,
                        prefix,
                        sub_dir,
                        full,
                        copy_existing=copy_existing,
                        like=like,
                        committed=committed,
                        token=token,
                        taken=taken,
                    ),
                )
            )
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
        if (
            size is not None
            and value.storage_offset() == 0
            and value.is_contiguous()
            and value.numel() * value.dtype.itemsize == size
        ):
            return _Leaf(value, os.path.relpath(own, prefix), True)
        if not copy_existing and size is None:
            raise RuntimeError(
                f"A filename was provided but the tensor already has a file associated: key {full!r} is memory-mapped "
                f"at {own!r}, outside prefix {prefix!r}; pass copy_existing=True to copy it there."
            )
    name = _escape(key)
    rel = os.path.join(rel_dir, f"{name}.{token}.memmap") if rel_dir else f"{name}.{token}.memmap"
    if rel.casefold() in taken:
        # escaping is injective, but "Obs" and "obs" are one file on a case-insensitive filesystem
        digest = hashlib.sha1(repr(full).encode("utf-8")).hexdigest()[:16]
        rel = os.path.join(rel_dir, f"{name}~{digest}.{token}.memmap") if rel_dir else f"{name}~{digest}.{token}.memmap"
    taken.add(rel.casefold())
    return _Leaf(value, rel, False)


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
    out = {
        "type": "non_tensor",
        "data": encode_payload(value.data, where),
        "batch_size": list(value.batch_size),
        "device": _device_str(value.device),
    }
    tag = _metadata_tag(value, where)
    if tag is not None:  # a MetaData (of type T): loaded back as one
        out["metadata"] = tag
    return out


def _wrap_tensorclass(cls: type, td: Any) -> Any:
    return cls._from_tensordict(td)
