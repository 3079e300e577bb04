"""ReinforceLoss: the REINFORCE policy gradient with an optional learnt baseline (critic).

    loss_actor = -mean(log pi(a_t | s_t) * A_t)
    loss_value = mean(distance(V(s_t), value_target_t))            (when there is a critic)

``a_t`` is the stored action; ``A_t`` the advantage in the input, or estimated by the value
estimator (GAE by default, TorchRL's choice) with the critic (its target copy for the next
states when ``delay_value=True``).
"""

from __future__ import annotations

from typing import Any

import torch
from tdict import TensorDict

from ..functional.ppo import policy_gradient_loss
from .actor_critic import _ActorCriticLoss

__all__ = ["ReinforceLoss"]


class ReinforceLoss(_ActorCriticLoss):
    """REINFORCE (TorchRL's ``ReinforceLoss``).

    ``loss_actor = -mean(log pi(a|s) * A)`` with ``a`` the stored action and ``A`` the (detached)
    advantage; ``loss_value = mean(distance(V(s), value_target))`` when a critic is given. When the
    input has no advantage, the value estimator writes ``"advantage"`` and ``"value_target"`` into
    the input TensorDict (as TorchRL does); nothing else of the input is modified. Its steps must be
    in time order (see :class:`~rl_objectives.A2CLoss`).

    Args:
        actor_network: the policy (a ProbabilisticTensorDictSequential / ProbabilisticTensorDictModule).
        critic_network: writes ``"state_value"`` (batch-shaped), or ``None`` (no ``loss_value``;
            the input must then hold the advantage, e.g. discounted returns from
            :func:`rl_objectives.functional.reward2go`).

    Keyword Args:
        delay_value: keep a target copy of the critic (``target_critic_network_params``, moved by
            :class:`~rl_objectives.SoftUpdate` / :class:`~rl_objectives.HardUpdate`) for the next-state
            values of the advantage estimate.
        loss_critic_type: ``"l1"``, ``"l2"`` or ``"smooth_l1"`` (default).
        gamma: deprecated (``DeprecationWarning``): the default discount of the value estimator
            (else 0.99); use ``make_value_estimator(gamma=...)``.
        advantage_key, value_target_key, value_key: shortcuts for :meth:`set_keys`.
        functional: accepted for TorchRL's signature; the networks' own parameters are trained
            either way, so ``True`` and ``False`` give the same losses.
        actor, critic: TorchRL's other names of ``actor_network`` / ``critic_network``.
        separate_losses: ``loss_value`` does not train parameters shared with the actor.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        clip_value: clip the value prediction to ``stored state_value +/- clip_value``; adds
            ``"value_clip_fraction"``. A number or a one-element tensor (a bool raises ``ValueError``).

    Keys (``set_keys``): advantage, value_target, value, sample_log_prob, action, reward, done,
    terminated.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule, ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
        >>> from rl_objectives.losses.reinforce import ReinforceLoss
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(nn.Linear(3, 2), in_keys=["obs"], out_keys=["logits"]),
        ...     ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"],
        ...                                   distribution_class=torch.distributions.Categorical))
        >>> critic = TensorDictModule(nn.Sequential(nn.Linear(3, 1), nn.Flatten(0)), in_keys=["obs"],
        ...                           out_keys=["state_value"])
        >>> loss = ReinforceLoss(actor, critic).make_value_estimator(gamma=0.9)
        >>> td = TensorDict({"obs": torch.randn(5, 3), "action": torch.randint(2, (5,)),
        ...                  "next": {"obs": torch.randn(5, 3), "reward": torch.ones(5),
        ...                           "done": torch.zeros(5, dtype=torch.bool)}}, batch_size=[5])
        >>> out = loss(td)
        >>> sorted(out.keys()), td["advantage"].shape
        (['loss_actor', 'loss_value'], torch.Size([5]))
    """

    _critic_loss_key = "loss_value"

    def __init__(
        self,
        actor_network: Any = None,
        critic_network: Any = None,
        *,
        delay_value: bool = False,
        loss_critic_type: str = "smooth_l1",
        gamma: float | None = None,
        advantage_key: Any = None,
        value_target_key: Any = None,
        value_key: Any = None,
        separate_losses: bool = False,
        reduction: str | None = "mean",
        clip_value: float | torch.Tensor | None = None,
        functional: bool = True,
        actor: Any = None,
        critic: Any = None,
    ) -> None:
        super().__init__(
            actor_network,
            critic_network,
            functional=functional,
            actor=actor,
            critic=critic,
            entropy_bonus=False,
            critic_coeff=1.0,
            loss_critic_type=loss_critic_type,
            separate_losses=separate_losses,
            reduction=reduction,
            clip_value=clip_value,
            gamma=gamma,
            delay_value=delay_value,
            advantage_key=advantage_key,
            value_target_key=value_target_key,
            value_key=value_key,
        )

    @property
    def out_keys(self) -> list[str]:
        """The entries of the output, in the order a call with keyword tensors returns them."""
        return ["loss_actor", *self._tail_out_keys(entropy=False)]

    def forward(self, tensordict: Any) -> TensorDict:
        """``loss_actor`` (and ``loss_value``) on a batch ``[*B]``."""
        keys = self.tensor_keys
        estimated = keys.advantage not in tensordict
        td, advantage, _, log_prob = self._score(tensordict)
        if estimated:  # as TorchRL does, the estimate is written into the input (nothing else is)
            tensordict.set(keys.advantage, advantage)
            tensordict.set(keys.value_target, td.get(keys.value_target))
        reduce = self._reducer(td)  # the loss mask, read once
        out: dict = {"loss_actor": reduce(policy_gradient_loss(log_prob, advantage))}
        self._critic_terms(td, out, reduce)
        return self._output(out)
