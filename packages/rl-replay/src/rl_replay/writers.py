"""Writers: decide where new items go (round robin, keep the best, or refuse writes)."""

from __future__ import annotations

import math
from typing import Any

import torch
from tdict import is_tensor_collection
from torch.utils._pytree import tree_leaves, tree_map

from ._generations import bump_generations, generations_of, invalidate_generations
from ._part import BufferPart, HostInts, check_compilable, check_shareable
from .storages._trees import TREE_ROOTS


def _rows(data: Any, rows: slice) -> Any:
    """``data[rows]`` (leaf by leaf for a pytree)."""
    return tree_map(lambda x: x[rows], data) if type(data) in TREE_ROOTS else data[rows]


__all__ = ["Writer", "RoundRobinWriter", "TensorDictRoundRobinWriter", "ImmutableDatasetWriter"]


def _count(data: Any) -> int:
    """The number of items in ``data`` along its first dim (or list length; a dict or tuple is a
    pytree: its first leaf's first dim)."""
    if type(data) in TREE_ROOTS:
        leaves = tree_leaves(data)
        if not leaves or not isinstance(leaves[0], torch.Tensor) or leaves[0].ndim == 0:
            raise ValueError(
                "extend: a pytree's leaves must be tensors with a leading item dim; use add() for one item."
            )
        return leaves[0].shape[0]
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

    #: whether writes stamp slot generations and samples report them (see :meth:`generations_of`)
    tracks_generations: bool = False
    _pending_generation: torch.Tensor | None = None

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

    def generations_of(self, index: Any) -> torch.Tensor:
        """The generation stamp of each dim-0 slot in ``index`` (int64, shaped like ``index``).

        A writer built with ``track_generations=True`` stamps every slot it writes: ``0`` after the
        first write, one more per later write or ``empty()``. Compare a stamp taken when sampling
        (``info["index_generation"]``) with the current one to know whether the slot still holds
        the sampled item. ``-1``: no stamp (never written, outside the storage, or a writer that
        does not track generations).
        """
        if not self.tracks_generations:
            index = torch.as_tensor(index[0] if isinstance(index, tuple) else index)
            return torch.full(index.shape, -1, dtype=torch.int64, device=index.device)
        storage = self._storage
        stamps = self._pending_generation if storage is None else storage._slot_generations
        return generations_of(stamps, index, 1 if storage is None else getattr(storage, "ndim", 1))

    def _empty(self, empty_write_count: bool = True) -> None:
        if self._storage is not None:
            invalidate_generations(self._storage)

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

    def __init__(self, compilable: bool = False, *, track_generations: bool = False) -> None:
        super().__init__(compilable)
        if not isinstance(track_generations, bool):
            raise TypeError(f"{type(self).__name__}: track_generations must be a bool, got {track_generations!r}.")
        self.tracks_generations = track_generations
        self._pending_generation: torch.Tensor | None = None  # loaded before a storage was registered
        self._state = self._counters(2)  # [cursor, total writes]
        # compilable: writes counted in a tensor, added to _state[1] when read. torch.compile
        # specialises on Python ints it reads, so an ever-growing int would recompile every call
        self._new_writes = torch.zeros((), dtype=torch.int64) if compilable else None

    @property
    def _cursor(self) -> int:
        return int(self._state[0])

    @_cursor.setter
    def _cursor(self, value: int) -> None:
        self._state[0] = int(value)

    @property
    def _write_count(self) -> int:
        new = self._new_writes
        return int(self._state[1]) + (0 if new is None else int(new))

    @_write_count.setter
    def _write_count(self, value: int) -> None:
        self._state[1] = int(value)
        if self._new_writes is not None:
            self._new_writes.zero_()

    @property
    def _generation(self) -> torch.Tensor | None:
        """The slot stamps (on the storage; held here until a storage is registered)."""
        return self._pending_generation if self._storage is None else self._storage._slot_generations

    @_generation.setter
    def _generation(self, value: torch.Tensor | None) -> None:
        if self._storage is None:
            self._pending_generation = value
        else:
            self._storage._slot_generations = None if value is None else _on_storage_device(value, self._storage)

    def register_storage(self, storage: Any) -> None:
        """Attaches the storage (stamps loaded before go to it unless it has its own already)."""
        super().register_storage(storage)
        pending, self._pending_generation = self._pending_generation, None
        if pending is not None and storage._slot_generations is None:
            self._generation = pending

    def _bump(self, index: Any, laps: int = 0) -> None:
        # a non-tracking writer still advances stamps another (tracking) buffer put on a shared storage
        if self.tracks_generations or self._storage._slot_generations is not None:
            bump_generations(self._storage, index, self.tracks_generations, laps)

    def _count_writes(self, n: int) -> None:
        if self._new_writes is None:
            self._state[1] += n
        else:
            self._new_writes.add_(n)

    def _capacity(self, data: Any = None) -> int:
        """The number of dim-0 slots (rows of a multi-dim storage: known once it is allocated, or
        from the first write's item dims)."""
        storage = self._storage
        ndim = getattr(storage, "ndim", 1)
        if ndim > 1:
            if getattr(storage, "initialized", False):
                return storage.shape[0]
            if data is not None:
                lead = data.batch_size if is_tensor_collection(data) else getattr(data, "shape", None)
                if lead is not None and len(lead) >= ndim:
                    return max(1, storage.max_size // max(1, math.prod(lead[1:ndim])))
        return storage.max_size

    def add(self, data: Any) -> int:
        """Writes one item at the cursor, advances it (wrapping around); returns the index written."""
        cursor = self._cursor
        self._storage.set(cursor, data)
        self._state[0] = (cursor + 1) % self._capacity()
        self._count_writes(1)
        self._bump(cursor)
        self._storage._last_cursor_index = cursor
        return cursor

    def extend(self, data: Any) -> torch.Tensor:
        """Writes items from the cursor on, wrapping around; returns the indices written.

        When more items than the capacity are given, only the last ``capacity`` are written.
        """
        n = _count(data)
        cursor = self._cursor
        capacity = self._capacity(data)
        laps = 0
        if n > capacity:  # only the last `capacity` items would survive: write just those, once each
            data = _rows(data, slice(n - capacity, None))
            laps, skipped = divmod(n - capacity, capacity)  # writes the skipped items would have made
            if skipped:
                self._bump(torch.arange(cursor, cursor + skipped) % capacity)
            cursor = (cursor + n - capacity) % capacity
            self._count_writes(n - capacity)
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
        self._bump(index, laps)
        if n:
            self._storage._last_cursor_index = (cursor + n - 1) % capacity
        return index

    def write_at(self, index: Any, data: Any) -> Any:
        """Writes ``data`` at explicit slots (an int for one item, else one index per item) without
        moving the cursor; counts the writes and advances the slots' generations. Returns ``index``."""
        if not isinstance(index, int):
            index = torch.as_tensor(index, dtype=torch.int64)
        self._write_at(index, data)
        self._count_writes(1 if isinstance(index, int) else index.numel())
        self._bump(index)
        return index

    def _write_at(self, index: Any, data: Any) -> None:
        self._storage.set(index, data)

    def _write(self, index: torch.Tensor, data: Any, where: Any) -> None:
        """Writes ``data`` at ``where``: ``index`` as a slice when contiguous, or a pair of slices (the
        storage's end, then its start) for a compilable writer's wrapped write."""
        if isinstance(where, tuple):
            end, start = where
            split = end.stop - end.start
            self._storage.set(end, _rows(data, slice(None, split)))
            self._storage.set(start, _rows(data, slice(split, None)))
        else:
            self._storage.set(where, data)

    def _empty(self, empty_write_count: bool = True) -> None:
        super()._empty(empty_write_count)
        self._state[0] = 0
        if empty_write_count:
            self._write_count = 0

    def share_memory_(self) -> "RoundRobinWriter":
        """Moves the cursor and write count to shared memory.

        Raises:
            RuntimeError: the writer is ``compilable`` (its counters are Python ints).
        """
        check_shareable(self)
        self._state.share_memory_()
        return self

    def state_dict(self) -> dict:
        """``{"_cursor", "_write_count"}`` (TorchRL's keys): the next position and the total number
        of writes (and, when tracking generations, ``"_generation"``: the slot stamps)."""
        state: dict = {"_cursor": self._cursor, "_write_count": self._write_count}
        generation = self._generation if self.tracks_generations else None
        if generation is not None:
            state["_generation"] = generation.cpu().clone()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` (checked first: a bad state raises with the writer unchanged)."""
        owner = type(self).__name__
        if isinstance(state, dict) and any(k in state for k in ("cursor", "write_count", "generation")):
            state = {f"_{k}" if not k.startswith("_") else k: v for k, v in state.items()}  # earlier keys
        if isinstance(state, dict) and "_write_count" not in state and "_cursor" in state:
            state = {**state, "_write_count": self._write_count}  # a state saved before writes were counted
        cursor, count = _int_entries(owner, state, ("_cursor", "_write_count"))
        top = None if self._storage is None else self._capacity()
        if top is not None and cursor >= top:
            raise ValueError(f"{owner}.load_state_dict: state['_cursor'] must be < the capacity {top}, got {cursor}.")
        generation = state.get("_generation")
        if generation is not None:
            if not isinstance(generation, torch.Tensor) or generation.ndim != 1 or generation.dtype != torch.int64:
                raise ValueError(
                    f"{owner}.load_state_dict: state['_generation'] must be a 1-D int64 tensor, got {generation!r:.80}."
                )
            generation = generation.clone()
        self._state[0] = cursor
        self._write_count = count
        if generation is not None:
            self._generation = generation


def _on_storage_device(stamps: torch.Tensor, storage: Any) -> torch.Tensor:
    device = getattr(storage, "device", None)
    return stamps if device is None or device == "auto" else stamps.to(device)


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

    def _write_at(self, index: Any, data: Any) -> None:
        entry = torch.as_tensor(index, dtype=torch.int64)
        if data.batch_dims > entry.ndim:
            entry = entry.reshape(*entry.shape, *([1] * (data.batch_dims - entry.ndim))).expand(data.batch_size).clone()
        data.set("index", entry)
        super()._write_at(index, data)


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
