"""Bounded: a box ``low <= x <= high`` of float or integer values."""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any, Iterator

import torch

from .base import TensorSpec, _draw_on, _leaf_device, _moved, _size, _spec_shape

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is new in 3.11

__all__ = ["Bounded", "BoundedContinuous", "BoundedDiscrete", "ContinuousBox"]


class ContinuousBox:
    """The box of a :class:`Bounded` spec: ``low`` and ``high`` tensors, unpackable as a ``(low, high)`` pair.

    A box read from ``spec.space`` writes through: assigning ``box.low`` / ``box.high`` (an in-place
    ``box.low += 1`` included) sets the spec's bound, as TorchRL's box does.

    Examples:
        >>> from tdict.specs import Bounded
        >>> spec = Bounded(-2.0, 2.0, shape=(1,))
        >>> low, high = spec.space
        >>> low, high
        (tensor([-2.]), tensor([2.]))
        >>> spec.space.low += 1
        >>> spec.low
        tensor([-1.])
    """

    __slots__ = ("_low", "_high", "_owner")

    def __init__(self, low: torch.Tensor, high: torch.Tensor, _owner: Any = None) -> None:
        self._low, self._high, self._owner = low, high, _owner

    @property
    def low(self) -> torch.Tensor:
        """The lower bound."""
        return self._low

    @low.setter
    def low(self, value: Any) -> None:
        self._set(value, self._high)

    @property
    def high(self) -> torch.Tensor:
        """The upper bound."""
        return self._high

    @high.setter
    def high(self, value: Any) -> None:
        self._set(self._low, value)

    def _set(self, low: Any, high: Any) -> None:
        owner = self._owner
        if owner is not None:
            owner._set_bounds(low, high)
            low, high = owner.low, owner.high
        self._low, self._high = torch.as_tensor(low), torch.as_tensor(high)

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter((self._low, self._high))

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> torch.Tensor:
        return (self._low, self._high)[i]

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, ContinuousBox):
            return False
        a, b = self, other
        return (
            a.low.shape == b.low.shape
            and a.high.shape == b.high.shape
            and a.low.dtype == b.low.dtype
            and bool(torch.equal(a.low, b.low.to(a.low.device)))
            and bool(torch.equal(a.high, b.high.to(a.high.device)))
        )

    def __ne__(self, other: Any) -> bool:
        return not self == other

    __hash__ = None  # pyright: ignore[reportAssignmentType]  (mutable)

    def __repr__(self) -> str:
        return f"ContinuousBox(low={self._low}, high={self._high})"


