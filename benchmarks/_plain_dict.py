"""The plain dict-of-tensors baseline: nested python dicts whose leaves are tensors.

Each function is what a careful user would write without a container library: naive (one
recursive pass, no caching, no precomputation) but correct (same result as the TensorDict op).
Where a TensorDict op rejects bad input (construction and ``set`` check the leading batch dims),
the baseline performs the same check, because skipping it would time a different operation.
Nothing else is emulated: no batch-size object, no device tracking, no locking, no metadata.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

Nested = dict[str, Any]  # values are torch.Tensor or Nested
Key = str | tuple[str, ...]

_ALIGN = 8  # bytes; each leaf starts on an 8-byte boundary so any dtype can be viewed in place
_PAD = torch.zeros(_ALIGN, dtype=torch.uint8)


def _check(key: Key, value: torch.Tensor, batch: torch.Size) -> None:
    if value.shape[: len(batch)] != batch:
        raise ValueError(f"{key!r}: leading dims {tuple(value.shape)} do not match batch {tuple(batch)}")


def from_dict(src: Nested, batch: torch.Size) -> Nested:
    """Copies the nesting (not the tensors) and checks every leaf against ``batch``."""
    out = {}
    for k, v in src.items():
        if isinstance(v, dict):
            out[k] = from_dict(v, batch)
        else:
            _check(k, v, batch)
            out[k] = v
    return out


def get(d: Nested, key: Key) -> Any:
    if isinstance(key, str):
        return d[key]
    for k in key:
        d = d[k]
    return d


def set(d: Nested, key: Key, value: torch.Tensor, batch: torch.Size) -> Nested:  # noqa: A001
    _check(key, value, batch)
    if isinstance(key, str):
        d[key] = value
        return d
    node = d
    for k in key[:-1]:
        node = node.setdefault(k, {})
    node[key[-1]] = value
    return d


def keys(d: Nested, prefix: tuple[str, ...] = ()) -> Iterator[Key]:
    """Every key, leaves and sub-dicts, like ``keys(include_nested=True)``."""
    for k, v in d.items():
        full = prefix + (k,)
        yield full if prefix else k
        if isinstance(v, dict):
            yield from keys(v, full)


def leaves(d: Nested, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], torch.Tensor]]:
    for k, v in d.items():
        if isinstance(v, dict):
            yield from leaves(v, prefix + (k,))
        else:
            yield prefix + (k,), v


def apply(d: Nested, fn: Callable[[torch.Tensor], torch.Tensor]) -> Nested:
    return {k: apply(v, fn) if isinstance(v, dict) else fn(v) for k, v in d.items()}


def apply2(a: Nested, b: Nested, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Nested:
    return {k: apply2(v, b[k], fn) if isinstance(v, dict) else fn(v, b[k]) for k, v in a.items()}


def index(d: Nested, idx: Any) -> Nested:
    return {k: index(v, idx) if isinstance(v, dict) else v[idx] for k, v in d.items()}


def setitem(d: Nested, idx: Any, other: Nested) -> None:
    for k, v in d.items():
        if isinstance(v, dict):
            setitem(v, idx, other[k])
        else:
            v[idx] = other[k]


def clone(d: Nested) -> Nested:
    return apply(d, torch.Tensor.clone)


def to(d: Nested, device: str | torch.device) -> Nested:
    return apply(d, lambda t: t.to(device))


def add(a: Nested, b: Nested) -> Nested:
    return apply2(a, b, torch.add)


def stack(ds: list[Nested], dim: int = 0) -> Nested:
    first = ds[0]
    return {
        k: stack([d[k] for d in ds], dim) if isinstance(v, dict) else torch.stack([d[k] for d in ds], dim)
        for k, v in first.items()
    }


def cat(ds: list[Nested], dim: int = 0) -> Nested:
    first = ds[0]
    return {
        k: cat([d[k] for d in ds], dim) if isinstance(v, dict) else torch.cat([d[k] for d in ds], dim)
        for k, v in first.items()
    }


def unbind(d: Nested, dim: int = 0) -> list[Nested]:
    parts = {k: unbind(v, dim) if isinstance(v, dict) else v.unbind(dim) for k, v in d.items()}
    n = len(next(iter(parts.values())))
    return [{k: p[i] for k, p in parts.items()} for i in range(n)]


def update(d: Nested, other: Nested, batch: torch.Size) -> Nested:
    for k, v in other.items():
        if isinstance(v, dict):
            update(d.setdefault(k, {}), v, batch)
        else:
            _check(k, v, batch)
            d[k] = v
    return d


def select(d: Nested, *selected: Key) -> Nested:
    out: Nested = {}
    for key in selected:
        path = (key,) if isinstance(key, str) else key
        src, dst = d, out
        for k in path[:-1]:
            src, dst = src[k], dst.setdefault(k, {})
        dst[path[-1]] = src[path[-1]]
    return out


def exclude(d: Nested, *excluded: Key) -> Nested:
    paths = [(key,) if isinstance(key, str) else key for key in excluded]
    return _exclude(d, paths)


def _exclude(d: Nested, paths: list[tuple[str, ...]]) -> Nested:
    here = {p[0] for p in paths if len(p) == 1}
    out = {}
    for k, v in d.items():
        if k in here:
            continue
        if isinstance(v, dict):
            out[k] = _exclude(v, [p[1:] for p in paths if len(p) > 1 and p[0] == k])
        else:
            out[k] = v
    return out


def memmap(d: Nested, prefix: str) -> Nested:
    """Writes each leaf to ``prefix/<dotted key>.bin`` (file-backed, shared) plus ``meta.json`` last."""
    os.makedirs(prefix, exist_ok=True)
    out: Nested = {}
    meta = {}
    for path, t in leaves(d):
        name = ".".join(path)
        mm = torch.from_file(os.path.join(prefix, name + ".bin"), shared=True, size=t.numel(), dtype=t.dtype)
        mm = mm.view(t.shape)
        mm.copy_(t)
        node = out
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = mm
        meta[name] = {"dtype": str(t.dtype), "shape": list(t.shape)}
    with open(os.path.join(prefix, "meta.json"), "w") as f:
        json.dump(meta, f)
    return out


def consolidate(d: Nested) -> Nested:
    """Copies every leaf into one uint8 storage (8-byte aligned) and returns views into it."""
    flat = list(leaves(d))
    chunks = []
    for _, t in flat:
        b = t.contiguous().view(-1).view(torch.uint8)
        chunks.append(b)
        if b.numel() % _ALIGN:
            chunks.append(_PAD[: -b.numel() % _ALIGN])
    storage = torch.cat(chunks)
    out: Nested = {}
    offset = 0
    for path, t in flat:
        nbytes = t.numel() * t.element_size()
        view = storage[offset : offset + nbytes].view(t.dtype).view(t.shape)
        offset += nbytes + (-nbytes % _ALIGN)
        node = out
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = view
    return out
