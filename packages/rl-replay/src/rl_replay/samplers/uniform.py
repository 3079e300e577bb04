"""Uniform samplers: with replacement (RandomSampler) and epoch by epoch (SamplerWithoutReplacement)."""

from __future__ import annotations

from typing import Any

import torch

from .base import EndsPasses, Sampler

__all__ = ["RandomSampler", "SamplerWithoutReplacement"]


class RandomSampler(Sampler):
    """Uniform sampling with replacement over the stored items.

    Examples:
        >>> import torch
        >>> from rl_replay import LazyTensorStorage
        >>> storage = LazyTensorStorage(10)
        >>> storage.set(torch.arange(4), torch.zeros(4))
        >>> index, info = RandomSampler().sample(storage, 8)
        >>> index.shape, bool((index < 4).all())
        (torch.Size([8]), True)
    """

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """``batch_size`` stored items drawn uniformly with replacement; the info is empty."""
        return storage._rand_given_ndim(batch_size, self._rng), {}


class SamplerWithoutReplacement(EndsPasses, Sampler):
    """Each stored item once per epoch, in a random (or sequential) order.

    Args:
        drop_last: drop the last, smaller batch of an epoch (default: return it).
        shuffle: random order within each epoch (default ``True``).

    ``ran_out`` turns True when an epoch is over (``iter(buffer)`` stops there); the next sample
    starts a new epoch over the items stored at that time.

    Examples:
        >>> import torch
        >>> from rl_replay import LazyTensorStorage
        >>> storage = LazyTensorStorage(10)
        >>> storage.set(torch.arange(5), torch.zeros(5))
        >>> sampler = SamplerWithoutReplacement(shuffle=False)
        >>> [sampler.sample(storage, 2)[0].tolist() for _ in range(3)], sampler.ran_out
        ([[0, 1], [2, 3], [4]], True)
    """

    def __init__(self, drop_last: bool = False, shuffle: bool = True) -> None:
        super().__init__()
        self.drop_last = drop_last
        self.shuffle = shuffle
        self._order: torch.Tensor | None = None
        self._pos = 0
        self._ran_out = False

    @property
    def _sample_list(self) -> torch.Tensor | None:
        """The items the current epoch has still to give (``None`` when a new epoch starts next)."""
        order = self._order
        if order is None or self._pos >= len(order):
            return None
        return order[self._pos :]

    def _new_epoch(self, storage: Any) -> None:
        n = len(storage)
        if n == 0:
            raise RuntimeError(
                f"Cannot sample from an empty storage ({type(storage).__name__} is empty: nothing to sample)."
            )
        self._order = torch.randperm(n, generator=self._rng) if self.shuffle else torch.arange(n)
        self._pos = 0
        self._ran_out = False

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """The next ``batch_size`` items of the epoch's order (a new order starts when it is used up).

        Raises:
            RuntimeError: the storage is empty, or ``drop_last`` and fewer items are stored than ``batch_size``.
        """
        if (
            self._order is None
            or self._pos >= len(self._order)
            or (self.drop_last and len(self._order) - self._pos < batch_size)
        ):
            self._new_epoch(storage)
            assert self._order is not None  # drawn by _new_epoch
            if self.drop_last and len(self._order) < batch_size:
                raise ValueError(
                    f"SamplerWithoutReplacement(drop_last=True): The batch size ({batch_size}) is greater than the "
                    f"storage capacity ({len(self._order)} stored items): no batch without repeated items can be drawn; "
                    "use drop_last=False or another sampler."
                )
        index = self._order[self._pos : self._pos + batch_size]
        self._pos += len(index)
        remaining = len(self._order) - self._pos
        if remaining == 0 or (self.drop_last and remaining < batch_size):
            self._ran_out = True
        nd = getattr(storage, "ndim", 1)
        if nd > 1:
            index = torch.unravel_index(index, (len(storage) // _per_row(storage), *storage.shape[1:]))
        return index, {}

    def _empty(self) -> None:
        self._order, self._pos, self._ran_out = None, 0, False

    def state_dict(self) -> dict:
        """The epoch's order, the position in it and ``ran_out``."""
        return {
            "order": None if self._order is None else self._order.tolist(),
            "pos": self._pos,
            "ran_out": self._ran_out,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` (checked first: a bad state raises with the sampler unchanged)."""
        owner = "SamplerWithoutReplacement.load_state_dict"
        if not isinstance(state, dict) or not {"order", "pos", "ran_out"} <= state.keys():
            got = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"{owner}: state must be a dict with 'order', 'pos' and 'ran_out', got {got}.")
        order, pos, ran_out = state["order"], state["pos"], state["ran_out"]
        if order is not None:
            if not isinstance(order, list) or not all(type(i) is int for i in order):
                raise ValueError(f"{owner}: state['order'] must be a list of ints or None, got {str(order)[:80]}.")
            order = torch.tensor(order, dtype=torch.int64)
            # an epoch's order is a permutation of the items stored when it began
            if not torch.equal(order.sort().values, torch.arange(len(order))):
                raise ValueError(
                    f"{owner}: state['order'] must be a permutation of range({len(order)}), got {str(order.tolist())[:80]}."
                )
        top = 0 if order is None else len(order)
        if type(pos) is not int or not 0 <= pos <= top or type(ran_out) is not bool:
            raise ValueError(
                f"{owner}: state['pos'] must be an int in [0, {top}] and state['ran_out'] a bool, got {pos!r}, {ran_out!r}."
            )
        self._order, self._pos, self._ran_out = order, pos, ran_out


def _per_row(storage: Any) -> int:
    n = 1
    for d in storage.shape[1:]:
        n *= d
    return n
