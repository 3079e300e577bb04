"""Group-level plumbing of :class:`tdict.PersistentTensorDict`: keys, batch sizes, pickling, repr.

Everything here walks the file's structure (groups, dataset shapes and attributes); no dataset is
read. Batch sizes: :func:`check_group` validates one against the datasets, :func:`infer_batch_sizes`
computes the longest shared leading shapes, :func:`store_batch_sizes` / :func:`load_batch_sizes`
keep them (and the dim names) in the groups' attributes, so that a file written by ``to_h5``
reopens with the batch sizes it was written with.
"""

# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch

from .._core.keys import _NODE, _OPAQUE, KeysView
from .._core.utils import _key_to_tuple, check_names, unravel_key
from ..errors import ShapeMismatchError, incompatible_leaf
from ..non_tensor import NonTensorData
from . import h5

if TYPE_CHECKING:
    from ..persistent import PersistentTensorDict

__all__ = [
    "PersistentKeysView",
    "check_group",
    "infer_batch_sizes",
    "is_persistent",
    "load_batch_sizes",
    "parsed_names",
    "plan_batch_size",
    "repr_of",
    "store_batch_sizes",
    "tree_restore",
    "tree_state",
]

_BATCH_ATTR = "tdict_batch_size"  # the batch size of a group, written by from_dict / to_h5
_NAMES_ATTR = "tdict_names"


def is_persistent(obj: Any) -> bool:
    return getattr(type(obj), "_is_persistent", False)


class PersistentKeysView(KeysView):
    """Keys of a PersistentTensorDict, listed from the file's structure (no data is read)."""

    __slots__ = ()

    def _collect(self, td: Any, prefix: tuple, out: list) -> list:
        if not is_persistent(td):
            return KeysView._collect(self, td, prefix, out)
        non_tensor_kind = self._kind(NonTensorData)
        group_kind = self._kind(type(td))
        for key, kind, node in td._kinds():
            name = prefix + (key,) if prefix else key
            if kind == "tensor":
                out.append(name)
            elif kind == "non_tensor":
                if non_tensor_kind != _OPAQUE or not self._leaves_only:
                    out.append(name)
            elif group_kind != _NODE:
                out.append(name)
            else:
                if not self._leaves_only:
                    out.append(name)
                if self._include_nested:
                    self._collect(td._child(key, node), prefix + (key,), out)
        return out

    def _count(self, td: Any) -> int:
        return len(self._collect(td, (), []))

    def __contains__(self, key: Any) -> bool:
        td = self._td
        parts = _key_to_tuple(key)
        if len(parts) > 1 and not self._include_nested:
            return False
        node = td._path_node(parts)
        if node is None:
            return False
        if not self._leaves_only:
            return True
        h5py = h5.require_h5py()
        return not isinstance(node, h5py.Group) or self._kind(type(td)) != _NODE


def parsed_names(names: Sequence[str | None], ndim: int) -> list | None:
    names = check_names(names, ndim)
    return names if any(n is not None for n in names) else None


def check_group(group: Any, bs: torch.Size, path: tuple) -> None:
    """Every tensor dataset below ``group`` starts with ``bs`` (nested groups checked against ``bs`` too)."""
    if not bs:
        return
    h5py = h5.require_h5py()
    for key, node in group.items():
        if isinstance(node, h5py.Group):
            check_group(node, bs, path + (key,))
        elif not h5.is_non_tensor_dataset(node) and torch.Size(node.shape[: len(bs)]) != bs:
            raise ValueError(
                f"Key {unravel_key(path + (key,))!r}: dataset of shape {list(node.shape)} does not start with "
                f"the batch size {list(bs)}."
            )


def plan_batch_size(td: PersistentTensorDict, new: torch.Size, plan: list, path: tuple) -> None:
    """Check that ``new`` fits every dataset of ``td`` (nested collections keep a longer batch size
    that starts with ``new``, else take ``new``); append ``(collection, batch size)`` pairs."""
    h5py = h5.require_h5py()
    n = len(new)
    for key, node in td._group.items():
        full = path + (key,)
        if isinstance(node, h5py.Group):
            child = td._child(key, node)
            child_bs = child._full_bs if child._full_bs[:n] == new else new
            plan_batch_size(child, child_bs, plan, full)
        elif not h5.is_non_tensor_dataset(node) and torch.Size(node.shape[:n]) != new:
            raise ShapeMismatchError(
                f"Cannot set batch_size {list(new)}: {incompatible_leaf(unravel_key(full), node.shape, new)}."
            )
    plan.append((td, new))


