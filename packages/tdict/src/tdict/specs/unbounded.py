"""Unbounded: a tensor of a given shape and dtype, any value."""

from __future__ import annotations

from typing import Any

import torch

from .base import TensorSpec, _draw_on, _moved

__all__ = ["Unbounded"]


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
        return _moved(x, self.device)

    def _violation(self, val: Any) -> str | None:
        return self._check_tensor(val)
