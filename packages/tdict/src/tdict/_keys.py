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


_TENSOR, _LEAF, _NODE = 0, 1, 2  # entry kinds: a tensor, another leaf, a nested collection
_KIND_BY_TYPE: dict[type, int] = {}  # kinds under default_is_leaf, computed once per type


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

    __slots__ = ("_td", "_include_nested", "_leaves_only", "_is_leaf", "_sort", "_kinds")

    def __init__(self, td: Any, include_nested: bool, leaves_only: bool, is_leaf: Callable | None, sort: bool):
        self._td = td
        self._include_nested = include_nested
        self._leaves_only = leaves_only
        self._is_leaf = is_leaf if is_leaf is not None else default_is_leaf
        self._sort = sort
        self._kinds = _KIND_BY_TYPE if self._is_leaf is default_is_leaf else {}

    def _kind(self, cls: type) -> int:
        """What an entry of type ``cls`` is, cached per type (``is_leaf`` depends only on the type)."""
        kind = self._kinds.get(cls)
        if kind is None:
            kind = _TENSOR if issubclass(cls, torch.Tensor) else _LEAF if self._is_leaf(cls) else _NODE
            self._kinds[cls] = kind
        return kind

    def _collect(self, td: Any, prefix: tuple, out: list) -> list:
        if td._is_lazy and prefix:  # a lazy stack lists its keys without stacking its values
            out.extend(prefix + (k if isinstance(k, tuple) else (k,)) for k in td.keys(self._include_nested, self._leaves_only, self._is_leaf))
            return out
        kinds, leaves_only, nested = self._kinds, self._leaves_only, self._include_nested
        tensor, append = torch.Tensor, out.append
        for key, value in td._items_raw():
            full = prefix + (key,) if prefix else key
            if type(value) is tensor:  # the common entry: no kind lookup
                append(full)
                continue
            kind = kinds.get(type(value))
            if kind is None:
                kind = self._kind(type(value))
            if kind != 2 or not leaves_only:  # 2 is _NODE (a literal: this loop is hot)
                append(full)
            if kind == 2 and nested:
                self._collect(value, prefix + (key,), out)
        return out

    def __iter__(self) -> Iterator:
        keys = self._collect(self._td, (), [])
        if self._sort:
            keys.sort(key=lambda k: (k,) if isinstance(k, str) else k)
        return iter(keys)

    def __len__(self) -> int:
        # list(view) asks for the length first: count without building the key tuples
        return self._count(self._td)

    def _count(self, td: Any) -> int:
        if td._is_lazy and td is not self._td:
            return len(list(td.keys(self._include_nested, self._leaves_only, self._is_leaf)))
        if td is self._td and type(self) is not KeysView:
            return len(self._collect(td, (), []))  # subclasses define their own walk
        kinds, leaves_only, nested = self._kinds, self._leaves_only, self._include_nested
        if not leaves_only:  # every entry is a key: count the entries, then descend into collections
            count = len(td.keys())
            if nested:
                tensor = torch.Tensor
                for value in td.values():
                    if type(value) is not tensor and (kinds.get(type(value)) or self._kind(type(value))) == 2:
                        count += self._count(value)
            return count
        count = 0
        for value in td.values():
            kind = kinds.get(type(value))
            if kind is None:
                kind = self._kind(type(value))
            if kind != 2:  # _TENSOR or _LEAF
                count += 1
                continue
            if not leaves_only:
                count += 1
            if nested:
                count += self._count(value)
        return count

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
