"""The math of the soft actor-critic family (SAC, discrete SAC, REDQ, CrossQ) as plain tensor functions.

Every loss is returned per sample, unreduced: the caller takes the (weighted) mean. ``q`` is an
ensemble of critics stacked on a leading dim, ``[N, *B]`` (discrete actions: ``[N, *B, A]``), the
log-probs and the temperature ``alpha`` carry no gradient into the critics' losses, and
``target`` is the bootstrapped regression target ``y`` (computed without gradient).

Continuous actions (``a ~ pi(.|s)`` reparameterised, ``a' ~ pi(.|s')``):

    soft_state_value       V(s) = min_i Q_i(s, a) - alpha * log pi(a|s)
    sac_q_target           y = r + gamma * (1 - terminated) * V'(s')      (V' from the target critics)
    sac_qvalue_loss        sum_i d(Q_i(s, a), y),  td_error = max_i |Q_i(s, a) - y|
    sac_actor_loss         alpha * log pi(a|s) - min_i Q_i(s, a)          (critics detached)
    temperature_loss       -log_alpha * (log pi(a|s) + target_entropy)    (log-prob detached)
    sac_value_loss         d(V(s), min_i Q_i(s, a) - alpha * log pi(a|s))  (SAC v1's value network)
    sac_v1_qvalue_loss     d(Q(s, a), r + gamma * (1 - terminated) * V'(s')),  td_error = (Q - y)^2

Discrete actions (exact expectations over the action probabilities ``pi(.|s)``, nothing sampled):

    discrete_soft_state_value  V(s) = sum_a pi(a|s) (min_i Q_i(s, a) - alpha * log pi(a|s))
    discrete_sac_actor_loss    sum_a pi(a|s) (alpha * log pi(a|s) - min_i Q_i(s, a))
    discrete_expected_log_prob sum_a pi(a|s) log pi(a|s) = -H(pi(.|s))   (the temperature's log-prob)

REDQ (an ensemble of ``N`` critics, the target from a random subset of them, passed as ``q``):

    redq_qvalue_loss       d(Q_i(s, a), y) per critic, ``[N, *B]``,  td_error = max_i (Q_i - y)^2
    redq_actor_loss        alpha * log pi(a|s) - Q_i(s, a) per critic, ``[N, *B]`` (its mean: the
                           mean over the ensemble)
    redq_temperature_loss  -alpha * (log pi + target_entropy)  (TorchRL's REDQ: alpha, not log_alpha)

CrossQ uses SAC's functions; only the critics' joint pass over ``(s, a)`` and ``(s', a')`` differs.
The loss modules compute ``y`` with their value estimator (TD(0) by default, which is
:func:`sac_q_target`) from the next-state value :func:`soft_state_value` gives.

Examples:
    >>> import torch
    >>> from rl_objectives.functional.sac import sac_actor_loss, sac_q_target
    >>> next_q = torch.tensor([[1.0, 2.0], [3.0, 0.0]])          # two critics, two samples
    >>> sac_q_target(torch.ones(2), next_q, torch.tensor([-1.0, 0.0]), 0.5, 0.9, torch.tensor([False, True]))
    tensor([2.3500, 1.0000])
    >>> sac_actor_loss(torch.tensor([-1.0, 0.0]), next_q, 0.5)
    tensor([-1.5000,  0.0000])
"""

from __future__ import annotations

import torch
from tdict import scalar_like

from .distance import distance
from .td3 import ddpg_value_loss
from .value import td0_return_estimate

__all__ = [
    "discrete_expected_log_prob",
    "discrete_sac_actor_loss",
    "discrete_soft_state_value",
    "redq_actor_loss",
    "redq_qvalue_loss",
    "redq_temperature_loss",
    "sac_actor_loss",
    "sac_q_target",
    "sac_qvalue_loss",
    "sac_v1_qvalue_loss",
    "sac_value_loss",
    "soft_state_value",
    "temperature_loss",
]

_Tensor = torch.Tensor


def soft_state_value(q: _Tensor, log_prob: _Tensor, alpha: float | _Tensor) -> _Tensor:
    """The soft value ``V(s) = min_i Q_i(s, a) - alpha * log pi(a|s)`` of a drawn action ``a ~ pi(.|s)``:
    ``q`` is ``[N, *B]`` (the minimum over the ensemble is the clipped double Q), ``log_prob`` ``[*B]``.

    At the next state (``a' ~ pi(.|s')``, target critics) it is the value SAC, REDQ and CrossQ bootstrap from.

    Examples:
        >>> import torch
        >>> soft_state_value(torch.tensor([[1.0, 2.0], [3.0, 0.0]]), torch.tensor([-1.0, 2.0]), 0.5)
        tensor([ 1.5000, -1.0000])
    """
    return q.amin(0) - alpha * log_prob


