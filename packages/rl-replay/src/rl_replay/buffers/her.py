"""HERReplayBuffer: hindsight experience replay (goal relabelling at sample time).

Reference: Andrychowicz et al., "Hindsight Experience Replay", NeurIPS 2017.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
from tdict import TensorDictBase
from tdict import NestedKey
from tdict.validation import check_one_of, check_unit_interval

from ..samplers.base import Sampler
from ..samplers.uniform import RandomSampler
from ..writers import RoundRobinWriter
from .tensordict_buffer import TensorDictReplayBuffer

__all__ = ["HERReplayBuffer", "HindsightStrategy"]


class HindsightStrategy:
    """Where a relabelled transition takes its new goal from (all within its own episode).

    ``"future"``: a step at or after it (the HER paper's best); ``"final"``: the episode's last
    step; ``"episode"``: any step.
    """

    FUTURE = "future"
    FINAL = "final"
    EPISODE = "episode"
    ALL = (FUTURE, FINAL, EPISODE)


def _next(key: NestedKey) -> tuple:
    return ("next", key) if isinstance(key, str) else ("next", *key)


def _required_positional(fn: Callable) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in params if p.kind in kinds and p.default is inspect.Parameter.empty)


class HERReplayBuffer(TensorDictReplayBuffer):
    """A :class:`TensorDictReplayBuffer` that relabels goals in hindsight when it samples.

    Transitions are written in time order (``extend`` with ``[T]`` steps, several episodes or
    pieces of episodes at a time); episode boundaries come from ``end_key`` (a done flag ends the
    episode at that step) and/or ``traj_key`` (a change of id starts a new one). The buffer keeps
    each slot's episode start and end up to date as it writes (vectorised, amortised O(1) per
    step), so sampling does not scan the storage.

    At sample time the first ``int(batch_size * her_ratio)`` items of the batch get a new desired
    goal, the achieved goal (``achieved_goal_key``) of another step of their episode, chosen by
    ``strategy``; it is written at ``goal_key`` and, when present, ``("next", goal_key)``, and the
    reward at ``reward_key`` is recomputed with ``reward_fn``. The other items are left unchanged.
    Episodes whose start was overwritten (round robin) are cut at the oldest stored step.

    ``reward_fn`` is called either as ``reward_fn(td)`` on the relabelled sub-batch (TorchRL style)
    or, when it takes three positional arguments, as ``reward_fn(achieved_goal, desired_goal, td)``
    (Gymnasium-Robotics' ``compute_reward`` style). It returns one reward per item, shaped like the
    stored reward (no trailing singleton dim).

    Args:
        reward_fn: computes rewards of relabelled transitions (see above).
        her_ratio: fraction of each batch that is relabelled, in ``[0, 1]`` (default 0.8).
        strategy: ``"future"`` (default), ``"final"`` or ``"episode"``.
        goal_key: the desired goal (default ``"desired_goal"``).
        achieved_goal_key: the goal achieved by a step (default ``("next", "achieved_goal")``: what the
            step's action reached).
        reward_key: the reward to recompute (default ``("next", "reward")``).
        end_key: done flags that end episodes (default ``("next", "done")``); may be absent from the
            data when ``traj_key`` is given.
        traj_key: trajectory ids (optional).
        sampler: the index sampler (default :class:`RandomSampler`).
        **kwargs: as :class:`TensorDictReplayBuffer` (``storage``, ``batch_size``, ``generator``, ...).
            The storage must be one-dimensional and the writer a round-robin writer.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage
        >>> def reward_fn(achieved, desired, td):
        ...     return ((achieved - desired).norm(dim=-1) < 0.5).float()
        >>> rb = HERReplayBuffer(reward_fn, her_ratio=1.0, strategy="final", storage=LazyTensorStorage(100),
        ...                      batch_size=8, generator=torch.Generator().manual_seed(0))
        >>> T = 5
        >>> ep = TensorDict(observation=torch.randn(T, 2), desired_goal=torch.full((T, 2), 9.0),
        ...                 next=TensorDict(achieved_goal=torch.arange(T * 2.0).view(T, 2), reward=torch.zeros(T),
        ...                                 done=torch.arange(T) == T - 1, batch_size=[T]), batch_size=[T])
        >>> _ = rb.extend(ep)
        >>> batch = rb.sample()
        >>> batch["desired_goal"][0].tolist(), bool((batch["next", "reward"] == (batch["index"] == 4)).all())
        ([8.0, 9.0], True)
    """

    _writer: RoundRobinWriter  # checked in __init__: HER needs time-ordered writes

    def __init__(
        self,
        reward_fn: Callable,
        *,
        her_ratio: float = 0.8,
        strategy: str = "future",
        goal_key: NestedKey = "desired_goal",
        achieved_goal_key: NestedKey = ("next", "achieved_goal"),
        reward_key: NestedKey = ("next", "reward"),
        end_key: NestedKey | None = ("next", "done"),
        traj_key: NestedKey | None = None,
        sampler: Sampler | None = None,
        **kwargs: Any,
    ) -> None:
        if not callable(reward_fn):
            raise TypeError(f"HERReplayBuffer: reward_fn must be callable, got {type(reward_fn).__name__}.")
        check_unit_interval("HERReplayBuffer", "her_ratio", her_ratio)
        strategy = check_one_of(
            "HERReplayBuffer", "strategy", str(getattr(strategy, "value", strategy)), HindsightStrategy.ALL
        )
        if end_key is None and traj_key is None:
            raise ValueError("HERReplayBuffer: give end_key or traj_key (episode boundaries).")
        super().__init__(sampler=sampler if sampler is not None else RandomSampler(), **kwargs)
        if getattr(self._storage, "ndim", 1) != 1:
            raise ValueError(f"HERReplayBuffer: the storage must be one-dimensional, got ndim={self._storage.ndim}.")
        if not isinstance(self._writer, RoundRobinWriter):
            raise TypeError(
                f"HERReplayBuffer: the writer must be a RoundRobinWriter (time-ordered writes), got {type(self._writer).__name__}."
            )
        self.reward_fn = reward_fn
        self._gym_style = _required_positional(reward_fn) >= 3
        self.her_ratio = float(her_ratio)
        self.strategy = strategy
        self.goal_key = goal_key
        self.achieved_goal_key = achieved_goal_key
        self.reward_key = reward_key
        self.end_key = end_key
        self.traj_key = traj_key
        cap = self._storage.max_size
        # per slot: write position of its episode's first step and last step (-1: episode still open)
        self._ep_start = torch.zeros(cap, dtype=torch.int64)
        self._ep_end = torch.full((cap,), -1, dtype=torch.int64)
        self._open_start = -1  # write position where the open (unfinished) episode starts; -1: none
        self._last_traj: int | None = None

    # ------------------------------------------------------------------ writes
    def _flags(self, data: TensorDictBase, key: NestedKey, what: str) -> torch.Tensor:
        value = data.get(key, None)
        if value is None:
            raise KeyError(f"HERReplayBuffer.extend: {what} {key!r} is missing (keys: {list(data.keys(True, True))}).")
        if value.shape != data.batch_size:
            if value.shape == (*data.batch_size, 1):
                value = value.squeeze(-1)
            else:
                raise ValueError(
                    f"HERReplayBuffer.extend: {what} {key!r} has shape {list(value.shape)}, expected {list(data.batch_size)}."
                )
        return value.cpu()

    def _boundaries(self, data: TensorDictBase) -> tuple[torch.Tensor, bool, int | None]:
        """(starts[n]: a new episode starts at step i, the last step ends its episode, last traj id)."""
        n = data.batch_size[0]
        starts = torch.zeros(n, dtype=torch.bool)
        ends_last = False
        first_new = self._open_start < 0
        last_traj = None
        if self.end_key is not None and (self.traj_key is None or data.get(self.end_key, None) is not None):
            done = self._flags(data, self.end_key, "end_key").bool()
            starts[1:] = done[:-1]
            ends_last = bool(done[-1])
        if self.traj_key is not None:
            traj = self._flags(data, self.traj_key, "traj_key")
            starts[1:] |= traj[1:] != traj[:-1]
            first_new = first_new or self._last_traj is None or int(traj[0]) != self._last_traj
            last_traj = int(traj[-1])
        starts[0] |= first_new
        return starts, ends_last, last_traj

    def _check(self, data: Any) -> None:
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"HERReplayBuffer.extend takes a TensorDict of steps, got {type(data).__name__}.")
        if data.batch_dims != 1:
            raise ValueError(
                f"HERReplayBuffer.extend: expected steps with batch_size [T], got {list(data.batch_size)}."
            )
        for key, what in (
            (self.goal_key, "goal_key"),
            (self.achieved_goal_key, "achieved_goal_key"),
            (self.reward_key, "reward_key"),
        ):
            if data.get(key, None) is None:
                raise KeyError(
                    f"HERReplayBuffer.extend: {what} {key!r} is missing (keys: {list(data.keys(True, True))})."
                )

    def add(self, data: TensorDictBase) -> int:
        """Writes one step (batch_size ``[]``); returns its index."""
        if not isinstance(data, TensorDictBase) or data.batch_dims != 0:
            raise ValueError(
                "HERReplayBuffer.add takes one step (a TensorDict with batch_size []); use extend for more."
            )
        return int(self.extend(data.unsqueeze(0))[0])

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Writes steps ``[T]`` in time order and updates the episode bookkeeping; returns their indices."""
        if self._transforms:
            data = self._apply_inverse(data)
            if data is None:
                return torch.zeros(0, dtype=torch.int64)
        self._check(data)
        n = data.batch_size[0]
        if n == 0:
            return torch.zeros(0, dtype=torch.int64)
        with self._lock:
            starts, ends_last, last_traj = self._boundaries(data)  # validates before any write
            p0 = self._writer._write_count
            index = self._writer.extend(data)
            self._sampler.extend(index)
            self._record(p0, starts, ends_last)
            if last_traj is not None:
                self._last_traj = last_traj
        return index

    def _record(self, p0: int, starts: torch.Tensor, ends_last: bool) -> None:
        cap = self._storage.max_size
        n = starts.numel()
        ar = torch.arange(n)
        first = torch.where(starts, ar, torch.full_like(ar, -1)).cummax(0).values
        start_pos = torch.where(first >= 0, p0 + first, torch.full_like(first, self._open_start))
        ends = torch.cat([starts[1:], torch.tensor([ends_last])])
        last = torch.where(ends, ar, torch.full_like(ar, n)).flip(0).cummin(0).values.flip(0)
        end_pos = torch.where(last < n, p0 + last, torch.full_like(last, -1))
        if self._open_start >= 0:  # the episode left open by the previous write may end now
            close = p0 - 1 if bool(starts[0]) else (p0 + int(last[0]) if int(last[0]) < n else None)
            if close is not None:
                old = torch.arange(max(self._open_start, p0 - cap), p0) % cap
                self._ep_end[old] = close
        keep = min(n, cap)
        slots = torch.arange(p0 + n - keep, p0 + n) % cap
        self._ep_start[slots] = start_pos[n - keep :]
        self._ep_end[slots] = end_pos[n - keep :]
        self._open_start = int(start_pos[-1]) if int(end_pos[-1]) < 0 else -1

    def _empty_bookkeeping(self) -> None:
        self._ep_start.zero_()
        self._ep_end.fill_(-1)
        self._open_start = -1
        self._last_traj = None

    def empty(self) -> None:
        with self._lock:
            super().empty()
            self._empty_bookkeeping()

    # ------------------------------------------------------------------ sampling
    def _goal_slots(self, slots: torch.Tensor) -> torch.Tensor:
        """The storage slots whose achieved goal becomes the new goal of the items at ``slots``."""
        cap = self._storage.max_size
        written = self._writer._write_count
        last = written - 1
        pos = last - (last - slots) % cap  # write position of each slot's current item
        start = self._ep_start[slots].clamp_min(max(written - cap, 0))
        end = self._ep_end[slots]
        end = torch.where(end < 0, torch.full_like(end, last), end)
        if self.strategy == HindsightStrategy.FINAL:
            goal = end
        else:
            low = pos if self.strategy == HindsightStrategy.FUTURE else start
            span = end - low + 1
            u = torch.rand(slots.shape, generator=self._rng, dtype=torch.float64)
            goal = low + (u * span).long().clamp_max(span - 1)
        return goal % cap

    def _achieved(self, goal_slots: torch.Tensor) -> torch.Tensor:
        inner = getattr(self._storage, "_storage", None)
        if isinstance(inner, TensorDictBase):
            return inner.get(self.achieved_goal_key)[goal_slots.to(inner.device or "cpu")]
        return self._storage.get(goal_slots).get(self.achieved_goal_key)

    def _sample_now(self, batch_size: int) -> tuple[Any, dict]:
        with self._lock:
            index, info = self._sampler.sample(self._storage, batch_size)
            data = self._storage.get(index)
            if isinstance(index, tuple):
                raise TypeError("HERReplayBuffer: the sampler returned a multi-dim index; HER needs a 1-D storage.")
            n_her = int(index.numel() * self.her_ratio)
            goals = self._achieved(self._goal_slots(index[:n_her].cpu())) if n_her else None
        info["index"] = index
        if goals is not None:  # n_her > 0
            data = self._relabel(data, goals, n_her)
        data = self._collate_fn(data)
        if self._transforms:
            data = self._apply_transforms(data)
        if self._pin_memory and torch.cuda.is_available():
            data = data.pin_memory()
        return data, info

    def _relabel(self, data: TensorDictBase, goals: torch.Tensor, n_her: int) -> TensorDictBase:
        for key in (self.goal_key, _next(self.goal_key)):
            value = data.get(key, None)
            if value is None:
                continue
            value = value.clone()
            value[:n_her] = goals.to(value)
            data.set(key, value)
        her = data[:n_her]
        if self._gym_style:
            reward = self.reward_fn(her.get(self.achieved_goal_key), her.get(self.goal_key), her)
        else:
            reward = self.reward_fn(her)
        stored = data.get(self.reward_key).clone()
        reward = torch.as_tensor(reward)
        if reward.shape != stored[:n_her].shape:
            raise ValueError(
                f"HERReplayBuffer: reward_fn returned shape {list(reward.shape)}, expected {list(stored[:n_her].shape)} "
                f"(like the stored {self.reward_key!r}; per-step rewards have no trailing singleton dim)."
            )
        stored[:n_her] = reward.to(stored)
        data.set(self.reward_key, stored)
        return data

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        state = super().state_dict()
        with self._lock:
            state["her"] = {
                "ep_start": self._ep_start.clone(),
                "ep_end": self._ep_end.clone(),
                "open_start": self._open_start,
                "last_traj": self._last_traj,
            }
        return state

    def load_state_dict(self, state: dict) -> None:
        her = state.get("her")
        with self._lock:
            super().load_state_dict(state)
            if her is None:
                self._rebuild_bookkeeping()
            else:
                self._ep_start.copy_(torch.as_tensor(her["ep_start"]))
                self._ep_end.copy_(torch.as_tensor(her["ep_end"]))
                self._open_start = int(her["open_start"])
                self._last_traj = None if her["last_traj"] is None else int(her["last_traj"])

    def loads(self, path: Any) -> None:
        """Restores a checkpoint written by ``dumps``; the episode bookkeeping is rebuilt from the stored
        done flags / trajectory ids (the checkpoint holds items, sampler, writer and RNG)."""
        with self._lock:
            super().loads(path)
            self._rebuild_bookkeeping()

    def _rebuild_bookkeeping(self) -> None:
        """Recomputes the episode bookkeeping from the stored steps, read in write order."""
        self._empty_bookkeeping()
        n = len(self._storage)
        if n == 0:
            return
        cap = self._storage.max_size
        written = self._writer._write_count
        order = torch.arange(written - n, written) % cap
        keys = [k for k in (self.end_key, self.traj_key) if k is not None]
        inner = getattr(self._storage, "_storage", None)
        if isinstance(inner, TensorDictBase):
            present = [k for k in keys if inner.get(k, None) is not None]
            data = inner.select(*present)[order.to(inner.device or "cpu")]
        else:
            data = self._storage.get(order)
        starts, ends_last, last_traj = self._boundaries(data)
        self._record(written - n, starts, ends_last)
        self._last_traj = last_traj

    def __repr__(self) -> str:
        return (
            f"HERReplayBuffer(strategy={self.strategy!r}, her_ratio={self.her_ratio}, goal_key={self.goal_key!r}, "
            f"achieved_goal_key={self.achieved_goal_key!r}, reward_key={self.reward_key!r}, storage={self._storage!r})"
        )
