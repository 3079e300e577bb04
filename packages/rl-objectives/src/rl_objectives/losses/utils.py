"""Small helpers the losses share: the distance between predictions and targets, reductions, checks.

:func:`distance_loss` is public (TorchRL's ``torchrl.objectives.utils.distance_loss``); the
underscored helpers are for the loss modules of this package: argument checks made once at
construction, the per-step shape rule checked at call time, and the construction of the bootstrapped
(TD) value estimator that the off-policy losses feed with next-state values they computed themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["distance_loss"]

_LOSS_FUNCTIONS = ("l1", "l2", "smooth_l1")
_REDUCTIONS = ("mean", "sum", "none")


def distance_loss(
    v1: torch.Tensor,
    v2: torch.Tensor,
    loss_function: str = "l2",
    strict_shape: bool = True,
) -> torch.Tensor:
    """Element-wise distance between ``v1`` and ``v2`` (not reduced).

    Args:
        v1: predictions.
        v2: targets.
        loss_function: ``"l1"`` (``|v1 - v2|``), ``"l2"`` (``(v1 - v2) ** 2``) or ``"smooth_l1"``
            (Huber with ``beta=1``: quadratic below 1, linear above).
        strict_shape: when ``True`` (default), ``v1`` and ``v2`` must have the same shape; when
            ``False`` they are broadcast against each other.

    Returns:
        The distances, shaped like ``v1`` (or the broadcast shape).

    Raises:
        ValueError: for an unknown ``loss_function`` or, with ``strict_shape``, different shapes.

    Example:
        >>> import torch
        >>> from rl_objectives.losses.utils import distance_loss
        >>> distance_loss(torch.tensor([0.0, 2.0]), torch.tensor([0.5, 0.0]), "smooth_l1")
        tensor([0.1250, 1.5000])
        >>> distance_loss(torch.tensor([1.0]), torch.tensor([3.0]), "l2")
        tensor([4.])
    """
    _check_loss_function("distance_loss", loss_function)
    if strict_shape and v1.shape != v2.shape:
        raise ValueError(
            f"distance_loss: v1 has shape {tuple(v1.shape)} but v2 has shape {tuple(v2.shape)}; "
            "they must match (pass strict_shape=False to broadcast)."
        )
    if loss_function == "l2":
        return (v1 - v2).pow(2)
    if loss_function == "l1":
        return (v1 - v2).abs()
    if not strict_shape:
        v1, v2 = torch.broadcast_tensors(v1, v2)
    return F.smooth_l1_loss(v1, v2, reduction="none")


def _check_loss_function(owner: str, loss_function: Any) -> str:
    if loss_function not in _LOSS_FUNCTIONS:
        raise ValueError(f"{owner}: loss_function must be one of {list(_LOSS_FUNCTIONS)}, got {loss_function!r}.")
    return loss_function


def _check_reduction(owner: str, reduction: Any) -> str:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{owner}: reduction must be one of {list(_REDUCTIONS)}, got {reduction!r}.")
    return reduction


def _reduce(tensor: torch.Tensor, reduction: str) -> torch.Tensor:
    """``"mean"`` / ``"sum"`` over every element, or the tensor itself for ``"none"``."""
    if reduction == "mean":
        return tensor.mean()
    if reduction == "sum":
        return tensor.sum()
    return tensor


def _get(owner: str, tensordict: Any, key: Any) -> Any:
    """``tensordict.get(key)`` with an error naming the loss, the key and the keys present."""
    try:
        return tensordict.get(key)
    except KeyError:
        raise KeyError(
            f"{owner}: the input misses {key!r}; keys present: {sorted(map(str, tensordict.keys(True, True)))}."
        ) from None


def _check_batch_shaped(owner: str, named: Mapping[Any, torch.Tensor], batch_size: torch.Size, lead: tuple = ()) -> None:
    """Every tensor of ``named`` (key -> tensor) has the shape ``lead + batch_size``.

    Per-step scalars (rewards, values, log-probs) carry no trailing singleton dim: a ``[B, 1]``
    network output next to a ``[B]`` reward is a bug upstream, reported here instead of broadcast.
    """
    expected = torch.Size(lead) + torch.Size(batch_size)
    for key, value in named.items():
        if value.shape != expected:
            hint = " (drop the trailing singleton dim, e.g. squeeze a 1-wide network head)" if value.shape == expected + (1,) else ""
            raise ValueError(
                f"{owner}: {key!r} has shape {tuple(value.shape)}, expected {tuple(expected)} "
                f"(batch_size {tuple(batch_size)}); per-step scalars have the batch shape, they are never broadcast{hint}."
            )


def _sum_to_batch(log_prob: torch.Tensor, batch_dims: int) -> torch.Tensor:
    """Sum a distribution's log-prob over the dims beyond the TensorDict's batch dims."""
    if log_prob.dim() > batch_dims:
        return log_prob.sum(tuple(range(batch_dims, log_prob.dim())))
    return log_prob


def _set_next_value(tensordict: Any, value_key: Any, next_value: torch.Tensor) -> Any:
    """A shallow copy of ``tensordict`` holding ``next_value`` at ``("next", value_key)``.

    The caller's TensorDict is left untouched: the copy shares the tensors, not the structure.
    """
    work = tensordict.copy()
    work.get("next").set(value_key, next_value)
    return work


def _make_bootstrapped_estimator(loss: Any, value_type: Any, hyperparams: Mapping[str, Any]) -> Any:
    """A TD(0) / TD(1) / TD(lambda) estimator without a value network.

    The off-policy losses compute the next-state value themselves (target networks, clipped double
    Q, entropy bonus), write it at ``("next", value)`` of a copy of the batch and ask the estimator
    only for the bootstrapped return: the estimator never runs a network.
    """
    from ..value import TD0Estimator, TD1Estimator, TDLambdaEstimator, ValueEstimators  # local: keeps utils import-light

    owner = type(loss).__name__
    if value_type is None:
        value_type = loss.default_value_estimator
    try:
        value_type = ValueEstimators(value_type)
    except ValueError:
        raise ValueError(f"{owner}.make_value_estimator: unknown value_type {value_type!r}; accepted: {[m.value for m in ValueEstimators]}.") from None
    if value_type is ValueEstimators.TD0:
        cls, allowed = TD0Estimator, ("gamma",)
    elif value_type is ValueEstimators.TD1:
        cls, allowed = TD1Estimator, ("gamma",)
    elif value_type is ValueEstimators.TDLambda:
        cls, allowed = TDLambdaEstimator, ("gamma", "lmbda")
    else:
        raise NotImplementedError(
            f"{owner}: value_type {value_type.value!r} is not implemented for this loss; use TD(0), TD(1) or TD(lambda)."
        )
    kwargs = loss._value_kwargs(hyperparams, allowed)
    if "value_network" in kwargs:
        raise ValueError(f"{owner}.make_value_estimator: value_network is set by the loss (the next-state values are computed by it).")
    estimator = cls(value_network=None, **kwargs)
    loss.value_type = value_type
    loss.value_estimator = estimator
    return estimator
