"""Batch dim names through ops: which names an op's result keeps (tensordict 0.14's rules).

A name follows its dim: ops that keep a dim keep its name, new dims (``expand``'s leading ones,
``None`` in an index, the dim ``flatten`` merges into) are unnamed, removed dims take their names
with them. Sub-collections carry their parent's names on the parent's batch dims.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .indexing import _expand_index

_BLOCK = object()  # where the block of the advanced indices goes, in ``indexed_names``


def indexed_names(names: Sequence[Any], index: Any, out_ndim: int) -> list | None:
    """The names of ``td[index]`` (``index`` normalised over the batch dims), or None if unnamed.

    torch's rules: ints select (no dim), slices keep their dim, ``None`` adds one; the index
    tensors (a bool mask spans as many dims as it has) broadcast into one block of dims that sits
    where they are when they are adjacent (ints do not count), in front otherwise. The block keeps
    the name of its dim when it comes from a single 1-d integer index over one dim; otherwise (a
    boolean mask, several or n-d index tensors) it is unnamed, as in tensordict.
    """
    parts = _expand_index(index, len(names))
    parts = parts if isinstance(parts, tuple) else (parts,)
    out: list = []  # the name of each output dim, _BLOCK for each index tensor
    advanced: list = []  # (position in out, name, a shape with the dims it broadcasts) per index tensor
    dim = 0
    for part in parts:
        if part is None:
            out.append(None)
        elif type(part) is int:
            dim += 1
        elif isinstance(part, torch.Tensor):
            spans = part.dim() if part.dtype is torch.bool else 1
            shape = (1,) if part.dtype is torch.bool else tuple(part.shape)  # a mask gives one dim
            kept = names[dim] if spans == 1 and part.dtype is not torch.bool else None  # a mask's dim is new
            advanced.append((len(out), kept, shape))
            out.append(_BLOCK)
            dim += spans
        else:  # a slice
            out.append(names[dim])
            dim += 1
    out.extend(names[dim:])
    if advanced:
        shape = torch.broadcast_shapes(*(s for _, _, s in advanced))
        single = len(advanced) == 1 and len(shape) == 1
        block = [advanced[0][1] if single else None] * len(shape)
        positions = [p for p, _, _ in advanced]
        adjacent = positions[-1] - positions[0] + 1 == len(positions)
        rest = [n for n in out if n is not _BLOCK]
        at = positions[0] if adjacent else 0
        out = rest[:at] + block + rest[at:]
    if len(out) != out_ndim:  # pragma: no cover - an index form the rules above do not cover
        return None
    return out if any(n is not None for n in out) else None


def reduced_names(names: Sequence[Any] | None, dims: Sequence[int], keepdim: bool) -> list | None:
    """The names after reducing ``dims`` (kept with ``keepdim``, as torch does)."""
    if names is None:
        return None
    if keepdim:
        return list(names)
    out = [n for i, n in enumerate(names) if i not in dims]
    return out if any(n is not None for n in out) else None


def leading_names(sub: Any, names: Sequence[Any] | None, key: Any, *, force: bool) -> list | None:
    """The names a sub-collection stored under ``key`` gets from its parent's ``names``, or None
    when they are unchanged.

    ``force`` (the parent is being renamed): the parent's names replace the sub's leading ones.
    Otherwise (a sub-collection written into a named parent): the parent's names fill the sub's
    unnamed dims and a different name on the same dim raises, naming the key.
    """
    current = sub.names
    n = len(current) if names is None else len(names)
    parent = [None] * n if names is None else list(names)
    if force:
        new = parent + current[n:]
    else:
        new = list(current)
        for i, name in enumerate(parent):
            if name is None:
                continue
            if current[i] is not None and current[i] != name:
                raise RuntimeError(
                    f"Key {key!r}: its batch dim {i} is named {current[i]!r}, the parent's dim {i} is named {name!r} "
                    f"(names {current} vs {parent}); rename one of them first."
                )
            new[i] = name
    return None if new == current else new
