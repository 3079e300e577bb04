"""The functional estimators where TorchRL has them: ``torchrl.objectives.value.functional``.

The same functions as :mod:`rl_objectives.functional` (one implementation, imported here).

Examples:
    >>> import torch
    >>> from rl_objectives.value.functional import td0_return_estimate
    >>> td0_return_estimate(0.5, torch.ones(3), torch.ones(3), terminated=torch.tensor([False, False, True]))
    tensor([1.5000, 1.5000, 1.0000])
"""

from ..functional import (
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
    vtrace_advantage_estimate,
)

__all__ = [
    "generalized_advantage_estimate",
    "reward2go",
    "td0_advantage_estimate",
    "td0_return_estimate",
    "td1_advantage_estimate",
    "td1_return_estimate",
    "td_lambda_advantage_estimate",
    "td_lambda_return_estimate",
    "vec_generalized_advantage_estimate",
    "vec_td1_advantage_estimate",
    "vec_td1_return_estimate",
    "vec_td_lambda_advantage_estimate",
    "vec_td_lambda_return_estimate",
    "vtrace_advantage_estimate",
]
