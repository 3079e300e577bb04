"""Right-expansion: a tensor over batch dims ``[*B]`` broadcast to ``[*B, *F]`` (tensordict's utils).

A mask or a per-step scalar lines up with the *leading* dims of the data it applies to, where torch
broadcasting would line it up with the trailing ones; these helpers add the trailing dims first.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ._core.utils import is_tensor_collection

__all__ = ["expand_as_right", "expand_right"]


def expand_right(tensor: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """``tensor`` (shape ``[*B]``) expanded on the right to ``shape`` (``[*B, *F]``), as a view.

    Dims of size one in ``tensor`` broadcast, as in ``Tensor.expand``.

    Raises:
        RuntimeError: ``tensor`` has more dims than ``shape``, or its dims do not match the leading
            dims of ``shape``.

    Examples:
        >>> import torch
        >>> from tdict import expand_right
        >>> expand_right(torch.tensor([1, 2]), (2, 3)).tolist()
        [[1, 1, 1], [2, 2, 2]]
    """
    shape = torch.Size(shape)
    n = tensor.ndim
    if n > len(shape):
        raise RuntimeError(
            f"expand_right: the tensor has {n} dims (shape {tuple(tensor.shape)}), more than the target shape "
            f"{tuple(shape)}."
        )
    if any(a != b and a != 1 for a, b in zip(tensor.shape, shape[:n])):
        raise RuntimeError(
            f"expand_right: the tensor's shape {tuple(tensor.shape)} does not match the leading dims of {tuple(shape)}."
        )
    return tensor.reshape(tuple(tensor.shape) + (1,) * (len(shape) - n)).expand(shape)


def expand_as_right(tensor: torch.Tensor, dest: Any) -> Any:
    """``tensor`` expanded on the right to ``dest``'s shape (:func:`expand_right`); for a TensorDict
    ``dest``, to each of its leaves' shapes (a TensorDict of views, with ``dest``'s structure).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict, expand_as_right
        >>> mask = torch.tensor([True, False])
        >>> expand_as_right(mask, torch.zeros(2, 3)).shape
        torch.Size([2, 3])
        >>> expand_as_right(mask, TensorDict(obs=torch.zeros(2, 4), batch_size=[2]))["obs"].shape
        torch.Size([2, 4])
    """
    if is_tensor_collection(dest):
        return dest.apply(lambda leaf: expand_right(tensor, leaf.shape))
    return expand_right(tensor, dest.shape)
