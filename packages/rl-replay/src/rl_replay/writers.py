"""Writers: decide where new items go (round robin, keep the best, or refuse writes)."""

from __future__ import annotations

from typing import Any

import torch
from tdict import is_tensor_collection

from ._part import BufferPart, HostInts, check_compilable, check_shareable

__all__ = ["Writer", "RoundRobinWriter", "TensorDictRoundRobinWriter", "ImmutableDatasetWriter"]


def _count(data: Any) -> int:
    """The number of items in ``data`` along its first dim (or list length)."""
    if is_tensor_collection(data):
        if not data.batch_dims:
            raise ValueError("extend: a TensorDict with an empty batch_size holds no item dim; use add() for one item.")
        return data.batch_size[0]
    if isinstance(data, torch.Tensor):
        if data.ndim == 0:
            raise ValueError("extend: a 0-d tensor holds no item dim; use add() for one item.")
        return data.shape[0]
    return len(data)


def _int_entries(owner: str, state: Any, keys: tuple) -> list[int]:
    """``state[key]`` for each key, each an int >= 0, or a ValueError naming the entry."""
    if not isinstance(state, dict):
        raise ValueError(
            f"{owner}.load_state_dict: state must be a dict with {list(keys)}, got {type(state).__name__}."
        )
    out = []
    for key in keys:
        value = state.get(key)
        if type(value) is not int or value < 0:
            got = repr(value) if key in state else f"no such entry (keys: {sorted(map(str, state))})"
            raise ValueError(f"{owner}.load_state_dict: state[{key!r}] must be an int >= 0, got {got}.")
        out.append(value)
    return out


