"""ConsumingSampler: every item can be sampled a fixed number of times, then it leaves the buffer."""

from __future__ import annotations

from typing import Any

import torch

from .base import EndsPasses, Sampler

__all__ = ["ConsumingSampler", "check_consuming_setup"]


def check_consuming_setup(owner: str, storage: Any, writer: Any, prefetch: bool) -> None:
    """Raises unless a buffer with a :class:`ConsumingSampler` can work with these parts."""
    from ..storages.list import ListStorage
    from ..storages.tensor import TensorStorage

    if prefetch:
        raise ValueError(
            f"{owner}: Prefetching is not supported with ConsumingSampler (a prefetched batch would consume "
            "items before it is asked for); pass prefetch=None."
        )
    if getattr(storage, "ndim", 1) != 1:
        raise ValueError(
            f"{owner}: ConsumingSampler only supports 1-dimensional storages, got storage.ndim={storage.ndim}."
        )
    if not isinstance(storage, (ListStorage, TensorStorage)):
        raise TypeError(
            f"{owner}: ConsumingSampler only supports ListStorage and tensor storages (LazyTensorStorage, "
            f"LazyMemmapStorage), got {type(storage).__name__}."
        )
    if not callable(getattr(writer, "write_at", None)):
        raise TypeError(
            f"{owner}: ConsumingSampler requires a writer with a callable write_at(index, data) method (consumed "
            f"slots are written first), got {type(writer).__name__}."
        )


