"""Index expressions over batch dims: normalising them and the batch size they produce.

An index addresses the batch dims only; leaves keep their trailing feature dims whole, so an
Ellipsis is expanded over the batch dims before it reaches any leaf.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..errors import ShapeMismatchError


def _is_key_tuple(index: tuple) -> bool:
    for part in index:
        if isinstance(part, str):
            continue
        if isinstance(part, tuple) and part and _is_key_tuple(part):
            continue
        return False
    return True


def _expand_index(index: Any, batch_dims: int) -> Any:
    """Replace an Ellipsis so that it spans batch dims only (leaf feature dims stay whole)."""
    if index is Ellipsis:
        return (slice(None),) * batch_dims
    if isinstance(index, tuple) and any(p is Ellipsis for p in index):
        used = sum(
            1
            for p in index
            if p is not None and p is not Ellipsis and not (isinstance(p, torch.Tensor) and p.dtype == torch.bool)
        )
        used += sum(p.dim() for p in index if isinstance(p, torch.Tensor) and p.dtype == torch.bool)
        pos = next(i for i, p in enumerate(index) if p is Ellipsis)
        return index[:pos] + (slice(None),) * (batch_dims - used) + index[pos + 1 :]
    return index


def convert_ellipsis_to_idx(index: Any, batch_size: Sequence[int]) -> Any:
    """``index`` with its Ellipsis replaced by as many ``slice(None)`` as the batch dims it spans.

    ``None`` entries add a dim, as in torch indexing; an index without an Ellipsis is returned as is.

    Raises:
        RuntimeError: more than one Ellipsis, or more indexed dims than ``batch_size`` has.

    Examples:
        >>> convert_ellipsis_to_idx((0, ..., 1), [2, 3, 4, 5])
        (0, slice(None, None, None), slice(None, None, None), 1)
    """
    parts = (index,) if index is Ellipsis else index
    if not isinstance(parts, tuple) or not any(p is Ellipsis for p in parts):
        return index
    if sum(p is Ellipsis for p in parts) > 1:
        raise RuntimeError(f"convert_ellipsis_to_idx: an index can hold one Ellipsis at most, got {index!r}.")
    indexed = sum(p is not Ellipsis and p is not None for p in parts)
    if indexed > len(batch_size):
        raise RuntimeError(
            f"convert_ellipsis_to_idx: the index {index!r} addresses {indexed} dims, the batch size "
            f"{list(batch_size)} has {len(batch_size)}."
        )
    pos = parts.index(Ellipsis)
    span = len(batch_size) - indexed
    return parts[:pos] + (slice(None),) * span + parts[pos + 1 :]


def _indexed_batch_size(batch_size: torch.Size, index: Any) -> torch.Size:
    """The batch size that ``index`` produces, computed on a zero-stride stand-in tensor (on the
    index tensors' device: a CUDA mask cannot index a CPU tensor)."""
    parts = index if isinstance(index, tuple) else (index,)
    device = next((p.device for p in parts if isinstance(p, torch.Tensor)), None)
    return torch.zeros((), device=device).expand(batch_size)[index].shape


def _normalize_index(index: Any, batch_size: torch.Size) -> Any:
    """Lists and arrays become tensors; ``...`` spans the batch dims only; too many indices raise."""
    if isinstance(index, list):
        index = torch.tensor(index)
    elif type(index).__module__ == "numpy":
        index = torch.as_tensor(index)
    elif isinstance(index, tuple):
        index = tuple(
            torch.tensor(p) if isinstance(p, list) else torch.as_tensor(p) if type(p).__module__ == "numpy" else p
            for p in index
        )
    parts = index if isinstance(index, tuple) else (index,)
    used = 0
    for p in parts:
        if p is None or p is Ellipsis:
            continue
        used += p.dim() if isinstance(p, torch.Tensor) and p.dtype == torch.bool else 1
    if used > len(batch_size):
        raise IndexError(
            f"too many indices for tensor of dimension {len(batch_size)} (the batch size is {list(batch_size)}): "
            f"{used} indexed dims in {index!r}."
        )
    for i, p in enumerate(parts):
        if isinstance(p, torch.Tensor) and p.dtype == torch.bool:
            start = sum(
                q.dim() if isinstance(q, torch.Tensor) and q.dtype == torch.bool else 1
                for q in parts[:i]
                if q is not None and q is not Ellipsis
            )
            if Ellipsis not in parts[:i] and p.shape != batch_size[start : start + p.dim()]:
                raise IndexError(
                    f"Boolean mask of shape {list(p.shape)} does not match batch dims {list(batch_size[start : start + p.dim()])}."
                )
    return _expand_index(index, len(batch_size))


def _batch_size_from_entry(before: Any, after: Any, batch_dims: int) -> torch.Size:
    shape_before = before.shape if isinstance(before, torch.Tensor) else before.batch_size
    shape_after = after.shape if isinstance(after, torch.Tensor) else after.batch_size
    feature_dims = len(shape_before) - batch_dims
    return shape_after[: len(shape_after) - feature_dims]


def broadcasts_to(shape: torch.Size, target: torch.Size) -> bool:
    """True when a value of ``shape`` can be copied into ``target`` (``[3]`` does not fit ``[]``,
    although the two broadcast together)."""
    try:
        return torch.broadcast_shapes(shape, target) == target
    except RuntimeError:
        return False


def check_write_shape(key: Any, shape: torch.Size, expected: torch.Size, batch_dims: int | None = None) -> None:
    """Raise (naming ``key``) unless a value of ``shape`` can be written where ``expected`` is.

    ``batch_dims``: how many leading dims of ``expected`` are the indexed destination's batch dims
    (only used to word the error)."""
    if not broadcasts_to(shape, expected):
        raise write_shape_error(key, shape, expected, batch_dims)


def write_shape_error(key: Any, shape: Sequence[int], expected: Sequence[int], batch_dims: int | None) -> Exception:
    """The error of ``td[index] = value`` when a leaf of the value does not fit its destination."""
    detail = f"key {key!r} has shape {list(shape)}, expected one broadcastable to {list(expected)}."
    if (
        batch_dims is not None
        and len(shape) == len(expected)
        and broadcasts_to(torch.Size(shape[batch_dims:]), torch.Size(expected[batch_dims:]))
    ):
        return ShapeMismatchError(
            f"td[index] = value: batch dimension mismatch, the indexed destination TensorDict batch size is "
            f"{list(expected[:batch_dims])}, the value's is {list(shape[:batch_dims])}: {detail}"
        )
    return ShapeMismatchError(f"td[index] = value: {detail}")


def index_on_cpu(index: Any) -> Any:
    """``index`` with its tensors on the CPU, for tables kept there (a CUDA mask, say)."""
    if isinstance(index, torch.Tensor):
        return index.cpu()
    if isinstance(index, tuple):
        return tuple(p.cpu() if isinstance(p, torch.Tensor) else p for p in index)
    return index
