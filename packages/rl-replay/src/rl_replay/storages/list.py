"""ListStorage: any Python objects, one list slot per item."""

from __future__ import annotations

from typing import Any

import torch
from tdict import is_tensor_collection

from .base import Storage

__all__ = ["ListStorage", "UNBOUNDED"]

#: the ``max_size`` of a storage built with ``max_size=None`` (no limit but memory)
UNBOUNDED = torch.iinfo(torch.int64).max


def _positions(index: Any, length: int) -> list[int] | int:
    if isinstance(index, int):
        return index
    if isinstance(index, slice):
        return list(range(*index.indices(length)))
    if isinstance(index, torch.Tensor):
        return int(index) if index.ndim == 0 else index.tolist()
    return [int(i) for i in index]


class ListStorage(Storage):
    """Stores arbitrary objects (tensors, TensorDicts, strings, dicts...) in a list.

    ``get`` of several indices returns a list; the buffer's default ``collate_fn`` stacks tensors
    and TensorDicts.

    Args:
        max_size: the capacity in items (``None``: unbounded).
        compilable: count the items in a Python int rather than a shareable tensor (see
            :class:`~rl_replay.Storage`; default ``False``).

    Examples:
        >>> s = ListStorage(3)
        >>> s.set([0, 1], ["a", {"b": 1}])
        >>> len(s), s.get([1, 0])
        (2, [{'b': 1}, 'a'])
    """

    def __init__(self, max_size: int | None = 1000, *, compilable: bool = False) -> None:
        super().__init__(UNBOUNDED if max_size is None else max_size, compilable=compilable)
        self._items: list = []

    def set(self, index: Any, data: Any, *, set_cursor: bool = True) -> None:
        pos = _positions(index, self.max_size)
        if isinstance(pos, int):
            pos, data = [pos], [data]
        elif len(pos) != len(data):
            raise ValueError(f"ListStorage.set: {len(pos)} indices for {len(data)} items.")
        for p in pos:
            if not 0 <= p < self.max_size:
                raise IndexError(f"ListStorage.set: index {p} is outside [0, {self.max_size}).")
        items = self._items
        for p, item in zip(pos, data):
            if p < len(items):
                items[p] = item
            else:
                items.extend([None] * (p - len(items)))
                items.append(item)
        self._len_t.fill_(min(len(items), self.max_size))
        self._mutation_revision += 1

    def get(self, index: Any) -> Any:
        pos = _positions(index, len(self))
        n = len(self)
        if isinstance(pos, int):
            if not -n <= pos < n:
                raise IndexError(f"ListStorage.get: index {pos} is outside the {n} stored items.")
            return self._items[pos]
        bad = [p for p in pos if not -n <= p < n]
        if bad:
            raise IndexError(f"ListStorage.get: indices {bad[:5]} are outside the {n} stored items.")
        items = self._items
        return [items[p] for p in pos]

    def _empty(self) -> None:
        super()._empty()
        self._items = []

    def state_dict(self) -> dict:
        """``{"len": n, "_storage": [the stored items]}`` (a new list holding the items themselves)."""
        n = len(self)
        return {"len": n, "_storage": list(self._items[:n])}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` (tensors and TensorDicts are copied, other items kept as they are).

        Raises:
            ValueError: ``state["_storage"]`` is not a list of ``state["len"]`` items within the capacity.
        """
        items = state.get("_storage") if isinstance(state, dict) else None
        if items is None:
            super().load_state_dict(state)  # a state of the item count alone
            return
        n = state.get("len")
        if not isinstance(items, list) or n != len(items) or len(items) > self.max_size:
            got = len(items) if isinstance(items, list) else type(items).__name__
            raise ValueError(
                f"ListStorage.load_state_dict: state['_storage'] must be a list of state['len']={n!r} items "
                f"(at most {self.max_size}), got {got}."
            )
        self._items = [
            item.clone() if isinstance(item, torch.Tensor) or is_tensor_collection(item) else item for item in items
        ]
        self._len_t.fill_(len(items))
        self._mutation_revision += 1
