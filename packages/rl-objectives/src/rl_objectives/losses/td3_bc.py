"""TD3BCLoss: TD3 with a behaviour-cloning term (Fujimoto & Gu, 2021), for offline RL.

The critics are TD3's (clipped double Q, target policy smoothing, target networks). The actor
minimises ``-lambda * Q_1(s, pi(s)) + (pi(s) - a)^2`` with ``lambda = alpha / mean|Q_1(s, pi(s))|``
(detached, over the batch): the Q term is rescaled so that ``alpha`` alone weighs it against the
regression onto the dataset's action ``a``.

The actor's math is :func:`rl_objectives.functional.td3.td3_bc_actor_loss`; the critics' is TD3's.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict.validation import check_non_negative

from ..functional.td3 import td3_bc_actor_loss
from .td3 import TD3Loss
from .utils import _get

__all__ = ["TD3BCLoss"]


class TD3BCLoss(TD3Loss):
    """The TD3+BC loss (TorchRL's ``TD3BCLoss``).

    Args:
        actor_network: a deterministic actor writing ``"action"``.
        qvalue_network: a Q-network reading the observation and ``"action"`` and writing
            ``"state_action_value"`` (batch shape), trained as an ensemble of ``num_qvalue_nets``.

    Keyword Args:
        alpha: the weight of the Q term against the behaviour cloning (default ``2.5``, the paper's).
        priority_key: deprecated (``DeprecationWarning``): use ``set_keys(priority=...)``.

    The other keyword arguments (``action_spec``, ``bounds``, ``num_qvalue_nets``, ``policy_noise``,
    ``noise_clip``, ``loss_function``, ``delay_actor``, ``delay_qvalue``, ``separate_losses``,
    ``reduction``, ``deactivate_vmap``, ``use_prioritized_weights``) are :class:`~rl_objectives.TD3Loss`'s.

    The behaviour-cloning term of a sample is the mean over the action's own dims of
    ``(pi(s) - a)^2``: averaged over the batch it is TorchRL's ``mse_loss(pi(s), a)``, and a
    prioritized buffer's weights (``"priority_weight"``) weigh it per sample with the Q term
    (TorchRL adds the batch mean to every sample before weighting).

    Returns from ``forward`` a TensorDict with ``"loss_actor"``, ``"loss_qvalue"`` (TD3's) and the
    detached ``"bc_loss"`` (batch mean), ``"lmbd"`` (``lambda``), and the means ``"pred_value"``,
    ``"state_action_value_actor"``, ``"next_state_value"``, ``"target_value"``; it writes the
    squared TD error (max over the ensemble) into the input at ``"td_error"``.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives import TD3BCLoss
        >>> class Critic(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = nn.Linear(4, 1)
        ...     def forward(self, obs, action):
        ...         return self.net(torch.cat([obs, action], -1)).squeeze(-1)
        >>> actor = TensorDictModule(nn.Sequential(nn.Linear(3, 1), nn.Tanh()), in_keys=["observation"], out_keys=["action"])
        >>> critic = TensorDictModule(Critic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
        >>> loss = TD3BCLoss(actor, critic, bounds=(-1.0, 1.0), alpha=2.5)
        >>> td = TensorDict({"observation": torch.randn(6, 3), "action": torch.rand(6, 1) * 2 - 1,
        ...     "next": {"observation": torch.randn(6, 3), "reward": torch.randn(6),
        ...              "done": torch.zeros(6, dtype=torch.bool), "terminated": torch.zeros(6, dtype=torch.bool)}},
        ...     batch_size=[6])
        >>> out = loss(td)
        >>> sorted(out.keys()) == sorted(loss.out_keys)
        True
    """

    out_keys: ClassVar[list] = [
        "loss_actor",
        "loss_qvalue",
        "bc_loss",
        "lmbd",
        "pred_value",
        "state_action_value_actor",
        "next_state_value",
        "target_value",
    ]

    def __init__(
        self,
        actor_network: Any,
        qvalue_network: Any,
        *,
        action_spec: Any = None,
        bounds: Any = None,
        num_qvalue_nets: int = 2,
        policy_noise: float = 0.2,
        noise_clip: float = 0.5,
        alpha: float = 2.5,
        loss_function: str = "smooth_l1",
        delay_actor: bool = True,
        delay_qvalue: bool = True,
        priority_key: Any = None,
        separate_losses: bool = False,
        reduction: str | None = None,
        deactivate_vmap: bool = False,
        use_prioritized_weights: bool | str = "auto",
    ) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise TypeError(f"TD3BCLoss: alpha must be a number, got {type(alpha).__name__}.")
        check_non_negative("TD3BCLoss", "alpha", alpha)
        super().__init__(
            actor_network,
            qvalue_network,
            action_spec=action_spec,
            bounds=bounds,
            num_qvalue_nets=num_qvalue_nets,
            policy_noise=policy_noise,
            noise_clip=noise_clip,
            loss_function=loss_function,
            delay_actor=delay_actor,
            delay_qvalue=delay_qvalue,
            reduction=reduction,
            deactivate_vmap=deactivate_vmap,
            separate_losses=separate_losses,
            use_prioritized_weights=use_prioritized_weights,
            priority_key=priority_key,
        )
        self.alpha = float(alpha)

    def actor_loss(self, tensordict: Any) -> tuple[torch.Tensor, dict]:
        """``-lambda * Q_1(s, pi(s)) + mean((pi(s) - a)^2)`` per sample, critics detached: gradients
        reach the actor only."""
        owner, key = "TD3BCLoss", self.tensor_keys.action
        action = _get(owner, tensordict, key)
        acted, value = self._policy_and_q(tensordict)  # Q_1: [*batch]
        policy_action = _get(owner, acted, key)
        if policy_action.shape != action.shape:
            raise ValueError(
                f"TD3BCLoss: the actor's action has shape {tuple(policy_action.shape)} but the stored {key!r} has shape "
                f"{tuple(action.shape)}; the behaviour-cloning term compares them."
            )
        loss, bc, lmbd = td3_bc_actor_loss(value, policy_action, action, self.alpha)
        loss = self._reduce_loss(loss, tensordict)
        metadata = {"bc_loss": bc.detach().mean(), "lmbd": lmbd, "state_action_value_actor": value.detach().mean()}
        return loss, metadata
