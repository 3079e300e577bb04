"""Checks a storage runs before a write: the data has exactly the stored keys and shapes (nothing half-written)."""

from __future__ import annotations

from typing import Any

import torch
from tdict import LazyStackedTensorDict, is_tensor_collection

__all__ = ["RaggedLeaves", "check_write", "is_ragged_stack", "stored_leaves", "write_shape"]


class RaggedLeaves:
    """The stored leaves of a lazy stack whose members' entries differ in shape: per member
    ``{key: feature shape}``, checked member by member along ``stack_dim``."""

    def __init__(self, stack_dim: int, members: list) -> None:
        self.stack_dim = stack_dim
        self.members = members

    def get(self, key: Any, default: Any = None) -> Any:
        return default


def is_ragged_stack(data: Any, item_dims: int) -> bool:
    """Whether ``data`` is a lazy stack along a feature dim (not one of the ``item_dims`` leading
    dims) whose members' entries differ in keys or shapes, so that it cannot be stored densely."""
    if type(data) is not LazyStackedTensorDict or data.stack_dim < item_dims or len(data.tensordicts) < 2:
        return False
    first = stored_leaves(data.tensordicts[0], 0)
    return any(stored_leaves(m, 0) != first for m in data.tensordicts[1:])


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
    if isinstance(leaves, RaggedLeaves):
        dim = leaves.stack_dim
        if not is_tensor_collection(data) or data.batch_dims <= dim or data.batch_size[dim] != len(leaves.members):
            got = list(data.batch_size) if is_tensor_collection(data) else type(data).__name__
            raise ValueError(
                f"{owner}: this storage holds a stack of {len(leaves.members)} along dim {dim}; got {got} to write."
            )
        sub_lead = lead[:dim] + lead[dim + 1 :]
        for member_leaves, member in zip(leaves.members, data.unbind(dim)):
            check_write(owner, member_leaves, member, sub_lead)
        return
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


def stored_leaves(storage: Any, batch_dims: int) -> Any:
    """``{key: feature shape}`` of a storage's leaves (``{None: shape}`` for a tensor storage; a
    :class:`RaggedLeaves` for a lazy stack of differently shaped members)."""
    if isinstance(storage, torch.Tensor):
        return {None: storage.shape[batch_dims:]}
    if is_ragged_stack(storage, 0) and storage.stack_dim < batch_dims:
        return RaggedLeaves(storage.stack_dim, [stored_leaves(m, batch_dims - 1) for m in storage.tensordicts])
    return {key: value.shape[batch_dims:] for key, value in storage.items(include_nested=True, leaves_only=True)}