def _to_int(bound: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``bound`` cast to the integer ``dtype``: truncated toward zero, saturated at the dtype's range."""
    info = torch.iinfo(dtype)
    if not bound.is_floating_point():
        return bound.long().clamp(info.min, info.max).to(dtype)
    bound = bound.double().trunc()
    above, below = bound >= float(info.max), bound <= float(info.min)
    out = bound.masked_fill(above | below, 0).to(dtype)
    return out.masked_fill(above, info.max).masked_fill(below, info.min)


class Bounded(TensorSpec):
    """A box-bounded tensor: every element satisfies ``low <= x <= high`` (bounds broadcast to ``shape``).

    Args:
        low: lower bound, a scalar or a tensor broadcastable to ``shape``.
        high: upper bound, same rules.
        shape: the spec shape (default: the broadcast shape of the bounds).
        device: where generated values live.
        dtype: float (uniform sampling), integer (uniform over ``low..high`` inclusive) or bool (the
            bounds become bools, any nonzero one ``True``, as in TorchRL; prefer :class:`Binary`).

    Examples:
        >>> import torch
        >>> from tdict.specs import Bounded
        >>> spec = Bounded(low=-1.0, high=1.0, shape=(3,))
        >>> x = spec.rand((4,))
        >>> x.shape, spec.is_in(x), bool(((x >= -1) & (x <= 1)).all())
        (torch.Size([4, 3]), True, True)
        >>> spec.project(torch.tensor([-3.0, 0.5, 2.0]))
        tensor([-1.0000,  0.5000,  1.0000])
        >>> Bounded(0, 4, shape=(), dtype=torch.int64).is_in(torch.tensor(5))
        False
        >>> Bounded(0, torch.iinfo(torch.int64).max, shape=(), dtype=torch.int64).is_in(torch.tensor(5))
        True
    """

    _is_bounded = True
    dtype: torch.dtype  # always set (default: torch's default float dtype)
    _scale: torch.Tensor | None  # high - low (+ 1 for integers); None for a float box with an infinite bound

    def __init__(
        self, low: Any, high: Any, shape: Any = None, device: Any = None, dtype: torch.dtype | None = None
    ) -> None:
        if dtype is None:
            dtype = torch.get_default_dtype()
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"Bounded: dtype must be a torch.dtype, got {type(dtype).__name__} {dtype!r}")
        dev = _leaf_device(device)
        low, high = torch.as_tensor(low, device=dev), torch.as_tensor(high, device=dev)
        if dtype is torch.bool:  # as TorchRL: the bounds become bools (any nonzero bound is True)
            work = torch.bool
        elif dtype.is_floating_point:
            work = dtype
        elif low.is_floating_point() or high.is_floating_point():
            work = torch.float64
        else:  # integer bounds stay exact (int64's extremes do not survive a float64 round trip)
            work = torch.int64
        low, high = low.to(work), high.to(work)
        for name, bound in (("low", low), ("high", high)):
            if bound.is_floating_point() and bool(torch.isnan(bound).any()):
                raise ValueError(
                    f"Bounded: {name} must be a number (inf for no bound), got NaN in {name}={bound.tolist()}"
                )
        if shape is None:
            shape = torch.broadcast_shapes(low.shape, high.shape)
        shape = _spec_shape(shape, "Bounded")
        try:
            low, high = low.expand(shape).clone(), high.expand(shape).clone()
        except RuntimeError:
            raise ValueError(
                f"Bounded: bounds of shapes {tuple(low.shape)} and {tuple(high.shape)} do not broadcast to shape {tuple(shape)}"
            ) from None
        if (low > high).any():
            raise ValueError(f"Bounded: low must be <= high, got low={low} high={high}")
        if not dtype.is_floating_point:
            low, high = low.to(dtype), high.to(dtype)
        self.shape, self.device, self.dtype = shape, dev, dtype
        self._tensors = {"low": low, "high": high}
        self._finish()

    @property
    def low(self) -> torch.Tensor:
        """The lower bound of every element (a tensor of the spec's shape)."""
        return self._tensors["low"]

    @property
    def high(self) -> torch.Tensor:
        """The upper bound of every element (a tensor of the spec's shape)."""
        return self._tensors["high"]

    @property
    def space(self) -> "ContinuousBox":
        """The box ``(low, high)``; ``spec.space.low`` / ``spec.space.high`` as in TorchRL (assignable: see
        :class:`ContinuousBox`; assigning ``spec.space`` a box sets both bounds)."""
        # copies: an in-place edit of the box (``box.low += 1``) reaches the spec through the setter only,
        # never the bound tensors themselves, which expanded specs may share
        return ContinuousBox(self.low.clone(), self.high.clone(), self)

    @space.setter
    def space(self, box: Any) -> None:
        low, high = box
        self._set_bounds(low, high)

    def _set_bounds(self, low: Any, high: Any) -> None:
        """Replace the bounds (cast to the dtype, broadcast to the shape), checked before anything changes."""
        dev = self.device
        low, high = torch.as_tensor(low, device=dev), torch.as_tensor(high, device=dev)
        try:
            low, high = low.expand(self.shape).to(self.dtype).clone(), high.expand(self.shape).to(self.dtype).clone()
        except RuntimeError:
            raise ValueError(
                f"Bounded.space: bounds of shapes {tuple(low.shape)} and {tuple(high.shape)} do not broadcast to "
                f"the spec shape {tuple(self.shape)}"
            ) from None
        if bool((low > high).any()):
            raise ValueError(f"Bounded.space: low must be <= high, got low={low} high={high}")
        self._tensors = {**self._tensors, "low": low, "high": high}
        self._finish()

    def _finish(self) -> None:
        low, high = self._tensors["low"], self._tensors["high"]
        # one scalar box over every element: a single uniform_ / randint call per rand()
        self._uniform = self._randint = None
        if self.dtype.is_floating_point:
            self._finite = bool(torch.isfinite(low).all() and torch.isfinite(high).all())
            self._scale = (high - low) if self._finite else None
            if self._finite and low.numel():
                lo, hi = low.reshape(-1)[0], high.reshape(-1)[0]
                if bool((low == lo).all() and (high == hi).all()) and math.isfinite(float(hi) - float(lo)):
                    self._uniform = (float(lo), float(hi))
        else:
            self._finite = True
            self._scale = high.double() - low.double() + 1
            if low.numel():
                lo, hi = int(low.reshape(-1)[0]), int(high.reshape(-1)[0])
                top = 2 if self.dtype is torch.bool else torch.iinfo(self.dtype).max  # randint's bound must fit
                if bool((low == lo).all() and (high == hi).all()) and hi < top:
                    self._randint = (lo, hi + 1)

    def rand(self, shape: Any = (), *, generator: torch.Generator | None = None) -> torch.Tensor:
        """Uniform samples of shape ``shape + self.shape`` (from ``generator`` when given)."""
        full = self.shape if not shape and type(shape) is not int else _size(shape) + self.shape
        device, on = self.device, _draw_on(self.device, generator)
        uniform = self._uniform
        if uniform is not None:  # uniform on [low, high), like the general path below
            x = torch.empty(full, dtype=self.dtype, device=on).uniform_(uniform[0], uniform[1], generator=generator)
            return x if generator is None else _moved(x, device)
        randint = self._randint
        if randint is not None:  # uniform on low..high inclusive
            x = torch.randint(randint[0], randint[1], full, dtype=self.dtype, device=on, generator=generator)
            return x if generator is None else _moved(x, device)
        low = self._tensors["low"]
        if self.dtype.is_floating_point:
            if self._finite:
                assert self._scale is not None  # set for finite boxes
                u = torch.rand(full, dtype=self.dtype, device=on, generator=generator)
                return _moved(u, device).mul_(self._scale).add_(low)
            high = self._tensors["high"]
            # unbounded sides: a normal sample shifted to the finite bound, clipped into the box
            x = _moved(torch.randn(full, dtype=self.dtype, device=on, generator=generator), device)
            x = torch.where(torch.isfinite(low), low + x.abs(), x)
            x = torch.where(torch.isfinite(high) & ~torch.isfinite(low), high - x.abs(), x)
            both = torch.isfinite(low) & torch.isfinite(high)
            u = _moved(torch.rand(full, dtype=self.dtype, device=on, generator=generator), device)
            x = torch.where(both, low + u * (high - low).nan_to_num(0.0), x)
            return torch.minimum(torch.maximum(x, low), high)
        assert self._scale is not None  # always set for integer dtypes
        u = _moved(torch.rand(full, dtype=torch.float64, device=on, generator=generator), device)
        out = (u * self._scale).floor_().to(self.dtype) + low
        return torch.minimum(out, self._tensors["high"])

    def _violation(self, val: Any) -> str | None:
        why = self._check_tensor(val)
        if why is not None:
            return why
        low, high = self._tensors["low"], self._tensors["high"]
        below = val < low
        if below.any():
            return f"low bound violated: value {val[below].flatten()[:5].tolist()} < low {low.expand_as(val)[below].flatten()[:5].tolist()}"
        above = val > high
        if above.any():
            return f"high bound violated: value {val[above].flatten()[:5].tolist()} > high {high.expand_as(val)[above].flatten()[:5].tolist()}"
        if self.dtype.is_floating_point and torch.isnan(val).any():
            return "value contains NaN"
        return None

    def _project(self, val: torch.Tensor) -> torch.Tensor:
        low, high = self._tensors["low"], self._tensors["high"]
        if not self.dtype.is_floating_point:
            val = val.round() if val.is_floating_point() else val
        val = val.to(dtype=self.dtype, device=low.device)
        return torch.minimum(torch.maximum(val, low), high)

    def _cast(self, dtype: torch.dtype) -> Self:
        """The box with its bounds cast to ``dtype``, as TorchRL's ``to(dtype)``.

        Float bounds become integers by truncation toward zero (``-0.5..1.5`` gives ``0..1``); a bound
        beyond the integer dtype's range (an infinite one included) becomes that range's end.

        A bool cast makes every nonzero bound ``True``, as TorchRL's.

        Examples:
            >>> import torch
            >>> from tdict.specs import Bounded
            >>> spec = Bounded(-0.5, 1.5, shape=(2,)).to(torch.int64)
            >>> spec.dtype, spec.low.tolist(), spec.high.tolist()
            (torch.int64, [0, 0], [1, 1])
            >>> Bounded(0, 5, shape=(), dtype=torch.int64).to(torch.float64).high
            tensor(5., dtype=torch.float64)
        """
        low, high = self._tensors["low"], self._tensors["high"]
        if dtype is torch.bool:
            low, high = low.to(dtype), high.to(dtype)
        elif dtype.is_floating_point or dtype.is_complex:
            low, high = low.to(dtype), high.to(dtype)
        else:
            low, high = _to_int(low, dtype), _to_int(high, dtype)
        out = copy.copy(self)
        out.dtype, out._tensors = dtype, {"low": low, "high": high}
        out._finish()
        return out

    def cardinality(self) -> int:
        """The number of integer values in the box (integer dtypes only).

        Raises:
            NotImplementedError: the dtype is floating point.
        """
        if self.dtype.is_floating_point:
            raise NotImplementedError("Bounded: a float box is not discrete")
        return int((self.high.long() - self.low.long() + 1).prod())

    def _repr_extra(self) -> str:
        return f", low={self.low}, high={self.high}"

    def __eq__(self, other: Any) -> bool:
        """Equal to any spec of the Bounded family (:class:`BoundedContinuous`, :class:`BoundedDiscrete`)
        with the same shape, dtype, device and bounds."""
        if isinstance(other, Bounded):
            return self._equal_content(other)
        return super().__eq__(other)

    __hash__ = None  # pyright: ignore[reportAssignmentType]  (mutable, like TensorSpec)


