"""The math of conservative Q-learning (CQL, Kumar et al., 2020) as plain tensor functions.

The penalty pushes ``Q`` down on the actions the policy would take and up on the data's action
``a``, with temperature ``T`` and weight ``w``:

    discrete_cql_penalty    logsumexp_a' Q(s, a') - Q(s, a)                  (exact, DiscreteCQLLoss)
    cql_logsumexp_penalty   w * (T * logsumexp_j((Q(s, a_j) - log p(a_j)) / T) - Q(s, a))
                            a_j drawn from proposals of density p (importance sampling, CQLLoss)
    uniform_log_density     log p of the uniform proposal on [low, high]: -sum log(high - low)

With the Lagrange multiplier ``alpha' = clamp(exp(log_alpha'), 0, 1e6)`` and threshold ``t``:

    cql_alpha_prime          alpha'
    cql_lagrange_penalty     alpha'.detach() * sum_i penalty_i                  (the critics' loss)
    cql_alpha_prime_loss     -0.5 * alpha' * sum_i (mean_batch penalty_i.detach() - t)   (a scalar)

The SAC parts of ``CQLLoss``, with ``alpha`` the entropy temperature and ``H`` the target entropy:

    cql_actor_loss      alpha * log pi(a~|s) - min_i Q_i(s, a~)   (a~ ~ pi(.|s), reparameterised)
    cql_actor_bc_loss   alpha * log pi(a~|s) - log pi(a|s)         (behaviour cloning, first updates)
    (temperature)       :func:`~rl_objectives.functional.sac.temperature_loss`

The critics' TD loss is :func:`~rl_objectives.functional.dqn.td_loss`. Every loss is per sample
(unreduced) except :func:`cql_alpha_prime_loss`; the caller reduces it.

Examples:
    >>> import torch
    >>> from rl_objectives.functional.cql import discrete_cql_penalty
    >>> discrete_cql_penalty(torch.tensor([[0.0, 0.0], [1.0, 3.0]]), torch.tensor([0.0, 3.0]))
    tensor([0.6931, 0.1269])
"""

from __future__ import annotations

import torch

__all__ = [
    "cql_actor_bc_loss",
    "cql_actor_loss",
    "cql_alpha_prime",
    "cql_alpha_prime_loss",
    "cql_lagrange_penalty",
    "cql_logsumexp_penalty",
    "discrete_cql_penalty",
    "uniform_log_density",
]

_Tensor = torch.Tensor

MAX_ALPHA_PRIME = 1e6  # the paper's clamp of the Lagrange multiplier


def discrete_cql_penalty(action_value: _Tensor, chosen_value: _Tensor) -> _Tensor:
    """``logsumexp_a' Q(s, a') - Q(s, a)``: ``action_value`` ``[*B, n]``, ``chosen_value`` ``[*B]``.

    Examples:
        >>> import torch
        >>> discrete_cql_penalty(torch.tensor([[1.0, 1.0]]), torch.tensor([1.0]))
        tensor([0.6931])
    """
    return torch.logsumexp(action_value, dim=-1) - chosen_value


def uniform_log_density(low: _Tensor, high: _Tensor, action_shape: torch.Size | tuple[int, ...]) -> _Tensor:
    """``log(1 / volume)`` of the uniform density on the box ``[low, high]`` of shape ``action_shape``
    (``low`` / ``high`` broadcast to it), the same for every action.

    Examples:
        >>> import torch
        >>> uniform_log_density(torch.tensor(-1.0), torch.tensor(1.0), (3,))
        tensor(-2.0794)
    """
    return -torch.log(high - low).expand(action_shape).sum()


