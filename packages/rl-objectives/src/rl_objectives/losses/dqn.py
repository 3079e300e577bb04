"""DQNLoss: Q-learning on a replay batch, with a target network and optionally double DQN.

The regression target is the bootstrapped return ``r + gamma * (1 - terminated) * V'(s')`` where
``V'(s') = max_a Q_target(s', a)`` (the target network's ``"chosen_action_value"``), or with double
DQN ``Q_target(s', argmax_a Q(s', a))`` (action chosen by the online network, valued by the target).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict import TensorDict
from tdict.specs import Categorical, Composite, MultiOneHot, OneHot

from .utils import _BootstrappedLoss, _check_batch_shaped, _get, _reduce, distance_loss

__all__ = ["DQNLoss"]

# how the loss reads the taken action: an index ("categorical") or a (multi-)one-hot vector
_SPACES = {"one_hot": "one_hot", "one-hot": "one_hot", "mult_one_hot": "one_hot", "multi_one_hot": "one_hot", "categorical": "categorical"}


def _space_from_spec(spec: Any, action_key: Any) -> str | None:
    if isinstance(spec, Composite):
        spec = spec[action_key] if action_key in spec else None
    if isinstance(spec, (OneHot, MultiOneHot)):
        return "one_hot"
    if isinstance(spec, Categorical):
        return "categorical"
    if spec is None:
        return None
    raise ValueError(f"DQNLoss: cannot read an action space from a {type(spec).__name__} spec; expected OneHot, MultiOneHot or Categorical.")


def _find_action_space(value_network: Any, action_space: Any, action_key: Any) -> str | None:
    """The action space: given, else the network's (a QValueModule's ``action_space`` or its spec),
    else ``None`` (decided per call from the action's shape)."""
    if action_space is not None and not isinstance(action_space, str):
        return _space_from_spec(action_space, action_key)
    if action_space is not None:
        if action_space not in _SPACES:
            raise ValueError(f"DQNLoss: action_space must be one of {sorted(_SPACES)}, got {action_space!r}.")
        return _SPACES[action_space]
    for module in value_network.modules():
        found = getattr(module, "action_space", None)
        if isinstance(found, str) and found in _SPACES:
            return _SPACES[found]
    return _space_from_spec(getattr(value_network, "spec", None), action_key)


class DQNLoss(_BootstrappedLoss):
    """The DQN loss (TorchRL's ``DQNLoss``): regress ``Q(s, a)`` onto a bootstrapped target.

    Args:
        value_network: a Q-value actor (e.g. :class:`~rl_objectives.modules.QValueActor`) writing
            ``"action_value"`` (``[*B, n]``), the greedy ``"action"`` and ``"chosen_action_value"``
            (``[*B]``).

    Keyword Args:
        loss_function: ``"l2"`` (default), ``"l1"`` or ``"smooth_l1"``.
        delay_value: keep target parameters for the bootstrap (default ``True``); update them with
            :class:`~rl_objectives.HardUpdate` or :class:`~rl_objectives.SoftUpdate`. Without it the
            online parameters are used, detached.
        double_dqn: choose the next action with the online network and value it with the target one.
        action_space: ``"one_hot"`` (also ``"mult_one_hot"``) or ``"categorical"``, or an action spec.
            Default: the network's (a ``QValueModule``'s ``action_space``, or its ``spec``); when the
            network gives none, each call decides from the taken action's shape (the batch shape:
            an index; the batch shape plus the number of actions: a one-hot vector).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (per-sample losses).

    Reads ``"action"``, the network's in-keys, and ``("next", ...)``: the next observation,
    ``"reward"``, ``"done"``, ``"terminated"`` (batch-shaped). Returns a TensorDict with ``"loss"``.
    Like TorchRL it writes the detached squared TD error into the input at ``"td_error"`` (the
    ``priority`` key) for prioritized replay; it writes nothing else there.

    The target comes from the value estimator (TD(0) by default, ``gamma=0.99``); change it with
    ``make_value_estimator(ValueEstimators.TDLambda, gamma=..., lmbda=...)``.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.specs import OneHot
        >>> from rl_objectives.losses.dqn import DQNLoss
        >>> from rl_objectives.modules import QValueActor
        >>> actor = QValueActor(nn.Linear(3, 2), spec=OneHot(2))
        >>> loss = DQNLoss(actor)
        >>> td = TensorDict({"observation": torch.randn(5, 3), "action": OneHot(2).rand((5,)),
        ...     "next": {"observation": torch.randn(5, 3), "reward": torch.randn(5),
        ...              "done": torch.zeros(5, dtype=torch.bool), "terminated": torch.zeros(5, dtype=torch.bool)}},
        ...     batch_size=[5])
        >>> out = loss(td)
        >>> out["loss"].shape, td["td_error"].shape
        (torch.Size([]), torch.Size([5]))
    """

    default_keys: ClassVar[dict] = {
        "advantage": "advantage",
        "value_target": "value_target",
        "value": "chosen_action_value",
        "action_value": "action_value",
        "action": "action",
        "priority": "td_error",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    }
    out_keys: ClassVar[list] = ["loss"]

    def __init__(
        self,
        value_network: Any,
        *,
        loss_function: str = "l2",
        delay_value: bool = True,
        double_dqn: bool = False,
        action_space: Any = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(loss_function=loss_function, reduction=reduction)
        self.action_space = _find_action_space(value_network, action_space, self.default_keys["action"])
        self.delay_value = bool(delay_value)
        self.double_dqn = bool(double_dqn)
        self.convert_to_functional(value_network, "value_network", create_target_params=self.delay_value)

    def _chosen(self, action_value: torch.Tensor, action: torch.Tensor, space: str) -> torch.Tensor:
        if space == "categorical":
            return action_value.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        return (action_value * action.to(action_value.dtype)).sum(-1)

    def _space_of(self, action: torch.Tensor, action_value: torch.Tensor, batch_size: torch.Size) -> str:
        space = self.action_space
        key = self.tensor_keys.action
        if space is None:
            if action.shape == batch_size:
                space = "categorical"
            elif action.shape == action_value.shape:
                space = "one_hot"
        expected = batch_size if space == "categorical" else action_value.shape
        if space is None or action.shape != expected:
            raise ValueError(
                f"DQNLoss: the action {key!r} has shape {tuple(action.shape)}; expected {tuple(batch_size)} (an index) "
                f"or {tuple(action_value.shape)} (one-hot over the action values){'' if space is None else f' for action_space={space!r}'}."
            )
        if space == "categorical" and (action.is_floating_point() or action.dtype is torch.bool):
            raise ValueError(f"DQNLoss: a categorical action {key!r} must hold integer indices, got dtype {action.dtype}.")
        return space

    def forward(self, tensordict: Any) -> TensorDict:
        keys = self.tensor_keys
        batch = tensordict.batch_size
        action = _get("DQNLoss", tensordict, keys.action)
        next_td = _get("DQNLoss", tensordict, "next")

        online = self.call_network("value_network", tensordict.copy())
        action_value = _get("DQNLoss", online, keys.action_value)
        if action_value.shape[:-1] != batch:
            raise ValueError(
                f"DQNLoss: {keys.action_value!r} has shape {tuple(action_value.shape)}, expected the batch shape "
                f"{tuple(batch)} plus the number of actions."
            )
        space = self._space_of(action, action_value, batch)
        pred = self._chosen(action_value, action, space)

        with torch.no_grad():
            target_td = self.call_network("value_network", next_td.copy(), target=self.delay_value)
            if self.double_dqn:
                greedy = self.call_network("value_network", next_td.copy())
                next_action = _get("DQNLoss", greedy, keys.action)
                next_value = self._chosen(_get("DQNLoss", target_td, keys.action_value), next_action, space)
            else:
                next_value = _get("DQNLoss", target_td, keys.value)
            _check_batch_shaped("DQNLoss", {("next", keys.value): next_value}, batch)
            target = self._bootstrap(tensordict, next_value)

        tensordict.set(keys.priority, (pred.detach() - target).pow(2))
        loss = _reduce(distance_loss(pred, target, self.loss_function), self.reduction)
        return TensorDict(loss=loss)
