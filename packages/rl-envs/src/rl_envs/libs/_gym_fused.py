"""GymFusedSteps: single gymnasium envs of one layout stepped as one batch (what SerialEnv runs).

A SerialEnv of ``GymEnv("CartPole-v1")`` sub-envs would otherwise build a TensorDict per sub-env
and copy it into the batched buffer, about twenty microseconds each against a few for the
gymnasium step itself. Here one loop calls each env's ``step`` with the action of its row and
writes the observation, reward and flags straight into the caller's numpy arrays, as
gymnasium's ``SyncVectorEnv`` does. The values are those of ``GymWrapper._step`` (same action
conversion, float32 rewards, ``done = terminated | truncated``), so a SerialEnv gives the same
data either way.

Only plain single-env wrappers fuse: an array observation (``Box``), a non-Dict action, one frame
per step, no info readers, no device move, no action validation, no subclass that changes
``_step`` or ``_reset``. Anything else steps through the generic runners.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ._gym_spaces import _kind, make_codec

__all__ = ["GymFusedSteps"]


def _fusable(env: Any, base: type) -> bool:
    cls = type(env)
    return (
        not env._is_vector
        and env.frame_skip == 1
        and not env._info_dict_reader
        and not env._to_device
        and not getattr(env, "validate_actions", False)
        and cls._step is base._step
        and cls._reset is base._reset
        and "_step" not in env.__dict__
        and _kind(env._env.observation_space) == "Box"
        and _kind(env._env.action_space) not in ("Dict", "Tuple")
    )


class GymFusedSteps:
    """Steps ``envs`` (``GymWrapper`` s of one layout) in turn, writing into preallocated arrays.

    Build it with :meth:`build`, which returns ``None`` unless every env can fuse (see the
    module docs). ``step_keys`` / ``reset_keys`` are the entries :meth:`step` and :meth:`reset`
    write.

    Examples:
        >>> import numpy as np, torch
        >>> from rl_envs import GymEnv
        >>> envs = [GymEnv("CartPole-v1", categorical_action_encoding=True) for _ in range(2)]
        >>> fused = GymFusedSteps.build(envs)
        >>> out = {key: np.zeros((2, 4) if key == "observation" else 2,
        ...        dtype=np.float32 if key in ("observation", "reward") else bool) for key in fused.step_keys}
        >>> fused.reset([0, 1], out)
        >>> done = fused.step(torch.tensor([0, 1]), out)
        >>> out["reward"].tolist(), done.tolist()
        ([1.0, 1.0], [False, False])
    """

    step_keys = ("observation", "reward", "done", "terminated", "truncated")
    reset_keys = ("observation", "done", "terminated", "truncated")

    def __init__(self, envs: Sequence[Any]) -> None:
        first = envs[0]
        self.envs = list(envs)
        self.obs_key = "pixels" if first.from_pixels else "observation"
        self.step_keys = (self.obs_key, *GymFusedSteps.step_keys[1:])
        self.reset_keys = (self.obs_key, *GymFusedSteps.reset_keys[1:])
        space = first._env.action_space
        # the batched converter: the values a single env's converter gives, one row per env
        self._actions = make_codec(
            space, categorical_action_encoding=first.categorical_action_encoding, batch_size=torch.Size([len(envs)])
        ).write
        self._as_ints = _kind(space) == "Discrete"  # Python ints, as the single-env converter passes
        self._steps = [env._env.step for env in self.envs]
        self._obs_shape = tuple(first._env.observation_space.shape)
        self._checked = False

    @classmethod
    def build(cls, envs: Sequence[Any]) -> GymFusedSteps | None:
        """A fused stepper of ``envs``, or ``None`` when one of them cannot fuse."""
        from .gymnasium import GymWrapper

        if not envs or not all(isinstance(env, GymWrapper) and _fusable(env, GymWrapper) for env in envs):
            return None
        first = envs[0]
        if any(
            env.from_pixels != first.from_pixels
            or env.categorical_action_encoding != first.categorical_action_encoding
            or env._env.action_space != first._env.action_space
            for env in envs
        ):
            return None
        return cls(envs)

    def convert(self, action: torch.Tensor) -> Any:
        """The gymnasium actions of a ``[..., num_envs, *action]`` tensor, indexable as ``[..., i]``
        (what env ``i``'s ``step`` takes: a Python int for a discrete space, else an array)."""
        actions = self._actions(action)
        return actions.tolist() if self._as_ints else actions

    def step(self, action: torch.Tensor, out: dict[str, np.ndarray]) -> np.ndarray:
        """Steps env ``i`` with ``action[i]``; writes ``out[key][i]`` for ``step_keys``; returns ``out["done"]``."""
        return self.step_converted(self.convert(action), out)

    def step_converted(self, actions: Any, out: dict[str, np.ndarray]) -> np.ndarray:
        """:meth:`step` with actions already converted (a row of :meth:`convert`'s result)."""
        obs, reward = out[self.obs_key], out["reward"]
        terminated, truncated, done = out["terminated"], out["truncated"], out["done"]
        if not self._checked:
            self._first_step(actions, obs, reward, terminated, truncated)
        else:
            i = 0
            for step, a in zip(self._steps, actions):
                # numpy casts as GymWrapper._step does: float32 rewards, truthiness for the flags
                obs[i], reward[i], terminated[i], truncated[i], _ = step(a)
                i += 1
        np.logical_or(terminated, truncated, out=done)
        return done

    def _first_step(
        self, actions: Any, obs: np.ndarray, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> None:
        if obs.shape[1:] != self._obs_shape:
            raise ValueError(
                f"GymFusedSteps: the observation array has rows of shape {list(obs.shape[1:])}, the envs observe "
                f"{list(self._obs_shape)}."
            )
        for i, step in enumerate(self._steps):
            o, r, te, tr, _ = step(actions[i])
            self._check_obs(i, o, "step")
            obs[i], reward[i], terminated[i], truncated[i] = o, r, te, tr
        self._checked = True

    def reset(self, rows: Sequence[int], out: dict[str, np.ndarray]) -> None:
        """Resets the envs ``rows`` (each with its pending seed, as ``GymWrapper.reset``); writes
        their observation and clears their flags in ``out`` (``reset_keys``)."""
        obs = out[self.obs_key]
        flags = [out[key] for key in self.reset_keys[1:]]
        for i in rows:
            o = self.envs[i]._reset_raw()
            self._check_obs(i, o, "reset")
            obs[i] = o
            for flag in flags:
                flag[i] = False

    def _check_obs(self, i: int, obs: Any, what: str) -> None:
        if np.shape(obs) != self._obs_shape:
            raise ValueError(
                f"{type(self.envs[i]).__name__}: the gymnasium env's {what} returned an observation of shape "
                f"{list(np.shape(obs))}, its observation space says {list(self._obs_shape)}."
            )