def infer_batch_sizes(td: PersistentTensorDict, batch_dims: int | None = None) -> None:
    """Give ``td`` and its nested collections the longest leading shape their entries share
    (at most ``batch_dims`` dims)."""
    h5py = h5.require_h5py()
    shapes = []
    for key, node in td._group.items():
        if isinstance(node, h5py.Group):
            child = td._child(key, node)
            infer_batch_sizes(child, batch_dims)
            shapes.append(child._full_bs)
        elif not h5.is_non_tensor_dataset(node):
            shapes.append(torch.Size(node.shape))
    common: list[int] = []
    if shapes:
        for dims in zip(*shapes):
            if any(d != dims[0] for d in dims):
                break
            common.append(dims[0])
    bs = torch.Size(common if batch_dims is None else common[:batch_dims])
    if td._names is not None and len(td._names) != len(bs):
        td._names = None
    td._full_bs = td._batch_size = bs


def store_batch_sizes(td: PersistentTensorDict) -> None:
    """Record the batch size (and names) of every group in its attributes (read by :func:`load_batch_sizes`)."""
    h5py = h5.require_h5py()
    td._group.attrs[_BATCH_ATTR] = list(td._full_bs)
    if td._names is not None:
        td._group.attrs[_NAMES_ATTR] = [n if n is not None else "" for n in td._names]
    for key, node in td._group.items():
        if isinstance(node, h5py.Group):
            store_batch_sizes(td._child(key, node))


def load_batch_sizes(td: PersistentTensorDict) -> bool:
    """Apply the batch sizes (and names) stored by :func:`store_batch_sizes`; False, changing
    nothing, when a group has none or they no longer fit the datasets (the file was edited since)."""
    h5py = h5.require_h5py()
    plan: list = []

    def collect(group: Any, parent_bs: torch.Size) -> bool:
        stored = group.attrs.get(_BATCH_ATTR)
        if stored is None:
            return False
        bs = torch.Size(int(n) for n in stored)
        if bs[: len(parent_bs)] != parent_bs:
            return False
        names = group.attrs.get(_NAMES_ATTR)
        plan.append(
            (group, bs, [str(n) or None for n in names] if names is not None and len(names) == len(bs) else None)
        )
        for node in group.values():
            if isinstance(node, h5py.Group):
                if not collect(node, bs):
                    return False
            elif not h5.is_non_tensor_dataset(node) and torch.Size(node.shape[: len(bs)]) != bs:
                return False
        return True

    if not collect(td._group, torch.Size()):
        return False
    by_group = {group.name: (bs, names) for group, bs, names in plan}

    def apply(node: PersistentTensorDict) -> None:
        bs, names = by_group[node._group.name]
        node._full_bs = node._batch_size = bs
        node._names = None if names is None else parsed_names(names, len(bs))
        for key, child in node._group.items():
            if isinstance(child, h5py.Group):
                apply(node._child(key, child))

    apply(td)
    return True


def tree_state(td: PersistentTensorDict) -> dict:
    return {
        "batch_size": tuple(td._full_bs),
        "device": td._device,
        "names": td._names,
        "kwargs": td._kwargs,
        "locked": td._is_locked,
        "children": {k: tree_state(c) for k, c in td._children.items()},
    }


def tree_restore(cls: type, group: Any, state: dict, mode: str) -> PersistentTensorDict:
    td = cls._of_group(group, torch.Size(state["batch_size"]), state["device"], state["names"], state["kwargs"], mode)
    td._is_locked = state["locked"]
    for key, child in state["children"].items():
        if key in group:
            td._children[key] = tree_restore(cls, group[key], child, mode)
    return td


def repr_of(td: PersistentTensorDict, indent: int) -> str:
    pad = " " * (indent + 8)
    device = td._device if td._device is not None else torch.device("cpu")
    lines = []
    for key, kind, node in td._kinds():
        if kind == "group":
            desc = repr_of(td._child(key, node), indent + 8)
        elif kind == "non_tensor":
            desc = f"NonTensorData(batch_size={td.batch_size}, device={td._device})"
        else:
            shape = td.batch_size + torch.Size(node.shape[len(td._full_bs) :])
            desc = f"Tensor(shape={shape}, device={device}, dtype={h5.torch_dtype(node)}, is_shared=False)"
        lines.append(f"{pad}{key}: {desc}")
    fields = ",\n".join(lines)
    inner = " " * (indent + 4)
    return (
        f"PersistentTensorDict(\n{inner}fields={{\n{fields}}},\n{inner}batch_size={td.batch_size},\n"
        f"{inner}device={td._device},\n{inner}is_shared=False)"
    )
