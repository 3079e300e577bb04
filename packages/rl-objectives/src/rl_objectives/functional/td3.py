"""The math of the deterministic-policy losses (DDPG, TD3, TD3+BC) as plain tensor functions.

Every loss is returned per sample, unreduced: the caller takes the (weighted) mean. ``q`` is one
critic's ``Q(s, a)``, ``[*B]``, or an ensemble stacked on a leading dim, ``[N, *B]``; ``target`` is
the bootstrapped regression target ``y`` (computed without gradient); ``pi`` is the deterministic
actor and ``pi'``, ``Q'`` the target copies.

DDPG (Lillicrap et al., 2015):

    ddpg_q_target          y = r + gamma * (1 - terminated) * Q'(s', pi'(s'))
    ddpg_value_loss        d(Q(s, a), y),  td_error = (Q(s, a) - y)^2
    ddpg_actor_loss        -Q(s, pi(s))                                   (critic detached)

TD3 (Fujimoto et al., 2018):

    td3_target_action      a' = clamp(pi'(s') + clamp(noise, -c, c), low, high)   (target policy smoothing)
    clipped_double_q       min_i Q'_i(s', a')
    td3_q_target           y = r + gamma * (1 - terminated) * min_i Q'_i(s', a')
    td3_qvalue_loss        sum_i d(Q_i(s, a), y),  td_error = max_i (Q_i(s, a) - y)^2
    (actor)                ddpg_actor_loss of the first critic, -Q_1(s, pi(s))

TD3+BC (Fujimoto & Gu, 2021), the critics are TD3's:

    td3_bc_actor_loss      -lambda * Q_1(s, pi(s)) + mean_j (pi(s)_j - a_j)^2,
                           lambda = alpha / mean_batch |Q_1(s, pi(s))|    (detached)

The loss modules compute ``y`` with their value estimator (TD(0) by default, which is
:func:`ddpg_q_target` / :func:`td3_q_target`) from the next-state value.

Examples:
    >>> import torch
    >>> from rl_objectives.functional.td3 import td3_q_target, td3_target_action
    >>> td3_target_action(torch.tensor([0.9, -0.2]), torch.tensor([0.3, -0.7]), 0.5, -1.0, 1.0)
    tensor([ 1.0000, -0.7000])
    >>> next_q = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
    >>> td3_q_target(torch.ones(2), next_q, 0.9, torch.tensor([False, True]))
    tensor([1.9000, 1.0000])
"""

from __future__ import annotations

import torch

from .distance import distance
from .dqn import squared_td_error
from .value import td0_return_estimate

__all__ = [
    "clipped_double_q",
    "ddpg_actor_loss",
    "ddpg_q_target",
    "ddpg_value_loss",
    "td3_bc_actor_loss",
    "td3_q_target",
    "td3_qvalue_loss",
    "td3_target_action",
]

_Tensor = torch.Tensor


def ddpg_q_target(reward: _Tensor, next_q: _Tensor, gamma: float | _Tensor, terminated: _Tensor) -> _Tensor:
    """DDPG's one-step target ``y = r + gamma * (1 - terminated) * Q'(s', pi'(s'))`` (all ``[*B]``;
    ``terminated`` is bool: a terminated step's next value is 0, even if not finite).

    Examples:
        >>> import torch
        >>> ddpg_q_target(torch.ones(2), torch.tensor([2.0, 5.0]), 0.5, torch.tensor([False, True]))
        tensor([2., 1.])
    """
    return td0_return_estimate(gamma, next_q, reward, terminated)


def ddpg_value_loss(q: _Tensor, target: _Tensor, loss_type: str = "l2") -> tuple[_Tensor, _Tensor]:
    """DDPG's critic loss ``d(Q(s, a), y)`` per sample and the squared TD error ``(Q(s, a) - y)^2``
    (detached) a prioritized buffer reads. ``loss_type``: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.

    Examples:
        >>> import torch
        >>> ddpg_value_loss(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 4.0]))
        (tensor([1., 4.]), tensor([1., 4.]))
    """
    return distance(q, target, loss_type), squared_td_error(q, target)


def ddpg_actor_loss(q: _Tensor) -> _Tensor:
    """DDPG's policy loss ``-Q(s, pi(s))``: the critic's parameters detached, it trains the actor only.

    Examples:
        >>> import torch
        >>> ddpg_actor_loss(torch.tensor([1.0, -2.0]))
        tensor([-1.,  2.])
    """
    return -q


