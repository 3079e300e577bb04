"""DiscreteSACLoss: soft actor-critic over a finite action set (Christodoulou, 2019).

With a finite action set the expectations over the policy are exact sums over the actions, so nothing
is sampled and no reparameterisation is needed:

- critics: ``Q_i(s, a)`` (the stored action's entry of each critic's action values) regress onto
  ``r + gamma * (1 - terminated) * sum_a' pi(a'|s') (min_i Q'_i(s', a') - alpha * log pi(a'|s'))``;
- actor: minimise ``sum_a pi(a|s) (alpha * log pi(a|s) - min_i Q_i(s, a))`` (critics detached);
- temperature: minimise ``-log_alpha * (sum_a pi log pi + target_entropy)`` with
  ``target_entropy = target_entropy_weight * log(num_actions)`` for ``"auto"``.

The math is in :mod:`rl_objectives.functional.sac` (``discrete_soft_state_value``, ``sac_qvalue_loss``,
``discrete_sac_actor_loss``, ``discrete_expected_log_prob``, ``temperature_loss``); this module runs
the networks, maps the keys and reduces.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
from tdict import TensorDict
from tdict.validation import check_positive_int

from ..functional.sac import (
    discrete_expected_log_prob,
    discrete_sac_actor_loss,
    discrete_soft_state_value,
    sac_qvalue_loss,
    temperature_loss,
)
from ..functional.dqn import chosen_action_value
from ._actions import (
    categorical_probs,
    check_discrete_action,
    discrete_target_entropy,
    on_live_rows,
    resolve_action_space,
)
from .utils import (
    _BootstrappedLoss,
    _check_alpha_bounds,
    _check_bool,
    _check_scalar_output_mode,
    _get,
    _loss_output,
    _TemperatureMixin,
)

__all__ = ["DiscreteSACLoss"]


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
        deactivate_vmap: run the Q-ensemble's parameter sets in a plain loop instead of one
            batched or vmapped call (TorchRL's option; the same numbers up to rounding).
        separate_losses: parameters the Q-network shares with the actor are trained by the actor
            loss only (the critics see them detached, expanded over the ensemble).
        skip_done_states: run the actor and the target critics only on the next states that are
            not done; the next-state value of a done state is 0 (TorchRL's option).
        use_prioritized_weights: ``"auto"`` (default) or ``True``: when the batch holds
            ``"priority_weight"`` (the ``priority_weight`` key), every loss is a weighted
            reduction, as in :class:`~rl_objectives.SACLoss`; ``False`` ignores the weights.
        scalar_output_mode: with ``reduction="none"``: ``"exclude"`` or ``"non_tensor"`` for
            ``"alpha"`` and ``"entropy"`` (``None``: excluded with a warning), as in SACLoss.
        priority_key: deprecated (``DeprecationWarning``): use ``set_keys(priority=...)``.

    Returns from ``forward`` a TensorDict with ``"loss_actor"``, ``"loss_qvalue"`` (summed over the
    ensemble), ``"loss_alpha"``, and the detached ``"alpha"`` and ``"entropy"`` (the policy's exact
    entropy, averaged over the batch). Writes the detached absolute TD error (max over the ensemble)
    into the input at ``"td_error"``.

    Examples:
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
        >>> round(float(loss.target_entropy), 4)
        1.3586
    """

    actor_network: ProbabilisticTensorDictModule | ProbabilisticTensorDictSequential  # set by convert_to_functional

    default_keys: ClassVar[dict] = {
        "action": "action",
        "action_value": "action_value",
        "value": "state_value",
        "priority": "td_error",
        "priority_weight": "priority_weight",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
        "log_prob": "log_prob",  # TorchRL 0.14's key (accepted by set_keys, not read)
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
        reduction: str | None = "mean",
        deactivate_vmap: bool = False,
        separate_losses: bool = False,
        skip_done_states: bool = False,
        use_prioritized_weights: bool | str = "auto",
        scalar_output_mode: str | None = None,
        priority_key: Any = None,
    ) -> None:
        owner = "DiscreteSACLoss"
        reduction = "mean" if reduction is None else reduction
        _check_bool(owner, "skip_done_states", skip_done_states)
        mode = _check_scalar_output_mode(owner, scalar_output_mode, reduction, ("alpha", "entropy"))
        super().__init__(
            loss_function=loss_function,
            reduction=reduction,
            deactivate_vmap=deactivate_vmap,
            separate_losses=separate_losses,
            use_prioritized_weights=use_prioritized_weights,
            priority_key=priority_key,
        )
        self.action_space = resolve_action_space(owner, action_space, self.default_keys["action"])
        check_positive_int(owner, "num_actions", num_actions)
        check_positive_int(owner, "num_qvalue_nets", num_qvalue_nets)
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"{owner}: actor_network must be a probabilistic module with get_dist, got {type(actor_network).__name__}."
            )
        _check_alpha_bounds(owner, alpha_init, min_alpha, max_alpha)
        resolved = discrete_target_entropy(owner, target_entropy, target_entropy_weight, num_actions)
        self.num_actions = num_actions
        self.num_qvalue_nets = num_qvalue_nets
        self.delay_qvalue = bool(delay_qvalue)
        self.target_entropy = resolved
        self.skip_done_states = skip_done_states
        self.scalar_output_mode = mode
        self.convert_to_functional(actor_network, "actor_network")
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            expand_dim=num_qvalue_nets,
            create_target_params=self.delay_qvalue,
            compare_against=self._policy_params(actor_network),
        )
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha)

    def _policy(self, tensordict: Any) -> tuple[torch.Tensor, torch.Tensor]:
        with self.swapped("actor_network"):
            dist = self.actor_network.get_dist(tensordict.copy())
        return categorical_probs("DiscreteSACLoss", dist, self.num_actions, tensordict.batch_size)

    def _action_values(self, tensordict: Any, **kwargs: Any) -> torch.Tensor:
        """The ensemble's action values, ``[num_qvalue_nets, *batch, num_actions]``."""
        key = self.tensor_keys.action_value
        values = self.call_network("qvalue_network", tensordict, out_key=key, **kwargs)
        expected = (self.num_qvalue_nets, *tensordict.batch_size, self.num_actions)
        if values.shape != expected:
            raise ValueError(
                f"DiscreteSACLoss: {key!r} has shape {tuple(values.shape[1:])} per critic, expected {expected[1:]} (batch shape plus num_actions)."
            )
        return values

    def forward(self, tensordict: Any) -> TensorDict:
        keys = self.tensor_keys
        batch = tensordict.batch_size
        action = _get("DiscreteSACLoss", tensordict, keys.action)
        next_td = _get("DiscreteSACLoss", tensordict, "next")
        alpha = self._alpha
        space = check_discrete_action(
            "DiscreteSACLoss", self.action_space, action, batch + (self.num_actions,), keys.action
        )

        def soft_value(td: Any) -> tuple[torch.Tensor]:
            next_probs, next_log_probs = self._policy(td)
            next_q = self._action_values(td, target=self.delay_qvalue)
            return (discrete_soft_state_value(next_probs, next_q, next_log_probs, alpha),)

        with torch.no_grad():
            if self.skip_done_states:
                (next_value,) = on_live_rows("DiscreteSACLoss", next_td, keys.done, soft_value)
            else:
                (next_value,) = soft_value(next_td)
            target = self._bootstrap(tensordict, next_value)
        pred = chosen_action_value(self._action_values(tensordict), action, space)
        loss_qvalue, td_error = sac_qvalue_loss(pred, target, self.loss_function)
        loss_qvalue = self._reduce_loss(loss_qvalue, tensordict)

        probs, log_probs = self._policy(tensordict)
        q = self._action_values(tensordict, params=self._detached_params("qvalue_network"))
        loss_actor = self._reduce_loss(discrete_sac_actor_loss(probs, log_probs, q, alpha), tensordict)
        neg_entropy = discrete_expected_log_prob(probs, log_probs)
        target_entropy = self._target_entropy
        assert target_entropy is not None  # resolved in __init__
        loss_alpha = self._reduce_loss(temperature_loss(self.log_alpha, neg_entropy, target_entropy), tensordict)

        tensordict.set(keys.priority, td_error)
        return _loss_output(
            {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue, "loss_alpha": loss_alpha},
            {"alpha": alpha, "entropy": -neg_entropy.mean()},
            self.reduction,
            self.scalar_output_mode,
            batch,
        )
