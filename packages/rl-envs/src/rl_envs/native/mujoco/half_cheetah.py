"""HalfCheetahEnv: Gymnasium's HalfCheetah-v5, batched and native."""

from __future__ import annotations

import numpy as np

from .env import MujocoEnv, State

__all__ = ["HalfCheetahEnv"]


class HalfCheetahEnv(MujocoEnv):
    """A planar cheetah rewarded for running forward (``+x``), as Gymnasium's ``HalfCheetah-v5``.

    Observation (17): ``qpos[1:]`` and ``qvel``. Reward: ``forward_reward_weight * x velocity -
    ctrl_cost_weight * |action|²``. It never terminates; episodes are truncated at 1,000 steps.
    Initial state: ``qpos0 + U(±0.1)``, ``qvel ~ 0.1 N(0, 1)``. See :class:`MujocoEnv` for the
    shared arguments.

    Examples:
        >>> env = HalfCheetahEnv(num_envs=4, seed=0)
        >>> rollout = env.rollout(10)
        >>> rollout["observation"].shape, rollout["next", "reward"].shape
        (torch.Size([4, 10, 17]), torch.Size([4, 10]))
    """

    default_xml = ("gymnasium", "envs/mujoco/assets/half_cheetah.xml")
    default_frame_skip = 5
    default_reset_noise_scale = 0.1

    def __init__(self, *args, forward_reward_weight: float = 1.0, ctrl_cost_weight: float = 0.1, **kwargs) -> None:
        self.forward_reward_weight, self.ctrl_cost_weight = forward_reward_weight, ctrl_cost_weight
        super().__init__(*args, **kwargs)

    def _initial_state(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        qpos = self.init_qpos + self._uniform(n, self.model.nq)
        return qpos, self.init_qvel + self.reset_noise_scale * self._normal(n, self.model.nv)

    def _observation(self, state: State) -> np.ndarray:
        return np.concatenate((state["qpos"][:, 1:], state["qvel"]), axis=1)

    def _reward(self, before: State, after: State, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x_velocity = (after["qpos"][:, 0] - before["qpos"][:, 0]) / self.dt
        ctrl_cost = self.ctrl_cost_weight * np.square(action).sum(axis=1)
        reward = self.forward_reward_weight * x_velocity - ctrl_cost
        return reward, np.zeros(len(reward), dtype=bool)
