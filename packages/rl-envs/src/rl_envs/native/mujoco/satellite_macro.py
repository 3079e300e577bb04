"""SatelliteMacroAction: slew the satellite to an attitude with a PD controller and a CMG steering law."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from tdict import TensorDictBase, tensorclass

from ...transforms.macro import MacroPrimitive, TargetMacroAction, _duration
from .satellite import quaternion_multiply

__all__ = ["SatelliteMacroAction"]

# PD gains for a ~10 kg m² bus: natural frequency 0.5 rad/s, damping ratio 0.9
KP, KD = 2.5, 9.0
TOLERANCE = 0.05  # rad: a slew ends this close to its goal


def _rotation_quaternion(rotation_vector: np.ndarray) -> np.ndarray:
    angle = np.linalg.norm(rotation_vector, axis=-1, keepdims=True)
    axis = rotation_vector / np.where(angle > 0, angle, 1.0)
    return np.concatenate([np.cos(angle / 2), np.sin(angle / 2) * axis], -1)


@tensorclass
class SatelliteMacroAction(TargetMacroAction):
    """Slew to an attitude: ``target`` is the attitude to reach relative to the episode's target
    (a ``[*B, 4]`` quaternion; the identity points at the target itself).

    Each low-level step asks for the body torque ``-kp * e - kd * ω`` (``e``: the vector part of the
    error quaternion to the goal, ``ω``: the body rates) and turns it into gimbal rates with the
    singularity-robust inverse of the CMG torque directions, ``-Aᵀ(A Aᵀ + λ I)⁻¹ τ / h`` with ``λ``
    growing as the cluster nears a singular configuration. It finishes within ``TOLERANCE`` (0.05
    rad) of the goal or after ``steps + settle_steps`` steps; with ``mode == MacroPrimitive.WAIT``
    the gimbals hold their last rates. Fields as TorchRL's ``SatelliteMacroAction``. A flat policy
    action (4 numbers in ``[-1, 1]``) is a rotation vector (times pi) from the target to the goal
    and the duration fraction.

    Examples:
        >>> import torch
        >>> from rl_envs import TransformedEnv
        >>> from rl_envs.native.mujoco import SatelliteEnv
        >>> from rl_envs.transforms import MacroPrimitiveTransform
        >>> env = TransformedEnv(SatelliteEnv(num_envs=2, seed=0, max_target_angle=0.5),
        ...                      MacroPrimitiveTransform(SatelliteMacroAction, max_duration=100))
        >>> td = env.reset()
        >>> start = env.base_env.attitude_error_angle()
        >>> td = env.step(td.set("action", torch.tensor([[0.0, 0.0, 0.0, 1.0]] * 2)))
        >>> bool((env.base_env.attitude_error_angle() < start).all())
        True
    """

    @classmethod
    def flat_size(cls, action_spec: Any) -> int:
        """4: the rotation vector from the target to the goal attitude (times pi), and the duration."""
        return 4

    @classmethod
    def from_flat(
        cls, flat: torch.Tensor, tensordict: TensorDictBase, env: Any, max_duration: int
    ) -> "SatelliteMacroAction":
        """The slews that the flat actions stand for (a goal within pi of the target)."""
        rotation = flat[..., :3].clamp(-1, 1).detach().cpu().double().numpy() * math.pi
        goal = torch.from_numpy(_rotation_quaternion(rotation)).to(flat)
        steps = _duration(flat[..., 3], max_duration)
        make: Any = cls  # a tensor class: its generated __init__ takes the fields and batch_size
        return make(
            mode=torch.full_like(steps, int(MacroPrimitive.MOVE)),
            steps=steps,
            settle_steps=torch.zeros_like(steps),
            target=goal,
            batch_size=steps.shape,
        )

    def _error_quaternion(self, observation: np.ndarray) -> np.ndarray:
        goal = self.target.detach().cpu().double().numpy() * np.array([1.0, -1.0, -1.0, -1.0])
        error = quaternion_multiply(goal, observation[..., :4])
        return error * np.where(error[..., :1] < 0, -1.0, 1.0)

    def error(self, tensordict: TensorDictBase, env: Any) -> torch.Tensor:
        """The angle (rad) between the attitude in ``tensordict``'s observation and the goal (``[*B]``)."""
        observation = tensordict.get("observation").detach().cpu().double().numpy()
        w = self._error_quaternion(observation)[..., 0]
        return torch.from_numpy(2 * np.arccos(np.clip(w, -1.0, 1.0))).to(self.target)

    def action(self, step: int, tensordict: TensorDictBase, env: Any, start: torch.Tensor) -> torch.Tensor:
        """The steering law's gimbal rates towards the goal (``WAIT``: ``start``, the rates held)."""
        rates = self.control(tensordict, env)
        return torch.where((self.mode == int(MacroPrimitive.MOVE)).unsqueeze(-1), rates.to(start), start)

    def finished(self, step: int, tensordict: TensorDictBase, env: Any) -> torch.Tensor:
        """Within ``TOLERANCE`` of the goal, or the duration spent."""
        return (self.duration <= step + 1) | (self.error(tensordict, env) <= TOLERANCE)

    def control(self, tensordict: TensorDictBase, env: Any) -> torch.Tensor:
        """The gimbal rates (rad/s, within ±1) that the steering law asks for."""
        observation = tensordict.get("observation")
        obs = observation.detach().cpu().double().numpy()
        n = env.num_cmgs
        torque = -KP * self._error_quaternion(obs)[..., 1:] - KD * obs[..., 4:7]
        gimbal = np.arctan2(obs[..., 7 : 7 + n], obs[..., 7 + n : 7 + 2 * n])
        a = env.torque_directions(gimbal)
        manipulability = np.sqrt(np.clip(np.linalg.det(a @ np.swapaxes(a, -1, -2)), 0, None))
        damping = 0.01 * np.exp(-10 * manipulability)[..., None, None]
        gram = a @ np.swapaxes(a, -1, -2) + damping * np.eye(3)
        rates = -np.swapaxes(a, -1, -2) @ np.linalg.solve(gram, torque[..., None]) / env.rotor_momentum
        return torch.from_numpy(np.clip(rates[..., 0], -1.0, 1.0)).to(observation.dtype)
