"""Views over the keys of a tensor collection (nested and leaf-only iteration)."""
from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

from ._utils import unravel_key


def default_is_leaf(cls: type) -> bool:
    """Tensors and non-tensor data are leaves; tensor collections are not."""
    return not getattr(cls, "_is_tensor_collection", False) or getattr(cls, "_is_non_tensor", False)


def is_leaf_nontensor(cls: type) -> bool:
    """Like :func:`default_is_leaf` (kept under tensordict's name for migration)."""
    return default_is_leaf(cls)


_LEAF_BY_TYPE: dict[type, bool] = {}  # default_is_leaf per entry type, computed once


class KeysView:
    """A live view of a collection's keys.

    Nested keys come out as tuples; ``in`` accepts strings and tuples.

    Example:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "b": {"c": torch.zeros(2)}}, [2])
        >>> list(td.keys(include_nested=True, leaves_only=True))
        ['a', ('b', 'c')]
    """

    __slots__ = ("_td", "_include_nested", "_leaves_only", "_is_leaf", "_sort")

    def __init__(self, td: Any, include_nested: bool, leaves_only: bool, is_leaf: Callable | None, sort: bool):
        self._td = td
        self._include_nested = include_nested
        self._leaves_only = leaves_only
        self._is_leaf = is_leaf if is_leaf is not None else default_is_leaf
        self._sort = sort

    def _collect(self, td: Any, prefix: tuple, out: list) -> list:
        if td._is_lazy and prefix:  # a lazy stack lists its keys without stacking its values
            out.extend(prefix + (k if isinstance(k, tuple) else (k,)) for k in td.keys(self._include_nested, self._leaves_only, self._is_leaf))
            return out
        is_leaf = self._is_leaf
        default = is_leaf is default_is_leaf
        for key, value in td._items_raw():
            full = prefix + (key,) if prefix else key
            if isinstance(value, torch.Tensor):
                out.append(full)
                continue
            cls = type(value)
            leaf = _LEAF_BY_TYPE.get(cls) if default else None
            if leaf is None:
                leaf = is_leaf(cls)
                if default:
                    _LEAF_BY_TYPE[cls] = leaf
            if leaf or not self._leaves_only:
                out.append(full)
            if not leaf and self._include_nested:
                self._collect(value, full if prefix else (key,), out)
        return out

    def __iter__(self) -> Iterator:
        keys = self._collect(self._td, (), [])
        if self._sort:
            keys.sort(key=lambda k: (k,) if isinstance(k, str) else k)
        return iter(keys)

    def __len__(self) -> int:
        return len(self._collect(self._td, (), []))

    def __contains__(self, key: Any) -> bool:
        key = unravel_key(key)
        if isinstance(key, str):
            value = self._td._get_str(key, None)
            if value is None:
                return False
            return not self._leaves_only or isinstance(value, torch.Tensor) or self._is_leaf(type(value))
        if not self._include_nested:
            return False
        try:
            value = self._td._get_tuple(key, None)
        except KeyError:  # the path runs through a leaf
            return False
        if value is None:
            return False
        return not self._leaves_only or isinstance(value, torch.Tensor) or self._is_leaf(type(value))

    def __repr__(self) -> str:
        return f"KeysView({list(self)})"
