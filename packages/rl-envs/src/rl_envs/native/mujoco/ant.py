"""AntEnv: Gymnasium's Ant-v5, batched and native."""

from __future__ import annotations

import numpy as np

from .env import MujocoEnv, State

__all__ = ["AntEnv"]


class AntEnv(MujocoEnv):
    """A four-legged ant rewarded for walking forward (``+x``), as Gymnasium's ``Ant-v5``.

    Observation (105): ``qpos[2:]``, ``qvel`` and the external contact forces of every body but the
    world, clipped to ``contact_force_range``. Reward: ``forward_reward_weight * x velocity of the
    torso + healthy_reward - ctrl_cost_weight * |action|² - contact_cost_weight * |clipped contact
    forces|²``. Terminated when the state is not finite or the torso height leaves
    ``healthy_z_range`` (closed interval). See :class:`MujocoEnv` for the shared arguments.

    Examples:
        >>> env = AntEnv(num_envs=2, seed=0)
        >>> env.rollout(3)["observation"].shape, env.action_spec.shape
        (torch.Size([2, 3, 105]), torch.Size([2, 8]))
    """

    default_xml = ("gymnasium", "envs/mujoco/assets/ant.xml")
    default_frame_skip = 5
    default_reset_noise_scale = 0.1
    data_fields = ("xpos", "cfrc_ext")

    def __init__(
        self,
        *args,
        forward_reward_weight: float = 1.0,
        ctrl_cost_weight: float = 0.5,
        contact_cost_weight: float = 5e-4,
        healthy_reward: float = 1.0,
        main_body: int = 1,
        terminate_when_unhealthy: bool = True,
        healthy_z_range: tuple[float, float] = (0.2, 1.0),
        contact_force_range: tuple[float, float] = (-1.0, 1.0),
        **kwargs,
    ) -> None:
        self.forward_reward_weight, self.ctrl_cost_weight = forward_reward_weight, ctrl_cost_weight
        self.contact_cost_weight, self.healthy_reward = contact_cost_weight, healthy_reward
        self.main_body, self.terminate_when_unhealthy = main_body, terminate_when_unhealthy
        self.healthy_z_range, self.contact_force_range = healthy_z_range, contact_force_range
        super().__init__(*args, **kwargs)

    def _initial_state(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        qpos = self.init_qpos + self._uniform(n, self.model.nq)
        return qpos, self.init_qvel + self.reset_noise_scale * self._normal(n, self.model.nv)

    def _contact_forces(self, state: State) -> np.ndarray:
        return np.clip(state["cfrc_ext"], *self.contact_force_range)

    def _observation(self, state: State) -> np.ndarray:
        contact = self._contact_forces(state)[:, 1:]
        contact = contact.reshape(len(contact), -1)
        return np.concatenate((state["qpos"][:, 2:], state["qvel"], contact), axis=1)

    def _reward(self, before: State, after: State, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        body = self.main_body
        x_velocity = (after["xpos"][:, body, 0] - before["xpos"][:, body, 0]) / self.dt
        state = np.concatenate((after["qpos"], after["qvel"]), axis=1)
        low, high = self.healthy_z_range
        z = state[:, 2]
        healthy = np.isfinite(state).all(axis=1) & (low <= z) & (z <= high)
        rewards = x_velocity * self.forward_reward_weight + healthy * self.healthy_reward
        ctrl_cost = self.ctrl_cost_weight * np.square(action).sum(axis=1)
        contact_cost = self.contact_cost_weight * np.square(self._contact_forces(after)).sum(axis=(1, 2))
        terminated = ~healthy if self.terminate_when_unhealthy else np.zeros_like(healthy)
        return rewards - (ctrl_cost + contact_cost), terminated
