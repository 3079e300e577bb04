"""Losses and what they share: the LossModule base, the target-network updaters, the losses."""

from .a2c import A2CLoss
from .common import LossModule
from .ddpg import DDPGLoss
from .dqn import DQNLoss
from .ppo import ClipPPOLoss, KLPENPPOLoss, PPOLoss
from .reinforce import ReinforceLoss
from .sac import SACLoss
from .target_updaters import HardUpdate, SoftUpdate, TargetNetUpdater
from .td3 import TD3Loss
from .utils import distance_loss

__all__ = [
    "A2CLoss",
    "ClipPPOLoss",
    "DDPGLoss",
    "DQNLoss",
    "HardUpdate",
    "KLPENPPOLoss",
    "LossModule",
    "PPOLoss",
    "ReinforceLoss",
    "SACLoss",
    "SoftUpdate",
    "TD3Loss",
    "TargetNetUpdater",
    "distance_loss",
]
