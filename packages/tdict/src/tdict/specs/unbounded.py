"""Unbounded: a tensor of a given shape and dtype, any value."""

from __future__ import annotations

from typing import Any

import torch

from .base import TensorSpec, _draw_on, _moved
from .bounded import ContinuousBox


def _dtype_range(dtype: torch.dtype) -> tuple[Any, Any]:
    """The smallest and largest value of ``dtype``."""
    if dtype is torch.bool:
        return False, True
    info = torch.finfo(dtype) if (dtype.is_floating_point or dtype.is_complex) else torch.iinfo(dtype)
    return info.min, info.max


__all__ = ["Unbounded", "UnboundedContinuous", "UnboundedDiscrete"]


class Unbounded(TensorSpec):
    """A tensor of any value: only its shape, dtype and device are checked.

    ``rand`` draws a standard normal for float dtypes and integers in ``[-100, 100)`` otherwise
    (``{False, True}`` for bool).

    Args:
        shape: the spec shape (default ``()``).
        device: where generated values live.
        dtype: the dtype (default: torch's default float dtype).

    Examples:
        >>> import torch
        >>> from tdict.specs import Unbounded
        >>> spec = Unbounded(shape=(2,))
        >>> spec.rand((5,)).shape, spec.zero().tolist()
        (torch.Size([5, 2]), [0.0, 0.0])
        >>> spec.is_in(torch.zeros(2, dtype=torch.int64))
        False
    """

    dtype: torch.dtype  # always set (default: torch's default float dtype)

    def __init__(self, shape: Any = None, device: Any = None, dtype: torch.dtype | None = None) -> None:
        super().__init__(shape, device, dtype if dtype is not None else torch.get_default_dtype())

    def _finish(self) -> None:
        # the sampler is chosen once, not per call: 0 normal, 1 bool, 2 integers in [_low, 100)
        dt = self.dtype
        self._kind = 0 if (dt.is_floating_point or dt.is_complex) else (1 if dt is torch.bool else 2)
        self._low = -100 if dt.is_signed else 0

    def rand(self, shape: Any = (), *, generator: torch.Generator | None = None) -> torch.Tensor:
        full, on = self._full(shape), _draw_on(self.device, generator)
        kind = self._kind
        if kind == 0:
            x = torch.randn(full, dtype=self.dtype, device=on, generator=generator)
        elif kind == 1:
            x = torch.randint(0, 2, full, device=on, generator=generator).bool()
        else:
            x = torch.randint(self._low, 100, full, dtype=self.dtype, device=on, generator=generator)
        return x if generator is None else _moved(x, self.device)

    def _violation(self, val: Any) -> str | None:
        return self._check_tensor(val)

    @property
    def space(self) -> ContinuousBox:
        """The dtype's whole range as a box: ``low``/``high`` filled with its min/max (as in TorchRL).

        Examples:
            >>> import torch
            >>> from tdict.specs import Unbounded
            >>> Unbounded(shape=(2,), dtype=torch.int8).space.high.tolist()
            [127, 127]
        """
        low, high = _dtype_range(self.dtype)
        shape = torch.Size(max(s, 1) for s in self.shape)  # -1 (heterogeneous) dims count as one
        return ContinuousBox(
            torch.full(shape, low, dtype=self.dtype, device=self.device),
            torch.full(shape, high, dtype=self.dtype, device=self.device),
        )

    def cardinality(self) -> int:
        """Raises ``NotImplementedError``: an unbounded spec has no finite set of values."""
        raise NotImplementedError("`cardinality` is not implemented for Unbounded specs.")

    def __eq__(self, other: Any) -> bool:
        """Equal to any spec of the Unbounded family (:class:`UnboundedContinuous`, :class:`UnboundedDiscrete`)
        with the same shape, dtype and device, and to a :class:`~tdict.specs.Bounded` spanning the dtype's range."""
        if isinstance(other, Unbounded):
            return self.shape == other.shape and self.dtype == other.dtype and self.device == other.device
        if getattr(other, "_is_bounded", False):
            if self.shape != other.shape or self.dtype != other.dtype or self.device != other.device:
                return False
            low, high = _dtype_range(self.dtype)
            return bool((other.low == low).all() and (other.high == high).all())
        return False

    __hash__ = None  # pyright: ignore[reportAssignmentType]  (mutable, like TensorSpec)


class UnboundedContinuous(Unbounded):
    """An :class:`Unbounded` spec of floating-point values (TorchRL's name; default dtype: torch's default float).

    It equals an :class:`Unbounded` spec of the same shape, dtype and device.

    Examples:
        >>> import torch
        >>> from tdict.specs import Unbounded, UnboundedContinuous
        >>> spec = UnboundedContinuous(shape=(3,))
        >>> spec.rand().dtype, spec == Unbounded(shape=(3,)), spec.domain
        (torch.float32, True, 'continuous')
    """


class UnboundedDiscrete(Unbounded):
    """An :class:`Unbounded` spec of integer values (TorchRL's name; default dtype ``torch.int64``).

    ``rand`` draws integers in ``[-100, 100)`` (``[0, 100)`` for unsigned dtypes). It equals an
    :class:`Unbounded` spec of the same shape, dtype and device.

    Examples:
        >>> import torch
        >>> from tdict.specs import Unbounded, UnboundedDiscrete
        >>> spec = UnboundedDiscrete(shape=(2,))
        >>> spec.rand().dtype, spec == Unbounded(shape=(2,), dtype=torch.int64), spec.domain
        (torch.int64, True, 'discrete')
    """

    def __init__(self, shape: Any = None, device: Any = None, dtype: torch.dtype | None = torch.int64) -> None:
        super().__init__(shape, device, dtype if dtype is not None else torch.int64)