def sac_q_target(
    reward: _Tensor,
    next_q: _Tensor,
    next_log_prob: _Tensor,
    alpha: float | _Tensor,
    gamma: float | _Tensor,
    terminated: _Tensor,
) -> _Tensor:
    """SAC's one-step target ``y = r + gamma * (1 - terminated) * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))``.

    ``next_q`` is ``[N, *B]`` (the target critics at ``(s', a')``, ``a' ~ pi(.|s')``), the rest
    ``[*B]``; ``terminated`` is bool (a terminated step's next value is 0, even if not finite).

    Examples:
        >>> import torch
        >>> next_q = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
        >>> sac_q_target(torch.ones(2), next_q, torch.zeros(2), 0.5, 0.5, torch.tensor([False, True]))
        tensor([1.5000, 1.0000])
    """
    return td0_return_estimate(gamma, soft_state_value(next_q, next_log_prob, alpha), reward, terminated)


def sac_qvalue_loss(q: _Tensor, target: _Tensor, loss_type: str = "smooth_l1") -> tuple[_Tensor, _Tensor]:
    """The critics' loss ``sum_i d(Q_i(s, a), y)`` per sample (``q``: ``[N, *B]``, ``target``: ``[*B]``)
    and the TD error ``max_i |Q_i(s, a) - y|`` (detached) a prioritized buffer reads.

    ``loss_type``: ``"l1"``, ``"l2"`` or ``"smooth_l1"`` (see :func:`~rl_objectives.functional.distance`).

    Examples:
        >>> import torch
        >>> q = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
        >>> sac_qvalue_loss(q, torch.tensor([2.0, 0.0]), "l2")
        (tensor([2., 4.]), tensor([1., 2.]))
    """
    loss = distance(q, target.expand_as(q), loss_type).sum(0)
    td_error = (q.detach() - target).abs().amax(0)
    return loss, td_error


def sac_actor_loss(log_prob: _Tensor, q: _Tensor, alpha: float | _Tensor) -> _Tensor:
    """SAC's policy loss ``alpha * log pi(a|s) - min_i Q_i(s, a)``, ``a ~ pi(.|s)`` reparameterised
    (``q``: ``[N, *B]`` from critics whose parameters are detached, so only the actor is trained).

    Examples:
        >>> import torch
        >>> sac_actor_loss(torch.tensor([-1.0, 2.0]), torch.tensor([[1.0, 2.0], [3.0, 0.0]]), 0.5)
        tensor([-1.5000,  1.0000])
    """
    return alpha * log_prob - q.amin(0)


def temperature_loss(log_alpha: _Tensor, log_prob: _Tensor, target_entropy: float | _Tensor) -> _Tensor:
    """The temperature's loss ``-log_alpha * (log pi(a|s) + target_entropy)`` (``log_prob`` detached):
    its gradient raises ``alpha`` when the policy's entropy ``-log pi`` is below the target.

    Examples:
        >>> import torch
        >>> temperature_loss(torch.tensor(0.5), torch.tensor([1.0, -3.0]), -2.0)
        tensor([0.5000, 2.5000])
    """
    if isinstance(target_entropy, (int, float)):
        target_entropy = scalar_like(target_entropy, log_prob)
    return -log_alpha * (log_prob.detach() + target_entropy)


def sac_value_loss(
    value: _Tensor, q: _Tensor, log_prob: _Tensor, alpha: float | _Tensor, loss_type: str = "smooth_l1"
) -> _Tensor:
    """SAC v1's state-value loss ``d(V(s), min_i Q_i(s, a) - alpha * log pi(a|s))``, ``a ~ pi(.|s)``:
    the target (``q``: ``[N, *B]``, ``log_prob``: ``[*B]``) is detached, only ``value`` is trained.

    Examples:
        >>> import torch
        >>> q = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
        >>> sac_value_loss(torch.tensor([0.0, 0.0]), q, torch.tensor([0.0, -2.0]), 0.5, "l2")
        tensor([1., 1.])
    """
    target = soft_state_value(q, log_prob, alpha).detach()
    return distance(value, target, loss_type)


def sac_v1_qvalue_loss(q: _Tensor, target: _Tensor, loss_type: str = "smooth_l1") -> tuple[_Tensor, _Tensor]:
    """SAC v1's critic loss ``d(Q(s, a), y)`` with ``y = r + gamma * (1 - terminated) * V'(s')`` (the
    target value network), one critic per sample (``q``: ``[*B]``, each critic's share laid out over
    the batch), and the squared TD error ``(Q(s, a) - y)^2`` (detached).

    Examples:
        >>> import torch
        >>> sac_v1_qvalue_loss(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.0]), "l1")
        (tensor([1., 2.]), tensor([1., 4.]))
    """
    return ddpg_value_loss(q, target, loss_type)


