"""StalenessAwareSampler: favours items collected by recent policy versions, drops too-old ones."""

from __future__ import annotations

from typing import Any, Callable

import torch
from tdict import is_tensor_collection

from .base import Sampler

__all__ = ["StalenessAwareSampler"]


def default_staleness_weight(staleness: torch.Tensor) -> torch.Tensor:
    """``1 / (staleness + 1)``: the weight of an item ``staleness`` policy versions old."""
    return 1.0 / (staleness.float() + 1.0)


class StalenessAwareSampler(Sampler):
    """Samples items in proportion to their freshness, for asynchronous training.

    Every item stores the version of the policy that collected it under ``version_key``; the
    learner sets :attr:`consumer_version` (e.g. after each update). An item's staleness is
    ``consumer_version - version``; items staler than ``max_staleness`` are never drawn, the
    others are drawn (with replacement only when fewer than the batch) with weight
    ``staleness_weight_fn(staleness)``. The info holds each drawn item's ``"staleness"``.

    Args:
        max_staleness: the largest staleness drawn (``-1``: no limit).
        staleness_weight_fn: staleness tensor -> weight tensor (default ``1 / (staleness + 1)``).
        version_key: the stored policy version of each item.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage, TensorDictReplayBuffer
        >>> sampler = StalenessAwareSampler(max_staleness=1)
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler, batch_size=6)
        >>> _ = rb.extend(TensorDict(policy_version=torch.tensor([0, 0, 1, 2]), batch_size=[4]))
        >>> sampler.consumer_version = 2
        >>> sorted(set(rb.sample()["policy_version"].tolist())) in ([1, 2], [2])
        True
    """

    def __init__(
        self,
        max_staleness: int = -1,
        staleness_weight_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        version_key: Any = "policy_version",
    ) -> None:
        super().__init__()
        if isinstance(max_staleness, bool) or not isinstance(max_staleness, int) or max_staleness < -1:
            raise ValueError(f"StalenessAwareSampler: max_staleness must be an int >= -1, got {max_staleness!r}.")
        if staleness_weight_fn is not None and not callable(staleness_weight_fn):
            raise TypeError(
                f"StalenessAwareSampler: staleness_weight_fn must be callable, got {type(staleness_weight_fn).__name__}."
            )
        self._consumer_version = 0
        self._max_staleness = max_staleness
        self._version_key = version_key
        self._weight_fn = staleness_weight_fn if staleness_weight_fn is not None else default_staleness_weight

    @property
    def consumer_version(self) -> int:
        """The learner's current policy version (staleness is measured from it)."""
        return self._consumer_version

    @consumer_version.setter
    def consumer_version(self, value: int) -> None:
        self._consumer_version = value

    def increment_consumer_version(self) -> None:
        """Adds one to :attr:`consumer_version`."""
        self._consumer_version += 1

    @property
    def max_staleness(self) -> int:
        """The largest staleness drawn (``-1``: no limit)."""
        return self._max_staleness

    @max_staleness.setter
    def max_staleness(self, value: int) -> None:
        self._max_staleness = value

    def _versions(self, storage: Any, n: int) -> torch.Tensor:
        inner: Any = getattr(storage, "_storage", None)
        if is_tensor_collection(inner):  # a tensor storage: read the column, not the items
            versions = inner.get(self._version_key, None)
            if versions is not None:  # the valid rows, their item dims flattened in storage order
                ndim = getattr(storage, "ndim", 1)
                return versions[:n].reshape(n, -1)[:, 0] if ndim == 1 else versions.flatten(0, ndim - 1)[:n]
        data = storage.get(slice(0, n))
        versions = data.get(self._version_key, None) if is_tensor_collection(data) else None
        if versions is None:
            raise KeyError(
                f"StalenessAwareSampler: {self._version_key!r} is not in the stored items; write each item's policy "
                "version there (e.g. with a PolicyVersion transform on the collector's env)."
            )
        return versions

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """``batch_size`` items drawn in proportion to their freshness weight.

        Raises:
            RuntimeError: the storage is empty, or every item is staler than ``max_staleness``.
            KeyError: the items hold no ``version_key``.
        """
        n = len(storage)
        if n == 0:
            raise RuntimeError(f"Cannot sample from an empty storage ({type(storage).__name__} is empty).")
        staleness = self._consumer_version - self._versions(storage, n).reshape(-1).float()
        if self._max_staleness >= 0:
            valid = (staleness <= self._max_staleness).nonzero().squeeze(1)
            if not valid.numel():
                raise RuntimeError(
                    f"StalenessAwareSampler: all {n} stored items exceed max_staleness={self._max_staleness} "
                    f"(consumer_version={self._consumer_version}); raise max_staleness or refresh the collector's "
                    "policy more often."
                )
        else:
            valid = torch.arange(n, device=staleness.device)
        weights = self._weight_fn(staleness[valid])
        drawn = torch.multinomial(
            weights / weights.sum(), batch_size, replacement=batch_size > valid.numel(), generator=self._rng
        )
        index = valid[drawn]
        return index, {"staleness": staleness[index]}

    def _empty(self) -> None:
        self._consumer_version = 0

    def state_dict(self) -> dict:
        """``{"consumer_version", "max_staleness"}``."""
        return {"consumer_version": self._consumer_version, "max_staleness": self._max_staleness}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`."""
        version, limit = int(state["consumer_version"]), int(state["max_staleness"])
        self._consumer_version, self._max_staleness = version, limit

    def __repr__(self) -> str:
        return f"StalenessAwareSampler(consumer_version={self._consumer_version}, max_staleness={self._max_staleness})"
