"""``pad_sequence``: pad collections of ragged leaves to a common length and stack them (tensordict's rule).

``pad_dim`` counts a leaf's own dims (negative from its end), so it may name a batch dim (the
stacked batch takes the longest length there) or a feature dim past the batch (the batch is kept
and each key is padded to its own longest length). Non-tensor leaves are stacked as they are; with
``return_mask`` a masks sub-collection (``"masks"``, or the key given) holds, per leaf, True where
the data is real, shaped like the stacked batch plus the padded dim when it lies past the batch.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..base import TensorDictBase
from ..tensordict import TensorDict
from ..unbatched import UNBATCHED_TYPES
from .keys import is_leaf_nontensor
from .utils import NestedKey, _key_to_tuple, content_of

__all__ = ["pad_sequence"]


def _padded_to(value: torch.Tensor, dim: int, length: int, fill: Any) -> torch.Tensor:
    """``value`` grown along ``dim`` to ``length`` with ``fill``."""
    missing = length - value.shape[dim]
    if not missing:
        return value
    shape = list(value.shape)
    shape[dim] = missing
    return torch.cat([value, value.new_full(shape, fill)], dim)


def pad_sequence(
    list_of_tds: Sequence[Any],
    pad_dim: int = 0,
    padding_value: float = 0.0,
    out: TensorDictBase | None = None,
    return_mask: bool | NestedKey = False,
) -> Any:
    """Pad every leaf along ``pad_dim`` (a dim of the leaf) to the longest and stack the collections on a new dim 0.

    Args:
        list_of_tds: collections (or instances of one tensor class) with the same keys and batch size
            (except along ``pad_dim`` when it is a batch dim).
        pad_dim: the leaves' dim to pad; negative counts from a leaf's end.
        padding_value: the value written into the padding.
        out: a collection the result is written into (in place where it has the key), and returned.
        return_mask: ``True`` adds a ``"masks"`` sub-collection of per-leaf validity masks; a nested
            key puts it under that key instead (not for tensor classes).

    Raises:
        ValueError: an empty list.
        KeyError: the collections do not hold the same leaves.
        RuntimeError: a 0-dim leaf (nothing to pad), or ``return_mask`` with tensor classes.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict, pad_sequence
        >>> tds = [TensorDict({"x": torch.ones(n, 2), "tag": "t"}, [n]) for n in (1, 3)]
        >>> out = pad_sequence(tds, return_mask=True)
        >>> out.batch_size, out["x"][0, :, 0].tolist(), out["masks", "x"].tolist()
        (torch.Size([2, 3]), [1.0, 0.0, 0.0], [[True, False, False], [True, True, True]])
    """
    if not isinstance(list_of_tds, (list, tuple)) or not list_of_tds:
        raise ValueError(f"pad_sequence expects a non-empty list of tensor collections, got {list_of_tds!r}.")
    first = list_of_tds[0]
    tensorclass = type(first) if getattr(type(first), "_is_tensorclass", False) else None
    if tensorclass is not None and return_mask is not False:
        raise RuntimeError(
            "pad_sequence: return_mask needs TensorDicts, got tensor classes (convert them with to_tensordict() first)."
        )
    masks_key = ("masks",) if isinstance(return_mask, bool) else _key_to_tuple(return_mask)
    tds = [content_of(td) for td in list_of_tds]
    keys = list(tds[0].keys(True, True, is_leaf=is_leaf_nontensor))
    for i, td in enumerate(tds[1:], 1):
        theirs = set(td.keys(True, True, is_leaf=is_leaf_nontensor))
        if theirs != set(keys):
            raise KeyError(
                f"pad_sequence: collection {i} holds the leaves {sorted(map(str, theirs))}, collection 0 "
                f"{sorted(map(str, keys))}; they must match."
            )
    batch = list(tds[0].batch_size)
    entries: dict = {}
    longest_batch = None  # the stacked batch's length along pad_dim, when every leaf pads a batch dim
    pads_a_batch_dim = True
    non_tensor = []
    for key in keys:
        values = [td.get(key) for td in tds]
        if is_leaf_nontensor(type(values[0])) and not isinstance(values[0], torch.Tensor):
            non_tensor.append((key, values))  # stacked once the padded batch is known
            continue
        if type(values[0]) in UNBATCHED_TYPES:
            entries[key] = values[0]
            continue
        if values[0].ndim == 0:
            raise RuntimeError(f"pad_sequence: cannot pad scalars (key {key!r} holds 0-dim tensors).")
        dim = pad_dim if pad_dim >= 0 else values[0].ndim + pad_dim
        if not 0 <= dim < values[0].ndim:
            raise IndexError(
                f"pad_sequence: pad_dim={pad_dim} is out of range for key {key!r} of {values[0].ndim} dims."
            )
        length = max(v.shape[dim] for v in values)
        shapes = {v.shape[:dim] + v.shape[dim + 1 :] for v in values}
        if len(shapes) > 1:
            raise RuntimeError(
                f"pad_sequence: key {key!r} has shapes {[list(v.shape) for v in values]}, which differ outside "
                f"pad_dim={pad_dim}; only that dim is padded."
            )
        entries[key] = torch.stack([_padded_to(v, dim, length, padding_value) for v in values])
        if dim < len(batch):
            longest_batch = max(longest_batch or 0, length)
        else:
            pads_a_batch_dim = False
        if return_mask is not False:
            # True where real, over the batch (and the padded dim when it lies past the batch)
            mask_dim = min(dim, len(batch))
            masks = []
            for td, v in zip(tds, values):
                shape = list(td.batch_size) + ([v.shape[dim]] if dim >= len(batch) else [])
                ones = torch.ones(shape, dtype=torch.bool, device=v.device)
                masks.append(_padded_to(ones, mask_dim, length, False))
            entries[masks_key + _key_to_tuple(key)] = torch.stack(masks)
    if pads_a_batch_dim and longest_batch is not None and batch:
        batch[pad_dim] = longest_batch
    for key, values in non_tensor:
        if any(v.batch_size != torch.Size(batch) for v in values):  # a padded batch dim: one payload fills it
            if any(v._is_lazy for v in values):
                raise RuntimeError(
                    f"pad_sequence: key {key!r} holds non-tensor stacks of different lengths, which cannot be padded."
                )
            values = [v._with_batch_size(torch.Size(batch)) for v in values]
        entries[key] = torch.stack(values)  # a stack of the payloads
    result = TensorDict(entries, batch_size=[len(tds), *batch], device=tds[0].device)
    if out is not None:
        return out.update(result, inplace=True)
    return tensorclass._from_tensordict(result) if tensorclass is not None else result
