"""The math of the losses and value estimators as plain tensor functions.

One file per family, readable top to bottom like a single-file implementation: the value
estimators (:mod:`~rl_objectives.functional.value`, TorchRL's ``torchrl.objectives.value.functional``),
the on-policy losses (:mod:`~rl_objectives.functional.ppo`: A2C, REINFORCE, PPO), C51
(:mod:`~rl_objectives.functional.distributional`), DreamerV3's scalar and latent math
(:mod:`~rl_objectives.functional.dreamer`) and the critics' distances
(:mod:`~rl_objectives.functional.distance`). The loss modules of :mod:`rl_objectives.losses` map
TensorDict keys to these functions' arguments.

Per-step inputs are shaped ``[*B, T]`` (time last, ``time_dim=-1``) or carry feature dims after
time (``[*B, T, F]`` with ``time_dim=-2``); ``done`` / ``terminated`` are bool. See
:mod:`rl_objectives.functional.value` for the shared conventions.

Examples:
    >>> import torch
    >>> from rl_objectives.functional import vec_generalized_advantage_estimate
    >>> value, next_value, reward = torch.zeros(2, 4), torch.zeros(2, 4), torch.ones(2, 4)
    >>> done = torch.zeros(2, 4, dtype=torch.bool)
    >>> adv, target = vec_generalized_advantage_estimate(0.5, 1.0, value, next_value, reward, done)
    >>> adv[0]
    tensor([1.8750, 1.7500, 1.5000, 1.0000])
"""

from .dreamer import (
    categorical_kl_balanced,
    categorical_kl_terms,
    straight_through_categorical,
    symexp,
    symexp_bins,
    symlog,
    two_hot_cross_entropy,
    two_hot_decode,
    two_hot_encode,
    unimix_probs,
)
from .distance import distance
from .distributional import categorical_projection, distributional_cross_entropy
from .ppo import (
    approx_kl,
    clipped_surrogate_loss,
    effective_sample_size,
    entropy_loss,
    explained_variance,
    importance_weighted_loss,
    kl_penalty_loss,
    policy_gradient_loss,
    value_loss,
)
from .signed_hyperbolic import signed_hyperbolic, signed_parabolic
from .value import (
    generalized_advantage_estimate,
    reward2go,
    td0_advantage_estimate,
    td0_return_estimate,
    td1_advantage_estimate,
    td1_return_estimate,
    td_lambda_advantage_estimate,
    td_lambda_return_estimate,
    vec_generalized_advantage_estimate,
    vec_td1_advantage_estimate,
    vec_td1_return_estimate,
    vec_td_lambda_advantage_estimate,
    vec_td_lambda_return_estimate,
)
from .vtrace import vtrace_advantage_estimate

__all__ = [
    "approx_kl",
    "clipped_surrogate_loss",
    "distance",
    "effective_sample_size",
    "entropy_loss",
    "explained_variance",
    "importance_weighted_loss",
    "kl_penalty_loss",
    "policy_gradient_loss",
    "value_loss",
    "categorical_kl_balanced",
    "categorical_kl_terms",
    "categorical_projection",
    "distributional_cross_entropy",
    "generalized_advantage_estimate",
    "reward2go",
    "signed_hyperbolic",
    "signed_parabolic",
    "straight_through_categorical",
    "symexp",
    "symexp_bins",
    "symlog",
    "td0_advantage_estimate",
    "td0_return_estimate",
    "td1_advantage_estimate",
    "td1_return_estimate",
    "td_lambda_advantage_estimate",
    "td_lambda_return_estimate",
    "two_hot_cross_entropy",
    "two_hot_decode",
    "two_hot_encode",
    "unimix_probs",
    "vec_generalized_advantage_estimate",
    "vec_td1_advantage_estimate",
    "vec_td1_return_estimate",
    "vec_td_lambda_advantage_estimate",
    "vec_td_lambda_return_estimate",
    "vtrace_advantage_estimate",
]
