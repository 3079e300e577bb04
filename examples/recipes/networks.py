"""The networks several recipes share: a tanh-Gaussian actor, a deterministic tanh actor, a Q(s, a) critic.

Each reads ``"observation"`` and writes what the losses read (``"loc"``/``"scale"`` and the action,
``"action"``, ``"state_action_value"``); ``hidden`` lists the widths of the hidden layers.
"""

from __future__ import annotations

import math

from rl_objectives.modules import MLP, ProbabilisticActor, TanhModule, TanhNormal, ValueOperator
from tdict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn

# torch.distributions checks every distribution's arguments when it is built (a few small ops and
# host syncs per call, on every policy step and loss call); the networks below produce valid
# arguments by construction (softplus scales, finite logits), so the recipes skip the check
FAST = {"validate_args": False}


def orthogonal_init(mlp: nn.Module, last_gain: float) -> nn.Module:
    """SB3's ``ortho_init`` for on-policy networks: orthogonal weights (gain sqrt(2) for the hidden
    layers, ``last_gain`` for the output layer: 0.01 for a policy, 1 for a value), zero biases."""
    linears = [m for m in mlp.modules() if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linears):
        nn.init.orthogonal_(layer.weight, gain=last_gain if i == len(linears) - 1 else math.sqrt(2))
        nn.init.zeros_(layer.bias)
    return mlp


def tanh_gaussian_actor(obs_dim: int, action_spec, hidden: list) -> ProbabilisticActor:
    """A Gaussian over actions squashed by tanh into the spec's bounds (SAC, REDQ, CQL, IQL, BC)."""
    act_dim = action_spec.shape[-1]
    body = nn.Sequential(
        MLP(in_features=obs_dim, out_features=2 * act_dim, num_cells=list(hidden), activation_class=nn.ReLU),
        NormalParamExtractor(),
    )
    bounds = (
        {"low": action_spec.low[..., 0], "high": action_spec.high[..., 0]}
        if act_dim == 1
        else {"low": action_spec.low, "high": action_spec.high}
    )
    return ProbabilisticActor(
        TensorDictModule(body, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=action_spec,
        distribution_class=TanhNormal,
        distribution_kwargs={**bounds, **FAST},
    )


def tanh_actor(obs_dim: int, action_spec, hidden: list) -> TensorDictSequential:
    """A deterministic policy: an MLP, then tanh squashed into the action bounds (TD3, DDPG)."""
    mlp = MLP(in_features=obs_dim, out_features=action_spec.shape[-1], num_cells=list(hidden), activation_class=nn.ReLU)
    return TensorDictSequential(
        TensorDictModule(mlp, in_keys=["observation"], out_keys=["param"]),
        TanhModule(in_keys=["param"], out_keys=["action"], spec=action_spec),
    )


def q_critic(obs_dim: int, act_dim: int, hidden: list) -> ValueOperator:
    """``Q(s, a)`` from the observation and the action, written at ``"state_action_value"``."""
    mlp = MLP(in_features=obs_dim + act_dim, out_features=1, num_cells=list(hidden), activation_class=nn.ReLU)
    return ValueOperator(mlp, in_keys=["observation", "action"])
