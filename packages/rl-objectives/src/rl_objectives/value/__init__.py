"""Value estimators as TensorDict modules (TorchRL's ``torchrl.objectives.value``).

Each estimator reads a rollout TensorDict (batch ``[*B, T]``, time last or named ``"time"``),
runs the value network on it and on ``td["next"]`` when it has one, and writes ``"advantage"``
and ``"value_target"`` with the batch shape. The math is in :mod:`rl_objectives.functional`, also
importable as :mod:`rl_objectives.value.functional` (TorchRL's ``torchrl.objectives.value.functional``).

Examples:
    >>> import torch
    >>> from tdict import TensorDict
    >>> from rl_objectives.value import GAE
    >>> td = TensorDict({"state_value": torch.zeros(3), "next": {"state_value": torch.zeros(3),
    ...     "reward": torch.ones(3), "done": torch.zeros(3, dtype=torch.bool)}}, batch_size=[3])
    >>> GAE(gamma=1.0, lmbda=1.0, value_network=None)(td)["advantage"]
    tensor([3., 2., 1.])
"""

from . import functional
from .advantages import (
    GAE,
    MultiAgentGAE,
    TD0Estimate,
    TD0Estimator,
    TD1Estimate,
    TD1Estimator,
    TDLambdaEstimate,
    TDLambdaEstimator,
    VTrace,
)
from .base import ValueEstimatorBase, ValueEstimators

__all__ = [
    "GAE",
    "MultiAgentGAE",
    "TD0Estimate",
    "TD0Estimator",
    "TD1Estimate",
    "TD1Estimator",
    "TDLambdaEstimate",
    "TDLambdaEstimator",
    "VTrace",
    "ValueEstimatorBase",
    "ValueEstimators",
]
