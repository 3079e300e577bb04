"""REDQLoss: randomized ensembled double Q-learning (Chen et al., 2021) on top of SAC.

A large ensemble of ``N`` critics is trained; each update draws a random subset of ``M`` target critics:

- critics: every ``Q_i(s, a)`` regresses onto ``r + gamma * (1 - terminated) * (min_{j in subset} Q'_j(s', a') - alpha * log pi(a'|s'))``
  with ``a' ~ pi(.|s')`` (the subset is drawn with ``torch.randperm``, so ``torch.manual_seed`` fixes it);
- actor: minimise ``alpha * log pi(a|s) - mean_i Q_i(s, a)`` (the mean over the whole ensemble,
  critics detached, ``a`` reparameterised);
- temperature: minimise ``-alpha * (log pi + target_entropy)`` over the current and next actions'
  log-probs (log-probs detached), as TorchRL's REDQ does.

The math is in :mod:`rl_objectives.functional.sac` (``soft_state_value``, ``redq_qvalue_loss``,
``redq_actor_loss``, ``redq_temperature_loss``); this module draws the subset, runs the networks,
maps the keys and reduces.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict import TensorDict
from tdict.validation import check_positive_int

from ..functional.sac import redq_actor_loss, redq_qvalue_loss, redq_temperature_loss, soft_state_value
from ._actions import auto_target_entropy, continuous_target_entropy, rsample_action
from .utils import (
    _BootstrappedLoss,
    _check_alpha_bounds,
    _check_batch_shaped,
    _check_bool,
    _check_scalar_output_mode,
    _get,
    _loss_output,
    _masked_weighted_reduce,
    _TemperatureMixin,
)

__all__ = ["REDQLoss"]


class REDQLoss(_TemperatureMixin, _BootstrappedLoss):
    """The REDQ loss (TorchRL's ``REDQLoss``).

    Args:
        actor_network: a probabilistic actor with a reparameterisable distribution over ``"action"``.
        qvalue_network: a Q-network reading the observation and ``"action"`` and writing
            ``"state_action_value"`` (batch shape); trained as an ensemble of ``num_qvalue_nets``.

    Keyword Args:
        num_qvalue_nets: size of the ensemble ``N`` (default 10).
        sub_sample_len: size ``M`` of the random subset of target critics (default 2); as in TorchRL it
            is lowered to ``num_qvalue_nets - 1`` (at least 1) when above, so that the subset is strict.
        loss_function: ``"smooth_l1"`` (default), ``"l1"`` or ``"l2"`` for the critics (averaged
            over the ensemble).
        alpha_init: initial temperature (default 1.0).
        min_alpha, max_alpha: clamp the temperature used in the losses (``None``: no bound).
        action_spec: read for ``target_entropy="auto"``; default the actor's ``spec``; when neither
            is known, the first call reads the sampled action's shape.
        fixed_alpha: keep the temperature fixed (``log_alpha`` is then a buffer).
        target_entropy: a number, or ``"auto"`` for ``-prod(action shape)``.
        delay_actor: keep target actor parameters that draw the next action (default ``False``).
        delay_qvalue: keep target Q parameters (default ``True``).
        deactivate_vmap: run the Q-ensemble's parameter sets in a plain loop instead of one
            batched or vmapped call (TorchRL's option; the same numbers up to rounding).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``, applied as TorchRL's REDQ does to
            the element-wise losses: ``loss_actor`` and ``loss_qvalue`` are ``[num_qvalue_nets, *B]``
            (``alpha * log pi(a|s) - Q_i(s, a)`` and each critic's distance to the target),
            ``loss_alpha`` is ``[2, *B]`` (current and next actions). ``"mean"`` averages over all of
            it, ``"sum"`` sums, ``"none"`` returns those tensors.
        separate_losses: parameters the Q-network shares with the actor are trained by the actor
            loss only (the critics see them detached, expanded over the ensemble).
        scalar_output_mode: with ``reduction="none"``, ``"exclude"`` leaves ``"alpha"`` and
            ``"entropy"`` out of the output, ``"non_tensor"`` keeps them as non-tensor entries;
            ``None`` excludes them with a warning, as TorchRL.
        gSDE: must be ``False``: no generalized state-dependent exploration module exists in
            :mod:`rl_objectives.modules`, so TorchRL's ``gSDE=True`` (which resets that noise) has
            nothing to act on and raises ``NotImplementedError``.
        gamma: deprecated (``DeprecationWarning``): the value estimator's discount; use
            ``make_value_estimator(gamma=...)``.
        use_prioritized_weights: ``"auto"`` (default) or ``True``: when the batch holds
            ``"priority_weight"`` (a prioritized buffer's importance weights, the ``priority_weight``
            key of :meth:`set_keys`), each loss is the weighted reduction of its ``[K, *B]`` elements,
            a sample's weight applied to all its ``K`` rows (``"mean"``: ``sum(w * l) / (K * sum(w))``,
            ``"sum"``: ``sum(w * l)``, ``"none"``: ``w * l``); ``False`` ignores them. TorchRL
            0.14.1's REDQLoss has neither the option nor the key (it never weighs).
        priority_key: deprecated (``DeprecationWarning``): use ``set_keys(priority=...)``.

    Returns from ``forward`` a TensorDict with ``"loss_actor"``, ``"loss_qvalue"``,
    ``"loss_alpha"`` and the detached diagnostics ``"alpha"``, ``"entropy"`` (mean of ``-log pi`` over
    the current and next actions), ``"state_action_value_actor"``, ``"action_log_prob_actor"``,
    ``"next.state_value"`` and ``"target_value"`` (batch means). Writes the detached squared TD error
    (max over the ensemble) into the input at ``"td_error"``.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
        ...                       ProbabilisticTensorDictSequential, TensorDictModule)
        >>> from rl_objectives.losses.redq import REDQLoss
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
        >>> loss = REDQLoss(actor, critic, num_qvalue_nets=4, sub_sample_len=2)
        >>> td = TensorDict({"observation": torch.randn(6, 3), "action": torch.randn(6, 2),
        ...     "next": {"observation": torch.randn(6, 3), "reward": torch.randn(6),
        ...              "done": torch.zeros(6, dtype=torch.bool), "terminated": torch.zeros(6, dtype=torch.bool)}},
        ...     batch_size=[6])
        >>> out = loss(td)
        >>> out["loss_qvalue"].shape, loss.target_entropy
        (torch.Size([]), tensor(-2.))
    """

    default_keys: ClassVar[dict] = {
        "action": "action",
        "value": "state_value",
        "state_action_value": "state_action_value",
        "sample_log_prob": "action_log_prob",  # TorchRL 0.14's name and default (the log-prob is recomputed)
        "priority": "td_error",
        "priority_weight": "priority_weight",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    }
    out_keys: ClassVar[list] = [
        "loss_actor",
        "loss_qvalue",
        "loss_alpha",
        "alpha",
        "entropy",
        "state_action_value_actor",
        "action_log_prob_actor",
        "next.state_value",
        "target_value",
    ]

    def __init__(
        self,
        actor_network: Any,
        qvalue_network: Any,
        *,
        num_qvalue_nets: int = 10,
        sub_sample_len: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = 0.1,
        max_alpha: float | None = 10.0,
        action_spec: Any = None,
        fixed_alpha: bool = False,
        target_entropy: float | str = "auto",
        delay_actor: bool = False,
        delay_qvalue: bool = True,
        deactivate_vmap: bool = False,
        reduction: str | None = "mean",
        separate_losses: bool = False,
        scalar_output_mode: str | None = None,
        use_prioritized_weights: bool | str = "auto",
        gSDE: bool = False,
        gamma: float | None = None,
        priority_key: Any = None,
    ) -> None:
        owner = "REDQLoss"
        reduction = "mean" if reduction is None else reduction
        if _check_bool(owner, "gSDE", gSDE):
            raise NotImplementedError(
                "REDQLoss: gSDE=True is not supported: rl_objectives.modules has no generalized state-dependent "
                "exploration (gSDE) module whose noise the loss would reset; pass gSDE=False."
            )
        mode = _check_scalar_output_mode(owner, scalar_output_mode, reduction, ("alpha", "entropy"))
        super().__init__(
            loss_function=loss_function,
            reduction=reduction,
            deactivate_vmap=deactivate_vmap,
            separate_losses=separate_losses,
            use_prioritized_weights=use_prioritized_weights,
            gamma=gamma,
            priority_key=priority_key,
        )
        check_positive_int(owner, "num_qvalue_nets", num_qvalue_nets)
        check_positive_int(owner, "sub_sample_len", sub_sample_len)
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"{owner}: actor_network must be a probabilistic module with get_dist (e.g. ProbabilisticActor), got {type(actor_network).__name__}."
            )
        _check_alpha_bounds(owner, alpha_init, min_alpha, max_alpha)
        self._target_entropy = continuous_target_entropy(
            owner, target_entropy, action_spec, actor_network, self.default_keys["action"]
        )
        self.num_qvalue_nets = num_qvalue_nets
        # as TorchRL: the target is a minimum over a strict subset of the critics when there are several
        self.sub_sample_len = max(1, min(sub_sample_len, num_qvalue_nets - 1))
        self.delay_actor = bool(delay_actor)
        self.delay_qvalue = bool(delay_qvalue)
        self.gSDE = gSDE
        self.scalar_output_mode = mode
        self.convert_to_functional(actor_network, "actor_network", create_target_params=self.delay_actor)
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            expand_dim=num_qvalue_nets,
            create_target_params=self.delay_qvalue,
            compare_against=self._policy_params(actor_network),
        )
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha)

    def _subset_q(self, tensordict: Any, n: int, **kwargs: Any) -> torch.Tensor:
        """``n`` critics' values, ``[n, *batch]`` (``n``: the ensemble, or the target subset)."""
        key = self.tensor_keys.state_action_value
        value = self.call_network("qvalue_network", tensordict, out_key=key, **kwargs)
        _check_batch_shaped("REDQLoss", {key: value}, tensordict.batch_size, lead=(n,))
        return value

    def _reduce_stacked(self, loss: torch.Tensor, tensordict: Any) -> torch.Tensor:
        """``loss`` (``[K, *B]``: per critic, or current / next action) reduced over the positions the
        loss mask (``[*B]``) keeps, in every row; a prioritized buffer's weights (``[*B]``) weigh every
        row alike: the weighted mean is ``sum(w * l) / (K * sum(w))``."""
        valid = self._valid_positions(tensordict)
        # the batch dims trail: every row shares the mask and the weights
        valid = None if valid is None else valid.expand_as(loss)
        return _masked_weighted_reduce(loss, valid, self._priority_weight(tensordict), self.reduction)

    def forward(self, tensordict: Any) -> TensorDict:
        keys = self.tensor_keys
        _get("REDQLoss", tensordict, keys.action)
        next_td = _get("REDQLoss", tensordict, "next")
        alpha = self._alpha
        subset = torch.randperm(self.num_qvalue_nets)[: self.sub_sample_len].sort().values

        actor_td, _, log_prob, _ = rsample_action(
            "REDQLoss", self.actor_network, self.swapped("actor_network"), tensordict, keys.action
        )
        q_actor = self._subset_q(actor_td, self.num_qvalue_nets, params=self._detached_params("qvalue_network"))
        loss_actor = self._reduce_stacked(
            redq_actor_loss(log_prob, q_actor, alpha), tensordict
        )  # [N, *B] before the reduction

        with torch.no_grad():
            actor_params = self.params_of("actor_network", target=self.delay_actor)
            next_actor_td, _, next_log_prob, _ = rsample_action(
                "REDQLoss", self.actor_network, self.swapped("actor_network", actor_params), next_td, keys.action
            )
            target_params = self.params_of("qvalue_network", target=self.delay_qvalue)[subset]
            next_q = self._subset_q(next_actor_td, self.sub_sample_len, params=target_params)
            next_value = soft_state_value(next_q, next_log_prob, alpha)
            target = self._bootstrap(tensordict, next_value)
        pred = self._subset_q(tensordict.copy(), self.num_qvalue_nets)
        loss_qvalue, td_error = redq_qvalue_loss(pred, target, self.loss_function)
        loss_qvalue = self._reduce_stacked(loss_qvalue, tensordict)

        if self._target_entropy is None:
            # no spec: the sampled action's own shape (beyond the batch dims) gives "auto"
            self._target_entropy = auto_target_entropy(actor_td.get(keys.action).shape[tensordict.batch_dims :])
        log_pi = torch.stack([log_prob.detach(), next_log_prob], 0)
        loss_alpha = self._reduce_stacked(
            redq_temperature_loss(self.log_alpha, log_pi, self._target_entropy), tensordict
        )

        tensordict.set(keys.priority, td_error)
        return _loss_output(
            {
                "loss_actor": loss_actor,
                "loss_qvalue": loss_qvalue,
                "loss_alpha": loss_alpha,
                "state_action_value_actor": q_actor.detach().mean(),
                "action_log_prob_actor": log_prob.detach().mean(),
                "next.state_value": next_value.mean(),
                "target_value": target.mean(),
            },
            {"alpha": alpha, "entropy": -log_pi.mean()},
            self.reduction,
            self.scalar_output_mode,
            [],  # the losses are [N, *B] and [2, *B]: no common batch dims
        )
