"""MAPPOLoss and IPPOLoss: TorchRL 0.14's thin multi-agent variants of ClipPPOLoss.

MAPPO (Yu et al., 2022) pairs decentralised actors with a centralised critic, IPPO (de Witt et al.,
2020) gives each agent a critic on its own observation; the loss is the same, only the critic
differs. Against :class:`~rl_objectives.ClipPPOLoss` they change three defaults and add one option:

- the value estimator is :class:`~rl_objectives.value.MultiAgentGAE` (``ValueEstimators.MAGAE``),
  which broadcasts a team reward and team done flags over the agents' values;
- ``normalize_advantage=True``, with the agent dim kept apart (``normalize_advantage_exclude_dims=(-1,)``:
  values here carry no trailing singleton dim, so the agent dim of ``[*B, T, n_agents]`` is the
  last one, where TorchRL's ``(-2,)`` points at it in ``[*B, T, n_agents, 1]``);
- ``entropy_coeff=0.01``;
- ``value_norm``: a :class:`~rl_objectives.modules.ValueNorm` (e.g. ``PopArtValueNorm()``, MAPPO's
  choice) whose statistics take the value target at every call; the critic loss, its value clip
  and the explained variance are then computed on normalised targets and predictions.
"""

from __future__ import annotations

from typing import Any

from ..value import ValueEstimators
from .ppo import ClipPPOLoss

__all__ = ["IPPOLoss", "MAPPOLoss"]


class MAPPOLoss(ClipPPOLoss):
    """Multi-agent PPO with a centralised critic (TorchRL's ``MAPPOLoss``).

    A :class:`~rl_objectives.ClipPPOLoss` with multi-agent defaults (see the module docstring):
    the :class:`~rl_objectives.value.MultiAgentGAE` estimator, per-agent advantage standardisation
    and an optional ``value_norm``. With ``value_norm`` set, each call updates it with the value
    target (as TorchRL: at every call, also over precomputed targets and in eval mode), then
    computes the critic loss between ``value_norm.normalize(target)`` and
    ``value_norm.normalize(prediction)`` (the stored value for ``clip_value`` is normalised too,
    so the clip radius is in normalised units). The critic itself keeps predicting raw values.

    Args:
        actor_network: the per-agent policy (e.g. a ``MultiAgentMLP(centralized=False)`` inside a
            probabilistic actor), writing its action and log-prob under the agents' group.
        critic_network: the centralised critic writing ``("agents", "state_value")``
            (``[*B, T, n_agents]``), e.g. ``MultiAgentMLP(centralized=True)``.

    Keyword Args:
        value_norm: a value normaliser (``update`` and ``normalize``, TorchRL's ``ValueNorm``
            interface) or ``None`` (default: the critic loss of :class:`~rl_objectives.ClipPPOLoss`).
            A module is registered as a submodule (its statistics are in the state dict).
        entropy_coeff: default ``0.01``.
        normalize_advantage: default ``True``.
        normalize_advantage_exclude_dims: default ``(-1,)``, the agent dim.
        **kwargs: the other :class:`~rl_objectives.ClipPPOLoss` arguments.

    Raises:
        TypeError: ``value_norm`` lacks ``update`` or ``normalize``.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule, ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
        >>> from rl_objectives import MAPPOLoss
        >>> from rl_objectives.modules import PopArtValueNorm
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(nn.Linear(3, 2), in_keys=[("agents", "obs")], out_keys=[("agents", "logits")]),
        ...     ProbabilisticTensorDictModule(in_keys={"logits": ("agents", "logits")}, out_keys=[("agents", "action")],
        ...                                   distribution_class=torch.distributions.Categorical, return_log_prob=True))
        >>> critic = TensorDictModule(lambda obs: obs.sum(-1), in_keys=[("agents", "obs")],
        ...                           out_keys=[("agents", "state_value")])
        >>> loss = MAPPOLoss(actor, critic, value_norm=PopArtValueNorm())
        >>> loss = loss.set_keys(value=("agents", "state_value"))
        >>> type(loss.value_estimator).__name__
        'MultiAgentGAE'
        >>> td = TensorDict({"agents": TensorDict(obs=torch.randn(4, 5, 2, 3), batch_size=[4, 5, 2]),
        ...     "next": {"agents": TensorDict(obs=torch.randn(4, 5, 2, 3), batch_size=[4, 5, 2]),
        ...              "reward": torch.randn(4, 5), "done": torch.zeros(4, 5, dtype=torch.bool)}},
        ...     batch_size=[4, 5])
        >>> with torch.no_grad():
        ...     td = actor(td)
        >>> out = loss(td)
        >>> out["loss_critic"].shape, int(loss.value_norm.debiasing_term > 0)
        (torch.Size([]), 1)
    """

    default_value_estimator = ValueEstimators.MAGAE

    def __init__(
        self,
        actor_network: Any = None,
        critic_network: Any = None,
        *,
        value_norm: Any = None,
        entropy_coeff: float = 0.01,
        normalize_advantage: bool = True,
        normalize_advantage_exclude_dims: tuple = (-1,),
        **kwargs: Any,
    ) -> None:
        if value_norm is not None and not (
            callable(getattr(value_norm, "update", None)) and callable(getattr(value_norm, "normalize", None))
        ):
            raise TypeError(
                f"{type(self).__name__}: value_norm must be a value normaliser with update(value_target) and "
                f"normalize(value) methods (a rl_objectives.modules.ValueNorm), got {type(value_norm).__name__}."
            )
        super().__init__(
            actor_network,
            critic_network,
            entropy_coeff=entropy_coeff,
            normalize_advantage=normalize_advantage,
            normalize_advantage_exclude_dims=normalize_advantage_exclude_dims,
            **kwargs,
        )
        self.value_norm = value_norm

    def _critic_loss_inputs(self, target_return, state_value, old_state_value):
        norm = self.value_norm
        if norm is None:
            return target_return, state_value, old_state_value
        norm.update(target_return.detach())
        old = None if old_state_value is None else norm.normalize(old_state_value)
        return norm.normalize(target_return.detach()), norm.normalize(state_value), old


class IPPOLoss(MAPPOLoss):
    """Independent PPO (TorchRL's ``IPPOLoss``): :class:`MAPPOLoss` with a decentralised critic.

    The loss is :class:`MAPPOLoss`'s; the name says the critic values each agent's own observation
    (e.g. ``MultiAgentMLP(centralized=False)``). Same arguments (``value_norm`` is rarely used here).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict.nn import TensorDictModule, ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
        >>> from rl_objectives import IPPOLoss
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(nn.Linear(3, 2), in_keys=[("agents", "obs")], out_keys=[("agents", "logits")]),
        ...     ProbabilisticTensorDictModule(in_keys={"logits": ("agents", "logits")}, out_keys=[("agents", "action")],
        ...                                   distribution_class=torch.distributions.Categorical))
        >>> critic = TensorDictModule(nn.Sequential(nn.Linear(3, 1), nn.Flatten(-2)), in_keys=[("agents", "obs")],
        ...                           out_keys=[("agents", "state_value")])
        >>> loss = IPPOLoss(actor, critic)
        >>> loss.normalize_advantage, loss.normalize_advantage_exclude_dims, loss.value_norm is None
        (True, (-1,), True)
    """
