"""CrossQLoss: SAC without target networks, with batch-normalised critics (Bhatt et al., 2024).

The critics see ``(s, a)`` and ``(s', a')`` (``a' ~ pi(.|s')``) in one joint forward pass, so
their batch (re)normalisation layers (:class:`~rl_objectives.modules.BatchRenorm1d`) normalise both
with the same statistics; the next-state half of that pass gives the bootstrapped target
``r + gamma * (1 - terminated) * (min_i Q_i(s', a') - alpha * log pi(a'|s'))`` (detached), with no
target copies. The actor's loss ``alpha * log pi(a|s) - min_i Q_i(s, a)`` runs the critics in
evaluation mode (running statistics); the temperature is SAC's.

The math is SAC's, in :mod:`rl_objectives.functional.sac` (``soft_state_value``, ``sac_qvalue_loss``,
``sac_actor_loss``, ``temperature_loss``); this module runs the joint pass, maps the keys and reduces.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict import TensorDict
from tdict.validation import check_positive_int

from ..functional.sac import sac_actor_loss, sac_qvalue_loss, soft_state_value, temperature_loss
from ._actions import auto_target_entropy, continuous_target_entropy, rsample_action
from .utils import (
    _BootstrappedLoss,
    _check_alpha_bounds,
    _check_scalar_output_mode,
    _get,
    _loss_output,
    _TemperatureMixin,
)

__all__ = ["CrossQLoss"]


def _q_inputs(owner: str, tensordict: Any, in_keys: list, where: str) -> Any:
    """The Q-network's inputs of ``tensordict``, with an error naming those missing."""
    missing = [key for key in in_keys if tensordict.get(key, None) is None]
    if missing:
        raise KeyError(
            f"{owner}: the {where} misses the Q-network's input(s) {missing}; keys present: "
            f"{sorted(map(str, tensordict.keys(True, True)))}."
        )
    return tensordict.select(*in_keys)


