"""HumanoidEnv: Gymnasium's Humanoid-v5, batched and native."""

from __future__ import annotations

import numpy as np

from .env import MujocoEnv, State

__all__ = ["HumanoidEnv"]


class HumanoidEnv(MujocoEnv):
    """A 3-D humanoid rewarded for walking forward (``+x``), as Gymnasium's ``Humanoid-v5``.

    Observation (348): ``qpos[2:]``, ``qvel``, and of every body but the world its inertia
    (``cinert``), velocity (``cvel``), external contact forces (``cfrc_ext``), plus the actuator
    forces on the non-root joints (``qfrc_actuator[6:]``). Reward: ``forward_reward_weight * x
    velocity of the centre of mass + healthy_reward - ctrl_cost_weight * |ctrl|² - contact cost``
    (``contact_cost_weight * |cfrc_ext|²`` clipped to ``contact_cost_range``). Terminated when the
    torso height leaves ``healthy_z_range`` (open interval). See :class:`MujocoEnv` for the shared
    arguments.

    Examples:
        >>> env = HumanoidEnv(num_envs=2, seed=0)
        >>> env.rollout(3)["observation"].shape, env.action_spec.shape
        (torch.Size([2, 3, 348]), torch.Size([2, 17]))
    """

    default_xml = ("gymnasium", "envs/mujoco/assets/humanoid.xml")
    default_frame_skip = 5
    default_reset_noise_scale = 1e-2
    data_fields = ("xipos", "cinert", "cvel", "qfrc_actuator", "cfrc_ext", "ctrl")

    def __init__(
        self,
        *args,
        forward_reward_weight: float = 1.25,
        ctrl_cost_weight: float = 0.1,
        contact_cost_weight: float = 5e-7,
        contact_cost_range: tuple[float, float] = (-np.inf, 10.0),
        healthy_reward: float = 5.0,
        terminate_when_unhealthy: bool = True,
        healthy_z_range: tuple[float, float] = (1.0, 2.0),
        **kwargs,
    ) -> None:
        self.forward_reward_weight, self.ctrl_cost_weight = forward_reward_weight, ctrl_cost_weight
        self.contact_cost_weight, self.contact_cost_range = contact_cost_weight, contact_cost_range
        self.healthy_reward, self.terminate_when_unhealthy = healthy_reward, terminate_when_unhealthy
        self.healthy_z_range = healthy_z_range
        super().__init__(*args, **kwargs)

    def _mass_center_x(self, state: State) -> np.ndarray:
        mass = self.model.body_mass
        return np.einsum("b,nbj->nj", mass, state["xipos"])[:, 0] / mass.sum()

    def _observation(self, state: State) -> np.ndarray:
        n = len(state["qpos"])
        parts = [state["qpos"][:, 2:], state["qvel"]]
        parts += [state[f][:, 1:].reshape(n, -1) for f in ("cinert", "cvel")]
        parts += [state["qfrc_actuator"][:, 6:], state["cfrc_ext"][:, 1:].reshape(n, -1)]
        return np.concatenate(parts, axis=1)

    def _reward(self, before: State, after: State, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x_velocity = (self._mass_center_x(after) - self._mass_center_x(before)) / self.dt
        z = after["qpos"][:, 2]
        low, high = self.healthy_z_range
        healthy = (low < z) & (z < high)
        rewards = self.forward_reward_weight * x_velocity + healthy * self.healthy_reward
        ctrl_cost = self.ctrl_cost_weight * np.square(after["ctrl"]).sum(axis=1)
        contact_cost = self.contact_cost_weight * np.square(after["cfrc_ext"]).sum(axis=(1, 2))
        contact_cost = np.clip(contact_cost, *self.contact_cost_range)
        terminated = ~healthy if self.terminate_when_unhealthy else np.zeros_like(healthy)
        return rewards - (ctrl_cost + contact_cost), terminated
