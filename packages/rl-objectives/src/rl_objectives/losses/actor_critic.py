"""The machinery the on-policy losses (A2C, PPO and its variants, REINFORCE) share.

They read the same entries: the taken action and, for PPO, its behaviour log-prob; an advantage
(estimated by the loss's value estimator when absent); a value target for the critic.
:class:`_ActorCriticLoss` holds the network registration, the no-grad advantage estimate, the
log-prob of the stored action, the entropy bonus and the critic regression.

Per-step entries (advantage, value target, state value, log-probs) have the TensorDict's batch
shape (``[B]`` or a rollout's ``[N, T]``), with no trailing singleton dim; a ``[B]`` vs ``[B, 1]``
mix raises ``ValueError`` naming the keys instead of broadcasting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, ClassVar, cast

import torch
from tdict import TensorDict
from tdict.nn import CompositeDistribution, ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
from tdict.nn import holder_batch_dims
from tdict.validation import check_positive, check_positive_int
from tdict.nn import sum_to_batch as _sum_to_batch
from torch import distributions as D

from ..functional.ppo import entropy_loss, explained_variance, value_loss
from ..value import ValueEstimators
from .common import LossModule
from .loss_mask import align_mask
from .utils import _check_loss_function, _check_reduction, _present_keys

__all__: list[str] = []  # private base: the losses built on it are public

_Tensor = torch.Tensor


# ---------------------------------------------------------------------------- tensor helpers
def _check_same_shape(owner: str, named: list) -> None:
    """Per-step entries never broadcast: every ``(key, tensor)`` pair must share one shape."""
    ref_key, ref = named[0]
    for key, value in named[1:]:
        if value.shape != ref.shape:
            raise ValueError(
                f"{owner}: {key!r} has shape {tuple(value.shape)} but {ref_key!r} has shape {tuple(ref.shape)}; "
                "per-step entries must have the TensorDict's batch shape and are never broadcast "
                "(a [B] vs [B, 1] mix is a bug upstream)."
            )


def _standardize(value: _Tensor, exclude_dims: tuple, valid: _Tensor | None = None) -> _Tensor:
    """``(value - mean) / std`` over every dim but ``exclude_dims`` (std: unbiased, at least 1e-6),
    the statistics taken over the ``valid`` positions only when a mask is given (the others are
    selected out, so a NaN there does not spread)."""
    excluded = {d % value.ndim for d in exclude_dims}
    dims = [d for d in range(value.ndim) if d not in excluded]
    if not dims:
        return value
    if valid is None:
        mean = value.mean(dims, keepdim=True)
        std = value.std(dims, keepdim=True).clamp_min(1e-6)
        return (value - mean) / std
    valid = align_mask(valid, value)
    zero = torch.zeros((), dtype=value.dtype, device=value.device)
    count = valid.sum(dims, keepdim=True)
    mean = torch.where(valid, value, zero).sum(dims, keepdim=True) / count.clamp_min(1)
    squares = torch.where(valid, (value - mean).square(), zero).sum(dims, keepdim=True)
    std = (squares / (count - 1).clamp_min(1)).sqrt().clamp_min(1e-6)
    return (value - mean) / std


def _entropy(dist: D.Distribution, batch_dims: int, samples_mc: int) -> _Tensor:
    """The policy's entropy with the batch shape: closed form when the distribution has one,
    else a Monte-Carlo estimate ``-mean_k log pi(x_k)`` over ``samples_mc`` (reparametrised) draws."""
    try:
        if isinstance(dist, CompositeDistribution):
            return dist.entropy(aggregate_probabilities=True)
        return _sum_to_batch(dist.entropy(), batch_dims)
    except NotImplementedError:
        pass
    draws = dist.rsample((samples_mc,)) if dist.has_rsample else dist.sample((samples_mc,))
    if isinstance(dist, CompositeDistribution):
        log_prob = dist.log_prob(draws, aggregate_probabilities=True)
    else:  # a plain distribution draws tensors
        log_prob = _sum_to_batch(dist.log_prob(cast(torch.Tensor, draws)), batch_dims + 1)
    return -log_prob.mean(0)


def _entropy_coeff_map(owner: str, entropy_coeff: Any) -> dict | None:
    """The checked ``{head log-prob key: coefficient}`` of a mapping ``entropy_coeff``; ``None`` for a number."""
    if not isinstance(entropy_coeff, Mapping):
        if isinstance(entropy_coeff, bool) or not isinstance(entropy_coeff, (int, float, torch.Tensor)):
            raise TypeError(
                f"{owner}: entropy_coeff must be a number or a mapping of head log-prob keys to numbers, "
                f"got {type(entropy_coeff).__name__}."
            )
        return None
    if not entropy_coeff:
        raise ValueError(f"{owner}: entropy_coeff mapping is empty.")
    coeffs = {}
    for key, value in entropy_coeff.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{owner}: entropy_coeff[{key!r}] must be a number, got {value!r}.")
        leaf = key[-1] if isinstance(key, tuple) else key
        if not isinstance(leaf, str) or not leaf:
            raise TypeError(f"{owner}: entropy_coeff keys must be (nested) string keys, got {key!r}.")
        coeffs[key] = float(value)
    return coeffs


def _entropy_key_of(log_prob_key: Any) -> Any:
    """The composite distribution's per-head entropy key (``<sample>_entropy``) of a head's log-prob
    key (``<sample>_log_prob``); a key without that suffix is the head's sample key."""
    prefix, leaf = (log_prob_key[:-1], log_prob_key[-1]) if isinstance(log_prob_key, tuple) else ((), log_prob_key)
    leaf = (leaf[: -len("_log_prob")] if leaf.endswith("_log_prob") else leaf) + "_entropy"
    return (*prefix, leaf) if prefix else leaf


