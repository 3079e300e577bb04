"""CQLLoss / DiscreteCQLLoss: conservative Q-learning (Kumar et al., 2020) for offline RL.

CQL adds to the critic loss a penalty that pushes Q down on actions the policy would take and up on the
actions of the data, ``min_q_weight * (temperature * logsumexp_a(Q(s, a) / temperature) - Q(s, a_data))``.

Continuous actions (``CQLLoss``, the paper's ``CQL(H)`` on top of SAC): the log-sum-exp over the action
space is estimated by importance sampling with ``num_random`` actions from each of three proposals at
the state ``s`` of the sample: uniform actions (density ``1 / volume``), actions of the current policy
at ``s`` and at ``s'`` (densities ``pi(a|s)``, ``pi(a|s')``)::

    logsumexp over [Q(s, a_unif) - log(1/volume), Q(s, a ~ pi(.|s)) - log pi(a|s), Q(s, a ~ pi(.|s')) - log pi(a|s')]

The SAC parts: critics regress onto ``r + gamma * (1 - terminated) * V(s')`` with
``V(s') = min_i Q'_i(s', a')`` (``deterministic_backup``; else minus ``alpha * log pi(a'|s')``) or, with
``max_q_backup``, the max over ``num_random`` policy actions of ``min_i Q'_i``; the actor minimises
``alpha * log pi(a|s) - min_i Q_i(s, a)``; the temperature as in SAC. ``loss_actor_bc`` is the
behaviour-cloning actor loss ``alpha * log pi(a|s) - log pi(a_data|s)`` used for the first updates
(sum the actor loss you train with: ``loss_actor`` or ``loss_actor_bc``, not both).

Discrete actions (``DiscreteCQLLoss``): the DQN loss plus ``logsumexp_a Q(s, a) - Q(s, a_data)`` (exact).

The arithmetic is :mod:`rl_objectives.functional.cql`'s (and :mod:`rl_objectives.functional.dqn`'s
for the TD regression); this module maps keys, draws the proposal actions and runs the networks.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict import TensorDict
from tdict.specs import Bounded
from tdict.validation import check_positive_int
from tdict.nn import sum_to_batch as _sum_to_batch
from torch import nn

from ..functional.sac import temperature_loss
from ..functional.cql import (
    cql_actor_bc_loss,
    cql_actor_loss,
    cql_alpha_prime,
    cql_alpha_prime_loss,
    cql_lagrange_penalty,
    cql_logsumexp_penalty,
    discrete_cql_penalty,
    uniform_log_density,
)
from ..functional.dqn import chosen_action_value, squared_td_error, td_loss
from ._actions import (
    action_leaf_spec,
    auto_target_entropy,
    check_action_values,
    check_discrete_action,
    continuous_target_entropy,
    resolve_action_space,
    rsample_action,
)
from .utils import (
    _BootstrappedLoss,
    _check_alpha_bounds,
    _check_batch_shaped,
    _check_scalar_output_mode,
    _get,
    _loss_output,
    _TemperatureMixin,
)

__all__ = ["CQLLoss", "DiscreteCQLLoss"]


def _uniform_bounds(action_spec: Any, actor_network: Any, action_key: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds of the uniform proposal: a ``Bounded`` spec's (given or the actor's), else ``[-1, 1]``."""
    spec = action_leaf_spec(
        action_spec if action_spec is not None else getattr(actor_network, "spec", None), action_key
    )
    if isinstance(spec, Bounded):
        low, high = spec.low.detach().clone().float(), spec.high.detach().clone().float()
        if not bool((high > low).all()):
            raise ValueError(
                f"CQLLoss: the action spec's bounds must satisfy high > low, got low={low.tolist()}, high={high.tolist()}."
            )
        return low, high
    return torch.tensor(-1.0), torch.tensor(1.0)


