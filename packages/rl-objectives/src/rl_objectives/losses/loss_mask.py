"""Loss masks: leaving invalid positions (padding, the unshifted tail of a trajectory) out of a loss.

A loss reads its mask from the input with ``LossModule.loss_mask_key``: ``"auto"`` (default) ANDs
every entry of :data:`AUTO_LOSS_MASK_KEYS` the input holds (the validity masks the collectors and
the n-step shift write), a key reads that entry alone (a missing one masks nothing), ``None`` masks
nothing. :func:`masked_reduce` then selects the valid positions out before reducing, so a NaN or
infinity at a masked position reaches neither the loss nor its gradients.

Examples:
    >>> import torch
    >>> loss, valid = torch.tensor([1.0, 2.0, float("nan")]), torch.tensor([True, True, False])
    >>> masked_reduce(loss, valid, "mean")
    tensor(1.5000)
    >>> masked_reduce(loss, valid, "none")
    tensor([1., 2., 0.])
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "AUTO_LOSS_MASK_KEYS",
    "align_mask",
    "check_loss_mask_key",
    "combine_masks",
    "masked_reduce",
    "read_loss_mask",
]

AUTO_LOSS_MASK_KEYS: tuple = (("collector", "mask"), "shifted_valid")


def check_loss_mask_key(owner: str, value: Any) -> Any:
    """``value`` if it is ``"auto"``, ``None``, a string or a non-empty tuple of strings.

    Raises:
        ValueError: anything else (naming ``loss_mask_key`` and what arrived).
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, tuple) and value and all(isinstance(part, str) for part in value):
        return value
    raise ValueError(
        f"{owner}: loss_mask_key must be 'auto', None, a key string or a non-empty tuple of strings, got {value!r}."
    )


def read_loss_mask(tensordict: Any, key: Any) -> torch.Tensor | None:
    """The bool mask ``key`` (see the module docstring) selects in ``tensordict``, or None."""
    if key is None or tensordict is None:
        return None
    mask = None
    for entry in AUTO_LOSS_MASK_KEYS if key == "auto" else (key,):
        value = tensordict.get(entry, None)
        if value is not None:
            value = value.bool()
            mask = value if mask is None else combine_masks(mask, value)
    return mask


def combine_masks(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a & b``, the shorter one given trailing singleton dims (``[B, T]`` with ``[B, T, 1]``)."""
    dims = max(a.ndim, b.ndim)
    return a.reshape(*a.shape, *(1,) * (dims - a.ndim)) & b.reshape(*b.shape, *(1,) * (dims - b.ndim))


def align_mask(mask: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:
    """``mask`` broadcast to ``loss``'s shape: trailing singleton dims beyond the loss's dropped,
    missing trailing dims added (a per-step mask over a per-step-and-feature loss).

    Raises:
        ValueError: the mask has more non-singleton dims than the loss.
    """
    while mask.ndim > loss.ndim and mask.shape[-1] == 1:
        mask = mask.squeeze(-1)
    if mask.ndim > loss.ndim:
        raise ValueError(
            f"loss mask of shape {tuple(mask.shape)} has more non-singleton dimensions than the loss {tuple(loss.shape)}."
        )
    mask = mask.reshape(*mask.shape, *(1,) * (loss.ndim - mask.ndim))
    return mask.expand_as(loss)


def masked_reduce(loss: torch.Tensor, mask: torch.Tensor | None, reduction: str, compact: bool = False) -> torch.Tensor:
    """``loss`` reduced over the positions ``mask`` keeps (``"mean"``, ``"sum"``, or ``"none"``:
    the loss with masked positions set to 0, or, with ``compact``, only the kept elements).

    Raises:
        ValueError: the mask has more non-singleton dims than the loss.
    """
    if mask is None:
        return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss
    mask = align_mask(mask, loss)
    if reduction == "none":
        return loss[mask] if compact else torch.where(mask, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))
    kept = loss[mask]
    return kept.mean() if reduction == "mean" else kept.sum()
