"""BCLoss: behaviour cloning (TorchRL's ``BCLoss``), supervised imitation of the actions in a dataset.

With ``a`` the dataset's action at state ``s`` and ``pi`` the actor:

- a probabilistic actor (a ``get_dist`` whose distribution is not a point mass): the negative
  log-likelihood ``-log pi(a|s)``, one value per step (the event dims summed), e.g. a ``TanhNormal``
  actor on continuous actions, or a ``Categorical`` / ``OneHotCategorical`` one on discrete actions
  (there it is the cross-entropy);
- a deterministic actor writing its prediction ``a_hat`` at the action key: ``(a_hat - a)^2`` per
  action element, or, when the dataset action is an integer (a class index), the cross-entropy of
  the logits ``a_hat`` (``[*B, n]``);
- ``loss_function`` given: that distance between the actor's output ``a_hat`` and ``a``.

The dataset action is a target: it is detached. Padded elements (``pad_mask``, ``True`` on padding)
count neither in the loss nor in its mean.

The arithmetic is :mod:`rl_objectives.functional.bc`'s; this module maps keys, runs the actor and
reduces over the real elements.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from tdict import TensorDict, unravel_key
from tdict.nn import Delta, TensorDictModuleBase
from tdict.nn import sum_to_batch as _sum_to_batch

from .._stack import user_stacklevel as _user_stacklevel
from ..functional.bc import bc_cross_entropy_loss, bc_nll_loss, bc_regression_loss
from .common import LossModule
from .loss_mask import align_mask
from .utils import _check_reduction, _get

__all__ = ["BCLoss"]

_LOSS_FUNCTIONS = ("l1", "l2", "mse", "smooth_l1", "cross_entropy")
_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


class BCLoss(LossModule):
    """The behaviour-cloning loss (TorchRL 0.14's ``BCLoss``): returns ``{"loss_bc": ...}``.

    Args:
        actor_network: the policy to train: a probabilistic actor (``ProbabilisticActor``, trained
            by negative log-likelihood) or any TensorDict module writing its predicted action at the
            action key (an ``Actor``; trained by regression, or by cross-entropy on integer actions).

    Keyword Args:
        loss_function: ``None`` (default: chosen from the actor and the data, see below), ``"l2"``
            (or ``"mse"``), ``"l1"``, ``"smooth_l1"``, ``"cross_entropy"`` (the actor writes logits
            ``[*B, n]`` at the action key; the data action is an index ``[*B]``, ``[*B, 1]`` or a
            one-hot ``[*B, n]``), or a callable ``(prediction, data_action) -> loss`` returning
            unreduced values (their leading dims the batch dims). With a name or a callable the
            actor is run and its output at the action key is compared with the data action.
        reduction: ``"mean"`` (default: over every real element), ``"sum"`` or ``"none"`` (the
            unreduced values, padded elements 0).

    With ``loss_function=None``: an actor whose ``get_dist`` gives a distribution that is not a
    point mass is trained by ``-log pi(a|s)`` (``[*B]``); a point mass (``Delta``, ``TanhDelta``) is
    compared through its location with ``"l2"``; a deterministic actor by ``"l2"`` on float
    actions and ``"cross_entropy"`` on integer ones.

    Keys (``set_keys``): ``action`` (``"action"``: the data's action, and where the actor writes its
    prediction: the actor runs on a shallow copy, the caller's TensorDict is not modified),
    ``pad_mask`` (``None``: no masking; a bool entry ``[*B]`` or ``[*B, ...]``, ``True`` on padded
    elements, broadcast over the trailing dims of the loss; ``set_keys(pad_mask=None)`` turns it off).
    The validity masks :attr:`~rl_objectives.LossModule.loss_mask_key` reads (the collector's
    ``("collector", "mask")`` by default) leave their invalid positions out the same way.
    As in TorchRL 0.14, an actor that writes ``"action"`` while the action key is another one still
    works, with a ``FutureWarning``; an actor that writes neither raises.

    Differences from TorchRL 0.14: a probabilistic actor on integer actions is trained by its
    log-likelihood (TorchRL applies the cross-entropy to the sampled action, which fails); a
    point-mass actor is recognised by its distribution rather than by its out-key names;
    ``reduction="none"`` keeps the shape with padded elements 0 (TorchRL returns the flat real
    elements), and a wholly padded batch gives 0 under ``"mean"`` (TorchRL: ``nan``).

    Returns from ``forward`` a TensorDict with ``"loss_bc"`` (batch size ``[]``; the input's batch
    size with ``reduction="none"``).

    Raises:
        ValueError: for a bad ``loss_function``/``reduction``, a prediction whose shape does not fit
            the data action, or a malformed ``pad_mask``. KeyError: when the action is missing.
        RuntimeError: when the actor writes no prediction at the action key (nor at ``"action"``).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import NormalParamExtractor, TensorDictModule
        >>> from rl_objectives import BCLoss
        >>> from rl_objectives.modules import Actor, ProbabilisticActor, TanhNormal
        >>> data = TensorDict(observation=torch.randn(8, 3), action=torch.rand(8, 2) * 2 - 1, batch_size=[8])
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()),
        ...                      in_keys=["observation"], out_keys=["loc", "scale"]),
        ...     in_keys=["loc", "scale"], distribution_class=TanhNormal)
        >>> loss = BCLoss(actor)                       # -log pi(a|s)
        >>> loss(data)["loss_bc"].shape
        torch.Size([])
        >>> deterministic = BCLoss(Actor(nn.Linear(3, 2), in_keys=["observation"]))  # (a_hat - a)^2
        >>> deterministic(data)["loss_bc"].backward()
    """

    actor_network: TensorDictModuleBase  # set by convert_to_functional

    default_keys: ClassVar[dict] = {"action": "action", "pad_mask": None}
    out_keys: ClassVar[list] = ["loss_bc"]

    def __init__(
        self,
        actor_network: Any,
        *,
        loss_function: str | Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
        reduction: str | None = None,
    ) -> None:
        reduction = "mean" if reduction is None else reduction
        _check_reduction("BCLoss", reduction)
        if loss_function is not None and not callable(loss_function) and loss_function not in _LOSS_FUNCTIONS:
            raise ValueError(
                f"BCLoss: loss_function must be None, a callable or one of {list(_LOSS_FUNCTIONS)}, got {loss_function!r}."
            )
        super().__init__()
        self.convert_to_functional(actor_network, "actor_network")
        self.loss_function = loss_function
        self.reduction = reduction

    @property
    def in_keys(self) -> list:
        """The keys the loss reads: the actor's in-keys, the action and, when set, the padding mask (sorted)."""
        keys = {unravel_key(k) for k in self.actor_network.in_keys} | {self.tensor_keys.action}
        if self.tensor_keys.pad_mask is not None:
            keys.add(self.tensor_keys.pad_mask)
        return sorted(keys, key=str)

    # ------------------------------------------------------------------ the actor's prediction
    def _prediction(self, tensordict: Any) -> torch.Tensor:
        """Runs the actor on a shallow copy; its output at the action key (TorchRL 0.14's rules)."""
        owner = type(self).__name__
        key = self.tensor_keys.action
        out = self.call_network("actor_network", tensordict.copy())
        pred = out.get(key)
        if pred is not tensordict.get(key):
            return pred
        legacy = out.get("action", None)
        if legacy is not None and legacy is not tensordict.get("action", None):
            warnings.warn(
                f"{owner}: the actor wrote its prediction at 'action' while the loss's action key is {key!r}. Reading the "
                "prediction from 'action' is deprecated (TorchRL 0.14; removal in 0.16): make the actor's out_keys "
                "match the loss's action key.",
                FutureWarning,
                stacklevel=_user_stacklevel(),
            )
            return legacy
        raise RuntimeError(
            f"{owner}: the actor did not write a prediction at {key!r} (its out_keys: {list(self.actor_network.out_keys)}); "
            "make the actor's out_keys match the loss's action key."
        )

    # ------------------------------------------------------------------ the per-element loss
    def _cross_entropy(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        owner = type(self).__name__
        # index [*B], TorchRL's [*B, 1] indices, or one-hot [*B, n]
        if target.shape not in (logits.shape, logits.shape[:-1], logits.shape[:-1] + (1,)):
            raise ValueError(
                f"{owner}: cross-entropy needs logits [*B, n] and an action index [*B] (or [*B, 1], or a one-hot [*B, n]); "
                f"got logits {tuple(logits.shape)} and the action {self.tensor_keys.action!r} {tuple(target.shape)}."
            )
        return bc_cross_entropy_loss(logits, target)

    def _distance(
        self,
        pred: torch.Tensor,
        target: torch.Tensor,
        loss_function: str | Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        owner = type(self).__name__
        if loss_function == "cross_entropy":
            return self._cross_entropy(pred, target)
        if callable(loss_function):
            return loss_function(pred, target)
        if pred.shape != target.shape:
            raise ValueError(
                f"{owner}: the prediction at {self.tensor_keys.action!r} has shape {tuple(pred.shape)} but the data action has "
                f"shape {tuple(target.shape)}; they must match."
            )
        return bc_regression_loss(pred, target, loss_function)

    def _loss(self, tensordict: Any, target: torch.Tensor) -> torch.Tensor:
        if self.loss_function is not None:
            return self._distance(self._prediction(tensordict), target, self.loss_function)
        if hasattr(self.actor_network, "get_dist"):
            with self.swapped("actor_network"):
                # (a probabilistic actor: get_dist checked above; nn.Module's typing does not know it)
                dist = self.actor_network.get_dist(tensordict.copy())  # pyright: ignore[reportCallIssue]
            if isinstance(dist, Delta):  # a point mass has no useful likelihood: regress its location
                return self._distance(dist.deterministic_sample, target, "l2")
            return bc_nll_loss(_sum_to_batch(dist.log_prob(target), tensordict.batch_dims))
        if target.dtype in _INT_DTYPES:
            return self._cross_entropy(self._prediction(tensordict), target)
        return self._distance(self._prediction(tensordict), target, "l2")

    # ------------------------------------------------------------------ reduction over real elements
    def _pad_mask(self, tensordict: Any, loss: torch.Tensor) -> torch.Tensor | None:
        key = self.tensor_keys.pad_mask
        if key is None:
            return None
        pad = tensordict.get(key, None)
        if pad is None:  # a batch without the entry is not padded (TorchRL)
            return None
        owner = type(self).__name__
        if not isinstance(pad, torch.Tensor) or pad.dtype != torch.bool:
            raise ValueError(
                f"{owner}: pad_mask {key!r} must be a bool tensor (True on padded elements), got {getattr(pad, 'dtype', type(pad).__name__)}."
            )
        if pad.ndim > loss.ndim or pad.shape != loss.shape[: pad.ndim]:
            raise ValueError(
                f"{owner}: pad_mask {key!r} has shape {tuple(pad.shape)}; it must be a leading part of the loss's shape "
                f"{tuple(loss.shape)} (a per-element mask needs an element-wise loss such as loss_function='l1')."
            )
        return ~pad.reshape(pad.shape + (1,) * (loss.ndim - pad.ndim))

    def _reduce(self, loss: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        if keep is not None:
            # select rather than multiply: padded elements may hold garbage (even nan) that must not leak
            loss = torch.where(keep, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))
        if self.reduction == "none":
            return loss
        if self.reduction == "sum":
            return loss.sum()
        if keep is None:
            return loss.mean()
        return loss.sum() / keep.expand_as(loss).sum().clamp_min(1)

    def forward(self, tensordict: Any) -> TensorDict:
        target = _get(type(self).__name__, tensordict, self.tensor_keys.action).detach()
        loss = self._loss(tensordict, target)
        keep = self._pad_mask(tensordict, loss)
        valid = self._valid_positions(tensordict)  # the collector's mask and the like
        if valid is not None:
            valid = align_mask(valid, loss)
            keep = valid if keep is None else keep & valid
        loss = self._reduce(loss, keep)
        batch_size = tensordict.batch_size if self.reduction == "none" else []
        return TensorDict({"loss_bc": loss}, batch_size=batch_size)
