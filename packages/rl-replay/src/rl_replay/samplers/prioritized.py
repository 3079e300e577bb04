"""PrioritizedSampler: proportional prioritized replay (Schaul et al., 2015) on torch sum/min trees."""

from __future__ import annotations

import math
import threading
from typing import Any

import torch
from tdict.validation import check_non_negative, check_one_of, check_positive_int

from ..trees import MinTree, SumTree, _MaxTree
from .base import Sampler

__all__ = ["PrioritizedSampler"]

_REDUCTIONS = ("max", "min", "mean", "median")


def reduce_priority(priority: torch.Tensor, reduction: str) -> torch.Tensor:
    """Reduces ``priority`` of shape ``[N, ...]`` to ``[N]`` with ``reduction`` (max, min, mean, median)."""
    priority = priority.reshape(priority.shape[0], -1)
    if priority.shape[1] == 1:
        return priority[:, 0]
    if reduction == "max":
        return priority.amax(1)
    if reduction == "min":
        return priority.amin(1)
    if reduction == "mean":
        return priority.float().mean(1) if not priority.is_floating_point() else priority.mean(1)
    return priority.median(1).values


class PrioritizedSampler(Sampler):
    """Samples item ``i`` with probability ``P(i) = q_i / sum_j q_j`` where ``q_i = (|p_i| + eps) ** alpha``.

    Names and semantics follow TorchRL 0.14's ``PrioritizedSampler``, on pure-torch trees (no
    compiled extension): new items get the largest priority seen so far (1.0 before any update),
    ``sample`` draws ``batch_size`` independent uniform masses in ``[0, sum q)`` and finds their
    items with one batched :meth:`SumTree.find_prefix`, and ``info["priority_weight"]`` holds the
    importance weights ``(N * P(i)) ** -beta`` divided by their largest possible value, which is
    ``(q_i / min_j q_j) ** -beta`` (the minimum comes from a :class:`MinTree`).

    Args:
        max_capacity: the number of items the storage holds (all dims of multi-dim storages).
        alpha: how strongly priorities skew sampling (0: uniform).
        beta: the importance-sampling exponent (0: no correction, 1: full correction).
        eps: added to ``|priority|`` so no item has zero probability.
        dtype: dtype of the returned weights (the trees sum in float64).
        reduction: how a TensorDict buffer reduces a priority entry with extra dims to one value
            per item (``"max"``, ``"min"``, ``"mean"``, ``"median"``).
        max_priority_within_buffer: new items get the largest priority among the items still
            stored (instead of the largest ever seen).
        device: where the trees live (CPU by default).

    All random numbers come from the buffer's generator (``ReplayBuffer(generator=...)``).

    Examples:
        >>> import torch
        >>> from rl_replay import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4), sampler=PrioritizedSampler(4, alpha=1.0, beta=1.0),
        ...                   generator=torch.Generator().manual_seed(0))
        >>> _ = rb.extend(torch.arange(4.0))
        >>> rb.update_priority(torch.arange(4), torch.tensor([0.0, 1.0, 1.0, 2.0]))
        >>> data, info = rb.sample(1000, return_info=True)
        >>> sorted(set(data.tolist()))  # item 0 has (almost) no mass: eps ** alpha
        [1.0, 2.0, 3.0]
        >>> float(info["priority_weight"][data == 3][0] / info["priority_weight"][data == 1][0])  # (2 / 1) ** -beta
        0.5
    """

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        max_priority_within_buffer: bool = False,
        device: Any = None,
    ) -> None:
        super().__init__()
        check_positive_int("PrioritizedSampler", "max_capacity", max_capacity)
        _check_nonneg("alpha", alpha)
        _check_nonneg("beta", beta)
        check_non_negative("PrioritizedSampler", "eps", eps, finite=True)
        check_one_of("PrioritizedSampler", "reduction", reduction, _REDUCTIONS)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"PrioritizedSampler: dtype must be a floating point torch.dtype, got {dtype!r}.")
        self._max_capacity = max_capacity
        self._alpha = float(alpha)
        self._beta = float(beta)
        self._eps = float(eps)
        self.dtype = dtype
        self.reduction = reduction
        self._max_priority_within_buffer = bool(max_priority_within_buffer)
        self._sum_tree = SumTree(max_capacity, device=device)
        self._min_tree = MinTree(max_capacity, device=device)
        self._device = self._sum_tree.device
        self._descend_bufs: dict = {}  # (batch size, thread id) -> SumTree._descend scratch tensors
        # |priority| of every item as given (the trees hold (|p| + eps) ** alpha): lets alpha change exactly
        self._priority = torch.zeros(max_capacity, dtype=torch.float64, device=device)
        self._max_tree = _MaxTree(max_capacity, device=device) if self._max_priority_within_buffer else None
        self._max_seen = torch.full((1,), -math.inf, dtype=torch.float64)  # largest |priority| ever given
        self._storage: Any = None

    # ------------------------------------------------------------------ parameters
    @property
    def max_size(self) -> int:
        """The capacity: how many items the sampler holds priorities for."""
        return self._max_capacity

    @property
    def alpha(self) -> float:
        """The priority exponent; setting it re-weights every stored item (one O(capacity) pass)."""
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        _check_nonneg("alpha", value)
        value = float(value)
        if value != self._alpha:
            self._alpha = value
            written = torch.nonzero(self._min_tree[:] < math.inf).view(-1)
            if written.numel():
                self._write_trees(written, self._priority.index_select(0, written))

    @property
    def beta(self) -> float:
        """The importance-sampling exponent."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        _check_nonneg("beta", value)
        self._beta = float(value)

    @property
    def eps(self) -> float:
        """Added to ``|priority|`` before the exponent ``alpha``."""
        return self._eps

    @property
    def default_priority(self) -> float:
        """The priority new items get: the largest seen (in the buffer, with ``max_priority_within_buffer``), else 1."""
        if self._max_tree is not None:
            value = float(self._max_tree._root[0])
        else:
            value = float(self._max_seen[0])
        return value if value > -math.inf else 1.0

    def register_storage(self, storage: Any) -> None:
        """Tells the sampler which storage it serves (needed to map rows of multi-dim storages to items)."""
        self._storage = storage

    # ------------------------------------------------------------------ index helpers
    def _storage_shape(self, storage: Any) -> tuple:
        storage = storage if storage is not None else self._storage
        if storage is None or getattr(storage, "ndim", 1) == 1:
            return ()
        return tuple(storage.shape)

    def _items_of(self, index: Any, storage: Any = None) -> torch.Tensor:
        """Flat item positions of an index from sample()/the user: ints, 1-D tensors, tuples, ``[B, ndim]``."""
        device = self._priority.device
        if isinstance(index, tuple):
            shape = self._storage_shape(storage)
            if len(shape) != len(index):
                raise ValueError(
                    f"PrioritizedSampler: a tuple index needs a storage with {len(index)} dims, "
                    f"the storage has shape {list(shape) or 'unknown (1-D)'}."
                )
            return _ravel([torch.as_tensor(i, device=device).reshape(-1) for i in index], shape)
        if isinstance(index, torch.Tensor):
            if index.device != device:
                index = index.to(device)
        else:
            index = torch.as_tensor(index, device=device)
        dtype = index.dtype
        if dtype.is_floating_point or dtype == torch.bool:
            raise TypeError(f"PrioritizedSampler: index must hold integers, got dtype {dtype}.")
        if index.dim() != 1:
            if index.dim() == 2:
                shape = self._storage_shape(storage)
                if shape and index.shape[1] == len(shape):
                    return _ravel(list(index.long().unbind(1)), shape)
            index = index.reshape(-1)
        return index if dtype == torch.int64 else index.long()

    def _items_of_rows(self, index: Any) -> torch.Tensor:
        """Flat item positions written by a writer (which returns rows for multi-dim storages)."""
        device = self._priority.device
        index = torch.as_tensor(index, device=device).reshape(-1).long()
        shape = self._storage_shape(None)
        if shape:
            per_row = math.prod(shape[1:])
            index = (index.unsqueeze(1) * per_row + torch.arange(per_row, device=device)).reshape(-1)
        return index

    # ------------------------------------------------------------------ writes
    def _write_trees(self, index: torch.Tensor, raw: torch.Tensor) -> None:
        # (|p| + eps) ** alpha, skipping the identity steps (the trees copy the values, never keep them)
        value = torch.add(raw, self._eps) if self._eps else raw
        if self._alpha != 1.0:
            value = value.pow_(self._alpha) if self._eps else value.pow(self._alpha)
        plan = self._sum_tree._plan(index)  # one plan for both trees (same shape)
        self._sum_tree._write(index, value, plan)
        self._min_tree._write(index, value, plan)

    def _write(self, index: torch.Tensor, raw: torch.Tensor) -> None:
        """Writes checked ``|priority|`` values (1-D float64, finite, one per index) for items ``index``."""
        raw = self._sum_tree._last_wins(index, raw)  # duplicates now carry equal values: any write order is fine
        self._priority.scatter_(0, index, raw)
        if self._max_tree is not None:
            self._max_tree._write(index, raw)
        self._write_trees(index, raw)

    def _check_values(self, priority: Any, n: int, name: str = "priority") -> tuple[torch.Tensor, float]:
        """``|priority|`` as ``n`` float64 values and their maximum; raises on a bad shape or a non-finite value."""
        priority = torch.as_tensor(priority, device=self._device)
        if priority.requires_grad:
            priority = priority.detach()
        size = priority.numel()
        if size == 1:
            priority = priority.reshape(1).expand(n)
        elif size != n:
            raise ValueError(
                f"PrioritizedSampler.update_priority: {name} must be a scalar or hold one value per index "
                f"({n} indices), got shape {list(priority.shape)}."
            )
        elif priority.dim() != 1:
            priority = priority.reshape(-1)
        if priority.dtype != torch.float64:  # copy_ converts (cheaper than .to())
            priority = torch.empty(n, dtype=torch.float64, device=self._device).copy_(priority)
        if not n:
            return priority, 0.0
        lo, top = torch.aminmax(priority)  # one pass: the sign and the largest value (NaN propagates)
        lo, top = lo.item(), top.item()
        if lo < 0:  # the caller's tensor is never written to: abs() makes a new one
            priority = priority.abs()
            top = max(top, -lo)
        if not (math.isfinite(top) and math.isfinite(lo)):
            bad = top if not math.isfinite(top) else lo
            raise ValueError(f"PrioritizedSampler.update_priority: {name} must be finite, got a {bad} value.")
        return priority, top

    def _check(self, index: torch.Tensor, priority: Any, name: str = "priority") -> tuple[torch.Tensor, torch.Tensor]:
        """Validates ``index`` and ``priority`` (dropping negative indices); raises before any write."""
        priority, top = self._check_values(priority, index.shape[0], name)
        if index.shape[0] == 0:
            return index, priority
        lo, hi = torch.aminmax(index)
        lo, hi = lo.item(), hi.item()
        limit = len(self._storage) if self._storage is not None else self._max_capacity
        if hi >= limit:
            raise IndexError(
                f"PrioritizedSampler.update_priority: index must lie in [0, {limit}) (the stored items), got {hi}."
            )
        if lo < 0:  # TorchRL's convention: -1 marks items a writer declined; they are skipped
            keep = index >= 0
            index, priority = index[keep], priority[keep]
            if index.numel() == 0:
                return index, priority
            top = priority.max().item()
        if top > self._max_seen.item():
            self._max_seen.fill_(top)
        return index, priority

    def update_priority(self, index: Any, priority: Any, *, storage: Any = None) -> None:
        """Sets the priority of the items at ``index`` (stored as ``(|priority| + eps) ** alpha``).

        Args:
            index: item indices: an int, a 1-D tensor of flat positions, or for multi-dim
                storages the tuple ``sample`` returns (or a ``[B, ndim]`` tensor).
            priority: a scalar or one value per index. Negative indices are skipped.
            storage: the storage, for multi-dim indices when the sampler has not seen it yet.
        """
        index = self._items_of(index, storage)
        index, priority = self._check(index, priority)
        if index.shape[0]:
            self._write(index, priority)

    def mark_update(self, index: Any, *, storage: Any = None) -> None:
        """Gives the items at ``index`` the default (largest) priority."""
        self.update_priority(index, self.default_priority, storage=storage)

    def _new_items(self, index: torch.Tensor, priority: Any = None) -> None:
        if priority is not None:  # checked before anything changes
            index, priority = self._check(index, priority, name="priority of the new items")
        if self._max_tree is not None:  # overwritten items no longer count for the in-buffer maximum
            self._max_tree._write(index, torch.full_like(index, -math.inf, dtype=torch.float64))
        if priority is None:
            index, priority = self._check(index, self.default_priority)
        if index.numel():
            self._write(index, priority)

    @torch.no_grad()
    def add(self, index: Any) -> None:
        """Gives the item written at ``index`` the default priority."""
        self._new_items(self._items_of_rows(index))

    @torch.no_grad()
    def extend(self, index: Any, priority: Any = None) -> None:
        """Hook called with the indices a writer just filled (rows for multi-dim storages).

        Args:
            index: the written indices.
            priority: their priorities (one per item); default: :attr:`default_priority`.
        """
        self._new_items(self._items_of_rows(index), priority)

    # ------------------------------------------------------------------ sampling
    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        # no grad-mode switch needed: nothing here requires gradients
        """``batch_size`` items drawn in proportion to their weighted priorities, with replacement.

        Returns ``(index, {"priority_weight": w})``: the importance weights ``w`` (relative to the
        smallest priority, to the power ``-beta``); ``index`` is a tuple of coordinates for a
        multi-dim storage.

        Raises:
            RuntimeError: the storage is empty.
        """
        if self._storage is None:
            self._storage = storage
        n = len(storage)
        if n == 0:
            raise RuntimeError(
                f"Cannot sample from an empty storage ({type(storage).__name__} is empty: nothing to sample)."
            )
        tree = self._sum_tree
        mass = torch.rand(batch_size, dtype=torch.float64, generator=self._rng, device=self._device).mul_(tree._root)
        key = (batch_size, threading.get_ident())  # scratch tensors: one set per thread and batch size
        bufs = self._descend_bufs.get(key)
        if bufs is None:
            if len(self._descend_bufs) >= 8:
                self._descend_bufs.clear()
            bufs = self._descend_bufs[key] = tree._descend_buffers(batch_size)
        index = tree._descend(mass, True, n - 1, bufs)  # find_prefix(mass), clamped to the stored items
        weight = tree._leaves.index_select(0, index).div_(self._min_tree._root).pow_(-self._beta)
        if self.dtype != torch.float64:
            weight = weight.to(self.dtype)
        if getattr(storage, "ndim", 1) > 1:
            index = torch.unravel_index(index, tuple(storage.shape))
        return index, {"priority_weight": weight}

    # ------------------------------------------------------------------ state
    def _empty(self) -> None:
        self._sum_tree._reset()
        self._min_tree._reset()
        self._priority.zero_()
        if self._max_tree is not None:
            self._max_tree._reset()
        self._max_seen.fill_(-math.inf)

    def share_memory_(self) -> "PrioritizedSampler":
        self._sum_tree.share_memory_()
        self._min_tree.share_memory_()
        self._priority.share_memory_()
        self._max_seen.share_memory_()
        if self._max_tree is not None:
            self._max_tree.share_memory_()
        return self

    def state_dict(self) -> dict:
        """Parameters (JSON values) and the trees and priorities (tensors)."""
        state = {
            "max_capacity": self._max_capacity,
            "alpha": self._alpha,
            "beta": self._beta,
            "eps": self._eps,
            "max_seen": float(self._max_seen[0]) if self._max_seen[0] > -math.inf else None,
            "priority": self._priority.clone(),
            "sum_tree": self._sum_tree._nodes.clone(),
            "min_tree": self._min_tree._nodes.clone(),
        }
        if self._max_tree is not None:
            state["max_tree"] = self._max_tree._nodes.clone()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` in place (checks every entry before changing anything)."""
        if int(state["max_capacity"]) != self._max_capacity:
            raise ValueError(
                f"PrioritizedSampler.load_state_dict: state has max_capacity={state['max_capacity']}, "
                f"this sampler {self._max_capacity}."
            )
        trees = [("sum_tree", self._sum_tree), ("min_tree", self._min_tree), ("priority", None)]
        if self._max_tree is not None:
            if "max_tree" not in state:
                raise KeyError(
                    "PrioritizedSampler.load_state_dict: 'max_tree' is missing (max_priority_within_buffer=True)."
                )
            trees.append(("max_tree", self._max_tree))
        for key, tree in trees:
            target = tree._nodes if tree is not None else self._priority
            value = state[key]
            if not isinstance(value, torch.Tensor) or value.shape != target.shape:
                raise ValueError(
                    f"PrioritizedSampler.load_state_dict: {key!r} must be a tensor of shape {list(target.shape)}, "
                    f"got {getattr(value, 'shape', type(value).__name__)}."
                )
        _check_nonneg("alpha", state["alpha"])
        _check_nonneg("beta", state["beta"])
        for key, tree in trees:
            (tree._nodes if tree is not None else self._priority).copy_(state[key])
        self._alpha, self._beta, self._eps = float(state["alpha"]), float(state["beta"]), float(state["eps"])
        self._max_seen.fill_(-math.inf if state["max_seen"] is None else float(state["max_seen"]))

    def __repr__(self) -> str:
        return (
            f"PrioritizedSampler(max_capacity={self._max_capacity}, alpha={self._alpha}, beta={self._beta}, "
            f"eps={self._eps}, reduction={self.reduction!r})"
        )


def _check_nonneg(name: str, value: Any) -> None:
    """A priority exponent (``alpha``, ``beta``): a finite number >= 0, or a one-element tensor of one."""
    check_non_negative(
        "PrioritizedSampler", name, float(value) if isinstance(value, torch.Tensor) else value, finite=True
    )


def _ravel(index: list, shape: tuple) -> torch.Tensor:
    flat = index[0].long()
    for i, size in zip(index[1:], shape[1:]):
        flat = flat * size + i.long()
    return flat