def cql_logsumexp_penalty(
    proposal_q: _Tensor,
    proposal_log_density: _Tensor,
    data_q: _Tensor,
    temperature: float = 1.0,
    weight: float = 1.0,
    dim: int = 0,
) -> _Tensor:
    """``w * (T * logsumexp_j((Q(s, a_j) - log p(a_j)) / T) - Q(s, a))``, the log-sum-exp over the
    action space estimated from proposal actions ``a_j`` of density ``p``.

    Args:
        proposal_q: ``Q(s, a_j)``, the proposals along ``dim`` (e.g. ``[E, N, *B]`` with ``dim=1``
            for an ensemble of ``E`` critics).
        proposal_log_density: ``log p(a_j)``, broadcast against ``proposal_q``.
        data_q: ``Q(s, a)`` at the data's action, ``proposal_q``'s shape without ``dim``.
        temperature: ``T``.
        weight: ``w`` (``min_q_weight``).
        dim: the proposals' dim of ``proposal_q``.

    Examples:
        >>> import torch
        >>> q = torch.tensor([[0.0], [0.0]])   # two proposals, one sample
        >>> cql_logsumexp_penalty(q, torch.zeros(2, 1), torch.tensor([0.0]), weight=2.0)
        tensor([1.3863])
    """
    lse = temperature * torch.logsumexp((proposal_q - proposal_log_density) / temperature, dim=dim)
    return weight * (lse - data_q)


def cql_alpha_prime(log_alpha_prime: _Tensor, max_alpha_prime: float = MAX_ALPHA_PRIME) -> _Tensor:
    """The Lagrange multiplier ``alpha' = clamp(exp(log_alpha'), 0, max_alpha_prime)``.

    Examples:
        >>> import torch
        >>> cql_alpha_prime(torch.tensor(0.0)), cql_alpha_prime(torch.tensor(20.0))
        (tensor(1.), tensor(1000000.))
    """
    return log_alpha_prime.exp().clamp(0.0, max_alpha_prime)


def cql_lagrange_penalty(penalty: _Tensor, alpha_prime: _Tensor) -> _Tensor:
    """The critics' penalty with the multiplier: ``alpha'.detach() * sum_i penalty_i``, ``penalty``
    ``[E, *B]`` (the critics see ``alpha'`` as a constant).

    Examples:
        >>> import torch
        >>> cql_lagrange_penalty(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor(0.5))
        tensor([2., 3.])
    """
    return alpha_prime.detach() * penalty.sum(0)


def cql_alpha_prime_loss(penalty: _Tensor, alpha_prime: _Tensor, lagrange_thresh: float) -> _Tensor:
    """The multiplier's loss ``-0.5 * alpha' * sum_i (mean_b penalty_i - t)``, a scalar (``penalty``
    ``[E, *B]``, detached: the multiplier sees it as a constant). Minimising it raises ``alpha'``
    while the penalty exceeds ``t`` and lowers it otherwise.

    Examples:
        >>> import torch
        >>> cql_alpha_prime_loss(torch.tensor([[1.0, 3.0], [0.0, 2.0]]), torch.tensor(2.0), 0.5)
        tensor(-2.)
    """
    gap = penalty.detach().mean(tuple(range(1, penalty.dim()))) - lagrange_thresh
    return -0.5 * alpha_prime * gap.sum()


def cql_actor_loss(log_prob: _Tensor, q: _Tensor, alpha: _Tensor | float) -> _Tensor:
    """SAC's actor loss ``alpha * log pi(a~|s) - min_i Q_i(s, a~)`` (``q``: the critics' minimum).

    Examples:
        >>> import torch
        >>> cql_actor_loss(torch.tensor([-1.0, 0.5]), torch.tensor([2.0, 1.0]), 0.2)
        tensor([-2.2000, -0.9000])
    """
    return alpha * log_prob - q


def cql_actor_bc_loss(log_prob: _Tensor, data_log_prob: _Tensor, alpha: _Tensor | float) -> _Tensor:
    """The behaviour-cloning actor loss ``alpha * log pi(a~|s) - log pi(a|s)`` (``a`` the data's action).

    Examples:
        >>> import torch
        >>> cql_actor_bc_loss(torch.tensor([-1.0]), torch.tensor([-3.0]), 1.0)
        tensor([2.])
    """
    return alpha * log_prob - data_log_prob
