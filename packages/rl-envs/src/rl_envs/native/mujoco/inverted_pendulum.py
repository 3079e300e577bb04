"""InvertedPendulumEnv: Gymnasium's InvertedPendulum-v5, batched and native."""

from __future__ import annotations

import numpy as np

from .env import MujocoEnv, State

__all__ = ["InvertedPendulumEnv"]


class InvertedPendulumEnv(MujocoEnv):
    """A pole on a cart to keep upright, as Gymnasium's ``InvertedPendulum-v5``.

    Observation (4): ``qpos`` and ``qvel``. Reward 1 per step while the pole stays within 0.2 rad of
    upright; the step where it leaves (or the state stops being finite) gives 0 and terminates.
    See :class:`MujocoEnv` for the shared arguments.

    Examples:
        >>> env = InvertedPendulumEnv(num_envs=3, seed=0)
        >>> rollout = env.rollout(4)
        >>> rollout["observation"].shape, rollout["next", "reward"].tolist()[0]
        (torch.Size([3, 4, 4]), [1.0, 1.0, 1.0, 1.0])
    """

    default_xml = ("gymnasium", "envs/mujoco/assets/inverted_pendulum.xml")
    default_frame_skip = 2
    default_reset_noise_scale = 1e-2

    def _observation(self, state: State) -> np.ndarray:
        return np.concatenate((state["qpos"], state["qvel"]), axis=1)

    def _reward(self, before: State, after: State, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        observation = self._observation(after)
        terminated = ~np.isfinite(observation).all(axis=1) | (np.abs(observation[:, 1]) > 0.2)
        return (~terminated).astype(np.float64), terminated
