"""SymExpTwoHot: DreamerV3's categorical representation of a scalar (reward, value) as a module."""

from __future__ import annotations

import torch
from torch import nn

from ..functional.dreamer import symexp_bins, two_hot_cross_entropy, two_hot_decode, two_hot_encode

__all__ = ["SymExpTwoHot"]


class SymExpTwoHot(nn.Module):
    """A scalar head's support and its conversions (TorchRL's ``SymExpTwoHot``).

    The support (buffer ``bins``) is :func:`~rl_objectives.functional.dreamer.symexp_bins`:
    ``num_bins`` raw values evenly spaced in symlog space over ``[-20, 20]``. A network predicting
    the scalar outputs ``num_bins`` logits; :meth:`loss` is the two-hot cross-entropy against raw
    targets, :meth:`decode` (and calling the module) the expected value.

    Args:
        num_bins: the size of the support (255 in DreamerV3).

    Examples:
        >>> import torch
        >>> two_hot = SymExpTwoHot(num_bins=5)
        >>> target = torch.tensor([-10.0, 0.0, 10.0])
        >>> torch.allclose(two_hot.decode(two_hot.encode(target).log()), target, atol=1e-3)
        True
        >>> two_hot(torch.zeros(4, 5)).shape  # the decoded value keeps a trailing dim of 1
        torch.Size([4, 1])
    """

    bins: torch.Tensor

    def __init__(self, num_bins: int = 255) -> None:
        super().__init__()
        self.num_bins = num_bins
        self.register_buffer("bins", symexp_bins(num_bins))

    def encode(self, target: torch.Tensor) -> torch.Tensor:
        """Raw targets ``[*B]`` as two-hot weights ``[*B, num_bins]``."""
        return two_hot_encode(target, self.bins)

    def decode(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits ``[*B, num_bins]`` as expected raw values ``[*B]``."""
        return two_hot_decode(logits, self.bins)

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The two-hot cross-entropy of ``logits`` against raw ``target`` s, one per value."""
        return two_hot_cross_entropy(logits, target, self.bins)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """The expected value with a trailing dim of 1 (``[*B, 1]``), as a value head returns it."""
        return self.decode(logits).unsqueeze(-1)

    def extra_repr(self) -> str:
        return f"num_bins={self.num_bins}"