class CrossQLoss(_TemperatureMixin, _BootstrappedLoss):
    """The CrossQ loss (TorchRL's ``CrossQLoss``).

    Args:
        actor_network: a probabilistic actor whose ``get_dist`` gives a reparameterisable
            distribution over ``"action"`` (e.g. ``TanhNormal``).
        qvalue_network: a Q-network (a TensorDictModule) reading the observation and ``"action"``
            and writing ``"state_action_value"`` (batch shape), usually with
            :class:`~rl_objectives.modules.BatchRenorm1d` layers; trained as an ensemble of
            ``num_qvalue_nets`` (each with its own running statistics). No target copies are kept.

    Keyword Args:
        num_qvalue_nets: size of the Q ensemble (default 2).
        loss_function: ``"smooth_l1"`` (default), ``"l1"`` or ``"l2"`` for the critics.
        alpha_init, min_alpha, max_alpha, action_spec, fixed_alpha, target_entropy: the temperature,
            as in :class:`~rl_objectives.SACLoss`.
        priority_key: deprecated (``DeprecationWarning``): use ``set_keys(priority=...)``.
        separate_losses: parameters the Q-network shares with the actor are trained by the actor
            loss only.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        deactivate_vmap: run the Q-ensemble's parameter sets in a plain loop (the same numbers).
        scalar_output_mode: with ``reduction="none"``: ``"exclude"`` or ``"non_tensor"`` for
            ``"alpha"`` and ``"entropy"``; ``None`` excludes them with a warning, as TorchRL.

    A batch with several dims is flattened for the critics (batch normalisation reads
    ``[n, features]``); the per-sample outputs have the input's batch shape.

    Modes: the critic loss runs the critics in the loss module's mode (``loss.train()``, the
    default: batch statistics, running statistics updated once per call; ``loss.eval()``: running
    statistics, nothing updated); the actor loss runs them in evaluation mode. The critics' own
    ``training`` flags are put back afterwards.

    Returns from ``forward`` a TensorDict with ``"loss_actor"``, ``"loss_qvalue"`` (summed over the
    ensemble), ``"loss_alpha"``, the detached per-sample ``"log_prob"`` (of the actor's draw) and
    ``"td_error"`` (``|Q_i - target|``, max over the ensemble), and ``"alpha"`` and ``"entropy"``,
    as TorchRL; the TD error is also written into the input at ``"td_error"``.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
        ...                       ProbabilisticTensorDictSequential, TensorDictModule)
        >>> from rl_objectives import CrossQLoss
        >>> from rl_objectives.modules import BatchRenorm1d
        >>> class Critic(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = nn.Sequential(BatchRenorm1d(5, warmup_steps=100), nn.Linear(5, 1))
        ...     def forward(self, obs, action):
        ...         return self.net(torch.cat([obs, action], -1)).squeeze(-1)
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()),
        ...                      in_keys=["observation"], out_keys=["loc", "scale"]),
        ...     ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"],
        ...                                   distribution_class=torch.distributions.Normal))
        >>> critic = TensorDictModule(Critic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
        >>> loss = CrossQLoss(actor, critic)
        >>> td = TensorDict({"observation": torch.randn(6, 3), "action": torch.randn(6, 2),
        ...     "next": {"observation": torch.randn(6, 3), "reward": torch.randn(6),
        ...              "done": torch.zeros(6, dtype=torch.bool), "terminated": torch.zeros(6, dtype=torch.bool)}},
        ...     batch_size=[6])
        >>> out = loss(td)
        >>> sorted(out.keys())
        ['alpha', 'entropy', 'log_prob', 'loss_actor', 'loss_alpha', 'loss_qvalue', 'td_error']
        >>> loss.target_networks
        []
    """

    default_keys: ClassVar[dict] = {
        "action": "action",
        "state_action_value": "state_action_value",
        "priority": "td_error",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
        "log_prob": "_log_prob",
    }
    out_keys: ClassVar[list] = ["loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"]

    def __init__(
        self,
        actor_network: Any,
        qvalue_network: Any,
        *,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: Any = None,
        fixed_alpha: bool = False,
        target_entropy: float | str = "auto",
        priority_key: Any = None,
        separate_losses: bool = False,
        reduction: str | None = None,
        deactivate_vmap: bool = False,
        scalar_output_mode: str | None = None,
    ) -> None:
        owner = "CrossQLoss"
        reduction = "mean" if reduction is None else reduction
        mode = _check_scalar_output_mode(owner, scalar_output_mode, reduction, ("alpha", "entropy"))
        super().__init__(
            loss_function=loss_function,
            reduction=reduction,
            deactivate_vmap=deactivate_vmap,
            separate_losses=separate_losses,
            priority_key=priority_key,
        )
        check_positive_int(owner, "num_qvalue_nets", num_qvalue_nets)
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"{owner}: actor_network must be a probabilistic module with get_dist (e.g. ProbabilisticActor), got {type(actor_network).__name__}."
            )
        in_keys = getattr(qvalue_network, "in_keys", None)
        if not isinstance(in_keys, (list, tuple)) or not in_keys:
            raise TypeError(
                f"{owner}: qvalue_network must declare its in_keys (e.g. a TensorDictModule): the joint pass over "
                f"(s, a) and (s', a') concatenates those entries; got {type(qvalue_network).__name__}."
            )
        _check_alpha_bounds(owner, alpha_init, min_alpha, max_alpha)
        self._target_entropy = continuous_target_entropy(
            owner, target_entropy, action_spec, actor_network, self.default_keys["action"]
        )
        self.num_qvalue_nets = num_qvalue_nets
        self.scalar_output_mode = mode
        self.convert_to_functional(actor_network, "actor_network")
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            expand_dim=num_qvalue_nets,
            compare_against=self._policy_params(actor_network),
        )
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha)

    def _critics_in_mode(self, training: bool) -> list[bool]:
        """Put the critics in ``training`` mode; returns their previous flags (for :meth:`_restore`)."""
        modules = list(self.qvalue_network.modules())
        previous = [m.training for m in modules]
        for m in modules:
            m.training = training
        return previous

    def _restore(self, previous: list[bool]) -> None:
        for m, flag in zip(self.qvalue_network.modules(), previous):
            m.training = flag

    @staticmethod
    def _flat(tensordict: Any) -> Any:
        """``tensordict`` with one batch dim: the critics' batch normalisation reads ``[n, features]``."""
        if not tensordict.batch_dims:
            raise ValueError("CrossQLoss: the input needs a batch dim (the joint pass concatenates s and s' along it).")
        return tensordict if tensordict.batch_dims == 1 else tensordict.reshape(-1)

    def qvalue_loss(self, tensordict: Any) -> tuple[torch.Tensor, dict]:
        """The critics' loss: ``(s, a)`` and ``(s', a')`` in one pass, the target from its second half.

        Returns the reduced loss and ``{"td_error": |Q_i - target| max over the ensemble}`` (detached).
        """
        owner, keys = "CrossQLoss", self.tensor_keys
        batch, flat = tensordict.batch_size, self._flat(tensordict)
        in_keys = list(self.qvalue_network.in_keys)
        alpha = self._alpha
        n = flat.batch_size[0]
        with torch.no_grad():
            next_td = _get(owner, flat, "next")
            draw = rsample_action(owner, self.actor_network, self.swapped("actor_network"), next_td, keys.action)
        joint = torch.cat(
            [
                _q_inputs(owner, flat, in_keys, "input"),
                _q_inputs(owner, draw.td, in_keys, "next state (with the drawn next action)"),
            ],
            0,
        )
        previous = self._critics_in_mode(self.training)
        try:
            values = self._q(joint)  # [N, 2n, *rest]
        finally:
            self._restore(previous)
        pred, next_q = values[:, :n], values[:, n:]
        with torch.no_grad():
            target = self._bootstrap(flat, soft_state_value(next_q, draw.log_prob, alpha))
        loss, td_error = sac_qvalue_loss(pred, target, self.loss_function)
        return self._reduce_loss(loss.reshape(batch), tensordict), {"td_error": td_error.reshape(batch)}

    def actor_loss(self, tensordict: Any) -> tuple[torch.Tensor, dict]:
        """``alpha * log pi(a|s) - min_i Q_i(s, a)``, ``a`` reparameterised, the critics detached and in
        evaluation mode. Returns the reduced loss and ``{"log_prob": log pi(a|s)}`` (detached)."""
        batch = tensordict.batch_size
        draw = rsample_action(
            "CrossQLoss",
            self.actor_network,
            self.swapped("actor_network"),
            self._flat(tensordict),
            self.tensor_keys.action,
        )
        previous = self._critics_in_mode(False)
        try:
            q = self._q(draw.td, params=self._detached_params("qvalue_network"))
        finally:
            self._restore(previous)
        loss = sac_actor_loss(draw.log_prob, q, self._alpha).reshape(batch)
        return self._reduce_loss(loss, tensordict), {"log_prob": draw.log_prob.detach().reshape(batch)}

    def alpha_loss(self, log_prob: torch.Tensor, tensordict: Any = None) -> torch.Tensor:
        """``-log_alpha * (log pi + target_entropy)`` (``log_prob`` detached), reduced."""
        if self._target_entropy is None:
            # no spec: the stored action's own shape (beyond the batch dims) gives "auto"
            if tensordict is None:
                raise ValueError(
                    "CrossQLoss.alpha_loss: target_entropy is 'auto' and no action spec is known; pass the input "
                    "tensordict (its action's shape gives the target) or set loss.target_entropy."
                )
            action = _get("CrossQLoss", tensordict, self.tensor_keys.action)
            self._target_entropy = auto_target_entropy(action.shape[tensordict.batch_dims :])
        return self._reduce_loss(temperature_loss(self.log_alpha, log_prob, self._target_entropy), tensordict)

    def forward(self, tensordict: Any) -> TensorDict:
        _get("CrossQLoss", tensordict, self.tensor_keys.action)
        loss_qvalue, value_metadata = self.qvalue_loss(tensordict)
        loss_actor, actor_metadata = self.actor_loss(tensordict)
        log_prob = actor_metadata["log_prob"]
        loss_alpha = self.alpha_loss(log_prob, tensordict)
        tensordict.set(self.tensor_keys.priority, value_metadata["td_error"])
        return _loss_output(
            {
                "loss_actor": loss_actor,
                "loss_qvalue": loss_qvalue,
                "loss_alpha": loss_alpha,
                "log_prob": log_prob,
                "td_error": value_metadata["td_error"],
            },
            {"alpha": self._alpha, "entropy": -log_prob.mean()},
            self.reduction,
            self.scalar_output_mode,
            tensordict.batch_size,
        )
