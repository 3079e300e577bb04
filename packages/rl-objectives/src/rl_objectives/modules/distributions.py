"""Action distributions for policies (torchrl.modules.distributions names).

:class:`TanhNormal`, :class:`TanhDelta`, :class:`IndependentNormal`, :class:`MaskedCategorical`,
:class:`TruncatedNormal` and :class:`OneHotCategorical` live here (the last two extend their
``tdict.nn`` namesakes with TorchRL's arguments: location scaling and event dim, reparametrised
one-hot samples); :class:`~tdict.nn.Delta` and :class:`~tdict.nn.NormalParamExtractor` are
re-exported from ``tdict.nn``.

Every distribution here exposes ``deterministic_sample`` (what
``set_interaction_type(DETERMINISTIC)`` makes a probabilistic module write) and, where it has an
event dim, sums ``log_prob`` over it, so the log-prob of an action has the batch shape.
"""

from __future__ import annotations

import enum
import math

import torch
from tdict import nn as tnn, scalar_like
from tdict.nn import Delta, NormalParamExtractor
from torch import distributions as D
from torch.distributions import constraints

__all__ = [
    "Delta",
    "IndependentNormal",
    "MaskedCategorical",
    "NormalParamExtractor",
    "OneHotCategorical",
    "ReparamGradientStrategy",
    "TanhDelta",
    "TanhNormal",
    "TruncatedNormal",
]


def _bounds(
    low: torch.Tensor | float, high: torch.Tensor | float, like: torch.Tensor, what: str, check: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """``low`` and ``high`` as tensors of ``like``'s dtype and device, checked ``low < high`` (tensor
    bounds only with ``check``: the comparison waits for the device)."""
    scalars = isinstance(low, (int, float)) and isinstance(high, (int, float))
    if scalars and not low < high:
        raise ValueError(f"{what}: low must be smaller than high, got low={low} and high={high}.")
    low_t = torch.as_tensor(low, dtype=like.dtype, device=like.device)
    high_t = torch.as_tensor(high, dtype=like.dtype, device=like.device)
    if check and not scalars and not bool((low_t < high_t).all()):
        raise ValueError(f"{what}: low must be smaller than high everywhere, got low={low_t} and high={high_t}.")
    return low_t, high_t


def _event_dims(event_dims: int | None, loc: torch.Tensor, what: str) -> int:
    if event_dims is None:
        return min(1, loc.ndim)
    if not isinstance(event_dims, int) or not 0 <= event_dims <= loc.ndim:
        raise ValueError(
            f"{what}: event_dims must be an int in [0, {loc.ndim}] (loc has shape {tuple(loc.shape)}), got {event_dims!r}."
        )
    return event_dims


def _sum_event(value: torch.Tensor, event_dims: int) -> torch.Tensor:
    return value.sum(tuple(range(-event_dims, 0))) if event_dims else value


_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))
_LOG_2 = math.log(2.0)


