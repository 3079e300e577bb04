"""TD3Loss: twin delayed DDPG (Fujimoto et al., 2018).

Three changes to DDPG: an ensemble of Q-networks whose minimum at the next state gives the target
(clipped double Q), clipped Gaussian noise on the target action (target policy smoothing), and target
copies of both actor and critics. The actor maximises the first Q-network (critics detached).

The math is in :mod:`rl_objectives.functional.td3` (``td3_target_action``, ``clipped_double_q``,
``td3_qvalue_loss``, ``ddpg_actor_loss``); this module runs the networks, maps the keys and reduces.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict import TensorDict
from tdict.specs import Bounded, Composite
from tdict.validation import check_non_negative, check_positive_int

from ..functional.td3 import clipped_double_q, ddpg_actor_loss, td3_qvalue_loss, td3_target_action
from .utils import _BootstrappedLoss, _get

__all__ = ["TD3Loss"]


def _action_bounds(
    action_spec: Any, bounds: Any, action_key: Any, owner: str = "TD3Loss"
) -> tuple[torch.Tensor, torch.Tensor]:
    if bounds is not None:
        if action_spec is not None:
            raise ValueError(f"{owner}: give action_spec or bounds, not both.")
        try:
            low, high = bounds
        except (TypeError, ValueError):
            raise ValueError(f"{owner}: bounds must be a (low, high) pair, got {bounds!r}.") from None
    else:
        if action_spec is None:
            raise ValueError(
                f"{owner}: the target action is clamped to the action bounds: give action_spec (a Bounded spec) or bounds=(low, high)."
            )
        spec = action_spec
        if isinstance(spec, Composite):
            if action_key not in spec:
                raise ValueError(
                    f"{owner}: the Composite action_spec has no {action_key!r} entry; it holds {spec.keys(True, True)}."
                )
            spec = spec[action_key]
        if not isinstance(spec, Bounded):
            raise ValueError(
                f"{owner}: action_spec must be a Bounded spec (or a Composite holding one), got {type(spec).__name__}."
            )
        low, high = spec.low, spec.high
    low = torch.as_tensor(low, dtype=torch.get_default_dtype()) if not isinstance(low, torch.Tensor) else low
    high = torch.as_tensor(high, dtype=low.dtype, device=low.device) if not isinstance(high, torch.Tensor) else high
    if (low > high).any():
        raise ValueError(f"{owner}: a low bound is above its high bound (low={low.tolist()}, high={high.tolist()}).")
    return low.clone(), high.clone()


class TD3Loss(_BootstrappedLoss):
    """The TD3 loss (TorchRL's ``TD3Loss``).

    Args:
        actor_network: a deterministic actor writing ``"action"``.
        qvalue_network: a Q-network reading the observation and ``"action"`` and writing
            ``"state_action_value"`` (batch shape); it is trained as an ensemble of
            ``num_qvalue_nets`` parameter sets (the first is the network's own values).

    Keyword Args:
        action_spec: the action's ``Bounded`` spec (or a ``Composite`` holding it under
            ``"action"``): the smoothed target action is clamped to its bounds.
        bounds: ``(low, high)`` instead of ``action_spec``.
        num_qvalue_nets: size of the Q ensemble (default 2).
        policy_noise: std of the Gaussian noise added to the target action (default 0.2).
        noise_clip: the noise is clipped to ``[-noise_clip, noise_clip]`` (default 0.5).
        loss_function: ``"smooth_l1"`` (default), ``"l1"`` or ``"l2"`` for the critics.
        delay_actor: keep target actor parameters (default ``True``).
        delay_qvalue: keep target Q parameters (default ``True``).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        deactivate_vmap: run the Q-ensemble's parameter sets in a plain loop instead of one
            batched or vmapped call (TorchRL's option; the same numbers up to rounding).
        separate_losses: parameters the Q-network shares with the actor are trained by the actor
            loss only (the critics see them detached, expanded over the ensemble).
        use_prioritized_weights: ``"auto"`` (default) or ``True``: when the batch holds
            ``"priority_weight"`` (the ``priority_weight`` key), both losses are weighted
            reductions, as in :class:`~rl_objectives.SACLoss`; ``False`` ignores the weights.
        gamma: deprecated (``DeprecationWarning``): the value estimator's discount; use
            ``make_value_estimator(gamma=...)``.
        priority_key: deprecated (``DeprecationWarning``): use ``set_keys(priority=...)``.

    Returns from ``forward`` a TensorDict with ``"loss_actor"`` (``-Q_1(s, pi(s))``),
    ``"loss_qvalue"`` (the critics' distances to the target, summed over the ensemble) and the
    detached means ``"pred_value"``, ``"state_action_value_actor"`` (of ``Q_1``, the critic the
    actor maximises: unlike TorchRL, which also runs the others and averages them all),
    ``"next_state_value"``, ``"target_value"``. Like TorchRL it writes the detached squared TD
    error (max over the ensemble) into the input at ``"td_error"`` for prioritized replay.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from tdict.specs import Bounded
        >>> from rl_objectives.losses.td3 import TD3Loss
        >>> class Critic(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = nn.Linear(4, 1)
        ...     def forward(self, obs, action):
        ...         return self.net(torch.cat([obs, action], -1)).squeeze(-1)
        >>> actor = TensorDictModule(nn.Sequential(nn.Linear(3, 1), nn.Tanh()), in_keys=["observation"], out_keys=["action"])
        >>> critic = TensorDictModule(Critic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
        >>> loss = TD3Loss(actor, critic, action_spec=Bounded(-1.0, 1.0, shape=(1,)))
        >>> td = TensorDict({"observation": torch.randn(6, 3), "action": torch.rand(6, 1),
        ...     "next": {"observation": torch.randn(6, 3), "reward": torch.randn(6),
        ...              "done": torch.zeros(6, dtype=torch.bool), "terminated": torch.zeros(6, dtype=torch.bool)}},
        ...     batch_size=[6])
        >>> out = loss(td)
        >>> out["loss_actor"].shape, out["loss_qvalue"].shape
        (torch.Size([]), torch.Size([]))
    """

    # buffers (set in __init__)
    min_action: torch.Tensor
    max_action: torch.Tensor

    default_keys: ClassVar[dict] = {
        "action": "action",
        "state_action_value": "state_action_value",
        "priority": "td_error",
        "priority_weight": "priority_weight",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    }
    out_keys: ClassVar[list] = [
        "loss_actor",
        "loss_qvalue",
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
        loss_function: str = "smooth_l1",
        delay_actor: bool = True,
        delay_qvalue: bool = True,
        reduction: str | None = "mean",
        deactivate_vmap: bool = False,
        separate_losses: bool = False,
        use_prioritized_weights: bool | str = "auto",
        gamma: float | None = None,
        priority_key: Any = None,
    ) -> None:
        super().__init__(
            loss_function=loss_function,
            reduction="mean" if reduction is None else reduction,
            deactivate_vmap=deactivate_vmap,
            separate_losses=separate_losses,
            use_prioritized_weights=use_prioritized_weights,
            gamma=gamma,
            priority_key=priority_key,
        )
        owner = type(self).__name__
        check_positive_int(owner, "num_qvalue_nets", num_qvalue_nets)
        check_non_negative(owner, "policy_noise", policy_noise)
        check_non_negative(owner, "noise_clip", noise_clip)
        low, high = _action_bounds(action_spec, bounds, self.default_keys["action"], owner)
        self.num_qvalue_nets = num_qvalue_nets
        self.policy_noise = float(policy_noise)
        self.noise_clip = float(noise_clip)
        self.delay_actor = bool(delay_actor)
        self.delay_qvalue = bool(delay_qvalue)
        self.convert_to_functional(actor_network, "actor_network", create_target_params=self.delay_actor)
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            expand_dim=num_qvalue_nets,
            create_target_params=self.delay_qvalue,
            compare_against=self._policy_params(actor_network),
        )
        self.register_buffer("min_action", low)
        self.register_buffer("max_action", high)

    def actor_loss(self, tensordict: Any) -> tuple[torch.Tensor, dict]:
        """``-Q_1(s, pi(s))``, critics detached: gradients reach the actor only (the other
        critics are not evaluated)."""
        value = self._q_of_policy(tensordict)  # Q_1: [*batch]
        return self._reduce_loss(ddpg_actor_loss(value), tensordict), {
            "state_action_value_actor": value.detach().mean()
        }

    def value_loss(self, tensordict: Any) -> tuple[torch.Tensor, dict]:
        """The critics' loss against the clipped double-Q target with target policy smoothing."""
        keys, owner = self.tensor_keys, type(self).__name__
        action = _get(owner, tensordict, keys.action)
        next_td = _get(owner, tensordict, "next")
        # drawn before the networks run, so a seeded call is reproducible whatever they do
        noise = torch.randn_like(action) * self.policy_noise
        with torch.no_grad():
            next_td = self.call_network("actor_network", next_td.copy(), target=self.delay_actor)
            next_action = _get(owner, next_td, keys.action)
            smoothed = td3_target_action(next_action, noise, self.noise_clip, self.min_action, self.max_action)
            next_td.set(keys.action, smoothed)
            next_value = clipped_double_q(self._q(next_td, target=self.delay_qvalue))
            target = self._bootstrap(tensordict, next_value)
        pred = self._q(tensordict.copy())
        # per sample: the sum over the ensemble of each critic's distance to the shared target
        loss, td_error = td3_qvalue_loss(pred, target, self.loss_function)
        loss = self._reduce_loss(loss, tensordict)
        metadata = {
            "td_error": td_error,
            "pred_value": pred.detach().mean(),
            "next_state_value": next_value.mean(),
            "target_value": target.mean(),
        }
        return loss, metadata

    def forward(self, tensordict: Any) -> TensorDict:
        loss_qvalue, metadata = self.value_loss(tensordict)
        loss_actor, metadata_actor = self.actor_loss(tensordict)
        tensordict.set(self.tensor_keys.priority, metadata.pop("td_error"))
        return TensorDict(loss_actor=loss_actor, loss_qvalue=loss_qvalue, **metadata_actor, **metadata)
