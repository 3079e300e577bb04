"""DiscreteSACLoss: soft actor-critic over a finite action set (Christodoulou, 2019).

With a finite action set the expectations over the policy are exact sums over the actions, so nothing
is sampled and no reparameterisation is needed:

- critics: ``Q_i(s, a)`` (the stored action's entry of each critic's action values) regress onto
  ``r + gamma * (1 - terminated) * sum_a' pi(a'|s') (min_i Q'_i(s', a') - alpha * log pi(a'|s'))``;
- actor: minimise ``sum_a pi(a|s) (alpha * log pi(a|s) - min_i Q_i(s, a))`` (critics detached);
- temperature: minimise ``-log_alpha * (sum_a pi log pi + target_entropy)`` with
  ``target_entropy = target_entropy_weight * log(num_actions)`` for ``"auto"``.

The module also holds the discrete-action helpers (action space from a string or spec, the stored
action's entry of a ``[..., n]`` value tensor) that DiscreteIQLLoss and DiscreteCQLLoss use.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from tdict import TensorDict
from tdict.specs import Categorical, Composite, MultiOneHot, OneHot

from .utils import (
    _BootstrappedLoss,
    _check_alpha_bounds,
    _check_positive_int,
    _get,
    _reduce,
    _TemperatureMixin,
    distance_loss,
)

__all__ = ["DiscreteSACLoss"]

# how a loss reads the stored action: an index ("categorical") or a (multi-)one-hot vector
_SPACES = {
    "one_hot": "one_hot",
    "one-hot": "one_hot",
    "mult_one_hot": "one_hot",
    "multi_one_hot": "one_hot",
    "categorical": "categorical",
}


def _resolve_action_space(owner: str, action_space: Any, action_key: Any) -> str | None:
    """``"one_hot"`` / ``"categorical"`` from a name or a spec; ``None`` stays ``None`` (decided per call)."""
    if action_space is None:
        return None
    if isinstance(action_space, str):
        if action_space not in _SPACES:
            raise ValueError(f"{owner}: action_space must be one of {sorted(_SPACES)} or a spec, got {action_space!r}.")
        return _SPACES[action_space]
    spec = action_space
    if isinstance(spec, Composite):
        if action_key not in spec:
            raise ValueError(f"{owner}: the action_space Composite spec has no {action_key!r} entry.")
        spec = spec[action_key]
    if isinstance(spec, (OneHot, MultiOneHot)):
        return "one_hot"
    if isinstance(spec, Categorical):
        return "categorical"
    raise ValueError(f"{owner}: cannot read an action space from a {type(spec).__name__}; expected OneHot, MultiOneHot or Categorical (or a name).")


def _discrete_space(owner: str, space: str | None, action: torch.Tensor, values_shape: torch.Size, batch: torch.Size, key: Any) -> str:
    """Check the stored action against ``values_shape`` (``[*batch, n]``) and return its space.

    ``space=None`` decides from the shape: the batch shape is an index, the values' shape a one-hot.
    """
    if space is None:
        if action.shape == batch:
            space = "categorical"
        elif action.shape == values_shape:
            space = "one_hot"
    expected = batch if space == "categorical" else values_shape
    if space is None or action.shape != expected:
        raise ValueError(
            f"{owner}: the action {key!r} has shape {tuple(action.shape)}; expected {tuple(batch)} (an index) "
            f"or {tuple(values_shape)} (one-hot over the actions){'' if space is None else f' for action_space={space!r}'}."
        )
    if space == "categorical" and (action.is_floating_point() or action.dtype is torch.bool):
        raise ValueError(f"{owner}: a categorical action {key!r} must hold integer indices, got dtype {action.dtype}.")
    return space


def _chosen(values: torch.Tensor, action: torch.Tensor, space: str) -> torch.Tensor:
    """The stored action's entry of ``values`` (``[*lead, *batch, n]`` -> ``[*lead, *batch]``)."""
    if space == "categorical":
        index = action.long().unsqueeze(-1).expand(*values.shape[:-1], 1)
        return values.gather(-1, index).squeeze(-1)
    return (values * action.to(values.dtype)).sum(-1)