class BoundedContinuous(Bounded):
    """A :class:`Bounded` spec of floating-point values (TorchRL's name; default dtype: torch's default float).

    It equals a :class:`Bounded` spec of the same shape, dtype, device and bounds.

    Examples:
        >>> import torch
        >>> from tdict.specs import Bounded, BoundedContinuous
        >>> spec = BoundedContinuous(-1.0, 1.0, shape=(3,))
        >>> spec.rand().dtype, spec == Bounded(-1.0, 1.0, shape=(3,)), spec.domain
        (torch.float32, True, 'continuous')
    """


class BoundedDiscrete(Bounded):
    """A :class:`Bounded` spec of integer values (TorchRL's name; default dtype ``torch.int64``).

    It equals a :class:`Bounded` spec of the same shape, dtype, device and bounds.

    Examples:
        >>> import torch
        >>> from tdict.specs import Bounded, BoundedDiscrete
        >>> spec = BoundedDiscrete(0, 4, shape=(2,))
        >>> spec.rand().dtype, spec == Bounded(0, 4, shape=(2,), dtype=torch.int64), spec.domain
        (torch.int64, True, 'discrete')
    """

    def __init__(
        self, low: Any, high: Any, shape: Any = None, device: Any = None, dtype: torch.dtype | None = torch.int64
    ) -> None:
        super().__init__(low, high, shape, device, dtype if dtype is not None else torch.int64)
