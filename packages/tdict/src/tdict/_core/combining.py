"""Combining lists of collections: merging their keys and stacking them densely where possible.

Exported by :mod:`tdict` (``merge_tensordicts``, ``maybe_dense_stack``, ``dense_stack_tds``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Sequence

import torch

from ..lazy import LazyStackedTensorDict, lazy_stack
from ..tensordict import TensorDict
from .keys import is_leaf_nontensor
from .utils import NestedKey, is_tensor_collection, normalize_dim, unravel_key

__all__ = ["dense_stack_tds", "maybe_dense_stack", "merge_tensordicts"]


def merge_tensordicts(*tensordicts: Any, callback_exist: Callable | Mapping | None = None) -> Any:
    """Merge collections into a new one (the first one's batch size and device).

    A leaf present in every collection is ``callback_exist(*values)`` when a callback applies to
    it (a callable, or a mapping of nested keys to callables); otherwise the first collection
    holding a leaf provides it.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict, merge_tensordicts
        >>> td = merge_tensordicts(TensorDict(c=0, a=1), TensorDict(c=1, b=2), callback_exist=lambda *v: torch.stack(v))
        >>> td["c"], sorted(td.keys())
        (tensor([0, 1]), ['a', 'b', 'c'])
    """
    if len(tensordicts) < 2:
        raise ValueError(f"merge_tensordicts: needs at least 2 collections, got {len(tensordicts)}.")
    for i, td in enumerate(tensordicts):
        if not is_tensor_collection(td):
            raise TypeError(f"merge_tensordicts: item {i} is a {type(td).__name__}, expected a tensor collection.")
    callbacks = {unravel_key(k): v for k, v in callback_exist.items()} if isinstance(callback_exist, Mapping) else None
    common_callback = None if isinstance(callback_exist, Mapping) else callback_exist
    keys: dict = {}
    for td in tensordicts:
        keys.update(dict.fromkeys(td.keys(True, True, is_leaf_nontensor)))
    out = tensordicts[0].empty(recurse=True)
    for key in keys:
        values = [_get_or_none(td, key) for td in tensordicts]
        callback = callbacks.get(key) if callbacks is not None else common_callback
        if callback is not None and all(v is not None for v in values):
            value = callback(*values)
        else:
            value = next(v for v in values if v is not None)
        out.set(key, value)
    return out


def _get_or_none(td: Any, key: NestedKey) -> Any:
    try:
        return td.get(key, None)
    except KeyError:  # the path runs through a leaf of this collection
        return None


def maybe_dense_stack(items: Sequence[Any], dim: int = 0) -> Any:
    """Stack densely where the structures allow it, lazily where they do not.

    Tensors are stacked with ``torch.stack``. Collections with the same keys and leaf shapes give a
    TensorDict; at any level where keys or shapes differ, that level becomes a lazy stack.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict, maybe_dense_stack
        >>> a, b = TensorDict(x=torch.zeros(3)), TensorDict(x=torch.zeros(4))
        >>> type(maybe_dense_stack([a, a])).__name__, type(maybe_dense_stack([a, b])).__name__
        ('TensorDict', 'LazyStackedTensorDict')
    """
    items = list(items)
    if not items:
        raise ValueError("maybe_dense_stack: items must be a non-empty sequence.")
    if all(isinstance(it, torch.Tensor) for it in items):
        return torch.stack(items, dim)
    for i, it in enumerate(items):
        if not is_tensor_collection(it):
            raise TypeError(
                f"maybe_dense_stack: item {i} is a {type(it).__name__}, expected tensors or tensor collections only."
            )
    bs = items[0].batch_size
    for i, it in enumerate(items):
        if it.batch_size != bs:
            raise RuntimeError(
                f"maybe_dense_stack: item {i} has batch size {list(it.batch_size)}, item 0 has {list(bs)}."
            )
    return _dense_or_lazy(items, normalize_dim(dim, len(bs) + 1))


def _dense_or_lazy(items: list, dim: int) -> Any:
    from ..tensorclass import is_tensorclass

    first = items[0]
    if all(it._is_non_tensor for it in items):
        return torch.stack(items, dim)
    if is_tensorclass(first) and all(type(it) is type(first) for it in items):
        inner = _dense_or_lazy([it._tensordict for it in items], dim)
        return type(first)._from_tensordict(inner) if type(inner) is TensorDict else lazy_stack(items, dim)
    if all(
        type(it) is LazyStackedTensorDict
        and it.stack_dim == first.stack_dim
        and len(it.tensordicts) == len(first.tensordicts)
        for it in items
    ):
        # lazy stacks along the same dim: stack their members pairwise and keep the stack lazy, so
        # that keys held by some members only are kept (a lazy stack of lazy stacks hides them)
        sd = first.stack_dim
        members = [
            _dense_or_lazy([it.tensordicts[j] for it in items], dim if dim <= sd else dim - 1)
            for j in range(len(first.tensordicts))
        ]
        bs = first.batch_size
        return LazyStackedTensorDict._new_unsafe(
            members, sd + 1 if sd >= dim else sd, torch.Size(bs[:dim] + (len(items),) + bs[dim:]), first._stack_dim_name
        )
    if not all(type(it) is TensorDict for it in items) or any(
        it._tensordict.keys() != first._tensordict.keys() for it in items
    ):
        return lazy_stack(items, dim)
    out = {}
    for key, v0 in first._tensordict.items():
        vals = [it._tensordict[key] for it in items]
        if all(isinstance(v, torch.Tensor) and v.shape == v0.shape for v in vals):
            out[key] = torch.stack(vals, dim)
        elif (
            all(is_tensor_collection(v) and v.batch_size == v0.batch_size for v in vals)
            and len({v._is_non_tensor for v in vals}) == 1
        ):
            out[key] = _dense_or_lazy(vals, dim)
        else:
            return lazy_stack(items, dim)
    devices = {it.device for it in items}
    bs = first.batch_size
    return TensorDict._new_unsafe(
        out, torch.Size(bs[:dim] + (len(items),) + bs[dim:]), devices.pop() if len(devices) == 1 else None
    )


def dense_stack_tds(td_list: Any, dim: int | None = None) -> Any:
    """:func:`maybe_dense_stack` of a list of collections, or of a lazy stack's members along its stack dim.

    A collection that is not a lazy stack is returned as is.
    """
    if isinstance(td_list, LazyStackedTensorDict):
        return maybe_dense_stack(td_list.tensordicts, td_list.stack_dim)
    if is_tensor_collection(td_list):
        return td_list
    if dim is None:
        raise ValueError("dense_stack_tds: pass dim when stacking a list of collections.")
    return maybe_dense_stack(td_list, dim)
