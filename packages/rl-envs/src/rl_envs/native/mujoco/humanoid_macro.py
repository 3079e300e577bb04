"""HumanoidMacroAction: move the humanoid's joints to a posture with a PD controller."""

from __future__ import annotations

from typing import Any

import torch
from tdict import TensorDictBase, tensorclass

from ...transforms.macro import TargetMacroAction, _duration

__all__ = ["HumanoidMacroAction"]

# PD gains in control units (the motors' gear turns a control of 0.4 into 40 N m at most joints)
KP, KD = 1.0, 0.05


def _joints(env: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Observation indices of the actuated joints' angles and speeds, and their ranges (low, high)."""
    model = env.model
    joint = torch.as_tensor(model.actuator_trnid[:, 0], dtype=torch.int64)
    qpos = torch.as_tensor(model.jnt_qposadr, dtype=torch.int64)[joint] - 2  # the observation drops x, y
    qvel = torch.as_tensor(model.jnt_dofadr, dtype=torch.int64)[joint] + (model.nq - 2)
    low, high = torch.as_tensor(model.jnt_range, dtype=torch.float32)[joint].unbind(-1)
    return qpos, qvel, low, high


@tensorclass
class HumanoidMacroAction(TargetMacroAction):
    """Reach a posture: ``target`` holds the angles (rad) of the 17 actuated joints of :class:`HumanoidEnv`.

    Each low-level step applies ``clip(kp (target - q) - kd q̇)`` to the joint motors (a PD loop on
    the observed joint angles and speeds); the macro finishes when every joint is within
    ``tolerance`` (rad) of its target or after ``duration`` steps. A flat policy action is 17
    numbers in ``[-1, 1]`` spanning each joint's range, and the duration fraction.

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
        target = low.to(flat) + unit * (high - low).to(flat)
        make: Any = cls  # a tensor class: its generated __init__ takes the fields and batch_size
        return make(
            target=target,
            duration=_duration(flat[..., -1], max_duration),
            tolerance=torch.full(flat.shape[:-1], 0.05, dtype=flat.dtype, device=flat.device),
            batch_size=flat.shape[:-1],
        )

    def error(self, tensordict: TensorDictBase, env: Any) -> torch.Tensor:
        qpos, _, _, _ = _joints(env)
        angles = tensordict.get("observation")[..., qpos.to(self.target.device)]
        return (self.target - angles.to(self.target)).abs().amax(-1)

    def control(self, tensordict: TensorDictBase, env: Any) -> torch.Tensor:
        qpos, qvel, _, _ = _joints(env)
        observation = tensordict.get("observation").to(self.target)
        torque = KP * (self.target - observation[..., qpos]) - KD * observation[..., qvel]
        spec = env.action_spec
        low, high = spec.space.low.to(torque), spec.space.high.to(torque)
        return torch.maximum(torch.minimum(torque, high), low).to(spec.dtype)
