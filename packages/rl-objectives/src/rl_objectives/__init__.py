"""Modules, value estimators, losses and trainers on rl-tdict.

Losses and target updaters live at the top level (``from rl_objectives import ClipPPOLoss``), as
in ``torchrl.objectives``; networks, actors and exploration in :mod:`rl_objectives.modules`; the
math of estimators and losses as plain tensor functions in :mod:`rl_objectives.functional`; the
value estimators in :mod:`rl_objectives.value`.

It imports only ``tdict`` (distribution ``rl-tdict``), the standard library and third-party
libraries, never a sibling ``rl_*`` package.
"""

from .losses import (
    AUTO_LOSS_MASK_KEYS,
    A2CLoss,
    BCLoss,
    CQLLoss,
    ClipPPOLoss,
    CrossQLoss,
    DDPGLoss,
    DQNLoss,
    DTLoss,
    DiscreteCQLLoss,
    DiscreteIQLLoss,
    DiscreteSACLoss,
    DistributionalDQNLoss,
    DreamerV3ActorLoss,
    DreamerV3Loss,
    DreamerV3ModelLoss,
    DreamerV3ValueLoss,
    HardUpdate,
    IPPOLoss,
    IQLLoss,
    KLPENPPOLoss,
    LossModule,
    MAPPOLoss,
    OnlineDTLoss,
    PPOLoss,
    QMixerLoss,
    REDQLoss,
    ReinforceLoss,
    SACLoss,
    SoftUpdate,
    TD3BCLoss,
    TD3Loss,
    TargetNetUpdater,
    distance_loss,
    hold_out_net,
    hold_out_params,
    total_loss,
)
from .functional.signed_hyperbolic import signed_hyperbolic, signed_parabolic
from .functional.dreamer import (
    categorical_kl_balanced,
    categorical_kl_terms,
    symexp,
    symlog,
    two_hot_cross_entropy,
    two_hot_decode,
    two_hot_encode,
)
from .value import ValueEstimators
from .value.registry import default_value_kwargs

__version__ = "0.1.0"

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
    "ValueEstimators",
    "default_value_kwargs",
    "distance_loss",
    "hold_out_net",
    "hold_out_params",
    "total_loss",
    "__version__",
    "categorical_kl_balanced",
    "categorical_kl_terms",
    "signed_hyperbolic",
    "signed_parabolic",
    "symexp",
    "symlog",
    "two_hot_cross_entropy",
    "two_hot_decode",
    "two_hot_encode",
]
