"""Evaluation over whole episodes: the returns of a policy, counting only the episodes that ended.

:func:`episode_returns` is the functional core (a ``[*B, T]`` reward and done mask in, one return
per complete episode out); :func:`evaluate_episodes` runs a policy in an env (duck-typed: anything
with ``rollout(max_steps, policy, auto_reset=..., break_when_any_done=...)`` as ``rl_envs.EnvBase``)
and applies it. Sub-envs whose episodes end at different steps are handled: a sub-env that is done is
reset in place by the rollout and starts its next episode; the steps of an episode still running
when the rollout stops are not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tdict import TensorDictBase, unravel_key
from tdict.nn import InteractionType, set_interaction_type
from tdict.validation import check_positive_int
from torch import nn

__all__ = ["episode_returns", "evaluate_episodes", "eval_rollout"]

_DONE_KEYS = (("next", "done"), ("next", "terminated"), ("next", "truncated"))


def episode_returns(reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
    """The return of every episode that ends inside a rollout (time is the last batch dim).

    Args:
        reward: ``[*B, T]`` (or ``[*B, T, *F]`` for a reward with feature dims).
        done: ``[*B, T]`` booleans, True on the last step of an episode (``terminated | truncated``).

    Returns:
        ``[n_episodes, *F]``: the summed reward of each complete episode, ordered by sub-env (the
        flattened ``B``), then by time. Steps after a sub-env's last done belong to an episode that
        did not end and are left out; ``n_episodes`` is 0 when no episode ended.

    Raises:
        ValueError: naming ``reward`` or ``done`` when their shapes do not line up.

    Examples:
        >>> import torch
        >>> from rl_objectives.trainers import episode_returns
        >>> reward = torch.tensor([[1., 1., 1., 1., 1.], [1., 2., 3., 4., 5.]])
        >>> done = torch.tensor([[0, 1, 0, 1, 0], [0, 0, 1, 0, 0]], dtype=torch.bool)
        >>> episode_returns(reward, done)  # env 0: 2 episodes of 2 steps; env 1: 1 episode of 3 steps
        tensor([2., 2., 6.])
    """
    if not isinstance(reward, torch.Tensor) or not isinstance(done, torch.Tensor):
        raise TypeError(
            f"episode_returns: reward and done must be tensors, got {type(reward).__name__} and {type(done).__name__}."
        )
    if done.ndim < 1:
        raise ValueError("episode_returns: done must have a time dim ([*B, T]), got a 0-dim tensor.")
    if tuple(reward.shape[: done.ndim]) != tuple(done.shape):
        raise ValueError(
            f"episode_returns: reward {tuple(reward.shape)} must start with done's shape {tuple(done.shape)} ([*B, T] for both)."
        )
    features = reward.shape[done.ndim :]
    steps = done.shape[-1]
    ends = done.reshape(-1, steps).to(torch.bool)
    values = reward.reshape(ends.shape[0], steps, *features)
    if not values.is_floating_point():
        values = values.float()
    ends_long = ends.long()
    episode = ends_long.cumsum(-1) - ends_long  # index of the episode each step belongs to, per sub-env
    count = ends_long.sum(-1, keepdim=True)
    complete = episode < count  # the steps of the running episode after the last done are left out
    first = count.cumsum(0) - count  # index of each sub-env's first episode in the output
    index = (first + episode)[complete]
    out = values.new_zeros((int(count.sum()), *features))
    return out.index_add_(0, index, values[complete])


def eval_rollout(
    env: Any, policy: Any, max_steps: int, exploration_type: Any = InteractionType.DETERMINISTIC
) -> TensorDictBase:
    """``env.rollout(max_steps, policy, auto_reset=True, break_when_any_done=False)`` in evaluation mode.

    The rollout runs under ``torch.no_grad()`` and ``set_interaction_type(exploration_type)``, with the
    policy (when it is an ``nn.Module``) and the env (when it has ``eval``/``train``) in eval mode;
    their modes are restored afterwards, also when the rollout raises.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.trainers import eval_rollout
        >>> class Env:
        ...     def rollout(self, max_steps, policy=None, **kwargs):
        ...         return TensorDict({"next": {"reward": torch.ones(max_steps)}}, batch_size=[max_steps])
        >>> eval_rollout(Env(), lambda td: td, 3).batch_size
        torch.Size([3])
    """
    policy_was_training = policy.training if isinstance(policy, nn.Module) else None
    env_was_training = getattr(env, "training", None)
    if policy_was_training is not None:
        policy.eval()
    if callable(getattr(env, "eval", None)):
        env.eval()
    try:
        with torch.no_grad(), set_interaction_type(exploration_type):
            return env.rollout(max_steps=max_steps, policy=policy, auto_reset=True, break_when_any_done=False)
    finally:
        if policy_was_training is not None:
            policy.train(policy_was_training)
        if callable(getattr(env, "train", None)):
            env.train(True if env_was_training is None else env_was_training)


def _done_mask(record: TensorDictBase, done_keys: Sequence[Any] | None, owner: str) -> torch.Tensor:
    present = record.keys(include_nested=True)
    if done_keys is None:
        keys = [k for k in _DONE_KEYS if k in present]
        if not keys:
            raise KeyError(
                f"{owner}: the rollout has none of the done keys {list(_DONE_KEYS)} needed to find where episodes end "
                f"(pass done_keys=); keys: {list(present)}."
            )
    else:
        keys = [unravel_key(k) for k in done_keys]
        missing = [k for k in keys if k not in present]
        if missing:
            raise KeyError(f"{owner}: done_keys {missing} are not in the rollout; keys: {list(present)}.")
    mask = None
    for key in keys:
        value = record.get(key).to(torch.bool)
        if value.ndim > record.batch_dims:  # a trailing singleton (TorchRL layout) or per-agent flags
            value = value.reshape(*record.batch_size, -1).any(-1)
        mask = value if mask is None else mask | value
    if mask is None:
        raise ValueError(f"{owner}: done_keys is empty; name at least one done key.")
    return mask


def evaluate_episodes(
    env: Any,
    policy: Any,
    *,
    max_steps: int,
    exploration_type: Any = InteractionType.DETERMINISTIC,
    reward_key: Any = ("next", "reward"),
    done_keys: Sequence[Any] | None = None,
) -> torch.Tensor:
    """Per-episode returns of ``policy`` in ``env``, over the episodes that end within ``max_steps`` steps.

    Runs :func:`eval_rollout` (deterministic actions by default, no gradients, eval mode) and
    returns :func:`episode_returns` of its reward and done mask. With a batch of N sub-envs every
    sub-env runs ``max_steps`` steps and is reset in place when done, so it may contribute several
    episodes; an episode still running at the end is not counted. For a whole episode of each
    sub-env, give ``max_steps`` at least the episode length (e.g. the env's time limit).

    Args:
        env: anything with ``rollout(max_steps=, policy=, auto_reset=, break_when_any_done=)``
            returning a ``[*B, T]`` TensorDict (an ``rl_envs`` env, batched or not).
        policy: ``td -> td`` writing the action.
        max_steps: steps per sub-env.
        exploration_type: the interaction type (an ``InteractionType`` or its name).
        reward_key: where the reward is.
        done_keys: the flags that end an episode (OR-ed); default: those of ``("next", "done")``,
            ``("next", "terminated")`` and ``("next", "truncated")`` that the rollout holds.

    Returns:
        A float tensor ``[n_episodes]`` (``[n_episodes, *F]`` for a reward with feature dims),
        ordered by sub-env, then by time; empty when no episode ended.

    Examples:
        >>> import torch
        >>> from rl_envs import PendulumEnv, StepCounter, TransformedEnv
        >>> from rl_objectives.trainers import evaluate_episodes
        >>> env = TransformedEnv(PendulumEnv(batch_size=[4]), StepCounter(max_steps=50))
        >>> returns = evaluate_episodes(env, lambda td: td.set("action", torch.zeros(4, 1)), max_steps=120)
        >>> returns.shape  # 2 whole episodes of 50 steps per sub-env; the third is cut off
        torch.Size([8])
    """
    if not callable(getattr(env, "rollout", None)):
        raise TypeError(
            f"evaluate_episodes: env must have a rollout() method (an rl_envs env), got {type(env).__name__}."
        )
    if not callable(policy):
        raise TypeError(f"evaluate_episodes: policy must be callable (td -> td), got {type(policy).__name__}.")
    check_positive_int("evaluate_episodes", "max_steps", max_steps)
    try:
        exploration_type = InteractionType(exploration_type)
    except ValueError:
        raise ValueError(
            f"evaluate_episodes: exploration_type must name an InteractionType {[t.value for t in InteractionType]}, got {exploration_type!r}."
        ) from None
    reward_key = unravel_key(reward_key)
    record = eval_rollout(env, policy, max_steps, exploration_type)
    if reward_key not in record.keys(include_nested=True):
        raise KeyError(
            f"evaluate_episodes: no reward at {reward_key!r} in the rollout; keys: {list(record.keys(include_nested=True))}."
        )
    done = _done_mask(record, done_keys, "evaluate_episodes")
    return episode_returns(record.get(reward_key), done)
