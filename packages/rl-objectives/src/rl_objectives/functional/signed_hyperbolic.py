"""The signed-hyperbolic value transform and its inverse (Pohlen et al., 2018, "Observe and Look
Further"; used by R2D2, MuZero and Muesli), TorchRL's ``signed_hyperbolic`` / ``signed_parabolic``.

``h(x) = sign(x) * (sqrt(|x| + 1) - 1) + epsilon * x`` compresses large values roughly like a square
root while the linear term keeps the inverse Lipschitz. The inverse solves the quadratic in
``sqrt(|x| + 1)``:

    h^-1(y) = sign(y) * (((sqrt(1 + 4 * epsilon * (|y| + 1 + epsilon)) - 1) / (2 * epsilon))^2 - 1)

computed here in the cancellation-free form ``2 * (|y| + 1 + epsilon) / (sqrt(...) + 1)`` of the
inner fraction (the same number; no ``1 - 1`` loss of digits for small ``epsilon``).
"""

from __future__ import annotations

import torch

__all__ = ["signed_hyperbolic", "signed_parabolic"]


def _check_epsilon(name: str, epsilon: float) -> None:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not epsilon > 0:
        raise ValueError(f"{name}: epsilon must be a positive number, got {epsilon!r}.")


def signed_hyperbolic(value: torch.Tensor, epsilon: float = 1e-3) -> torch.Tensor:
    """``sign(x) * (sqrt(|x| + 1) - 1) + epsilon * x`` element-wise.

    At 0 the value is 0 and the gradient ``1/2 + epsilon`` (the derivative of the formula there;
    ``sign`` alone would give no gradient).

    Args:
        value: any tensor.
        epsilon: the positive linear term (default ``1e-3``).

    Raises:
        ValueError: ``epsilon`` is not positive.

    Examples:
        >>> import torch
        >>> from rl_objectives.functional import signed_hyperbolic
        >>> signed_hyperbolic(torch.tensor([-100.0, 0.0, 3.0]))
        tensor([-9.1499,  0.0000,  1.0030])
    """
    _check_epsilon("signed_hyperbolic", epsilon)
    out = value.sign() * (torch.sqrt(value.abs() + 1) - 1) + epsilon * value
    return torch.where(value == 0, value * (0.5 + epsilon), out)


def signed_parabolic(value: torch.Tensor, epsilon: float = 1e-3) -> torch.Tensor:
    """The inverse of :func:`signed_hyperbolic` (with the same ``epsilon``) element-wise.

    Args:
        value: a tensor in the transformed space.
        epsilon: the ``epsilon`` of the forward transform (default ``1e-3``).

    Raises:
        ValueError: ``epsilon`` is not positive.

    Examples:
        >>> import torch
        >>> from rl_objectives.functional import signed_hyperbolic, signed_parabolic
        >>> signed_parabolic(signed_hyperbolic(torch.tensor([-100.0, 0.0, 3.0])))
        tensor([-100.0000,    0.0000,    3.0000])
    """
    _check_epsilon("signed_parabolic", epsilon)
    a = value.abs() + 1 + epsilon
    root = 2 * a / (torch.sqrt(1 + 4 * epsilon * a) + 1)  # = sqrt(|x| + 1) of the pre-image
    out = value.sign() * (root.square() - 1)
    return torch.where(value == 0, value / (0.5 + epsilon), out)
