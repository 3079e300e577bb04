"""TensorDictMaxValueWriter: keeps the items with the highest rank (e.g. the best episodes)."""

from __future__ import annotations

from typing import Any

import torch
from tdict import is_tensor_collection
from tdict import NestedKey
from tdict.validation import check_one_of

from ._part import check_shareable
from .writers import Writer

__all__ = ["NotATensorCollectionError", "TensorDictMaxValueWriter"]


class NotATensorCollectionError(TypeError, RuntimeError):
    """Data that must be a tensor collection (TensorDict, tensorclass) is not one.

    Both a ``TypeError`` (what it is) and a ``RuntimeError`` (what TorchRL raises here), so either
    ``except`` clause catches it.
    """


_REDUCTIONS = ("sum", "max", "min", "mean", "median")


def _reduce(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """Reduces ``x`` of shape ``[B, K]`` to ``[B]``."""
    if reduction == "sum":
        return x.sum(1)
    if reduction == "mean":
        return x.mean(1)
    if reduction == "max":
        return x.amax(1)
    if reduction == "min":
        return x.amin(1)
    return x.median(1).values


class TensorDictMaxValueWriter(Writer):
    """A writer that keeps the ``max_size`` items of highest rank, replacing the lowest when full.

    The rank of an item is ``item[rank_key]``, reduced to one number by ``reduction`` when it has
    more than one element (a trajectory stored as one item: the sum of its rewards, say). While the
    storage has room every item is written; once full, an item is written only if its rank is
    strictly above the lowest stored one, which it replaces. ``extend`` does this for a whole batch
    at once (the result equals inserting the items one by one); items that are not stored get
    index ``-1`` (in the returned index and in their ``"index"`` entry).

    Ties: a new item never replaces a stored one of equal rank; among stored items of equal rank
    the one at the lowest index goes first; among new items of equal rank the earlier one wins.

    Only storages with ``ndim == 1`` are supported (store trajectories one per item, or flatten).

    Args:
        rank_key: the entry to rank by (default ``("next", "reward")``).
        reduction: ``"sum"`` (default), ``"max"``, ``"min"``, ``"mean"`` or ``"median"``.
        compilable: keep the cursor and counts in Python ints (see :class:`~rl_replay.Writer`);
            the ranking itself still reads tensors back, so ``extend`` is not graph-break free.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(3), writer=TensorDictMaxValueWriter(rank_key="key"))
        >>> rb.extend(TensorDict(key=torch.tensor([5.0, 1.0, 7.0, 3.0, 0.0]), batch_size=[5])).tolist()
        [0, -1, 1, 2, -1]
        >>> sorted(rb[:]["key"].tolist())
        [3.0, 5.0, 7.0]
    """

    def __init__(self, rank_key: NestedKey | None = None, reduction: str = "sum", *, compilable: bool = False) -> None:
        check_one_of("TensorDictMaxValueWriter", "reduction", reduction, _REDUCTIONS)
        super().__init__(compilable)
        self._rank_key = ("next", "reward") if rank_key is None else rank_key
        self._reduction = reduction
        self._state = self._counters(3)  # [cursor, write count, stored items]
        self._ranks = torch.empty(0, dtype=torch.float64)  # rank of the item in each slot [:size]

    # ------------------------------------------------------------------ setup
    def register_storage(self, storage: Any) -> None:
        """Attaches the storage and forgets every rank (the writer then starts empty), except a
        state loaded before any storage was registered, kept if it fits.

        Raises:
            ValueError: the storage has more than one item dim (``ndim > 1``).
        """
        if getattr(storage, "ndim", 1) > 1:
            raise ValueError(
                "TensorDictMaxValueWriter needs a storage with ndim=1 (one item per row); got ndim="
                f"{storage.ndim}. Store each trajectory as one item, or flatten the data first."
            )
        loaded = self._ranks[: self._size] if self._storage is None and self._size <= storage.max_size else None
        super().register_storage(storage)
        self._ranks = torch.full((storage.max_size,), float("-inf"), dtype=torch.float64)
        if loaded is None:
            self._state.zero_()
        else:
            self._ranks[: len(loaded)] = loaded

    @property
    def _cursor(self) -> int:
        return int(self._state[0])

    @property
    def _write_count(self) -> int:
        return int(self._state[1])

    @property
    def _size(self) -> int:
        return int(self._state[2])

    @property
    def _current_top_values(self) -> list:
        """``[(rank, slot), ...]`` of the stored items (TorchRL's name for the writer's ranking)."""
        return [(float(r), i) for i, r in enumerate(self._ranks[: self._size].tolist())]

    # ------------------------------------------------------------------ ranks
    def _item_ranks(self, data: Any, single: bool) -> torch.Tensor:
        """One float64 rank per item of ``data`` (validates ``data``; changes nothing)."""
        if self._storage is None:
            raise RuntimeError("TensorDictMaxValueWriter: no storage registered (use it inside a replay buffer).")
        if not is_tensor_collection(data):
            raise NotATensorCollectionError(
                "TensorDictMaxValueWriter expects data to be a tensor collection (a TensorDict or tensorclass), "
                f"got {type(data).__name__}; rank plain tensors or dicts with another writer."
            )
        if not single and data.batch_dims == 0:
            raise ValueError(
                "TensorDictMaxValueWriter.extend: the TensorDict has an empty batch_size; use add() for one item."
            )
        try:
            value = data.get(self._rank_key)
        except KeyError:
            raise KeyError(
                f"TensorDictMaxValueWriter: rank_key {self._rank_key!r} is not in the data "
                f"(keys: {sorted(map(str, data.keys(include_nested=True, leaves_only=True)))})."
            ) from None
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"TensorDictMaxValueWriter: {self._rank_key!r} must be a tensor, got {type(value).__name__}."
            )
        n = 1 if single else data.batch_size[0]
        if value.numel() == 0 or value.numel() % n:
            raise ValueError(
                f"TensorDictMaxValueWriter: {self._rank_key!r} has shape {list(value.shape)}, expected at least one "
                f"value per item ({n} items)."
            )
        value = value.detach().to(device="cpu", dtype=torch.float64).reshape(n, -1)
        ranks = value[:, 0] if value.shape[1] == 1 else _reduce(value, self._reduction)
        if torch.isnan(ranks).any():
            raise ValueError(f"TensorDictMaxValueWriter: {self._rank_key!r} holds NaN; ranks must be comparable.")
        return ranks

    def _plan(self, ranks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Which new items are kept (positions, in arrival order) and the slots they go to. Pure."""
        capacity, size, n = len(self._ranks), self._size, len(ranks)
        free = capacity - size
        if n <= free:
            return torch.arange(n), torch.arange(size, size + n)
        e = min(n - free, size)  # at most this many stored items can be evicted: the e lowest
        stored = self._ranks[:size]
        if e == size:
            cand = torch.arange(size)
        else:
            v = torch.kthvalue(stored, e).values
            lower = (stored < v).nonzero().squeeze(1)
            equal = (stored == v).nonzero().squeeze(1)[: e - len(lower)]
            cand = torch.cat([lower, equal]).sort().values
        cand = cand[stored[cand].sort(stable=True).indices]  # eviction order: rank, then index
        pool = torch.cat([stored[cand], ranks])
        # secondary key among equal ranks (lower goes first): later new items, earlier new, then stored
        secondary = torch.cat([torch.arange(n, n + e), torch.arange(n - 1, -1, -1)])
        by_secondary = secondary.argsort()
        order = by_secondary[pool[by_secondary].sort(stable=True).indices]
        n_out = n - free
        out, kept = order[:n_out], order[n_out:]
        keep = (kept[kept >= e] - e).sort().values
        evicted = out[out < e]
        slots = torch.cat([torch.arange(size, capacity), cand[evicted]])
        return keep, slots

    def _commit(self, ranks: torch.Tensor, keep: torch.Tensor, slots: torch.Tensor, count_writes: bool) -> None:
        capacity = len(self._ranks)
        self._ranks[slots] = ranks[keep]
        size = min(capacity, self._size + len(ranks))
        self._state[2] = size
        self._state[0] = size % capacity
        if count_writes:
            self._state[1] += len(keep)

    # ------------------------------------------------------------------ writes
    def get_insert_index(self, data: Any) -> int | None:
        """The slot where the single item ``data`` goes, or ``None`` if it ranks too low.

        Like TorchRL, this records the item's rank for that slot: write the data there next.
        """
        ranks = self._item_ranks(data, single=True)
        keep, slots = self._plan(ranks)
        self._commit(ranks, keep, slots, count_writes=False)
        return int(slots[0]) if len(keep) else None

    def add(self, data: Any) -> int | None:
        """Writes one item if it ranks high enough; returns its index, or ``None`` (not stored)."""
        ranks = self._item_ranks(data, single=True)
        keep, slots = self._plan(ranks)
        if not len(keep):
            return None
        index = int(slots[0])
        data.set("index", torch.tensor(index))
        if hasattr(self._storage, "_init"):  # tensor storages: written as a batch of one (allocates a lazy one)
            self._storage.set(slots[:1], data.unsqueeze(0))
        else:
            self._storage.set(index, data)
        self._commit(ranks, keep, slots, count_writes=True)
        return index

    def extend(self, data: Any) -> torch.Tensor:
        """Writes the items of ``data`` that rank among the best; returns one index per item
        (``-1`` for items not stored)."""
        ranks = self._item_ranks(data, single=False)
        keep, slots = self._plan(ranks)
        n = len(ranks)
        index = torch.full((n,), -1, dtype=torch.int64)
        index[keep] = slots
        if data.batch_dims > 1:
            data.set("index", index.reshape(-1, *([1] * (data.batch_dims - 1))).expand(data.batch_size).clone())
        else:
            data.set("index", index)
        if len(keep):
            self._storage.set(slots, data[keep])
        self._commit(ranks, keep, slots, count_writes=True)
        return index

    # ------------------------------------------------------------------ state
    def _empty(self, empty_write_count: bool = True) -> None:
        super()._empty(empty_write_count)
        count = self._write_count
        self._state.zero_()
        if not empty_write_count:
            self._state[1] = count
        self._ranks.fill_(float("-inf"))

    def share_memory_(self) -> TensorDictMaxValueWriter:
        """Shares the slot ranks and counters (one writing process at a time).

        Raises:
            RuntimeError: the writer is ``compilable`` (its counters are Python ints).
        """
        check_shareable(self)
        self._state.share_memory_()
        self._ranks.share_memory_()
        return self

    def state_dict(self) -> dict:
        """Cursor, write count, size, rank key, reduction and the ranks of the stored items."""
        key = self._rank_key
        return {
            "cursor": self._cursor,
            "write_count": self._write_count,
            "size": self._size,
            "rank_key": list(key) if isinstance(key, tuple) else key,
            "reduction": self._reduction,
            "ranks": self._ranks[: self._size].clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`.

        Raises:
            ValueError: the size or the ranks do not fit the storage, or the reduction is unknown.
        """
        ranks = torch.as_tensor(state["ranks"], dtype=torch.float64)
        size = int(state["size"])
        # no storage yet: the ranks are kept as they are and fitted to the storage when it is registered
        capacity = len(self._ranks) if self._storage is not None else size
        if not 0 <= size <= capacity or ranks.shape != (size,):
            raise ValueError(
                f"TensorDictMaxValueWriter.load_state_dict: size {size} and ranks of shape {list(ranks.shape)} do not "
                f"fit a storage of {capacity} items."
            )
        cursor, write_count = int(state["cursor"]), int(state["write_count"])  # read all before changing anything
        reduction = state.get("reduction", self._reduction)
        check_one_of("TensorDictMaxValueWriter.load_state_dict", "reduction", reduction, _REDUCTIONS)
        key = state.get("rank_key", self._rank_key)
        self._rank_key = tuple(key) if isinstance(key, list) else key
        self._reduction = reduction
        if self._storage is None:
            self._ranks = ranks.clone()
        else:
            self._ranks.fill_(float("-inf"))
            self._ranks[:size] = ranks
        self._state[0] = cursor
        self._state[1] = write_count
        self._state[2] = size

    def dumps(self, path: Any) -> None:
        """Writes the writer's state to the directory ``path`` (crash-safe, JSON + raw tensors)."""
        from .checkpoint import dump_part

        dump_part(self, path)

    def loads(self, path: Any) -> None:
        """Restores the state written by :meth:`dumps` (no unpickling)."""
        from .checkpoint import load_part

        load_part(self, path)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(rank_key={self._rank_key!r}, reduction={self._reduction!r}, "
            f"size={self._size}, cursor={self._cursor})"
        )
