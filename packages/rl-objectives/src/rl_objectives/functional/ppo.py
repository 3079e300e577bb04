"""The math of the on-policy losses (A2C, REINFORCE, PPO and its variants) as plain tensor functions.

Every input is per sample (one entry per state-action pair, any batch shape) and every loss is
returned per sample, unreduced: the caller takes the mean (or a weighted mean) and scales it by its
coefficient. With ``log_weight = log pi(a|s) - log pi_old(a|s)``, ``r = exp(log_weight)`` and the
advantage ``A``:

    policy_gradient_loss      -log pi(a|s) * A                          (A2C, REINFORCE)
    importance_weighted_loss  -r * A                                    (PPOLoss)
    clipped_surrogate_loss    -min(r * A, clamp(r, 1 - eps, 1 + eps) * A)  (ClipPPOLoss)
    asymmetric_clipped_surrogate_loss  the same with clamp(r, 1 - eps_low, 1 + eps_high)
    kl_penalty_loss           -(r * A - beta * KL(pi_old || pi))        (KLPENPPOLoss)
    value_loss                d(V, R), or with value clipping
                              max(d(V, R), d(V_old + clamp(V - V_old, -c, c), R))
    entropy_loss              -coeff * H(pi(.|s))

``correction`` (PPO's optional, gradient-free log-weight added after the clip: the behaviour ratio
of a decoupled proximal policy, or a cap on the ratio) multiplies both terms of the surrogate by
``exp(correction)``. Diagnostics: :func:`approx_kl`, :func:`effective_sample_size`,
:func:`explained_variance`, and the clip fractions the clipped losses return.

Examples:
    >>> import torch
    >>> from rl_objectives.functional.ppo import clipped_surrogate_loss
    >>> log_weight = torch.tensor([0.0, 0.5, -0.5]).log1p()   # ratios 1.0, 1.5, 0.5
    >>> loss, clip_fraction = clipped_surrogate_loss(log_weight, torch.tensor([1.0, 1.0, -1.0]), 0.2)
    >>> loss, clip_fraction
    (tensor([-1.0000, -1.2000,  0.8000]), tensor(0.6667))
"""

from __future__ import annotations

import torch

from .distance import distance

__all__ = [
    "approx_kl",
    "asymmetric_clipped_surrogate_loss",
    "clipped_surrogate_loss",
    "effective_sample_size",
    "entropy_loss",
    "explained_variance",
    "importance_weighted_loss",
    "kl_penalty_loss",
    "policy_gradient_loss",
    "value_loss",
]

_Tensor = torch.Tensor


def policy_gradient_loss(log_prob: _Tensor, advantage: _Tensor) -> _Tensor:
    """``-log pi(a|s) * A`` (A2C and REINFORCE).

    Examples:
        >>> import torch
        >>> policy_gradient_loss(torch.tensor([-1.0, -2.0]), torch.tensor([0.5, -1.0]))
        tensor([ 0.5000, -2.0000])
    """
    return -(log_prob * advantage)


def _weights(log_weight: _Tensor, correction: _Tensor | None) -> _Tensor:
    return log_weight.exp() if correction is None else (log_weight + correction).exp()


def importance_weighted_loss(log_weight: _Tensor, advantage: _Tensor, correction: _Tensor | None = None) -> _Tensor:
    """``-exp(log_weight + correction) * A``: the policy gradient of PPO without a trust region.

    Examples:
        >>> import torch
        >>> importance_weighted_loss(torch.tensor([1.0, 2.0]).log(), torch.tensor([1.0, 1.0]))
        tensor([-1., -2.])
    """
    return -(_weights(log_weight, correction) * advantage)


def clipped_surrogate_loss(
    log_weight: _Tensor, advantage: _Tensor, clip_epsilon: float | _Tensor, correction: _Tensor | None = None
) -> tuple[_Tensor, _Tensor]:
    """PPO's clipped surrogate ``-min(r * A, clamp(r, 1 - eps, 1 + eps) * A)`` and the fraction of
    ratios the clip changed (detached).

    The clip acts on ``r = exp(log_weight)``; a ``correction`` then multiplies both terms by
    ``exp(correction)``. ``clip_epsilon`` may be a tensor (a scheduled buffer).

    Examples:
        >>> import torch
        >>> loss, fraction = clipped_surrogate_loss(torch.tensor([2.0]).log(), torch.tensor([1.0]), 0.2)
        >>> loss, fraction
        (tensor([-1.2000]), tensor(1.))
    """
    ratio = log_weight.exp()
    if isinstance(clip_epsilon, _Tensor):  # (tensor methods: cheaper than the Python operators)
        clipped = ratio.clamp(clip_epsilon.neg().add_(1), clip_epsilon.add(1))
    else:
        clipped = ratio.clamp(1 - clip_epsilon, 1 + clip_epsilon)
    clip_fraction = clipped.ne(ratio).to(ratio.dtype).mean()  # (a comparison carries no gradient)
    if correction is not None:
        scale = correction.exp()
        ratio, clipped = ratio * scale, clipped * scale
    return -torch.minimum(ratio * advantage, clipped * advantage), clip_fraction


