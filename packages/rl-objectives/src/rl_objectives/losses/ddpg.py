"""DDPGLoss: deterministic policy gradient with a learned Q-function (Lillicrap et al., 2015).

The critic regresses ``Q(s, a)`` onto ``r + gamma * (1 - terminated) * Q'(s', pi'(s'))`` (target
actor and target critic); the actor maximises ``Q(s, pi(s))`` through a critic whose parameters are
detached, so the actor loss trains the actor only.

The math is in :mod:`rl_objectives.functional.td3` (``ddpg_value_loss``, ``ddpg_actor_loss``); this
module runs the networks, maps the keys and reduces.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict import TensorDict

from ..functional.td3 import ddpg_actor_loss, ddpg_value_loss
from .utils import _BootstrappedLoss, _get

__all__ = ["DDPGLoss"]


class DDPGLoss(_BootstrappedLoss):
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
        separate_losses: parameters the critic shares with the actor are trained by the actor loss
            only (the critic loss sees them detached).
        use_prioritized_weights: ``"auto"`` (default) or ``True``: when the batch holds
            ``"priority_weight"`` (the ``priority_weight`` key), both losses are weighted
            reductions, as in :class:`~rl_objectives.SACLoss`; ``False`` ignores the weights.
        gamma: deprecated (``DeprecationWarning``): the value estimator's discount; use
            ``make_value_estimator(gamma=...)``.

    Returns from ``forward`` a TensorDict with ``"loss_actor"`` (``-Q(s, pi(s))``), ``"loss_value"``
    and the detached diagnostics ``"pred_value"`` / ``"target_value"`` (means over the batch) and
    ``"pred_value_max"`` / ``"target_value_max"``. Like TorchRL it writes the detached squared TD
    error into the input at ``"td_error"`` (the ``priority`` key) for prioritized replay.

    Examples:
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

    default_keys: ClassVar[dict] = {
        "state_action_value": "state_action_value",
        "priority": "td_error",
        "priority_weight": "priority_weight",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    }
    _q_network = "value_network"
    out_keys: ClassVar[list] = [
        "loss_actor",
        "loss_value",
        "pred_value",
        "target_value",
        "pred_value_max",
        "target_value_max",
    ]

    def __init__(
        self,
        actor_network: Any,
        value_network: Any,
        *,
        loss_function: str = "l2",
        delay_actor: bool = False,
        delay_value: bool = True,
        reduction: str | None = "mean",
        separate_losses: bool = False,
        use_prioritized_weights: bool | str = "auto",
        gamma: float | None = None,
    ) -> None:
        super().__init__(
            loss_function=loss_function,
            reduction="mean" if reduction is None else reduction,
            separate_losses=separate_losses,
            use_prioritized_weights=use_prioritized_weights,
            gamma=gamma,
        )
        self.delay_actor = bool(delay_actor)
        self.delay_value = bool(delay_value)
        self.convert_to_functional(actor_network, "actor_network", create_target_params=self.delay_actor)
        self.convert_to_functional(
            value_network,
            "value_network",
            create_target_params=self.delay_value,
            compare_against=self._policy_params(actor_network),
        )

    def loss_value(self, tensordict: Any) -> tuple[torch.Tensor, dict]:
        """The critic loss and its diagnostics (the TD error under ``"td_error"``)."""
        next_td = _get("DDPGLoss", tensordict, "next")
        pred = self._q(tensordict.copy())
        with torch.no_grad():
            next_td = self.call_network("actor_network", next_td.copy(), target=self.delay_actor)
            target = self._bootstrap(tensordict, self._q(next_td, target=self.delay_value))
        loss, td_error = ddpg_value_loss(pred, target, self.loss_function)
        loss = self._reduce_loss(loss, tensordict)
        pred = pred.detach()
        metadata = {
            "td_error": td_error,
            "pred_value": pred.mean(),
            "target_value": target.mean(),
            "pred_value_max": pred.max(),
            "target_value_max": target.max(),
        }
        return loss, metadata

    def loss_actor(self, tensordict: Any) -> tuple[torch.Tensor, dict]:
        """``-Q(s, pi(s))`` with the critic's parameters detached: gradients reach the actor only."""
        return self._reduce_loss(ddpg_actor_loss(self._q_of_policy(tensordict)), tensordict), {}

    def forward(self, tensordict: Any) -> TensorDict:
        loss_value, metadata = self.loss_value(tensordict)
        loss_actor, _ = self.loss_actor(tensordict)
        tensordict.set(self.tensor_keys.priority, metadata.pop("td_error"))
        return TensorDict(loss_actor=loss_actor, loss_value=loss_value, **metadata)
