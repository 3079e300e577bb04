"""Decision Transformer losses: DTLoss (offline, action regression) and OnlineDTLoss (Online DT).

- :class:`DTLoss` (Chen et al., 2021): the distance between the actions the transformer predicts at
  each state token and the actions in the data.
- :class:`OnlineDTLoss` (Zheng et al., 2022): the negative log-likelihood of the data actions under
  the stochastic actor, minus ``alpha`` times the policy's entropy (estimated by Monte-Carlo with
  reparameterised samples), plus a temperature loss that moves ``alpha`` so the entropy tracks
  ``target_entropy``.

Both read batches of sequences: actions ``[*B, T, act_dim]``, one feature dim after the steps. The
steps ``[*B, T]`` may be batch dims of the TensorDict (``batch_size=[B, T]``) or live inside its
tensors (``batch_size=[B]``). Sequences padded to a common length carry a boolean ``"mask"``
(``[*B, T]``, ``True`` on real steps, settable with ``set_keys(mask=...)``): when the batch holds
it, padded steps count neither in the loss nor in its mean.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from tdict import TensorDict
from tdict.specs import Composite
from tdict.validation import check_positive_int
from tdict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential, TensorDictModuleBase
from tdict.nn import sum_to_batch as _sum_to_batch

from .common import LossModule
from .utils import (
    _check_alpha_bounds,
    _check_loss_function,
    _check_reduction,
    _check_scalar_output_mode,
    _get,
    _loss_output,
    _TemperatureMixin,
    distance_loss,
)

__all__ = ["DTLoss", "OnlineDTLoss"]


def _step_mask(owner: str, tensordict: Any, key: Any, action: torch.Tensor) -> torch.Tensor | None:
    """The padding mask ``[*B, T]`` at ``key`` if the batch holds one, checked against the action."""
    mask = tensordict.get(key, None)
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise ValueError(
            f"{owner}: the mask at {key!r} must be a bool tensor (True on real steps), got {getattr(mask, 'dtype', type(mask).__name__)}."
        )
    if mask.shape != action.shape[:-1]:
        raise ValueError(
            f"{owner}: the mask at {key!r} must have the per-step shape {tuple(action.shape[:-1])} "
            f"(the action {tuple(action.shape)} without its feature dim), got {tuple(mask.shape)}."
        )
    return mask


def _masked_reduce(values: torch.Tensor, mask: torch.Tensor | None, reduction: str) -> torch.Tensor:
    """Reduce ``values`` (``[*B, T, ...]``) over the real steps only.

    ``"mean"`` divides by the number of real elements, ``"sum"`` adds them, ``"none"`` returns
    ``values`` with padded steps set to 0. ``torch.where`` rather than a product: padded steps may
    hold garbage (even ``nan``) that must not leak into the loss or its gradient.
    """
    if mask is not None:
        wide = mask.reshape(mask.shape + (1,) * (values.ndim - mask.ndim))
        values = torch.where(wide, values, torch.zeros((), dtype=values.dtype, device=values.device))
    if reduction == "none":
        return values
    total = values.sum()
    if reduction == "sum":
        return total
    if mask is None:
        return total / values.numel()
    per_step = values[(0,) * mask.ndim].numel() if values.ndim > mask.ndim else 1  # elements in one step
    return total / (mask.sum() * per_step).clamp_min(1)


class DTLoss(LossModule):
    """The Decision Transformer loss: regress the predicted actions onto the data actions.

    The actor is run on a shallow copy of the batch (the caller's TensorDict is not modified); its
    prediction at ``action_pred`` is compared to the data's ``action_target`` (detached) with
    ``loss_function``, element-wise, then reduced over the real (unpadded) steps.

    Args:
        actor_network: the DT policy, e.g. a ``TensorDictModule`` around a
            :class:`~rl_objectives.modules.DTActor` (followed by a ``TanhDelta``
            ``ProbabilisticActor``), reading observation, action and return-to-go and writing the
            predicted action.

    Keyword Args:
        loss_function: ``"l2"`` (default), ``"l1"`` or ``"smooth_l1"``.
        reduction: ``"mean"`` (default: over every real element), ``"sum"`` or ``"none"``
            (``[*B, T, act_dim]``, padded steps 0).
        device: accepted for TorchRL's signature: the loss holds no tensors of its own to place
            (TorchRL does not use it either); a bad device raises.

    Keys (``set_keys``): ``action_target`` (``"action"``: the data), ``action_pred``
    (``"action"``: the actor's output; the actor writes it into the copy, the data stays intact),
    ``mask`` (``"mask"``: optional bool ``[*B, T]``, ``True`` on real steps).

    Returns from ``forward`` a TensorDict with ``"loss"``.

    Raises:
        ValueError: for a bad ``loss_function``/``reduction``, a prediction whose shape differs
            from the data action's, or a malformed mask. KeyError: when the action is missing.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives.modules.decision_transformer import DTActor
        >>> from rl_objectives.losses.decision_transformer import DTLoss
        >>> net = DTActor(3, 2, transformer_config={"n_embd": 16, "n_layer": 1, "n_head": 1, "n_inner": 32})
        >>> actor = TensorDictModule(net, in_keys=["observation", "action", "return_to_go"], out_keys=["action"])
        >>> loss = DTLoss(actor)
        >>> td = TensorDict(observation=torch.randn(4, 6, 3), action=torch.rand(4, 6, 2) * 2 - 1,
        ...                 return_to_go=torch.randn(4, 6), mask=torch.ones(4, 6, dtype=torch.bool), batch_size=[4, 6])
        >>> out = loss(td)
        >>> sorted(out.keys()), out["loss"].shape
        (['loss'], torch.Size([]))
    """

    actor_network: TensorDictModuleBase  # set by convert_to_functional

    default_keys: ClassVar[dict] = {"action_target": "action", "action_pred": "action", "mask": "mask"}
    out_keys: ClassVar[list] = ["loss"]

    def __init__(
        self, actor_network: Any, *, loss_function: str = "l2", reduction: str | None = "mean", device: Any = None
    ) -> None:
        reduction = "mean" if reduction is None else reduction
        _check_loss_function("DTLoss", loss_function)
        _check_reduction("DTLoss", reduction)
        if device is not None:
            torch.device(device)  # a bad device string raises here, naming it
        super().__init__()
        self.convert_to_functional(actor_network, "actor_network")
        self.loss_function = loss_function
        self.reduction = reduction

    @property
    def in_keys(self) -> list:
        """The keys the loss reads: the actor's in-keys and the target action (sorted)."""
        keys = set(self.actor_network.in_keys) | {self.tensor_keys.action_target}
        return sorted(keys, key=str)

    def forward(self, tensordict: Any) -> TensorDict:
        owner = type(self).__name__
        target = _get(owner, tensordict, self.tensor_keys.action_target).detach()
        mask = _step_mask(owner, tensordict, self.tensor_keys.mask, target)
        out = self.call_network("actor_network", tensordict.copy())
        pred = _get(owner, out, self.tensor_keys.action_pred)
        if pred.shape != target.shape:
            raise ValueError(
                f"{owner}: the predicted action {self.tensor_keys.action_pred!r} has shape {tuple(pred.shape)} but the data "
                f"action {self.tensor_keys.action_target!r} has shape {tuple(target.shape)}; they must match."
            )
        loss = _masked_reduce(distance_loss(pred, target, self.loss_function), mask, self.reduction)
        return TensorDict(loss=loss)


class OnlineDTLoss(_TemperatureMixin, LossModule):
    """The Online Decision Transformer loss (TorchRL's ``OnlineDTLoss``).

    With ``pi`` the actor's distribution at each state token, ``a`` the data actions and ``H`` the
    per-step entropy estimated as ``-mean_k log pi(x_k)`` over ``samples_mc_entropy``
    reparameterised samples ``x_k ~ pi``:

    - ``loss_log_likelihood = -reduce(log pi(a))``;
    - ``loss_entropy = -alpha * reduce(H)`` (``alpha`` detached: the entropy bonus trains the actor);
    - ``loss_alpha = exp(log_alpha) * (H - target_entropy)`` with ``H`` detached, so ``alpha``
      shrinks when the entropy is above its target and grows below it.

    ``reduce`` is ``reduction`` over the real steps (see the module docstring for the mask).

    Args:
        actor_network: a probabilistic actor whose ``get_dist`` gives a reparameterisable
            distribution over the action, e.g. a ``ProbabilisticActor`` with ``TanhNormal`` around
            an :class:`~rl_objectives.modules.OnlineDTActor`. Its ``log_prob`` of an action
            ``[*B, T, act_dim]`` is summed to ``[*B, T]``.

    Keyword Args:
        alpha_init: initial temperature (default 1.0, TorchRL's).
        min_alpha, max_alpha: clamp the temperature used in ``loss_entropy`` (``None``: no bound).
        fixed_alpha: keep the temperature fixed (``log_alpha`` is then a buffer).
        target_entropy: a number, or ``"auto"``: ``-prod(action shape)`` from the actor's spec, or,
            without a spec, from the distribution's event shape at the first call.
        samples_mc_entropy: samples per step for the entropy estimate (default 1).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (per step, ``[*B, T]``).
        scalar_output_mode: with ``reduction="none"``, ``"exclude"`` leaves ``"alpha"`` and
            ``"entropy"`` out of the output (which then has the input's batch size), ``"non_tensor"``
            keeps them as non-tensor entries; ``None`` excludes them with a warning, as TorchRL.

    Keys (``set_keys``): ``action_target`` (``"action"``), ``action_pred`` (``"action"``: the actor's
    action key, read in its spec for ``"auto"``), ``mask`` (``"mask"``, optional).

    Returns from ``forward`` a TensorDict with ``"loss_log_likelihood"``, ``"loss_entropy"``,
    ``"loss_alpha"`` and the detached ``"alpha"`` and ``"entropy"`` (mean over real steps).

    Raises:
        TypeError: when the actor has no ``get_dist``. ValueError: for bad arguments, a malformed
            mask, or a distribution without ``rsample``. RuntimeError: when the data action
            requires grad (it is a target, as in TorchRL).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives.modules import ProbabilisticActor, TanhNormal
        >>> from rl_objectives.modules.decision_transformer import OnlineDTActor
        >>> from rl_objectives.losses.decision_transformer import OnlineDTLoss
        >>> net = OnlineDTActor(3, 2, transformer_config={"n_embd": 16, "n_layer": 1, "n_head": 1, "n_inner": 32})
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(net, in_keys=["observation", "action", "return_to_go"], out_keys=["loc", "scale"]),
        ...     in_keys=["loc", "scale"], out_keys=["action"], distribution_class=TanhNormal)
        >>> loss = OnlineDTLoss(actor, alpha_init=0.1)
        >>> td = TensorDict(observation=torch.randn(4, 6, 3), action=torch.rand(4, 6, 2) * 2 - 1,
        ...                 return_to_go=torch.randn(4, 6), batch_size=[4, 6])
        >>> out = loss(td)
        >>> sorted(out.keys()), loss.target_entropy
        (['alpha', 'entropy', 'loss_alpha', 'loss_entropy', 'loss_log_likelihood'], tensor(-2.))
    """

    actor_network: ProbabilisticTensorDictModule | ProbabilisticTensorDictSequential  # set by convert_to_functional

    default_keys: ClassVar[dict] = {"action_target": "action", "action_pred": "action", "mask": "mask"}
    out_keys: ClassVar[list] = ["loss_log_likelihood", "loss_entropy", "loss_alpha", "alpha", "entropy"]

    def __init__(
        self,
        actor_network: Any,
        *,
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        fixed_alpha: bool = False,
        target_entropy: float | str = "auto",
        samples_mc_entropy: int = 1,
        reduction: str | None = "mean",
        scalar_output_mode: str | None = None,
    ) -> None:
        owner = "OnlineDTLoss"
        reduction = "mean" if reduction is None else reduction
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"{owner}: actor_network must be a probabilistic module with get_dist (e.g. ProbabilisticActor), got {type(actor_network).__name__}."
            )
        _check_alpha_bounds(owner, alpha_init, min_alpha, max_alpha)
        check_positive_int(owner, "samples_mc_entropy", samples_mc_entropy)
        _check_reduction(owner, reduction)
        mode = _check_scalar_output_mode(owner, scalar_output_mode, reduction, ("alpha", "entropy"))
        if target_entropy == "auto":
            resolved = self._entropy_from_spec(getattr(actor_network, "spec", None))
        elif isinstance(target_entropy, (int, float)) and not isinstance(target_entropy, bool):
            resolved = float(target_entropy)
        else:
            raise ValueError(f"{owner}: target_entropy must be a number or 'auto', got {target_entropy!r}.")
        super().__init__()
        self.convert_to_functional(actor_network, "actor_network")
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha)
        self._target_entropy = resolved
        self.samples_mc_entropy = samples_mc_entropy
        self.reduction = reduction
        self.scalar_output_mode = mode

    def _entropy_from_spec(self, spec: Any) -> float | None:
        """``-prod(action shape)`` from the actor's spec, or ``None`` to read the distribution later."""
        key = self.default_keys["action_pred"]
        if isinstance(spec, Composite):
            if key not in spec.keys(True, True):
                return None
            spec = spec[key]
        if spec is None:
            return None
        return -float(math.prod(spec.shape[-1:]))  # the action's feature dim; leading dims are steps

    @property
    def alpha(self) -> torch.Tensor:
        """The temperature used in the loss (clamped to ``[min_alpha, max_alpha]``), detached."""
        return self._alpha

    @property
    def in_keys(self) -> list:
        """The keys the loss reads: the actor's in-keys and the target action (sorted)."""
        return sorted(set(self.actor_network.in_keys) | {self.tensor_keys.action_target}, key=str)

    def get_entropy_bonus(self, dist: torch.distributions.Distribution, step_dims: int) -> torch.Tensor:
        """Per-step entropy ``-mean_k log pi(x_k)`` over ``samples_mc_entropy`` rsamples, ``[*B, T]``."""
        if not dist.has_rsample:
            raise ValueError(
                f"OnlineDTLoss: the actor's {type(dist).__name__} has no rsample; the entropy estimate needs a reparameterisable distribution (e.g. TanhNormal)."
            )
        samples = dist.rsample((self.samples_mc_entropy,))
        return -_sum_to_batch(dist.log_prob(samples), 1 + step_dims).mean(0)

    def forward(self, tensordict: Any) -> TensorDict:
        owner = type(self).__name__
        target = _get(owner, tensordict, self.tensor_keys.action_target)
        if target.requires_grad:
            raise RuntimeError(
                f"{owner}: the data action {self.tensor_keys.action_target!r} requires grad; it is a target and cannot be part of a graph."
            )
        mask = _step_mask(owner, tensordict, self.tensor_keys.mask, target)
        step_dims = target.ndim - 1
        with self.swapped("actor_network"):
            dist = self.actor_network.get_dist(tensordict.copy())
        log_prob = _sum_to_batch(dist.log_prob(target), step_dims)
        entropy = self.get_entropy_bonus(dist, step_dims)
        for name, value in (("log_prob", log_prob), ("entropy", entropy)):
            if value.shape != target.shape[:-1]:
                raise ValueError(
                    f"{owner}: the actor's {name} has shape {tuple(value.shape)}, expected the per-step shape {tuple(target.shape[:-1])}."
                )
        if self._target_entropy is None:
            self._target_entropy = (
                -float(math.prod(dist.event_shape)) if len(dist.event_shape) else -float(target.shape[-1])
            )
        mean_entropy = _masked_reduce(entropy.detach(), mask, "mean")
        alpha = self._alpha
        # mean/sum over real steps of (H - target): the temperature sees the same steps as the losses
        entropy_gap = _masked_reduce(entropy.detach() - self._target_entropy, mask, self.reduction)
        losses = {
            "loss_log_likelihood": -_masked_reduce(log_prob, mask, self.reduction),
            "loss_entropy": -alpha * _masked_reduce(entropy, mask, self.reduction),
            "loss_alpha": self.log_alpha.exp() * entropy_gap,
        }
        scalars = {"alpha": alpha, "entropy": mean_entropy}
        return _loss_output(losses, scalars, self.reduction, self.scalar_output_mode, tensordict.batch_size)