def _probs_and_log_probs(owner: str, dist: Any, n_actions: int | None, batch: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    """The policy's ``[*batch, n]`` probabilities and their logs (``log 0`` read as ``log 1e-8``, as TorchRL)."""
    probs = getattr(dist, "probs", None)
    if probs is None:
        raise TypeError(f"{owner}: the actor's {type(dist).__name__} has no probs; use Categorical or OneHotCategorical.")
    if probs.shape[:-1] != batch or (n_actions is not None and probs.shape[-1] != n_actions):
        raise ValueError(
            f"{owner}: the actor's probabilities have shape {tuple(probs.shape)}, expected {tuple(batch)} plus "
            f"{'the number of actions' if n_actions is None else f'({n_actions},) (num_actions)'}."
        )
    # a masked action has probability 0: its log is finite so that 0 * log 0 contributes 0
    log_probs = torch.log(torch.where(probs == 0, torch.full_like(probs, 1e-8), probs))
    return probs, log_probs


class DiscreteSACLoss(_TemperatureMixin, _BootstrappedLoss):
    """The discrete SAC loss (TorchRL's ``DiscreteSACLoss``).

    Args:
        actor_network: a probabilistic actor whose ``get_dist`` gives a ``Categorical`` or
            ``OneHotCategorical`` over the actions (its ``probs`` are read).
        qvalue_network: a Q-network reading the observation and writing ``"action_value"``
            (``[*B, num_actions]``); trained as an ensemble of ``num_qvalue_nets``.

    Keyword Args:
        action_space: ``"one_hot"`` (also ``"one-hot"``, ``"mult_one_hot"``) or ``"categorical"``, or an
            action spec: how the stored action is read. ``None``: decided per call from its shape.
        num_actions: the number of actions (for ``target_entropy="auto"`` and shape checks).
        num_qvalue_nets: size of the Q ensemble (default 2).
        loss_function: ``"smooth_l1"`` (default), ``"l1"`` or ``"l2"`` for the critics.
        alpha_init: initial temperature (default 1.0).
        min_alpha, max_alpha: clamp the temperature used in the losses (``None``: no bound).
        fixed_alpha: keep the temperature fixed (``log_alpha`` is then a buffer).
        target_entropy_weight: the fraction of the maximal entropy ``log(num_actions)`` that
            ``"auto"`` targets (default 0.98).
        target_entropy: a number, or ``"auto"``.
        delay_qvalue: keep target Q parameters for the bootstrap (default ``True``).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Returns from ``forward`` a TensorDict with ``"loss_actor"``, ``"loss_qvalue"`` (summed over the
    ensemble), ``"loss_alpha"``, and the detached ``"alpha"`` and ``"entropy"`` (the policy's exact
    entropy, averaged over the batch). Writes the detached absolute TD error (max over the ensemble)
    into the input at ``"td_error"``.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import OneHotCategorical, ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential, TensorDictModule
        >>> from rl_objectives.losses.discrete_sac import DiscreteSACLoss
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(nn.Linear(3, 4), in_keys=["observation"], out_keys=["logits"]),
        ...     ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], distribution_class=OneHotCategorical))
        >>> qvalue = TensorDictModule(nn.Linear(3, 4), in_keys=["observation"], out_keys=["action_value"])
        >>> loss = DiscreteSACLoss(actor, qvalue, action_space="one_hot", num_actions=4)
        >>> td = TensorDict({"observation": torch.randn(5, 3), "action": nn.functional.one_hot(torch.randint(4, (5,)), 4),
        ...     "next": {"observation": torch.randn(5, 3), "reward": torch.randn(5),
        ...              "done": torch.zeros(5, dtype=torch.bool), "terminated": torch.zeros(5, dtype=torch.bool)}},
        ...     batch_size=[5])
        >>> sorted(loss(td).keys())
        ['alpha', 'entropy', 'loss_actor', 'loss_alpha', 'loss_qvalue']
        >>> round(loss.target_entropy, 4)
        1.3586
    """

    default_keys: ClassVar[dict] = {
        "action": "action",
        "action_value": "action_value",
        "value": "state_value",
        "priority": "td_error",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    }
    out_keys: ClassVar[list] = ["loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"]

    def __init__(
        self,
        actor_network: Any,
        qvalue_network: Any,
        *,
        action_space: Any = None,
        num_actions: int,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        fixed_alpha: bool = False,
        target_entropy_weight: float = 0.98,
        target_entropy: float | str = "auto",
        delay_qvalue: bool = True,
        reduction: str = "mean",
    ) -> None:
        super().__init__(loss_function=loss_function, reduction=reduction)
        owner = "DiscreteSACLoss"
        self.action_space = _resolve_action_space(owner, action_space, self.default_keys["action"])
        _check_positive_int(owner, "num_actions", num_actions)
        _check_positive_int(owner, "num_qvalue_nets", num_qvalue_nets)
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(f"{owner}: actor_network must be a probabilistic module with get_dist, got {type(actor_network).__name__}.")
        _check_alpha_bounds(owner, alpha_init, min_alpha, max_alpha)
        if target_entropy == "auto":
            if not 0 < target_entropy_weight <= 1:
                raise ValueError(f"{owner}: target_entropy_weight must be in (0, 1], got {target_entropy_weight!r}.")
            resolved = float(target_entropy_weight * math.log(num_actions))
        elif isinstance(target_entropy, (int, float)) and not isinstance(target_entropy, bool):
            resolved = float(target_entropy)
        else:
            raise ValueError(f"{owner}: target_entropy must be a number or 'auto', got {target_entropy!r}.")
        self.num_actions = num_actions
        self.num_qvalue_nets = num_qvalue_nets
        self.delay_qvalue = bool(delay_qvalue)
        self.target_entropy = resolved
        self.convert_to_functional(actor_network, "actor_network")
        self.convert_to_functional(qvalue_network, "qvalue_network", expand_dim=num_qvalue_nets, create_target_params=self.delay_qvalue)
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha)

    def _policy(self, tensordict: Any) -> tuple[torch.Tensor, torch.Tensor]:
        with self.params_of("actor_network").to_module(self.actor_network):
            dist = self.actor_network.get_dist(tensordict.copy())
        return _probs_and_log_probs("DiscreteSACLoss", dist, self.num_actions, tensordict.batch_size)

    def _action_values(self, tensordict: Any, **kwargs: Any) -> torch.Tensor:
        """The ensemble's action values, ``[num_qvalue_nets, *batch, num_actions]``."""
        out = self.call_network("qvalue_network", tensordict.copy(), **kwargs)
        key = self.tensor_keys.action_value
        values = _get("DiscreteSACLoss", out, key)
        expected = (self.num_qvalue_nets, *tensordict.batch_size, self.num_actions)
        if values.shape != expected:
            raise ValueError(f"DiscreteSACLoss: {key!r} has shape {tuple(values.shape[1:])} per critic, expected {expected[1:]} (batch shape plus num_actions).")
        return values

    def forward(self, tensordict: Any) -> TensorDict:
        keys = self.tensor_keys
        batch = tensordict.batch_size
        action = _get("DiscreteSACLoss", tensordict, keys.action)
        next_td = _get("DiscreteSACLoss", tensordict, "next")
        alpha = self._alpha
        space = _discrete_space("DiscreteSACLoss", self.action_space, action, batch + (self.num_actions,), batch, keys.action)

        with torch.no_grad():
            next_probs, next_log_probs = self._policy(next_td)
            next_q = self._action_values(next_td, target=self.delay_qvalue).min(0).values
            next_value = (next_probs * (next_q - alpha * next_log_probs)).sum(-1)
            target = self._bootstrap(tensordict, next_value)
        pred = _chosen(self._action_values(tensordict), action, space)
        loss_qvalue = _reduce(distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0), self.reduction)

        probs, log_probs = self._policy(tensordict)
        min_q = self._action_values(tensordict, params=self.params_of("qvalue_network").detach()).min(0).values
        loss_actor = _reduce((probs * (alpha * log_probs - min_q)).sum(-1), self.reduction)
        neg_entropy = (probs * log_probs).sum(-1).detach()
        loss_alpha = _reduce(-self.log_alpha * (neg_entropy + self.target_entropy), self.reduction)

        tensordict.set(keys.priority, (pred.detach() - target).abs().max(0).values)
        return TensorDict(loss_actor=loss_actor, loss_qvalue=loss_qvalue, loss_alpha=loss_alpha, alpha=alpha, entropy=-neg_entropy.mean())

