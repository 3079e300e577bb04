"""SerialEnv's fused path: sub-envs that step as one batch (``EnvBase._fuse_serial``).

When the sub-envs' class offers a fused stepper (plain gymnasium envs do), a SerialEnv step
writes every sub-env's outputs straight into the batched buffer's numpy views, and a rollout
writes them straight into the ``[num_workers, T]`` arrays it returns: no TensorDict per sub-env
or per step, no stacking at the end. :func:`fused_rollout` gives the data the generic rollout
gives (same keys, values and random draws; the tests compare both).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from tdict import TensorDict, TensorDictBase, stack

from .._env_keys import spec_shape_error

__all__ = ["fused_rollout"]


def fused_rollout(
    env: Any, fused: Any, buffer_next: TensorDictBase, max_steps: int, policy: Callable | None, break_any: bool
) -> TensorDictBase:
    """``env.rollout(max_steps, policy)`` of a SerialEnv whose sub-envs step through ``fused``.

    ``buffer_next``: the env's buffer of ``"next"`` entries (shapes and dtypes of the outputs).
    ``policy=None``: uniform random actions from the action spec, drawn (and converted) for every
    step at once. Done sub-envs are reset in place (``break_any=False``) or the rollout stops at
    the first done. The outputs are written time-major (each step fills contiguous rows) and
    transposed once at the end.
    """
    keys = env._keys()
    td = env.reset()
    device, batch = td.device, td.batch_size
    obs_key = fused.reset_keys[0]
    first_obs = td.get(obs_key)
    obs_store = torch.empty((max_steps, *first_obs.shape), dtype=first_obs.dtype, device=first_obs.device)
    obs_store[0] = first_obs
    root_obs = obs_store.numpy()
    # the root's done flags: the reset's (all False), and False again after every step, since every
    # sub-env that ended is reset before the next one (the generic rollout's maybe_reset)
    flags = {key: td.get(key) for key in td.keys() if key != obs_key}
    next_store = {
        key: torch.empty((max_steps, *buffer_next.get(key).shape), dtype=buffer_next.get(key).dtype)
        for key in fused.step_keys
    }
    next_np = {key: value.numpy() for key, value in next_store.items()}
    next_obs = next_np[obs_key]
    # a reset writes the observation into the next root; its flags go to scratch rows (they stay False)
    reset_out = {key: np.zeros(len(first_obs), dtype=bool) for key in fused.reset_keys[1:]}
    action_key, action_spec = keys.action_specs[0]
    if policy is None:
        drawn = action_spec.rand((max_steps,))
        converted = fused.convert(drawn)  # every step's gymnasium actions, converted once
    else:
        record = _PolicySteps(policy, keys, obs_key, obs_store.unbind(0), flags, batch, device)
    steps = max_steps
    for t in range(max_steps):
        out_t = {key: value[t] for key, value in next_np.items()}
        done = fused.step_converted(converted[t], out_t) if policy is None else fused.step(record.act(t), out_t)
        if t == max_steps - 1:
            break
        ended = np.count_nonzero(done)
        if break_any and ended:
            steps = t + 1
            break
        root_obs[t + 1] = next_obs[t]
        if ended:
            reset_out[obs_key] = root_obs[t + 1]
            fused.reset(np.flatnonzero(done).tolist(), reset_out)

    size = torch.Size([*batch, steps])
    if policy is None:
        out = TensorDict.unchecked({obs_key: _batch_major(obs_store, steps)}, size, device)
        for key, flag in flags.items():
            out.set(key, flag.unsqueeze(1).expand(*batch, steps, *flag.shape[1:]).clone())
        out.set(action_key, _batch_major(drawn, steps))
    else:
        out = record.stacked(size)
    nxt = TensorDict.unchecked({key: _batch_major(value, steps) for key, value in next_store.items()}, size, device)
    out.set("next", nxt)
    return out


class _PolicySteps:
    """The root entries a policy sees and leaves, step by step.

    Each step's root holds the observation (a view of the rollout's store), the done flags and
    the policy's own entries of the step before, all but the action: what the generic rollout's
    time shift gives. What the policy leaves there is recorded and stacked at the end, as the
    generic rollout stacks its steps.
    """

    def __init__(
        self, policy: Callable, keys: Any, obs_key: str, obs_views: tuple, flags: dict, batch: torch.Size, device: Any
    ) -> None:
        self.policy, self.keys, self.obs_key, self.obs_views, self.flags = policy, keys, obs_key, obs_views, flags
        self.batch, self.device = batch, device
        action_key, feature_shape, dtype, _ = keys.action_checks[0]
        self.action_check = (action_key, feature_shape, dtype)
        self.leaves: tuple = ()  # the tensors recorded at every step (observation, flags, the policy's)
        self.records: dict = {}
        self.others: tuple = ()  # the policy's non-tensor entries, recorded as TensorDicts
        self.other_steps: list = []
        self.carried: tuple = ()  # the policy's entries the next step starts with
        self.carry: dict = {}
        self.top_level = 0

    def act(self, t: int) -> torch.Tensor:
        """Runs the policy on step ``t``'s root; records it; returns the action."""
        cur = TensorDict.unchecked(
            {**self.carry, self.obs_key: self.obs_views[t], **self.flags}, self.batch, self.device
        )
        result = self.policy(cur)
        if result is not cur and result is not None:
            cur.update(result)
        if t == 0:
            self._first(cur)
        elif len(cur.keys()) != self.top_level:
            raise KeyError(
                f"rollout: the policy wrote other keys at step {t} than at step 0 ({sorted(map(str, cur.keys()))}); "
                "every step must have the same entries."
            )
        for key in self.leaves:
            self.records[key].append(cur.get(key))
        if self.others:
            self.other_steps.append(cur.select(*self.others))
        if self.carried:
            self.carry = {k: _carried(cur.get(k)) for k in self.carried}
        action_key, feature_shape, dtype = self.action_check
        action = cur.get(action_key)
        if action.shape[1:] != feature_shape or action.dtype != dtype:
            raise spec_shape_error("action", action_key, self.batch + feature_shape, dtype, action)
        return action

    def _first(self, cur: TensorDictBase) -> None:
        self.top_level = len(cur.keys())
        self.leaves = tuple(cur.keys(True, True))  # tensors (non-tensor data is no leaf here)
        self.records = {key: [] for key in self.leaves}
        self.others = tuple(k for k in cur.keys() if getattr(cur.get(k), "_is_non_tensor", False))
        skip = {self.obs_key, *self.flags, *self.keys.action_keys}
        self.carried = tuple(k for k in cur.keys() if k not in skip)

    def stacked(self, size: torch.Size) -> TensorDictBase:
        """The recorded root entries of the first ``size[-1]`` steps, time as dim 1."""
        out = TensorDict.unchecked({}, size, self.device)
        for key in self.leaves:
            out.set(key, torch.stack(self.records[key][: size[-1]], 1))
        if self.others:
            out.update(stack(self.other_steps[: size[-1]], 1))
        return out


def _batch_major(store: torch.Tensor, steps: int) -> torch.Tensor:
    """The first ``steps`` rows of a time-major ``[T, batch, ...]`` store, as ``[batch, steps, ...]``."""
    return store[:steps].transpose(0, 1).contiguous()


def _carried(value: Any) -> Any:
    """A root entry as the time shift carries it: sub-TensorDicts get a structure of their own."""
    return value.copy() if isinstance(value, TensorDictBase) else value