def discrete_soft_state_value(probs: _Tensor, q: _Tensor, log_probs: _Tensor, alpha: float | _Tensor) -> _Tensor:
    """Discrete SAC's soft value ``V(s) = sum_a pi(a|s) (min_i Q_i(s, a) - alpha * log pi(a|s))``, the
    exact expectation over the actions: ``probs`` and ``log_probs`` are ``[*B, A]``, ``q`` is
    ``[N, *B, A]``; returns ``[*B]``.

    Examples:
        >>> import torch
        >>> probs = torch.tensor([[0.5, 0.5]])
        >>> q = torch.tensor([[[1.0, 3.0]], [[2.0, 2.0]]])
        >>> discrete_soft_state_value(probs, q, probs.log(), 1.0)
        tensor([2.1931])
    """
    return (probs * (q.amin(0) - alpha * log_probs)).sum(-1)


def discrete_sac_actor_loss(probs: _Tensor, log_probs: _Tensor, q: _Tensor, alpha: float | _Tensor) -> _Tensor:
    """Discrete SAC's policy loss ``sum_a pi(a|s) (alpha * log pi(a|s) - min_i Q_i(s, a))``
    (``probs``, ``log_probs``: ``[*B, A]``; ``q``: ``[N, *B, A]`` from detached critics); returns ``[*B]``.

    Examples:
        >>> import torch
        >>> probs = torch.tensor([[0.5, 0.5]])
        >>> q = torch.tensor([[[1.0, 3.0]], [[2.0, 2.0]]])
        >>> discrete_sac_actor_loss(probs, probs.log(), q, 1.0)
        tensor([-2.1931])
    """
    return (probs * (alpha * log_probs - q.amin(0))).sum(-1)


def discrete_expected_log_prob(probs: _Tensor, log_probs: _Tensor) -> _Tensor:
    """``sum_a pi(a|s) log pi(a|s)``, the policy's negative entropy ``-H(pi(.|s))`` (detached): the
    log-prob :func:`temperature_loss` reads for discrete actions. ``[*B, A]`` -> ``[*B]``.

    Examples:
        >>> import torch
        >>> probs = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
        >>> discrete_expected_log_prob(probs, probs.log().clamp_min(-100.0))
        tensor([-0.6931,  0.0000])
    """
    return (probs * log_probs).sum(-1).detach()


def redq_qvalue_loss(q: _Tensor, target: _Tensor, loss_type: str = "smooth_l1") -> tuple[_Tensor, _Tensor]:
    """REDQ's critic loss ``d(Q_i(s, a), y)`` of every critic, ``[N, *B]`` (not summed: REDQ averages
    over the ensemble too), and the squared TD error ``max_i (Q_i(s, a) - y)^2`` (detached), ``[*B]``.

    Examples:
        >>> import torch
        >>> redq_qvalue_loss(torch.tensor([[1.0, 2.0], [3.0, 0.0]]), torch.tensor([2.0, 0.0]), "l1")
        (tensor([[1., 2.],
                [1., 0.]]), tensor([1., 4.]))
    """
    loss = distance(q, target.expand_as(q), loss_type)
    td_error = (q.detach() - target).pow(2).amax(0)
    return loss, td_error


def redq_actor_loss(log_prob: _Tensor, q: _Tensor, alpha: float | _Tensor) -> _Tensor:
    """REDQ's policy loss ``alpha * log pi(a|s) - Q_i(s, a)`` for every critic, ``[N, *B]``: its mean is
    ``alpha * log pi(a|s) - mean_i Q_i(s, a)`` (``a`` reparameterised, critics detached).

    Examples:
        >>> import torch
        >>> redq_actor_loss(torch.tensor([-1.0, 2.0]), torch.tensor([[1.0, 2.0], [3.0, 0.0]]), 0.5)
        tensor([[-1.5000, -1.0000],
                [-3.5000,  1.0000]])
    """
    return alpha * log_prob - q


def redq_temperature_loss(log_alpha: _Tensor, log_prob: _Tensor, target_entropy: float | _Tensor) -> _Tensor:
    """REDQ's temperature loss ``-alpha * (log pi + target_entropy)`` with ``alpha = exp(log_alpha)``
    (as TorchRL's REDQ; ``log_prob`` is detached, any shape, e.g. the current and next actions' stacked).

    Examples:
        >>> import torch
        >>> redq_temperature_loss(torch.tensor(0.0), torch.tensor([1.0, -3.0]), -2.0)
        tensor([1., 5.])
    """
    return -log_alpha.exp() * (log_prob.detach() + target_entropy)
