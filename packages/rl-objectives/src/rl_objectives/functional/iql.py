"""The math of implicit Q-learning (IQL, Kostrikov et al., 2021) as plain tensor functions.

With ``Q'_min(s, a) = min_i Q'_i(s, a)`` the pessimistic target critic at the stored action,
``V`` the state-value network, ``tau`` the expectile and ``beta`` the temperature:

    expectile_loss      |tau - 1(u < 0)| * u^2,  u = Q'_min(s, a) - V(s)   (the value loss)
    iql_actor_weights   w = min(exp(beta * (Q'_min(s, a) - V(s))), 100)     (detached)
    iql_actor_loss      -w * log pi(a|s)                                    (advantage-weighted regression)
    critics             sum_i d(Q_i(s, a), r + gamma * (1 - terminated) * V(s'))   (see
                        :func:`~rl_objectives.functional.dqn.td_loss`)

Every loss is per sample (unreduced); the caller reduces it.

Examples:
    >>> import torch
    >>> from rl_objectives.functional.iql import expectile_loss, iql_actor_loss
    >>> diff = torch.tensor([1.0, -1.0, 2.0])
    >>> expectile_loss(diff, 0.7), iql_actor_loss(torch.tensor([-1.0, -2.0, -0.5]), diff, 1.0)
    (tensor([0.7000, 0.3000, 2.8000]), tensor([2.7183, 0.7358, 3.6945]))
"""

from __future__ import annotations

import torch

__all__ = ["expectile_loss", "iql_actor_loss", "iql_actor_weights", "iql_value_loss"]

_Tensor = torch.Tensor

MAX_ADVANTAGE_WEIGHT = 100.0  # the paper's clip of the advantage weights


def expectile_loss(diff: _Tensor, expectile: float) -> _Tensor:
    """The asymmetric square ``|tau - 1(u < 0)| * u^2``: weight ``tau`` where ``u > 0``, ``1 - tau``
    elsewhere (``tau = 0.5``: half the squared error, the mean's regression).

    Examples:
        >>> import torch
        >>> expectile_loss(torch.tensor([2.0, -2.0, 0.0]), 0.9)
        tensor([3.6000, 0.4000, 0.0000])
    """
    weight = torch.where(diff > 0, expectile, 1.0 - expectile)
    return weight * diff.pow(2)


def iql_value_loss(target_q: _Tensor, value: _Tensor, expectile: float) -> _Tensor:
    """IQL's value loss: :func:`expectile_loss` of ``Q'_min(s, a) - V(s)`` (``target_q`` detached by the caller).

    Examples:
        >>> import torch
        >>> iql_value_loss(torch.tensor([1.0, 1.0]), torch.tensor([0.0, 3.0]), 0.7)
        tensor([0.7000, 1.2000])
    """
    return expectile_loss(target_q - value, expectile)


def iql_actor_weights(advantage: _Tensor, temperature: float, max_weight: float = MAX_ADVANTAGE_WEIGHT) -> _Tensor:
    """The advantage weights ``min(exp(beta * A), max_weight)`` of the actor's regression.

    Examples:
        >>> import torch
        >>> iql_actor_weights(torch.tensor([0.0, 1.0, 10.0]), 1.0)
        tensor([  1.0000,   2.7183, 100.0000])
    """
    return torch.exp(temperature * advantage).clamp(max=max_weight)


def iql_actor_loss(
    log_prob: _Tensor, advantage: _Tensor, temperature: float, max_weight: float = MAX_ADVANTAGE_WEIGHT
) -> _Tensor:
    """Advantage-weighted regression ``-min(exp(beta * A), max_weight) * log pi(a|s)``.

    ``advantage`` (``Q'_min(s, a) - V(s)``) carries no gradient: the caller detaches ``V(s)``.

    Examples:
        >>> import torch
        >>> iql_actor_loss(torch.tensor([-1.0, -1.0]), torch.tensor([0.0, 10.0]), 1.0)
        tensor([  1., 100.])
    """
    weight = iql_actor_weights(advantage, temperature, max_weight)
    return -weight * log_prob
