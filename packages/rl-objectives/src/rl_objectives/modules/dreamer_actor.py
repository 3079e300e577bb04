"""DreamerV3's discrete-action policy (TorchRL's ``DreamerV3DiscreteActor``).

An RMS-normalised SiLU MLP over ``[belief, state]`` (belief first), a linear logits head whose
initial weights are scaled by ``0.01``, and categorical probabilities mixed with ``unimix`` of
uniform: ``p = (1 - unimix) * softmax(logits) + unimix / n``. The module writes ``log p`` (float32)
as the logits, a one-hot action drawn from :class:`~rl_objectives.modules.OneHotCategorical` and
its log-probability.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tdict import NestedKey
from tdict.validation import check_positive_int
from tdict.nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import nn

from ..functional.dreamer import unimix_probs
from .distributions import OneHotCategorical
from .dreamer_layers import DreamerV3MLP, dreamer_v3_init

__all__ = ["DreamerV3DiscreteActor"]


class _DreamerV3OneHotCategorical(OneHotCategorical):
    """:class:`OneHotCategorical` whose ``log_prob`` reads the argmax of its value, as TorchRL's: a
    straight-through ``rsample()`` (one-hot up to rounding) is scored, without a gradient through it."""

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return self._categorical.log_prob(value.argmax(-1))


class _DreamerV3DiscreteActorNet(nn.Module):
    """``(state, belief) -> log((1 - unimix) * softmax(head(mlp([belief, state]))) + unimix / n)``."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        depth: int,
        num_cells: int,
        norm_eps: float,
        unimix: float,
        device: torch.device | str | None,
    ) -> None:
        super().__init__()
        self.backbone = DreamerV3MLP(
            in_features, None, depth=depth, num_cells=num_cells, norm_eps=norm_eps, device=device
        )
        self.logits_head = nn.Linear(num_cells, out_features, device=device)
        self.logits_head.apply(dreamer_v3_init)
        with torch.no_grad():
            self.logits_head.weight.mul_(0.01)
        self.unimix = unimix

    def forward(self, state: torch.Tensor, belief: torch.Tensor) -> torch.Tensor:
        logits = self.logits_head(self.backbone(belief, state)).float()
        return unimix_probs(logits, self.unimix).log()


class DreamerV3DiscreteActor(ProbabilisticTensorDictSequential):
    """DreamerV3's one-hot categorical policy over the stochastic state and the belief.

    Calling it writes ``logits_key`` (the mixed log-probabilities, float32), ``action_key`` (an int64
    one-hot action, drawn at random by default; the mode under a deterministic interaction type) and
    ``log_prob_key``. :meth:`get_dist` gives the distribution, whose ``rsample()`` is a
    straight-through one-hot sample (for the actor loss's gradient).

    Args:
        in_features: the state's plus the belief's width.
        out_features: the number of actions.

    Keyword Args:
        depth: the MLP's hidden layers (at least 1). Default 3.
        num_cells: their width. Default 1024.
        norm_eps: the RMS norms' epsilon. Default ``1e-4``.
        unimix: the uniform share, in ``[0, 1)``. Default ``0.01``.
        in_keys: the state and belief keys, in that order. Default ``["state", "belief"]``.
        action_key / logits_key / log_prob_key: the written keys. Defaults ``"action"``, ``"logits"``,
            ``"action_log_prob"``.
        device: where the parameters are created.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import InteractionType, set_interaction_type
        >>> from rl_objectives.modules import DreamerV3DiscreteActor
        >>> actor = DreamerV3DiscreteActor(12, 3, depth=2, num_cells=32)
        >>> data = TensorDict({"state": torch.randn(4, 8), "belief": torch.randn(4, 4)}, [4])
        >>> with set_interaction_type(InteractionType.DETERMINISTIC):
        ...     result = actor(data)
        >>> result["action"].sum(-1).tolist()
        [1, 1, 1, 1]
        >>> distribution = actor.get_dist(data)
        >>> action = distribution.rsample()
        >>> (action * torch.arange(3)).sum().backward()
        >>> distribution.log_prob(action).shape
        torch.Size([4])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        depth: int = 3,
        num_cells: int = 1024,
        norm_eps: float = 1e-4,
        unimix: float = 0.01,
        in_keys: Sequence[NestedKey] | None = None,
        action_key: NestedKey = "action",
        logits_key: NestedKey = "logits",
        log_prob_key: NestedKey = "action_log_prob",
        device: torch.device | str | None = None,
    ) -> None:
        keys = list(in_keys) if in_keys is not None else ["state", "belief"]
        if len(keys) != 2:
            raise ValueError(
                f"DreamerV3DiscreteActor: in_keys must hold the state and belief keys, in that order; got {keys}."
            )
        for name, value in (("in_features", in_features), ("out_features", out_features), ("depth", depth)):
            check_positive_int("DreamerV3DiscreteActor", name, value)
        if not 0.0 <= unimix < 1.0:
            raise ValueError(f"DreamerV3DiscreteActor: unimix must be in [0, 1), got {unimix!r}.")
        net = _DreamerV3DiscreteActorNet(in_features, out_features, depth, num_cells, norm_eps, float(unimix), device)
        super().__init__(
            TensorDictModule(net, in_keys=keys, out_keys=[logits_key]),
            ProbabilisticTensorDictModule(
                in_keys={"logits": logits_key},
                out_keys=[action_key],
                distribution_class=_DreamerV3OneHotCategorical,
                default_interaction_type=InteractionType.RANDOM,
                return_log_prob=True,
                log_prob_key=log_prob_key,
            ),
        )
