"""StepCounter: counts the steps of each episode and truncates it after ``max_steps``."""

from __future__ import annotations

from typing import Any

import torch
from tdict import TensorDictBase
from tdict import NestedKey
from tdict.specs import Bounded, Categorical, Composite, Unbounded

from .base import Transform

__all__ = ["StepCounter"]


class StepCounter(Transform):
    """Writes ``step_count`` (steps since the last reset) and sets ``truncated`` once it reaches ``max_steps``.

    ``step_count`` is an int64 per-step scalar shaped like the env's ``done`` flag (the batch shape, no
    trailing dim, for our envs; ``[*B, 1]`` for an env whose flags keep a trailing dim). On a partial
    reset the sub-envs not selected by ``"_reset"`` keep their count. At the limit the
    ``done`` and ``truncated`` flags of nested groups (a multi-agent env's ``("agents", "done")``)
    are set too, so that per-agent value estimators see the episode end.

    Args:
        max_steps: truncate episodes at this many steps (``None``: only count).
        truncated_key: the done key set at truncation (added to the done spec if missing).
        step_count_key: where the count is written.
        update_done: also set ``done`` when truncating (default ``True``).

    Examples:
        >>> from rl_envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=3))
        >>> env.rollout(10)["next", "step_count"].tolist()
        [1, 2, 3]
    """

    def __init__(
        self,
        max_steps: int | None = None,
        truncated_key: NestedKey = "truncated",
        step_count_key: NestedKey = "step_count",
        update_done: bool = True,
    ) -> None:
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"StepCounter: max_steps must be >= 1 or None, got {max_steps}.")
        super().__init__(in_keys=[], out_keys=[step_count_key])
        self.max_steps = max_steps
        self.truncated_key = truncated_key
        self.step_count_key = step_count_key
        self.update_done = update_done

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        # the count takes the shape of the previous count, else of the done flag (the batch shape for our
        # envs, [*B, 1] for envs that keep a trailing dim); sub-envs not selected by "_reset" keep theirs
        previous = tensordict.get(self.step_count_key, None) if tensordict is not None else None
        if previous is not None:
            shape = previous.shape
        else:
            done = tensordict_reset.get("done", None)
            shape = done.shape if done is not None else tensordict_reset.batch_size
        count = torch.zeros(shape, dtype=torch.int64, device=tensordict_reset.device)
        mask = tensordict.get("_reset", None) if tensordict is not None and previous is not None else None
        if mask is not None and previous is not None:
            if mask.shape != count.shape:  # [*B] against [*B, 1], either way round
                mask = mask.reshape(*mask.shape, *([1] * (count.ndim - mask.ndim))) if mask.ndim < count.ndim else mask
                mask = mask.reshape(count.shape) if mask.numel() == count.numel() else mask
            count = torch.where(mask.to(count.device), count, previous.to(count))
        tensordict_reset.set(self.step_count_key, count)
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        count = tensordict.get(self.step_count_key, None)
        count = count + 1 if count is not None else torch.ones(next_tensordict.batch_size, dtype=torch.int64)
        next_tensordict.set(self.step_count_key, count)
        if self.max_steps is not None:
            truncated = count >= self.max_steps
            done = next_tensordict.get("done")
            if truncated.shape != done.shape:  # an env whose done flags keep a trailing dim ([*B, 1])
                truncated = truncated.reshape(*truncated.shape, *([1] * (done.ndim - truncated.ndim))).expand(
                    done.shape
                )
            previous = next_tensordict.get(self.truncated_key, None)
            if previous is not None:
                truncated = truncated | previous
            next_tensordict.set(self.truncated_key, truncated)
            if self.update_done:
                next_tensordict.set("done", done | truncated)
            for key in self._group_done_keys():
                # the done flags of nested groups (("agents", "done"), ...) end their episodes too
                flags = next_tensordict.get(key, None)
                if flags is not None:
                    next_tensordict.set(
                        key, flags | truncated.reshape(*truncated.shape, *([1] * (flags.ndim - truncated.ndim)))
                    )
        return next_tensordict

    def _group_done_keys(self) -> list:
        """The ``done`` and ``truncated`` keys of nested groups in the env's done spec (cached per parent)."""
        parent = self.parent
        cached = self.__dict__.get("_group_done_cache")
        if cached is not None and cached[0] is parent:
            return cached[1]
        names = {"done", self.truncated_key if isinstance(self.truncated_key, str) else self.truncated_key[-1]}
        keys = []
        if parent is not None:
            keys = [
                k
                for k in parent.full_done_spec.keys(True, True)
                if isinstance(k, tuple) and len(k) > 1 and k[-1] in names
            ]
            if not self.update_done:
                keys = [k for k in keys if k[-1] != "done"]
        self.__dict__["_group_done_cache"] = (parent, keys)
        return keys

    @property
    def all_done_keys(self) -> list:
        """The ``done`` entries set at truncation (with ``update_done``): the root one and those of nested groups."""
        return (["done"] if self.update_done else []) + [k for k in self._group_done_keys() if k[-1] == "done"]

    @property
    def all_truncated_keys(self) -> list:
        """The truncated entries set at the limit: ``truncated_key`` and those of nested groups."""
        return [self.truncated_key] + [
            k for k in self._group_done_keys() if k[-1] != "done" and k != self.truncated_key
        ]

    @property
    def step_count_keys(self) -> list:
        """The step-count entries written (TorchRL's list form): the one ``step_count_key``."""
        return [self.step_count_key]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError(
            "StepCounter cannot be called independently: it counts the steps of an env (use it inside a "
            "TransformedEnv)."
        )

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        done_spec = output_spec["full_done_spec"]
        # the count and the truncated flag are shaped like the env's done flag
        shape = done_spec["done"].shape if "done" in done_spec.keys() else done_spec.shape
        obs = output_spec["full_observation_spec"]
        obs[self.step_count_key] = self._count_spec(shape, obs.device)
        output_spec["full_observation_spec"] = obs
        if self.max_steps is not None and self.truncated_key not in done_spec.keys(True):
            done_spec[self.truncated_key] = Categorical(2, shape=shape, dtype=torch.bool, device=done_spec.device)
            output_spec["full_done_spec"] = done_spec
        return output_spec

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        observation_spec[self.step_count_key] = self._count_spec(observation_spec.shape, observation_spec.device)
        return observation_spec

    def transform_done_spec(self, done_spec: Composite) -> Composite:
        if self.max_steps is not None and self.truncated_key not in done_spec.keys(True):
            shape = done_spec["done"].shape if "done" in done_spec.keys() else done_spec.shape
            done_spec[self.truncated_key] = Categorical(2, shape=shape, dtype=torch.bool, device=done_spec.device)
        return done_spec

    def _count_spec(self, shape: torch.Size, device: Any) -> Unbounded | Bounded:
        if self.max_steps is None:
            return Unbounded(shape=shape, dtype=torch.int64, device=device)
        return Bounded(0, self.max_steps, shape=shape, dtype=torch.int64, device=device)

    def __repr__(self) -> str:
        return f"StepCounter(max_steps={self.max_steps}, step_count_key={self.step_count_key!r})"