def _alias_networks(owner: str, actor_network: Any, critic_network: Any, actor: Any, critic: Any) -> tuple:
    """TorchRL's ``actor=`` / ``critic=`` spellings of ``actor_network`` / ``critic_network``."""
    for alias, given, name in (("actor", actor, "actor_network"), ("critic", critic, "critic_network")):
        if given is not None and (actor_network if name == "actor_network" else critic_network) is not None:
            raise ValueError(f"{owner}: pass {name} or {alias}, not both.")
    actor_network = actor if actor is not None else actor_network
    critic_network = critic if critic is not None else critic_network
    if actor_network is None:
        raise TypeError(f"{owner}: actor_network (or actor) is required.")
    return actor_network, critic_network


def _distribution_module(actor: Any) -> ProbabilisticTensorDictModule:
    """The actor's (last) probabilistic module: it knows which entries hold the distribution's
    parameters (KLPENPPOLoss rebuilds the behaviour policy from them)."""
    found = [m for m in actor.modules() if isinstance(m, ProbabilisticTensorDictModule)]
    if not found:
        raise TypeError(f"actor_network holds no ProbabilisticTensorDictModule; got {type(actor).__name__}.")
    return found[-1]


class _ActorCriticLoss(LossModule):
    """What A2C, PPO and REINFORCE share (private base; see the subclasses for the losses).

    It registers ``actor_network`` (anything with ``get_dist``: a ProbabilisticTensorDictModule or
    ProbabilisticTensorDictSequential) and the optional ``critic_network`` (writing the value key),
    validates the common hyperparameters before anything is registered, estimates the advantage
    with the value estimator when the input lacks it, and computes the log-prob of the stored
    action, the entropy bonus and the critic regression.
    """

    default_keys: ClassVar[dict] = {
        "advantage": "advantage",
        "value_target": "value_target",
        "value": "state_value",
        "sample_log_prob": "action_log_prob",
        "action": "action",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    }
    default_value_estimator = ValueEstimators.GAE
    default_value_kwargs: ClassVar[dict] = {"gamma": 0.99, "lmbda": 0.95}
    # whether the critic loss also reports the explained variance (PPO does, as in TorchRL)
    _log_explained_variance = False
    # the output key of the critic loss (REINFORCE calls it "loss_value", as TorchRL does)
    _critic_loss_key = "loss_critic"
    # whether the action and log-prob keys are read from the actor (TorchRL's PPO and A2C do, REINFORCE does not)
    _keys_follow_actor = False
    # ``loss.entropy_coeff = 0.005`` anneals in place (TorchRL 0.14's schedulable buffers)
    _schedulable_buffers = frozenset({"entropy_coeff", "critic_coeff", "clip_value"})

    # set in __init__ (the network by convert_to_functional, the coefficients as buffers)
    actor_network: ProbabilisticTensorDictModule | ProbabilisticTensorDictSequential
    entropy_coeff: torch.Tensor
    critic_coeff: torch.Tensor | None
    clip_value: torch.Tensor | None

    def __init__(
        self,
        actor_network: Any,
        critic_network: Any,
        *,
        entropy_bonus: bool = True,
        samples_mc_entropy: int = 1,
        entropy_coeff: float | Mapping = 0.01,
        critic_coeff: float | None = 1.0,
        loss_critic_type: str = "smooth_l1",
        separate_losses: bool = False,
        reduction: str | None = "mean",
        clip_value: float | torch.Tensor | None = None,
        gamma: float | None = None,
        delay_value: bool = False,
        advantage_key: Any = None,
        value_target_key: Any = None,
        value_key: Any = None,
        functional: bool = True,
        actor: Any = None,
        critic: Any = None,
        device: Any = None,
        advantage_norm: Any = None,
        delay_actor: bool = False,
    ) -> None:
        name = type(self).__name__
        actor_network, critic_network = _alias_networks(name, actor_network, critic_network, actor, critic)
        if not isinstance(functional, bool):
            raise TypeError(f"{name}: functional must be a bool, got {type(functional).__name__}.")
        for flag, value in (("separate_losses", separate_losses), ("delay_actor", delay_actor)):
            if not isinstance(value, bool):
                raise TypeError(f"{name}: {flag} must be a bool, got {type(value).__name__}.")
        if delay_actor and not functional:
            raise ValueError(
                f"{name}: delay_actor=True needs functional=True (TorchRL's rule: the proximal policy is held in target_actor_network_params)."
            )
        if advantage_norm is not None and not (
            callable(getattr(advantage_norm, "update", None)) and callable(getattr(advantage_norm, "scale", None))
        ):
            raise TypeError(
                f"{name}: advantage_norm must be a value normaliser with update(value_target) and scale() methods "
                f"(TorchRL's ValueNorm interface), got {type(advantage_norm).__name__}."
            )
        if reduction is None:
            reduction = "mean"
        _check_reduction(name, reduction)
        _check_loss_function(name, loss_critic_type)
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"{name}: actor_network must build a distribution (a ProbabilisticTensorDictModule or "
                f"ProbabilisticTensorDictSequential with get_dist), got {type(actor_network).__name__}."
            )
        if critic_network is not None and not isinstance(critic_network, torch.nn.Module):
            raise TypeError(
                f"{name}: critic_network must be a TensorDict module or None, got {type(critic_network).__name__}."
            )
        check_positive_int(name, "samples_mc_entropy", samples_mc_entropy)
        coeff_map = _entropy_coeff_map(name, entropy_coeff)
        if isinstance(clip_value, bool) or (isinstance(clip_value, torch.Tensor) and clip_value.numel() != 1):
            # (ClipPPOLoss reads a bool as "clip at clip_epsilon" before this point)
            raise ValueError(f"{name}: clip_value must be a float or a scalar tensor, got {clip_value}.")
        if isinstance(clip_value, torch.Tensor):
            clip_value = float(clip_value)
        check_positive(name, "clip_value", clip_value, allow_none=True)
        renames = {
            k: v
            for k, v in (("advantage", advantage_key), ("value_target", value_target_key), ("value", value_key))
            if v is not None
        }
        super().__init__()
        self._set_deprecated_ctor_args(gamma=gamma)
        self.delay_actor = delay_actor
        self.convert_to_functional(actor_network, "actor_network", create_target_params=delay_actor)
        self._has_critic = critic_network is not None and critic_coeff is not None
        if critic_network is not None:
            # separate_losses: the critic's calls see the parameters it shares with the actor detached
            shared = list(actor_network.parameters()) if separate_losses else None
            self.convert_to_functional(
                critic_network, "critic_network", create_target_params=delay_value, compare_against=shared
            )
        self.advantage_norm = advantage_norm
        self.entropy_bonus = bool(entropy_bonus)
        self.samples_mc_entropy = samples_mc_entropy
        # the loss's own coefficients live on ``device`` (the networks are not moved, as in TorchRL)
        # a per-head mapping has no buffer (nothing to schedule) and its own entropy method, chosen here
        self._entropy_coeff_map = coeff_map
        if coeff_map is None:
            self.register_buffer("entropy_coeff", torch.tensor(float(cast(float, entropy_coeff)), device=device))
        else:
            self.register_buffer("entropy_coeff", None)
            object.__setattr__(self, "_entropy_terms", self._mapped_entropy_terms)
        self.register_buffer(
            "critic_coeff", torch.tensor(float(critic_coeff), device=device) if critic_coeff is not None else None
        )
        self.register_buffer(
            "clip_value", torch.tensor(float(clip_value), device=device) if clip_value is not None else None
        )
        # the networks' own parameters are always the ones trained, so TorchRL's functional=False
        # (no functional copies) gives the same losses and gradients; kept for the call signature
        self.functional = functional
        self.loss_critic_type = loss_critic_type
        self.separate_losses = separate_losses
        self.reduction = reduction
        self.delay_value = bool(delay_value)
        if renames:
            self.set_keys(**renames)
        if self._keys_follow_actor:
            self._keys_from_actor(actor_network, "sample_log_prob")

    def _check_hyperparameter(self, name: str, value: float) -> None:
        if name == "clip_value":
            check_positive(type(self).__name__, "clip_value", value)
        super()._check_hyperparameter(name, value)

    # ------------------------------------------------------------------ value estimator
    def make_value_estimator(self, value_type: Any = None, **hyperparams: Any) -> _ActorCriticLoss:
        """Build the value estimator (``None``: :attr:`default_value_estimator`) on the critic.

        ``gamma`` defaults to the loss's (deprecated) constructor ``gamma`` when one was given, else
        0.99; ``lmbda`` (GAE, TD(lambda)) to 0.95. Other keyword arguments go to the estimator's
        constructor.

        Raises:
            RuntimeError: the loss has no critic_network. ValueError: unknown ``value_type``.
        """
        name = type(self).__name__
        if "critic_network" not in self._networks:
            raise RuntimeError(
                f"{name}: a value estimator needs a critic_network; pass one, or put the advantage in the input."
            )
        self._build_value_estimator(
            value_type,
            hyperparams,
            tuple(ValueEstimators),
            value_network=self.critic_network,
            actor_network=self.actor_network,
        )
        return self

    def _advantage(self, tensordict: Any) -> _Tensor:
        """The advantage in ``tensordict``, estimated (without gradients) into it when absent, and
        divided by ``advantage_norm.scale()`` when a normaliser is set (TorchRL's rule: its
        statistics take the fresh value targets, in training mode, only when the loss ran the
        estimator itself, so that epochs over one precomputed batch do not count it again)."""
        key = self.tensor_keys.advantage
        advantage = tensordict.get(key, None)
        estimated = advantage is None
        if estimated:
            if "critic_network" not in self._networks:
                raise KeyError(
                    f"{type(self).__name__}: the input has no {key!r} entry and there is no critic_network to "
                    f"estimate it; keys present: {_present_keys(tensordict)}."
                )
            params = self._detached_params("critic_network")
            target = self.params_of("critic_network", target=True) if self.delay_value else params
            with torch.no_grad():
                self.value_estimator(tensordict, params=params, target_params=target)
            advantage = tensordict.get(key)
        advantage = advantage.detach()
        if self.advantage_norm is None:
            return advantage
        if estimated and self.training:
            target_key = self.tensor_keys.value_target
            value_target = tensordict.get(target_key, None)
            if value_target is None:
                raise KeyError(
                    f"{type(self).__name__}: advantage_norm updates on the value target {target_key!r}, which the estimator did not write."
                )
            self.advantage_norm.update(value_target.detach())
        return advantage / self.advantage_norm.scale()

    # ------------------------------------------------------------------ actor
    def _get_dist(self, tensordict: Any, target: bool = False) -> D.Distribution:
        """The current policy (``target``: the target actor's, with ``delay_actor``) at the states of
        ``tensordict`` (its intermediate outputs are written there)."""
        with self.swapped("actor_network", target=target):
            return self.actor_network.get_dist(tensordict)

    def _log_prob(self, dist: D.Distribution, tensordict: Any) -> _Tensor:
        """log pi(a | s) of the stored action, with ``tensordict``'s batch shape (a composite policy's
        heads are summed)."""
        key = self.tensor_keys.action
        name = type(self).__name__
        if isinstance(dist, CompositeDistribution):
            return dist.log_prob(tensordict, aggregate_probabilities=True)
        try:
            action = tensordict.get(key)
        except KeyError:
            raise KeyError(
                f"{name}: the input misses the action {key!r}; keys present: {_present_keys(tensordict)}."
            ) from None
        if action.requires_grad:
            raise RuntimeError(
                f"{name}: the stored {key!r} requires grad; the loss scores a recorded action, detach it."
            )
        log_prob = dist.log_prob(action)
        if log_prob.shape != dist.batch_shape:
            # e.g. a Categorical over [B] given a [B, 1] action broadcasts to [B, B]
            raise ValueError(
                f"{name}: {key!r} of shape {tuple(action.shape)} does not match the policy (batch shape "
                f"{tuple(dist.batch_shape)}, event shape {tuple(dist.event_shape)}); log_prob broadcast it to "
                f"{tuple(log_prob.shape)}."
            )
        batch_dims = self._action_batch_dims(tensordict)
        log_prob = _sum_to_batch(log_prob, batch_dims)
        if log_prob.shape != action.shape[:batch_dims]:
            raise ValueError(
                f"{name}: the policy's batch shape {tuple(dist.batch_shape)} does not start with the batch size "
                f"{tuple(action.shape[:batch_dims])} of the TensorDict holding {key!r}."
            )
        return log_prob

    def _action_batch_dims(self, tensordict: Any) -> int:
        """Batch dims of the (sub-)TensorDict holding the action: per-agent log-probs and entropies
        for an action under a ``[N, T, n_agents]`` group, as tdict.nn writes them."""
        key = self.tensor_keys.action
        if isinstance(key, list):  # a composite policy's heads: summed to the root batch
            return tensordict.batch_dims
        return holder_batch_dims(tensordict, key)

    def _behaviour_log_prob(self, tensordict: Any) -> _Tensor:
        """The stored log-prob of the action under the collecting policy (a list of keys, one per
        head of a composite policy, is summed down to the batch shape)."""
        name = type(self).__name__
        keys = self.tensor_keys.sample_log_prob
        values = []
        for key in keys if isinstance(keys, list) else [keys]:
            value = tensordict.get(key, None)
            if value is None:
                hint = ""
                if "sample_log_prob" in tensordict.keys():
                    hint = (
                        " The input holds 'sample_log_prob', the name older versions wrote: TorchRL 0.14 and tdict "
                        "write '<action key>_log_prob'; rename the entry or call set_keys(sample_log_prob='sample_log_prob')."
                    )
                raise KeyError(
                    f"{name}: the input misses the behaviour log-prob {key!r} (the collecting policy writes it with "
                    f"return_log_prob=True); keys present: {_present_keys(tensordict)}.{hint}"
                )
            if value.requires_grad:
                raise RuntimeError(
                    f"{name}: the stored {key!r} requires grad; it must be data from the behaviour policy."
                )
            values.append(value)
        if len(values) == 1 and not isinstance(keys, list):
            return values[0]
        return cast(torch.Tensor, sum(_sum_to_batch(v, tensordict.batch_dims) for v in values))  # values: not empty

    def _score(self, tensordict: Any) -> tuple:
        """``(working copy, advantage, current policy, log pi(a|s) of the stored action)``.

        The networks and the value estimator write into the shallow working copy, never into the
        caller's entries; the advantage and the log-prob must have the same (batch) shape.
        """
        td = tensordict.copy()
        advantage = self._advantage(td)
        dist = self._get_dist(td)
        log_prob = self._log_prob(dist, td)
        _check_same_shape(
            type(self).__name__,
            [(self.tensor_keys.advantage, advantage), (f"log-prob of {self.tensor_keys.action!r}", log_prob)],
        )
        return td, advantage, dist, log_prob

    def _entropy_terms(self, dist: D.Distribution, tensordict: Any, out: dict, reduce: Callable) -> None:
        """``entropy`` and ``loss_entropy`` into ``out``; ``reduce``: the batch's :meth:`_reducer`."""
        if self.entropy_bonus:
            entropy = _entropy(dist, self._action_batch_dims(tensordict), self.samples_mc_entropy)
            reduced = reduce(entropy)  # reduced first: the coefficient scales one number
            out["entropy"] = (reduced if self.reduction == "mean" else entropy.mean()).detach()
            out["loss_entropy"] = entropy_loss(reduced, self._scalar("entropy_coeff"))

    def _mapped_entropy_terms(self, dist: D.Distribution, tensordict: Any, out: dict, reduce: Callable) -> None:
        """``_entropy_terms`` for a per-head ``entropy_coeff`` mapping (a composite policy)."""
        if not self.entropy_bonus:
            return
        if not isinstance(dist, CompositeDistribution):
            raise TypeError(
                f"{type(self).__name__}: a mapping entropy_coeff weights the heads of a composite policy; "
                f"the policy built a {type(dist).__name__}."
            )
        coeffs = cast(dict, self._entropy_coeff_map)
        per_head = dist.entropy(aggregate_probabilities=False)
        entropy = TensorDict({}, batch_size=[])  # reduced per head: no shared batch shape
        for key in coeffs:
            head = per_head.get(_entropy_key_of(key))  # KeyError names a head the policy lacks
            head = _sum_to_batch(head, holder_batch_dims(per_head, _entropy_key_of(key)))
            entropy.set(key, reduce(head))
        total: Any = 0.0
        for key in coeffs:
            total = total + entropy.get(key).detach().mean()
        out["entropy"] = total
        out["loss_entropy"] = self._weighted_loss_entropy(entropy)

    def _weighted_loss_entropy(self, entropy: Any) -> _Tensor:
        """``-coeff * entropy`` for a number coefficient (``entropy`` a tensor), or the sum over the
        mapping's heads of ``-coeff[head] * entropy[head]`` (``entropy`` a TensorDict keyed like the
        mapping; a head it lacks raises ``KeyError``)."""
        if self._entropy_coeff_map is None:
            return entropy_loss(entropy, cast(_Tensor, self.entropy_coeff))
        if isinstance(entropy, torch.Tensor):
            raise TypeError(
                f"{type(self).__name__}: a mapping entropy_coeff weights a TensorDict of per-head entropies."
            )
        total: Any = None
        for key, coeff in self._entropy_coeff_map.items():
            term = entropy_loss(entropy.get(key), coeff)
            total = term if total is None else total + term
        return total

    # ------------------------------------------------------------------ critic
    def _critic_terms(self, tensordict: Any, out: dict, reduce: Callable) -> None:
        """``loss_critic`` (and ``value_clip_fraction`` / ``explained_variance``) into ``out``;
        ``reduce``: the batch's :meth:`_reducer`."""
        if not self._has_critic:
            return
        assert self.critic_coeff is not None  # _has_critic: a critic and a coefficient
        loss = reduce(self._critic_loss(tensordict, out))
        coeff = self._scalar("critic_coeff")
        out[self._critic_loss_key] = loss if isinstance(coeff, float) and coeff == 1.0 else loss * coeff

    def _critic_loss_inputs(
        self, target_return: _Tensor, state_value: _Tensor, old_state_value: _Tensor | None
    ) -> tuple[_Tensor, _Tensor, _Tensor | None]:
        """TorchRL's hook on the critic loss's inputs ``(target, prediction, stored value)``, called
        after the shape check and before the distance, the value clip and the explained variance
        (which all see what it returns); the identity here. :class:`~rl_objectives.MAPPOLoss`
        normalises the three with its ``value_norm``."""
        return target_return, state_value, old_state_value

    def _critic_loss(self, tensordict: Any, out: dict) -> _Tensor:
        keys = self.tensor_keys
        name = type(self).__name__
        try:
            target = tensordict.get(keys.value_target)
        except KeyError:
            raise KeyError(
                f"{name}: the input misses the value target {keys.value_target!r} (value estimators write it next to "
                f"the advantage); keys present: {_present_keys(tensordict)}."
            ) from None
        old_value = None
        if self.clip_value is not None:
            try:
                old_value = tensordict.get(keys.value).detach()
            except KeyError:
                raise KeyError(
                    f"{name}: clip_value is set, so the input must hold the collection-time value {keys.value!r}; "
                    f"keys present: {_present_keys(tensordict)}."
                ) from None
        value = self._state_value(tensordict)
        named = [(keys.value, value), (keys.value_target, target)]
        if old_value is not None:
            named.append((f"{keys.value!r} (stored)", old_value))
        _check_same_shape(name, named)
        target, value, old_value = self._critic_loss_inputs(target, value, old_value)
        loss, clip_fraction = value_loss(value, target, self.loss_critic_type, old_value, self.clip_value)
        if clip_fraction is not None:
            out["value_clip_fraction"] = clip_fraction
        if self._log_explained_variance:
            out["explained_variance"] = explained_variance(value, target)  # (it detaches both)
        return loss

    def _state_value(self, tensordict: Any) -> _Tensor:
        """The critic's value at the states of ``tensordict`` (``separate_losses``: on detached
        inputs), never written there (a critic with a tensor function runs on the input tensors)."""
        source = tensordict.detach() if self.separate_losses else tensordict
        return self.call_network("critic_network", source, out_key=self.tensor_keys.value, write=False)

    def _extra_in_keys(self) -> list:
        # read when present: a precomputed advantage and value target, the stored value to clip around
        keys = [self.tensor_keys.advantage, self.tensor_keys.value_target]
        return keys if self.clip_value is None else [*keys, self.tensor_keys.value]

    # ------------------------------------------------------------------ output
    def _tail_out_keys(self, entropy: bool = True) -> list[str]:
        """The output entries after the objective's own: entropy terms, critic loss, diagnostics."""
        keys = ["entropy", "loss_entropy"] if entropy and self.entropy_bonus else []
        if self._has_critic:
            keys.append(self._critic_loss_key)
            if self.clip_value is not None:
                keys.append("value_clip_fraction")
            if self._log_explained_variance:
                keys.append("explained_variance")
        return keys

    def _output(self, out: dict) -> TensorDict:
        """The output TensorDict: ``loss_*`` entries already reduced, scalar diagnostics."""
        return TensorDict(out, batch_size=[])

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}, loss_critic_type={self.loss_critic_type!r}, separate_losses={self.separate_losses}"
