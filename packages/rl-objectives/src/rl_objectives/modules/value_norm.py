"""Value normalisers (TorchRL's ``ValueNorm`` family): running statistics of the value targets that
put a critic's regression target, or an advantage, on a fixed scale.

- :class:`PopArtValueNorm`: debiased exponential moving averages of the mean and the mean of squares
  (van Hasselt et al., 2016/2019, PopArt; MAPPO's value normaliser), optionally rescaling the critic's
  output layer so its unnormalised outputs are preserved when the statistics move.
- :class:`RunningValueNorm`: the exact mean and (population) variance of every target seen.
- :class:`PercentileValueNorm`: moving averages of a low and a high quantile; the scale is their
  span, at least ``min_scale`` (DreamerV3's return normalisation).

Every normaliser keeps statistics of ``shape`` (the per-element value shape) and reduces the other,
leading dims of what :meth:`ValueNorm.update` gets. This library's values are batch-shaped, with no
trailing singleton dim (``[B, T]``, where TorchRL has ``[B, T, 1]``): a normaliser of one element
(the default ``shape=1``) reduces every dim of any tensor, which is what TorchRL does to ``[B, T, 1]``.
The losses take them as ``advantage_norm=`` (A2C, PPO: the advantage is divided by :meth:`ValueNorm.scale`)
and ``value_norm=`` (:class:`~rl_objectives.MAPPOLoss`, :class:`~rl_objectives.IPPOLoss`: the critic
loss is computed on normalised targets and predictions).
"""

from __future__ import annotations

import math
import warnings
from abc import ABCMeta, abstractmethod
from typing import Any

import torch
from tdict.validation import check_positive
from torch import nn

__all__ = ["PercentileValueNorm", "PopArtValueNorm", "RunningValueNorm", "ValueNorm"]

_Tensor = torch.Tensor


def _check_unit(owner: str, name: str, value: Any, *, low_open: bool = False, high_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}: {name} must be a number, got {type(value).__name__}.")
    ok = (0 < value if low_open else 0 <= value) and (value < 1 if high_open else value <= 1)
    if not ok:
        interval = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise ValueError(f"{owner}: {name} must be in {interval}, got {value!r}.")
    return float(value)