class ConsumingSampler(EndsPasses, Sampler):
    """Uniform sampling in which an item is *consumed* after it was returned ``max_sample_count`` times.

    Each batch holds distinct items (at most as many as are live). A consumed item no longer counts
    in ``len(buffer)`` and is never sampled again; its slot is the first one the buffer's next
    writes reuse (before the writer's cursor moves on). ``ran_out`` turns True when no live item is
    left, so ``for batch in buffer`` drains the buffer.

    Args:
        max_sample_count: how many times an item is returned before it is consumed (default 1).

    Examples:
        >>> import torch
        >>> from rl_replay import ListStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=ListStorage(10), sampler=ConsumingSampler(), batch_size=3)
        >>> _ = rb.extend([torch.tensor(i) for i in range(4)])
        >>> len(rb.sample()), len(rb)
        (3, 1)
        >>> len(rb.sample()), len(rb)
        (1, 0)
    """

    def __init__(self, max_sample_count: int = 1) -> None:
        super().__init__()
        if isinstance(max_sample_count, bool) or not isinstance(max_sample_count, int):
            raise TypeError(f"ConsumingSampler: max_sample_count must be a positive integer, got {max_sample_count!r}.")
        if max_sample_count < 1:
            raise ValueError(f"ConsumingSampler: max_sample_count must be a positive integer, got {max_sample_count}.")
        self.max_sample_count = max_sample_count
        self._sample_count = torch.zeros(0, dtype=torch.int64)  # times each slot was returned
        self._live_mask = torch.zeros(0, dtype=torch.bool)  # slot holds an item not consumed yet
        self._free_indices = torch.zeros(0, dtype=torch.int64)  # consumed slots, oldest first
        self._known_len = 0  # storage items accounted for (items already there when the sampler meets it are live)
        self._ran_out = False

    # ------------------------------------------------------------------ bookkeeping
    def _grow(self, size: int) -> None:
        n = self._sample_count.numel()
        if size > n:
            self._sample_count = torch.cat([self._sample_count, torch.zeros(size - n, dtype=torch.int64)])
            self._live_mask = torch.cat([self._live_mask, torch.zeros(size - n, dtype=torch.bool)])

    def _sync(self, storage: Any) -> None:
        """Items the storage holds that no write reported (a prefilled storage) are live."""
        n = len(storage)
        if n > self._known_len:
            self._grow(n)
            self._live_mask[self._known_len : n] |= self._sample_count[self._known_len : n] < self.max_sample_count
            self._known_len = n

    def _mark_live(self, index: Any) -> None:
        index = torch.as_tensor(index, dtype=torch.int64).reshape(-1).cpu()
        if not index.numel():
            return
        self._grow(int(index.max()) + 1)
        self._sample_count[index] = 0
        self._live_mask[index] = True
        self._known_len = max(self._known_len, int(index.max()) + 1)
        self._ran_out = False

    def add(self, index: Any) -> None:
        """A slot was written: its item is live with no sample yet."""
        self._mark_live(index)

    def extend(self, index: Any) -> None:
        """Slots were written: their items are live with no sample yet."""
        self._mark_live(index)

    def mark_update(self, index: Any) -> None:
        """Items changed in place count as new ones."""
        self._mark_live(index)

    def _append_free_indices(self, index: torch.Tensor) -> None:
        self._free_indices = torch.cat([self._free_indices, index.reshape(-1).to(torch.int64).cpu()])

    def _pop_consumed_indices(self, count: int) -> torch.Tensor:
        """Up to ``count`` consumed slots to write to, oldest first (removed from the free list)."""
        free = self._free_indices
        # a slot in the free list may have been written since (e.g. by the cursor): skip it
        free = free[~self._live_mask[free]] if free.numel() else free
        out, self._free_indices = free[:count], free[count:]
        return out

    def _num_sampleable(self, storage: Any = None) -> int:
        """The number of live items (what ``len(buffer)`` reports)."""
        if storage is not None:
            self._sync(storage)
        return int(self._live_mask.sum())

    # ------------------------------------------------------------------ sampling
    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """Up to ``batch_size`` distinct live items, drawn uniformly; consumed ones are set aside.

        Raises:
            RuntimeError: no live item is left.
        """
        self._sync(storage)
        live = self._live_mask.nonzero().squeeze(1)
        if not live.numel() or len(storage) == 0:
            self._ran_out = True
            raise RuntimeError(
                f"Cannot sample from an empty storage: every item of the {type(storage).__name__} was consumed "
                f"(sampled {self.max_sample_count} time(s)) or none was written."
            )
        take = min(batch_size, live.numel())
        index = live[torch.randperm(live.numel(), generator=self._rng)[:take]]
        self._sample_count[index] += 1
        done = self._sample_count[index] >= self.max_sample_count
        self._live_mask[index[done]] = False
        self._append_free_indices(index[done])
        self._ran_out = not bool(self._live_mask.any())
        return index, {}

    def _empty(self) -> None:
        self._sample_count = torch.zeros(0, dtype=torch.int64)
        self._live_mask = torch.zeros(0, dtype=torch.bool)
        self._free_indices = torch.zeros(0, dtype=torch.int64)
        self._known_len = 0
        self._ran_out = False

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Sample counts, live flags and consumed slots (copies)."""
        return {
            "max_sample_count": self.max_sample_count,
            "_sample_count": self._sample_count.clone(),
            "_live_mask": self._live_mask.clone(),
            "_free_indices": self._free_indices.clone(),
            "_known_len": self._known_len,
            "_ran_out": self._ran_out,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` (copies the tensors; checked first: a bad state changes nothing)."""
        owner = "ConsumingSampler.load_state_dict"
        try:
            count = torch.as_tensor(state["_sample_count"], dtype=torch.int64).clone()
            live = torch.as_tensor(state["_live_mask"], dtype=torch.bool).clone()
            free = state.get("_free_indices")
            free = (
                (~live & (count > 0)).nonzero().squeeze(1)
                if free is None
                else torch.as_tensor(free, dtype=torch.int64).clone()
            )
            max_count = state.get("max_sample_count", self.max_sample_count)
        except (KeyError, TypeError) as err:
            raise ValueError(f"{owner}: not a ConsumingSampler state ({err}).") from err
        if count.ndim != 1 or count.shape != live.shape or (free.numel() and int(free.max()) >= count.numel()):
            raise ValueError(
                f"{owner}: _sample_count {list(count.shape)}, _live_mask {list(live.shape)} and _free_indices "
                "must be 1-D, of one length, with free indices inside it."
            )
        if type(max_count) is not int or max_count < 1:
            raise ValueError(f"{owner}: max_sample_count must be a positive integer, got {max_count!r}.")
        self.max_sample_count = max_count
        self._sample_count, self._live_mask, self._free_indices = count, live, free
        self._known_len = int(state.get("_known_len", count.numel()))
        self._ran_out = bool(state.get("_ran_out", not bool(live.any())))

    def __repr__(self) -> str:
        return f"ConsumingSampler(max_sample_count={self.max_sample_count}, live={self._num_sampleable()})"
