"""Distributions and parameter helpers for probabilistic modules (tensordict.nn.distributions names).

Design choices (documented differences from tensordict 0.14):

- ``Delta.log_prob`` is ``0`` where the value matches the parameter and ``-inf`` elsewhere (tensordict
  returns ``+inf`` at the value): a point mass has probability one, so its log-probability is zero.
- :class:`TruncatedNormal` is element-wise (``event_shape == ()``), like ``torch.distributions.Normal``;
  wrap it in ``torch.distributions.Independent`` for a joint log-prob over an action vector. It has no
  ``tanh_loc``/``upscale`` options.
- :class:`CompositeDistribution` has no process-global ``composite_lp_aggregate`` switch (the design
  allows none): ``aggregate_probabilities`` given at construction or per call decides whether
  ``log_prob``/``entropy`` return one summed tensor of the batch shape or a TensorDict of per-head entries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable, cast

import torch
from torch import distributions as D, nn
from torch.distributions import constraints

from .._core.utils import NestedKey, unravel_key
from ..scalars import scalar_like
from ..tensordict import TensorDict

__all__ = [
    "AddStateIndependentNormalScale",
    "CompositeDistribution",
    "Delta",
    "NormalParamExtractor",
    "OneHotCategorical",
    "TruncatedNormal",
    "biased_softplus",
    "holder_batch_dims",
    "mappings",
    "sum_to_batch",
]


def inv_softplus(value: float) -> float:
    """The ``x`` with ``softplus(x) == value``."""
    return math.log(max(math.expm1(value), 1e-6))


class biased_softplus(nn.Module):
    """``softplus(x + shift) + min_val``, with ``shift`` chosen so that ``f(0) == bias``.

    Examples:
        >>> import torch
        >>> from tdict.nn.distributions import biased_softplus
        >>> round(biased_softplus(1.0)(torch.zeros(())).item(), 5)
        1.0
    """

    def __init__(self, bias: float, min_val: float = 0.01) -> None:
        super().__init__()
        self.min_val = min_val
        self.bias = inv_softplus(bias - min_val)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.softplus(x + scalar_like(self.bias, x)) + scalar_like(self.min_val, x)


def _expln(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x <= 0, x.clamp_max(0).exp(), x.clamp_min(0).log1p() + 1)


_MAPPINGS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softplus": nn.functional.softplus,
    "exp": torch.exp,
    "relu": torch.relu,
    "biased_softplus": biased_softplus(1.0),
    "none": lambda x: x,
    "expln": _expln,
}


def mappings(key: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """A positive mapping by name: ``"softplus"``, ``"exp"``, ``"relu"``, ``"expln"``, ``"none"``,
    ``"biased_softplus"``, ``"biased_softplus_{bias}"`` or ``"biased_softplus_{bias}_{min_val}"``.

    ``relu`` may give zero: the callers clamp with their ``scale_lb`` (the "eps").

    Raises:
        NotImplementedError: for an unknown name. ValueError: for a malformed biased_softplus.

    Examples:
        >>> import torch
        >>> from tdict.nn.distributions import mappings
        >>> round(mappings("biased_softplus_2.0")(torch.zeros(())).item(), 4)
        2.0
    """
    if key in _MAPPINGS:
        return _MAPPINGS[key]
    if key.startswith("biased_softplus"):
        parts = key.split("_")
        try:
            if len(parts) == 3:
                return biased_softplus(float(parts[2]))
            if len(parts) == 4:
                return biased_softplus(float(parts[2]), min_val=float(parts[3]))
        except ValueError:
            pass
        raise ValueError(
            f"mappings: malformed {key!r}; expected 'biased_softplus_{{bias}}' or 'biased_softplus_{{bias}}_{{min_val}}'."
        )
    raise NotImplementedError(
        f"mappings: unknown mapping {key!r}; expected one of {sorted(_MAPPINGS)} or 'biased_softplus_{{bias}}'."
    )


class NormalParamExtractor(nn.Module):
    """Split the last dim of a tensor into a location and a positive scale (two halves).

    Args:
        scale_mapping: the positive mapping of the scale half (see :func:`mappings`).
        scale_lb: the smallest scale returned.

    Examples:
        >>> import torch
        >>> from tdict.nn import NormalParamExtractor
        >>> loc, scale = NormalParamExtractor()(torch.zeros(3, 4))
        >>> loc.shape, scale.shape
        (torch.Size([3, 2]), torch.Size([3, 2]))
        >>> torch.allclose(scale, torch.ones(3, 2))
        True
    """

    def __init__(self, scale_mapping: str = "biased_softplus_1.0", scale_lb: float = 1e-4) -> None:
        super().__init__()
        self.scale_mapping = mappings(scale_mapping)
        self.scale_lb = scale_lb

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        tensor, *others = tensors
        if tensor.shape[-1] % 2:
            raise ValueError(
                f"NormalParamExtractor: the last dim must be even (loc and scale halves), got shape {tuple(tensor.shape)}."
            )
        loc, scale = tensor.chunk(2, -1)
        return (loc, self.scale_mapping(scale).clamp_min(self.scale_lb), *others)


class AddStateIndependentNormalScale(nn.Module):
    """Return ``(loc, scale)`` with a learnt scale that does not depend on the input.

    Args:
        scale_shape: shape of the scale parameter; must match the trailing dims of ``loc``.
        scale_mapping: positive mapping applied to the parameter (see :func:`mappings`).
        scale_lb: the smallest scale returned.
        init_value: initial value of the (unmapped) parameter.
        make_param: if ``False`` the scale is a buffer, not a trained parameter.
        device: where the scale parameter is created (tensordict 0.14's argument).

    Examples:
        >>> import torch
        >>> from tdict.nn import AddStateIndependentNormalScale
        >>> loc, scale = AddStateIndependentNormalScale(3)(torch.zeros(5, 3))
        >>> scale.shape, torch.allclose(scale, torch.ones(5, 3))
        (torch.Size([5, 3]), True)
    """

    def __init__(
        self,
        scale_shape: torch.Size | int | tuple | None = None,
        scale_mapping: str = "exp",
        scale_lb: float = 1e-4,
        init_value: float = 0.0,
        make_param: bool = True,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if scale_shape is None:
            scale_shape = ()
        if isinstance(scale_shape, int):
            scale_shape = (scale_shape,)
        self.scale_shape = torch.Size(scale_shape)
        self.scale_lb = scale_lb
        self._mapping = mappings(scale_mapping)
        self.scale_mapping = scale_mapping
        value = torch.full(self.scale_shape, float(init_value), dtype=torch.get_default_dtype(), device=device)
        if make_param:
            self.state_independent_scale = nn.Parameter(value)
        else:
            self.register_buffer("state_independent_scale", value)

    def forward(self, loc: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = len(self.scale_shape)
        if n and loc.shape[-n:] != self.scale_shape:
            raise RuntimeError(
                f"AddStateIndependentNormalScale: last dims of loc {tuple(loc.shape[-n:])} do not match scale_shape {tuple(self.scale_shape)}."
            )
        scale = self._mapping(self.state_independent_scale.expand_as(loc)).clamp_min(self.scale_lb)
        return (loc, scale, *others)


class Delta(D.Distribution):
    """A point mass at ``param``: every sample is ``param``.

    ``log_prob`` is ``0`` where the value equals ``param`` (within ``atol + rtol * |param|``) over
    the whole event and ``-inf`` elsewhere; it has the batch shape.

    Args:
        param: the location of the mass.
        atol, rtol: tolerances of the equality test.
        batch_shape, event_shape: as in tensordict 0.14, by default the last dim of ``param`` is the
            event (``batch_shape = param.shape[:-1]``); given ``event_shape`` only, the batch shape is
            the rest of ``param.shape``.

    Examples:
        >>> import torch
        >>> from tdict.nn import Delta
        >>> d = Delta(torch.tensor([1.0, 2.0]))
        >>> d.sample((3,)).shape, d.mode
        (torch.Size([3, 2]), tensor([1., 2.]))
        >>> d.log_prob(torch.tensor([1.0, 2.0])), d.log_prob(torch.tensor([1.0, 0.0]))
        (tensor(0.), tensor(-inf))
        >>> Delta(torch.tensor([1.0, 2.0]), event_shape=()).log_prob(torch.tensor([1.0, 0.0]))
        tensor([0., -inf])
    """

    arg_constraints: dict = {}
    has_rsample = True

    def __init__(
        self,
        param: torch.Tensor,
        atol: float = 1e-6,
        rtol: float = 1e-6,
        batch_shape: torch.Size | tuple | None = None,
        event_shape: torch.Size | tuple | None = None,
    ) -> None:
        self.param = param
        self.atol = atol
        self.rtol = rtol
        if batch_shape is None and event_shape is None:  # tensordict 0.14: the last dim is the event
            batch_shape, event_shape = param.shape[:-1], param.shape[-1:]
        event_shape = torch.Size(() if event_shape is None else event_shape)
        if batch_shape is None:
            batch_shape = param.shape[: param.ndim - len(event_shape)]
        super().__init__(batch_shape=torch.Size(batch_shape), event_shape=event_shape, validate_args=False)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        param = self.param
        is_equal = (value - param).abs() <= self.atol + self.rtol * param.abs()
        out = torch.zeros_like(value, dtype=param.dtype).masked_fill(~is_equal, -math.inf)
        n = len(self.event_shape)
        return out.sum(tuple(range(-n, 0))) if n else out

    def sample(self, sample_shape: torch.Size | tuple = torch.Size()) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape: torch.Size | tuple = torch.Size()) -> torch.Tensor:
        return self.param.expand((*sample_shape, *self.param.shape))

    @property
    def mode(self) -> torch.Tensor:
        return self.param

    @property
    def mean(self) -> torch.Tensor:
        return self.param

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The point the distribution sits on (``param``)."""
        return self.param

    def entropy(self) -> torch.Tensor:
        return self.param.new_zeros(self.batch_shape)


def _categorical_from_logits(logits: torch.Tensor) -> D.Categorical:
    """``torch.distributions.Categorical(logits=logits, validate_args=False)``, its logits normalised
    by one ``log_softmax`` (torch subtracts a ``logsumexp``: the same values to rounding, but two
    ops forward and a slower backward). The attributes are those torch's ``__init__`` sets."""
    categorical = D.Categorical.__new__(D.Categorical)
    normalised = torch.log_softmax(logits, -1)
    categorical.__dict__["logits"] = normalised  # torch's lazy property, filled as its __init__ does
    categorical._param = normalised
    categorical._num_events = normalised.shape[-1]
    D.Distribution.__init__(categorical, normalised.shape[:-1], validate_args=False)
    return categorical


class OneHotCategorical(D.OneHotCategorical):
    """``torch.distributions.OneHotCategorical`` with ``mode`` and ``deterministic_sample``.

    Both are the one-hot of the most likely category (as the sample dtype, float).

    Examples:
        >>> import torch
        >>> from tdict.nn import OneHotCategorical
        >>> d = OneHotCategorical(logits=torch.tensor([0.0, 2.0, 1.0]))
        >>> d.mode
        tensor([0., 1., 0.])
        >>> d.deterministic_sample.shape
        torch.Size([3])
    """

    def __init__(
        self, probs: torch.Tensor | None = None, logits: torch.Tensor | None = None, validate_args: bool | None = None
    ) -> None:
        if validate_args is not False:
            super().__init__(probs, logits, validate_args)
            return
        # torch builds its inner Categorical with default validation (a NaN check that waits for
        # the device) whatever validate_args says; with validation off, the inner one is off too
        if logits is not None and probs is None and logits.ndim >= 1:
            categorical = _categorical_from_logits(logits)
        else:
            categorical = D.Categorical(probs, logits, validate_args=False)
        self._categorical = categorical
        D.Distribution.__init__(self, categorical.batch_shape, categorical.param_shape[-1:], validate_args=False)

    def expand(self, batch_shape: torch.Size | tuple, _instance: Any = None) -> OneHotCategorical:
        # torch's expand, on an instance of this class (torch refuses a subclass with its own
        # __init__ and no instance); attributes a subclass set in its __init__ carry over
        new = type(self).__new__(type(self)) if _instance is None else _instance
        expanded = cast("OneHotCategorical", super().expand(batch_shape, new))
        for name, value in self.__dict__.items():
            expanded.__dict__.setdefault(name, value)
        return expanded

    @property
    def mode(self) -> torch.Tensor:
        logits = self.logits
        return nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The :attr:`mode`: the one-hot of the most likely category."""
        return self.mode

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        # torch's value (the normalised logit at the one-hot's argmax), read with one gather when
        # the value has the distribution's own shape; other shapes broadcast through torch's path
        logits = self.logits
        if self._validate_args or value.shape != logits.shape:
            return super().log_prob(value)
        return logits.gather(-1, value.max(-1, keepdim=True)[1]).squeeze(-1)


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _std_cdf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(x * (1 / math.sqrt(2))))


def _std_log_pdf(x: torch.Tensor) -> torch.Tensor:
    return -0.5 * x * x - _LOG_SQRT_2PI


class TruncatedNormal(D.Distribution):
    """A normal distribution ``N(loc, scale)`` restricted to ``[low, high]`` (element-wise).

    Sampling uses the inverse CDF (reparametrised, so ``rsample`` gives gradients); ``log_prob`` is
    ``-inf`` outside ``[low, high]``; ``mode`` is ``loc`` clamped to the bounds; ``deterministic_sample``
    is the mean (as in tensordict 0.14).

    Args:
        loc, scale: the parameters of the untruncated normal.
        low, high: the bounds (tensors or floats, broadcast with ``loc``). Default ``-1`` and ``1``.
        eps: the CDF values are kept in ``[eps, 1 - eps]`` when sampling.
        a, b: tensordict 0.14's names of ``low`` and ``high`` (keyword only; give one name of each).

    Examples:
        >>> import torch
        >>> from tdict.nn import TruncatedNormal
        >>> d = TruncatedNormal(torch.zeros(4), torch.ones(4), low=-1.0, high=1.0)
        >>> s = d.sample((100,))
        >>> bool(((s >= -1) & (s <= 1)).all()), d.mean.abs().max().item() < 1e-6
        (True, True)
    """

    # a class attribute, as in torch's own distributions (Distribution declares a property)
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}  # pyright: ignore[reportAssignmentType]
    has_rsample = True

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        low: torch.Tensor | float | None = None,
        high: torch.Tensor | float | None = None,
        eps: float = 1e-6,
        validate_args: bool | None = None,
        *,
        a: torch.Tensor | float | None = None,
        b: torch.Tensor | float | None = None,
    ) -> None:
        for name, alias, value, other in (("low", "a", low, a), ("high", "b", high, b)):
            if value is not None and other is not None:
                raise ValueError(f"TruncatedNormal: pass {name} or its tensordict name {alias}, not both.")
        low = (-1.0 if a is None else a) if low is None else low
        high = (1.0 if b is None else b) if high is None else high
        params: list[torch.Tensor] = torch.broadcast_tensors(
            *(torch.as_tensor(v, dtype=loc.dtype, device=loc.device) for v in (loc, scale, low, high))
        )
        self.loc, self.scale, self.low, self.high = params
        self.eps = eps
        self._alpha = (self.low - self.loc) / self.scale
        self._beta = (self.high - self.loc) / self.scale
        self._cdf_a = _std_cdf(self._alpha)
        self._cdf_b = _std_cdf(self._beta)
        self._Z = (self._cdf_b - self._cdf_a).clamp_min(1e-12)
        self._log_Z = self._Z.log()
        super().__init__(batch_shape=self.loc.shape, validate_args=validate_args)

    @property
    def support(self) -> constraints.Constraint:
        return constraints.interval(self.low, self.high)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        x = (value - self.loc) / self.scale
        lp = _std_log_pdf(x) - self._log_Z - self.scale.log()
        inside = (value >= self.low) & (value <= self.high)
        return lp.masked_fill(~inside, -math.inf)

    def cdf(self, value: torch.Tensor) -> torch.Tensor:
        x = (value - self.loc) / self.scale
        return ((_std_cdf(x) - self._cdf_a) / self._Z).clamp(0, 1)

    def icdf(self, value: torch.Tensor) -> torch.Tensor:
        u = (self._cdf_a + value * self._Z).clamp(self.eps, 1 - self.eps)
        x = math.sqrt(2) * torch.erfinv(2 * u - 1)
        return torch.max(torch.min(self.loc + self.scale * x, self.high), self.low)

    def rsample(self, sample_shape: torch.Size | tuple = torch.Size()) -> torch.Tensor:
        shape = self._extended_shape(sample_shape)
        u = torch.rand(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.icdf(u)

    def sample(self, sample_shape: torch.Size | tuple = torch.Size()) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample(sample_shape)

    @property
    def mean(self) -> torch.Tensor:
        phi_a, phi_b = _std_log_pdf(self._alpha).exp(), _std_log_pdf(self._beta).exp()
        return self.loc + self.scale * (phi_a - phi_b) / self._Z

    @property
    def variance(self) -> torch.Tensor:
        a, b = self._alpha, self._beta
        phi_a, phi_b = _std_log_pdf(a).exp(), _std_log_pdf(b).exp()
        r = (phi_a - phi_b) / self._Z
        return self.scale**2 * (1 + (a * phi_a - b * phi_b) / self._Z - r * r)

    @property
    def mode(self) -> torch.Tensor:
        return torch.max(torch.min(self.loc, self.high), self.low)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The :attr:`mean` of the truncated distribution."""
        return self.mean

    def entropy(self) -> torch.Tensor:
        a, b = self._alpha, self._beta
        phi_a, phi_b = _std_log_pdf(a).exp(), _std_log_pdf(b).exp()
        return _LOG_SQRT_2PI + 0.5 + self.scale.log() + self._log_Z + (a * phi_a - b * phi_b) / (2 * self._Z)


def sum_to_batch(value: torch.Tensor, batch_dims: int) -> torch.Tensor:
    """Sums the dims of ``value`` after its first ``batch_dims`` (a log-prob or entropy per sample).

    Examples:
        >>> sum_to_batch(torch.ones(4, 3, 2), 1).tolist()
        [6.0, 6.0, 6.0, 6.0]
    """
    extra = value.ndim - batch_dims
    return value.sum(tuple(range(-extra, 0))) if extra > 0 else value


def holder_batch_dims(tensordict: Any, key: Any) -> int:
    """Batch dims of the (sub-)TensorDict that holds ``key``.

    A log-prob keeps the batch shape of the group its sample lives in: an action at
    ``("agents", "action")`` under a ``[N, T, n_agents]`` group gets a ``[N, T, n_agents]`` log-prob.

    Examples:
        >>> from tdict import TensorDict
        >>> td = TensorDict(agents=TensorDict(action=torch.zeros(5, 3, 2), batch_size=[5, 3]), batch_size=[5])
        >>> holder_batch_dims(td, ("agents", "action")), holder_batch_dims(td, "agents")
        (2, 1)
    """
    if isinstance(key, tuple) and len(key) > 1:
        parent = tensordict.get(key[:-1], None)
        if parent is not None and getattr(type(parent), "_is_tensor_collection", False):
            return parent.batch_dims
    return tensordict.batch_dims


def _add_suffix(key: NestedKey, suffix: str) -> NestedKey:
    return key + suffix if isinstance(key, str) else (*key[:-1], key[-1] + suffix)


class CompositeDistribution(D.Distribution):
    """Several distributions, one per head, whose parameters and samples live in TensorDicts.

    Args:
        params: a TensorDict holding, at each head key of ``distribution_map``, a sub-TensorDict of
            that head's keyword arguments (e.g. ``params["action"] = TensorDict(loc=..., scale=...)``).
            Its batch size is the batch size of the samples and of the aggregated log-prob.

    Keyword Args:
        distribution_map: ``{head key: distribution class}``.
        name_map: ``{head key: sample key}``; the sample of a head is written there (default: the
            head key itself).
        extra_kwargs: ``{head key: dict}`` of constant keyword arguments for that head's class.
        aggregate_probabilities: default of ``log_prob``/``entropy``: ``True`` returns one tensor of
            the batch shape (each head's log-prob summed over its non-batch dims, then over heads);
            ``False`` (default, tensordict 0.14's ``composite_lp_aggregate()`` default) a TensorDict
            holding each head's log-prob at ``<sample key>_log_prob`` (entropy: ``<sample key>_entropy``),
            with the batch shape of the (sub-)TensorDict holding that sample key.
        log_prob_key: key of the aggregated log-prob in ``log_prob_composite``; ``"sample_log_prob"``
            (tensordict 0.14 keeps that name for the summed log-prob of a composite; ``None`` means it too).
        entropy_key: key of the aggregated entropy in ``entropy_composite``; ``"entropy"`` (also for ``None``).

    Raises:
        KeyError: naming the head key missing from ``params``, or the sample key missing from the
            sample given to ``log_prob``.

    Examples:
        >>> import torch
        >>> from torch import distributions as D
        >>> from tdict import TensorDict
        >>> from tdict.nn import CompositeDistribution
        >>> params = TensorDict(
        ...     cont=TensorDict(loc=torch.zeros(4, 2), scale=torch.ones(4, 2), batch_size=[4]),
        ...     disc=TensorDict(logits=torch.zeros(4, 3), batch_size=[4]),
        ...     batch_size=[4])
        >>> dist = CompositeDistribution(params, distribution_map={"cont": D.Normal, "disc": D.Categorical})
        >>> sample = dist.sample()
        >>> sample["cont"].shape, sample["disc"].shape
        (torch.Size([4, 2]), torch.Size([4]))
        >>> dist.log_prob(sample, aggregate_probabilities=True).shape
        torch.Size([4])
        >>> lp = dist.log_prob(sample)
        >>> sorted(lp.keys()), lp["cont_log_prob"].shape
        (['cont_log_prob', 'disc_log_prob'], torch.Size([4]))
    """

    arg_constraints: dict = {}

    def __init__(
        self,
        params: Any,
        distribution_map: Mapping,
        *,
        name_map: Mapping | None = None,
        extra_kwargs: Mapping | None = None,
        aggregate_probabilities: bool = False,
        log_prob_key: NestedKey | None = "sample_log_prob",
        entropy_key: NestedKey | None = "entropy",
    ) -> None:
        self._batch_size = params.batch_size
        name_map = {unravel_key(k): unravel_key(v) for k, v in (name_map or {}).items()}
        extra_kwargs = {unravel_key(k): v for k, v in (extra_kwargs or {}).items()}
        self.dists: dict = {}
        self._head_batch_dims: dict = {}
        for head, cls in distribution_map.items():
            head = unravel_key(head)
            try:
                head_params = params.get(head)
            except KeyError:
                raise KeyError(
                    f"CompositeDistribution: the parameters of head {head!r} are missing; params holds {sorted(map(str, params.keys(True)))}."
                ) from None
            kwargs = dict(head_params.items()) if hasattr(head_params, "batch_size") else {}
            kwargs.update(extra_kwargs.get(head, {}))
            name = name_map.get(head, head)
            self.dists[name] = cls(**kwargs)
            # per-head entropies keep the batch shape of the head's parameters (e.g. one per agent)
            self._head_batch_dims[name] = getattr(head_params, "batch_dims", len(self._batch_size))
        self.aggregate_probabilities = aggregate_probabilities
        self.log_prob_key = unravel_key("sample_log_prob" if log_prob_key is None else log_prob_key)
        self.entropy_key = unravel_key("entropy" if entropy_key is None else entropy_key)
        super().__init__(batch_shape=self._batch_size, validate_args=False)

    @classmethod
    def from_distributions(
        cls,
        params: Any,
        distributions: Mapping,
        *,
        aggregate_probabilities: bool = False,
        log_prob_key: NestedKey | None = "sample_log_prob",
        entropy_key: NestedKey | None = "entropy",
    ) -> CompositeDistribution:
        """A composite of distributions already built (tensordict 0.14's constructor).

        Args:
            params: a TensorDict giving the batch size; it holds (or will hold) the samples, so that
                each head's entropy keeps the batch shape of the group its sample key lives in.
            distributions: ``{sample key: distribution}``.

        Examples:
            >>> import torch
            >>> from torch import distributions as D
            >>> from tdict import TensorDict
            >>> from tdict.nn import CompositeDistribution
            >>> dist = CompositeDistribution.from_distributions(
            ...     TensorDict(batch_size=[3]), {"a": D.Normal(torch.zeros(3), 1.0), "b": D.Bernoulli(torch.full((3,), 0.5))})
            >>> sorted(dist.log_prob(dist.sample()).keys())
            ['a_log_prob', 'b_log_prob']
        """
        self = cls.__new__(cls)
        self._batch_size = params.batch_size
        self.dists = {unravel_key(k): v for k, v in distributions.items()}
        self._head_batch_dims = {k: holder_batch_dims(params, k) for k in self.dists}
        self.aggregate_probabilities = aggregate_probabilities
        self.log_prob_key = unravel_key("sample_log_prob" if log_prob_key is None else log_prob_key)
        self.entropy_key = unravel_key("entropy" if entropy_key is None else entropy_key)
        D.Distribution.__init__(self, batch_shape=self._batch_size, validate_args=False)
        return self

    def _collect(self, fn: Callable[[Any], torch.Tensor], sample_shape: torch.Size = torch.Size()) -> TensorDict:
        out = TensorDict({}, batch_size=torch.Size(sample_shape) + self._batch_size)
        for key, dist in self.dists.items():
            out.set(key, fn(dist))
        return out

    def sample(self, sample_shape: torch.Size | tuple = torch.Size()) -> TensorDict:
        """A TensorDict (batch size ``sample_shape + batch size``) with one sample per head."""
        return self._collect(lambda d: d.sample(sample_shape), torch.Size(sample_shape))

    @property
    def has_rsample(self) -> bool:  # pyright: ignore[reportIncompatibleVariableOverride]  (a class attribute in torch)
        """Whether every head draws reparametrised samples."""
        return all(d.has_rsample for d in self.dists.values())

    def rsample(self, sample_shape: torch.Size | tuple = torch.Size()) -> TensorDict:
        """Reparametrised samples for the heads that support it, plain samples for the others."""
        return self._collect(
            lambda d: d.rsample(sample_shape) if d.has_rsample else d.sample(sample_shape), torch.Size(sample_shape)
        )

    @property
    def mode(self) -> TensorDict:
        return self._collect(lambda d: d.mode)

    @property
    def mean(self) -> TensorDict:
        return self._collect(lambda d: d.mean)

    @property
    def deterministic_sample(self) -> TensorDict:
        """Per head: ``deterministic_sample`` when defined, else the mode for discrete supports, else the mean."""
        from .probabilistic import _deterministic

        return self._collect(_deterministic)

    def _head_sample(self, sample: Any, key: NestedKey, method: str = "log_prob") -> torch.Tensor:
        try:
            return sample.get(key)
        except KeyError:
            raise KeyError(
                f"CompositeDistribution.{method}: the sample misses {key!r}; it holds {sorted(map(str, sample.keys(True)))}."
            ) from None

    def log_prob(self, sample: Any, *, aggregate_probabilities: bool | None = None) -> Any:
        """The log-prob of a sample TensorDict (see ``aggregate_probabilities`` in the class docstring).

        Per leaf, the log-prob is summed over the dims past the batch dims of the (sub-)TensorDict
        holding the leaf in ``sample``: ``("agents", "action")`` under a ``[B, n_agents]`` group gives
        ``("agents", "action_log_prob")`` of shape ``[B, n_agents]``. The aggregate sums every leaf
        down to ``sample``'s batch shape.
        """
        aggregate = self.aggregate_probabilities if aggregate_probabilities is None else aggregate_probabilities
        if aggregate:
            total = None
            for key, dist in self.dists.items():
                value = sum_to_batch(dist.log_prob(self._head_sample(sample, key)), sample.batch_dims)
                total = value if total is None else total + value
            return total
        out = sample.empty(recurse=True)  # the sample's structure: nested groups keep their batch size
        for key, dist in self.dists.items():
            value = sum_to_batch(dist.log_prob(self._head_sample(sample, key)), holder_batch_dims(sample, key))
            out.set(_add_suffix(key, "_log_prob"), value)
        return out.filter_empty_()

    def log_prob_composite(self, sample: Any, *, include_sum: bool | None = None) -> Any:
        """A new TensorDict (``sample``'s structure) with each head's log-prob at ``<sample key>_log_prob``.

        Args:
            sample: a TensorDict holding every head's sample key.
            include_sum: also write the log-prob summed over heads (down to ``sample``'s batch shape)
                at ``log_prob_key``; ``None`` follows ``aggregate_probabilities``.

        Examples:
            >>> import torch
            >>> from torch import distributions as D
            >>> from tdict import TensorDict
            >>> from tdict.nn import CompositeDistribution
            >>> head = TensorDict(loc=torch.zeros(2), scale=torch.ones(2), batch_size=[2])
            >>> params = TensorDict(a=head, batch_size=[2])
            >>> dist = CompositeDistribution(params, distribution_map={"a": D.Normal})
            >>> sorted(dist.log_prob_composite(dist.sample(), include_sum=True).keys())
            ['a_log_prob', 'sample_log_prob']
        """
        if include_sum is None:
            include_sum = self.aggregate_probabilities
        out = self.log_prob(sample, aggregate_probabilities=False)
        if include_sum:
            out.set(self.log_prob_key, self.log_prob(sample, aggregate_probabilities=True))
        return out

    def cdf(self, sample: Any) -> Any:
        """``sample`` updated with each head's CDF at ``<sample key>_cdf``; returns ``sample``.

        Examples:
            >>> import torch
            >>> from torch import distributions as D
            >>> from tdict import TensorDict
            >>> from tdict.nn import CompositeDistribution
            >>> head = TensorDict(loc=torch.zeros(2), scale=torch.ones(2), batch_size=[2])
            >>> params = TensorDict(a=head, batch_size=[2])
            >>> dist = CompositeDistribution(params, distribution_map={"a": D.Normal})
            >>> dist.cdf(TensorDict(a=torch.zeros(2), batch_size=[2]))["a_cdf"]
            tensor([0.5000, 0.5000])
        """
        values = {key: dist.cdf(self._head_sample(sample, key, "cdf")) for key, dist in self.dists.items()}
        for key, value in values.items():
            sample.set(_add_suffix(key, "_cdf"), value)
        return sample

    def icdf(self, sample: Any) -> Any:
        """``sample`` updated with each head's inverse CDF at ``<sample key>_icdf``; returns ``sample``.

        Each head reads its probabilities at ``<sample key>_cdf`` (written by :meth:`cdf`) or, without
        it, at ``<sample key>`` itself.

        Examples:
            >>> import torch
            >>> from torch import distributions as D
            >>> from tdict import TensorDict
            >>> from tdict.nn import CompositeDistribution
            >>> head = TensorDict(loc=torch.zeros(2), scale=torch.ones(2), batch_size=[2])
            >>> params = TensorDict(a=head, batch_size=[2])
            >>> dist = CompositeDistribution(params, distribution_map={"a": D.Normal})
            >>> dist.icdf(TensorDict(a_cdf=torch.full((2,), 0.5), batch_size=[2]))["a_icdf"]
            tensor([0., 0.])
        """
        values = {}
        for key, dist in self.dists.items():
            cdf_key = _add_suffix(key, "_cdf")
            prob = sample.get(cdf_key, None)
            if prob is None:
                try:
                    prob = sample.get(key)
                except KeyError:
                    raise KeyError(
                        f"CompositeDistribution.icdf: the sample holds neither {cdf_key!r} nor {key!r}; it holds "
                        f"{sorted(map(str, sample.keys(True)))}."
                    ) from None
            values[key] = dist.icdf(prob)
        for key, value in values.items():
            sample.set(_add_suffix(key, "_icdf"), value)
        return sample

    def entropy(self, *, aggregate_probabilities: bool | None = None) -> Any:
        """Per-head entropies (``<key>_entropy``, each summed past its head's parameter batch dims) or
        their sum over heads, down to the batch shape."""
        aggregate = self.aggregate_probabilities if aggregate_probabilities is None else aggregate_probabilities
        ndim = len(self._batch_size)
        if aggregate:
            total = None
            for dist in self.dists.values():
                value = sum_to_batch(dist.entropy(), ndim)
                total = value if total is None else total + value
            return total
        out = TensorDict({}, batch_size=self._batch_size)
        for key, dist in self.dists.items():
            out.set(_add_suffix(key, "_entropy"), sum_to_batch(dist.entropy(), self._head_batch_dims[key]))
        return out
