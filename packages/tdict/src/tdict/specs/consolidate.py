"""``consolidate_spec``: give every member of a stack of Composites the same keys."""

from __future__ import annotations

from typing import Any

import torch

from .composite import Composite
from .stacked import Stacked, StackedComposite, stack_specs
from .unbounded import Unbounded

__all__ = ["consolidate_spec"]


def _is_composite(spec: Any) -> bool:
    return isinstance(spec, (Composite, StackedComposite))


def _placeholder(examples: list, batch_shape: torch.Size) -> Any:
    """An empty spec for a member that lacks a key the other members hold (``examples``).

    Composites give an empty Composite of the example's batch shape; leaves give a spec of the first
    example's class whose feature dims are 0 (the dims where the examples differ, or all of them
    when they agree), so that the member holds the key with no values.
    """
    first = examples[0]
    if any(type(e) is not type(first) for e in examples[1:]):
        raise ValueError(
            "consolidate_spec: the members hold the same key with specs of different classes "
            f"({sorted({type(e).__name__ for e in examples})})."
        )
    if _is_composite(first):
        return Composite(shape=first.shape, device=first.device)
    if isinstance(first, Stacked):
        raise NotImplementedError("consolidate_spec: an exclusive key holding a Stacked leaf spec is not supported.")
    shape = [0 if any(e.shape[i] != size for e in examples) else size for i, size in enumerate(first.shape)]
    if 0 not in shape:
        shape = [size if i < len(batch_shape) else 0 for i, size in enumerate(shape)]
    try:
        scalar = first[(0,) * first.ndim] if first.ndim else first
        return scalar.expand(*shape)
    except (IndexError, ValueError, RuntimeError):  # a spec whose last dim is its encoding (one-hot)
        return Unbounded(shape=shape, dtype=first.dtype, device=first.device)


def consolidate_spec(spec: Any, recurse_through_entries: bool = True, recurse_through_stack: bool = True) -> Any:
    """A copy of ``spec`` where the members of every stack of Composites hold the same keys.

    A key only some members of a :class:`StackedComposite` hold (an exclusive key) is added to the
    others as an empty spec (a zero-size leaf, or an empty Composite), so the stack's ``rand``/``zero``
    give lazy stacks without exclusive entries. Non-Composite specs are returned as they are.

    Args:
        spec: the spec to consolidate.
        recurse_through_entries: also consolidate the Composite entries of ``spec``.
        recurse_through_stack: also consolidate each member of a stack before comparing keys.

    Examples:
        >>> import torch
        >>> from tdict.specs import Composite, Unbounded
        >>> from tdict.specs.consolidate import consolidate_spec
        >>> a = Composite(obs=Unbounded(shape=(3,)), lidar=Unbounded(shape=(8,)))
        >>> b = Composite(obs=Unbounded(shape=(2,)))
        >>> spec = consolidate_spec(torch.stack([a, b], 0))
        >>> spec.specs[1]["lidar"].shape, spec["lidar"].shape
        (torch.Size([0]), torch.Size([2, -1]))
    """
    if not _is_composite(spec):
        return spec.clone()
    if isinstance(spec, StackedComposite):
        members = [
            consolidate_spec(m, recurse_through_entries, recurse_through_stack) if recurse_through_stack else m.clone()
            for m in spec.specs
        ]
        shared = set(spec.keys())
        examples: dict = {}
        for member in members:
            for key in member.keys():
                if key not in shared:
                    examples.setdefault(key, []).append(member[key])
        for member in members:
            present = set(member.keys())
            for key, values in examples.items():
                if key not in present:
                    member.set(key, _placeholder(values, member.shape))
        if recurse_through_entries:  # shared Composite entries that differ: consolidate their stack too
            for key in shared:
                values = [m[key] for m in members]
                if not all(isinstance(v, Composite) for v in values):
                    continue
                stacked = stack_specs(values, spec.dim)
                if isinstance(stacked, StackedComposite):
                    fixed = consolidate_spec(stacked, recurse_through_entries, recurse_through_stack)
                    for member, value in zip(members, fixed.specs):
                        member.set(key, value)
        return StackedComposite(members, spec.dim)
    out = spec.clone()
    if recurse_through_entries:
        for key in list(out.keys()):
            value = out[key]
            if _is_composite(value):
                out.set(key, consolidate_spec(value, recurse_through_entries, recurse_through_stack))
    return out
