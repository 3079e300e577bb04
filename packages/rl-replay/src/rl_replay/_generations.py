"""Slot generations: a stamp per storage slot that advances with every write to the slot.

A consumer that holds an index (sampled earlier) compares the stamp it got with the slot's current
one to tell whether the slot still holds the item it sampled. The stamps live on the storage
(``storage._slot_generations``, one int64 per dim-0 slot, ``-1`` for never written), not on the
writer, so that buffers sharing a storage see each other's writes. They are process-local.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["bump_generations", "generations_of", "invalidate_generations", "slot_count"]


def slot_count(storage: Any) -> int:
    """The number of dim-0 slots of ``storage`` (rows of a multi-dim storage)."""
    shape = getattr(storage, "shape", None)
    if getattr(storage, "ndim", 1) > 1 and shape is not None and getattr(storage, "initialized", False):
        return int(shape[0])
    return int(storage.max_size)


def _device(storage: Any) -> torch.device:
    device = getattr(storage, "device", None)
    return torch.device(device) if device is not None and device != "auto" else torch.device("cpu")


def _stamps(storage: Any, allocate: bool) -> torch.Tensor | None:
    stamps = storage._slot_generations
    if stamps is None and allocate:
        stamps = storage._slot_generations = torch.full(
            (slot_count(storage),), -1, dtype=torch.int64, device=_device(storage)
        )
    return stamps


def bump_generations(storage: Any, index: Any, allocate: bool, laps: int = 0) -> None:
    """Advances the stamp of every slot in ``index`` once per write (repeated slots several times),
    plus ``laps`` for every slot (an ``extend`` longer than the storage writes each slot ``laps``
    more times). Allocates the stamps when ``allocate``; else only updates existing ones."""
    stamps = _stamps(storage, allocate)
    if stamps is None:
        return
    if laps:
        stamps += laps
    if isinstance(index, int):
        stamps[index] += 1
        return
    index = torch.as_tensor(index, dtype=torch.int64).reshape(-1).to(stamps.device)
    if index.numel():
        stamps.index_put_((index,), torch.ones_like(index), accumulate=True)


def invalidate_generations(storage: Any) -> None:
    """Advances every written slot's stamp (the buffer was emptied: every handle is stale)."""
    stamps = storage._slot_generations
    if stamps is not None:
        stamps[stamps >= 0] += 1


def generations_of(stamps: torch.Tensor | None, index: Any, ndim: int = 1) -> torch.Tensor:
    """The entries of ``stamps`` for the dim-0 slots in ``index`` (``-1``: never written, or
    outside the storage).

    ``index`` is an int, a tensor of slots, a tuple of per-dim coordinates (its first entry is
    used), or a ``[N, ndim]`` tensor of coordinates for a storage with ``ndim > 1``.
    """
    if isinstance(index, tuple):
        index = index[0]
    elif isinstance(index, torch.Tensor) and ndim > 1 and index.ndim >= 2 and index.shape[-1] == ndim:
        index = index[..., 0]
    device = index.device if isinstance(index, torch.Tensor) else torch.device("cpu")
    index = torch.as_tensor(index, dtype=torch.int64, device=device)
    if stamps is None or not stamps.numel():
        return torch.full(index.shape, -1, dtype=torch.int64, device=device)
    n = stamps.numel()
    at = index.to(stamps.device)
    found = stamps[at.clamp(0, n - 1)]
    found = torch.where((at >= 0) & (at < n), found, torch.full_like(found, -1))
    return found.to(device)
