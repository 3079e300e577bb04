"""Views over the keys of a tensor collection (nested and leaf-only iteration)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

from .utils import unravel_key


def default_is_leaf(cls: type) -> bool:
    """Tensors are leaves; tensor collections, non-tensor data included, are not (tensordict 0.14).

    So ``keys(include_nested=True, leaves_only=True)`` lists the tensors only: a
    :class:`~tdict.NonTensorData` is listed by ``keys()`` / ``keys(True)`` but never by
    ``leaves_only`` (pass ``is_leaf=is_leaf_nontensor`` to have it there).
    """
    return not getattr(cls, "_is_tensor_collection", False)


def is_leaf_nontensor(cls: type) -> bool:
    """Tensors and non-tensor data (:class:`~tdict.NonTensorData`, :class:`~tdict.NonTensorStack`) are leaves.

    Examples:
        >>> from tdict import TensorDict
        >>> td = TensorDict(a={}, b="a string!", c=torch.zeros(()))
        >>> list(td.keys(leaves_only=True)), list(td.keys(leaves_only=True, is_leaf=is_leaf_nontensor))
        (['c'], ['b', 'c'])
    """
    return not getattr(cls, "_is_tensor_collection", False) or getattr(cls, "_is_non_tensor", False)


_Tensor = torch.Tensor
# entry kinds: a tensor, another leaf, a nested collection, a non-leaf that is never walked into
# (non-tensor data under default_is_leaf: listed without leaves_only, as in tensordict)
_TENSOR, _LEAF, _NODE, _OPAQUE = 0, 1, 2, 3
_KIND_BY_TYPE: dict[type, int] = {}  # kinds under default_is_leaf, computed once per type
_KIND_BY_TYPE_NONTENSOR: dict[type, int] = {}  # the same under is_leaf_nontensor


def entry_kind(cls: type, is_leaf: Callable) -> int:
    """The kind of an entry of type ``cls`` under ``is_leaf``."""
    if issubclass(cls, torch.Tensor):
        return _TENSOR
    if is_leaf(cls):
        return _LEAF
    return _OPAQUE if getattr(cls, "_is_non_tensor", False) else _NODE


class KeysView:
    """A live view of a collection's keys.

    Nested keys come out as tuples; ``in`` accepts strings and tuples.

    Examples:
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
        self._kinds = (
            _KIND_BY_TYPE
            if self._is_leaf is default_is_leaf
            else _KIND_BY_TYPE_NONTENSOR
            if self._is_leaf is is_leaf_nontensor
            else {}
        )

    def _kind(self, cls: type) -> int:
        """What an entry of type ``cls`` is, cached per type (``is_leaf`` depends only on the type)."""
        kind = self._kinds.get(cls)
        if kind is None:
            kind = self._kinds[cls] = entry_kind(cls, self._is_leaf)
        return kind

    def _collect(self, td: Any, prefix: tuple, out: list) -> list:
        if td._is_lazy and prefix:  # a lazy stack lists its keys without stacking its values
            out.extend(
                prefix + (k if isinstance(k, tuple) else (k,))
                for k in td.keys(self._include_nested, self._leaves_only, self._is_leaf)
            )
            return out
        for key, value in td._items_raw():
            if type(value) is _Tensor:  # the common entry: no kind lookup
                out.append(prefix + (key,) if prefix else key)
            else:
                self._collect_entry(key, value, prefix, out)
        return out

    def _collect_entry(self, key: str, value: Any, prefix: tuple, out: list) -> None:
        """Add the key(s) of one entry that is not a plain tensor."""
        kind = self._kinds.get(type(value))
        if kind is None:
            kind = self._kind(type(value))
        if kind != _NODE:
            if kind != _OPAQUE or not self._leaves_only:
                out.append(prefix + (key,) if prefix else key)
            return
        full = prefix + (key,)
        if not self._leaves_only:
            out.append(full if prefix else key)
        if self._include_nested:
            self._collect(value, full, out)

    def __iter__(self) -> Iterator:
        keys = self._collect(self._td, (), [])
        if self._sort:
            keys.sort(key=lambda k: (k,) if isinstance(k, str) else k)
        return iter(keys)

    def __len__(self) -> int:
        # list(view) asks for the length first: count without building the key tuples
        return self._count(self._td)

    def _count(self, td: Any) -> int:
        count = 0
        for _, value in td._items_raw():
            count += 1 if type(value) is _Tensor else self._count_entry(value)
        return count

    def _count_entry(self, value: Any) -> int:
        """How many keys one entry that is not a plain tensor adds."""
        kind = self._kinds.get(type(value))
        if kind is None:
            kind = self._kind(type(value))
        if kind != _NODE:
            return 0 if kind == _OPAQUE and self._leaves_only else 1
        count = 0 if self._leaves_only else 1
        if self._include_nested:
            count += (
                len(list(value.keys(True, self._leaves_only, self._is_leaf))) if value._is_lazy else self._count(value)
            )
        return count

    def __contains__(self, key: Any) -> bool:
        """Is ``key`` there (with ``leaves_only``: and not a sub-collection)? Non-tensor data counts
        as there under ``leaves_only`` too (tensordict checks presence), though iterating skips it."""
        key = unravel_key(key)
        if isinstance(key, str):
            value = self._td._get_str(key, None)
        elif not self._include_nested:
            return False
        else:
            try:
                value = self._td._get_tuple(key, None)
            except KeyError:  # the path runs through a leaf
                return False
        return value is not None and (not self._leaves_only or self._kind(type(value)) != _NODE)

    def __repr__(self) -> str:
        return f"KeysView({list(self)})"