def asymmetric_clipped_surrogate_loss(
    log_weight: _Tensor,
    advantage: _Tensor,
    clip_epsilon_low: float | _Tensor,
    clip_epsilon_high: float | _Tensor,
    correction: _Tensor | None = None,
) -> tuple[_Tensor, _Tensor]:
    """:func:`clipped_surrogate_loss` with separate bounds: the ratio is clamped to
    ``[1 - clip_epsilon_low, 1 + clip_epsilon_high]`` (DAPO's "clip-higher"). Returns the per-sample
    loss and the fraction of ratios the clip changed (detached).

    Examples:
        >>> import torch
        >>> log_weight = torch.tensor([2.0, 0.5]).log()
        >>> loss, fraction = asymmetric_clipped_surrogate_loss(log_weight, torch.tensor([1.0, -1.0]), 0.2, 0.28)
        >>> loss, fraction
        (tensor([-1.2800,  0.8000]), tensor(1.))
    """
    ratio = log_weight.exp()
    if isinstance(clip_epsilon_low, _Tensor) and isinstance(clip_epsilon_high, _Tensor):  # (scheduled buffers)
        clipped = ratio.clamp(clip_epsilon_low.neg().add_(1), clip_epsilon_high.add(1))
    else:
        clipped = ratio.clamp(1 - float(clip_epsilon_low), 1 + float(clip_epsilon_high))
    clip_fraction = clipped.ne(ratio).to(ratio.dtype).mean()  # (a comparison carries no gradient)
    if correction is not None:
        scale = correction.exp()
        ratio, clipped = ratio * scale, clipped * scale
    return -torch.minimum(ratio * advantage, clipped * advantage), clip_fraction


def kl_penalty_loss(
    log_weight: _Tensor,
    advantage: _Tensor,
    kl: _Tensor,
    beta: float | _Tensor,
    correction: _Tensor | None = None,
) -> _Tensor:
    """``-(r * A - beta * KL)``: the importance-weighted surrogate with a KL penalty.

    Examples:
        >>> import torch
        >>> kl_penalty_loss(torch.zeros(2), torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0]), 2.0)
        tensor([ 1., -2.])
    """
    return -(_weights(log_weight, correction) * advantage - beta * kl)


def value_loss(
    value: _Tensor,
    target: _Tensor,
    loss_type: str = "smooth_l1",
    old_value: _Tensor | None = None,
    clip_value: float | _Tensor | None = None,
) -> tuple[_Tensor, _Tensor | None]:
    """The critic's regression loss ``d(V, R)`` per sample (``loss_type``: ``"l1"``, ``"l2"`` or
    ``"smooth_l1"``) and, with ``clip_value``, PPO's value clipping: the prediction may move at
    most ``clip_value`` from ``old_value`` (the value stored at collection) and the larger of the
    clipped and unclipped errors is kept. Returns ``(loss, fraction of clipped values or None)``.

    Examples:
        >>> import torch
        >>> value_loss(torch.tensor([0.0, 3.0]), torch.tensor([0.5, 0.0]), "l2")
        (tensor([0.2500, 9.0000]), None)
        >>> value_loss(torch.tensor([3.0]), torch.tensor([0.0]), "l2", old_value=torch.tensor([2.0]), clip_value=0.5)
        (tensor([9.]), tensor(1.))
    """
    loss = distance(value, target, loss_type)
    if clip_value is None or old_value is None:
        return loss, None
    delta = value - old_value
    clipped = delta.clamp(-clip_value, clip_value)  # pyright: ignore[reportCallIssue, reportArgumentType]  # (tensor bounds: torch's stubs miss them)
    loss = torch.maximum(loss, distance(old_value + clipped, target, loss_type))
    fraction = delta.ne(clipped).to(value.dtype).mean()
    return loss, fraction


def entropy_loss(entropy: _Tensor, coeff: float | _Tensor) -> _Tensor:
    """``-coeff * H``: the entropy bonus as a loss to minimise.

    Examples:
        >>> import torch
        >>> entropy_loss(torch.tensor([1.0, 2.0]), 0.01)
        tensor([-0.0100, -0.0200])
    """
    return -coeff * entropy


def approx_kl(log_weight: _Tensor) -> _Tensor:
    """``mean(log pi_old - log pi)``: the sample estimate of ``KL(pi_old || pi)`` PPO reports.

    Examples:
        >>> import torch
        >>> approx_kl(torch.tensor([0.1, -0.3]))
        tensor(0.1000)
    """
    return log_weight.detach().mean().neg()


def effective_sample_size(log_weight: _Tensor) -> _Tensor:
    """(No gradient.) The normalised effective sample size of the importance weights ``w = exp(log_weight)``:
    ``(sum w)^2 / sum w^2 / n``, 1 when all weights are equal (computed from the normalised
    weights ``softmax(log_weight)``, so large log-weights do not overflow).

    Examples:
        >>> import torch
        >>> effective_sample_size(torch.zeros(4)), effective_sample_size(torch.tensor([0.0, -1e9]))
        (tensor(1.), tensor(0.5000))
    """
    p = torch.softmax(log_weight.detach().reshape(-1), 0)
    return p.square().sum().mul_(p.numel()).reciprocal_()


def explained_variance(value: _Tensor, target: _Tensor) -> _Tensor:
    """``1 - mean((R - V)^2) / var(R)`` (population variance, at least 1e-8): 1 for a perfect
    critic, 0 for one predicting the mean return.

    Examples:
        >>> import torch
        >>> explained_variance(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0]))
        tensor(1.)
    """
    value, target = value.detach(), target.detach()
    residual = (target - value).square().mean()
    return residual.div_(target.var(correction=0).clamp_min_(1e-8)).neg_().add_(1)
