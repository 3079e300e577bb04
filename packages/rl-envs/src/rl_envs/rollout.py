"""rollout: run an env with a policy for a number of steps and stack the steps along time."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sized
from typing import Any, Callable

import torch
from torch import nn
from tdict import TensorDictBase, lazy_stack, stack
from tdict.nn import TensorDictModule, TensorDictModuleBase

from ._env_keys import any_done

__all__ = ["rollout"]


def _random_policy(env: Any) -> Callable:
    keys = env._keys()
    leaves, env_dims = keys.action_specs, keys.batch_dims
    if env.batch_locked:

        def policy(td: TensorDictBase) -> TensorDictBase:
            for key, leaf in leaves:
                td.set(key, leaf.rand())
            return td

        return policy

    def unlocked_policy(td: TensorDictBase) -> TensorDictBase:
        extra = td.batch_size[: td.batch_dims - env_dims]  # a batch-unlocked env takes any leading batch
        for key, leaf in leaves:
            td.set(key, leaf.rand(extra))
        return td

    return unlocked_policy


def _compatible_policy(env: Any, policy: Any, trust_policy: bool) -> Callable:
    """A callable ``td -> td``: plain modules are wired to the env's observation and action keys."""
    if policy is None:
        return _random_policy(env)
    if trust_policy or isinstance(policy, TensorDictModuleBase) or not isinstance(policy, nn.Module):
        return policy
    obs_keys = env.observation_keys
    params = [
        p.name
        for p in inspect.signature(policy.forward).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    names = {k if type(k) is str else k[-1]: k for k in obs_keys}
    if params and all(p in names for p in params):
        in_keys = [names[p] for p in params]
    elif len(obs_keys) == 1:
        in_keys = list(obs_keys)
    else:
        raise TypeError(
            f"rollout: cannot tell which observations the module {type(policy).__name__} reads: its forward takes "
            f"{params} and the env observes {obs_keys}. Wrap it in a TensorDictModule with explicit in_keys."
        )
    return TensorDictModule(policy, in_keys=in_keys, out_keys=env.action_keys)


def _replay_policy(env: Any, actions: Iterable, max_steps: int) -> Callable:
    """A policy writing the items of ``actions`` in turn under the env's (single) action key."""
    key = env.action_key
    spec = env.full_action_spec[key]
    items = iter(actions)
    taken = 0

    def policy(td: TensorDictBase) -> TensorDictBase:
        nonlocal taken
        try:
            action = next(items)
        except StopIteration:
            raise ValueError(f"rollout: actions ran out after {taken} steps (max_steps={max_steps}).") from None
        taken += 1
        return td.set(key, torch.as_tensor(action, dtype=spec.dtype, device=spec.device))

    return policy


def _resolve_breaks(any_: bool | None, all_: bool | None) -> tuple[bool, bool]:
    if any_ is None:
        any_ = not bool(all_)
    all_ = bool(all_)
    if any_ and all_:
        raise TypeError("rollout: break_when_any_done and break_when_all_done cannot both be True.")
    return any_, all_


def _device_casting_policy(env: Any, policy: Callable) -> Callable:
    """``policy`` run on its own device: the step's data moved there, its output moved back to the env's."""
    params = policy.parameters() if isinstance(policy, torch.nn.Module) else iter(())
    first = next(params, None)
    policy_device, env_device = (None if first is None else first.device), env.device
    if policy_device is None or env_device is None or policy_device == env_device:
        return policy

    def run(td: TensorDictBase) -> TensorDictBase:
        result = policy(td.to(policy_device))
        return td.update(result.to(env_device)) if result is not None else td

    return run


def rollout(
    env: Any,
    max_steps: int,
    policy: Callable | None = None,
    callback: Callable | None = None,
    *,
    auto_reset: bool = True,
    break_when_any_done: bool | None = None,
    break_when_all_done: bool | None = None,
    return_contiguous: bool = True,
    tensordict: TensorDictBase | None = None,
    set_truncated: bool = False,
    out: TensorDictBase | None = None,
    trust_policy: bool = False,
    actions: Iterable | None = None,
    storing_device: Any = None,
    auto_cast_to_device: bool = False,
) -> TensorDictBase:
    """Runs ``env`` for up to ``max_steps`` steps; the steps are stacked along a last dim named ``"time"``.

    Args:
        env: the environment.
        max_steps: the number of steps (fewer if the rollout stops on done).
        policy: ``td -> td`` writing the action; a TensorDictModule, a plain ``nn.Module`` (wired to
            the observation and action keys) or any callable. ``None``: random actions from the spec.
        callback: called as ``callback(env, td)`` after each step.
        auto_reset: reset first (``tensordict`` is passed to ``reset``, e.g. parameters of a stateless
            env). Without it, ``tensordict`` is the first input.
        break_when_any_done: stop at the first done (default unless ``break_when_all_done``).
        break_when_all_done: stop once every sub-env has been done; finished sub-envs repeat their
            last step in the output.
        When neither breaks, done sub-envs are reset in place and the rollout runs ``max_steps`` steps
        (a ``tensordict`` given with ``auto_reset=False`` whose sub-envs are done is reset first).
        return_contiguous: a dense stack (default) or a lazy stack.
        tensordict: the initial TensorDict (see ``auto_reset``).
        set_truncated: mark the last step ``truncated`` (and ``done``); needs a ``truncated`` key.
        out: a TensorDict to stack into.
        trust_policy: use ``policy`` as given, without wrapping a plain module.
        actions: pre-computed actions to replay instead of a ``policy`` (exclusive with it): each item
            is written under the env's action key (cast to the spec's dtype and device) before its
            step. A sized iterable caps ``max_steps`` to its length; an iterator that runs out before
            ``max_steps`` raises ``ValueError``.
        storing_device: the device of the returned rollout (default: where the env's steps are).
        auto_cast_to_device: move each step's TensorDict to the policy's device (that of its first
            parameter, for an ``nn.Module`` policy) before calling it, and its output back to the
            env's device (TorchRL's option; default ``False``: the policy gets the env's data as is).

    Examples:
        >>> from rl_envs import PendulumEnv
        >>> env = PendulumEnv(batch_size=[4])
        >>> env.rollout(10).batch_size
        torch.Size([4, 10])
    """
    if isinstance(max_steps, bool) or not hasattr(max_steps, "__index__") or max_steps < 1:
        raise ValueError(f"rollout: max_steps must be an int >= 1, got {max_steps!r}.")
    break_any, break_all = _resolve_breaks(break_when_any_done, break_when_all_done)
    random_actions = policy is None and actions is None
    if actions is not None:
        if policy is not None:
            raise ValueError("rollout: got both a policy and actions; pass one of them.")
        if isinstance(actions, Sized):
            max_steps = min(max_steps, len(actions))
        policy = _replay_policy(env, actions, max_steps)
    policy = _compatible_policy(env, policy, trust_policy)
    if auto_cast_to_device:
        policy = _device_casting_policy(env, policy)
    # a SerialEnv of sub-envs stepped as one (batched/_fused.py); looked up on the class, so that a
    # TransformedEnv (which forwards unknown attributes to its base env) never takes it
    fused = getattr(type(env), "_rollout_fused", None)
    result = None
    if (
        fused is not None
        and auto_reset
        and tensordict is None
        and callback is None
        and not break_all
        and out is None
        and return_contiguous
        and (random_actions or actions is not None or _writes_root_only(policy))
    ):
        # no policy: the fused path draws every step's random actions at once
        result = fused(env, max_steps, None if random_actions else policy, break_any)
    if result is None:
        result = _generic_rollout(env, max_steps, policy, callback, auto_reset, break_any, break_all, tensordict)
        time_dim = len(env.batch_size) if tensordict is None else max(len(env.batch_size), tensordict.batch_dims)
        result = stack(result, time_dim, out=out) if return_contiguous else lazy_stack(result, time_dim)
    else:
        time_dim = len(env.batch_size)
    if storing_device is not None:
        result = result.to(storing_device)
    result.names = [None] * time_dim + ["time"]
    if set_truncated:
        _mark_truncated(result, env._keys())
    return result


def _writes_root_only(policy: Any) -> bool:
    """A TensorDict module whose outputs are all root entries (none under ``"next"``)."""
    if not isinstance(policy, TensorDictModuleBase):
        return False
    out_keys = getattr(policy, "out_keys", None)
    return out_keys is not None and all((k if type(k) is str else k[0]) != "next" for k in out_keys)


def _generic_rollout(
    env: Any,
    max_steps: int,
    policy: Callable,
    callback: Callable | None,
    auto_reset: bool,
    break_any: bool,
    break_all: bool,
    tensordict: TensorDictBase | None,
) -> list:
    """The steps of a rollout, one TensorDict each (see :func:`rollout`)."""
    if auto_reset:
        td = env.reset(tensordict)
    elif tensordict is None:
        raise RuntimeError("rollout: a tensordict is needed when auto_reset=False.")
    else:
        td = tensordict
    keys = env._keys()
    stop_keys, shift, step = keys.stop_keys, keys.shift, env.step
    steps: list = []
    append = steps.append
    if break_any:
        for i in range(max_steps):
            result = policy(td)
            if result is not td and result is not None:
                td.update(result)
            td = step(td)
            append(td)
            if i == max_steps - 1 or any_done(td.get("next"), stop_keys):
                break
            td = shift(td)
            if callback is not None:
                callback(env, td)
    elif break_all:
        finished = None
        for i in range(max_steps):
            result = policy(td)
            if result is not td and result is not None:
                td.update(result)
            td = step(td)
            record = td
            if finished is not None and bool(finished.any()):
                record = torch.where(finished, steps[-1], td)
            append(record)
            flag = _done_flag(td.get("next"), stop_keys, td.batch_size)
            finished = flag if finished is None else finished | flag
            if i == max_steps - 1 or bool(finished.all()):
                break
            td = shift(td)
            if callback is not None:
                callback(env, td)
    else:
        if not auto_reset and all(td.get(k, None) is not None for k in stop_keys):
            td = env.maybe_reset(td)  # a chained rollout may start where the last one ended: done
        step_and_reset = env.step_and_maybe_reset
        for i in range(max_steps):
            result = policy(td)
            if result is not td and result is not None:
                td.update(result)
            if i == max_steps - 1:
                append(step(td))
                break
            stepped, td = step_and_reset(td)
            append(stepped)
            if callback is not None:
                callback(env, stepped)
    return steps


def _done_flag(next_td: TensorDictBase, stop_keys: list, batch_size: torch.Size) -> torch.Tensor:
    flag = None
    n = len(batch_size)
    for key in stop_keys:
        value = next_td.get(key)
        if value.ndim > n:  # sub-entries (agents): the sub-env is done when any is
            value = value.reshape(*batch_size, -1).any(-1)
        flag = value if flag is None else flag | value
    assert flag is not None  # every env has a done key (EnvBase fills the default done spec)
    return flag


def _mark_truncated(result: TensorDictBase, keys: Any) -> None:
    truncated = [k for k in keys.done_keys if (k if type(k) is str else k[-1]) == "truncated"]
    if not truncated:
        raise RuntimeError(
            f"rollout: set_truncated was set to True but the env declares no 'truncated' key (done keys: "
            f"{keys.done_keys})."
        )
    for key in truncated:
        root = () if type(key) is str else tuple(key[:-1])
        for name in ("truncated", "done"):
            full = ("next", *root, name)
            value = result.get(full, None)
            if value is not None:
                value[..., -1] = True
