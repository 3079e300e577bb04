"""The element-wise regression distances every critic loss uses: ``l1``, ``l2`` and ``smooth_l1``.

Examples:
    >>> import torch
    >>> from rl_objectives.functional.distance import distance
    >>> distance(torch.tensor([0.0, 2.0]), torch.tensor([0.5, 0.0]), "smooth_l1")
    tensor([0.1250, 1.5000])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["LOSS_TYPES", "distance"]

LOSS_TYPES = ("l1", "l2", "smooth_l1")


def distance(prediction: torch.Tensor, target: torch.Tensor, loss_type: str = "l2") -> torch.Tensor:
    """``|p - t|`` (``"l1"``), ``(p - t)^2`` (``"l2"``) or the Huber loss with ``beta=1``
    (``"smooth_l1"``: quadratic below 1, linear above), element-wise and broadcast.

    Examples:
        >>> import torch
        >>> distance(torch.tensor([1.0]), torch.tensor([3.0]), "l2"), distance(torch.tensor([1.0]), torch.tensor([3.0]), "l1")
        (tensor([4.]), tensor([2.]))
    """
    if loss_type == "l2":
        return (prediction - target).square()
    if loss_type == "l1":
        return (prediction - target).abs()
    if loss_type != "smooth_l1":
        raise ValueError(f"distance: loss_type must be one of {LOSS_TYPES}, got {loss_type!r}.")
    if prediction.shape != target.shape:
        prediction, target = torch.broadcast_tensors(prediction, target)
    return F.smooth_l1_loss(prediction, target, reduction="none")
