"""The math of Q-learning (DQN, double DQN, QMIX / VDN) as plain tensor functions.

With ``Q(s, .)`` the online network's action values, ``Q'`` the target network's, ``a`` the
stored action, ``r`` the reward and ``d`` the ``terminated`` flag:

    chosen_action_value     Q(s, a)           (a: an index, or a one-hot vector)
    greedy_value            max_a' Q'(s', a')
    double_dqn_next_value   Q'(s', argmax_a' Q(s', a'))   (online network picks, target values)
    dqn_target              y = r + gamma * (1 - d) * V'(s')
    td_loss                 d(Q(s, a), y)     (l2, l1 or smooth_l1; per sample, or per critic)
    squared_td_error        (Q(s, a) - y)^2   (detached: the priority of prioritized replay)

Every loss is per sample (unreduced); the caller reduces it. QMIX regresses the mixed team value
``Q_tot = mixer(Q_1(s, a_1), ..., Q_n(s, a_n); state)`` with the same :func:`td_loss`.

Examples:
    >>> import torch
    >>> from rl_objectives.functional.dqn import chosen_action_value, dqn_target, td_loss
    >>> q = chosen_action_value(torch.tensor([[1.0, 2.0], [3.0, 0.5]]), torch.tensor([1, 0]))
    >>> y = dqn_target(torch.tensor([1.0, 1.0]), torch.tensor([2.0, 4.0]), 0.5, torch.tensor([False, True]))
    >>> q, y, td_loss(q, y)
    (tensor([2., 3.]), tensor([2., 1.]), tensor([0., 4.]))
"""

from __future__ import annotations

import torch

from .distance import distance
from .value import td0_return_estimate

__all__ = [
    "chosen_action_value",
    "double_dqn_next_value",
    "dqn_target",
    "greedy_value",
    "squared_td_error",
    "td_loss",
]

_Tensor = torch.Tensor


def chosen_action_value(action_value: _Tensor, action: _Tensor, action_space: str = "categorical") -> _Tensor:
    """``Q(s, a)``: the stored action's entry of ``action_value`` (``[*lead, *B, n]`` -> ``[*lead, *B]``).

    ``action`` is an index ``[*B]`` (``action_space="categorical"``) or a one-hot vector ``[*B, n]``
    (``"one_hot"``); leading dims of ``action_value`` (a critic ensemble) broadcast over it.

    Examples:
        >>> import torch
        >>> q = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        >>> chosen_action_value(q, torch.tensor([2, 0])), chosen_action_value(q, torch.tensor([[0, 1, 0], [1, 0, 0]]), "one_hot")
        (tensor([3., 4.]), tensor([2., 4.]))
    """
    if action_space == "categorical":
        index = action.long().unsqueeze(-1).expand(*action_value.shape[:-1], 1)
        return action_value.gather(-1, index).squeeze(-1)
    return (action_value * action.to(action_value.dtype)).sum(-1)


def greedy_value(next_action_value: _Tensor) -> _Tensor:
    """``V'(s') = max_a' Q'(s', a')`` over the last (action) dim.

    Examples:
        >>> import torch
        >>> greedy_value(torch.tensor([[1.0, 3.0], [2.0, -1.0]]))
        tensor([3., 2.])
    """
    return next_action_value.max(-1).values


def double_dqn_next_value(next_q_online: _Tensor, next_q_target: _Tensor) -> _Tensor:
    """Double DQN: ``Q'(s', argmax_a' Q(s', a'))``, the online network choosing, the target one valuing.

    ``DQNLoss`` takes the online network's own greedy action instead of this argmax (so that a
    Q-value module's action mask applies) and values it with :func:`chosen_action_value`; without a
    mask the two agree.

    Examples:
        >>> import torch
        >>> double_dqn_next_value(torch.tensor([[1.0, 3.0], [2.0, -1.0]]), torch.tensor([[10.0, 20.0], [30.0, 40.0]]))
        tensor([20., 30.])
    """
    return chosen_action_value(next_q_target, next_q_online.argmax(-1))


def dqn_target(reward: _Tensor, next_value: _Tensor, gamma: float, terminated: _Tensor) -> _Tensor:
    """The one-step target ``y = r + gamma * (1 - terminated) * V'(s')`` (``terminated`` bool).

    The loss modules compute it through their value estimator (TD(0) by default, where it is this
    formula; TD(1) / TD(lambda) on request).

    Examples:
        >>> import torch
        >>> dqn_target(torch.tensor([1.0, 1.0]), torch.tensor([2.0, 2.0]), 0.9, torch.tensor([False, True]))
        tensor([2.8000, 1.0000])
    """
    return td0_return_estimate(gamma, next_value, reward, terminated)


def td_loss(value: _Tensor, target: _Tensor, loss_function: str = "l2") -> _Tensor:
    """The regression loss ``d(Q(s, a), y)``: ``(Q - y)^2`` (``"l2"``), ``|Q - y|`` (``"l1"``) or
    Huber with ``beta=1`` (``"smooth_l1"``), element-wise; ``target`` broadcasts over a leading
    critic-ensemble dim of ``value``.

    Examples:
        >>> import torch
        >>> td_loss(torch.tensor([0.0, 3.0]), torch.tensor([0.5, 0.0]), "smooth_l1")
        tensor([0.1250, 2.5000])
    """
    return distance(value, target, loss_function)


def squared_td_error(value: _Tensor, target: _Tensor) -> _Tensor:
    """``(Q(s, a) - y)^2`` with ``Q`` detached: the priority a prioritized replay buffer reads.

    Examples:
        >>> import torch
        >>> squared_td_error(torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([0.0, 4.0]))
        tensor([1., 4.])
    """
    return (value.detach() - target).pow(2)
