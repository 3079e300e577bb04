"""A2CLoss: advantage actor-critic, the plainest on-policy loss.

    loss_objective = -mean(log pi(a_t | s_t) * A_t)
    loss_critic    = critic_coeff * mean(distance(V(s_t), value_target_t))
    loss_entropy   = -entropy_coeff * mean(H[pi(. | s_t)])

Per-step entries (advantage, value target, state value, log-probs) have the TensorDict's batch
shape (``[B]`` or a rollout's ``[N, T]``), with no trailing singleton dim; a ``[B]`` vs ``[B, 1]``
mix raises ``ValueError`` naming the keys instead of broadcasting.
"""

from __future__ import annotations

from typing import Any

import torch
from tdict import TensorDict

from ..functional.ppo import policy_gradient_loss
from .actor_critic import _ActorCriticLoss

__all__ = ["A2CLoss"]


class A2CLoss(_ActorCriticLoss):
    """Advantage actor-critic loss (TorchRL's ``A2CLoss``).

    ``loss_objective = -mean(log pi(a|s) * A)`` on the stored action, ``loss_critic =
    critic_coeff * mean(distance(V(s), value_target))`` and, with ``entropy_bonus``,
    ``loss_entropy = -entropy_coeff * mean(H[pi(.|s)])`` (``"entropy"`` is reported detached).
    When the input has no advantage, the value estimator (GAE by default, see
    :meth:`make_value_estimator`) computes it without gradients on a shallow copy of the input:
    the caller's TensorDict is not modified.

    Advantages need the time order: on a batch from a collector (its steps carry
    ``("collector", "traj_ids")``) whose steps are out of order, a flattened or shuffled minibatch,
    the estimator raises a ``ValueError`` naming the fix instead of computing wrong advantages
    silently, as TorchRL would: run ``loss.value_estimator(batch)`` on the collected batch before
    flattening (the minibatches then carry the advantage). TD(0) needs no time order.

    Args:
        actor_network: the policy (a ProbabilisticTensorDictSequential / ProbabilisticTensorDictModule).
        critic_network: writes the state value (``"state_value"``, batch-shaped) or ``None`` (no
            critic loss; the input must then hold the advantage).

    Keyword Args:
        entropy_bonus: add ``loss_entropy``. Default ``True``.
        samples_mc_entropy: draws of the Monte-Carlo entropy estimate for distributions without a
            closed form. Default 1.
        entropy_coeff: weight of the entropy bonus. Default 0.01.
        critic_coeff: weight of the critic loss; ``None`` leaves ``loss_critic`` out. Default 1.0.
        loss_critic_type: ``"l1"``, ``"l2"`` or ``"smooth_l1"`` (default).
        separate_losses: the critic loss does not train parameters shared with the actor.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (per-step losses, batch-shaped).
        clip_value: clip the value prediction to ``stored value +/- clip_value`` (the input must
            hold the collection-time ``"state_value"``); adds ``"value_clip_fraction"``. A number or
            a one-element tensor (a bool raises ``ValueError``).
        gamma: deprecated (``DeprecationWarning``): the default discount of the value estimator
            (else 0.99); use ``make_value_estimator(gamma=...)``.
        advantage_norm: a value normaliser (TorchRL's ``ValueNorm`` interface: ``update(value_target)``
            and ``scale()``): the advantage is divided by ``advantage_norm.scale()`` (not re-centred).
            In training mode its statistics are updated with the value targets whenever the loss runs
            its own value estimator (the input has no advantage); with a precomputed advantage, call
            ``advantage_norm.update(value_target)`` once per batch yourself.
        advantage_key, value_target_key, value_key: shortcuts for :meth:`set_keys`.
        functional: accepted for TorchRL's signature; the networks' own parameters are trained
            either way, so ``True`` and ``False`` give the same losses.
        actor, critic: TorchRL's other names of ``actor_network`` / ``critic_network``.

    Keys (``set_keys``): advantage, value_target, value, sample_log_prob, action, reward, done,
    terminated.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule, ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
        >>> from rl_objectives.losses.a2c import A2CLoss
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(nn.Linear(3, 2), in_keys=["obs"], out_keys=["logits"]),
        ...     ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"],
        ...                                   distribution_class=torch.distributions.Categorical))
        >>> critic = TensorDictModule(lambda obs: obs.sum(-1), in_keys=["obs"], out_keys=["state_value"])
        >>> loss = A2CLoss(actor, critic)
        >>> td = TensorDict(obs=torch.randn(5, 3), action=torch.randint(2, (5,)), advantage=torch.randn(5),
        ...                 value_target=torch.randn(5), batch_size=[5])
        >>> out = loss(td)
        >>> sorted(out.keys())
        ['entropy', 'loss_critic', 'loss_entropy', 'loss_objective']
        >>> out["loss_objective"].shape
        torch.Size([])
    """

    _keys_follow_actor = True

    def __init__(
        self,
        actor_network: Any = None,
        critic_network: Any = None,
        *,
        entropy_bonus: bool = True,
        samples_mc_entropy: int = 1,
        entropy_coeff: float = 0.01,
        critic_coeff: float | None = 1.0,
        loss_critic_type: str = "smooth_l1",
        separate_losses: bool = False,
        reduction: str | None = "mean",
        clip_value: float | torch.Tensor | None = None,
        gamma: float | None = None,
        advantage_key: Any = None,
        value_target_key: Any = None,
        value_key: Any = None,
        functional: bool = True,
        actor: Any = None,
        critic: Any = None,
        advantage_norm: Any = None,
    ) -> None:
        super().__init__(
            actor_network,
            critic_network,
            advantage_norm=advantage_norm,
            functional=functional,
            actor=actor,
            critic=critic,
            entropy_bonus=entropy_bonus,
            samples_mc_entropy=samples_mc_entropy,
            entropy_coeff=entropy_coeff,
            critic_coeff=critic_coeff,
            loss_critic_type=loss_critic_type,
            separate_losses=separate_losses,
            reduction=reduction,
            clip_value=clip_value,
            gamma=gamma,
            advantage_key=advantage_key,
            value_target_key=value_target_key,
            value_key=value_key,
        )

    @property
    def out_keys(self) -> list[str]:
        """The entries of the output, in the order a call with keyword tensors returns them."""
        return ["loss_objective", *self._tail_out_keys()]

    def forward(self, tensordict: Any) -> TensorDict:
        """The A2C losses on a batch ``[*B]`` (a flat sample or a ``[N, T]`` rollout)."""
        td, advantage, dist, log_prob = self._score(tensordict)
        reduce = self._reducer(td)  # the loss mask, read once
        out: dict = {"loss_objective": reduce(policy_gradient_loss(log_prob, advantage))}
        self._entropy_terms(dist, td, out, reduce)
        self._critic_terms(td, out, reduce)
        return self._output(out)