class CQLLoss(_TemperatureMixin, _BootstrappedLoss):
    """The continuous CQL loss (TorchRL's ``CQLLoss``), SAC with the conservative penalty.

    Args:
        actor_network: a probabilistic actor with a reparameterisable distribution over ``"action"``
            (e.g. ``TanhNormal``); its ``get_dist`` also scores the stored actions.
        qvalue_network: a Q-network reading the observation and ``"action"`` and writing
            ``"state_action_value"`` (batch shape); trained as a pair of critics.

    Keyword Args:
        loss_function: ``"smooth_l1"`` (default), ``"l1"`` or ``"l2"`` for the critics' TD regression.
        alpha_init, min_alpha, max_alpha, fixed_alpha, target_entropy: the SAC temperature (see
            :class:`~rl_objectives.losses.sac.SACLoss`).
        action_spec: read for ``target_entropy="auto"`` and for the bounds of the uniform proposal
            (a ``Bounded`` spec; otherwise ``[-1, 1]``, the range of a ``TanhNormal``). Default the
            actor's ``spec``.
        delay_actor: keep target actor parameters that draw the next actions (default ``False``).
        delay_qvalue: keep target Q parameters (default ``True``).
        temperature: the log-sum-exp temperature (default 1.0).
        min_q_weight: the penalty's weight (default 1.0; 5.0 or 10.0 in the paper's benchmarks).
        max_q_backup: bootstrap with the max over ``num_random`` policy actions at ``s'``.
        deterministic_backup: leave the entropy term out of the bootstrap (default ``True``).
        num_random: actions drawn from each proposal (default 10).
        with_lagrange: tune the penalty's weight ``alpha_prime`` by dual gradient descent so that
            the penalty stays near ``lagrange_thresh`` (``loss_alpha_prime`` is then returned).
        lagrange_thresh: the target of the penalty with ``with_lagrange`` (default 0.0).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        deactivate_vmap: run the Q-ensemble's parameter sets in a plain loop instead of one
            batched or vmapped call (TorchRL's option; the same numbers up to rounding).
        scalar_output_mode: with ``reduction="none"``, ``"exclude"`` leaves ``"alpha"`` and
            ``"entropy"`` out of the output, ``"non_tensor"`` keeps them as non-tensor entries;
            ``None`` excludes them with a warning, as TorchRL. The output then has the input's batch
            size (an empty one with ``with_lagrange``, whose ``loss_alpha_prime`` is a scalar).
        gamma: deprecated (``DeprecationWarning``): the value estimator's discount; use
            ``make_value_estimator(gamma=...)``.

    Returns from ``forward`` a TensorDict with ``"loss_actor"``, ``"loss_actor_bc"``,
    ``"loss_qvalue"`` (summed over the two critics), ``"loss_cql"`` (summed over the two critics),
    ``"loss_alpha"``, ``"loss_alpha_prime"`` (only with ``with_lagrange``) and the detached ``"alpha"``
    and ``"entropy"``. Writes the detached squared TD error (max over the critics) into the input at
    ``"td_error"``.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
        ...                       ProbabilisticTensorDictSequential, TensorDictModule)
        >>> from rl_objectives.losses.cql import CQLLoss
        >>> from rl_objectives.modules import TanhNormal
        >>> class Critic(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = nn.Linear(5, 1)
        ...     def forward(self, obs, action):
        ...         return self.net(torch.cat([obs, action], -1)).squeeze(-1)
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()),
        ...                      in_keys=["observation"], out_keys=["loc", "scale"]),
        ...     ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"], distribution_class=TanhNormal))
        >>> critic = TensorDictModule(Critic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
        >>> loss = CQLLoss(actor, critic, with_lagrange=True, lagrange_thresh=5.0)
        >>> td = TensorDict({"observation": torch.randn(6, 3), "action": torch.rand(6, 2) * 1.8 - 0.9,
        ...     "next": {"observation": torch.randn(6, 3), "reward": torch.randn(6),
        ...              "done": torch.zeros(6, dtype=torch.bool), "terminated": torch.zeros(6, dtype=torch.bool)}},
        ...     batch_size=[6])
        >>> sorted(loss(td).keys())  # doctest: +NORMALIZE_WHITESPACE
        ['alpha', 'entropy', 'loss_actor', 'loss_actor_bc', 'loss_alpha', 'loss_alpha_prime',
         'loss_cql', 'loss_qvalue']
    """

    _weighs_priorities = False  # the loss mask only, as TorchRL's CQL

    # buffers (set in __init__)
    _uniform_low: torch.Tensor
    _uniform_high: torch.Tensor

    default_keys: ClassVar[dict] = {
        "action": "action",
        "value": "state_value",
        "state_action_value": "state_action_value",
        "log_prob": "_log_prob",  # TorchRL 0.14's default: a metadata key, not read from the data
        "priority": "td_error",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    }
    num_qvalue_nets: ClassVar[int] = 2

    def __init__(
        self,
        actor_network: Any,
        qvalue_network: Any,
        *,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: Any = None,
        fixed_alpha: bool = False,
        target_entropy: float | str = "auto",
        delay_actor: bool = False,
        delay_qvalue: bool = True,
        temperature: float = 1.0,
        min_q_weight: float = 1.0,
        max_q_backup: bool = False,
        deterministic_backup: bool = True,
        num_random: int = 10,
        with_lagrange: bool = False,
        lagrange_thresh: float = 0.0,
        reduction: str | None = "mean",
        deactivate_vmap: bool = False,
        scalar_output_mode: str | None = None,
        gamma: float | None = None,
    ) -> None:
        owner = "CQLLoss"
        reduction = "mean" if reduction is None else reduction
        mode = _check_scalar_output_mode(owner, scalar_output_mode, reduction, ("alpha", "entropy"))
        super().__init__(loss_function=loss_function, reduction=reduction, deactivate_vmap=deactivate_vmap, gamma=gamma)
        self.scalar_output_mode = mode
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"{owner}: actor_network must be a probabilistic module with get_dist (e.g. ProbabilisticActor), got {type(actor_network).__name__}."
            )
        _check_alpha_bounds(owner, alpha_init, min_alpha, max_alpha)
        check_positive_int(owner, "num_random", num_random)
        for name, value in (("temperature", temperature), ("min_q_weight", min_q_weight)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"{owner}: {name} must be a number > 0, got {value!r}.")
        if not isinstance(lagrange_thresh, (int, float)) or isinstance(lagrange_thresh, bool):
            raise ValueError(f"{owner}: lagrange_thresh must be a number, got {lagrange_thresh!r}.")
        action_key = self.default_keys["action"]
        self._target_entropy = continuous_target_entropy(owner, target_entropy, action_spec, actor_network, action_key)
        low, high = _uniform_bounds(action_spec, actor_network, action_key)
        self.register_buffer("_uniform_low", low)
        self.register_buffer("_uniform_high", high)
        self.delay_actor = bool(delay_actor)
        self.delay_qvalue = bool(delay_qvalue)
        self.temperature = float(temperature)
        self.min_q_weight = float(min_q_weight)
        self.max_q_backup = bool(max_q_backup)
        self.deterministic_backup = bool(deterministic_backup)
        self.num_random = num_random
        self.with_lagrange = bool(with_lagrange)
        self.lagrange_thresh = float(lagrange_thresh)
        self.convert_to_functional(actor_network, "actor_network", create_target_params=self.delay_actor)
        self.convert_to_functional(
            qvalue_network, "qvalue_network", expand_dim=self.num_qvalue_nets, create_target_params=self.delay_qvalue
        )
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha)
        if self.with_lagrange:
            self.log_alpha_prime = nn.Parameter(torch.tensor(0.0))

    @property
    def out_keys(self) -> list[str]:
        """The entries of the output (``"loss_alpha_prime"`` only with ``with_lagrange``)."""
        keys = ["loss_actor", "loss_actor_bc", "loss_qvalue", "loss_cql", "loss_alpha", "alpha", "entropy"]
        return keys[:5] + ["loss_alpha_prime"] + keys[5:] if self.with_lagrange else keys

    def _repeat(self, tensordict: Any, n: int) -> Any:
        """``n`` copies of ``tensordict`` along a new leading batch dim (a view, no data copied)."""
        return tensordict.expand(n, *tensordict.batch_size).copy()

    def _next_value(self, next_td: Any, alpha: torch.Tensor) -> torch.Tensor:
        actor_params = self.params_of("actor_network", target=self.delay_actor)
        q_params = self.params_of("qvalue_network", target=self.delay_qvalue)
        if self.max_q_backup:
            work, _, _, _ = rsample_action(
                "CQLLoss",
                self.actor_network,
                self.swapped("actor_network", actor_params),
                self._repeat(next_td, self.num_random),
                self.tensor_keys.action,
            )
            return (
                self._q(work, params=q_params).amax(1).amin(0)
            )  # best of the policy's actions, then the pessimistic critic
        work, _, log_prob, _ = rsample_action(
            "CQLLoss", self.actor_network, self.swapped("actor_network", actor_params), next_td, self.tensor_keys.action
        )
        value = self._q(work, params=q_params).amin(0)
        if not self.deterministic_backup:
            value = value - alpha * log_prob
        return value

    def _penalty(self, tensordict: Any, next_td: Any, pred: torch.Tensor, action_shape: torch.Size) -> torch.Tensor:
        """The conservative penalty of each critic, ``[2, *batch]``."""
        n = self.num_random
        batch = tensordict.batch_size
        actor_params = self.params_of("actor_network")
        key = self.tensor_keys.action
        low, high = self._uniform_low, self._uniform_high
        random_actions = torch.rand((n, *batch, *action_shape), device=pred.device) * (high - low) + low
        random_log_density = uniform_log_density(low, high, action_shape)
        with torch.no_grad():
            _, curr_actions, curr_log_prob, _ = rsample_action(
                "CQLLoss",
                self.actor_network,
                self.swapped("actor_network", actor_params),
                self._repeat(tensordict, n),
                key,
            )
            _, next_actions, next_log_prob, _ = rsample_action(
                "CQLLoss",
                self.actor_network,
                self.swapped("actor_network", actor_params),
                self._repeat(next_td, n),
                key,
            )
        # every proposal is scored at the sample's own state s (as in the paper's code)
        proposals = self._repeat(tensordict, 3 * n)
        proposals.set(key, torch.cat([random_actions, curr_actions, next_actions], 0))
        q = self._q(proposals)  # [2, 3n, *batch]
        log_density = torch.cat([random_log_density.expand(n, *batch), curr_log_prob, next_log_prob], 0)
        return cql_logsumexp_penalty(q, log_density, pred, self.temperature, self.min_q_weight, dim=1)

    def forward(self, tensordict: Any) -> TensorDict:
        keys = self.tensor_keys
        batch = tensordict.batch_size
        action = _get("CQLLoss", tensordict, keys.action)
        next_td = _get("CQLLoss", tensordict, "next")
        alpha = self._alpha
        action_shape = action.shape[tensordict.batch_dims :]

        with torch.no_grad():
            target = self._bootstrap(tensordict, self._next_value(next_td, alpha))
        pred = self._q(tensordict.copy())
        loss_qvalue = self._reduce_loss(td_loss(pred, target, self.loss_function).sum(0), tensordict)

        _, new_action, log_prob, dist = rsample_action(
            "CQLLoss", self.actor_network, self.swapped("actor_network"), tensordict, keys.action
        )
        # the same distribution scores the data's action, for the behaviour-cloning loss
        bc_log_prob = _sum_to_batch(dist.log_prob(action), tensordict.batch_dims)
        _check_batch_shaped("CQLLoss", {"bc_log_prob": bc_log_prob}, batch)
        actor_td = tensordict.copy()
        actor_td.set(keys.action, new_action)
        min_q = self._q(actor_td, params=self._detached_params("qvalue_network")).amin(0)
        loss_actor = self._reduce_loss(cql_actor_loss(log_prob, min_q, alpha), tensordict)
        loss_actor_bc = self._reduce_loss(cql_actor_bc_loss(log_prob, bc_log_prob, alpha), tensordict)

        penalty = self._penalty(tensordict, next_td, pred, action_shape)
        out = {"loss_actor": loss_actor, "loss_actor_bc": loss_actor_bc, "loss_qvalue": loss_qvalue}
        if self.with_lagrange:
            alpha_prime = cql_alpha_prime(self.log_alpha_prime)
            # the critics see the multiplier as a constant, the multiplier sees the penalty as one
            out["loss_cql"] = self._reduce_loss(cql_lagrange_penalty(penalty, alpha_prime), tensordict)
            loss_alpha_prime = cql_alpha_prime_loss(penalty, alpha_prime, self.lagrange_thresh)
        else:
            out["loss_cql"] = self._reduce_loss(penalty.sum(0), tensordict)

        if self._target_entropy is None:
            # no spec: the action's own shape gives "auto"
            self._target_entropy = auto_target_entropy(action_shape)
        out["loss_alpha"] = self._reduce_loss(
            temperature_loss(self.log_alpha, log_prob, self._target_entropy), tensordict
        )
        if self.with_lagrange:
            out["loss_alpha_prime"] = loss_alpha_prime
        tensordict.set(keys.priority, squared_td_error(pred, target).amax(0))
        scalars = {"alpha": alpha, "entropy": -log_prob.detach().mean()}
        return _loss_output(
            out, scalars, self.reduction, self.scalar_output_mode, [] if self.with_lagrange else tensordict.batch_size
        )


