"""Invertible element-wise transforms of scalar values (TorchRL's ``ValueTransform`` family).

A value transform maps raw returns or rewards to the space a critic predicts in (``forward``) and
back (``inverse``), e.g. to compress large returns: :class:`SymLogValueTransform` (DreamerV3),
:class:`SignedHyperbolicValueTransform` (R2D2, MuZero), :class:`IdentityValueTransform`, and
:class:`ComposeValueTransform` chaining them.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod

import torch
from torch import nn

from ..functional.dreamer import symexp, symlog
from ..functional.signed_hyperbolic import _check_epsilon, signed_hyperbolic, signed_parabolic

__all__ = [
    "ComposeValueTransform",
    "IdentityValueTransform",
    "SignedHyperbolicValueTransform",
    "SymLogValueTransform",
    "ValueTransform",
]

_Tensor = torch.Tensor


class ValueTransform(nn.Module, metaclass=ABCMeta):
    """Base of the value transforms: :meth:`forward` maps raw values to the transformed space,
    :meth:`inverse` maps back (both element-wise; subclasses implement the two).

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import ValueTransform
        >>> class Double(ValueTransform):
        ...     def forward(self, value):
        ...         return value * 2
        ...     def inverse(self, value):
        ...         return value / 2
        >>> t = Double()
        >>> t(torch.tensor([-1.0, 2.0])), t.inverse(torch.tensor([-2.0, 4.0]))
        (tensor([-2.,  4.]), tensor([-1.,  2.]))
    """

    @abstractmethod
    def forward(self, value: _Tensor) -> _Tensor:
        """Raw values to the transformed space."""

    @abstractmethod
    def inverse(self, value: _Tensor) -> _Tensor:
        """Transformed values back to raw values."""


class IdentityValueTransform(ValueTransform):
    """Values unchanged both ways.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import IdentityValueTransform
        >>> IdentityValueTransform()(torch.tensor([-1.0, 0.0, 1.0]))
        tensor([-1.,  0.,  1.])
    """

    def forward(self, value: _Tensor) -> _Tensor:
        return value

    def inverse(self, value: _Tensor) -> _Tensor:
        return value


class SymLogValueTransform(ValueTransform):
    """:func:`~rl_objectives.functional.symlog` forward, :func:`~rl_objectives.functional.symexp`
    inverse (DreamerV3, Hafner et al., 2023).

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import SymLogValueTransform
        >>> t = SymLogValueTransform()
        >>> y = t(torch.tensor([-100.0, 0.0, 100.0]))
        >>> y, t.inverse(y)
        (tensor([-4.6151,  0.0000,  4.6151]), tensor([-100.0000,    0.0000,  100.0000]))
    """

    def forward(self, value: _Tensor) -> _Tensor:
        return symlog(value)

    def inverse(self, value: _Tensor) -> _Tensor:
        return symexp(value)


class SignedHyperbolicValueTransform(ValueTransform):
    """:func:`~rl_objectives.functional.signed_hyperbolic` forward,
    :func:`~rl_objectives.functional.signed_parabolic` inverse (Pohlen et al., 2018).

    Args:
        epsilon: the positive linear term of the transform; default ``1e-3``.

    Raises:
        ValueError: ``epsilon`` is not positive.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import SignedHyperbolicValueTransform
        >>> t = SignedHyperbolicValueTransform(epsilon=1e-3)
        >>> y = t(torch.tensor([-100.0, 0.0, 100.0]))
        >>> y, t.inverse(y)
        (tensor([-9.1499,  0.0000,  9.1499]), tensor([-100.0000,    0.0000,  100.0000]))
    """

    def __init__(self, epsilon: float = 1e-3) -> None:
        super().__init__()
        _check_epsilon(type(self).__name__, epsilon)
        self.epsilon = float(epsilon)

    def forward(self, value: _Tensor) -> _Tensor:
        return signed_hyperbolic(value, self.epsilon)

    def inverse(self, value: _Tensor) -> _Tensor:
        return signed_parabolic(value, self.epsilon)

    def extra_repr(self) -> str:
        return f"epsilon={self.epsilon}"


class ComposeValueTransform(ValueTransform):
    """Transforms applied in order by :meth:`forward`, their inverses in reverse order by :meth:`inverse`.

    Args:
        *transforms: one or more :class:`ValueTransform` (kept in an ``nn.ModuleList``).

    Raises:
        ValueError: no transform. TypeError: an argument is not a :class:`ValueTransform`.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules import (ComposeValueTransform, SignedHyperbolicValueTransform,
        ...                                    SymLogValueTransform)
        >>> t = ComposeValueTransform(SignedHyperbolicValueTransform(), SymLogValueTransform())
        >>> y = t(torch.tensor([-100.0, 0.0, 100.0]))
        >>> y, t.inverse(y)
        (tensor([-2.3175,  0.0000,  2.3175]), tensor([-100.0000,    0.0000,  100.0000]))
    """

    def __init__(self, *transforms: ValueTransform) -> None:
        super().__init__()
        if not transforms:
            raise ValueError("ComposeValueTransform needs at least one transform.")
        for t in transforms:
            if not isinstance(t, ValueTransform):
                raise TypeError(f"ComposeValueTransform: every transform must be a ValueTransform, got {t!r}.")
        self.transforms = nn.ModuleList(transforms)

    def forward(self, value: _Tensor) -> _Tensor:
        for t in self.transforms:
            value = t(value)
        return value

    def inverse(self, value: _Tensor) -> _Tensor:
        for t in reversed(self.transforms):
            value = t.inverse(value)  # pyright: ignore[reportCallIssue]  (a ValueTransform, ModuleList types it as Module)
        return value
