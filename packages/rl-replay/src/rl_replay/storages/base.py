"""Storage: where a replay buffer keeps its items (a fixed capacity, written by index)."""

from __future__ import annotations

from typing import Any, Iterator

import torch
from tdict.validation import check_positive_int

from .._part import BufferPart, HostInts, check_compilable, check_shareable

__all__ = ["Storage"]


class Storage(BufferPart):
    """Base class of storages: ``set(index, data)``, ``get(index)``, ``len()`` and a fixed ``max_size``.

    A storage knows nothing of write order (the writer) or sampling (the sampler). The number of
    valid items lives in a 0-d int64 tensor so that :meth:`share_memory_` can share it across
    processes, or, with ``compilable=True``, in a plain Python int: reading it then needs no
    ``Tensor.item()`` (a graph break under :func:`torch.compile`), but it cannot be shared.

    Args:
        max_size: the capacity in items.
        compilable: keep the bookkeeping in Python ints, for ``torch.compile`` (default ``False``).
    """

    ndim = 1
    #: per-slot write stamps, put here by a writer that tracks generations (see ``Writer.generations_of``)
    _slot_generations: torch.Tensor | None = None
    #: counts the changes of the stored items (writes, loads, ``empty``), so that what is derived
    #: from them (a sampler's group or trajectory index) knows when to rebuild; process-local
    _mutation_revision: int = 0
    #: the dim-0 slot a round-robin writer wrote last (``None``: unknown); the newest item of a ring
    _last_cursor_index: int | None = None

    def __init__(self, max_size: int, compilable: bool = False) -> None:
        check_positive_int(type(self).__name__, "max_size", max_size)
        check_compilable(type(self).__name__, compilable)
        self.max_size = max_size
        self._compilable = compilable
        self._len_t: Any = HostInts() if compilable else torch.zeros((), dtype=torch.int64)

    @property
    def compilable(self) -> bool:
        """Whether the bookkeeping avoids what breaks ``torch.compile`` (set at construction)."""
        return self._compilable

    # ------------------------------------------------------------------ subclass hooks
    def set(self, index: Any, data: Any, *, set_cursor: bool = True) -> None:
        """Writes ``data`` at ``index`` (an int, a slice or a 1-D index tensor along the first dim).
        ``set_cursor`` is accepted for TorchRL compatibility (the write position is the writer's)."""
        raise NotImplementedError

    def get(self, index: Any) -> Any:
        """Reads the items at ``index``."""
        raise NotImplementedError

    def _empty(self) -> None:
        """Forgets every item (the capacity stays)."""
        self._len_t.zero_()
        self._mutation_revision += 1

    def _bump_mutation_revision(self) -> None:
        """Records that the stored items changed (done by every write)."""
        self._mutation_revision += 1

    # ------------------------------------------------------------------ common API
    def __len__(self) -> int:
        return int(self._len_t)

    def _grow_len(self, index: Any, count: int) -> None:
        """Raises the valid length to cover ``index`` (``count`` items were written there)."""
        if isinstance(index, int):
            top = index + 1
        elif isinstance(index, slice):
            top = index.stop if index.stop is not None else self.max_size
        elif isinstance(index, torch.Tensor):
            top = int(index.max()) + 1 if index.numel() else 0
        else:
            top = max(int(i) for i in index) + 1 if count else 0
        if top > int(self._len_t):
            self._len_t.fill_(min(top, self.max_size))

    def __getitem__(self, index: Any) -> Any:
        return self.get(index)

    def __setitem__(self, index: Any, value: Any) -> None:
        self.set(index, value)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self.get(i)

    @property
    def shape(self) -> torch.Size:
        """The storage's item shape: ``[max_size]`` (multi-dim storages: their leading dims)."""
        return torch.Size([self.max_size])

    def _rand_given_ndim(self, batch_size: int, generator: torch.Generator | None = None) -> Any:
        """``batch_size`` uniform indices of valid items (a tensor; a tuple of tensors when ndim > 1)."""
        n = len(self)
        if n == 0:
            raise RuntimeError(
                f"Cannot sample from an empty storage ({type(self).__name__} is empty: nothing to sample)."
            )
        return torch.randint(0, n, (batch_size,), generator=generator)

    def share_memory_(self) -> "Storage":
        """Moves the item count to shared memory (storages with tensor data share it too).

        Raises:
            RuntimeError: the storage is ``compilable`` (its count is a Python int).
        """
        check_shareable(self)
        self._len_t.share_memory_()
        return self

    def state_dict(self) -> dict:
        """``{"len": n}``: the number of valid items (subclasses add their data)."""
        return {"len": int(self._len_t)}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`.

        Raises:
            ValueError: ``state["len"]`` is not an int in ``[0, max_size]``.
        """
        n = state.get("len") if isinstance(state, dict) else None
        if type(n) is not int or not 0 <= n <= self.max_size:
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: state['len'] must be an int in [0, {self.max_size}], "
                f"got {n if isinstance(state, dict) else state!r}."
            )
        self._len_t.fill_(n)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_size={self.max_size}, len={len(self)})"