def _normal_log_prob(x: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``log N(x; loc, scale)``, elementwise: torch's ``Normal.log_prob`` formula (the same numbers)
    without building the distribution."""
    return -((x - loc) ** 2) / (2 * scale**2) - scale.log() - _LOG_SQRT_2PI


class TanhNormal(D.Distribution):
    """A Normal squashed by ``tanh`` and scaled to ``[low, high]``: ``y = c + h * tanh(x)``, ``x ~ N(loc, scale)``.

    ``c = (high + low) / 2`` and ``h = (high - low) / 2``. The density follows from the change of variables
    ``log p(y) = log N(atanh(t); loc, scale) - log(1 - t**2) - log(h)`` with ``t = (y - c) / h``,
    summed over the ``event_dims`` trailing dims, so ``log_prob`` has the batch shape.

    Numerical safety: ``tanh`` saturates to exactly ``+-1`` in floating point, so samples are kept
    ``eps`` (the dtype's machine epsilon) away from ``+-1`` before scaling, and ``log_prob`` clamps
    ``t`` the same way: it stays finite at (and beyond) the bounds instead of giving ``inf``/``nan``.
    The log-density of the tensor the last ``rsample``/``sample`` returned is computed from the
    Normal draw itself (``log N(x) - log(1 - tanh(x)**2)``, the Jacobian term in a stable form), not
    from ``atanh`` of the squashed value: where ``tanh`` saturates, inverting it gives a point far
    from the draw, and with a small ``scale`` a log-density of -1e15 (the policy-gradient losses
    that score their own samples then blow up).

    ``mode`` and ``deterministic_sample`` are ``c + h * tanh(loc)``: the image of the Normal's mode, the
    usual deterministic action of SAC-like policies (it is not the exact mode of the squashed
    density). ``mean`` and ``entropy`` have no closed form and raise ``NotImplementedError``
    (probabilistic modules then fall back to an empirical mean).

    Args:
        loc, scale: parameters of the Normal before squashing (broadcast together).
        upscale: with ``tanh_loc=True``, ``loc`` is first mapped to ``upscale * tanh(loc / upscale)``.
        low, high: the bounds (floats or tensors broadcasting with the event shape). Default ``-1, 1``.
        event_dims: how many trailing dims of ``loc`` form one event (default ``min(1, loc.ndim)``).
        tanh_loc: see ``upscale``.
        safe_tanh: keep squashed samples ``eps`` away from the bounds (default ``True``).

    Raises:
        ValueError: when ``low >= high`` somewhere (tensor bounds are not compared with
            ``validate_args=False``, which spares a device sync per construction), or ``event_dims``
            is out of range.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import TanhNormal
        >>> d = TanhNormal(torch.zeros(3, 2), torch.ones(3, 2), low=-2.0, high=2.0)
        >>> s = d.rsample()
        >>> s.shape, bool((s.abs() < 2).all()), d.log_prob(s).shape
        (torch.Size([3, 2]), True, torch.Size([3]))
        >>> d.deterministic_sample
        tensor([[0., 0.],
                [0., 0.],
                [0., 0.]])
    """

    arg_constraints: dict[str, constraints.Constraint] = {"loc": constraints.real, "scale": constraints.positive}
    has_rsample = True

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        upscale: torch.Tensor | float = 5.0,
        low: torch.Tensor | float = -1.0,
        high: torch.Tensor | float = 1.0,
        event_dims: int | None = None,
        tanh_loc: bool = False,
        safe_tanh: bool = True,
        validate_args: bool | None = None,
    ) -> None:
        if not isinstance(loc, torch.Tensor) or not isinstance(scale, torch.Tensor):
            raise TypeError(
                f"TanhNormal: loc and scale must be tensors, got {type(loc).__name__} and {type(scale).__name__}."
            )
        if tanh_loc:
            loc = upscale * torch.tanh(loc / upscale)
        if loc.shape != scale.shape:
            loc, scale = torch.broadcast_tensors(loc, scale)
        n_event = _event_dims(event_dims, loc, "TanhNormal")
        self.loc, self.scale = loc, scale
        # the default bounds (-1, 1): no affine map around tanh, no log(h) in the density, and the
        # bound tensors made only when read (two tensor constructions per policy call spared)
        self._unit = isinstance(low, (int, float)) and isinstance(high, (int, float)) and (low, high) == (-1, 1)
        if self._unit:
            self._low = self._high = None
        else:
            self._low, self._high = _bounds(low, high, loc, "TanhNormal", check=validate_args is not False)
            self._center, self._half = (self._high + self._low) / 2, (self._high - self._low) / 2
        self.upscale, self.tanh_loc, self.safe_tanh = upscale, tanh_loc, safe_tanh
        self.event_dims = n_event
        self._eps = torch.finfo(loc.dtype).eps
        split = loc.ndim - n_event
        super().__init__(batch_shape=loc.shape[:split], event_shape=loc.shape[split:], validate_args=validate_args)

    def _bound_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        low, high = self._low, self._high
        if low is None or high is None:  # the default (-1, 1): made on first read
            low, high = self._low, self._high = _bounds(-1.0, 1.0, self.loc, "TanhNormal")
        return low, high

    @property
    def low(self) -> torch.Tensor:
        """The lower bound, a tensor of ``loc``'s dtype and device."""
        return self._bound_tensors()[0]

    @property
    def high(self) -> torch.Tensor:
        """The upper bound, a tensor of ``loc``'s dtype and device."""
        return self._bound_tensors()[1]

    @property
    def support(self) -> constraints.Constraint:
        return constraints.independent(constraints.interval(self.low, self.high), self.event_dims)

    def _squash(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.tanh(x)
        if self.safe_tanh:
            t = t.clamp(-1 + self._eps, 1 - self._eps)
        return t if self._unit else self._center + self._half * t

    def rsample(self, sample_shape: torch.Size | tuple = torch.Size()) -> torch.Tensor:
        noise = torch.empty(torch.Size(sample_shape) + self.loc.shape, dtype=self.loc.dtype, device=self.loc.device)
        noise = noise.normal_()
        x = self.loc + noise * self.scale  # torch's Normal.rsample: the same draws
        y = self._squash(x)
        self._last_draw = (y, x, noise)  # log_prob(y) scores x itself (see the class docstring)
        return y

    def rsample_and_log_prob(
        self, sample_shape: torch.Size | tuple = torch.Size()
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparametrised sample and its log-density, scored from the Normal draw itself (TorchRL's
        joint call; the same numbers as ``log_prob`` of the tensor ``rsample`` just returned).

        Examples:
            >>> import torch
            >>> from rl_objectives.modules import TanhNormal
            >>> y, lp = TanhNormal(torch.zeros(4, 2), torch.full((4, 2), 1e-3)).rsample_and_log_prob()
            >>> y.shape, lp.shape, bool(lp.isfinite().all())
            (torch.Size([4, 2]), torch.Size([4]), True)
        """
        y = self.rsample(sample_shape)
        return y, self._draw_log_prob(*self._last_draw[1:])

    def _draw_log_prob(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        # log(1 - tanh(x)^2) = 2 * (log 2 - x - softplus(-2x)): finite for any x
        # (the numbers as cached tensors: each Python number would be converted at every call)
        minus_two = scalar_like(-2.0, x)
        log_det = (x + torch.nn.functional.softplus(x * minus_two)).sub_(scalar_like(_LOG_2, x)).mul_(minus_two)
        # x = loc + noise * scale: log N(x; loc, scale) = -noise^2 / 2 - log(scale) - log(sqrt(2 pi)),
        # with the same total derivatives in loc and scale as the density written in x
        log_normal = noise.square().mul_(scalar_like(-0.5, x)) - self.scale.log() - scalar_like(_LOG_SQRT_2PI, x)
        log_density = log_normal - log_det if self._unit else log_normal - log_det - torch.log(self._half)
        return _sum_event(log_density, self.event_dims)

    def sample(self, sample_shape: torch.Size | tuple = torch.Size()) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        last = getattr(self, "_last_draw", None)
        if last is not None and value is last[0]:
            return self._draw_log_prob(*last[1:])
        t = value if self._unit else (value - self._center) / self._half
        t = t.clamp(-1 + self._eps, 1 - self._eps)
        x = torch.atanh(t)
        # log(1 - t^2) as log1p(-t) + log1p(t): accurate when |t| is close to 1
        lp = _normal_log_prob(x, self.loc, self.scale) - torch.log1p(-t) - torch.log1p(t)
        return _sum_event(lp if self._unit else lp - torch.log(self._half), self.event_dims)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The squashed location: ``loc`` mapped through tanh into ``[low, high]``."""
        return self._squash(self.loc)

    @property
    def mode(self) -> torch.Tensor:
        return self.deterministic_sample

    def expand(self, batch_shape: torch.Size | tuple, _instance: D.Distribution | None = None) -> TanhNormal:
        shape = torch.Size(batch_shape) + self.event_shape
        return TanhNormal(
            self.loc.expand(shape),
            self.scale.expand(shape),
            low=-1.0 if self._unit else self.low,
            high=1.0 if self._unit else self.high,
            event_dims=self.event_dims,
            safe_tanh=self.safe_tanh,
            validate_args=False,
        )


class TanhDelta(Delta):
    """A point mass at ``c + h * tanh(param)`` (``c``, ``h``: centre and half-width of ``[low, high]``).

    The deterministic counterpart of :class:`TanhNormal` (DDPG/TD3 actors). Inherits
    :class:`tdict.nn.Delta`'s log-prob: ``0`` where the value matches the mass over the whole event,
    ``-inf`` elsewhere, with the batch shape (TorchRL adds the ``tanh`` Jacobian to it; a point mass has
    probability one, so we do not).

    Args:
        param: the pre-``tanh`` location.
        low, high: the bounds (floats or tensors broadcasting with ``param``). Default ``-1, 1``.
        event_dims: trailing dims of ``param`` forming one event (default ``min(1, param.ndim)``).
        atol, rtol: tolerances of the equality test of ``log_prob``.
        safe: TorchRL's safe tanh (default ``True``): ``tanh(param)`` is kept within
            ``1 - resolution`` of ``+-1`` (``1e-6`` in float32), so the mass never sits exactly on a
            bound; ``False`` lets a saturated ``tanh`` reach it.

    Raises:
        ValueError: when ``low >= high`` somewhere, or ``event_dims`` is out of range.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import TanhDelta
        >>> d = TanhDelta(torch.tensor([0.0, 100.0]), low=0.0, high=2.0, safe=False)
        >>> d.mode
        tensor([1., 2.])
        >>> TanhDelta(torch.tensor([0.0, 100.0]), low=0.0, high=2.0).mode  # safe: just inside the bound
        tensor([1.0000, 2.0000])
        >>> d.log_prob(d.sample()), d.sample((3,)).shape
        (tensor(0.), torch.Size([3, 2]))
    """

    def __init__(
        self,
        param: torch.Tensor,
        low: torch.Tensor | float = -1.0,
        high: torch.Tensor | float = 1.0,
        event_dims: int | None = None,
        atol: float = 1e-6,
        rtol: float = 1e-6,
        safe: bool = True,
    ) -> None:
        if not isinstance(param, torch.Tensor):
            raise TypeError(f"TanhDelta: param must be a tensor, got {type(param).__name__}.")
        if not isinstance(safe, bool):
            raise TypeError(f"TanhDelta: safe must be a bool, got {type(safe).__name__}.")
        n_event = _event_dims(event_dims, param, "TanhDelta")
        self.low, self.high = _bounds(low, high, param, "TanhDelta")
        self.event_dims = n_event
        self.safe = safe
        t = torch.tanh(param)
        if safe:
            limit = 1.0 - torch.finfo(param.dtype).resolution
            t = t.clamp(-limit, limit)
        squashed = (self.high + self.low) / 2 + (self.high - self.low) / 2 * t
        split = squashed.ndim - n_event
        super().__init__(
            squashed, atol=atol, rtol=rtol, batch_shape=squashed.shape[:split], event_shape=squashed.shape[split:]
        )


class IndependentNormal(D.Independent):
    """A diagonal Normal whose last ``event_dim`` dims form one event (``log_prob`` has the batch shape).

    Args:
        loc, scale: the Normal's parameters.
        upscale: with ``tanh_loc=True``, ``loc`` is first mapped to ``upscale * tanh(loc / upscale)``.
        tanh_loc: see ``upscale``.
        event_dim: trailing dims that form one event (default 1).

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import IndependentNormal
        >>> d = IndependentNormal(torch.zeros(4, 3), torch.ones(4, 3))
        >>> d.log_prob(d.sample()).shape, d.deterministic_sample.shape
        (torch.Size([4]), torch.Size([4, 3]))
    """

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        upscale: float = 5.0,
        tanh_loc: bool = False,
        event_dim: int = 1,
        validate_args: bool | None = None,
    ) -> None:
        if tanh_loc:
            loc = upscale * torch.tanh(loc / upscale)
        if loc.shape != scale.shape:
            loc, scale = torch.broadcast_tensors(loc, scale)
        if not isinstance(event_dim, int) or not 0 <= event_dim <= loc.ndim:
            raise ValueError(
                f"IndependentNormal: event_dim must be an int in [0, {loc.ndim}] (loc has shape {tuple(loc.shape)}), got {event_dim!r}."
            )
        self.upscale, self.tanh_loc = upscale, tanh_loc
        super().__init__(D.Normal(loc, scale, validate_args=validate_args), event_dim, validate_args=validate_args)

    @property
    def loc(self) -> torch.Tensor:
        """The mean of the base normal."""
        return self.base_dist.loc

    @property
    def scale(self) -> torch.Tensor:
        """The standard deviation of the base normal."""
        return self.base_dist.scale

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The mean (``loc``)."""
        return self.base_dist.loc

    @property
    def mode(self) -> torch.Tensor:
        return self.base_dist.loc


class TruncatedNormal(D.Independent):
    """TorchRL's ``TruncatedNormal``: a normal restricted to ``[low, high]`` whose last dim is one event.

    The element-wise distribution is :class:`tdict.nn.TruncatedNormal` (inverse-CDF ``rsample``,
    ``log_prob`` ``-inf`` outside the bounds); here its last dim forms the event, so ``log_prob``
    and ``entropy`` have the batch shape, as in TorchRL. ``mode`` is ``loc`` clamped to the bounds,
    ``deterministic_sample`` the mean.

    Args:
        loc, scale: the parameters of the untruncated normal (at least one dim: the event).
        upscale: with ``tanh_loc=True``, ``loc`` is first mapped to ``upscale * tanh(loc / upscale)``
            (keeps it from drifting far outside the bounds). Default 5.0.
        low, high: the bounds (floats or tensors broadcasting with ``loc``). Default ``-1`` and ``1``.
        tanh_loc: see ``upscale``. Default ``False``.

    Raises:
        ValueError: when ``low >= high`` somewhere, or ``loc`` has no dim.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import TruncatedNormal
        >>> d = TruncatedNormal(torch.tensor([[0.0, 30.0]]), torch.ones(1, 2), tanh_loc=True, upscale=2.0)
        >>> d.loc
        tensor([[0., 2.]])
        >>> d.log_prob(d.sample()).shape, d.mode
        (torch.Size([1]), tensor([[0., 1.]]))
    """

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        upscale: torch.Tensor | float = 5.0,
        low: torch.Tensor | float = -1.0,
        high: torch.Tensor | float = 1.0,
        tanh_loc: bool = False,
    ) -> None:
        if not isinstance(loc, torch.Tensor) or loc.ndim == 0:
            raise ValueError(f"TruncatedNormal: loc must be a tensor with at least one dim (the event), got {loc!r}.")
        low_t, high_t = _bounds(low, high, loc, "TruncatedNormal")
        if tanh_loc:
            loc = upscale * torch.tanh(loc / upscale)
        self.upscale, self.tanh_loc = upscale, tanh_loc
        self.low, self.high = low_t, high_t
        super().__init__(tnn.TruncatedNormal(loc, scale, low_t, high_t), 1, validate_args=False)

    @property
    def loc(self) -> torch.Tensor:
        """The location of the normal before truncation."""
        return self.base_dist.loc

    @property
    def scale(self) -> torch.Tensor:
        """The scale of the normal before truncation."""
        return self.base_dist.scale

    @property
    def mode(self) -> torch.Tensor:
        return self.base_dist.mode

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The mean of the truncated distribution."""
        return self.base_dist.mean


class ReparamGradientStrategy(enum.Enum):
    """How :class:`OneHotCategorical.rsample` makes a one-hot sample differentiable (TorchRL's enum)."""

    PassThrough = 1  # the sample, with the gradient of the probabilities (straight-through)
    RelaxedOneHot = 2  # a Gumbel-softmax (RelaxedOneHotCategorical, temperature 1) draw, rounded to one-hot


class OneHotCategorical(tnn.OneHotCategorical):
    """:class:`tdict.nn.OneHotCategorical` with TorchRL's sample dtype and reparametrised samples.

    As TorchRL's, ``sample``, ``mode`` and ``deterministic_sample`` are int64 one-hot tensors (what a
    ``OneHot`` action spec holds: an env that checks its actions' dtype takes them as they are);
    ``log_prob`` reads int or float one-hot values.

    ``rsample`` returns float one-hot samples that carry a gradient: with ``PassThrough`` (default) the
    sample plus ``probs - probs.detach()`` (straight-through), with ``RelaxedOneHot`` a relaxed
    (Gumbel-softmax, temperature 1) draw whose values are set to the one-hot of its argmax. As in
    TorchRL ``has_rsample`` stays ``False``, so a probabilistic module calls ``sample``; call
    ``rsample`` yourself where the gradient is wanted.

    Args:
        logits, probs: as in ``torch.distributions.OneHotCategorical``.
        grad_method: a :class:`ReparamGradientStrategy`. Default ``PassThrough``.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import OneHotCategorical
        >>> logits = torch.zeros(3, requires_grad=True)
        >>> s = OneHotCategorical(logits=logits).rsample()
        >>> s.sum().item(), s.requires_grad
        (1.0, True)
        >>> OneHotCategorical(logits=torch.tensor([0.0, 2.0])).mode
        tensor([0, 1])
    """

    def __init__(
        self,
        logits: torch.Tensor | None = None,
        probs: torch.Tensor | None = None,
        grad_method: ReparamGradientStrategy = ReparamGradientStrategy.PassThrough,
        validate_args: bool | None = None,
    ) -> None:
        if not isinstance(grad_method, ReparamGradientStrategy):
            raise ValueError(
                f"OneHotCategorical: grad_method must be a ReparamGradientStrategy member, got {grad_method!r}."
            )
        self.grad_method = grad_method
        super().__init__(probs=probs, logits=logits, validate_args=validate_args)

    def sample(self, sample_shape: torch.Size | tuple = torch.Size()) -> torch.Tensor:
        return super().sample(sample_shape).long()

    @property
    def mode(self) -> torch.Tensor:
        return super().mode.long()

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode

    def rsample(self, sample_shape: torch.Size | tuple = torch.Size()) -> torch.Tensor:
        if self.grad_method is ReparamGradientStrategy.RelaxedOneHot:
            out = D.RelaxedOneHotCategorical(torch.tensor(1.0, device=self.logits.device), logits=self.logits).rsample(
                sample_shape
            )
            hard = torch.nn.functional.one_hot(out.argmax(-1), out.shape[-1]).to(out.dtype)
            return out + (hard - out).detach()
        probs = self.probs
        return self.sample(sample_shape).to(probs.dtype) + probs - probs.detach()


class MaskedCategorical(D.Categorical):
    """A categorical distribution over the actions allowed by a boolean ``mask`` (or listed by ``indices``).

    Masked-out actions get the logit ``neg_inf`` before normalisation. With the default
    ``neg_inf=-inf`` they have probability exactly zero: they are never sampled, never the mode,
    and ``log_prob`` of a masked action is ``-inf``. A finite ``neg_inf`` (e.g. ``-1e9``) makes that
    log-prob very negative but finite instead (useful when a masked action may be stored and its
    log-prob must not produce ``nan`` gradients). The entropy counts the allowed actions only.

    Sparse form (TorchRL's ``indices``): ``indices`` (``[*batch, k]``, integers) lists the allowed
    actions; the distribution is over those ``k`` entries (``logits`` gathered there), samples and
    the mode are the listed actions themselves, and ``log_prob`` of an action not listed is
    ``neg_inf``. Entries equal to ``padding_value`` are padding (never drawn), so rows may list
    different numbers of actions.

    Args:
        logits: unnormalised log-probabilities, ``[*batch, n]``.
        probs: probabilities instead of logits (exactly one of the two).
        mask: boolean tensor broadcasting to ``[*batch, n]``; ``True`` marks an allowed action.
            Every row needs at least one allowed action. Exclusive with ``indices``.
        indices: the allowed actions, ``[*batch, k]`` integer indices (see above).
        neg_inf: the logit given to masked actions (default ``-inf``).
        padding_value: the padding entry of ``indices`` (``None``: no padding). Ignored with ``mask``.
        use_cross_entropy: TorchRL computes ``log_prob`` through ``cross_entropy`` when ``True``
            (default); it is the same number, so both values give the same ``log_prob`` here.
        padding_side: ``"left"`` (default) or ``"right"``: where the padding of ``indices`` sits, kept
            for TorchRL's API (padding entries are recognised by their value, wherever they are).

    Raises:
        ValueError: when both or neither of ``logits``/``probs`` (or of ``mask``/``indices``) are
            given, ``mask`` is not boolean or does not broadcast, ``indices`` is not an integer
            tensor, or (with argument validation, torch's default) a row allows no action.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import MaskedCategorical
        >>> d = MaskedCategorical(logits=torch.zeros(2, 4),
        ...                       mask=torch.tensor([[True, False, True, False], [False, False, False, True]]))
        >>> d.probs
        tensor([[0.5000, 0.0000, 0.5000, 0.0000],
                [0.0000, 0.0000, 0.0000, 1.0000]])
        >>> d.log_prob(torch.tensor([1, 3]))
        tensor([-inf, 0.])
        >>> d.deterministic_sample.shape
        torch.Size([2])
        >>> sparse = MaskedCategorical(logits=torch.tensor([0.0, 1.0, 2.0, 3.0]), indices=torch.tensor([0, 2]))
        >>> sparse.log_prob(torch.tensor([2, 1])), sparse.mode
        (tensor([-0.1269,    -inf]), tensor(2))
    """

    def __init__(
        self,
        logits: torch.Tensor | None = None,
        probs: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        indices: torch.Tensor | None = None,
        neg_inf: float = float("-inf"),
        padding_value: int | None = None,
        use_cross_entropy: bool = True,
        padding_side: str = "left",
        validate_args: bool | None = None,
    ) -> None:
        if (logits is None) == (probs is None):
            raise ValueError("MaskedCategorical: pass exactly one of logits and probs.")
        if (mask is None) == (indices is None):
            raise ValueError(
                "MaskedCategorical: pass exactly one of mask (a boolean tensor, True for allowed actions) and indices."
            )
        if padding_side not in ("left", "right"):
            raise ValueError(f"MaskedCategorical: padding_side must be 'left' or 'right', got {padding_side!r}.")
        if not isinstance(use_cross_entropy, bool):
            raise TypeError(
                f"MaskedCategorical: use_cross_entropy must be a bool, got {type(use_cross_entropy).__name__}."
            )
        if logits is not None:
            raw = logits
        else:
            assert probs is not None  # exactly one of the two (checked above)
            raw = probs.log()
        self._indices = None
        if indices is not None:
            if not isinstance(indices, torch.Tensor) or indices.is_floating_point() or indices.dtype is torch.bool:
                raise ValueError(
                    f"MaskedCategorical: indices must be an integer tensor, got {getattr(indices, 'dtype', type(indices).__name__)}."
                )
            valid = torch.ones_like(indices, dtype=torch.bool) if padding_value is None else indices != padding_value
            safe_index = indices.masked_fill(~valid, 0)  # padding entries read a real logit, then get neg_inf
            try:
                raw = raw.expand(*indices.shape[:-1], raw.shape[-1]).gather(-1, safe_index)
            except RuntimeError:
                raise ValueError(
                    f"MaskedCategorical: indices of shape {tuple(indices.shape)} do not match the logits shape {tuple(raw.shape)}."
                ) from None
            self._indices, mask = indices, valid
        elif not isinstance(mask, torch.Tensor) or mask.dtype is not torch.bool:
            raise ValueError(
                f"MaskedCategorical: mask must be a bool tensor, got {getattr(mask, 'dtype', type(mask).__name__)}."
            )
        try:
            mask = mask.expand(raw.shape)
        except RuntimeError:
            raise ValueError(
                f"MaskedCategorical: mask of shape {tuple(mask.shape)} does not broadcast to the logits shape {tuple(raw.shape)}."
            ) from None
        validate = validate_args if validate_args is not None else D.Distribution._validate_args
        if validate and not bool(mask.any(-1).all()):
            raise ValueError(
                "MaskedCategorical: mask has a row with no allowed action (every row needs at least one True)."
            )
        self._valid = mask
        self.neg_inf = neg_inf
        self._padding_value = padding_value
        self.use_cross_entropy = use_cross_entropy
        self._padding_side = padding_side
        super().__init__(logits=raw.masked_fill(~mask, neg_inf), validate_args=validate_args)

    @property
    def mask(self) -> torch.Tensor:
        """The boolean mask (TorchRL: not available for the sparse ``indices`` form)."""
        if self._indices is not None:
            raise ValueError(
                "MaskedCategorical.mask: this distribution was built from indices (sparse), it has no dense mask."
            )
        return self._valid

    @property
    def padding_value(self) -> int:
        """The padding entry of ``indices`` (0 when none was given)."""
        return 0 if self._padding_value is None else self._padding_value

    @property
    def padding_side(self) -> str:
        """``"left"`` or ``"right"``, as given (padding is recognised by its value, wherever it is)."""
        return self._padding_side

    def _to_action(self, position: torch.Tensor) -> torch.Tensor:
        """Sparse form: a position among the ``k`` listed entries -> the listed action."""
        if self._indices is None:
            return position
        index = self._indices.expand(*position.shape, self._indices.shape[-1])
        return index.gather(-1, position.unsqueeze(-1)).squeeze(-1)

    def sample(self, sample_shape: torch.Size | tuple = torch.Size()) -> torch.Tensor:
        return self._to_action(super().sample(sample_shape))

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._indices is None:
            return super().log_prob(value)
        listed = (self._indices == value.unsqueeze(-1)) & self._valid
        position = listed.to(torch.uint8).argmax(-1)
        lp = super().log_prob(position)
        return lp.masked_fill(~listed.any(-1), self.neg_inf)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The most likely allowed action (:attr:`mode`)."""
        return self.mode

    @property
    def mode(self) -> torch.Tensor:
        return self._to_action(self.logits.argmax(-1))

    def entropy(self) -> torch.Tensor:
        # masked entries contribute 0 (their probability is 0), never -inf * 0 = nan
        p_log_p = (self.probs * self.logits).masked_fill(~self._valid, 0.0)
        return -p_log_p.sum(-1)

    def expand(self, batch_shape: torch.Size | tuple, _instance: D.Distribution | None = None) -> MaskedCategorical:
        shape = torch.Size(batch_shape) + self.logits.shape[-1:]
        new = type(self).__new__(type(self))
        new._indices = None if self._indices is None else self._indices.expand(shape)
        new._valid = self._valid.expand(shape)
        new.neg_inf, new._padding_value = self.neg_inf, self._padding_value
        new.use_cross_entropy, new._padding_side = self.use_cross_entropy, self._padding_side
        D.Categorical.__init__(new, logits=self.logits.expand(shape), validate_args=False)
        return new
