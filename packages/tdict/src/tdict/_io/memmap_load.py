"""Reading a memmapped collection back: metadata validation and rebuilding.

:func:`tdict.persistence.load_memmap` is the entry point; this module checks that
``tdict_meta.json`` is well-formed before anything trusts it (:func:`_parse_meta`) and rebuilds
the collection from it, checking every data file as it maps it (:func:`_load_node`). It never
unpickles and never imports a module named in a file.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, TypeGuard

import torch

from .memmap_layout import (
    _DTYPES,
    _LAZY,
    _MAX_META_BYTES,
    _NON_TENSOR,
    FORMAT,
    LEGACY_VERSION,
    META_NAME,
    VERSION,
    MemmapLoadError,
    metadata_checksum,
    _resolve_class,
    _wrap_tensorclass,
    decode_payload,
)
from .._core.utils import _MISSING
from ..memmap import MemoryMappedTensor


def _read_meta_bytes(prefix: str) -> bytes | None:
    path = os.path.join(prefix, META_NAME)
    try:
        with open(path, "rb") as f:
            return f.read(_MAX_META_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as err:  # a directory, no permission, I/O error
        raise _bad(prefix, f"cannot read {path!r}: {err}") from None


def _bad(prefix: str, what: str) -> MemmapLoadError:
    return MemmapLoadError(f"cannot load the memmapped collection at {prefix!r}: {what}")


def _parse_meta(raw: bytes, prefix: str) -> dict:
    if len(raw) > _MAX_META_BYTES:
        raise _bad(prefix, f"{META_NAME} is larger than {_MAX_META_BYTES} bytes.")
    try:
        text = raw.decode("utf-8")
        meta = json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as err:
        raise _bad(
            prefix,
            f"{META_NAME} is not valid JSON ({type(err).__name__}: {err}); the file is corrupt "
            "or was not written by tdict.",
        ) from None
    if type(meta) is not dict:
        raise _bad(prefix, f"{META_NAME} holds a JSON {type(meta).__name__}, expected an object.")
    if meta.get("format") != FORMAT:
        raise _bad(prefix, f"{META_NAME} has format {meta.get('format')!r}, expected {FORMAT!r}.")
    version = meta.get("version")
    if type(version) is not int or version not in (VERSION, LEGACY_VERSION):
        raise _bad(
            prefix,
            f"{META_NAME} has format version {version!r}; this tdict reads versions {LEGACY_VERSION} and {VERSION}.",
        )
    expected = _V2_FIELDS if version == VERSION else _V1_FIELDS
    if set(meta) != expected:
        raise _bad(
            prefix,
            f"{META_NAME} (version {version}) has fields {sorted(meta)}, expected {sorted(expected)}; the file is corrupt.",
        )
    if version == VERSION:  # version 1 files predate the checksum: they load unchecked
        body = {k: v for k, v in meta.items() if k != "sha256"}
        if meta["sha256"] != metadata_checksum(body):
            raise _bad(
                prefix,
                f"{META_NAME} fails its integrity check (sha256 of the content does not match the "
                "recorded one): the file is corrupt or was edited.",
            )
    if type(meta["token"]) is not str:
        raise _bad(prefix, f"{META_NAME} has a malformed token {str(meta['token'])[:100]!r}.")
    _check_node(meta["root"], prefix, ())
    return meta


_V1_FIELDS = frozenset({"format", "version", "token", "root"})
_V2_FIELDS = _V1_FIELDS | {"sha256"}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _is_int_list(x: Any) -> TypeGuard[list[int]]:
    return type(x) is list and all(type(d) is int and d >= 0 for d in x)


def _check_node(node: Any, prefix: str, path: tuple) -> None:
    where = f"entry {path!r}" if path else "the root"
    if not path and type(node) is dict and node.get("type") in _NON_TENSOR:  # a non-tensor root
        _check_non_tensor(node, prefix, where)
        return
    if type(node) is dict and node.get("type") == _LAZY:
        members, bs, sd = node.get("members"), node.get("batch_size"), node.get("stack_dim")
        if not (
            type(members) is list
            and _is_int_list(bs)
            and type(sd) is int
            and 0 <= sd < len(bs)
            and bs[sd] == len(members)
            and "stack_dim_name" in node
            and (node["stack_dim_name"] is None or type(node["stack_dim_name"]) is str)
        ):
            raise _bad(prefix, f"{where}: malformed lazy stack metadata.")
        member_bs = bs[:sd] + bs[sd + 1 :]
        for i, member in enumerate(members):
            _check_node(member, prefix, path + (i,))
            if member["batch_size"] != member_bs:
                raise _bad(
                    prefix,
                    f"entry {path + (i,)!r}: member batch size {member['batch_size']} does not fit the stack {bs}.",
                )
        return
    if type(node) is not dict or node.get("type") not in ("TensorDict", "tensorclass"):
        raise _bad(prefix, f"{where}: malformed collection metadata.")
    if not _is_int_list(node.get("batch_size")):
        raise _bad(prefix, f"{where}: malformed batch_size {node.get('batch_size')!r}.")
    if "device" not in node or not (node["device"] is None or type(node["device"]) is str):
        raise _bad(prefix, f"{where}: malformed device {node.get('device')!r}.")
    names = node.get("names", _MISSING)
    if not (
        names is None
        or (
            type(names) is list
            and len(names) == len(node["batch_size"])
            and all(n is None or type(n) is str for n in names)
        )
    ):
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
            if type(dtype) is not str or dtype not in _DTYPES:
                raise _bad(prefix, f"entry {full!r}: unknown dtype {dtype!r}.")
            if not _is_int_list(shape) or shape[: len(bs)] != bs:
                raise _bad(prefix, f"entry {full!r}: malformed shape {shape!r} for batch size {bs}.")
            if nbytes != math.prod(shape) * _DTYPES[dtype].itemsize:
                raise _bad(prefix, f"entry {full!r}: nbytes {nbytes!r} does not match shape {shape} and dtype {dtype}.")
            if (
                type(file) is not str
                or not file
                or file.startswith("/")
                or "\\" in file
                or ".." in file.split("/")
                or "\0" in file
            ):
                raise _bad(
                    prefix, f"entry {full!r}: bad file name {str(file)[:200]!r} (must be relative, inside the prefix)."
                )
        elif kind in _NON_TENSOR:
            _check_non_tensor(entry, prefix, f"entry {full!r}")
        elif kind in ("TensorDict", "tensorclass", _LAZY):
            _check_node(entry, prefix, full)
            if entry["batch_size"][: len(bs)] != bs:
                raise _bad(prefix, f"entry {full!r}: batch size {entry['batch_size']} does not start with {bs}.")
        else:
            raise _bad(prefix, f"entry {full!r}: unknown entry type {kind!r}.")


def _check_non_tensor(entry: dict, prefix: str, where: str) -> None:
    if not (entry.get("device") is None or type(entry.get("device")) is str):
        raise _bad(prefix, f"{where}: malformed device {entry.get('device')!r}.")
    if entry["type"] == "non_tensor":
        if not _is_int_list(entry.get("batch_size")) or "data" not in entry:
            raise _bad(prefix, f"{where}: malformed non-tensor metadata.")
        return
    shape, origins, table = entry.get("shape"), entry.get("origins"), entry.get("table")
    if not (
        _is_int_list(shape)
        and _is_int_list(origins)
        and type(table) is list
        and len(origins) == math.prod(shape)
        and all(i < len(table) for i in origins)
    ):
        raise _bad(prefix, f"{where}: malformed non-tensor stack metadata.")


def _load_non_tensor(entry: dict, prefix: str, where: str, device: torch.device | None) -> Any:
    try:
        if entry["type"] == "non_tensor":
            from ..non_tensor import NonTensorData

            cls = NonTensorData
            if "metadata" in entry:
                from ..metadata import _class_from_tag

                cls = _class_from_tag(entry["metadata"])
            return cls(data=decode_payload(entry["data"], where), batch_size=entry["batch_size"], device=device)
        from ..non_tensor_stack import NonTensorStack

        table = [decode_payload(p, where) for p in entry["table"]]
    except ValueError as err:
        raise _bad(prefix, str(err)) from None
    origins = torch.tensor(entry["origins"], dtype=torch.long).reshape(entry["shape"])
    return NonTensorStack._new(origins, table, device)


def _load_node(node: dict, prefix: str, path: tuple, real: str) -> Any:
    from ..tensordict import TensorDict

    if node["type"] in _NON_TENSOR:  # a non-tensor root
        return _load_non_tensor(node, prefix, "the root", None if node.get("device") is None else torch.device("cpu"))
    if node["type"] == _LAZY:
        from ..lazy import LazyStackedTensorDict

        members = [_load_node(m, prefix, path + (i,), real) for i, m in enumerate(node["members"])]
        return LazyStackedTensorDict._new_unsafe(
            members, node["stack_dim"], torch.Size(node["batch_size"]), node["stack_dim_name"]
        )
    entries = {}
    bs = torch.Size(node["batch_size"])
    device = None if node["device"] is None else torch.device("cpu")
    for key, entry in node["entries"]:
        full = path + (key,)
        kind = entry["type"]
        if kind == "tensor":
            entries[key] = _load_leaf(entry, prefix, full, real)
        elif kind in _NON_TENSOR:
            entries[key] = _load_non_tensor(entry, prefix, f"entry {full!r}", device)
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
        raise _bad(
            prefix,
            f"entry {full!r}: data file {path!r} has {st.st_size} bytes, expected {entry['nbytes']} "
            f"(shape {entry['shape']}, dtype {entry['dtype']}); it is truncated or not ours.",
        )
    return MemoryMappedTensor.from_filename(path, _DTYPES[entry["dtype"]], entry["shape"])
