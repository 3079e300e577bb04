"""The math of value estimators as plain tensor functions (TorchRL's ``torchrl.objectives.value.functional``),
and DreamerV3's scalar and latent math (:mod:`rl_objectives.functional.dreamer`).

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
from .distributional import categorical_projection, distributional_cross_entropy
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
