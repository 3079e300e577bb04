"""Pytrees in tensor storages: nests of dicts and tuples (and lists inside them) whose leaves are tensors.

A tensor storage keeps a pytree as a TensorDict of its leaves, keyed by their position in the
flattened tree (``"0"``, ``"1"``, ...), plus the tree's structure; reads rebuild the tree. So a
``{"a": x, "b": {"c": [y, (z,)]}, 30: w}`` item is stored like any TensorDict (same checks, memory
maps, devices) and comes back with its structure, each leaf batched along the item dims.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
from tdict import TensorDict
from torch.utils import _pytree

__all__ = ["TREE_ROOTS", "describe_tree", "is_tensor_tree", "td_to_tree", "tree_iter", "tree_to_td"]

# root types a storage treats as a pytree (a list at the root is a list of items, as in TorchRL)
TREE_ROOTS = (dict, tuple)


def tree_iter(data: Any) -> Iterator[Any]:
    """The leaves of a pytree (nested dicts, lists and tuples), in flattening order.

    Examples:
        >>> import torch
        >>> [leaf.tolist() for leaf in tree_iter({"a": torch.zeros(1), "b": (torch.ones(1),)})]
        [[0.0], [1.0]]
    """
    yield from _pytree.tree_leaves(data)


def is_tensor_tree(data: Any) -> bool:
    """True for a dict or tuple whose leaves are all tensors (at least one)."""
    if type(data) not in TREE_ROOTS:
        return False
    leaves = _pytree.tree_leaves(data)
    return bool(leaves) and all(isinstance(leaf, torch.Tensor) for leaf in leaves)


def describe_tree(spec: Any) -> str:
    """A short description of a tree structure, for error messages."""
    text = str(spec)
    return text if len(text) <= 200 else text[:197] + "..."


def tree_to_td(owner: str, data: Any, item_dims: int | None, spec: Any = None) -> tuple[TensorDict, Any]:
    """``(TensorDict of the leaves, structure)`` of the pytree ``data``.

    Args:
        owner: who is asking, for error messages.
        data: the pytree.
        item_dims: how many leading dims of every leaf index items (0 for a single item), or
            ``None`` for one (the first leaf's first dim).
        spec: the structure already stored; a different one raises ``ValueError``.
    """
    leaves, got = _pytree.tree_flatten(data)
    if not leaves or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        kinds = sorted({type(leaf).__name__ for leaf in leaves if not isinstance(leaf, torch.Tensor)})
        raise TypeError(
            f"{owner}: a tensor storage holds pytrees whose leaves are tensors; got leaves of type {kinds or 'none'}."
        )
    if spec is not None and got != spec:
        raise ValueError(
            f"{owner}: the data's structure differs from the stored one: expected {describe_tree(spec)}, "
            f"got {describe_tree(got)}."
        )
    dims = 1 if item_dims is None else item_dims
    lead = leaves[0].shape[:dims]
    for i, leaf in enumerate(leaves):
        if leaf.shape[:dims] != lead:
            raise ValueError(
                f"{owner}: leaf {i} of the pytree has shape {list(leaf.shape)}, expected leading dims {list(lead)} "
                "as the first leaf (one entry per item)."
            )
    return TensorDict({str(i): leaf for i, leaf in enumerate(leaves)}, batch_size=lead), got


def td_to_tree(td: Any, spec: Any) -> Any:
    """The pytree of structure ``spec`` whose leaves are ``td``'s entries ``"0"``, ``"1"``, ..."""
    return _pytree.tree_unflatten([td.get(str(i)) for i in range(spec.num_leaves)], spec)
