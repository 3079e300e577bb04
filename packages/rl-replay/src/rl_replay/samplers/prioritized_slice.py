"""PrioritizedSliceSampler: trajectory slices whose start step is drawn by priority."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from .prioritized import PrioritizedSampler
from .slice import NestedKey, SliceSampler, _TrajectoryIndex

__all__ = ["PrioritizedSliceSampler"]

_MAX_REJECTION_ROUNDS = 8


class PrioritizedSliceSampler(SliceSampler, PrioritizedSampler):
    """Slices of stored trajectories whose first step is drawn with probability ``∝ (|p| + eps) ** alpha``.

    As TorchRL's ``PrioritizedSliceSampler``: priorities belong to single steps (``update_priority``
    with the sampled indices, or ``update_tensordict_priority``); a slice starts at a step drawn by
    priority among the steps that can start one (enough steps left in their trajectory: at least
    ``slice_len``, or what ``span`` asks; with ``strict_length=False`` a trajectory's first step
    always can, its slice being cut at the trajectory end). Steps near a trajectory end are
    therefore never drawn as starts, and the rest of a slice comes along whatever its priority.
    ``info["priority_weight"]`` holds the start's importance weight ``(q_start / min q) ** -beta``
    repeated over the slice's steps.

    Starts are drawn from the sum tree and the ones that cannot start a slice are redrawn (the same
    law as zeroing their priority, without touching the tree); when that keeps failing, the valid
    starts are enumerated once.

    Args:
        max_capacity: the storage capacity (all items).
        alpha, beta, eps, reduction: as :class:`~rl_replay.samplers.prioritized.PrioritizedSampler`.
        num_slices, slice_len, end_key, traj_key, ends, trajectories, cache_values, truncated_key, init_key, strict_length, compile:
            as :class:`SliceSampler`.
        span: as :class:`SliceSampler`, right side only (a left span is turned off with a warning,
            as in TorchRL).
        max_priority_within_buffer: as ``PrioritizedSampler``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage, TensorDictReplayBuffer
        >>> sampler = PrioritizedSliceSampler(40, alpha=1.0, beta=1.0, slice_len=4, traj_key="episode")
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(40), sampler=sampler, batch_size=8,
        ...                             generator=torch.Generator().manual_seed(0))
        >>> index = rb.extend(TensorDict(episode=torch.arange(40) // 10, batch_size=[40]))
        >>> rb.update_priority(index, (index == 23).double())  # only step 23 matters
        >>> rb.sample()["index"].tolist()
        [23, 24, 25, 26, 23, 24, 25, 26]
    """

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        reduction: str = "max",
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        end_key: NestedKey | None = None,
        traj_key: NestedKey | None = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        cache_values: bool = False,
        truncated_key: NestedKey | None = ("next", "truncated"),
        init_key: NestedKey | None = "is_init",
        strict_length: bool = True,
        compile: bool | dict = False,
        span: bool | int | tuple = False,
        max_priority_within_buffer: bool = False,
    ) -> None:
        SliceSampler.__init__(
            self,
            num_slices=num_slices,
            slice_len=slice_len,
            end_key=end_key,
            traj_key=traj_key,
            ends=ends,
            trajectories=trajectories,
            cache_values=cache_values,
            truncated_key=truncated_key,
            init_key=init_key,
            strict_length=strict_length,
            compile=compile,
            span=span,
        )
        rng = self._rng
        PrioritizedSampler.__init__(
            self,
            max_capacity,
            alpha,
            beta,
            eps=eps,
            dtype=dtype,
            reduction=reduction,
            max_priority_within_buffer=max_priority_within_buffer,
        )
        self._rng = rng
        if self.span[0]:
            warnings.warn(
                f"{type(self).__name__}: a left span cannot be drawn from start priorities; it is turned off.",
                stacklevel=2,
            )
            self.span = (0, self.span[1])

    # ------------------------------------------------------------------ write hooks (both parents listen)
    def add(self, index: Any) -> None:
        """Registers the item written at ``index`` with both the priorities and the trajectory index."""
        PrioritizedSampler.add(self, index)
        SliceSampler.add(self, index)

    def extend(self, index: Any, priority: Any = None) -> None:
        PrioritizedSampler.extend(self, index, priority)
        SliceSampler.extend(self, index)

    def _empty(self) -> None:
        PrioritizedSampler._empty(self)
        SliceSampler._empty(self)

    # ------------------------------------------------------------------ sampling
    def _min_steps(self, seq_length: int) -> int:
        right = self.span[1]
        return seq_length if not right else (1 if right < 0 else max(seq_length - right, 1))

    def _locate(self, index: _TrajectoryIndex, items: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Write time, trajectory and position in it of flat item positions ``items``."""
        start, _, col = index.trajectories()
        per_row, lo = index.per_row, index.lo
        stride = index.w - lo + 1
        keys = col * stride + (start - lo)  # sorted: trajectories are ordered by column, then time
        row, c = items // per_row, items % per_row
        t = lo + (row - index.phase - lo).remainder(index.rows)
        traj = torch.searchsorted(keys, c * stride + (t - lo), right=True) - 1
        return t, traj, t - start[traj]

    def _valid(self, length: torch.Tensor, pos: torch.Tensor, seq_length: int) -> torch.Tensor:
        ok = length - pos >= self._min_steps(seq_length)
        if self.strict_length:
            return ok & (length >= seq_length)
        return ok | (pos == 0)

    def _draw_starts(self, index: _TrajectoryIndex, n_items: int, num_slices: int, seq_length: int) -> torch.Tensor:
        tree = self._sum_tree
        total = tree.sum()
        if not total > 0:
            raise RuntimeError(f"{type(self).__name__}: every stored step has zero priority.")
        _, length, _ = index.trajectories()
        found, missing = [], num_slices
        for _ in range(_MAX_REJECTION_ROUNDS):
            draw = max(2 * missing, 16)
            mass = torch.rand(draw, dtype=torch.float64, generator=self._rng) * total
            items = tree.find_prefix(mass).clamp_(max=n_items - 1)
            _, traj, pos = self._locate(index, items)
            items = items[self._valid(length[traj], pos, seq_length)][:missing]
            found.append(items)
            missing -= items.numel()
            if not missing:
                return torch.cat(found)
        return torch.cat([*found, self._draw_exact(index, missing, seq_length)])

    def _draw_exact(self, index: _TrajectoryIndex, count: int, seq_length: int) -> torch.Tensor:
        """``count`` starts drawn among the enumerated valid starts (when redrawing keeps failing)."""
        start, length, col = index.trajectories()
        need = self._min_steps(seq_length)
        n_valid = (length - need + 1).clamp_min(0)
        if self.strict_length:
            n_valid = torch.where(length >= seq_length, n_valid, 0)
        else:
            n_valid = n_valid.clamp_min(1)
        total = int(n_valid.sum())
        if total == 0:
            raise RuntimeError(
                f"{type(self).__name__}: no trajectory is at least {seq_length} steps long; "
                "use strict_length=False or a shorter slice."
            )
        offsets = torch.cumsum(n_valid, 0) - n_valid
        traj = torch.repeat_interleave(torch.arange(n_valid.numel()), n_valid)
        t = start[traj] + torch.arange(total) - offsets[traj]
        items = ((t + index.phase) % index.rows) * index.per_row + col[traj]
        weight = self._sum_tree[items].double()
        cum = weight.cumsum(0)
        if not cum[-1] > 0:
            raise RuntimeError(f"{type(self).__name__}: every step that can start a slice has zero priority.")
        mass = torch.rand(count, dtype=torch.float64, generator=self._rng) * cum[-1]
        return items[torch.searchsorted(cum, mass, right=True).clamp_(max=total - 1)]

    @torch.no_grad()
    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """``num_slices`` slices whose starts are drawn in proportion to their priorities.

        The info holds ``"priority_weight"`` (one importance weight per sampled step, the weight of
        its slice's start) next to :class:`SliceSampler`'s entries.

        Raises:
            RuntimeError: the storage is empty.
        """
        if self._storage is None:
            self._storage = storage
        n_items = len(storage)
        if n_items == 0:
            raise RuntimeError(
                f"Cannot sample from an empty storage ({type(storage).__name__} is empty: nothing to sample)."
            )
        seq_length, num_slices = self._seq_length(batch_size)
        index = self._sync(storage)
        items = self._draw_starts(index, n_items, num_slices, seq_length)
        t0, traj, pos = self._locate(index, items)
        _, length, col = index.trajectories()
        steps = torch.clamp(length[traj] - pos, max=seq_length)
        lengths = None if bool((steps == seq_length).all()) else steps
        out, info = self._emit(storage, index, t0, col[traj], lengths, seq_length)
        weight = (self._sum_tree[items].double() / self._min_tree.min()).pow_(-self._beta).to(self.dtype)
        info["priority_weight"] = (
            weight.repeat_interleave(seq_length) if lengths is None else weight.repeat_interleave(lengths)
        )
        return out, info

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {**PrioritizedSampler.state_dict(self), "slice": SliceSampler.state_dict(self)}

    def load_state_dict(self, state: dict) -> None:
        PrioritizedSampler.load_state_dict(self, state)
        SliceSampler.load_state_dict(self, state.get("slice", {}))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_slices={self.num_slices}, slice_len={self.slice_len}, end_key={self.end_key}, "
            f"traj_key={self.traj_key}, strict_length={self.strict_length}, alpha={self._alpha}, beta={self._beta}, "
            f"eps={self._eps})"
        )
