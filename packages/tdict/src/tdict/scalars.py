"""Python numbers as 0-d tensors made once, for arithmetic on small CPU tensors in hot paths.

``x * 2.0`` wraps ``2.0`` in a float64 tensor and converts it to ``x``'s dtype at every call:
on CPU (torch 2.13) that conversion costs about 2.5 us, as much as the product itself on a few
hundred elements. ``x * scalar_like(2.0, x)`` multiplies by a ``float32`` 0-d tensor made on the
first call for that number and reused: the same result (the number is rounded to ``float32``
once, as the conversion does), without the conversion.
"""

from __future__ import annotations

import torch

__all__ = ["scalar_like"]

_MADE: dict[float, torch.Tensor] = {}
_MAX_HELD = 4096  # distinct numbers kept; past it, new ones are made at each call


def scalar_like(value: float, like: torch.Tensor) -> torch.Tensor | float:
    """``value`` as a 0-d ``float32`` CPU tensor made once per number, for ``like`` a ``float32``
    CPU tensor; otherwise ``value`` itself: other dtypes (a 0-d tensor would round the number
    differently, or nothing is converted), other devices (measured on CPU only), tensor subclasses
    and code being compiled. The tensor is shared: read it, never write into it.

    Examples:
        >>> import torch
        >>> from tdict import scalar_like
        >>> x = torch.ones(3)
        >>> x * scalar_like(0.5, x)
        tensor([0.5000, 0.5000, 0.5000])
        >>> scalar_like(0.5, x) is scalar_like(0.5, x), scalar_like(0.5, x.double())
        (True, 0.5)
    """
    if (
        like.dtype is not torch.float32
        or type(like) is not torch.Tensor
        or like.device.type != "cpu"
        or torch.compiler.is_compiling()
    ):
        return value
    made = _MADE.get(value)
    if made is None:
        # outside inference mode: a shared constant must also serve calls that record gradients;
        # on the CPU whatever the default device (a `with torch.device("meta")` block, say)
        with torch.inference_mode(False):
            made = torch.tensor(value, dtype=torch.float32, device="cpu")
        if len(_MADE) < _MAX_HELD:
            _MADE[value] = made
    return made
