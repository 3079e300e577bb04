"""The math of the losses and value estimators as plain tensor functions.

One file per family, readable top to bottom like a single-file implementation: the value
estimators (:mod:`~rl_objectives.functional.value`, TorchRL's ``torchrl.objectives.value.functional``),
the on-policy losses (:mod:`~rl_objectives.functional.ppo`: A2C, REINFORCE, PPO), the SAC family
(:mod:`~rl_objectives.functional.sac`: SAC, discrete SAC, REDQ, CrossQ), the deterministic-policy
losses (:mod:`~rl_objectives.functional.td3`: DDPG, TD3, TD3+BC), Q-learning
(:mod:`~rl_objectives.functional.dqn`: DQN, QMIX) and C51 (:mod:`~rl_objectives.functional.distributional`),
the offline losses (:mod:`~rl_objectives.functional.iql`, :mod:`~rl_objectives.functional.cql`,
:mod:`~rl_objectives.functional.bc`), DreamerV3's scalar and latent math
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
from .bc import bc_cross_entropy_loss, bc_nll_loss, bc_regression_loss
from .cql import (
    cql_actor_bc_loss,
    cql_actor_loss,
    cql_alpha_prime,
    cql_alpha_prime_loss,
    cql_lagrange_penalty,
    cql_logsumexp_penalty,
    discrete_cql_penalty,
    uniform_log_density,
)
from .dqn import chosen_action_value, double_dqn_next_value, dqn_target, greedy_value, squared_td_error, td_loss
from .iql import expectile_loss, iql_actor_loss, iql_actor_weights, iql_value_loss
from .sac import (
    discrete_expected_log_prob,
    discrete_sac_actor_loss,
    discrete_soft_state_value,
    redq_actor_loss,
    redq_qvalue_loss,
    redq_temperature_loss,
    sac_actor_loss,
    sac_q_target,
    sac_qvalue_loss,
    sac_v1_qvalue_loss,
    sac_value_loss,
    soft_state_value,
    temperature_loss,
)
from .td3 import (
    clipped_double_q,
    ddpg_actor_loss,
    ddpg_q_target,
    ddpg_value_loss,
    td3_bc_actor_loss,
    td3_q_target,
    td3_qvalue_loss,
    td3_target_action,
)
from .distributional import categorical_projection, distributional_cross_entropy
from .ppo import (
    approx_kl,
    asymmetric_clipped_surrogate_loss,
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
    "bc_cross_entropy_loss",
    "bc_nll_loss",
    "bc_regression_loss",
    "chosen_action_value",
    "clipped_double_q",
    "cql_actor_bc_loss",
    "cql_actor_loss",
    "cql_alpha_prime",
    "cql_alpha_prime_loss",
    "cql_lagrange_penalty",
    "cql_logsumexp_penalty",
    "ddpg_actor_loss",
    "ddpg_q_target",
    "ddpg_value_loss",
    "discrete_cql_penalty",
    "discrete_expected_log_prob",
    "discrete_sac_actor_loss",
    "discrete_soft_state_value",
    "double_dqn_next_value",
    "dqn_target",
    "expectile_loss",
    "greedy_value",
    "iql_actor_loss",
    "iql_actor_weights",
    "iql_value_loss",
    "redq_actor_loss",
    "redq_qvalue_loss",
    "redq_temperature_loss",
    "sac_actor_loss",
    "sac_q_target",
    "sac_qvalue_loss",
    "sac_v1_qvalue_loss",
    "sac_value_loss",
    "soft_state_value",
    "squared_td_error",
    "td3_bc_actor_loss",
    "td3_q_target",
    "td3_qvalue_loss",
    "td3_target_action",
    "td_loss",
    "temperature_loss",
    "uniform_log_density",
    "approx_kl",
    "asymmetric_clipped_surrogate_loss",
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
