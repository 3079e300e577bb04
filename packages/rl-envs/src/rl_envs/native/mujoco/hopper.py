"""HopperEnv and Walker2dEnv: Gymnasium's Hopper-v5 and Walker2d-v5, batched and native."""

from __future__ import annotations

import numpy as np

from .env import MujocoEnv, State

__all__ = ["HopperEnv", "Walker2dEnv"]


class HopperEnv(MujocoEnv):
    """A one-legged planar hopper rewarded for hopping forward, as Gymnasium's ``Hopper-v5``.

    Observation (11): ``qpos[1:]`` and ``qvel`` clipped to ±10. Reward: ``forward_reward_weight *
    x velocity + healthy_reward - ctrl_cost_weight * |action|²``. Terminated when unhealthy: the
    torso height ``qpos[1]`` outside ``healthy_z_range``, its angle ``qpos[2]`` outside
    ``healthy_angle_range`` or any of ``qpos[2:], qvel`` outside ``healthy_state_range`` (all open
    intervals). See :class:`MujocoEnv` for the shared arguments.

    Examples:
        >>> env = HopperEnv(num_envs=2, seed=0)
        >>> rollout = env.rollout(5)
        >>> rollout["observation"].shape, env.action_spec.shape
        (torch.Size([2, 5, 11]), torch.Size([2, 3]))
    """

    default_xml = ("gymnasium", "envs/mujoco/assets/hopper.xml")
    default_frame_skip = 4
    default_reset_noise_scale = 5e-3

    def __init__(
        self,
        *args,
        forward_reward_weight: float = 1.0,
        ctrl_cost_weight: float = 1e-3,
        healthy_reward: float = 1.0,
        terminate_when_unhealthy: bool = True,
        healthy_state_range: tuple[float, float] | None = (-100.0, 100.0),
        healthy_z_range: tuple[float, float] = (0.7, float("inf")),
        healthy_angle_range: tuple[float, float] = (-0.2, 0.2),
        **kwargs,
    ) -> None:
        self.forward_reward_weight, self.ctrl_cost_weight = forward_reward_weight, ctrl_cost_weight
        self.healthy_reward, self.terminate_when_unhealthy = healthy_reward, terminate_when_unhealthy
        self.healthy_state_range, self.healthy_z_range = healthy_state_range, healthy_z_range
        self.healthy_angle_range = healthy_angle_range
        super().__init__(*args, **kwargs)

    def _observation(self, state: State) -> np.ndarray:
        return np.concatenate((state["qpos"][:, 1:], np.clip(state["qvel"], -10, 10)), axis=1)

    def is_healthy(self, state: State) -> np.ndarray:
        """Whether each env's state is healthy (see the class docstring)."""
        qpos = state["qpos"]
        z, angle = qpos[:, 1], qpos[:, 2]
        low_z, high_z = self.healthy_z_range
        low_angle, high_angle = self.healthy_angle_range
        healthy = (low_z < z) & (z < high_z) & (low_angle < angle) & (angle < high_angle)
        if self.healthy_state_range is not None:
            low, high = self.healthy_state_range
            rest = np.concatenate((qpos[:, 2:], state["qvel"]), axis=1)
            healthy &= ((low < rest) & (rest < high)).all(axis=1)
        return healthy

    def _reward(self, before: State, after: State, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x_velocity = (after["qpos"][:, 0] - before["qpos"][:, 0]) / self.dt
        healthy = self.is_healthy(after)
        rewards = self.forward_reward_weight * x_velocity + healthy * self.healthy_reward
        reward = rewards - self.ctrl_cost_weight * np.square(action).sum(axis=1)
        terminated = ~healthy if self.terminate_when_unhealthy else np.zeros_like(healthy)
        return reward, terminated


class Walker2dEnv(HopperEnv):
    """A two-legged planar walker rewarded for walking forward, as Gymnasium's ``Walker2d-v5``.

    Observation (17), reward and termination as :class:`HopperEnv`, healthy when the torso height
    is in ``(0.8, 2.0)`` and its angle in ``(-1, 1)`` (no state range).

    Examples:
        >>> env = Walker2dEnv(num_envs=2, seed=0)
        >>> env.rollout(5)["observation"].shape
        torch.Size([2, 5, 17])
    """

    default_xml = ("gymnasium", "envs/mujoco/assets/walker2d_v5.xml")

    def __init__(
        self,
        *args,
        healthy_z_range: tuple[float, float] = (0.8, 2.0),
        healthy_angle_range: tuple[float, float] = (-1.0, 1.0),
        **kwargs,
    ) -> None:
        super().__init__(
            *args,
            healthy_state_range=None,
            healthy_z_range=healthy_z_range,
            healthy_angle_range=healthy_angle_range,
            **kwargs,
        )
