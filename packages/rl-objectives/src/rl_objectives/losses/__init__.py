"""Losses and what they share: the LossModule base, the target-network updaters, the losses."""

from .a2c import A2CLoss
from .bc import BCLoss
from .common import LossModule, total_loss
from .loss_mask import AUTO_LOSS_MASK_KEYS
from .cql import CQLLoss, DiscreteCQLLoss
from .crossq import CrossQLoss
from .ddpg import DDPGLoss
from .decision_transformer import DTLoss, OnlineDTLoss
from .discrete_sac import DiscreteSACLoss
from .distributional_dqn import DistributionalDQNLoss
from .dreamer_v3 import DreamerV3Loss
from .dreamer_v3_actor import DreamerV3ActorLoss
from .dreamer_v3_model import DreamerV3ModelLoss
from .dreamer_v3_value import DreamerV3ValueLoss
from .dqn import DQNLoss
from .iql import DiscreteIQLLoss, IQLLoss
from .mappo import IPPOLoss, MAPPOLoss
from .ppo import ClipPPOLoss, KLPENPPOLoss, PPOLoss
from .qmixer import QMixerLoss
from .redq import REDQLoss
from .reinforce import ReinforceLoss
from .sac import SACLoss
from .target_updaters import HardUpdate, SoftUpdate, TargetNetUpdater
from .td3 import TD3Loss
from .td3_bc import TD3BCLoss
from .utils import distance_loss
from .hold_out import hold_out_net, hold_out_params

__all__ = [
    "AUTO_LOSS_MASK_KEYS",
    "A2CLoss",
    "BCLoss",
    "CQLLoss",
    "ClipPPOLoss",
    "CrossQLoss",
    "DDPGLoss",
    "DQNLoss",
    "DTLoss",
    "DiscreteCQLLoss",
    "DiscreteIQLLoss",
    "DiscreteSACLoss",
    "DistributionalDQNLoss",
    "DreamerV3ActorLoss",
    "DreamerV3Loss",
    "DreamerV3ModelLoss",
    "DreamerV3ValueLoss",
    "HardUpdate",
    "IPPOLoss",
    "IQLLoss",
    "KLPENPPOLoss",
    "LossModule",
    "MAPPOLoss",
    "OnlineDTLoss",
    "PPOLoss",
    "QMixerLoss",
    "REDQLoss",
    "ReinforceLoss",
    "SACLoss",
    "SoftUpdate",
    "TD3BCLoss",
    "TD3Loss",
    "TargetNetUpdater",
    "distance_loss",
    "hold_out_net",
    "hold_out_params",
    "total_loss",
]