class Writer(BufferPart):
    """Base class of writers: :meth:`add` one item, :meth:`extend` with many; both return the indices.

    Args:
        compilable: keep the writer's counters in Python ints rather than a shareable tensor, so
            that ``torch.compile`` reads them without a ``Tensor.item()`` graph break (default
            ``False``; a compilable writer cannot be shared between processes).
    """

    def __init__(self, compilable: bool = False) -> None:
        check_compilable(type(self).__name__, compilable)
        self._storage: Any = None  # the storage written to (register_storage)
        self._compilable = compilable

    @property
    def compilable(self) -> bool:
        """Whether the counters avoid what breaks ``torch.compile`` (set at construction)."""
        return self._compilable

    def _counters(self, size: int) -> Any:
        """``size`` int64 counters: a tensor (shareable), or Python ints when ``compilable``."""
        return HostInts(size) if self._compilable else torch.zeros(size, dtype=torch.int64)

    def register_storage(self, storage: Any) -> None:
        """Attaches the storage this writer writes to."""
        self._storage = storage

    def add(self, data: Any) -> Any:
        """Writes one item; returns its index (abstract)."""
        raise NotImplementedError

    def extend(self, data: Any) -> torch.Tensor:
        """Writes items along their first dim; returns their indices (abstract)."""
        raise NotImplementedError

    def _empty(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class RoundRobinWriter(Writer):
    """Writes at a cursor that wraps around: the oldest items are overwritten first.

    The cursor and the write count live in a shared-memory-capable tensor (``share_memory_``), so
    several processes writing to one shared storage advance one cursor. With ``compilable=True``
    they are Python ints instead, and a write that wraps around is done as two slice writes rather
    than one scatter, so that no index tensor has to be read back (see :class:`Writer`).

    Examples:
        >>> import torch
        >>> from rl_replay import LazyTensorStorage
        >>> w = RoundRobinWriter()
        >>> w.register_storage(LazyTensorStorage(4))
        >>> w.extend(torch.zeros(3, 2)).tolist(), w.extend(torch.ones(3, 2)).tolist()
        ([0, 1, 2], [3, 0, 1])
    """

    def __init__(self, compilable: bool = False) -> None:
        super().__init__(compilable)
        self._state = self._counters(2)  # [cursor, total writes]
        # compilable: writes counted in a tensor, added to _state[1] when read. torch.compile
        # specialises on Python ints it reads, so an ever-growing int would recompile every call
        self._new_writes = torch.zeros((), dtype=torch.int64) if compilable else None

    @property
    def _cursor(self) -> int:
        return int(self._state[0])

    @property
    def _write_count(self) -> int:
        new = self._new_writes
        return int(self._state[1]) + (0 if new is None else int(new))

    def _count_writes(self, n: int) -> None:
        if self._new_writes is None:
            self._state[1] += n
        else:
            self._new_writes.add_(n)

    def _capacity(self) -> int:
        storage = self._storage
        shape = getattr(storage, "shape", None)
        return (
            shape[0]
            if shape is not None and getattr(storage, "ndim", 1) > 1 and getattr(storage, "initialized", False)
            else storage.max_size
        )

    def add(self, data: Any) -> int:
        """Writes one item at the cursor, advances it (wrapping around); returns the index written."""
        cursor = self._cursor
        self._storage.set(cursor, data)
        self._state[0] = (cursor + 1) % self._capacity()
        self._count_writes(1)
        return cursor

    def extend(self, data: Any) -> torch.Tensor:
        """Writes items from the cursor on, wrapping around; returns the indices written.

        When more items than the capacity are given, only the last ``capacity`` are written.
        """
        n = _count(data)
        cursor = self._cursor
        capacity = self._capacity()
        if n > capacity:  # only the last `capacity` items would survive: write just those, once each
            data = data[n - capacity :]
            cursor = (cursor + n - capacity) % capacity
            n = capacity
        if cursor + n <= capacity:  # no wrap: the storage writes a slice (a plain copy, ~5x faster than scatter)
            index = torch.arange(cursor, cursor + n)
            self._write(index, data, slice(cursor, cursor + n))
        elif self._compilable:  # the end then the start, as slices: no index tensor for the storage to read back
            index = torch.arange(cursor, cursor + n) % capacity
            self._write(index, data, (slice(cursor, capacity), slice(0, cursor + n - capacity)))
        else:
            index = torch.arange(cursor, cursor + n) % capacity
            self._write(index, data, index)
        self._state[0] = (cursor + n) % self._capacity()
        self._count_writes(n)
        return index

    def _write(self, index: torch.Tensor, data: Any, where: Any) -> None:
        """Writes ``data`` at ``where``: ``index`` as a slice when contiguous, or a pair of slices (the
        storage's end, then its start) for a compilable writer's wrapped write."""
        if isinstance(where, tuple):
            end, start = where
            split = end.stop - end.start
            self._storage.set(end, data[:split])
            self._storage.set(start, data[split:])
        else:
            self._storage.set(where, data)

    def _empty(self) -> None:
        self._state.zero_()
        if self._new_writes is not None:
            self._new_writes.zero_()

    def share_memory_(self) -> "RoundRobinWriter":
        """Moves the cursor and write count to shared memory.

        Raises:
            RuntimeError: the writer is ``compilable`` (its counters are Python ints).
        """
        check_shareable(self)
        self._state.share_memory_()
        return self

    def state_dict(self) -> dict:
        """``{"cursor", "write_count"}``: the next position and the total number of writes."""
        return {"cursor": self._cursor, "write_count": self._write_count}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` (checked first: a bad state raises with the writer unchanged)."""
        cursor, count = _int_entries(type(self).__name__, state, ("cursor", "write_count"))
        top = None if self._storage is None else self._capacity()
        if top is not None and cursor >= top:
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: state['cursor'] must be < the capacity {top}, got {cursor}."
            )
        self._state[0] = cursor
        self._state[1] = count
        if self._new_writes is not None:
            self._new_writes.zero_()


class TensorDictRoundRobinWriter(RoundRobinWriter):
    """A :class:`RoundRobinWriter` that also writes each item's position under ``"index"``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage
        >>> w = TensorDictRoundRobinWriter()
        >>> w.register_storage(LazyTensorStorage(4))
        >>> data = TensorDict(obs=torch.zeros(2), batch_size=[2])
        >>> w.extend(data).tolist(), data["index"].tolist()
        ([0, 1], [0, 1])
    """

    def add(self, data: Any) -> int:
        """Writes one TensorDict item, setting its ``"index"`` entry to the position written; returns it."""
        index = self._cursor
        data.set("index", torch.tensor(index))
        return super().add(data)

    def _write(self, index: torch.Tensor, data: Any, where: Any) -> None:
        if data.batch_dims > 1:  # multi-dim storages: every item of a row shares the row's index
            index_entry = index.reshape(-1, *([1] * (data.batch_dims - 1))).expand(data.batch_size).clone()
        else:
            index_entry = index
        data.set("index", index_entry)
        super()._write(index, data, where)


class ImmutableDatasetWriter(Writer):
    """A writer that refuses writes (for read-only datasets); ``compilable`` is accepted and stored.

    Examples:
        >>> w = ImmutableDatasetWriter()
        >>> w.extend([1])
        Traceback (most recent call last):
        ...
        RuntimeError: this buffer is read-only (ImmutableDatasetWriter): extend() is not allowed.
    """

    def add(self, data: Any) -> Any:
        """Refuses the write: raises ``RuntimeError``."""
        raise RuntimeError("this buffer is read-only (ImmutableDatasetWriter): add() is not allowed.")

    def extend(self, data: Any) -> torch.Tensor:
        """Refuses the write: raises ``RuntimeError``."""
        raise RuntimeError("this buffer is read-only (ImmutableDatasetWriter): extend() is not allowed.")