def td3_target_action(
    next_action: _Tensor,
    noise: _Tensor,
    noise_clip: float,
    low: float | _Tensor,
    high: float | _Tensor,
) -> _Tensor:
    """Target policy smoothing: ``clamp(pi'(s') + clamp(noise, -noise_clip, noise_clip), low, high)``.

    ``noise`` is the Gaussian draw already scaled by ``policy_noise`` (``randn * sigma``), shaped like
    ``next_action``; ``low`` / ``high`` are the action bounds (numbers or tensors broadcasting to it).

    Examples:
        >>> import torch
        >>> td3_target_action(torch.tensor([0.0, 0.0, 0.8]), torch.tensor([0.2, -0.9, 0.4]), 0.5, -1.0, 1.0)
        tensor([ 0.2000, -0.5000,  1.0000])
    """
    clipped_noise = noise.clamp(-noise_clip, noise_clip)
    return torch.clamp(next_action + clipped_noise, low, high)  # pyright: ignore[reportCallIssue, reportArgumentType]  # (tensor or number bounds: torch's stubs take one kind)


def clipped_double_q(next_q: _Tensor) -> _Tensor:
    """``min_i Q'_i(s', a')`` over the ensemble (``[N, *B]`` -> ``[*B]``): TD3's clipped double-Q value.

    Examples:
        >>> import torch
        >>> clipped_double_q(torch.tensor([[1.0, 2.0], [3.0, 0.0]]))
        tensor([1., 0.])
    """
    return next_q.amin(0)


def td3_q_target(reward: _Tensor, next_q: _Tensor, gamma: float | _Tensor, terminated: _Tensor) -> _Tensor:
    """TD3's one-step target ``y = r + gamma * (1 - terminated) * min_i Q'_i(s', a')`` with ``next_q``
    ``[N, *B]`` at the smoothed target action (:func:`td3_target_action`), the rest ``[*B]``.

    Examples:
        >>> import torch
        >>> td3_q_target(torch.ones(2), torch.tensor([[1.0, 2.0], [3.0, 0.0]]), 0.5, torch.tensor([False, False]))
        tensor([1.5000, 1.0000])
    """
    return ddpg_q_target(reward, clipped_double_q(next_q), gamma, terminated)


def td3_qvalue_loss(q: _Tensor, target: _Tensor, loss_type: str = "smooth_l1") -> tuple[_Tensor, _Tensor]:
    """TD3's critic loss ``sum_i d(Q_i(s, a), y)`` per sample (``q``: ``[N, *B]``, ``target``: ``[*B]``)
    and the squared TD error ``max_i (Q_i(s, a) - y)^2`` (detached).

    Examples:
        >>> import torch
        >>> td3_qvalue_loss(torch.tensor([[1.0, 2.0], [3.0, 0.0]]), torch.tensor([2.0, 0.0]), "l2")
        (tensor([2., 4.]), tensor([1., 4.]))
    """
    loss = distance(q, target.expand_as(q), loss_type).sum(0)
    td_error = (q.detach() - target).pow(2).amax(0)
    return loss, td_error


def td3_bc_actor_loss(
    q: _Tensor, policy_action: _Tensor, data_action: _Tensor, alpha: float
) -> tuple[_Tensor, _Tensor, _Tensor]:
    """TD3+BC's policy loss ``-lambda * Q_1(s, pi(s)) + mean_j (pi(s)_j - a_j)^2`` per sample, with
    ``lambda = alpha / mean |Q_1(s, pi(s))|`` (over the batch, detached) so that ``alpha`` alone weighs
    the Q term against the regression onto the dataset's action ``a``.

    ``q`` is ``[*B]``; ``policy_action`` (``pi(s)``, with gradient) and ``data_action`` are
    ``[*B, *action_shape]`` (the same shape). Returns ``(loss, bc, lambda)``: the loss and the
    behaviour-cloning term per sample (``[*B]``), and ``lambda`` (0-dim).

    Examples:
        >>> import torch
        >>> q = torch.tensor([2.0, -6.0])
        >>> loss, bc, lmbd = td3_bc_actor_loss(q, torch.tensor([[0.5], [0.0]]), torch.tensor([[0.0], [1.0]]), 2.0)
        >>> loss, bc, lmbd
        (tensor([-0.7500,  4.0000]), tensor([0.2500, 1.0000]), tensor(0.5000))
    """
    bc = (policy_action - data_action).pow(2).reshape(*q.shape, -1).mean(-1)
    lmbd = alpha / q.detach().abs().mean()
    return -lmbd * q + bc, bc, lmbd
