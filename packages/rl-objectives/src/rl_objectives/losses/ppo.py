"""PPO losses: PPOLoss (importance-weighted policy gradient), ClipPPOLoss and KLPENPPOLoss.

With ``r_t = exp(log pi(a_t|s_t) - log pi_old(a_t|s_t))`` (``pi_old``'s log-prob is the stored
``"action_log_prob"``, the ``sample_log_prob`` key of :meth:`set_keys`) and the advantage ``A_t``:

    PPOLoss       loss_objective = -mean(r_t * A_t)
    ClipPPOLoss   loss_objective = -mean(min(r_t * A_t, clamp(r_t, 1 - eps, 1 + eps) * A_t))
    KLPENPPOLoss  loss_objective = -mean(r_t * A_t - beta * KL(pi_old(.|s_t) || pi(.|s_t)))

plus, as in :class:`~rl_objectives.losses.a2c.A2CLoss`, ``loss_critic`` (with optional value
clipping) and ``loss_entropy``. Diagnostics: ``"entropy"``, ``"kl_approx"`` (mean of
``log pi_old - log pi``), ``"ESS"`` (normalised effective sample size of the ratios),
``"explained_variance"``, ``"clip_fraction"`` (clip variant), ``"kl"`` (KL variant).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch
from tdict import TensorDict
from tdict.validation import check_non_negative, check_positive_int
from tdict.nn import CompositeDistribution, ProbabilisticTensorDictModule
from tdict.nn import sum_to_batch as _sum_to_batch
from torch import distributions as D

from ..functional.ppo import (
    approx_kl,
    asymmetric_clipped_surrogate_loss,
    clipped_surrogate_loss,
    effective_sample_size,
    importance_weighted_loss,
    kl_penalty_loss,
)
from .actor_critic import (
    _ActorCriticLoss,
    _check_same_shape,
    _distribution_module,
    _standardize,
)
from .utils import _present_keys

__all__ = ["ClipPPOLoss", "KLPENPPOLoss", "PPOLoss"]

_Tensor = torch.Tensor


class PPOLoss(_ActorCriticLoss):
    """The PPO policy-gradient loss without a trust-region term (TorchRL's ``PPOLoss``).

    ``loss_objective = -mean(exp(log pi(a|s) - log pi_old(a|s)) * A)``, where ``a`` is the stored
    action and ``log pi_old(a|s)`` its log-prob under the policy that collected it. When the input
    has no advantage, the value estimator (GAE by default, see :meth:`make_value_estimator`)
    computes it without gradients, with the current critic, on a shallow copy of the input: the
    caller's TensorDict is not modified (compute the advantage once per batch with
    ``loss.value_estimator(td)`` to reuse it across epochs). On a shuffled minibatch of a collected
    batch without the advantage the estimator raises ``ValueError`` naming the fix (see
    :class:`~rl_objectives.A2CLoss`; TorchRL estimates silently).

    Use :class:`ClipPPOLoss` or :class:`KLPENPPOLoss` for training; this plain variant keeps no
    policy close to the behaviour one.

    Args:
        actor_network: the policy (a ProbabilisticTensorDictSequential / ProbabilisticTensorDictModule).
        critic_network: writes ``"state_value"`` (batch-shaped), or ``None``: no critic loss and
            the input must hold the advantage.

    Keyword Args:
        entropy_bonus: add ``loss_entropy = -entropy_coeff * mean(entropy)``. Default ``True``.
        samples_mc_entropy: draws of the Monte-Carlo entropy estimate (distributions without a
            closed-form entropy). Default 1.
        entropy_coeff: weight of the entropy bonus. Default 0.01. A mapping ``{head log-prob key:
            number}`` weights the heads of a composite policy separately (``loss_entropy`` sums
            ``-coeff * mean(entropy of the head)`` over the listed heads; unlisted heads get no bonus;
            ``"entropy"`` reports the sum of the listed heads' mean entropies). A mapping is not
            schedulable (no ``entropy_coeff`` buffer).
        critic_coeff: weight of the critic loss; ``None`` leaves it out. Default 1.0.
        loss_critic_type: ``"l1"``, ``"l2"`` or ``"smooth_l1"`` (default).
        normalize_advantage: standardise the advantage (mean 0, unbiased std 1) before use.
        normalize_advantage_exclude_dims: dims kept independent when standardising (e.g. an agent dim).
        gamma: deprecated (``DeprecationWarning``): the default discount of the value estimator
            (else 0.99); use ``make_value_estimator(gamma=...)``.
        advantage_norm: a value normaliser (``update(value_target)`` and ``scale()``, TorchRL's
            ``ValueNorm`` interface) dividing the advantage, as in :class:`~rl_objectives.A2CLoss`;
            it excludes ``normalize_advantage``.
        delay_actor: keep target actor parameters (``target_actor_network_params``) as the
            *proximal* policy ``pi_prox``, decoupled from the behaviour policy that collected the data
            (PPO-EWMA, Hilton et al., 2021, when a :class:`~rl_objectives.SoftUpdate` moves them after
            every step). The ratio the trust region acts on (the clip, the KL penalty's reference
            policy, ``"kl_approx"``) is ``pi / pi_prox``, while the surrogate stays weighted by the
            behaviour ratio ``pi / pi_behav`` (``"ESS"`` describes that one). Needs ``functional=True``.
        separate_losses: the critic loss does not train parameters shared with the actor (nor
            the actor outputs it reads).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (batch-shaped losses).
        clip_value: clip the value prediction to ``stored state_value +/- clip_value`` and keep the
            larger of the clipped and unclipped errors; adds ``"value_clip_fraction"``. A number or a
            one-element tensor (a bool raises ``ValueError``).
        log_explained_variance: report ``"explained_variance"`` of the critic. Default ``True``.
        advantage_key, value_target_key, value_key: shortcuts for :meth:`set_keys`.
        max_importance_ratio: cap of the ratio ``pi / pi_old`` (> 0; ``None``: no cap), as TorchRL
            does it: the gradient-free behaviour log-prob is lifted where the ratio exceeds the cap,
            so a capped sample keeps a rescaled gradient (a clamp would give none). The clip of
            :class:`ClipPPOLoss` still acts on the uncapped ratio.
        device: where the loss's own coefficient buffers are created (the networks are not moved).
        functional: accepted for TorchRL's signature; the networks' own parameters are trained
            either way, so ``True`` and ``False`` give the same losses.
        actor, critic: TorchRL's other names of ``actor_network`` / ``critic_network``.

    Scheduling: ``entropy_coeff``, ``critic_coeff``, ``clip_value`` and ``max_importance_ratio``
    (``clip_epsilon`` of :class:`ClipPPOLoss`, ``beta`` of :class:`KLPENPPOLoss`) are buffers;
    assigning a number (``loss.entropy_coeff = 0.005``) checks it and updates the buffer in place,
    and the next call uses it, as TorchRL 0.14's schedulable buffers.

    Keys (``set_keys``): advantage, value_target, value, sample_log_prob, action, reward, done,
    terminated. As in TorchRL 0.14, ``action`` and ``sample_log_prob`` are read from the actor
    (its ``dist_sample_keys`` and ``log_prob_keys``: ``"action"`` and ``"action_log_prob"`` by
    default, lists of per-head keys for a composite policy, whose stored log-probs are summed).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule, ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
        >>> from rl_objectives.losses.ppo import PPOLoss
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(nn.Linear(3, 2), in_keys=["obs"], out_keys=["logits"]),
        ...     ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"],
        ...                                   distribution_class=torch.distributions.Categorical))
        >>> critic = TensorDictModule(lambda obs: obs.sum(-1), in_keys=["obs"], out_keys=["state_value"])
        >>> td = TensorDict(obs=torch.randn(6, 3), action=torch.randint(2, (6,)),
        ...                 action_log_prob=torch.full((6,), -0.7), advantage=torch.randn(6),
        ...                 value_target=torch.randn(6), batch_size=[6])
        >>> out = PPOLoss(actor, critic)(td)
        >>> sorted(out.keys())
        ['ESS', 'entropy', 'explained_variance', 'kl_approx', 'loss_critic', 'loss_entropy', 'loss_objective']
    """

    max_importance_ratio: torch.Tensor | None  # a buffer (set in __init__)

    _keys_follow_actor = True
    _schedulable_buffers = frozenset({"max_importance_ratio"})

    def __init__(
        self,
        actor_network: Any = None,
        critic_network: Any = None,
        *,
        entropy_bonus: bool = True,
        samples_mc_entropy: int = 1,
        entropy_coeff: float | Mapping = 0.01,
        critic_coeff: float | None = 1.0,
        loss_critic_type: str = "smooth_l1",
        normalize_advantage: bool = False,
        normalize_advantage_exclude_dims: tuple = (),
        gamma: float | None = None,
        separate_losses: bool = False,
        reduction: str | None = "mean",
        clip_value: float | torch.Tensor | None = None,
        log_explained_variance: bool = True,
        advantage_key: Any = None,
        value_target_key: Any = None,
        value_key: Any = None,
        max_importance_ratio: float | None = None,
        device: Any = None,
        functional: bool = True,
        actor: Any = None,
        critic: Any = None,
        advantage_norm: Any = None,
        delay_actor: bool = False,
    ) -> None:
        if advantage_norm is not None and normalize_advantage:
            raise ValueError(
                f"{type(self).__name__}: normalize_advantage=True and advantage_norm exclude each other; pass one."
            )
        if max_importance_ratio is not None and (
            isinstance(max_importance_ratio, bool)
            or not isinstance(max_importance_ratio, (int, float))
            or not max_importance_ratio > 0
        ):
            raise ValueError(
                f"{type(self).__name__}: max_importance_ratio must be a number > 0 or None, got {max_importance_ratio!r}."
            )
        exclude = tuple(normalize_advantage_exclude_dims)
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in exclude):
            raise ValueError(
                f"{type(self).__name__}: normalize_advantage_exclude_dims must be ints, got {normalize_advantage_exclude_dims!r}."
            )
        super().__init__(
            actor_network,
            critic_network,
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
            functional=functional,
            actor=actor,
            critic=critic,
            device=device,
            advantage_norm=advantage_norm,
            delay_actor=delay_actor,
        )
        self.register_buffer(
            "max_importance_ratio",
            None if max_importance_ratio is None else torch.tensor(float(max_importance_ratio), device=device),
        )
        self.normalize_advantage = bool(normalize_advantage)
        self.normalize_advantage_exclude_dims = exclude
        self._log_explained_variance = bool(log_explained_variance)

    def _check_hyperparameter(self, name: str, value: float) -> None:
        if name == "max_importance_ratio" and not value > 0:
            raise ValueError(
                f"{type(self).__name__}: max_importance_ratio must be a number > 0 or None, got {value!r}."
            )
        super()._check_hyperparameter(name, value)

    def _correction(self, log_weight: _Tensor, log_is_weight: _Tensor | None) -> _Tensor | None:
        """The gradient-free term added to ``log_weight`` (``log pi / pi_prox``) to weight the
        surrogate by the behaviour ratio: ``log_is_weight`` (``log pi_prox / pi_behav``, ``None``
        without ``delay_actor``: 0), lowered where needed so that the weight is at most
        ``max_importance_ratio``. ``None`` when there is neither."""
        if self.max_importance_ratio is None:
            return log_is_weight
        cap = self.max_importance_ratio.log() - log_weight.detach()
        return torch.clamp(cap, max=0.0) if log_is_weight is None else torch.minimum(log_is_weight, cap)

    def _prepare(self, tensordict: Any) -> tuple:
        """``(working copy, advantage, current policy, log pi / pi_prox, gradient-free correction)``,
        shapes checked; ``pi_prox`` is the behaviour policy unless ``delay_actor``."""
        name = type(self).__name__
        td, advantage, dist, log_prob = self._score(tensordict)
        if self.normalize_advantage and advantage.numel() > 1:
            # over the positions the loss keeps
            advantage = _standardize(advantage, self.normalize_advantage_exclude_dims, self._valid_positions(td))
        prev_log_prob = self._behaviour_log_prob(td)
        _check_same_shape(
            name, [(self.tensor_keys.advantage, advantage), (self.tensor_keys.sample_log_prob, prev_log_prob)]
        )
        log_is_weight = None
        if self.delay_actor:
            with torch.no_grad():
                prox = td.copy()
                prox_log_prob = self._log_prob(self._get_dist(prox, target=True), prox)
            log_weight, log_is_weight = log_prob - prox_log_prob, prox_log_prob - prev_log_prob
        else:
            log_weight = log_prob - prev_log_prob
        return td, advantage, dist, log_weight, self._correction(log_weight, log_is_weight)

    @staticmethod
    def _weight_diagnostics(log_weight: _Tensor, out: dict, cap: _Tensor | None = None) -> None:
        # the ESS describes the weights the surrogate uses (capped, when a cap is set)
        out["ESS"] = effective_sample_size(log_weight if cap is None else log_weight + cap)
        out["kl_approx"] = approx_kl(log_weight)

    def _surrogate(self, log_weight: _Tensor, advantage: _Tensor, out: dict, cap: _Tensor | None = None) -> _Tensor:
        """The per-sample policy loss (diagnostics of the surrogate itself go into ``out``)."""
        return importance_weighted_loss(log_weight, advantage, cap)

    @property
    def out_keys(self) -> list[str]:
        """The entries of the output, in the order a call with keyword tensors returns them."""
        return ["loss_objective", *self._objective_out_keys, *self._tail_out_keys(), "ESS", "kl_approx"]

    _objective_out_keys: tuple = ()  # diagnostics of the surrogate itself (ClipPPO: clip_fraction)

    def forward(self, tensordict: Any) -> TensorDict:
        """The PPO losses on a batch ``[*B]`` (a flat sample or a ``[N, T]`` rollout)."""
        td, advantage, dist, log_weight, cap = self._prepare(tensordict)
        diagnostics: dict = {}
        loss = self._surrogate(log_weight, advantage, diagnostics, cap)
        reduce = self._reducer(td)  # the loss mask, read once
        out: dict = {"loss_objective": reduce(loss), **diagnostics}
        self._weight_diagnostics(log_weight, out, cap)
        self._entropy_terms(dist, td, out, reduce)
        self._critic_terms(td, out, reduce)
        return self._output(out)


class ClipPPOLoss(PPOLoss):
    """Clipped PPO (TorchRL's ``ClipPPOLoss``).

    ``loss_objective = -mean(min(r * A, clamp(r, 1 - clip_epsilon, 1 + clip_epsilon) * A))`` with
    ``r = exp(log pi(a|s) - log pi_old(a|s))``; ``"clip_fraction"`` reports the share of clipped
    ratios. Every other argument, key and output is :class:`PPOLoss`'s.

    Keyword Args:
        clip_epsilon: the ratio's clipping half-width, in (0, 1). Default 0.2. A buffer: anneal it
            with ``loss.clip_epsilon = 0.1`` (checked, written in place; the next call clips with it).
            A ``(low, high)`` pair clips asymmetrically to ``[1 - low, 1 + high]`` (DAPO's
            "clip-higher"; ``0 <= low < 1``, ``high >= 0``): buffers ``clip_epsilon_low`` and
            ``clip_epsilon_high`` replace ``clip_epsilon`` (assigning the other flavour raises
            ``AttributeError``), and ``clip_value=True`` is refused.
        clip_value: as in :class:`PPOLoss`; ``True`` clips the value with ``clip_epsilon``'s value
            at construction (a buffer of its own, as in TorchRL).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import (TensorDictModule, NormalParamExtractor, ProbabilisticTensorDictModule,
        ...                       ProbabilisticTensorDictSequential)
        >>> from rl_objectives.losses.ppo import ClipPPOLoss
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()),
        ...                      in_keys=["obs"], out_keys=["loc", "scale"]),
        ...     ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"],
        ...                                   distribution_class=torch.distributions.Normal, return_log_prob=True))
        >>> critic = TensorDictModule(lambda obs: obs.sum(-1), in_keys=["obs"], out_keys=["state_value"])
        >>> loss = ClipPPOLoss(actor, critic, clip_epsilon=0.1)
        >>> with torch.no_grad():
        ...     td = actor(TensorDict(obs=torch.randn(4, 5, 3), batch_size=[4, 5]))   # a [N, T] rollout
        >>> td["advantage"], td["value_target"] = torch.randn(4, 5), torch.randn(4, 5)
        >>> out = loss(td)
        >>> out["loss_objective"].shape, float(out["clip_fraction"])
        (torch.Size([]), 0.0)
        >>> (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()
        >>> loss.clip_epsilon = 0.05   # an annealed clip range: the next call clips at 1 -/+ 0.05
        >>> loss.clip_epsilon
        tensor(0.0500)
    """

    clip_epsilon: torch.Tensor  # a buffer (set in __init__; clip_epsilon_low/high for a pair)

    _schedulable_buffers = frozenset({"clip_epsilon", "clip_epsilon_low", "clip_epsilon_high"})
    _CLIP_NAMES = ("clip_epsilon", "clip_epsilon_low", "clip_epsilon_high")

    def __init__(
        self,
        actor_network: Any = None,
        critic_network: Any = None,
        *,
        clip_epsilon: float | tuple[float, float] = 0.2,
        clip_value: bool | float | torch.Tensor | None = None,
        **kwargs: Any,
    ) -> None:
        pair = _clip_pair(type(self).__name__, clip_epsilon, clip_value)
        if pair is None:
            if (
                isinstance(clip_epsilon, bool)
                or not isinstance(clip_epsilon, (int, float))
                or not 0.0 < clip_epsilon < 1.0
            ):
                raise ValueError(f"{type(self).__name__}: clip_epsilon must be in (0, 1), got {clip_epsilon!r}.")
            if isinstance(clip_value, bool):
                clip_value = float(clip_epsilon) if clip_value else None
        elif clip_value is False:
            clip_value = None
        super().__init__(actor_network, critic_network, clip_value=clip_value, **kwargs)
        device = kwargs.get("device")
        if pair is None:
            self.register_buffer("clip_epsilon", torch.tensor(float(clip_epsilon), device=device))  # pyright: ignore[reportArgumentType]
        else:
            self.register_buffer("clip_epsilon_low", torch.tensor(pair[0], device=device))
            self.register_buffer("clip_epsilon_high", torch.tensor(pair[1], device=device))
            # chosen once here: the symmetric forward keeps its one code path
            object.__setattr__(self, "_surrogate", self._asymmetric_surrogate)

    _objective_out_keys = ("clip_fraction",)

    def __setattr__(self, name: str, value: Any) -> None:
        # scheduling the other flavour's bound would create an attribute the clip never reads
        if name in self._CLIP_NAMES and name not in self.__dict__.get("_buffers", (name,)):
            buffers = self.__dict__["_buffers"]
            if name == "clip_epsilon" and "clip_epsilon_low" in buffers:
                raise AttributeError(
                    f"{type(self).__name__}: this loss clips asymmetrically; set clip_epsilon_low / clip_epsilon_high."
                )
            if name != "clip_epsilon" and "clip_epsilon" in buffers:
                raise AttributeError(f"{type(self).__name__}: this loss clips symmetrically; set clip_epsilon.")
        super().__setattr__(name, value)

    def _check_hyperparameter(self, name: str, value: float) -> None:
        if name == "clip_epsilon" and not 0.0 < value < 1.0:
            raise ValueError(f"{type(self).__name__}: clip_epsilon must be in (0, 1), got {value!r}.")
        if name in ("clip_epsilon_low", "clip_epsilon_high"):
            _check_bound(type(self).__name__, name, value)
        super()._check_hyperparameter(name, value)

    @property
    def _clip_bounds(self) -> tuple[_Tensor, _Tensor]:
        """The clip range on the log-ratio: ``(log(1 - eps_low), log(1 + eps_high))``."""
        buffers = self._buffers
        if "clip_epsilon" in buffers:
            low = high = cast(_Tensor, buffers["clip_epsilon"])
        else:
            low, high = cast(_Tensor, buffers["clip_epsilon_low"]), cast(_Tensor, buffers["clip_epsilon_high"])
        return torch.log1p(-low), torch.log1p(high)

    def _surrogate(self, log_weight: _Tensor, advantage: _Tensor, out: dict, cap: _Tensor | None = None) -> _Tensor:
        # the bounds follow the buffer (read again whenever it changes), so a scheduled, loaded or
        # in-place edited clip_epsilon always takes effect; as TorchRL, the clip acts on pi / pi_prox and a
        # correction (delay_actor's behaviour ratio, max_importance_ratio's cap) on both terms
        loss, out["clip_fraction"] = clipped_surrogate_loss(log_weight, advantage, self._scalar("clip_epsilon"), cap)
        return loss

    def _asymmetric_surrogate(
        self, log_weight: _Tensor, advantage: _Tensor, out: dict, cap: _Tensor | None = None
    ) -> _Tensor:
        loss, out["clip_fraction"] = asymmetric_clipped_surrogate_loss(
            log_weight, advantage, self._scalar("clip_epsilon_low"), self._scalar("clip_epsilon_high"), cap
        )
        return loss

    def extra_repr(self) -> str:
        if "clip_epsilon" in self._buffers:
            clip = f"clip_epsilon={float(self.clip_epsilon)}"
        else:
            clip = f"clip_epsilon=({float(self.clip_epsilon_low)}, {float(self.clip_epsilon_high)})"
        return f"{clip}, " + super().extra_repr()


def _check_bound(owner: str, name: str, value: float) -> None:
    if not value >= 0.0:
        raise ValueError(f"{owner}: {name} must be non-negative, got {value!r}.")
    if name == "clip_epsilon_low" and not value < 1.0:
        raise ValueError(f"{owner}: {name} must be < 1 (the ratio's lower bound 1 - {name} > 0), got {value!r}.")


def _clip_pair(owner: str, clip_epsilon: Any, clip_value: Any) -> tuple[float, float] | None:
    """``(low, high)`` for a ``clip_epsilon`` pair (checked), ``None`` for a number."""
    if not isinstance(clip_epsilon, (tuple, list)):
        return None
    if len(clip_epsilon) != 2:
        raise ValueError(
            f"{owner}: clip_epsilon must be a number or a (low, high) pair of length 2, got {clip_epsilon!r}."
        )
    for name, value in zip(("clip_epsilon_low", "clip_epsilon_high"), clip_epsilon):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{owner}: clip_epsilon must hold two numbers, got {clip_epsilon!r}.")
        _check_bound(owner, name, float(value))
    if clip_value is True:
        raise ValueError(
            f"{owner}: clip_value=True takes its width from a single clip_epsilon; with a (low, high) pair pass "
            "clip_value=<number>."
        )
    return float(clip_epsilon[0]), float(clip_epsilon[1])


class KLPENPPOLoss(PPOLoss):
    """PPO with an adaptive KL penalty (TorchRL's ``KLPENPPOLoss``).

    ``loss_objective = -mean(r * A - beta * KL(pi_old(.|s) || pi(.|s)))``. The behaviour policy
    ``pi_old`` is rebuilt from the distribution parameters stored in the input: the entries named
    by the actor's probabilistic module's ``in_keys`` (e.g. ``"loc"`` and ``"scale"`` for a
    Normal, ``"logits"`` for a Categorical), which the collecting actor wrote next to the action.
    The current policy is computed on a shallow copy, so those stored entries are never
    overwritten. The KL is analytic when torch registers one for the pair of distributions, else
    a Monte-Carlo estimate over ``samples_mc_kl`` draws from ``pi_old``.

    After each call, ``beta`` adapts to the batch's mean KL: times ``increment`` when it exceeds
    ``1.5 * dtarg``, times ``decrement`` when it is below ``dtarg / 1.5``. The loss of that call uses
    the value of ``beta`` before the update. :meth:`reset` restores the initial ``beta``.

    Keyword Args:
        dtarg: the target KL. Default 0.01.
        beta: the initial penalty weight (a buffer, saved in ``state_dict``). Default 1.0.
        increment: factor (>= 1) applied when the KL is too large. Default 2.
        decrement: factor (in (0, 1]) applied when the KL is too small. Default 0.5.
            ``dtarg``, ``increment`` and ``decrement`` are read at every call: assign new values to
            schedule them; ``loss.beta = 0.5`` writes the buffer in place.
        samples_mc_kl: draws of the Monte-Carlo KL estimate. Default 1.
        Others: as in :class:`PPOLoss`. Extra output: ``"kl"`` (mean KL, detached).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule, ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
        >>> from rl_objectives.losses.ppo import KLPENPPOLoss
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(nn.Linear(3, 2), in_keys=["obs"], out_keys=["logits"]),
        ...     ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], return_log_prob=True,
        ...                                   distribution_class=torch.distributions.Categorical))
        >>> with torch.no_grad():
        ...     td = actor(TensorDict(obs=torch.randn(8, 3), batch_size=[8]))   # stores "logits"
        >>> td["advantage"] = torch.randn(8)
        >>> loss = KLPENPPOLoss(actor, None, dtarg=0.01, beta=1.0)
        >>> out = loss(td)
        >>> float(out["kl"])   # nothing moved yet
        0.0
        >>> float(loss.beta)   # KL < dtarg / 1.5: beta halves
        0.5
    """

    beta: torch.Tensor  # a buffer (set in __init__)
    _dist_module: ProbabilisticTensorDictModule  # the actor's probabilistic module (set in __init__)

    _schedulable_buffers = frozenset({"beta"})

    def __init__(
        self,
        actor_network: Any = None,
        critic_network: Any = None,
        *,
        dtarg: float = 0.01,
        beta: float = 1.0,
        increment: float = 2,
        decrement: float = 0.5,
        samples_mc_kl: int = 1,
        **kwargs: Any,
    ) -> None:
        name = type(self).__name__
        if not float(dtarg) > 0:
            raise ValueError(f"{name}: dtarg must be > 0, got {dtarg!r}.")
        if not float(beta) >= 0:
            raise ValueError(f"{name}: beta must be >= 0, got {beta!r}.")
        if not float(increment) >= 1.0:
            raise ValueError(f"{name}: increment must be >= 1.0, got {increment!r}.")
        if not 0.0 < float(decrement) <= 1.0:
            raise ValueError(f"{name}: decrement must be in (0, 1], got {decrement!r}.")
        check_positive_int(name, "samples_mc_kl", samples_mc_kl)
        super().__init__(actor_network, critic_network, **kwargs)
        # already a submodule of the actor: not registered twice
        self.__dict__["_dist_module"] = _distribution_module(self.actor_network)
        self.dtarg = float(dtarg)
        self.increment = float(increment)
        self.decrement = float(decrement)
        self.samples_mc_kl = samples_mc_kl
        self._beta_init = float(beta)
        self.register_buffer("beta", torch.tensor(float(beta)))

    def _check_hyperparameter(self, name: str, value: float) -> None:
        if name == "beta":
            check_non_negative(type(self).__name__, "beta", value)
        super()._check_hyperparameter(name, value)

    def _behaviour_dist(self, tensordict: Any) -> D.Distribution:
        keys = list(self._dist_module.in_keys)
        missing = [k for k in keys if k not in tensordict]
        if missing:
            raise KeyError(
                f"{type(self).__name__}: the input misses the behaviour policy's distribution parameters {missing} "
                f"(the actor's probabilistic module reads {keys}; keep them from collection); keys present: "
                f"{_present_keys(tensordict)}."
            )
        return self._dist_module.get_dist(tensordict.select(*keys).detach())

    def _kl(self, previous: D.Distribution, current: D.Distribution, batch_dims: int) -> _Tensor:
        try:
            return _sum_to_batch(D.kl_divergence(previous, current), batch_dims)
        except NotImplementedError:
            pass
        draws = previous.sample((self.samples_mc_kl,))
        if hasattr(draws, "batch_size"):  # a CompositeDistribution's TensorDict sample
            previous, current = cast(CompositeDistribution, previous), cast(CompositeDistribution, current)
            diff = previous.log_prob(draws, aggregate_probabilities=True) - current.log_prob(
                draws, aggregate_probabilities=True
            )
        else:
            diff = _sum_to_batch(previous.log_prob(draws) - current.log_prob(draws), batch_dims + 1)
        return diff.mean(0)

    _objective_out_keys = ("kl",)

    def _extra_in_keys(self) -> list:
        # the behaviour policy is rebuilt from its stored distribution parameters
        return [*super()._extra_in_keys(), *self._dist_module.in_keys]

    def forward(self, tensordict: Any) -> TensorDict:
        """The KL-penalised PPO losses; adapts ``beta`` afterwards (see the class docstring)."""
        if self.delay_actor:
            # the penalty pulls towards the proximal policy (the target actor), not the behaviour one
            with torch.no_grad():
                previous = self._get_dist(tensordict.copy(), target=True)
        else:
            previous = self._behaviour_dist(tensordict)
        td, advantage, dist, log_weight, cap = self._prepare(tensordict)
        kl = self._kl(previous, dist, self._action_batch_dims(td))
        _check_same_shape(type(self).__name__, [(self.tensor_keys.advantage, advantage), ("KL", kl)])
        beta = self.beta.clone()
        reduce = self._reducer(td)  # the loss mask, read once
        out: dict = {"loss_objective": reduce(kl_penalty_loss(log_weight, advantage, kl, beta, cap))}
        with torch.no_grad():
            mean_kl = kl.detach().mean()
            out["kl"] = mean_kl
            # tensor ops rather than a Python branch, so that a compiled forward has no graph break
            factor = torch.where(
                mean_kl > 1.5 * self.dtarg, self.increment, torch.where(mean_kl < self.dtarg / 1.5, self.decrement, 1.0)
            )
            self.beta.copy_(beta * factor)
        self._weight_diagnostics(log_weight, out, cap)
        self._entropy_terms(dist, td, out, reduce)
        self._critic_terms(td, out, reduce)
        return self._output(out)

    def reset(self) -> None:
        """Restore the initial ``beta``."""
        with torch.no_grad():
            self.beta.fill_(self._beta_init)

    def extra_repr(self) -> str:
        return f"dtarg={self.dtarg}, beta={float(self.beta)}, " + super().extra_repr()
