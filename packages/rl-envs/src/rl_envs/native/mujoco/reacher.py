"""ReacherEnv: Gymnasium's Reacher-v5, batched and native."""

from __future__ import annotations

import numpy as np

from .env import MujocoEnv, State

__all__ = ["ReacherEnv"]


class ReacherEnv(MujocoEnv):
    """A two-joint arm reaching a random target, as Gymnasium's ``Reacher-v5``.

    Observation (10): cos and sin of the two joint angles, the target's position, the joint
    velocities and the fingertip-to-target vector (x, y). Reward: ``-reward_dist_weight *
    |fingertip - target| - reward_control_weight * |action|²``. Episodes are truncated at 50 steps.
    Initial state: joints ``qpos0 + U(±0.1)``, target uniform in the disc of radius 0.2, joint
    velocities ``U(±0.005)``. See :class:`MujocoEnv` for the shared arguments.

    Examples:
        >>> env = ReacherEnv(num_envs=2, seed=0)
        >>> env.rollout(50)["next", "truncated"][:, -1].tolist()
        [True, True]
    """

    default_xml = ("gymnasium", "envs/mujoco/assets/reacher.xml")
    default_frame_skip = 2
    default_max_episode_steps = 50
    data_fields = ("xpos",)

    def __init__(self, *args, reward_dist_weight: float = 1.0, reward_control_weight: float = 1.0, **kwargs) -> None:
        self.reward_dist_weight, self.reward_control_weight = reward_dist_weight, reward_control_weight
        super().__init__(*args, **kwargs)

    def _body(self, name: str) -> int:
        return self.model.body(name).id

    def _initial_state(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        qpos = self.init_qpos + self._uniform(n, self.model.nq, 0.1)
        goal = self._uniform(n, 2, 0.2)
        outside = np.linalg.norm(goal, axis=1) >= 0.2
        while outside.any():  # rejection sampling: uniform in the disc
            goal[outside] = self._uniform(int(outside.sum()), 2, 0.2)
            outside = np.linalg.norm(goal, axis=1) >= 0.2
        qpos[:, -2:] = goal
        qvel = self.init_qvel + self._uniform(n, self.model.nv, 0.005)
        qvel[:, -2:] = 0
        return qpos, qvel

    def _fingertip_to_target(self, state: State) -> np.ndarray:
        return state["xpos"][:, self._body("fingertip")] - state["xpos"][:, self._body("target")]

    def _observation(self, state: State) -> np.ndarray:
        qpos, theta = state["qpos"], state["qpos"][:, :2]
        parts = (
            np.cos(theta),
            np.sin(theta),
            qpos[:, 2:],
            state["qvel"][:, :2],
            self._fingertip_to_target(state)[:, :2],
        )
        return np.concatenate(parts, axis=1)

    def _reward(self, before: State, after: State, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        distance = np.linalg.norm(self._fingertip_to_target(after), axis=1)
        reward_ctrl = -np.square(action).sum(axis=1) * self.reward_control_weight
        return -distance * self.reward_dist_weight + reward_ctrl, np.zeros(len(distance), dtype=bool)