class DiscreteCQLLoss(_BootstrappedLoss):
    """The discrete CQL loss (TorchRL's ``DiscreteCQLLoss``): DQN plus the exact conservative penalty.

    Args:
        value_network: a Q-value actor (e.g. :class:`~rl_objectives.modules.QValueActor`) writing
            ``"action_value"`` (``[*B, n]``) and the greedy ``"chosen_action_value"`` (``[*B]``).

    Keyword Args:
        action_space: ``"one_hot"`` (also ``"one-hot"``, ``"mult_one_hot"``) or ``"categorical"``, or an
            action spec; ``None``: decided per call from the stored action's shape.
        loss_function: ``"l2"`` (default), ``"l1"`` or ``"smooth_l1"`` for the TD regression.
        delay_value: keep target parameters for the bootstrap (default ``True``).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        gamma: deprecated (``DeprecationWarning``): the value estimator's discount; use
            ``make_value_estimator(gamma=...)``.

    The TD target is ``r + gamma * (1 - terminated) * max_a Q_target(s', a)`` (the target network's
    ``"chosen_action_value"``), through the value estimator (TD(0) by default). Returns a TensorDict
    with ``"loss_qvalue"`` and ``"loss_cql"`` (``logsumexp_a Q(s, a) - Q(s, a_data)``); writes the
    detached squared TD error into the input at ``"td_error"``.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.specs import OneHot
        >>> from rl_objectives.losses.cql import DiscreteCQLLoss
        >>> from rl_objectives.modules import QValueActor
        >>> loss = DiscreteCQLLoss(QValueActor(nn.Linear(3, 2), spec=OneHot(2)), action_space="one_hot")
        >>> td = TensorDict({"observation": torch.randn(5, 3), "action": OneHot(2).rand((5,)),
        ...     "next": {"observation": torch.randn(5, 3), "reward": torch.randn(5),
        ...              "done": torch.zeros(5, dtype=torch.bool), "terminated": torch.zeros(5, dtype=torch.bool)}},
        ...     batch_size=[5])
        >>> sorted(loss(td).keys())
        ['loss_cql', 'loss_qvalue']
    """

    _weighs_priorities = False  # the loss mask only, as TorchRL's CQL

    default_keys: ClassVar[dict] = {
        "value_target": "value_target",
        "value": "chosen_action_value",
        "action_value": "action_value",
        "action": "action",
        "priority": "td_error",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    }
    out_keys: ClassVar[list] = ["loss_qvalue", "loss_cql"]

    def __init__(
        self,
        value_network: Any,
        *,
        action_space: Any = None,
        loss_function: str = "l2",
        delay_value: bool = True,
        reduction: str | None = "mean",
        gamma: float | None = None,
    ) -> None:
        super().__init__(loss_function=loss_function, reduction="mean" if reduction is None else reduction, gamma=gamma)
        self.action_space = resolve_action_space("DiscreteCQLLoss", action_space, self.default_keys["action"])
        self.delay_value = bool(delay_value)
        self.convert_to_functional(value_network, "value_network", create_target_params=self.delay_value)

    def forward(self, tensordict: Any) -> TensorDict:
        keys = self.tensor_keys
        batch = tensordict.batch_size
        action = _get("DiscreteCQLLoss", tensordict, keys.action)
        next_td = _get("DiscreteCQLLoss", tensordict, "next")

        action_value = _get("DiscreteCQLLoss", self.call_network("value_network", tensordict.copy()), keys.action_value)
        check_action_values("DiscreteCQLLoss", action_value, batch, keys.action_value)
        space = check_discrete_action("DiscreteCQLLoss", self.action_space, action, action_value.shape, keys.action)
        pred = chosen_action_value(action_value, action, space)

        with torch.no_grad():
            target_out = self.call_network("value_network", next_td.copy(), target=self.delay_value)
            next_value = _get("DiscreteCQLLoss", target_out, keys.value)
            _check_batch_shaped("DiscreteCQLLoss", {("next", keys.value): next_value}, batch)
            target = self._bootstrap(tensordict, next_value)

        loss_qvalue = self._reduce_loss(td_loss(pred, target, self.loss_function), tensordict)
        loss_cql = self._reduce_loss(discrete_cql_penalty(action_value, pred), tensordict)
        tensordict.set(keys.priority, squared_td_error(pred, target))
        return TensorDict(loss_qvalue=loss_qvalue, loss_cql=loss_cql)