class ValueNorm(nn.Module, metaclass=ABCMeta):
    """Base of the value normalisers: :meth:`update` folds value targets into running statistics,
    :meth:`normalize` / :meth:`denormalize` map to and from the normalised scale, and :meth:`scale`
    is the divisor alone (for advantages, already centred by the baseline).

    Subclasses implement :meth:`update`, :meth:`normalize`, :meth:`denormalize` and :meth:`scale`.
    As in TorchRL 0.14, a subclass without :meth:`scale` still builds (with a ``DeprecationWarning``)
    and raises ``NotImplementedError`` when it is called.

    Keyword Args:
        shape: the per-element shape of the statistics (an int or a tuple of positive ints); default
            ``1``. :meth:`update` reduces the leading dims of its input, whose trailing dims must be
            ``shape``, or, for a one-element ``shape``, every dim (batch-shaped values ``[B, T]``).
        epsilon: the floor of the variance (and of the debiasing term of PopArt); default ``1e-5``.
        device: where the statistics live.

    Raises:
        ValueError: a bad ``shape`` or a non-positive ``epsilon``; at :meth:`update`, a tensor whose
            trailing dims are not ``shape``.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import ValueNorm
        >>> class Halve(ValueNorm):
        ...     def update(self, value_target):
        ...         pass
        ...     def normalize(self, value_target):
        ...         return value_target / 2
        ...     def denormalize(self, normalised_value):
        ...         return normalised_value * 2
        ...     def scale(self):
        ...         return torch.full(self.shape, 2.0)
        >>> Halve().normalize(torch.tensor([4.0, 6.0]))
        tensor([2., 3.])
    """

    shape: tuple[int, ...]

    def __init__(
        self,
        *,
        shape: int | tuple[int, ...] = 1,
        epsilon: float = 1e-5,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        dims = (shape,) if isinstance(shape, int) and not isinstance(shape, bool) else shape
        if not isinstance(dims, (tuple, list, torch.Size)) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims
        ):
            raise ValueError(f"{owner}: shape must be a positive int or a tuple of positive ints, got {shape!r}.")
        self.shape = tuple(int(d) for d in dims)
        self.epsilon = float(check_positive(owner, "epsilon", epsilon))
        self._device = None if device is None else torch.device(device)
        if type(self).scale is ValueNorm.scale:
            warnings.warn(
                f"{owner} does not implement scale(); implement it (TorchRL makes it abstract in v0.16).",
                DeprecationWarning,
                stacklevel=2,
            )

    @abstractmethod
    def update(self, value_target: _Tensor) -> None:
        """Fold a batch of value targets into the statistics (no gradient)."""

    @abstractmethod
    def normalize(self, value_target: _Tensor) -> _Tensor:
        """``value_target`` on the normalised scale (differentiable in its input)."""

    @abstractmethod
    def denormalize(self, normalised_value: _Tensor) -> _Tensor:
        """The inverse of :meth:`normalize`."""

    def scale(self) -> _Tensor:
        """The divisor :meth:`normalize` applies, shaped ``shape`` (for quantities not to be re-centred)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement scale().")

    # ------------------------------------------------------------------ helpers
    def _zeros(self) -> _Tensor:
        return torch.zeros(self.shape, device=self._device)

    def _samples(self, value_target: _Tensor) -> _Tensor:
        """``value_target`` (detached) as ``[n, *shape]``: one row per sample."""
        x = value_target.detach()
        k = len(self.shape)
        if x.ndim >= k and tuple(x.shape[x.ndim - k :]) == self.shape:
            return x.reshape(-1, *self.shape)
        if math.prod(self.shape) == 1:
            return x.reshape(-1, *self.shape)
        raise ValueError(
            f"{type(self).__name__}: built with shape={self.shape}, but the value target's trailing dims are "
            f"{tuple(x.shape[max(x.ndim - k, 0) :])} (shape {tuple(x.shape)})."
        )

    def _check_samples(self, samples: _Tensor) -> None:
        if samples.shape[0] == 0:
            raise ValueError(f"{type(self).__name__}: update() got an empty value target.")

    def extra_repr(self) -> str:
        return f"shape={self.shape}, epsilon={self.epsilon}"


class PopArtValueNorm(ValueNorm):
    """Debiased exponential moving averages of the value target's mean and mean of squares (PopArt).

    After ``n`` updates with batch means ``m_1..m_n`` the statistics are
    ``mean = sum_i beta^(n-i) (1 - beta) m_i / (1 - beta^n)`` (and likewise the mean of squares): the
    zero initialisation is divided out, so the first update gives the batch's own statistics. The
    variance ``mean_sq - mean^2`` is floored at ``epsilon``, as is the debiasing term.

    With ``output_layer`` (the critic's last ``nn.Linear``, whose outputs are normalised values),
    :meth:`update` also rescales that layer so that ``denormalize(layer(x))`` is unchanged by the
    update ("preserving outputs precisely", van Hasselt et al., 2016): with the old and new
    statistics ``(mu, sigma)`` and ``(mu', sigma')``, ``W <- W * sigma / sigma'`` and
    ``b <- (sigma * b + mu - mu') / sigma'``. TorchRL's normaliser has no such option (it only tracks
    the statistics); without ``output_layer`` this one is TorchRL's.

    Keyword Args:
        shape: the per-element shape (see :class:`ValueNorm`); default ``1``.
        beta: the decay of the averages, in ``[0, 1)``; default ``0.99999`` (MAPPO's).
        epsilon: the variance and debiasing floor; default ``1e-5``.
        device: where the statistics live.
        output_layer: an ``nn.Linear`` with a bias and ``prod(shape)`` outputs, rescaled at every
            update; ``None`` (default) leaves the network alone. Not registered as a submodule (the
            critic owns it).

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import PopArtValueNorm
        >>> norm = PopArtValueNorm(beta=0.9)
        >>> norm.update(torch.tensor([[1.0, 3.0], [1.0, 3.0]]))   # batch-shaped targets [B, T]
        >>> norm.scale(), norm.normalize(torch.tensor([3.0]))
        (tensor([1.]), tensor([1.]))
        >>> layer = torch.nn.Linear(2, 1)
        >>> norm = PopArtValueNorm(beta=0.5, output_layer=layer)
        >>> x = torch.randn(4, 2)
        >>> before = norm.denormalize(layer(x))
        >>> norm.update(torch.tensor([10.0, 30.0]))
        >>> torch.allclose(norm.denormalize(layer(x)), before, atol=1e-5)
        True
    """

    running_mean: _Tensor
    running_mean_sq: _Tensor
    debiasing_term: _Tensor
    output_layer: nn.Linear | None  # in __dict__, not a submodule

    def __init__(
        self,
        *,
        shape: int | tuple[int, ...] = 1,
        beta: float = 0.99999,
        epsilon: float = 1e-5,
        device: torch.device | str | None = None,
        output_layer: nn.Linear | None = None,
    ) -> None:
        super().__init__(shape=shape, epsilon=epsilon, device=device)
        owner = type(self).__name__
        self.beta = _check_unit(owner, "beta", beta, high_open=True)
        if output_layer is not None:
            if not isinstance(output_layer, nn.Linear) or output_layer.bias is None:
                raise TypeError(f"{owner}: output_layer must be an nn.Linear with a bias, got {output_layer!r}.")
            if output_layer.out_features != math.prod(self.shape):
                raise ValueError(
                    f"{owner}: output_layer has {output_layer.out_features} outputs, the statistics "
                    f"{math.prod(self.shape)} (shape={self.shape})."
                )
        object.__setattr__(self, "output_layer", output_layer)  # owned by the critic, not a submodule
        self.register_buffer("running_mean", self._zeros())
        self.register_buffer("running_mean_sq", self._zeros())
        self.register_buffer("debiasing_term", torch.zeros((), device=self._device))

    def _stats(self) -> tuple[_Tensor, _Tensor]:
        """The debiased ``(mean, std)``."""
        debias = self.debiasing_term.clamp_min(self.epsilon)
        mean = self.running_mean / debias
        var = (self.running_mean_sq / debias - mean.square()).clamp_min(self.epsilon)
        return mean, var.sqrt()

    @torch.no_grad()
    def update(self, value_target: _Tensor) -> None:
        """Fold the batch's mean and mean of squares into the averages (and rescale ``output_layer``)."""
        samples = self._samples(value_target)
        self._check_samples(samples)
        layer = self.output_layer
        old = self._stats() if layer is not None else None
        dtype = self.running_mean.dtype
        self.running_mean.lerp_(samples.mean(0).to(dtype), 1.0 - self.beta)
        self.running_mean_sq.lerp_(samples.square().mean(0).to(dtype), 1.0 - self.beta)
        self.debiasing_term.mul_(self.beta).add_(1.0 - self.beta)
        if layer is not None and old is not None:
            self._preserve_outputs(layer, *old, *self._stats())

    @staticmethod
    def _preserve_outputs(layer: nn.Linear, mean: _Tensor, std: _Tensor, new_mean: _Tensor, new_std: _Tensor) -> None:
        w, b = layer.weight, layer.bias
        assert b is not None  # checked at construction
        ratio = (std / new_std).reshape(-1).to(w)
        w.mul_(ratio.unsqueeze(-1))
        b.copy_(((std.reshape(-1) * b + mean.reshape(-1) - new_mean.reshape(-1)) / new_std.reshape(-1)).to(b))

    def normalize(self, value_target: _Tensor) -> _Tensor:
        mean, std = self._stats()
        return (value_target - mean) / std

    def denormalize(self, normalised_value: _Tensor) -> _Tensor:
        mean, std = self._stats()
        return normalised_value * std + mean

    def scale(self) -> _Tensor:
        return self._stats()[1]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, beta={self.beta}"


class RunningValueNorm(ValueNorm):
    """The exact running mean and population variance of every value target seen (no decay).

    Batches are merged with Chan et al.'s parallel update: with ``n`` samples so far (mean ``mu``,
    sum of squared deviations ``M2``) and a batch of ``k`` (mean ``m``, population variance ``v``),
    ``mu <- mu + (m - mu) k / (n + k)`` and ``M2 <- M2 + v k + (m - mu)^2 n k / (n + k)``; the
    variance is ``M2 / n`` floored at ``epsilon`` (before any update the statistics are 0 and 1).

    Keyword Args:
        shape: the per-element shape (see :class:`ValueNorm`); default ``1``.
        epsilon: the variance floor; default ``1e-5``.
        device: where the statistics live.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import RunningValueNorm
        >>> norm = RunningValueNorm()
        >>> norm.update(torch.tensor([1.0, 2.0]))
        >>> norm.update(torch.tensor([[3.0], [4.0]]))
        >>> norm.mean, norm.scale() ** 2    # of [1, 2, 3, 4]
        (tensor([2.5000]), tensor([1.2500]))
    """

    mean: _Tensor
    m2: _Tensor
    count: _Tensor

    def __init__(
        self,
        *,
        shape: int | tuple[int, ...] = 1,
        epsilon: float = 1e-5,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(shape=shape, epsilon=epsilon, device=device)
        self.register_buffer("mean", self._zeros())
        self.register_buffer("m2", self._zeros())
        self.register_buffer("count", torch.zeros((), device=self._device))

    @torch.no_grad()
    def update(self, value_target: _Tensor) -> None:
        """Merge the batch's count, mean and variance into the statistics."""
        samples = self._samples(value_target)
        self._check_samples(samples)
        k = float(samples.shape[0])
        batch_mean = samples.mean(0).to(self.mean)
        batch_var = samples.var(0, correction=0).to(self.mean)
        total = self.count + k
        delta = batch_mean - self.mean
        self.m2.add_(batch_var * k + delta.square() * (self.count * k / total))
        self.mean.add_(delta * (k / total))
        self.count.copy_(total)

    def _std(self) -> _Tensor:
        return (self.m2 / self.count.clamp_min(1.0)).clamp_min(self.epsilon).sqrt()

    def normalize(self, value_target: _Tensor) -> _Tensor:
        return (value_target - self.mean) / self._std()

    def denormalize(self, normalised_value: _Tensor) -> _Tensor:
        return normalised_value * self._std() + self.mean

    def scale(self) -> _Tensor:
        return self._std()


class PercentileValueNorm(ValueNorm):
    """Moving averages of a low and a high quantile of the value targets (DreamerV3's return scale).

    At each update ``low <- low + rate * (q_low(batch) - low)`` and likewise ``high`` (both start at
    0); ``scale = max(high - low, min_scale)``, so large returns are scaled down and small, noisy
    ones never amplified. :meth:`normalize` divides by the scale, and with ``center=True`` first
    subtracts ``low`` (the tracked range then maps to ``[0, 1]``).

    Keyword Args:
        shape: the per-element shape (see :class:`ValueNorm`); default ``1``.
        quantiles: ``(low, high)`` with ``0 <= low < high <= 1``; default ``(0.05, 0.95)``.
        rate: the averages' step towards the batch quantiles, in ``[0, 1]``; default ``0.01``.
        min_scale: the positive floor of the scale; default ``1.0``.
        center: subtract ``low`` in :meth:`normalize`; default ``False`` (scale only, for advantages).
        epsilon: accepted for the common signature (``min_scale`` bounds the divisor).
        device: where the statistics live.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import PercentileValueNorm
        >>> norm = PercentileValueNorm(rate=1.0)
        >>> norm.update(torch.linspace(0.0, 100.0, 101))
        >>> norm.scale(), norm.normalize(torch.tensor([45.0]))
        (tensor([90.]), tensor([0.5000]))
    """

    low: _Tensor
    high: _Tensor

    def __init__(
        self,
        *,
        shape: int | tuple[int, ...] = 1,
        quantiles: tuple[float, float] = (0.05, 0.95),
        rate: float = 0.01,
        min_scale: float = 1.0,
        center: bool = False,
        epsilon: float = 1e-5,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(shape=shape, epsilon=epsilon, device=device)
        owner = type(self).__name__
        if not isinstance(quantiles, (tuple, list)) or len(quantiles) != 2:
            raise ValueError(f"{owner}: quantiles must be a pair (low, high), got {quantiles!r}.")
        low, high = (_check_unit(owner, "quantiles", q) for q in quantiles)
        if not low < high:
            raise ValueError(f"{owner}: quantiles must satisfy 0 <= low < high <= 1, got {tuple(quantiles)}.")
        self.quantiles = (low, high)
        self.rate = _check_unit(owner, "rate", rate)
        self.min_scale = float(check_positive(owner, "min_scale", min_scale))
        if not isinstance(center, bool):
            raise TypeError(f"{owner}: center must be a bool, got {type(center).__name__}.")
        self.center = center
        self.register_buffer("low", self._zeros())
        self.register_buffer("high", self._zeros())

    @torch.no_grad()
    def update(self, value_target: _Tensor) -> None:
        """Move the averages towards the batch's quantiles (over the leading dims)."""
        samples = self._samples(value_target)
        self._check_samples(samples)
        samples = samples.to(self.low.dtype)
        q = torch.tensor(self.quantiles, dtype=samples.dtype, device=samples.device)
        batch_low, batch_high = torch.quantile(samples, q, dim=0)
        self.low.lerp_(batch_low.to(self.low), self.rate)
        self.high.lerp_(batch_high.to(self.high), self.rate)

    def normalize(self, value_target: _Tensor) -> _Tensor:
        shifted = value_target - self.low if self.center else value_target
        return shifted / self.scale()

    def denormalize(self, normalised_value: _Tensor) -> _Tensor:
        out = normalised_value * self.scale()
        return out + self.low if self.center else out

    def scale(self) -> _Tensor:
        return (self.high - self.low).clamp_min(self.min_scale)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, quantiles={self.quantiles}, rate={self.rate}, min_scale={self.min_scale}, center={self.center}"
