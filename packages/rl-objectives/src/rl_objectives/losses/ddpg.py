"""DDPGLoss: deterministic policy gradient with a learned Q-function (Lillicrap et al., 2015).

The critic regresses ``Q(s, a)`` onto ``r + gamma * (1 - terminated) * Q'(s', pi'(s'))`` (target
actor and target critic); the actor maximises ``Q(s, pi(s))`` through a critic whose parameters are
detached, so the actor loss trains the actor only.
"""

from __future__ import annotations

from typing import Any

import torch

from tdict import TensorDict

from .common import LossModule
from .utils import (
    _check_batch_shaped,
    _check_loss_function,
    _check_reduction,
    _get,
    _make_bootstrapped_estimator,
    _reduce,
    _set_next_value,
    distance_loss,
)

__all__ = ["DDPGLoss"]


class DDPGLoss(LossModule):
    """The DDPG loss (TorchRL's ``DDPGLoss``).

    Args:
        actor_network: a deterministic actor writing ``"action"`` from the observation.
        value_network: a Q-network reading the observation and ``"action"`` and writing
            ``"state_action_value"`` (batch shape, no trailing 1).

    Keyword Args:
        loss_function: ``"l2"`` (default), ``"l1"`` or ``"smooth_l1"`` for the critic.
        delay_actor: keep target actor parameters (default ``False``: the online actor, detached,
            picks the next action).
        delay_value: keep target critic parameters (default ``True``).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Returns from ``forward`` a TensorDict with ``"loss_actor"`` (``-Q(s, pi(s))``), ``"loss_value"``
    and the detached diagnostics ``"pred_value"`` / ``"target_value"`` (means over the batch) and
    ``"pred_value_max"`` / ``"target_value_max"``. Like TorchRL it writes the detached squared TD
    error into the input at ``"td_error"`` (the ``priority`` key) for prioritized replay.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives.losses.ddpg import DDPGLoss
        >>> class Critic(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = nn.Linear(4, 1)
        ...     def forward(self, obs, action):
        ...         return self.net(torch.cat([obs, action], -1)).squeeze(-1)
        >>> actor = TensorDictModule(nn.Sequential(nn.Linear(3, 1), nn.Tanh()), in_keys=["observation"], out_keys=["action"])
        >>> critic = TensorDictModule(Critic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
        >>> loss = DDPGLoss(actor, critic)
        >>> td = TensorDict({"observation": torch.randn(6, 3), "action": torch.rand(6, 1),
        ...     "next": {"observation": torch.randn(6, 3), "reward": torch.randn(6),
        ...              "done": torch.zeros(6, dtype=torch.bool), "terminated": torch.zeros(6, dtype=torch.bool)}},
        ...     batch_size=[6])
        >>> out = loss(td)
        >>> sorted(out.keys())
        ['loss_actor', 'loss_value', 'pred_value', 'pred_value_max', 'target_value', 'target_value_max']
    """

    default_keys = {
        "state_action_value": "state_action_value",
        "priority": "td_error",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    }
    default_value_estimator = "TD(0)"
    default_value_kwargs = {"gamma": 0.99, "lmbda": 0.95}
    out_keys = ["loss_actor", "loss_value", "pred_value", "target_value", "pred_value_max", "target_value_max"]

    def __init__(
        self,
        actor_network: Any,
        value_network: Any,
        *,
        loss_function: str = "l2",
        delay_actor: bool = False,
        delay_value: bool = True,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        self.loss_function = _check_loss_function("DDPGLoss", loss_function)
        self.reduction = _check_reduction("DDPGLoss", reduction)
        self.delay_actor = bool(delay_actor)
        self.delay_value = bool(delay_value)
        self.convert_to_functional(actor_network, "actor_network", create_target_params=self.delay_actor)
        self.convert_to_functional(value_network, "value_network", create_target_params=self.delay_value)

    def make_value_estimator(self, value_type: Any = None, **hyperparams: Any) -> "DDPGLoss":
        """Build the bootstrapped estimator: TD(0) (default), TD(1) or TD(lambda); GAE raises."""
        _make_bootstrapped_estimator(self, value_type, hyperparams)
        return self

    def _q(self, tensordict: Any, **kwargs: Any) -> torch.Tensor:
        out = self.call_network("value_network", tensordict, **kwargs)
        key = self.tensor_keys.state_action_value
        value = _get("DDPGLoss", out, key)
        _check_batch_shaped("DDPGLoss", {key: value}, tensordict.batch_size)
        return value

    def loss_value(self, tensordict: Any) -> tuple[torch.Tensor, dict]:
        """The critic loss and its diagnostics (the TD error under ``"td_error"``)."""
        next_td = _get("DDPGLoss", tensordict, "next")
        estimator = self.value_estimator
        pred = self._q(tensordict.copy())
        with torch.no_grad():
            next_td = self.call_network("actor_network", next_td.copy(), target=self.delay_actor)
            next_value = self._q(next_td, target=self.delay_value)
            target = estimator.value_estimate(_set_next_value(tensordict, estimator.tensor_keys.value, next_value))
        _check_batch_shaped("DDPGLoss", {"value_target": target}, tensordict.batch_size)
        loss = _reduce(distance_loss(pred, target, self.loss_function), self.reduction)
        pred = pred.detach()
        metadata = {
            "td_error": (pred - target).pow(2),
            "pred_value": pred.mean(),
            "target_value": target.mean(),
            "pred_value_max": pred.max(),
            "target_value_max": target.max(),
        }
        return loss, metadata

    def loss_actor(self, tensordict: Any) -> tuple[torch.Tensor, dict]:
        """``-Q(s, pi(s))`` with the critic's parameters detached: gradients reach the actor only."""
        acted = self.call_network("actor_network", tensordict.copy())
        value = self._q(acted, params=self.params_of("value_network").detach())
        return _reduce(-value, self.reduction), {}

    def forward(self, tensordict: Any) -> TensorDict:
        loss_value, metadata = self.loss_value(tensordict)
        loss_actor, _ = self.loss_actor(tensordict)
        tensordict.set(self.tensor_keys.priority, metadata.pop("td_error"))
        return TensorDict(loss_actor=loss_actor, loss_value=loss_value, **metadata)
