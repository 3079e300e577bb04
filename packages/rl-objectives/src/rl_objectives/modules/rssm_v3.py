"""DreamerV3's recurrent state-space model with discrete latents (TorchRL's ``RSSMPriorV3``,
``RSSMPosteriorV3``, ``RSSMRolloutV3``).

The model state is a deterministic *belief* ``h`` and a stochastic *state* ``z``:
``num_categoricals`` one-hot categoricals of ``num_classes`` each, flattened to
``num_categoricals * num_classes``.

- prior (dynamics): ``h_t = f(h_{t-1}, z_{t-1}, a_{t-1})``, then ``z_t ~ Cat(g(h_t))``;
- posterior (representation): ``z_t ~ Cat(q(h_t, e_t))`` with ``e_t`` the observation's embedding;
- rollout: the prior and the posterior step by step over a sequence, the posterior's state
  feeding the next prior; an episode's first step starts from zero state, belief and action.

States are drawn with straight-through gradients from each categorical mixed with ``unimix`` of
uniform (:func:`~rl_objectives.functional.dreamer.straight_through_categorical`).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from tdict import TensorDictBase, stack, unravel_key
from tdict.nn import TensorDictModule as _TDModule
from tdict.nn import TensorDictModuleBase, TensorDictSequential
from torch import nn

from ..functional.dreamer import _straight_through_draw, unimix_probs
from .dreamer_layers import (
    BlockGRU,
    deferred_weight_grads,
    gru_cell,
    leading_one_hot,
    linear,
    normed_mlp,
    run_sequential,
    weight_product,
)
from .one_hot_latents import mark_one_hot, one_hot_classes

__all__ = ["RSSMPosteriorV3", "RSSMPriorV3", "RSSMRolloutV3"]


def _draw_state(logits: torch.Tensor, unimix: float) -> torch.Tensor:
    """A straight-through one-hot draw of every categorical, flattened to ``[..., C * K]`` and marked
    with its classes (:func:`~rl_objectives.modules.one_hot_latents.mark_one_hot`)."""
    state, classes = _straight_through_draw(unimix_probs(logits, unimix))
    return mark_one_hot(state.flatten(-2), classes)


def _check_unimix(unimix: float, owner: str) -> float:
    if not 0.0 <= unimix < 1.0:
        raise ValueError(f"{owner}: unimix must be in [0, 1), got {unimix!r}.")
    return float(unimix)


def _linear(in_features: int | None, out_features: int, device: Any) -> nn.Module:
    """A linear layer, lazy when its input size is not known yet."""
    if in_features is None:
        return nn.LazyLinear(out_features, device=device)
    return nn.Linear(in_features, out_features, device=device)


class RSSMPriorV3(nn.Module):
    """The dynamics: ``(state, belief, action) -> (prior_logits, next state, next belief)``.

    Args:
        action_spec: the action spec (only its shape is read); or ``action_shape=``.
        hidden_dim: the width of the projections.
        rnn_hidden_dim: the belief's size.
        num_categoricals / num_classes: the discrete latent's layout.
        action_dim: the action's size (``None``: the first layer is lazy; ``"block_gru"`` needs it).
        device: where the parameters are created.
        action_shape: the action's shape (instead of ``action_spec``).
        recurrent_model: ``"gru"`` (a projection of ``[z, a]`` into a ``GRUCell``, TorchRL's
            default) or ``"block_gru"`` (DreamerV3's :class:`~rl_objectives.modules.dreamer_layers.BlockGRU`).
        num_blocks / num_layers: the block GRU's blocks and hidden layers.
        prior_num_layers: the prior head's normalised hidden layers (``"block_gru"``).
        norm_eps: the RMS norms' epsilon.
        unimix: the uniform share mixed into each categorical before drawing.

    Examples:
        >>> prior = RSSMPriorV3(action_shape=(2,), hidden_dim=16, rnn_hidden_dim=8, num_categoricals=4,
        ...                     num_classes=4, action_dim=2)
        >>> logits, state, belief = prior(torch.zeros(3, 16), torch.zeros(3, 8), torch.randn(3, 2))
        >>> logits.shape, state.shape, belief.shape
        (torch.Size([3, 4, 4]), torch.Size([3, 16]), torch.Size([3, 8]))
    """

    def __init__(
        self,
        action_spec: Any = None,
        hidden_dim: int = 512,
        rnn_hidden_dim: int = 512,
        num_categoricals: int = 32,
        num_classes: int = 32,
        action_dim: int | None = None,
        device: torch.device | str | None = None,
        *,
        action_shape: torch.Size | tuple[int, ...] | None = None,
        recurrent_model: Literal["gru", "block_gru"] = "gru",
        num_blocks: int = 8,
        num_layers: int = 1,
        prior_num_layers: int = 2,
        norm_eps: float = 1e-4,
        unimix: float = 0.0,
    ) -> None:
        super().__init__()
        if action_spec is not None and action_shape is not None:
            raise ValueError("RSSMPriorV3: pass action_spec or action_shape, not both.")
        shape = action_spec.shape if action_spec is not None else action_shape
        self.action_shape = torch.Size(shape) if shape is not None else None
        if recurrent_model not in ("gru", "block_gru"):
            raise ValueError(f"RSSMPriorV3: recurrent_model must be 'gru' or 'block_gru', got {recurrent_model!r}.")
        if recurrent_model == "block_gru" and action_dim is None:
            raise ValueError("RSSMPriorV3: recurrent_model='block_gru' needs action_dim.")
        self.num_categoricals, self.num_classes, self.rnn_hidden_dim = num_categoricals, num_classes, rnn_hidden_dim
        self.recurrent_model = recurrent_model
        self.unimix = _check_unimix(unimix, "RSSMPriorV3")
        state_dim = num_categoricals * num_classes
        self.action_state_projector: nn.Module | None
        if recurrent_model == "block_gru":
            assert action_dim is not None  # checked above
            self.rnn: nn.Module = BlockGRU(
                state_dim=state_dim,
                action_dim=action_dim,
                belief_dim=rnn_hidden_dim,
                hidden_dim=hidden_dim,
                num_blocks=num_blocks,
                num_layers=num_layers,
                norm_eps=norm_eps,
                device=device,
            )
            self.rnn_to_prior_projector = normed_mlp(
                rnn_hidden_dim, state_dim, prior_num_layers, hidden_dim, norm_eps, device
            )
            self.action_state_projector = None
        else:
            in_features = None if action_dim is None else state_dim + action_dim
            self.action_state_projector = nn.Sequential(_linear(in_features, hidden_dim, device), nn.SiLU())
            self.rnn = nn.GRUCell(hidden_dim, rnn_hidden_dim, device=device)
            self.rnn_to_prior_projector = nn.Sequential(
                nn.Linear(rnn_hidden_dim, hidden_dim, device=device),
                nn.SiLU(),
                nn.Linear(hidden_dim, state_dim, device=device),
            )

    def recurrent_weights(self) -> tuple[torch.Tensor, ...]:
        """Weights derived from the recurrent core's parameters once for a whole sequence, for
        :meth:`belief_step`'s ``weights`` (the block GRU's :meth:`~rl_objectives.modules.dreamer_layers.BlockGRU.input_weights`)."""
        return self.rnn.input_weights() if isinstance(self.rnn, BlockGRU) else ()

    def belief_step(
        self, state: torch.Tensor, belief: torch.Tensor, action: torch.Tensor, weights: tuple[torch.Tensor, ...] = ()
    ) -> torch.Tensor:
        """The next belief ``[..., H]`` (the recurrent core's step), without the prior's head and draw;
        ``weights``: :meth:`recurrent_weights`."""
        if self.action_state_projector is None:
            return self.rnn(state, belief, action, weights)
        projected = run_sequential(self.action_state_projector, torch.cat([state, action], -1), leading_one_hot(state))
        if projected.ndim == 2:  # (a reshape, even to the same shape, is one more autograd node per step)
            return gru_cell(self.rnn, projected, belief)
        batch = projected.shape[:-1]  # GRUCell takes one batch dim
        belief = gru_cell(self.rnn, projected.reshape(-1, projected.shape[-1]), belief.reshape(-1, belief.shape[-1]))
        return belief.reshape(*batch, -1)

    def forward(
        self, state: torch.Tensor, belief: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``state [..., C*K]``, ``belief [..., H]``, ``action [..., A]`` -> ``(prior_logits [..., C, K],
        state [..., C*K], belief [..., H])``."""
        belief = self.belief_step(state, belief, action)
        logits = self.prior_logits(belief)
        return logits, _draw_state(logits, self.unimix), belief

    def prior_logits(self, belief: torch.Tensor) -> torch.Tensor:
        """The prior's logits ``[..., C, K]`` from the belief ``[..., H]`` (its head, without the draw)."""
        return run_sequential(self.rnn_to_prior_projector, belief).unflatten(
            -1, (self.num_categoricals, self.num_classes)
        )


class RSSMPosteriorV3(nn.Module):
    """The representation: ``(belief, obs_embedding) -> (posterior_logits, state)``.

    Args:
        hidden_dim: the width of the hidden layers.
        num_categoricals / num_classes: the discrete latent's layout.
        rnn_hidden_dim / obs_embed_dim: the belief's and the embedding's sizes (both given: plain
            linear layers; else the first layer is lazy).
        device: where the parameters are created.
        use_rms_norm: ``num_layers`` RMS-normalised hidden layers with DreamerV3's initialisation
            (needs both sizes), instead of one plain SiLU layer.
        num_layers: the hidden layers with ``use_rms_norm``.
        norm_eps: the RMS norms' epsilon.
        unimix: the uniform share mixed into each categorical before drawing.

    Examples:
        >>> posterior = RSSMPosteriorV3(hidden_dim=16, num_categoricals=4, num_classes=4, rnn_hidden_dim=8,
        ...                             obs_embed_dim=12)
        >>> logits, state = posterior(torch.randn(3, 8), torch.randn(3, 12))
        >>> logits.shape, state.shape
        (torch.Size([3, 4, 4]), torch.Size([3, 16]))
    """

    def __init__(
        self,
        hidden_dim: int = 512,
        num_categoricals: int = 32,
        num_classes: int = 32,
        rnn_hidden_dim: int | None = None,
        obs_embed_dim: int | None = None,
        device: torch.device | str | None = None,
        *,
        use_rms_norm: bool = False,
        num_layers: int = 1,
        norm_eps: float = 1e-4,
        unimix: float = 0.0,
    ) -> None:
        super().__init__()
        self.num_categoricals, self.num_classes, self.obs_embed_dim = num_categoricals, num_classes, obs_embed_dim
        self.unimix = _check_unimix(unimix, "RSSMPosteriorV3")
        known = rnn_hidden_dim is not None and obs_embed_dim is not None
        in_features = (
            rnn_hidden_dim + obs_embed_dim if rnn_hidden_dim is not None and obs_embed_dim is not None else None
        )
        state_dim = num_categoricals * num_classes
        if use_rms_norm:
            if not known or in_features is None:
                raise ValueError("RSSMPosteriorV3: use_rms_norm=True needs rnn_hidden_dim and obs_embed_dim.")
            self.obs_rnn_to_post_projector = normed_mlp(
                in_features, state_dim, num_layers, hidden_dim, norm_eps, device
            )
        else:
            self.obs_rnn_to_post_projector = nn.Sequential(
                _linear(in_features, hidden_dim, device), nn.SiLU(), nn.Linear(hidden_dim, state_dim, device=device)
            )

    def forward(self, belief: torch.Tensor, obs_embedding: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``belief [..., H]``, ``obs_embedding [..., E]`` -> ``(posterior_logits [..., C, K], state [..., C*K])``."""
        logits = run_sequential(self.obs_rnn_to_post_projector, torch.cat([belief, obs_embedding], -1))
        return self._draw(logits)

    def _draw(self, flat_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = flat_logits.unflatten(-1, (self.num_categoricals, self.num_classes))
        return logits, _draw_state(logits, self.unimix)

    def _first_layer(self) -> tuple[nn.Linear, int]:
        """The first linear layer and the number of its input columns that read the belief."""
        first = self.obs_rnn_to_post_projector[0]
        assert isinstance(first, nn.Linear) and self.obs_embed_dim is not None  # the rollout checked both
        return first, first.in_features - self.obs_embed_dim

    def split_weight(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The first layer's weight columns that read the belief and those that read the embedding
        (views, from one split: their gradients are concatenated once)."""
        first, belief_columns = self._first_layer()
        belief_weight, embedding_weight = first.weight.split([belief_columns, first.in_features - belief_columns], -1)
        return belief_weight, embedding_weight

    def embedding_product(self, obs_embedding: torch.Tensor, embedding_weight: torch.Tensor) -> torch.Tensor:
        """The first layer's embedding columns (``split_weight()[1]``) times ``obs_embedding [..., E]``,
        plus its bias: the part of the first layer that does not depend on the belief (computed once
        for a whole sequence)."""
        first, _ = self._first_layer()
        return F.linear(obs_embedding, embedding_weight, first.bias)

    def step_from_embedding(
        self, belief: torch.Tensor, embedding_product: torch.Tensor, belief_weight: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` given the :meth:`embedding_product` of the step's embedding and the belief's
        columns of :meth:`split_weight` (deferred inside ``deferred_weight_grads(..., weights=(belief_weight,))``)."""
        value = weight_product(belief, belief_weight) + embedding_product
        for module in list(self.obs_rnn_to_post_projector)[1:]:
            value = linear(module, value)
        return self._draw(value)


class RSSMRolloutV3(TensorDictModuleBase):
    """The prior and posterior modules run step by step over the last (time) dim of a TensorDict.

    At each step the prior reads ``"state"``, ``"belief"`` and the action and writes under
    ``"next"``; the posterior reads the ``"next"`` belief and embedding and writes the
    ``("next", "state")`` that, with ``("next", "belief")``, starts the following step. Where
    ``reset_key`` is set (an episode's first step), state, belief and action are zero first.

    Args:
        rssm_prior: a TensorDict module around :class:`RSSMPriorV3`.
        rssm_posterior: a TensorDict module around :class:`RSSMPosteriorV3`.
        reset_key: the flag of an episode's first step (``None``: no resets).
        action_key: the action (default: the prior's input that is not ``"state"`` or ``"belief"``).

    Examples:
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> prior = TensorDictModule(
        ...     RSSMPriorV3(action_shape=(2,), hidden_dim=8, rnn_hidden_dim=8, num_categoricals=4, num_classes=4,
        ...                 action_dim=2),
        ...     in_keys=["state", "belief", "action"],
        ...     out_keys=[("next", "prior_logits"), ("next", "state"), ("next", "belief")])
        >>> posterior = TensorDictModule(
        ...     RSSMPosteriorV3(hidden_dim=8, num_categoricals=4, num_classes=4, rnn_hidden_dim=8, obs_embed_dim=6),
        ...     in_keys=[("next", "belief"), ("next", "encoded_latents")],
        ...     out_keys=[("next", "posterior_logits"), ("next", "state")])
        >>> td = TensorDict({"state": torch.zeros(2, 4, 16), "belief": torch.zeros(2, 4, 8),
        ...                  "action": torch.randn(2, 4, 2), "next": {"encoded_latents": torch.randn(2, 4, 6)}}, [2, 4])
        >>> out = RSSMRolloutV3(prior, posterior)(td)
        >>> out.shape, out["next", "posterior_logits"].shape
        (torch.Size([2, 4]), torch.Size([2, 4, 4, 4]))
    """

    def __init__(
        self,
        rssm_prior: TensorDictModuleBase,
        rssm_posterior: TensorDictModuleBase,
        reset_key: Any = "is_init",
        action_key: Any = None,
    ) -> None:
        super().__init__()
        sequence = TensorDictSequential(rssm_prior, rssm_posterior)
        self.in_keys, self.out_keys = list(sequence.in_keys), list(sequence.out_keys)
        self.rssm_prior, self.rssm_posterior = rssm_prior, rssm_posterior
        self.reset_key = None if reset_key is None else unravel_key(reset_key)
        if action_key is None:
            others = [k for k in map(unravel_key, rssm_prior.in_keys) if k not in ("state", "belief")]
            if len(others) > 1:
                raise ValueError(
                    f"RSSMRolloutV3: the prior reads {others} besides state and belief; pass action_key= to say which "
                    "is the action."
                )
            action_key = others[0] if others else None
        self.action_key = None if action_key is None else unravel_key(action_key)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Rolls the model over ``tensordict`` (``[*batch, T]``); returns the ``[*batch, T]`` steps."""
        steps = tensordict.exclude(*self.out_keys).unbind(-1)
        kept = list(steps[0].keys(True, True)) + list(self.out_keys)
        prior, posterior = self._deferred_prior(), self._split_posterior(tensordict)
        prior_weights = () if prior is None else prior.recurrent_weights()
        posterior_weights = None if posterior is None else posterior.split_weight()
        deferred = prior_weights + (() if posterior_weights is None else posterior_weights[:1])
        with deferred_weight_grads(self.rssm_prior, self.rssm_posterior, weights=deferred):
            return self._roll(tensordict, steps, kept, prior, prior_weights, posterior, posterior_weights)

    def _deferred_prior(self) -> RSSMPriorV3 | None:
        """The :class:`RSSMPriorV3` whose head can run once after the loop: the prior module wraps
        one with TorchRL's layout (``state, belief, action -> prior_logits, state, belief``) and the
        posterior overwrites the prior's drawn state, so the recurrence only needs the belief step
        (and no forward hook expects to see the prior's calls)."""
        prior = getattr(self.rssm_prior, "module", None)
        in_keys, out_keys = (
            list(map(unravel_key, self.rssm_prior.in_keys)),
            list(map(unravel_key, self.rssm_prior.out_keys)),
        )
        if (
            not isinstance(prior, RSSMPriorV3)
            or len(in_keys) != 3
            or len(out_keys) != 3
            or out_keys[1] not in map(unravel_key, self.rssm_posterior.out_keys)
            or type(self.rssm_prior).forward is not _TDModule.forward
            or any(m._forward_hooks or m._forward_pre_hooks for m in (self.rssm_prior, prior))  # hooks see calls
        ):
            return None
        return prior

    def _split_posterior(self, tensordict: TensorDictBase) -> RSSMPosteriorV3 | None:
        """The :class:`RSSMPosteriorV3` whose first layer's embedding columns can multiply every
        step's embedding at once (only the belief's columns then run per step): the posterior
        module wraps one with TorchRL's layout (``belief, embedding -> logits, state``), its first
        layer is a plain ``nn.Linear``, no hook expects to see its calls, and the embeddings are
        in ``tensordict`` (with the rollout's batch shape)."""
        posterior = getattr(self.rssm_posterior, "module", None)
        if not isinstance(posterior, RSSMPosteriorV3) or posterior.obs_embed_dim is None:
            return None
        first = posterior.obs_rnn_to_post_projector[0]
        embedding = tensordict.get(unravel_key(self.rssm_posterior.in_keys[-1]), None)
        if (
            len(self.rssm_posterior.in_keys) != 2
            or len(self.rssm_posterior.out_keys) != 2
            or type(self.rssm_posterior).forward is not _TDModule.forward
            or type(first) is not nn.Linear
            or not isinstance(embedding, torch.Tensor)
            or embedding.shape[-1] != posterior.obs_embed_dim
            or any(m._forward_hooks or m._forward_pre_hooks for m in (self.rssm_posterior, posterior, first))
        ):
            return None
        return posterior

    def _roll(
        self,
        tensordict: TensorDictBase,
        steps: Any,
        kept: list,
        prior: RSSMPriorV3 | None,
        prior_weights: tuple[torch.Tensor, ...],
        posterior: RSSMPosteriorV3 | None,
        posterior_weights: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> TensorDictBase:
        if prior is not None:
            state_key, belief_key, action_key = map(unravel_key, self.rssm_prior.in_keys)
            logits_key, _, next_belief_key = map(unravel_key, self.rssm_prior.out_keys)
        if posterior is not None:  # the embeddings' share of the first layer, for every step at once
            post_belief_key, embedding_key = map(unravel_key, self.rssm_posterior.in_keys)
            post_logits_key, post_state_key = map(unravel_key, self.rssm_posterior.out_keys)
            assert posterior_weights is not None  # split with the posterior
            belief_weight, embedding_weight = posterior_weights
            embedded = posterior.embedding_product(tensordict.get(embedding_key), embedding_weight)
            embedded = embedded.unbind(tensordict.ndim - 1)
        outputs, classes = [], []
        resets = self._reset_steps(tensordict, len(steps))
        current = steps[0]
        for t in range(len(steps)):
            if resets[t] and current.get(self.reset_key, None) is not None:
                self._zero_at_reset(current)
            if prior is None:
                self.rssm_prior(current)
            else:  # the belief step only: the prior's head runs once over every step below
                belief = prior.belief_step(
                    current.get(state_key), current.get(belief_key), current.get(action_key), prior_weights
                )
                current.set(next_belief_key, belief)
            if posterior is None:
                self.rssm_posterior(current)
            else:
                logits, state = posterior.step_from_embedding(current.get(post_belief_key), embedded[t], belief_weight)
                current.set(post_logits_key, logits)
                current.set(post_state_key, state)
            outputs.append(current.select(*kept, strict=False))
            state, belief = current.get(("next", "state")), current.get(("next", "belief"))
            classes.append(one_hot_classes(state))
            if t + 1 < len(steps):
                current = steps[t + 1]
                current.set("state", state)
                current.set("belief", belief)
        out = stack(outputs, tensordict.ndim - 1)
        if all(c is not None for c in classes):  # the heads gather the stacked states' columns
            mark_one_hot(out.get(("next", "state")), torch.stack(classes, tensordict.ndim - 1))
        if prior is not None:
            # the same logits as per step, in one batched call (the draw it would make is overwritten)
            out.set(logits_key, prior.prior_logits(out.get(next_belief_key)))
        return out

    def _reset_steps(self, tensordict: TensorDictBase, num_steps: int) -> list[bool]:
        """Per step, whether any of its episodes may start there (no zeroing where none does): a
        boolean reset flag is read once for the whole sequence; anything else is checked at every step."""
        if self.reset_key is None:
            return [False] * num_steps
        reset = tensordict.get(self.reset_key, None)
        if not isinstance(reset, torch.Tensor) or reset.dtype != torch.bool or torch.compiler.is_compiling():
            return [True] * num_steps
        if not reset.numel():
            return [False] * num_steps
        return reset.movedim(tensordict.ndim - 1, 0).reshape(num_steps, -1).any(-1).tolist()

    def _zero_at_reset(self, step: TensorDictBase) -> None:
        assert self.reset_key is not None  # the caller checked it
        reset = step.get(self.reset_key)
        keys = ["state", "belief"] + ([self.action_key] if self.action_key is not None else [])
        for key in keys:
            value = step.get(key, None)
            if value is None:
                continue
            flag = reset.reshape(*reset.shape[: step.batch_dims], *([1] * (value.ndim - step.batch_dims)))
            zeroed = torch.where(flag, torch.zeros((), dtype=value.dtype, device=value.device), value)
            classes = one_hot_classes(value) if key == "state" else None
            if classes is not None:  # still one-hot where kept: class -1 where zeroed
                mark_one_hot(zeroed, torch.where(flag, -1, classes))
            step.set(key, zeroed)
