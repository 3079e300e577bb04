"""Building blocks of rl_replay checkpoints: tagged JSON for state trees, and JSON files.

State trees (dicts, lists, tuples, JSON scalars, bytes, dtypes, tensors, TensorDicts) become tagged
JSON; tensors and TensorDicts are collected for one tdict ``save`` and bytes packed into one uint8
tensor. Directories are replaced by :mod:`tdict.folders`; the public API is in
:mod:`rl_replay.checkpoint`.
"""

from __future__ import annotations

import json
from typing import IO, Any

import torch
from tdict import is_tensor_collection
from tdict.files import atomic_write

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
        return {
            _TAG: "dict",
            "items": [
                [_encode(k, tensors, f"{where} key"), _encode(v, tensors, f"{where}[{k!r}]")] for k, v in obj.items()
            ],
        }
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
    """Writes JSON to ``path`` crash-safely (never a partial file; see :func:`tdict.files.atomic_write`)."""
    data = json.dumps(payload, separators=(",", ":")).encode("utf-8")

    def write(f: IO[Any]) -> None:
        f.write(data)

    atomic_write(path, write, fsync=fsync)


def _read_json(path: str, what: str) -> dict:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise CheckpointError(f"{what}: {path!r} is missing (not a checkpoint, or an incomplete one).") from None
    except OSError as err:
        raise CheckpointError(f"{what}: {path!r} cannot be read ({err}).") from None
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
