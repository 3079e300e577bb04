"""Checks a storage runs before a write: the data has exactly the stored keys and shapes (nothing half-written)."""

from __future__ import annotations

from typing import Any

import torch
from tdict import is_tensor_collection

__all__ = ["check_write", "stored_leaves", "write_shape"]


def write_shape(storage_shape: torch.Size, index: Any) -> torch.Size:
    """The leading shape a write at ``index`` covers in a storage of leading shape ``storage_shape``."""
    if isinstance(index, int):
        return storage_shape[1:]
    if isinstance(index, torch.Tensor) and index.ndim == 1 and index.dtype != torch.bool:
        return torch.Size([index.shape[0], *storage_shape[1:]])
    # anything else (slices, masks, tuples): let torch work it out on a zero-stride dummy
    return torch.zeros((), dtype=torch.uint8).expand(storage_shape)[index].shape


def check_write(owner: str, leaves: dict, data: Any, lead: torch.Size) -> None:
    """Raises (before anything is written) unless ``data`` has exactly the stored keys and shapes.

    Args:
        owner: the storage's name for the error message.
        leaves: the stored leaves, ``{key: feature shape}`` (key ``None`` for a plain tensor).
        data: what is about to be written.
        lead: the leading shape ``data`` must have (the indexed part of the storage).
    """
    if None in leaves:
        if not isinstance(data, torch.Tensor):
            raise TypeError(f"{owner}: this storage holds a tensor; got {type(data).__name__} to write.")
        expected = lead + leaves[None]
        if data.shape != expected:
            raise ValueError(f"{owner}: data has shape {list(data.shape)}, expected {list(expected)} at this index.")
        return
    if not is_tensor_collection(data):
        raise TypeError(f"{owner}: this storage holds TensorDicts; got {type(data).__name__} to write.")
    got = {}
    for key, value in data.items(include_nested=True, leaves_only=True):
        got[key] = value.shape
    if got.keys() != leaves.keys():
        missing = sorted(leaves.keys() - got.keys(), key=str)
        extra = sorted(got.keys() - leaves.keys(), key=str)
        raise KeyError(f"{owner}: the data's keys differ from the stored ones: missing {missing}, unexpected {extra}.")
    nlead = len(lead)
    for key, shape in got.items():
        if shape[:nlead] != lead or shape[nlead:] != leaves[key]:
            raise ValueError(
                f"{owner}: key {key!r} has shape {list(shape)}, expected {list(lead + leaves[key])} at this index."
            )


def stored_leaves(storage: Any, batch_dims: int) -> dict:
    """``{key: feature shape}`` of a storage's leaves (``{None: shape}`` for a tensor storage)."""
    if isinstance(storage, torch.Tensor):
        return {None: storage.shape[batch_dims:]}
    return {key: value.shape[batch_dims:] for key, value in storage.items(include_nested=True, leaves_only=True)}
