"""PromptGroupSampler: batches made of whole groups of items that share a key (e.g. one prompt)."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from tdict import is_tensor_collection

from tdict.validation import check_positive_int

from .base import Sampler

__all__ = ["PromptGroupSampler"]

_STRATEGIES = ("random", "recency", "reward", "variance")


def _group_values(column: Any) -> list:
    """One hashable value per item of a stored column (tensors, strings, lists of them)."""
    values = column.tolist() if hasattr(column, "tolist") else list(column)
    return [tuple(v) if isinstance(v, list) else v for v in values]


class PromptGroupSampler(Sampler):
    """Draws ``num_groups`` groups of ``samples_per_group`` items, a group being the items whose
    ``group_key`` entry holds one value (the prompt of LLM generations, for group-relative losses
    such as GRPO).

    Give one of ``num_groups`` and ``samples_per_group``; the other follows from the batch size.
    The batch lists the groups one after the other. Sampling consumes nothing, so older groups can
    be replayed. A group with fewer items than asked for (or fewer groups than asked for) is
    completed by drawing again with replacement, with a warning (once).

    Args:
        num_groups: groups per batch.
        samples_per_group: items per group.
        group_key: the entry that identifies the group (ints, or strings in a non-tensor entry).
        strategy: which items of a group are drawn: ``"random"`` (uniformly), ``"recency"``
            (the most recently written), ``"reward"`` (the highest ``reward_key``) or
            ``"variance"`` (the subset of highest reward variance, ties broken by total reward).
        reward_key: the reward entry for ``"reward"`` and ``"variance"`` (averaged over trailing
            dims to one value per item).
        cache_groups: keep the group index between samples until the storage changes (set
            ``False`` when group values are edited in place without a buffer write).

    Needs a one-dim storage whose reads are TensorDicts (:class:`~rl_replay.LazyTensorStorage`,
    :class:`~rl_replay.LazyMemmapStorage`, :class:`~rl_replay.LazyStackStorage`).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyStackStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyStackStorage(100), batch_size=4,
        ...                   sampler=PromptGroupSampler(num_groups=2, group_key="prompt"))
        >>> _ = rb.extend(TensorDict(prompt=torch.tensor([0, 0, 1, 1, 2, 2]), batch_size=[6]))
        >>> prompts = rb.sample()["prompt"]
        >>> prompts.unique().numel(), bool(prompts[0] == prompts[1]), bool(prompts[2] == prompts[3])
        (2, True, True)
    """

    def __init__(
        self,
        *,
        num_groups: int | None = None,
        samples_per_group: int | None = None,
        group_key: Any = "query",
        strategy: str = "random",
        reward_key: Any = ("next", "reward"),
        cache_groups: bool = True,
    ) -> None:
        super().__init__()
        if (num_groups is None) == (samples_per_group is None):
            raise TypeError(
                "PromptGroupSampler: give exactly one of num_groups and samples_per_group, got "
                f"num_groups={num_groups!r}, samples_per_group={samples_per_group!r}."
            )
        if num_groups is not None:
            num_groups = check_positive_int("PromptGroupSampler", "num_groups", num_groups)
        if samples_per_group is not None:
            samples_per_group = check_positive_int("PromptGroupSampler", "samples_per_group", samples_per_group)
        if strategy not in _STRATEGIES:
            raise ValueError(f"PromptGroupSampler: strategy must be one of {list(_STRATEGIES)}, got {strategy!r}.")
        self.num_groups, self.samples_per_group = num_groups, samples_per_group
        self.group_key, self.strategy, self.reward_key = group_key, strategy, reward_key
        self.cache_groups = bool(cache_groups)
        self._group_index: dict | None = None  # group value -> positions
        self._rewards: torch.Tensor | None = None  # one reward per position
        self._cache_stamp: tuple | None = None  # (storage id, length, revision) the index was built for
        self._position_recency: torch.Tensor | None = None  # write clock of each position (-1: unknown)
        self._recency_clock = 0
        self._warned = False

    # ------------------------------------------------------------------ writes
    def _record(self, index: Any) -> None:
        self._group_index = None
        if self.strategy != "recency":
            return
        index = torch.as_tensor(index, dtype=torch.int64).reshape(-1).cpu()
        if not index.numel():
            return
        self._grow_recency(int(index.max()) + 1)
        assert self._position_recency is not None
        self._position_recency[index] = torch.arange(1, index.numel() + 1) + self._recency_clock
        self._recency_clock += index.numel()

    def _grow_recency(self, size: int) -> None:
        have = 0 if self._position_recency is None else self._position_recency.numel()
        if size > have:
            grown = torch.full((size,), -1, dtype=torch.int64)
            if self._position_recency is not None:
                grown[:have] = self._position_recency
            self._position_recency = grown

    def add(self, index: Any) -> None:
        """An item was written at ``index``: the group index is rebuilt at the next sample."""
        self._record(index)

    def extend(self, index: Any) -> None:
        """Items were written at ``index``: the group index is rebuilt at the next sample."""
        self._record(index)

    def mark_update(self, index: Any) -> None:
        """Items changed in place: the group index is rebuilt at the next sample."""
        self._record(index)

    # ------------------------------------------------------------------ group index
    def _build(self, storage: Any) -> None:
        n = len(storage)
        stamp = (id(storage), n, getattr(storage, "_mutation_revision", 0))
        if self.cache_groups and self._group_index is not None and self._cache_stamp == stamp:
            return
        data = storage.get(slice(0, n))
        if not is_tensor_collection(data):
            raise TypeError(
                f"PromptGroupSampler needs a one-dim storage whose reads are TensorDicts (LazyTensorStorage, "
                f"LazyStackStorage, ...); a {type(storage).__name__} returns {type(data).__name__}. "
                "Plain ListStorage is not supported."
            )
        values = _group_values(data.get(self.group_key))
        if len(values) != n:
            raise RuntimeError(
                f"PromptGroupSampler: group_key {self.group_key!r} holds {len(values)} values for {n} stored items."
            )
        groups: dict = {}
        for position, value in enumerate(values):
            groups.setdefault(value, []).append(position)
        if self.strategy in ("reward", "variance"):
            reward = data.get(self.reward_key)
            if not isinstance(reward, torch.Tensor):
                raise TypeError(
                    f"PromptGroupSampler(strategy={self.strategy!r}) requires reward_key {self.reward_key!r} to hold "
                    f"a tensor, got {type(reward).__name__}."
                )
            self._rewards = reward.reshape(n, -1).float().mean(-1).cpu()
        if self.strategy == "recency":
            self._fill_recency(n)
        self._group_index = {k: torch.tensor(v, dtype=torch.int64) for k, v in groups.items()}
        self._cache_stamp = stamp

    def _fill_recency(self, n: int) -> None:
        """Positions written without the sampler hearing of it count as older than the others."""
        self._grow_recency(n)
        assert self._position_recency is not None
        clock = self._position_recency[:n]
        unknown = (clock < 0).nonzero().squeeze(1)
        if unknown.numel():
            known = clock[clock >= 0]
            first = int(known.min()) if known.numel() else unknown.numel()
            clock[unknown] = torch.arange(first - unknown.numel(), first)
            self._recency_clock = max(self._recency_clock, int(clock.max()))

    # ------------------------------------------------------------------ sampling
    def _draw_perm(self, n: int) -> torch.Tensor:
        return torch.randperm(n, generator=self._rng)

    def _draw_int(self, n: int, k: int) -> torch.Tensor:
        return torch.randint(n, (k,), generator=self._rng)

    def _short(self) -> None:
        if not self._warned:
            warnings.warn(
                "PromptGroupSampler: a group (or the set of groups) holds fewer items than asked for; the draw is "
                "completed with replacement. Store more data or ask for fewer groups/items per group.",
                stacklevel=4,
            )
            self._warned = True

    def _pick_groups(self, count: int) -> list:
        assert self._group_index is not None
        keys = list(self._group_index)
        order = self._draw_perm(len(keys)).tolist()
        if len(keys) < count:
            self._short()
            order += self._draw_int(len(keys), count - len(keys)).tolist()
        return [keys[i] for i in order[:count]]

    def _max_variance(self, positions: torch.Tensor, k: int) -> torch.Tensor:
        # a fixed-size subset of maximal variance takes the j lowest and k - j highest rewards
        assert self._rewards is not None
        rewards = self._rewards[positions].double()
        order = rewards.argsort()
        r = rewards[order]
        n = r.numel()
        csum = torch.cat([r.new_zeros(1), r.cumsum(0)])
        csq = torch.cat([r.new_zeros(1), (r * r).cumsum(0)])
        low = torch.arange(k + 1)
        total = csum[low] + csum[n] - csum[n - (k - low)]
        total_sq = csq[low] + csq[n] - csq[n - (k - low)]
        variance = total_sq / k - (total / k) ** 2
        best = torch.isclose(variance, variance.max(), rtol=1e-12, atol=1e-12)
        j = int(torch.where(best, total, torch.full_like(total, -torch.inf)).argmax())
        rank = torch.arange(n)
        return positions[order[(rank < j) | (rank >= n - (k - j))]]

    def _pick_items(self, positions: torch.Tensor, k: int) -> torch.Tensor:
        n = positions.numel()
        if n < k:
            self._short()
            return torch.cat([self._pick_items(positions, n), positions[self._draw_int(n, k - n)]])
        if self.strategy == "recency":
            assert self._position_recency is not None
            return positions[self._position_recency[positions].argsort()[n - k :]]
        if self.strategy == "reward":
            assert self._rewards is not None
            return positions[self._rewards[positions].topk(k).indices]
        if self.strategy == "variance":
            return self._max_variance(positions, k)
        return positions[self._draw_perm(n)[:k]]

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """``num_groups * samples_per_group`` positions, group after group.

        Raises:
            RuntimeError: the storage is empty.
            NotImplementedError: the storage has more than one dim.
            ValueError: ``batch_size`` is not a multiple of ``num_groups`` / ``samples_per_group``.
        """
        if len(storage) == 0:
            raise RuntimeError(f"Cannot sample from an empty storage ({type(storage).__name__} is empty).")
        if getattr(storage, "ndim", 1) > 1:
            raise NotImplementedError(f"PromptGroupSampler needs a one-dim storage, got ndim={storage.ndim}.")
        per = self.num_groups if self.num_groups is not None else self.samples_per_group
        assert per is not None
        if batch_size % per:
            what = "num_groups" if self.num_groups is not None else "samples_per_group"
            raise ValueError(f"PromptGroupSampler: batch_size={batch_size} is not divisible by {what}={per}.")
        groups, items = (per, batch_size // per) if self.num_groups is not None else (batch_size // per, per)
        self._build(storage)
        assert self._group_index is not None
        index = torch.cat([self._pick_items(self._group_index[g], items) for g in self._pick_groups(groups)])
        return index, {}

    # ------------------------------------------------------------------ state
    def _empty(self) -> None:
        self._group_index = self._rewards = self._cache_stamp = None
        self._position_recency = None
        self._recency_clock = 0
        self._warned = False

    def state_dict(self) -> dict:
        """The write clock of every position (``"recency"`` strategy), else ``{}``."""
        if self._position_recency is None:
            return {}
        return {"position_recency": self._position_recency.clone(), "recency_clock": self._recency_clock}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` (the group index is rebuilt at the next sample)."""
        recency = state.get("position_recency")
        if recency is not None and (not isinstance(recency, torch.Tensor) or recency.ndim != 1):
            raise ValueError(
                f"PromptGroupSampler.load_state_dict: position_recency must be a 1-D tensor, got {recency!r:.80}."
            )
        self._position_recency = None if recency is None else recency.to("cpu", torch.int64).clone()
        self._recency_clock = int(state.get("recency_clock", 0))
        self._group_index = self._rewards = self._cache_stamp = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(_group_index=None, _rewards=None, _cache_stamp=None)
        return state

    def __repr__(self) -> str:
        return (
            f"PromptGroupSampler(num_groups={self.num_groups}, samples_per_group={self.samples_per_group}, "
            f"group_key={self.group_key!r}, strategy={self.strategy!r})"
        )
