"""SACLoss: soft actor-critic (Haarnoja et al., 2018), with or without a state-value network.

Without a value network ("SAC v2", the default):

- critics: ``Q_i(s, a)`` regress onto ``r + gamma * (1 - terminated) * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))``
  with ``a' ~ pi(.|s')`` (target Q ensemble, the current actor);
- actor: minimise ``alpha * log pi(a|s) - min_i Q_i(s, a)`` with ``a`` reparameterised (critics detached);
- temperature: minimise ``-log_alpha * (log pi(a|s) + target_entropy)`` (log-prob detached), so alpha
  grows when the policy's entropy falls below the target.

With a value network ("SAC v1", the first paper's version) the critics regress onto
``r + gamma * (1 - terminated) * V'(s')`` (the target value network), each critic on its own share of
the batch, and ``V(s)`` regresses onto ``min_i Q'_i(s, a) - alpha * log pi(a|s)`` with ``a ~ pi(.|s)``
(``"loss_value"``); actor and temperature losses are the same.

The math is in :mod:`rl_objectives.functional.sac` (:func:`~rl_objectives.functional.sac.soft_state_value`,
``sac_qvalue_loss``, ``sac_actor_loss``, ``temperature_loss``, ``sac_value_loss``, ``sac_v1_qvalue_loss``);
this module runs the networks, maps the keys and reduces.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, NamedTuple

import torch
from tdict import TensorDict
from tdict.validation import check_positive_int

from ..functional.sac import (
    sac_actor_loss,
    sac_qvalue_loss,
    sac_v1_qvalue_loss,
    sac_value_loss,
    soft_state_value,
    temperature_loss,
)
from ._actions import (
    PolicyDraw,
    auto_target_entropy,
    continuous_target_entropy,
    on_live_rows,
    rsample_action,
    rsample_with_log_prob,
)
from .common import _plain_tensors
from .utils import (
    _BootstrappedLoss,
    _check_alpha_bounds,
    _check_batch_shaped,
    _check_bool,
    _check_scalar_output_mode,
    _get,
    _loss_output,
    _TemperatureMixin,
)

__all__ = ["SACLoss"]


class _Calls(NamedTuple):
    """SACLoss's networks bound to one batch: on its TensorDicts (any network), or on its tensors
    (networks with tensor functions: ``dist_function`` / ``tensor_function``), with no TensorDict
    built per call. A state is the batch's (or its next states') inputs, including an action."""

    state: Any  # the batch: what the actor and the critics read
    next_state: Any  # the next states: what they read there (no action)
    policy: Callable  # (state, target=False) -> (the state acting with a ~ pi(.|s), log pi(a|s))
    next_policy: Callable  # next_state -> the same with the next action's actor (delay_actor: its target)
    q: Callable  # (state, target=False, params=None) -> Q_i(s, a) of every critic, [num_qvalue_nets, *B]


class SACLoss(_TemperatureMixin, _BootstrappedLoss):
    """The SAC loss (TorchRL's ``SACLoss``).

    Args:
        actor_network: a probabilistic actor (``ProbabilisticTensorDictSequential`` or
            ``ProbabilisticActor``) whose ``get_dist`` gives a reparameterisable distribution over
            ``"action"`` (e.g. ``TanhNormal``).
        qvalue_network: a Q-network reading the observation and ``"action"`` and writing
            ``"state_action_value"`` (batch shape); trained as an ensemble of ``num_qvalue_nets``.
        value_network: ``None`` (default, SAC v2), or a state-value network reading the observation
            and writing ``"state_value"`` (batch shape): SAC v1. Its target copy gives the critics'
            next-state value, and the critics are then trained each on its own ``1/num_qvalue_nets``
            of the batch (the first batch dim must divide evenly), as in TorchRL.

    Keyword Args:
        num_qvalue_nets: size of the Q ensemble (default 2).
        loss_function: ``"smooth_l1"`` (default), ``"l1"`` or ``"l2"`` for the critics.
        alpha_init: initial temperature (default 1.0).
        min_alpha, max_alpha: clamp the temperature used in the losses (``None``: no bound).
        action_spec: the action spec, read for ``target_entropy="auto"``; default: the actor's
            ``spec``; when neither is known, the first call reads the sampled action's shape.
        fixed_alpha: keep the temperature fixed (``log_alpha`` is then a buffer, not a parameter).
        target_entropy: a number, or ``"auto"`` for ``-prod(action shape)``.
        delay_actor: keep target actor parameters (default ``False``); when ``True`` they sample the
            next action of the target.
        delay_qvalue: keep target Q parameters (default ``True``).
        delay_value: keep target parameters of the value network (default ``True``; SAC v1 only).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        deactivate_vmap: run the Q-ensemble's parameter sets in a plain loop instead of one
            batched or vmapped call (TorchRL's option; the same numbers up to rounding).
        separate_losses: parameters the Q-network shares with the actor are trained by the actor
            loss only (the critics see them detached, expanded over the ensemble).
        skip_done_states: run the actor only on the next states that are not done; the done ones
            get a zero next action and a zero log-prob (TorchRL's option, for actors that fail on
            terminal observations).
        use_prioritized_weights: ``"auto"`` (default) or ``True``: when the batch holds
            ``"priority_weight"`` (a prioritized buffer's importance weights, the
            ``priority_weight`` key of :meth:`set_keys`), every loss is the weighted reduction
            ``sum(w * l) / sum(w)`` (``"sum"``: ``sum(w * l)``, ``"none"``: ``w * l``); ``False``
            ignores them.
        scalar_output_mode: with ``reduction="none"``, ``"exclude"`` leaves ``"alpha"`` and
            ``"entropy"`` out of the (batch-shaped) output and ``"non_tensor"`` keeps them as
            non-tensor entries; ``None`` excludes them with a warning, as TorchRL.
        gamma: deprecated (``DeprecationWarning``): the value estimator's discount; use
            ``make_value_estimator(gamma=...)``.
        priority_key: deprecated (``DeprecationWarning``): use ``set_keys(priority=...)``.

    Returns from ``forward`` a TensorDict with ``"loss_actor"``, ``"loss_qvalue"`` (summed over the
    ensemble), ``"loss_alpha"``, ``"loss_value"`` (SAC v1 only), and the detached ``"alpha"`` and
    ``"entropy"`` (mean of ``-log pi(a|s)``). Like TorchRL it writes the detached TD error into the
    input at ``"td_error"`` for prioritized replay (v2: absolute, max over the ensemble; v1: squared,
    each critic on its share). With ``reduction="none"`` the output has the input's batch size.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
        ...                       ProbabilisticTensorDictSequential, TensorDictModule)
        >>> from rl_objectives.losses.sac import SACLoss
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
        >>> loss = SACLoss(actor, critic)
        >>> td = TensorDict({"observation": torch.randn(6, 3), "action": torch.randn(6, 2),
        ...     "next": {"observation": torch.randn(6, 3), "reward": torch.randn(6),
        ...              "done": torch.zeros(6, dtype=torch.bool), "terminated": torch.zeros(6, dtype=torch.bool)}},
        ...     batch_size=[6])
        >>> out = loss(td)
        >>> sorted(out.keys()), loss.target_entropy
        (['alpha', 'entropy', 'loss_actor', 'loss_alpha', 'loss_qvalue'], tensor(-2.))
    """

    default_keys: ClassVar[dict] = {
        "action": "action",
        "value": "state_value",
        "state_action_value": "state_action_value",
        "log_prob": "action_log_prob",
        "priority": "td_error",
        "priority_weight": "priority_weight",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    }

    def __init__(
        self,
        actor_network: Any,
        qvalue_network: Any,
        value_network: Any = None,
        *,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: Any = None,
        fixed_alpha: bool = False,
        target_entropy: float | str = "auto",
        delay_actor: bool = False,
        delay_qvalue: bool = True,
        delay_value: bool = True,
        reduction: str | None = "mean",
        deactivate_vmap: bool = False,
        separate_losses: bool = False,
        skip_done_states: bool = False,
        use_prioritized_weights: bool | str = "auto",
        scalar_output_mode: str | None = None,
        gamma: float | None = None,
        priority_key: Any = None,
    ) -> None:
        reduction = "mean" if reduction is None else reduction
        _check_bool("SACLoss", "skip_done_states", skip_done_states)
        mode = _check_scalar_output_mode("SACLoss", scalar_output_mode, reduction, ("alpha", "entropy"))
        super().__init__(
            loss_function=loss_function,
            reduction=reduction,
            deactivate_vmap=deactivate_vmap,
            separate_losses=separate_losses,
            use_prioritized_weights=use_prioritized_weights,
            gamma=gamma,
            priority_key=priority_key,
        )
        check_positive_int("SACLoss", "num_qvalue_nets", num_qvalue_nets)
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"SACLoss: actor_network must be a probabilistic module with get_dist (e.g. ProbabilisticActor), got {type(actor_network).__name__}."
            )
        _check_alpha_bounds("SACLoss", alpha_init, min_alpha, max_alpha)
        resolved = continuous_target_entropy(
            "SACLoss", target_entropy, action_spec, actor_network, self.default_keys["action"]
        )
        self.num_qvalue_nets = num_qvalue_nets
        self.delay_actor = bool(delay_actor)
        self.delay_qvalue = bool(delay_qvalue)
        self.delay_value = bool(delay_value)
        self.skip_done_states = skip_done_states
        self.scalar_output_mode = mode
        self._target_entropy = resolved
        self._version = 2 if value_network is None else 1
        self.convert_to_functional(actor_network, "actor_network", create_target_params=self.delay_actor)
        if value_network is not None:
            self.convert_to_functional(
                value_network,
                "value_network",
                create_target_params=self.delay_value,
                compare_against=self._policy_params(actor_network),
            )
        trained_before = (actor_network,) if value_network is None else (actor_network, value_network)
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            expand_dim=num_qvalue_nets,
            create_target_params=self.delay_qvalue,
            compare_against=self._policy_params(*trained_before),
        )
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha)
        self._keys_from_actor(actor_network, "log_prob")

    @property
    def out_keys(self) -> list[str]:
        """The entries of the output (``"loss_value"`` with a value network)."""
        keys = ["loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"]
        return keys if self._version == 2 else [*keys, "loss_value"]

    def _sample(self, tensordict: Any, target: bool = False) -> PolicyDraw:
        """A reparameterised action from the actor (its target parameters with ``target``)."""
        swapped = self.swapped("actor_network", target=target)
        return rsample_action("SACLoss", self.actor_network, swapped, tensordict, self.tensor_keys.action)

    def _next_state(self, next_td: Any) -> tuple[Any, torch.Tensor]:
        """``next_td`` holding ``a' ~ pi(.|s')`` (the target actor with ``delay_actor``), and
        ``log pi(a'|s')``; with ``skip_done_states`` the done states get zeros for both."""
        if not self.skip_done_states:
            work, _, log_prob, _ = self._sample(next_td, target=self.delay_actor)
            return work, log_prob

        def draw(td: Any) -> tuple[torch.Tensor, torch.Tensor]:
            _, action, log_prob, _ = self._sample(td, target=self.delay_actor)
            return action, log_prob

        action, log_prob = on_live_rows("SACLoss", next_td, self.tensor_keys.done, draw)
        work = next_td.copy()
        work.set(self.tensor_keys.action, action)
        return work, log_prob

    def _qvalue_loss(
        self, calls: _Calls, tensordict: Any, alpha: torch.Tensor, reduce: Callable
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            next_state, next_log_prob = calls.next_policy(calls.next_state)
            next_q = calls.q(next_state, target=self.delay_qvalue)
            target = self._bootstrap(tensordict, soft_state_value(next_q, next_log_prob, alpha))
        loss, td_error = sac_qvalue_loss(calls.q(calls.state), target, self.loss_function)
        return reduce(loss), td_error

    def _qvalue_v1_loss(self, tensordict: Any, reduce: Callable) -> tuple[torch.Tensor, torch.Tensor]:
        """SAC v1 critics: each trains on its own share of the batch, towards ``r + gamma * V'(s')``."""
        batch = tensordict.batch_size
        n = self.num_qvalue_nets
        if not batch or batch[0] % n:
            raise ValueError(
                f"SACLoss: with a value network each of the {n} Q-networks (num_qvalue_nets) trains on its own "
                f"1/{n} of the batch, so the first batch dim must be divisible by {n}; got batch size {tuple(batch)}."
            )
        value_key = self.tensor_keys.value
        with torch.no_grad():
            next_td = _get("SACLoss", tensordict, "next").copy()
            next_value = self.call_network("value_network", next_td, target=self.delay_value, out_key=value_key)
            _check_batch_shaped("SACLoss", {("next", value_key): next_value}, batch)
            target = self._bootstrap(tensordict, next_value)
        pred = self._q_per_share(tensordict)
        loss, td_error = sac_v1_qvalue_loss(pred, target, self.loss_function)
        return reduce(loss), td_error

    def _q_per_share(self, tensordict: Any) -> torch.Tensor:
        """``Q_i`` on the ``i``-th of ``num_qvalue_nets`` equal shares of the batch (along the first
        batch dim), laid back out over the batch: batch-shaped."""
        n, batch = self.num_qvalue_nets, tensordict.batch_size
        key = self.tensor_keys.state_action_value
        module = self.qvalue_network
        shares = tensordict.select(*module.in_keys, strict=False).reshape(n, -1, *batch[1:])
        leaves, bind = self._binder("qvalue_network", self.params_of("qvalue_network"))
        preds = []
        for i in range(n):
            with bind([leaf[i] for leaf in leaves]):
                value = _get("SACLoss", module(shares[i].copy()), key)
            _check_batch_shaped("SACLoss", {key: value}, shares.batch_size[1:])
            preds.append(value)
        return torch.stack(preds, 0).reshape(batch)

    def _value_loss(self, calls: _Calls, tensordict: Any, alpha: torch.Tensor, reduce: Callable) -> torch.Tensor:
        """SAC v1 value network: ``V(s)`` towards ``min_i Q'_i(s, a) - alpha * log pi(a|s)``, ``a ~ pi(.|s)``
        (target actor and critics where kept; nothing but the value network is trained)."""
        value_key = self.tensor_keys.value
        pred = self.call_network("value_network", tensordict.detach(), out_key=value_key)
        _check_batch_shaped("SACLoss", {value_key: pred}, tensordict.batch_size)
        with torch.no_grad():
            acting, log_prob = calls.policy(calls.state, target=self.delay_actor)
            q = calls.q(acting, target=self.delay_qvalue)
        return reduce(sac_value_loss(pred, q, log_prob, alpha, self.loss_function))

    def _actor_loss(self, calls: _Calls, alpha: torch.Tensor, reduce: Callable) -> tuple[torch.Tensor, torch.Tensor]:
        acting, log_prob = calls.policy(calls.state)
        q = calls.q(acting, params=self._detached_params("qvalue_network"))
        return reduce(sac_actor_loss(log_prob, q, alpha)), log_prob.detach()

    def _tensordict_calls(self, tensordict: Any) -> _Calls:
        """The networks on the batch's TensorDicts (their copies hold what the actor wrote)."""

        def policy(state: Any, target: bool = False) -> tuple[Any, torch.Tensor]:
            draw = self._sample(state, target=target)
            return draw.td, draw.log_prob

        def q(state: Any, target: bool = False, params: Any = None) -> torch.Tensor:
            return self._q(state, target=target, params=params)

        return _Calls(tensordict, _get("SACLoss", tensordict, "next"), policy, self._next_state, q)

    def _tensor_calls(self, tensordict: Any) -> _Calls | None:
        """The networks on the batch's tensors; ``None`` when a network has no tensor function, an
        input is missing or not a plain tensor, or with ``skip_done_states``: the TensorDict calls
        then run (and report)."""
        batch_dims = tensordict.batch_dims
        dist_function = getattr(self.actor_network, "dist_function", None)
        if self.skip_done_states or dist_function is None or not batch_dims:
            return None
        build = dist_function(batch_dims)
        key = self.tensor_keys.state_action_value
        critic = self._tensor_network("qvalue_network", key, batch_dims)
        stacked_critic = self._tensor_network("qvalue_network", key, batch_dims + 1)  # every set at once
        action_key = self.tensor_keys.action
        actor_keys = tuple(self.actor_network.in_keys)
        if build is None or critic is None or action_key in actor_keys:
            return None
        critic_keys, critic_fn = critic
        stacked_fn = None if stacked_critic is None else stacked_critic[1]
        keys = list(dict.fromkeys((*actor_keys, *critic_keys)))
        next_keys = [k for k in keys if k != action_key]
        next_td = tensordict.get("next", None)
        values = _plain_tensors(tensordict, keys)
        next_values = None if next_td is None else _plain_tensors(next_td, next_keys)
        if values is None or next_values is None:
            return None
        batch, sets = tensordict.batch_size, (self.num_qvalue_nets,)
        expected = torch.Size(sets) + batch
        binders: dict = {}  # the actor's parameters and their swap, looked up once per batch

        def policy(state: dict, target: bool = False) -> tuple[dict, torch.Tensor]:
            bound = binders.get(target)
            if bound is None:
                bound = binders[target] = self._binder("actor_network", self.params_of("actor_network", target))
            leaves, bind = bound
            with bind(leaves):
                dist = build(*[state[k] for k in actor_keys])
            action, log_prob = rsample_with_log_prob("SACLoss", dist, batch)
            return {**state, action_key: action}, log_prob

        def q(state: dict, target: bool = False, params: Any = None) -> torch.Tensor:
            params, kept = self._params_and_kept("qvalue_network", target, params)
            inputs = [state[k] for k in critic_keys]
            stacked = None if stacked_fn is None else (stacked_fn, inputs)
            value = self._with_params("qvalue_network", params, kept, lambda: critic_fn(*inputs), stacked)
            if value.shape != expected:
                _check_batch_shaped("SACLoss", {key: value}, batch, lead=sets)
            return value

        return _Calls(
            dict(zip(keys, values)),
            dict(zip(next_keys, next_values)),
            policy,
            lambda state: policy(state, target=self.delay_actor),
            q,
        )

    def forward(self, tensordict: Any) -> TensorDict:
        _get("SACLoss", tensordict, self.tensor_keys.action)
        losses = {}
        alpha = self._alpha  # the clamped temperature, detached: read once per call
        calls = self._tensor_calls(tensordict) or self._tensordict_calls(tensordict)
        reduce = self._reducer(tensordict)  # the loss mask and priority weights, read once
        if self._version == 2:
            loss_qvalue, td_error = self._qvalue_loss(calls, tensordict, alpha, reduce)
        else:
            loss_qvalue, td_error = self._qvalue_v1_loss(tensordict, reduce)
            losses["loss_value"] = self._value_loss(calls, tensordict, alpha, reduce)
        loss_actor, log_prob = self._actor_loss(calls, alpha, reduce)
        if self._target_entropy is None:
            # no spec: the action's own shape (beyond the batch dims) gives "auto"
            action = _get("SACLoss", tensordict, self.tensor_keys.action)
            self._target_entropy = auto_target_entropy(action.shape[tensordict.batch_dims :])
        loss_alpha = reduce(temperature_loss(self.log_alpha, log_prob, self._target_entropy))
        tensordict.set(self.tensor_keys.priority, td_error)
        return _loss_output(
            {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue, "loss_alpha": loss_alpha, **losses},
            {"alpha": alpha, "entropy": -log_prob.mean()},
            self.reduction,
            self.scalar_output_mode,
            tensordict.batch_size,
        )
