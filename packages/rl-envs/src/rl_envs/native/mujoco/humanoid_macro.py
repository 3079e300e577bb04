"""HumanoidMacroAction: move the humanoid's joints to a posture with a PD controller."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from tdict import TensorDictBase, tensorclass

from ...transforms.macro import MacroPrimitive, TargetMacroAction, _duration

__all__ = ["HumanoidMacroAction"]

# PD gains in control units (the motors' gear turns a control of 0.4 into 40 N m at most joints)
KP, KD = 1.0, 0.05
TOLERANCE = 0.05  # rad: a posture is reached when every joint is this close


# per model, computed once: every low-level step of a macro reads them twice (error and control)
_JOINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _joints(env: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Observation indices of the actuated joints' angles and speeds, and their ranges (low, high)."""
    model = env.model
    found = _JOINTS.get(model)
    if found is None:
        joint = torch.as_tensor(model.actuator_trnid[:, 0], dtype=torch.int64)
        qpos = torch.as_tensor(model.jnt_qposadr, dtype=torch.int64)[joint] - 2  # the observation drops x, y
        qvel = torch.as_tensor(model.jnt_dofadr, dtype=torch.int64)[joint] + (model.nq - 2)
        low, high = torch.as_tensor(model.jnt_range, dtype=torch.float32)[joint].unbind(-1)
        found = _JOINTS[model] = (qpos, qvel, low, high)
    return found


@tensorclass
class HumanoidMacroAction(TargetMacroAction):
    """Reach a posture: ``target`` holds the angles (rad) of the 17 actuated joints of :class:`HumanoidEnv`.

    Each low-level step applies ``clip(kp (target - q) - kd q̇)`` to the joint motors (a PD loop on
    the observed joint angles and speeds); the macro finishes when every joint is within
    ``TOLERANCE`` (0.05 rad) of its target or after ``steps + settle_steps`` steps. A flat policy
    action is 17 numbers in ``[-1, 1]`` spanning each joint's range, and the duration fraction.

    Examples:
        >>> import torch
        >>> from rl_envs import TransformedEnv
        >>> from rl_envs.native.mujoco import HumanoidEnv
        >>> from rl_envs.transforms import MacroPrimitiveTransform
        >>> env = TransformedEnv(HumanoidEnv(seed=0), MacroPrimitiveTransform(HumanoidMacroAction, max_duration=5))
        >>> env.action_spec.shape
        torch.Size([1, 18])
        >>> env.rollout(2)["next", "observation"].shape
        torch.Size([1, 2, 348])
    """

    @classmethod
    def flat_size(cls, action_spec: Any) -> int:
        """One target per actuated joint, and the duration."""
        return action_spec.shape[-1] + 1

    @classmethod
    def from_flat(
        cls, flat: torch.Tensor, tensordict: TensorDictBase, env: Any, max_duration: int
    ) -> "HumanoidMacroAction":
        """The postures that the flat actions stand for (each joint's range spans ``[-1, 1]``)."""
        _, _, low, high = _joints(env)
        unit = (flat[..., :-1].clamp(-1, 1) + 1) / 2
        steps = _duration(flat[..., -1], max_duration)
        make: Any = cls  # a tensor class: its generated __init__ takes the fields and batch_size
        return make(
            mode=torch.full_like(steps, int(MacroPrimitive.MOVE)),
            steps=steps,
            settle_steps=torch.zeros_like(steps),
            target=low.to(flat) + unit * (high - low).to(flat),
            batch_size=steps.shape,
        )

    def error(self, tensordict: TensorDictBase, env: Any) -> torch.Tensor:
        """The largest distance (rad) of a joint to its target in ``tensordict``'s observation (``[*B]``)."""
        qpos, _, _, _ = _joints(env)
        angles = tensordict.get("observation")[..., qpos.to(self.target.device)]
        return (self.target - angles.to(self.target)).abs().amax(-1)

    def action(self, step: int, tensordict: TensorDictBase, env: Any, start: torch.Tensor) -> torch.Tensor:
        """The PD loop's motor controls (``WAIT``: ``start``, the controls held)."""
        controls = self.control(tensordict, env)
        return torch.where((self.mode == int(MacroPrimitive.MOVE)).unsqueeze(-1), controls, start)

    def finished(self, step: int, tensordict: TensorDictBase, env: Any) -> torch.Tensor:
        """Every joint within ``TOLERANCE`` of its target, or the duration spent."""
        return (self.duration <= step + 1) | (self.error(tensordict, env) <= TOLERANCE)

    def control(self, tensordict: TensorDictBase, env: Any) -> torch.Tensor:
        """``clip(kp (target - q) - kd q̇)`` on the actuated joints."""
        qpos, qvel, _, _ = _joints(env)
        observation = tensordict.get("observation").to(self.target)
        torque = KP * (self.target - observation[..., qpos]) - KD * observation[..., qvel]
        spec = env.action_spec
        low, high = spec.space.low.to(torque), spec.space.high.to(torque)
        return torch.maximum(torch.minimum(torque, high), low).to(spec.dtype)
