"""IQLLoss / DiscreteIQLLoss: implicit Q-learning (Kostrikov et al., 2021), offline RL without
querying the policy on unseen actions.

- value: expectile regression of ``V(s)`` onto ``min_i Q'_i(s, a)`` (target critics, stored action):
  ``|tau - 1(u < 0)| * u^2`` with ``u = min_i Q'_i(s, a) - V(s)``;
- critics: ``Q_i(s, a)`` regress onto ``r + gamma * (1 - terminated) * V(s')`` (``V`` detached);
- actor: advantage-weighted regression, ``-min(exp(temperature * (min_i Q'_i(s, a) - V(s))), 100) * log pi(a|s)``
  with the stored action ``a`` (weights detached).

The arithmetic is :mod:`rl_objectives.functional.iql`'s (and :func:`~rl_objectives.functional.dqn.td_loss`
for the critics); this module maps keys and runs the networks.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict import TensorDict
from tdict.validation import check_positive_int
from tdict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
from tdict.nn import sum_to_batch as _sum_to_batch

from ..functional.dqn import chosen_action_value, squared_td_error, td_loss
from ..functional.iql import iql_actor_loss, iql_value_loss
from ._actions import check_discrete_action, resolve_action_space
from .utils import (
    _BootstrappedLoss,
    _check_batch_shaped,
    _check_scalar_output_mode,
    _get,
    _loss_output,
)

__all__ = ["DiscreteIQLLoss", "IQLLoss"]


class IQLLoss(_BootstrappedLoss):
    """The IQL loss (TorchRL's ``IQLLoss``).

    Args:
        actor_network: a probabilistic actor; its ``get_dist`` gives the log-prob of the stored action.
        qvalue_network: a Q-network reading the observation and ``"action"`` and writing
            ``"state_action_value"`` (batch shape); trained as an ensemble of ``num_qvalue_nets``,
            with target parameters (update them with a target updater).
        value_network: a state-value network writing ``"state_value"`` (batch shape).

    Keyword Args:
        num_qvalue_nets: size of the Q ensemble (default 2).
        loss_function: ``"smooth_l1"`` (default), ``"l1"`` or ``"l2"`` for the critics.
        temperature: the inverse temperature ``beta`` of the advantage weights (default 1.0): small
            values behave like behaviour cloning, large ones like greedy improvement.
        expectile: the expectile ``tau`` in ``(0, 1]`` of the value regression (default 0.5: the mean;
            0.7-0.9 in the paper; 1: only underestimates of ``min Q`` are penalised).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        deactivate_vmap: run the Q-ensemble's parameter sets in a plain loop instead of one
            batched or vmapped call (TorchRL's option; the same numbers up to rounding).
        separate_losses: parameters the value network shares with the actor, and those the
            Q-network shares with the actor or the value network, are trained only through their
            owner (the actor's loss, then the value loss), as in TorchRL.
        scalar_output_mode: with ``reduction="none"``, ``"exclude"`` leaves ``"entropy"`` out of the
            (batch-shaped) output, ``"non_tensor"`` keeps it as a non-tensor entry; ``None`` excludes
            it with a warning, as TorchRL.
        gamma: deprecated (``DeprecationWarning``): the value estimator's discount; use
            ``make_value_estimator(gamma=...)``.
        priority_key: deprecated (``DeprecationWarning``): use ``set_keys(priority=...)``.

    Returns from ``forward`` a TensorDict with ``"loss_actor"``, ``"loss_qvalue"`` (summed over the
    ensemble), ``"loss_value"`` and the detached ``"entropy"`` (mean of ``-log pi(a|s)`` over the stored
    actions). Writes the detached squared TD error (max over the ensemble) into the input at
    ``"td_error"``. With ``reduction="none"`` the output has the input's batch size.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
        ...                       ProbabilisticTensorDictSequential, TensorDictModule)
        >>> from rl_objectives.losses.iql import IQLLoss
        >>> from rl_objectives.modules import ValueOperator
        >>> class Critic(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = nn.Linear(5, 1)
        ...     def forward(self, obs, action):
        ...         return self.net(torch.cat([obs, action], -1)).squeeze(-1)
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()),
        ...                      in_keys=["observation"], out_keys=["loc", "scale"]),
        ...     ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"],
        ...                                   distribution_class=torch.distributions.Normal))
        >>> critic = TensorDictModule(Critic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
        >>> value = ValueOperator(nn.Linear(3, 1), in_keys=["observation"])  # squeezes the 1-wide head
        >>> loss = IQLLoss(actor, critic, value, expectile=0.7)
        >>> td = TensorDict({"observation": torch.randn(6, 3), "action": torch.randn(6, 2),
        ...     "next": {"observation": torch.randn(6, 3), "reward": torch.randn(6),
        ...              "done": torch.zeros(6, dtype=torch.bool), "terminated": torch.zeros(6, dtype=torch.bool)}},
        ...     batch_size=[6])
        >>> sorted(loss(td).keys())
        ['entropy', 'loss_actor', 'loss_qvalue', 'loss_value']
    """

    actor_network: ProbabilisticTensorDictModule | ProbabilisticTensorDictSequential  # set by convert_to_functional

    default_keys: ClassVar[dict] = {
        "action": "action",
        "value": "state_value",
        "state_action_value": "state_action_value",
        # TorchRL 0.14's name for the actor's log-prob in the loss metadata (accepted by set_keys, not read)
        "log_prob": "_log_prob",
        "priority": "td_error",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    }
    out_keys: ClassVar[list] = ["loss_actor", "loss_qvalue", "loss_value", "entropy"]

    def __init__(
        self,
        actor_network: Any,
        qvalue_network: Any,
        value_network: Any,
        *,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        temperature: float = 1.0,
        expectile: float = 0.5,
        reduction: str | None = "mean",
        deactivate_vmap: bool = False,
        separate_losses: bool = False,
        scalar_output_mode: str | None = None,
        gamma: float | None = None,
        priority_key: Any = None,
    ) -> None:
        owner = type(self).__name__
        reduction = "mean" if reduction is None else reduction
        mode = _check_scalar_output_mode(owner, scalar_output_mode, reduction, ("entropy",))
        super().__init__(
            loss_function=loss_function,
            reduction=reduction,
            deactivate_vmap=deactivate_vmap,
            separate_losses=separate_losses,
            gamma=gamma,
            priority_key=priority_key,
        )
        check_positive_int(owner, "num_qvalue_nets", num_qvalue_nets)
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"{owner}: actor_network must be a probabilistic module with get_dist, got {type(actor_network).__name__}."
            )
        if value_network is None:
            raise TypeError(
                f"{owner}: value_network is required (a state-value network writing {self.default_keys['value']!r})."
            )
        if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or temperature < 0:
            raise ValueError(f"{owner}: temperature must be a number >= 0, got {temperature!r}.")
        if not isinstance(expectile, (int, float)) or isinstance(expectile, bool) or not 0 < expectile <= 1:
            raise ValueError(f"{owner}: expectile must be in (0, 1], got {expectile!r}.")
        self.num_qvalue_nets = num_qvalue_nets
        self.temperature = float(temperature)
        self.expectile = float(expectile)
        self.scalar_output_mode = mode
        self.convert_to_functional(actor_network, "actor_network")
        # TorchRL's order: the value network, then the Q-network (which may share with both)
        self.convert_to_functional(value_network, "value_network", compare_against=self._policy_params(actor_network))
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            expand_dim=num_qvalue_nets,
            create_target_params=True,
            compare_against=self._policy_params(actor_network, value_network),
        )

    # ------------------------------------------------------------------ network calls
    def _stored_q(self, tensordict: Any, **kwargs: Any) -> torch.Tensor:
        """``Q_i(s, a)`` of the stored action, ``[num_qvalue_nets, *batch]``."""
        return self._q(tensordict.copy(), **kwargs)

    def _v(self, tensordict: Any, **kwargs: Any) -> torch.Tensor:
        out = self.call_network("value_network", tensordict.copy(), **kwargs)
        key = self.tensor_keys.value
        value = _get(type(self).__name__, out, key)
        _check_batch_shaped(type(self).__name__, {key: value}, tensordict.batch_size)
        return value

    # ------------------------------------------------------------------ loss
    def forward(self, tensordict: Any) -> TensorDict:
        owner = type(self).__name__
        batch = tensordict.batch_size
        _get(owner, tensordict, self.tensor_keys.action)
        next_td = _get(owner, tensordict, "next")

        with torch.no_grad():
            target_min_q = self._stored_q(tensordict, target=True).amin(0)
            target = self._bootstrap(tensordict, self._v(next_td))

        value = self._v(tensordict)
        loss_value = self._reduce_loss(iql_value_loss(target_min_q, value, self.expectile), tensordict)

        pred = self._stored_q(tensordict)
        loss_qvalue = self._reduce_loss(td_loss(pred, target, self.loss_function).sum(0), tensordict)

        with self.swapped("actor_network"):
            dist = self.actor_network.get_dist(tensordict.copy())
        log_prob = _sum_to_batch(dist.log_prob(tensordict.get(self.tensor_keys.action)), tensordict.batch_dims)
        _check_batch_shaped(owner, {"log_prob": log_prob}, batch)
        advantage = target_min_q - value.detach()
        loss_actor = self._reduce_loss(iql_actor_loss(log_prob, advantage, self.temperature), tensordict)

        tensordict.set(self.tensor_keys.priority, squared_td_error(pred, target).amax(0))
        return _loss_output(
            {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue, "loss_value": loss_value},
            {"entropy": -log_prob.detach().mean()},
            self.reduction,
            self.scalar_output_mode,
            batch,
        )


class DiscreteIQLLoss(IQLLoss):
    """The IQL loss over a finite action set (TorchRL's ``DiscreteIQLLoss``).

    As :class:`IQLLoss`, except that the Q-network reads only the observation and writes one value
    per action at ``"state_action_value"`` (``[*B, n]``, TorchRL's key); ``Q(s, a)`` is the stored
    action's entry. The actor gives a
    ``Categorical`` (stored action: an index) or ``OneHotCategorical`` (a one-hot vector).

    Keyword Args:
        action_space: ``"one_hot"`` (also ``"one-hot"``, ``"mult_one_hot"``) or ``"categorical"``, or an
            action spec; ``None``: decided per call from the stored action's shape.
        (the others as :class:`IQLLoss`)

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential, TensorDictModule
        >>> from rl_objectives.losses.iql import DiscreteIQLLoss
        >>> from rl_objectives.modules import ValueOperator
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(nn.Linear(3, 4), in_keys=["observation"], out_keys=["logits"]),
        ...     ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"],
        ...                                   distribution_class=torch.distributions.Categorical))
        >>> qvalue = TensorDictModule(nn.Linear(3, 4), in_keys=["observation"], out_keys=["state_action_value"])
        >>> value = ValueOperator(nn.Linear(3, 1), in_keys=["observation"])  # squeezes the 1-wide head
        >>> loss = DiscreteIQLLoss(actor, qvalue, value, action_space="categorical")
        >>> td = TensorDict({"observation": torch.randn(5, 3), "action": torch.randint(4, (5,)),
        ...     "next": {"observation": torch.randn(5, 3), "reward": torch.randn(5),
        ...              "done": torch.zeros(5, dtype=torch.bool), "terminated": torch.zeros(5, dtype=torch.bool)}},
        ...     batch_size=[5])
        >>> loss(td)["loss_value"].shape
        torch.Size([])
    """

    def __init__(
        self,
        actor_network: Any,
        qvalue_network: Any,
        value_network: Any,
        *,
        action_space: Any = None,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        temperature: float = 1.0,
        expectile: float = 0.5,
        reduction: str | None = "mean",
        separate_losses: bool = False,
        scalar_output_mode: str | None = None,
        gamma: float | None = None,
        priority_key: Any = None,
    ) -> None:
        space = resolve_action_space("DiscreteIQLLoss", action_space, self.default_keys["action"])
        super().__init__(
            actor_network,
            qvalue_network,
            value_network,
            num_qvalue_nets=num_qvalue_nets,
            loss_function=loss_function,
            temperature=temperature,
            expectile=expectile,
            reduction=reduction,
            separate_losses=separate_losses,
            scalar_output_mode=scalar_output_mode,
            gamma=gamma,
            priority_key=priority_key,
        )
        self.action_space = space

    def _action_values(self, tensordict: Any, **kwargs: Any) -> torch.Tensor:
        key = self.tensor_keys.state_action_value
        values = self.call_network("qvalue_network", tensordict, out_key=key, **kwargs)
        if values.dim() != tensordict.batch_dims + 2 or values.shape[1:-1] != tensordict.batch_size:
            raise ValueError(
                f"DiscreteIQLLoss: {key!r} has shape {tuple(values.shape[1:])} per critic, expected the batch shape "
                f"{tuple(tensordict.batch_size)} plus the number of actions."
            )
        return values

    def _stored_q(self, tensordict: Any, **kwargs: Any) -> torch.Tensor:
        values = self._action_values(tensordict, **kwargs)
        action = tensordict.get(self.tensor_keys.action)
        space = check_discrete_action(
            "DiscreteIQLLoss", self.action_space, action, values.shape[1:], self.tensor_keys.action
        )
        return chosen_action_value(values, action, space)
