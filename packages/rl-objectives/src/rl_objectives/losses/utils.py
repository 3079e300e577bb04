"""Small helpers the losses share: the distance between predictions and targets, reductions, checks.

:func:`distance_loss` is public (TorchRL's ``torchrl.objectives.utils.distance_loss``); the
underscored helpers are for the loss modules of this package: argument checks made once at
construction, the per-step shape rule checked at call time, and the construction of the bootstrapped
(TD) value estimator that the off-policy losses feed with next-state values they computed themselves.
:class:`_BootstrappedLoss` is the private base of those off-policy losses (DQN, DDPG, TD3, SAC);
:class:`_TemperatureMixin` holds the entropy temperature of the SAC family.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import torch
from tdict.nn import sum_to_batch as _sum_to_batch  # noqa: F401  (re-exported: the losses reduce log-probs with it)
from tdict.validation import check_one_of, check_positive

from .._stack import user_stacklevel as _user_stacklevel
from ..functional.distance import LOSS_TYPES, distance
from .common import _PLAIN_REDUCTIONS, LossModule
from .loss_mask import align_mask, masked_reduce

__all__ = ["distance_loss"]

_REDUCTIONS = ("mean", "sum", "none")
_SCALAR_OUTPUT_MODES = ("exclude", "non_tensor")
_PRIORITIZED = (True, False, "auto")


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

    Examples:
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
    return distance(v1, v2, loss_function)


def _check_loss_function(owner: str, loss_function: Any) -> str:
    return check_one_of(owner, "loss_function", loss_function, LOSS_TYPES)


def _check_reduction(owner: str, reduction: Any) -> str:
    return check_one_of(owner, "reduction", reduction, _REDUCTIONS)


def _check_bool(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{owner}: {name} must be a bool, got {type(value).__name__}.")
    return value


def _check_scalar_output_mode(owner: str, mode: Any, reduction: str, scalars: tuple) -> str | None:
    """TorchRL's ``scalar_output_mode``: what happens to the scalar diagnostics (``scalars``) when
    ``reduction="none"`` leaves the losses batch-shaped. ``"exclude"`` drops them, ``"non_tensor"``
    keeps them as non-tensor entries; ``None`` with ``reduction="none"`` warns and excludes them, as
    TorchRL does. With another reduction the mode has no effect (the scalars are ordinary entries).
    """
    if mode is not None and mode not in _SCALAR_OUTPUT_MODES:
        raise ValueError(
            f"{owner}: scalar_output_mode must be None or one of {list(_SCALAR_OUTPUT_MODES)}, got {mode!r}."
        )
    if reduction == "none" and mode is None:
        warnings.warn(
            f"{owner}(reduction='none') gives batch-shaped losses, so the scalars {list(scalars)} are left out of the "
            "output; pass scalar_output_mode='exclude' to silence this, or 'non_tensor' to keep them as non-tensor entries.",
            UserWarning,
            stacklevel=_user_stacklevel(),
        )
        mode = "exclude"
    return mode


def _loss_output(
    losses: Mapping[str, Any], scalars: Mapping[str, Any], reduction: str, mode: str | None, batch_size: Any
) -> Any:
    """The output TensorDict: with ``reduction="none"`` it has the input's ``batch_size`` (the losses
    are batch-shaped) and the scalar diagnostics follow ``scalar_output_mode``; otherwise every entry
    is a scalar of an empty batch."""
    from tdict import TensorDict  # local: keeps utils import-light

    if reduction != "none":
        return TensorDict({**losses, **scalars}, batch_size=[])
    out = TensorDict(dict(losses), batch_size=batch_size)
    if mode == "non_tensor":
        for key, value in scalars.items():
            out.set_non_tensor(key, value)
    return out


def _check_prioritized(owner: str, value: Any) -> bool | str:
    if not any(value is v or (isinstance(value, str) and value == v) for v in _PRIORITIZED):
        raise ValueError(f"{owner}: use_prioritized_weights must be True, False or 'auto', got {value!r}.")
    return value


def _reduce(tensor: torch.Tensor, reduction: str, weights: torch.Tensor | None = None) -> torch.Tensor:
    """``"mean"`` / ``"sum"`` over every element, or the tensor itself for ``"none"``.

    With importance ``weights`` (a prioritized buffer's, same shape as ``tensor``): the weighted
    mean ``sum(w * x) / sum(w)``, the weighted sum ``sum(w * x)``, or ``w * x``.
    """
    if weights is not None:
        weighted = tensor * weights
        if reduction == "mean":
            return weighted.sum() / weights.sum()
        return weighted.sum() if reduction == "sum" else weighted
    if reduction == "mean":
        return tensor.mean()
    if reduction == "sum":
        return tensor.sum()
    return tensor


def _masked_weighted_reduce(
    loss: torch.Tensor, valid: torch.Tensor | None, weights: torch.Tensor | None, reduction: str
) -> torch.Tensor:
    """``loss`` reduced with ``reduction`` over the positions ``valid`` keeps (``None``: all of them;
    else a mask of ``loss``'s shape), weighted by a prioritized buffer's ``weights`` when given
    (broadcast to ``loss``: every row of a stacked loss weighs alike; see :func:`_reduce`). Masked
    positions are selected out, not multiplied by zero: a NaN there reaches neither the loss nor its
    gradient (``"none"``: the loss, zero where masked)."""
    weights = None if weights is None else weights.expand_as(loss)
    if valid is None:
        return _reduce(loss, reduction, weights)
    if weights is None:
        return masked_reduce(loss, valid, reduction)
    if reduction == "none":
        return torch.where(valid, loss * weights, torch.zeros((), dtype=loss.dtype, device=loss.device))
    return _reduce(loss[valid], reduction, weights[valid])


def _present_keys(tensordict: Any) -> list[str]:
    """The (nested) leaf keys of ``tensordict``, sorted, for error messages."""
    return sorted(map(str, tensordict.keys(True, True)))


def _get(owner: str, tensordict: Any, key: Any) -> Any:
    """``tensordict.get(key)`` with an error naming the loss, the key and the keys present."""
    try:
        return tensordict.get(key)
    except KeyError:
        raise KeyError(f"{owner}: the input misses {key!r}; keys present: {_present_keys(tensordict)}.") from None


def _check_batch_shaped(
    owner: str, named: Mapping[Any, torch.Tensor], batch_size: torch.Size, lead: tuple = ()
) -> None:
    """Every tensor of ``named`` (key -> tensor) has the shape ``lead + batch_size``.

    Per-step scalars (rewards, values, log-probs) carry no trailing singleton dim: a ``[B, 1]``
    network output next to a ``[B]`` reward is a bug upstream, reported here instead of broadcast.
    """
    expected = torch.Size(lead) + torch.Size(batch_size)
    for key, value in named.items():
        if value.shape != expected:
            hint = (
                " (drop the trailing singleton dim, e.g. squeeze a 1-wide network head)"
                if value.shape == expected + (1,)
                else ""
            )
            raise ValueError(
                f"{owner}: {key!r} has shape {tuple(value.shape)}, expected {tuple(expected)} "
                f"(batch_size {tuple(batch_size)}); per-step scalars have the batch shape, they are never broadcast{hint}."
            )


def bootstrap_target(estimator: Any, tensordict: Any, next_value: torch.Tensor) -> torch.Tensor:
    """The network-free ``estimator``'s return on ``tensordict`` with ``next_value`` as the next-state
    value: TD(0) computes it directly (``target_from_next_value``); TD(1) / TD(lambda) read it from
    ``("next", value)`` of a shallow copy (the caller's TensorDict is left untouched)."""
    if estimator.value_network is None and hasattr(estimator, "target_from_next_value"):
        return estimator.target_from_next_value(tensordict, next_value)
    work = tensordict.copy()
    work.get("next").set(estimator.tensor_keys.value, next_value)
    return estimator.value_estimate(work)


def _make_bootstrapped_estimator(loss: Any, value_type: Any, hyperparams: Mapping[str, Any]) -> Any:
    """A TD(0) / TD(1) / TD(lambda) estimator without a value network.

    The off-policy losses compute the next-state value themselves (target networks, clipped double
    Q, entropy bonus), write it at ``("next", value)`` of a copy of the batch and ask the estimator
    only for the bootstrapped return: the estimator never runs a network.
    """
    from ..value import ValueEstimators  # local: keeps utils import-light

    bootstrapped = (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)
    return loss._build_value_estimator(value_type, hyperparams, bootstrapped, value_network=None)


class _BootstrappedLoss(LossModule):
    """Private base of the off-policy losses that regress onto a bootstrapped (TD) return.

    It checks and stores ``loss_function`` and ``reduction``, builds the network-free TD(0) / TD(1)
    / TD(lambda) estimator (:func:`_make_bootstrapped_estimator`), turns a next-state value the
    subclass computed into the regression target (:meth:`_bootstrap`), and reads a Q-network's
    batch-shaped ``"state_action_value"`` (:meth:`_q`; a subclass names its Q-network in
    ``_q_network``, an ensemble gets a leading dim).
    """

    # the prioritized buffer's importance weights enter the reduction (CQL: not, as in TorchRL)
    _weighs_priorities: ClassVar[bool] = True

    default_value_estimator = "TD(0)"
    default_value_kwargs: ClassVar[dict] = {"gamma": 0.99, "lmbda": 0.95}
    _q_network: ClassVar[str] = "qvalue_network"

    def __init__(
        self,
        *,
        loss_function: str,
        reduction: str,
        deactivate_vmap: bool = False,
        separate_losses: bool = False,
        use_prioritized_weights: bool | str = "auto",
        gamma: float | None = None,
        priority_key: Any = None,
    ) -> None:
        owner = type(self).__name__
        _check_loss_function(owner, loss_function)
        _check_reduction(owner, reduction)
        _check_bool(owner, "deactivate_vmap", deactivate_vmap)
        _check_bool(owner, "separate_losses", separate_losses)
        _check_prioritized(owner, use_prioritized_weights)
        super().__init__()
        self.loss_function = loss_function
        self.reduction = reduction
        self.deactivate_vmap = deactivate_vmap
        self.separate_losses = separate_losses
        self.use_prioritized_weights = use_prioritized_weights
        self._set_deprecated_ctor_args(gamma=gamma, priority_key=priority_key)

    def _policy_params(self, *networks: Any) -> list | None:
        """The parameters of ``networks`` with ``separate_losses`` (the ``compare_against`` of the
        critics built after them), else ``None``."""
        if not self.separate_losses:
            return None
        return [p for net in networks for p in net.parameters()]

    def _priority_weight(self, tensordict: Any) -> torch.Tensor | None:
        """The prioritized buffer's importance weights (``tensor_keys.priority_weight``) when this loss
        reads them (``use_prioritized_weights`` True or ``"auto"``) and the batch holds them."""
        if self.use_prioritized_weights is False or "priority_weight" not in self.default_keys:
            return None
        key = self.tensor_keys.priority_weight
        weights = tensordict.get(key, None)
        if weights is not None:
            _check_batch_shaped(type(self).__name__, {key: weights}, tensordict.batch_size)
        return weights

    def _reducer(self, tensordict: Any, mask: torch.Tensor | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
        """:meth:`~LossModule._reduce_loss` for every term of one batch: the reduction over the
        positions the loss mask keeps (:attr:`~LossModule.loss_mask_key`: the collector's
        ``("collector", "mask")`` by default, and ``mask``), weighted by the importance weights of a
        prioritized buffer when :meth:`_priority_weight` finds them (as TorchRL 0.14 does)."""
        weights = self._priority_weight(tensordict) if self._weighs_priorities else None
        valid = self._valid_positions(tensordict, mask)
        reduction = self.reduction
        if valid is None and weights is None:
            return _PLAIN_REDUCTIONS[reduction]
        return lambda loss: _masked_weighted_reduce(
            loss, None if valid is None else align_mask(valid, loss), weights, reduction
        )

    def make_value_estimator(self, value_type: Any = None, **hyperparams: Any) -> _BootstrappedLoss:
        """Build the bootstrapped estimator: TD(0) (default), TD(1) or TD(lambda); GAE raises."""
        _make_bootstrapped_estimator(self, value_type, hyperparams)
        return self

    def _bootstrap(self, tensordict: Any, next_value: torch.Tensor) -> torch.Tensor:
        """The estimator's return with ``next_value`` as the next-state value, checked batch-shaped.

        The estimator reads reward, done and terminated from ``tensordict["next"]``; ``tensordict``
        itself is not modified (the value goes into a shallow copy).
        """
        if not tensordict.batch_dims:  # one transition: the estimator runs on a batch of one
            return self._bootstrap(tensordict.unsqueeze(0), next_value.unsqueeze(0)).squeeze(0)
        target = bootstrap_target(self.value_estimator, tensordict, next_value)
        _check_batch_shaped(type(self).__name__, {"value_target": target}, tensordict.batch_size)
        return target

    def _q(self, tensordict: Any, **kwargs: Any) -> torch.Tensor:
        """The Q-network's ``state_action_value`` on ``tensordict``: ``[*batch]``, or
        ``[num_qvalue_nets, *batch]`` for an ensemble; ``kwargs`` go to :meth:`call_network`."""
        owner = type(self).__name__
        key = self.tensor_keys.state_action_value
        value = self.call_network(self._q_network, tensordict, out_key=key, **kwargs)
        ensemble = self._networks[self._q_network]  # expand_dim: None for a single network
        lead = () if ensemble is None else (ensemble,)
        _check_batch_shaped(owner, {key: value}, tensordict.batch_size, lead=lead)
        return value

    def _q_of_policy(self, tensordict: Any) -> torch.Tensor:
        """``Q(s, pi(s))`` of the deterministic ``actor_network``, the Q-network's parameters
        detached: a loss built on it trains the actor only. For an ensemble, only the first
        critic runs (``[*batch]``): the actor follows ``Q_1`` and the others would be wasted work."""
        return self._policy_and_q(tensordict)[1]

    def _policy_and_q(self, tensordict: Any) -> tuple[Any, torch.Tensor]:
        """:meth:`_q_of_policy` with the actor's output: ``(copy of tensordict holding pi(s), Q(s, pi(s)))``."""
        acted = self.call_network("actor_network", tensordict.copy())
        params = self._detached_params(self._q_network)
        if self._networks[self._q_network] is None:
            return acted, self._q(acted, params=params)
        key = self.tensor_keys.state_action_value
        value = self.call_network(self._q_network, acted, params=params[:1], out_key=key)[0]
        _check_batch_shaped(type(self).__name__, {key: value}, tensordict.batch_size)
        return acted, value


def _check_alpha_bounds(owner: str, alpha_init: Any, min_alpha: Any, max_alpha: Any) -> None:
    """``alpha_init`` > 0, ``min_alpha`` / ``max_alpha`` > 0 or ``None``, ``min_alpha <= max_alpha``."""
    check_positive(owner, "alpha_init", alpha_init)
    for name, value in (("min_alpha", min_alpha), ("max_alpha", max_alpha)):
        check_positive(owner, name, value, allow_none=True)
    if min_alpha is not None and max_alpha is not None and min_alpha > max_alpha:
        raise ValueError(f"{owner}: min_alpha ({min_alpha}) is above max_alpha ({max_alpha}).")


class _TemperatureMixin:
    """The entropy temperature of the SAC family, for a :class:`LossModule` subclass.

    :meth:`_init_temperature` registers ``log_alpha`` (a parameter, or a buffer with
    ``fixed_alpha``) and the optional clamp bounds; :attr:`_alpha` is the clamped temperature,
    detached (the losses that use it never train it; only ``loss_alpha`` reads ``log_alpha``).
    Check the arguments first with :func:`_check_alpha_bounds`.

    Scheduling: with ``fixed_alpha``, ``loss.log_alpha = math.log(0.05)`` writes the buffer in place
    (a learnt ``log_alpha`` is a parameter: the optimizer owns it); ``loss.target_entropy = -1.0``
    sets the entropy target; ``min_log_alpha`` / ``max_log_alpha`` are read at every call. The
    subclass stores the target in ``_target_entropy`` (``None``: inferred at the first call).
    """

    _schedulable_buffers = frozenset({"log_alpha"})
    _target_entropy: float | None = None
    log_alpha: torch.Tensor  # set by _init_temperature

    if TYPE_CHECKING:  # provided by the nn.Module (LossModule) this mixin is combined with

        def register_buffer(self, name: str, tensor: torch.Tensor | None, persistent: bool = True) -> None: ...

    @property
    def target_entropy(self) -> torch.Tensor | None:
        """The entropy target, a 0-dim tensor on ``log_alpha``'s device as in TorchRL (``None`` until
        the first call when it is inferred from the action); assign a number to change it."""
        if self._target_entropy is None:
            return None
        return torch.tensor(self._target_entropy, dtype=self.log_alpha.dtype, device=self.log_alpha.device)

    @target_entropy.setter
    def target_entropy(self, value: float | torch.Tensor) -> None:
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{type(self).__name__}: target_entropy must be a finite number, got {value!r}.")
        self._target_entropy = float(value)

    def _init_temperature(
        self, alpha_init: float, min_alpha: float | None, max_alpha: float | None, fixed_alpha: bool
    ) -> None:
        self.fixed_alpha = bool(fixed_alpha)
        self.min_log_alpha = None if min_alpha is None else math.log(min_alpha)
        self.max_log_alpha = None if max_alpha is None else math.log(max_alpha)
        log_alpha = torch.tensor(math.log(alpha_init))
        if self.fixed_alpha:
            self.register_buffer("log_alpha", log_alpha)
        else:
            self.log_alpha = torch.nn.Parameter(log_alpha)

    @property
    def _alpha(self) -> torch.Tensor:
        log_alpha = self.log_alpha.detach()  # no gradient, without entering no_grad
        if self.min_log_alpha is not None or self.max_log_alpha is not None:
            log_alpha = log_alpha.clamp(self.min_log_alpha, self.max_log_alpha)
        return log_alpha.exp()
