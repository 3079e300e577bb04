"""``update(source, update_batch_size=True)``: the destination takes the source's batch size.

When a source collection's batch size clashes with the destination's (their common leading dims
differ), ``update`` raises unless ``update_batch_size=True``; then the destination (a TensorDict)
drops its entries, takes the source's batch size and the source's entries. A sub-TensorDict of the
destination that the source also holds keeps its identity (it is rebatched the same way). Every
check runs before the first change.
"""

from __future__ import annotations

from typing import Any

from ..errors import LOCKED
from .utils import is_tensor_collection


def batch_sizes_clash(dest: Any, source: Any) -> bool:
    """Whether the leading dims the two batch sizes share differ (a loose check, as tensordict's)."""
    a, b = dest.batch_size, source.batch_size
    n = min(len(a), len(b))
    return a[:n] != b[:n]


def check_rebatch(dest: Any, source: Any, *, update_batch_size: bool, inplace: bool, keys_to_update: Any) -> None:
    """Raise unless ``dest`` can take ``source``'s batch size in ``update``."""
    got = f"(destination {list(dest.batch_size)}, source {list(source.batch_size)})"
    if not update_batch_size:
        raise RuntimeError(
            f"update: the batch sizes differ {got}: pass update_batch_size=True to give the destination the source's."
        )
    if inplace:
        raise RuntimeError(f"update: the batch sizes differ {got}: update_batch_size=True cannot work inplace=True.")
    if keys_to_update is not None:
        raise RuntimeError(
            f"update: the batch sizes differ {got}: update_batch_size=True does not take keys_to_update."
        )
    _check_tree(dest, source)


def _check_tree(dest: Any, source: Any) -> None:
    from ..tensordict import TensorDict

    if dest.is_locked:
        raise RuntimeError(f"{LOCKED}: update(update_batch_size=True) cannot change a locked collection's batch size.")
    if not isinstance(dest, TensorDict):
        raise NotImplementedError(
            f"update(update_batch_size=True): cannot change the batch size of a {type(dest).__name__} (TensorDict only)."
        )
    missing = [k for k in dest.keys() if k not in source.keys()]
    if missing:
        raise RuntimeError(
            f"update(update_batch_size=True): the destination's keys {missing} are not in the source: "
            "every entry must be replaced when the batch size changes."
        )
    for key, cur in dest.items():
        value = source._get_str(key, None)
        if rebatches(cur, value):
            _check_tree(cur, value)


def rebatches(cur: Any, value: Any) -> bool:
    """Whether ``cur`` (a destination entry) is rebatched in place to take ``value`` rather than replaced."""
    from ..tensordict import TensorDict

    return (
        isinstance(cur, TensorDict)
        and is_tensor_collection(value)
        and not value._is_non_tensor
        and not getattr(type(value), "_is_tensorclass", False)
    )


def rebatch(dest: Any, source: Any, clone: bool) -> None:
    """Give ``dest`` (checked by :func:`check_rebatch`) ``source``'s batch size and entries."""
    old = {k: dest._get_str(k, None) for k in dest.keys()}
    dest.exclude(*old, inplace=True)
    dest.batch_size = source.batch_size
    for key, value in source.items():
        cur = old.get(key)
        if rebatches(cur, value):
            rebatch(cur, value, clone)
            value = cur
        elif clone:
            value = value.clone()
        dest.set(key, value)
