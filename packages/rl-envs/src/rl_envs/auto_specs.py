"""Specs read off the data an env produces: :func:`auto_specs` (``EnvBase.auto_specs_``, TorchRL's name).

For an env written without specs, or whose specs are wrong: one reset and one step with a policy,
and the entries they hold become the specs (an ``Unbounded`` per tensor, with its shape, dtype and
device; a ``NonTensor`` per non-tensor entry), sorted by their keys into action, observation,
reward and done specs. What the reset writes that the step does not write again (a state the env
reads back) becomes the state spec. Each step output entry must be named in one of the groups.

The env's own ``_reset``/``_step`` run, not ``reset``/``step``: those check the data against the
very specs being replaced.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from tdict import TensorDictBase, is_non_tensor
from tdict.specs import Categorical, Composite, NonTensor, Unbounded

__all__ = ["auto_specs"]

_DONE_KEYS = ("done", "terminated", "truncated")


def _keys(value: Any, what: str) -> list:
    keys = [value] if isinstance(value, (str, tuple)) else list(value) if isinstance(value, list) else None
    if not keys or not all(isinstance(k, str) or (isinstance(k, tuple) and k) for k in keys):
        raise TypeError(f"auto_specs_: {what} must be a key or a list of keys, got {value!r}.")
    return [k[0] if isinstance(k, tuple) and len(k) == 1 else k for k in keys]


def _spec_of(value: Any, flag: bool = False) -> Any:
    if is_non_tensor(value):
        return NonTensor(shape=value.batch_size, device=value.device)
    if flag and value.dtype == torch.bool:  # a done flag: two values, as the envs' own done specs
        return Categorical(2, shape=value.shape, dtype=torch.bool, device=value.device)
    return Unbounded(shape=value.shape, dtype=value.dtype, device=value.device)


def _group(data: TensorDictBase, keys: list, shape: Any, device: Any, flags: bool = False) -> Composite:
    """A Composite of the specs of ``data``'s entries at ``keys`` (those present)."""
    group = Composite(shape=shape, device=device)
    for key in keys:
        value = data.get(key, None)
        if value is not None:
            group[key] = _spec_of(value, flags)
    return group


def _leaf_keys(data: TensorDictBase) -> set:
    return {k if isinstance(k, str) else tuple(k) for k in data.keys(True, True, is_leaf=_is_leaf)}


def _is_leaf(cls: type) -> bool:
    return not issubclass(cls, TensorDictBase) or getattr(cls, "_is_non_tensor", False)


def auto_specs(
    env: Any,
    policy: Callable[[TensorDictBase], TensorDictBase],
    *,
    tensordict: TensorDictBase | None = None,
    action_key: Any = "action",
    done_key: Any = None,
    observation_key: Any = "observation",
    reward_key: Any = "reward",
) -> Any:
    """Sets ``env``'s specs from one reset and one step with ``policy``; returns ``env``.

    Args:
        env: the env (an :class:`~rl_envs.EnvBase`).
        policy: writes the action(s) into the TensorDict it gets (or returns them in a new one).

    Keyword Args:
        tensordict: the first step's root data (default: ``env``'s own reset).
        action_key, observation_key, reward_key: a key or a list of keys of each group.
        done_key: the done keys (default: those of ``"done"``, ``"terminated"``, ``"truncated"``
            the step writes).

    Raises:
        RuntimeError: an entry of the step's output is in none of the groups. Nothing is set
            when anything raises.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_envs import PendulumEnv
        >>> env = PendulumEnv()
        >>> env.auto_specs_(lambda td: td.set("action", torch.zeros(1)), observation_key=["observation", "th", "thdot"])
        PendulumEnv(...)
        >>> env.observation_spec["observation"].shape, env.action_spec.shape, env.reward_spec.shape
        (torch.Size([3]), torch.Size([1]), torch.Size([]))
    """
    actions = _keys(action_key, "action_key")
    observations = _keys(observation_key, "observation_key")
    rewards = _keys(reward_key, "reward_key")
    root = (env._reset(None) if tensordict is None else tensordict).copy()
    first = _leaf_keys(root)
    acted = policy(root)
    if acted is not None and acted is not root:
        root.update(acted)
    out = env._step(root.copy())
    produced = _leaf_keys(out)
    dones = [k for k in _DONE_KEYS if k in produced] if done_key is None else _keys(done_key, "done_key")
    named = set(actions) | set(observations) | set(rewards) | set(dones)
    stray = sorted(map(str, produced - named))
    if stray:
        raise RuntimeError(
            f"auto_specs_: the step wrote {stray}, which are in none of action_key, observation_key, reward_key "
            "and done_key; name every entry the env writes."
        )
    shape, device = env.batch_size, env.device
    specs = {  # all built (and checked) before the first is set
        "full_action_spec": _group(root, actions, shape, device),
        "full_observation_spec": _group(out, observations, shape, device),
        "full_reward_spec": _group(out, rewards, shape, device),
        "full_done_spec": _group(out, dones, shape, device, flags=True),
        "full_state_spec": _group(root, sorted(first - produced - set(actions), key=str), shape, device),
    }
    if specs["full_done_spec"].is_empty():
        del specs["full_done_spec"]  # the env keeps its (default) done flags
    for name, spec in specs.items():
        setattr(env, name, spec)
    return env
