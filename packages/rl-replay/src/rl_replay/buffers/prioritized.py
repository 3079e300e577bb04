"""PrioritizedReplayBuffer and TensorDictPrioritizedReplayBuffer: buffers with a PrioritizedSampler built in."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from tdict import TensorDictBase
from tdict import NestedKey

from ..samplers.prioritized import PrioritizedSampler, reduce_priority
from ..storages.base import Storage
from ..storages.list import ListStorage
from .replay_buffer import ReplayBuffer
from .tensordict_buffer import TensorDictReplayBuffer

__all__ = ["PrioritizedReplayBuffer", "TensorDictPrioritizedReplayBuffer"]


class PrioritizedReplayBuffer(ReplayBuffer):
    """A :class:`ReplayBuffer` that samples items in proportion to ``(|priority| + eps) ** alpha``.

    Sample with ``return_info=True`` to get ``info["index"]`` (for :meth:`update_priority`) and
    ``info["priority_weight"]`` (the importance weights).

    Args:
        alpha: the priority exponent (0: uniform).
        beta: the importance-sampling exponent.
        eps: added to ``|priority|``.
        dtype: dtype of the importance weights.
        storage: default ``ListStorage(1000)``.
        collate_fn, pin_memory, prefetch, transform, batch_size, generator, compilable, prefetch_timeout: as
            :class:`ReplayBuffer` (TorchRL 0.14's ``PrioritizedReplayBuffer`` takes no ``compilable``).
        **kwargs: the other :class:`ReplayBuffer` arguments (``sample_unit``, ``dim_extend``, ``shared``...).

    Examples:
        >>> import torch
        >>> from rl_replay import LazyTensorStorage
        >>> rb = PrioritizedReplayBuffer(alpha=1.0, beta=0.5, storage=LazyTensorStorage(10),
        ...                              generator=torch.Generator().manual_seed(0))
        >>> _ = rb.extend(torch.arange(10))
        >>> rb.update_priority(torch.arange(10), torch.tensor([0.0] * 9 + [5.0]))
        >>> data, info = rb.sample(4, return_info=True)
        >>> data.tolist(), info["index"].tolist()
        ([9, 9, 9, 9], [9, 9, 9, 9])
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        storage: Storage | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable | None = None,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
        compilable: bool = False,
        prefetch_timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        storage = storage if storage is not None else ListStorage(1000, compilable=compilable)
        sampler = PrioritizedSampler(storage.max_size, alpha, beta, eps, dtype=dtype)
        super().__init__(
            storage=storage,
            sampler=sampler,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            batch_size=batch_size,
            generator=generator,
            compilable=compilable,
            prefetch_timeout=prefetch_timeout,
            **kwargs,
        )


class TensorDictPrioritizedReplayBuffer(TensorDictReplayBuffer):
    """A :class:`TensorDictReplayBuffer` with prioritized sampling.

    ``extend`` uses ``data[priority_key]`` as the new items' priorities when the entry exists
    (else the largest priority seen); sampled TensorDicts carry ``"index"`` and
    ``"priority_weight"``; :meth:`update_tensordict_priority` reads new priorities from
    ``priority_key``. Priority entries with extra dims (e.g. one TD error per agent) are reduced
    to one value per item with ``reduction``.

    Args:
        alpha: the priority exponent (0: uniform).
        beta: the importance-sampling exponent.
        priority_key: the entry that holds priorities (default ``"td_error"``).
        eps: added to ``|priority|``.
        storage: default ``ListStorage(1000)``.
        reduction: ``"max"``, ``"min"``, ``"mean"`` or ``"median"``.
        dtype: dtype of the importance weights.
        collate_fn, pin_memory, prefetch, transform, batch_size, generator, compilable, prefetch_timeout: as
            :class:`ReplayBuffer`.
        **kwargs: the other :class:`ReplayBuffer` arguments (``sample_unit``, ``dim_extend``, ``shared``...).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage
        >>> rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=LazyTensorStorage(8), batch_size=4,
        ...                                        generator=torch.Generator().manual_seed(0))
        >>> _ = rb.extend(TensorDict(obs=torch.arange(8.0), td_error=torch.tensor([0.0] * 7 + [1.0]), batch_size=[8]))
        >>> sample = rb.sample()
        >>> sample["index"].tolist(), sample["priority_weight"].shape
        ([7, 7, 7, 7], torch.Size([4]))
        >>> _ = sample.set("td_error", torch.zeros(4))
        >>> rb.update_tensordict_priority(sample)  # now every item has priority 0 (+ eps)
        >>> sorted(set(rb.sample(100)["index"].tolist())) == list(range(8))
        True
    """

    _sampler: PrioritizedSampler  # built in __init__

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        priority_key: NestedKey = "td_error",
        eps: float = 1e-8,
        storage: Storage | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable | None = None,
        reduction: str = "max",
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float,
        compilable: bool = False,
        prefetch_timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        storage = storage if storage is not None else ListStorage(1000, compilable=compilable)
        sampler = PrioritizedSampler(storage.max_size, alpha, beta, eps, dtype=dtype, reduction=reduction)
        super().__init__(
            priority_key=priority_key,
            storage=storage,
            sampler=sampler,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            batch_size=batch_size,
            generator=generator,
            compilable=compilable,
            prefetch_timeout=prefetch_timeout,
            **kwargs,
        )

    def _item_priority(self, data: TensorDictBase, priority: torch.Tensor, lead: torch.Size) -> torch.Tensor:
        """``priority`` (shaped ``lead + extra``) as one value per item, flattened in storage order."""
        if tuple(priority.shape[: len(lead)]) != tuple(lead):
            raise ValueError(
                f"{type(self).__name__}: {self.priority_key!r} has shape {list(priority.shape)}, expected its leading "
                f"dims to be {list(lead)} (one value per item, optionally with trailing dims)."
            )
        return reduce_priority(priority.reshape(math.prod(lead), -1), self._sampler.reduction)

    def extend(self, data: TensorDictBase, *, update_priority: bool | None = None) -> torch.Tensor:
        """Writes ``data`` (items along its first dim); ``data[priority_key]``, when present, sets their priorities.

        Args:
            data: a TensorDict of items.
            update_priority: ``False`` ignores ``priority_key`` (new items get the default priority).
        """
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"{type(self).__name__}.extend takes a TensorDict, got {type(data).__name__}.")
        priority = data.get(self.priority_key, None) if update_priority is not False else None
        if priority is not None:
            ndim = getattr(self._storage, "ndim", 1)
            if data.batch_dims < ndim:
                raise ValueError(
                    f"{type(self).__name__}.extend: data has batch_size {list(data.batch_size)}, the storage needs {ndim} dims."
                )
            rows = data.transpose(self._dim_extend, 0) if self._dim_extend else data  # as the storage will hold it
            priority = self._item_priority(rows, rows.get(self.priority_key), rows.batch_size[:ndim])
            self._sampler._check_values(priority, priority.shape[0], name=repr(self.priority_key))
        with self._lock:
            index = super().extend(data)
            if priority is not None:
                items = self._sampler._items_of_rows(index)
                self._sampler.extend(index, priority=priority[priority.shape[0] - items.shape[0] :])
        return index

    def add(self, data: TensorDictBase) -> Any:
        """Writes one item; ``data[priority_key]``, when present, sets its priority."""
        priority = data.get(self.priority_key, None) if isinstance(data, TensorDictBase) else None
        if priority is not None:
            priority = reduce_priority(priority.reshape(1, -1), self._sampler.reduction)
            self._sampler._check_values(priority, 1, name=repr(self.priority_key))
        with self._lock:
            index = super().add(data)
            if priority is not None:
                self._sampler.extend(torch.as_tensor([index]), priority=priority)
        return index

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        data, info = super().sample(batch_size, return_info=True)
        index = info.get("index")
        if isinstance(index, tuple) and isinstance(data, TensorDictBase):  # multi-dim storage: [B, ndim] coordinates
            data.set("index", torch.stack(index, -1))
        return (data, info) if return_info else data

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Sets the priorities of ``data["index"]`` to ``data[priority_key]`` (reduced with ``reduction``;
        to one per anchor, the max over its valid records, for a sample drawn through a ``Sequence`` unit)."""
        priority = data.get(self.priority_key)
        anchored = self._anchor_reduced_priority(data, priority)
        if anchored is not None:
            self.update_priority(*anchored)
            return
        index = data.get("index")
        ndim = getattr(self._storage, "ndim", 1)
        if ndim > 1 and index.ndim >= 2 and index.shape[-1] == ndim:
            lead = index.shape[:-1]
            index = index.reshape(-1, ndim)
        else:
            lead = index.shape
            index = index.reshape(-1)
        priority = self._item_priority(data, priority, lead)
        self.update_priority(index, priority)
