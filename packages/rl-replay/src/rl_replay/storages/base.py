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
    #: after :meth:`share_memory_`: ``[mutation revision, last cursor index + 1]`` in shared memory
    _shared_marks: torch.Tensor | None = None

    def __init__(self, max_size: int, compilable: bool = False) -> None:
        check_positive_int(type(self).__name__, "max_size", max_size)
        check_compilable(type(self).__name__, compilable)
        self.max_size = max_size
        self._compilable = compilable
        self._len_t: Any = HostInts() if compilable else torch.zeros((), dtype=torch.int64)

    @property
    def _mutation_revision(self) -> int:
        """Counts the changes of the stored items (writes, loads, ``empty``), so that what is derived
        from them (a sampler's group or trajectory index) knows when to rebuild; shared between
        processes after :meth:`share_memory_`."""
        marks = self._shared_marks
        return self.__dict__.get("_revision", 0) if marks is None else int(marks[0])

    @_mutation_revision.setter
    def _mutation_revision(self, value: int) -> None:
        marks = self._shared_marks
        if marks is None:
            self.__dict__["_revision"] = value
        else:
            marks[0] = value

    @property
    def _last_cursor_index(self) -> int | None:
        """The dim-0 slot a round-robin writer wrote last (``None``: unknown); the newest item of a ring."""
        marks = self._shared_marks
        if marks is None:
            return self.__dict__.get("_last_cursor")
        last = int(marks[1])
        return None if last == 0 else last - 1

    @_last_cursor_index.setter
    def _last_cursor_index(self, value: int | None) -> None:
        marks = self._shared_marks
        if marks is None:
            self.__dict__["_last_cursor"] = value
        else:
            marks[1] = 0 if value is None else int(value) + 1

    def _share_marks(self) -> None:
        """Moves the mutation revision and the last cursor index to shared memory."""
        if self._shared_marks is None:
            last = self._last_cursor_index
            marks = torch.tensor([self._mutation_revision, 0 if last is None else last + 1], dtype=torch.int64)
            self._shared_marks = marks.share_memory_()

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

    # ------------------------------------------------------------------ checkpoint hooks
    def register_save_hook(self, hook: Any) -> None:
        """Adds a callable applied to the saved items by ``dumps`` (its result is what is saved).

        Before the call, a hook with a ``shift`` attribute gets the slot after the newest item (the
        last write position + 1, 0 if unknown) and one with ``is_full`` whether the storage is full.
        Hooks are not saved: register them again on a new storage.

        Raises:
            TypeError: ``hook`` is not callable.
        """
        if not callable(hook):
            raise TypeError(f"{type(self).__name__}.register_save_hook: hook must be callable, got {hook!r}.")
        self.__dict__.setdefault("_save_hooks", []).append(hook)

    def register_load_hook(self, hook: Any) -> None:
        """Adds a callable applied by ``loads`` to the items read from a checkpoint, before they are
        written back (the inverse of a save hook).

        Raises:
            TypeError: ``hook`` is not callable.
        """
        if not callable(hook):
            raise TypeError(f"{type(self).__name__}.register_load_hook: hook must be callable, got {hook!r}.")
        self.__dict__.setdefault("_load_hooks", []).append(hook)

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
        self._share_marks()
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
