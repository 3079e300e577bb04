"""LazyStackStorage: a list of TensorDicts read back as one lazily stacked TensorDict."""

from __future__ import annotations

from typing import Any

import tdict

from .list import ListStorage

__all__ = ["LazyStackStorage"]


class LazyStackStorage(ListStorage):
    """A :class:`ListStorage` of TensorDicts whose reads of several items are one lazy stack.

    Items may differ in their shapes (sequences of different lengths, say) and hold non-tensor
    entries (strings): a read of several items returns a :class:`tdict.LazyStackedTensorDict`
    along ``stack_dim`` that indexes and gets entries like any TensorDict. Writing a TensorDict
    with a batch dim stores one item per entry of its first dim.

    Args:
        max_size: the capacity in items (``None``: unbounded).
        compilable: as :class:`ListStorage`.
        stack_dim: the dim the items are stacked along (negative: counted from the end of an
            item's batch dims plus one).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> s = LazyStackStorage(10)
        >>> s.set(0, TensorDict(a=torch.zeros(3), c="short"))
        >>> s.set(1, TensorDict(a=torch.ones(5), c="long"))
        >>> out = s.get([0, 1])
        >>> type(out).__name__, out.batch_size, out[1]["a"].shape, out.get("c").tolist()
        ('LazyStackedTensorDict', torch.Size([2]), torch.Size([5]), ['short', 'long'])
    """

    def __init__(self, max_size: int | None = None, *, compilable: bool = False, stack_dim: int = 0) -> None:
        super().__init__(max_size, compilable=compilable)
        if isinstance(stack_dim, bool) or not isinstance(stack_dim, int):
            raise TypeError(f"LazyStackStorage: stack_dim must be an int, got {stack_dim!r}.")
        self.stack_dim = stack_dim

    def get(self, index: Any) -> Any:
        out = super().get(index)
        if isinstance(out, list):
            if not out:
                raise IndexError("LazyStackStorage.get: no item at this index (an empty selection cannot be stacked).")
            dim = self.stack_dim if self.stack_dim >= 0 else out[0].batch_dims + 1 + self.stack_dim
            return tdict.lazy_stack(out, dim)
        return out
