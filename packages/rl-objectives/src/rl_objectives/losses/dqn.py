"""DQNLoss: Q-learning on a replay batch, with a target network and optionally double DQN.

The regression target is the bootstrapped return ``r + gamma * (1 - terminated) * V'(s')`` where
``V'(s') = max_a Q_target(s', a)`` (the target network's ``"chosen_action_value"``), or with double
DQN ``Q_target(s', argmax_a Q(s', a))`` (action chosen by the online network, valued by the target).
The arithmetic is :mod:`rl_objectives.functional.dqn`'s; this module maps keys and runs the networks.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict import TensorDict

from ..functional.dqn import chosen_action_value, squared_td_error, td_loss
from ._actions import check_action_values, check_discrete_action, resolve_action_space
from .utils import _BootstrappedLoss, _check_batch_shaped, _get

__all__ = ["DQNLoss"]


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
        use_prioritized_weights: ``"auto"`` (default) or ``True``: when the batch holds
            ``"priority_weight"`` (a prioritized buffer's importance weights, the ``priority_weight``
            key), the loss is ``sum(w * l) / sum(w)`` (``"sum"``: ``sum(w * l)``, ``"none"``:
            ``w * l``); ``False`` ignores them.
        gamma: deprecated (``DeprecationWarning``): the value estimator's discount; use
            ``make_value_estimator(gamma=...)``.
        priority_key: deprecated (``DeprecationWarning``): use ``set_keys(priority=...)``.

    Reads ``"action"``, the network's in-keys, and ``("next", ...)``: the next observation,
    ``"reward"``, ``"done"``, ``"terminated"`` (batch-shaped). Returns a TensorDict with ``"loss"``.
    Like TorchRL it writes the detached squared TD error into the input at ``"td_error"`` (the
    ``priority`` key) for prioritized replay; it writes nothing else there.

    The target comes from the value estimator (TD(0) by default, ``gamma=0.99``); change it with
    ``make_value_estimator(ValueEstimators.TDLambda, gamma=..., lmbda=...)``.

    Examples:
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
        "priority_weight": "priority_weight",
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
        reduction: str | None = "mean",
        use_prioritized_weights: bool | str = "auto",
        gamma: float | None = None,
        priority_key: Any = None,
    ) -> None:
        super().__init__(
            loss_function=loss_function,
            reduction="mean" if reduction is None else reduction,
            use_prioritized_weights=use_prioritized_weights,
            gamma=gamma,
            priority_key=priority_key,
        )
        self.action_space = resolve_action_space(
            "DQNLoss", action_space, self.default_keys["action"], network=value_network
        )
        self.delay_value = bool(delay_value)
        self.double_dqn = bool(double_dqn)
        self.convert_to_functional(value_network, "value_network", create_target_params=self.delay_value)

    def forward(self, tensordict: Any) -> TensorDict:
        keys = self.tensor_keys
        batch = tensordict.batch_size
        action = _get("DQNLoss", tensordict, keys.action)
        next_td = _get("DQNLoss", tensordict, "next")

        online = self.call_network("value_network", tensordict.copy())
        action_value = _get("DQNLoss", online, keys.action_value)
        check_action_values("DQNLoss", action_value, batch, keys.action_value)
        space = check_discrete_action("DQNLoss", self.action_space, action, action_value.shape, keys.action)
        pred = chosen_action_value(action_value, action, space)

        with torch.no_grad():
            target_td = self.call_network("value_network", next_td.copy(), target=self.delay_value)
            if self.double_dqn:
                greedy = self.call_network("value_network", next_td.copy())
                next_action = _get("DQNLoss", greedy, keys.action)
                # the online network's greedy action (its action mask applies), valued by the target network
                next_value = chosen_action_value(_get("DQNLoss", target_td, keys.action_value), next_action, space)
            else:
                next_value = _get("DQNLoss", target_td, keys.value)
            _check_batch_shaped("DQNLoss", {("next", keys.value): next_value}, batch)
            target = self._bootstrap(tensordict, next_value)

        tensordict.set(keys.priority, squared_td_error(pred, target))
        loss = self._reduce_loss(td_loss(pred, target, self.loss_function), tensordict)
        return TensorDict(loss=loss)
