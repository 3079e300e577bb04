"""Building blocks of rl_replay checkpoints: tagged JSON for state trees, crash-safe directory swaps.

State trees (dicts, lists, tuples, JSON scalars, bytes, dtypes, tensors, TensorDicts) become tagged
JSON; tensors and TensorDicts are collected for one tdict ``save`` and bytes packed into one uint8
tensor. :func:`_atomic_dir` writes a directory next to its final path and swaps it in with two
renames; :func:`_resolve` finds the committed directory (or the complete leftover of a dump killed
between the renames). The public API is in :mod:`rl_replay.checkpoint`.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Callable
from typing import Any

import torch
from tdict import is_tensor_collection

from ._bytes import tensor_bytes

FORMAT = "rl_replay.checkpoint"
VERSION = 1
_PART_FORMAT = "rl_replay.part"
_CKPT_MARKER = "checkpoint.json"
_PART_MARKER = "part.json"
_TAG = "__rl_replay__"  # key of a tagged JSON object (tensor reference, tuple, dtype...)
_BYTES = "_bytes"  # bytes objects met while encoding, packed into one uint8 tensor


class CheckpointError(RuntimeError):
    """A checkpoint is missing, corrupt, of another format or version, or does not fit the buffer."""


# ============================================================================================ #
# state trees <-> tagged JSON + one TensorDict of tensors
# ============================================================================================ #
def _encode(obj: Any, tensors: dict, where: str) -> Any:
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.Tensor):
        key = f"t{sum(k != _BYTES for k in tensors)}"
        tensors[key] = obj.detach()
        return {_TAG: "tensor", "key": key, "device": str(obj.device)}
    if is_tensor_collection(obj):
        key = f"t{sum(k != _BYTES for k in tensors)}"
        tensors[key] = obj
        return {_TAG: "tensordict", "key": key}
    if isinstance(obj, (bytes, bytearray)):
        blobs = tensors.setdefault(_BYTES, [])
        blobs.append(bytes(obj))
        return {_TAG: "bytes" if isinstance(obj, bytes) else "bytearray", "i": len(blobs) - 1}
    if isinstance(obj, torch.dtype):
        return {_TAG: "dtype", "name": str(obj).removeprefix("torch.")}
    if isinstance(obj, torch.device):
        return {_TAG: "device", "name": str(obj)}
    if isinstance(obj, torch.Size):
        return {_TAG: "size", "items": list(obj)}
    if isinstance(obj, tuple):
        return {_TAG: "tuple", "items": [_encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and _TAG not in obj:
            return {k: _encode(v, tensors, f"{where}[{k!r}]") for k, v in obj.items()}
        return {_TAG: "dict", "items": [[_encode(k, tensors, f"{where} key"), _encode(v, tensors, f"{where}[{k!r}]")]
                                        for k, v in obj.items()]}
    raise TypeError(
        f"cannot checkpoint {where}: an object of type {type(obj).__module__}.{type(obj).__qualname__} is neither a "
        f"tensor, a TensorDict nor JSON-able (checkpoints never pickle)."
    )


def _decode(obj: Any, tensors: Any, where: str) -> Any:
    if isinstance(obj, list):
        return [_decode(v, tensors, where) for v in obj]
    if not isinstance(obj, dict):
        return obj
    tag = obj.get(_TAG)
    if tag is None:
        return {k: _decode(v, tensors, where) for k, v in obj.items()}
    try:
        if tag == "tensor":
            value = _as_plain(tensors.get(obj["key"]))
            device = torch.device(obj["device"])
            return value if device.type == "cpu" else value.to(device)
        if tag == "tensordict":
            return tensors.get(obj["key"]).clone()
        if tag in ("bytes", "bytearray"):
            offsets = tensors.get("_bytes_offsets")
            i = int(obj["i"])
            raw = tensor_bytes(tensors.get("_bytes_blob")[int(offsets[i]) : int(offsets[i + 1])])
            return raw if tag == "bytes" else bytearray(raw)
        if tag == "dtype":
            dtype = getattr(torch, obj["name"], None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"unknown dtype {obj['name']!r}")
            return dtype
        if tag == "device":
            return torch.device(obj["name"])
        if tag == "size":
            return torch.Size(obj["items"])
        if tag == "tuple":
            return tuple(_decode(v, tensors, where) for v in obj["items"])
        if tag == "dict":
            return {_decode(k, tensors, where): _decode(v, tensors, where) for k, v in obj["items"]}
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as err:
        raise CheckpointError(f"{where}: bad entry {str(obj)[:120]} ({type(err).__name__}: {err}).") from err
    raise CheckpointError(f"{where}: unknown tag {tag!r} in {str(obj)[:120]}.")


def _as_plain(t: Any) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a tensor, found {type(t).__name__}")
    return t.as_subclass(torch.Tensor).clone()


# ============================================================================================ #
# file helpers
# ============================================================================================ #
def _write_json(path: str, payload: dict, fsync: bool) -> None:
    """Writes JSON to ``path`` through a temp file and ``os.replace`` (never a partial file)."""
    data = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    tmp = f"{path}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read_json(path: str, what: str) -> dict:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise CheckpointError(f"{what}: {path!r} is missing (not a checkpoint, or an incomplete one).") from None
    try:
        payload = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{what}: {path!r} is not valid JSON ({err}); the checkpoint is corrupt.") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{what}: {path!r} holds a JSON {type(payload).__name__}, expected an object.")
    return payload


def _check_format(payload: dict, fmt: str, path: str) -> None:
    if payload.get("format") != fmt:
        raise CheckpointError(f"{path!r}: format {payload.get('format')!r}, expected {fmt!r}.")
    if payload.get("version") != VERSION:
        raise CheckpointError(
            f"{path!r}: format version {payload.get('version')!r} is not supported (this rl_replay reads version {VERSION})."
        )


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: str) -> None:
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(root)


def _split(path: Any) -> tuple[str, str, str]:
    path = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(path)
    if not name:
        raise ValueError(f"checkpoint path {path!r} has no final name.")
    return path, parent, name


def _leftovers(parent: str, name: str) -> tuple[list[str], list[str]]:
    """(temp dirs, old dirs) left next to ``parent/name`` by interrupted dumps."""
    tmp, old = [], []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir(parent):
            if entry.startswith(f".{name}.tmp-"):
                tmp.append(os.path.join(parent, entry))
            elif entry.startswith(f".{name}.old-"):
                old.append(os.path.join(parent, entry))
    return tmp, old


def _resolve(path: Any, marker: str) -> str:
    """The directory holding the committed checkpoint for ``path`` (a complete leftover if a dump
    was killed between its two renames)."""
    path, parent, name = _split(path)
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise CheckpointError(f"{path!r} is not a directory: not a checkpoint.")
    tmp, old = _leftovers(parent, name)
    # the new state (a complete temp dir) first, then the previous one
    for candidate in sorted(tmp, key=os.path.getmtime, reverse=True) + sorted(old, key=os.path.getmtime, reverse=True):
        if os.path.isfile(os.path.join(candidate, marker)):
            return candidate
    raise CheckpointError(f"no checkpoint at {path!r}.")


def _atomic_dir(path: Any, marker: str, write: Callable[[str], None], fsync: bool) -> None:
    """Runs ``write(tmp_dir)`` (which writes ``marker`` last), then swaps ``tmp_dir`` in for ``path``."""
    path, parent, name = _split(path)
    os.makedirs(parent, exist_ok=True)
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"checkpoint path {path!r} exists and is not a directory.")
    if not os.path.exists(path):  # a previous dump died between its renames: put its result back first
        with contextlib.suppress(CheckpointError):
            found = _resolve(path, marker)
            os.rename(found, path)
    elif os.listdir(path) and not os.path.isfile(os.path.join(path, marker)):
        raise FileExistsError(f"{path!r} exists and is not a checkpoint (no {marker}); refusing to replace it.")
    token = secrets.token_hex(6)
    tmp = os.path.join(parent, f".{name}.tmp-{token}")
    os.mkdir(tmp)
    try:
        write(tmp)
        if fsync:
            _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = os.path.join(parent, f".{name}.old-{token}")
    if os.path.exists(path):
        os.rename(path, old)
    os.rename(tmp, path)  # the commit
    if fsync:
        _fsync_dir(parent)
    stale_tmp, stale_old = _leftovers(parent, name)
    for leftover in stale_old + stale_tmp:
        shutil.rmtree(leftover, ignore_errors=True)
