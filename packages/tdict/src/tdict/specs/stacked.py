"""Stacks of specs: ``torch.stack`` of leaf specs or Composites (heterogeneous, multi-agent)."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from ..lazy import lazy_stack
from .base import TensorSpec, _device, _size
from .composite import Composite

__all__ = ["Stacked", "StackedComposite", "stack_specs"]


def _norm_dim(dim: int, ndim: int) -> int:
    if not -ndim - 1 <= dim <= ndim:
        raise IndexError(f"stack: dim {dim} out of range for specs of batch ndim {ndim}")
    return dim + ndim + 1 if dim < 0 else dim


def _stacked_shape(shapes: list, dim: int, n: int) -> torch.Size:
    if len({len(s) for s in shapes}) != 1:
        raise ValueError(f"stack: specs must have the same number of dims, got shapes {[tuple(s) for s in shapes]}")
    merged = [s if all(o[i] == s for o in shapes) else -1 for i, s in enumerate(shapes[0])]
    return torch.Size(merged[:dim] + [n] + merged[dim:])


def stack_specs(specs: Sequence[Any], dim: int = 0) -> Any:
    """Stack specs along a new batch dim (what ``torch.stack(specs, dim)`` calls).

    Identical specs and leaf specs that differ only in their bounds/masks give a dense spec;
    leaf specs of different shapes or parameters give :class:`Stacked`, Composites that differ
    give :class:`StackedComposite`.
    """
    specs = list(specs)
    if not specs:
        raise ValueError("stack: expected a non-empty list of specs")
    first = specs[0]
    if any(type(s) is not type(first) for s in specs):
        raise TypeError(f"stack: specs must share a class, got {sorted({type(s).__name__ for s in specs})}")
    if isinstance(first, Composite):
        if any(s.shape != first.shape for s in specs):
            raise ValueError(f"stack: Composites must share a batch shape, got {[tuple(s.shape) for s in specs]}")
        d = _norm_dim(dim, first.ndim)
        if all(s == first for s in specs[1:]):
            return first.unsqueeze(d).expand(first.shape[:d] + (len(specs),) + first.shape[d:])
        return StackedComposite(specs, dim=d)
    if isinstance(first, (Stacked, StackedComposite)):
        raise TypeError("stack: stacking already stacked specs is not supported")
    d = _norm_dim(dim, len(first._batch_shape))
    dense = all(s.shape == first.shape and s.dtype == first.dtype and s.device == first.device and s._tensors.keys() == first._tensors.keys() and s._extra_eq(first) for s in specs[1:])
    if dense:
        return first._rebuild(first.shape[:d] + (len(specs),) + first.shape[d:], {k: torch.stack([s._tensors[k] for s in specs], d) for k in first._tensors})
    return Stacked(specs, dim=d)


class _TorchStack:
    """Mixin routing ``torch.stack`` on specs to :func:`stack_specs`."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.stack:
            return stack_specs(*args, **(kwargs or {}))
        return NotImplemented


TensorSpec.__torch_function__ = _TorchStack.__torch_function__  # type: ignore[attr-defined]
Composite.__torch_function__ = _TorchStack.__torch_function__  # type: ignore[attr-defined]


class Stacked:
    """A stack of leaf specs that differ in shape or parameters (e.g. one action spec per agent).

    ``shape`` holds ``-1`` where the members' sizes differ. Values are stacked tensors when the
    members share a shape; members of different shapes are generated and checked one by one
    (inside a :class:`StackedComposite` they become a lazily stacked TensorDict).

    Args:
        specs: the member specs (same class, same number of dims).
        dim: the new dim.

    Example:
        >>> import torch
        >>> from tdict.specs import Categorical, Stacked
        >>> spec = torch.stack([Categorical(2), Categorical(5)], 0)
        >>> isinstance(spec, Stacked), spec.shape
        (True, torch.Size([2]))
        >>> x = spec.rand((3,))
        >>> x.shape, spec.is_in(x), spec.is_in(torch.tensor([1, 4])), spec.is_in(torch.tensor([4, 1]))
        (torch.Size([3, 2]), True, True, False)
    """

    _is_spec = True

    def __init__(self, specs: Sequence[TensorSpec], dim: int = 0) -> None:
        self.specs = tuple(specs)
        self.dim = dim
        self.shape = _stacked_shape([s.shape for s in self.specs], dim, len(self.specs))
        self.dtype = self.specs[0].dtype
        self.device = self.specs[0].device
        self._same_shape = all(s.shape == self.specs[0].shape for s in self.specs)

    __torch_function__ = _TorchStack.__torch_function__

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return len(self.specs)

    def _gen(self, name: str, shape: Any) -> Any:
        lead = _size(shape)
        vals = [getattr(s, name)(lead) for s in self.specs]
        if self._same_shape:
            return torch.stack(vals, len(lead) + self.dim)
        return vals

    def rand(self, shape: Any = ()) -> Any:
        """Stacked samples (a list of per-member samples when the members' shapes differ)."""
        return self._gen("rand", shape)

    def zero(self, shape: Any = ()) -> Any:
        return self._gen("zero", shape)

    def one(self, shape: Any = ()) -> Any:
        return self._gen("one", shape)

    zeros, ones = zero, one

    def _members(self, val: Any) -> list | None:
        if isinstance(val, (list, tuple)):
            return list(val) if len(val) == len(self.specs) else None
        if not isinstance(val, torch.Tensor) or val.ndim < self.ndim:
            return None
        d = val.ndim - self.ndim + self.dim
        return list(val.unbind(d)) if val.shape[d] == len(self.specs) else None

    def _violation(self, val: Any) -> str | None:
        parts = self._members(val)
        if parts is None:
            return f"expected {len(self.specs)} members along the stack dim {self.dim}"
        for i, (s, v) in enumerate(zip(self.specs, parts)):
            why = s._violation(v)
            if why is not None:
                return f"member {i}: {why}"
        return None

    def is_in(self, val: Any) -> bool:
        return self._violation(val) is None

    def assert_is_in(self, val: Any) -> None:
        why = self._violation(val)
        if why is not None:
            raise AssertionError(f"Stacked: value not in spec: {why}")

    def project(self, val: Any) -> Any:
        parts = self._members(val)
        if parts is None:
            raise ValueError(f"Stacked.project: expected {len(self.specs)} members along the stack dim")
        out = [s.project(v) for s, v in zip(self.specs, parts)]
        if isinstance(val, torch.Tensor):
            return torch.stack(out, val.ndim - self.ndim + self.dim)
        return out

    def unbind(self, dim: int = 0) -> tuple:
        if _norm_dim(dim, self.ndim - 1) != self.dim:
            raise ValueError(f"Stacked.unbind: only the stack dim {self.dim} can be unbound")
        return self.specs

    def __getitem__(self, index: Any) -> Any:
        if self.dim == 0 and isinstance(index, int):
            return self.specs[index]
        raise IndexError("Stacked: only an integer index along a leading stack dim is supported")

    def to(self, dest: Any) -> "Stacked":
        return Stacked([s.to(dest) for s in self.specs], self.dim)

    def clone(self) -> "Stacked":
        return Stacked([s.clone() for s in self.specs], self.dim)

    def __eq__(self, other: Any) -> bool:
        return type(other) is Stacked and self.dim == other.dim and len(self.specs) == len(other.specs) and all(a == b for a, b in zip(self.specs, other.specs))

    __hash__ = None

    def __repr__(self) -> str:
        return f"Stacked(shape={tuple(self.shape)}, dim={self.dim}, specs={list(self.specs)})"


class StackedComposite:
    """A stack of Composites that differ (heterogeneous agents): values are lazily stacked TensorDicts.

    Members share a batch shape; their keys and feature shapes may differ. ``spec[key]`` stacks
    the members' sub-specs (the key must exist in all of them).

    Args:
        specs: the member Composites.
        dim: the new batch dim.

    Example:
        >>> import torch
        >>> from tdict.specs import Composite, Unbounded
        >>> a = Composite(obs=Unbounded(shape=(3,)))
        >>> b = Composite(obs=Unbounded(shape=(5,)), extra=Unbounded(shape=()))
        >>> spec = torch.stack([a, b], 0)
        >>> td = spec.rand()
        >>> td.batch_size, td[1]["obs"].shape, spec.is_in(td), spec["obs"].shape
        (torch.Size([2]), torch.Size([5]), True, torch.Size([2, -1]))
    """

    _is_spec = True

    def __init__(self, specs: Sequence[Composite], dim: int = 0) -> None:
        self.specs = tuple(specs)
        self.dim = dim
        first = self.specs[0]
        self.shape = first.shape[:dim] + (len(self.specs),) + first.shape[dim:]
        self.device = first.device

    __torch_function__ = _TorchStack.__torch_function__

    @property
    def batch_size(self) -> torch.Size:
        return self.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return len(self.specs)

    def _gen(self, name: str, shape: Any) -> Any:
        lead = _size(shape)
        return lazy_stack([getattr(s, name)(lead) for s in self.specs], len(lead) + self.dim)

    def rand(self, shape: Any = ()) -> Any:
        """A lazily stacked TensorDict of batch size ``shape + self.shape``."""
        return self._gen("rand", shape)

    def zero(self, shape: Any = ()) -> Any:
        return self._gen("zero", shape)

    def one(self, shape: Any = ()) -> Any:
        return self._gen("one", shape)

    zeros, ones = zero, one

    def _violation(self, td: Any) -> tuple[int, tuple, str] | None:
        bs = getattr(td, "batch_size", None)
        if bs is None or len(bs) < self.ndim:
            return (-1, (), f"expected a TensorDict with at least {self.ndim} batch dims")
        d = len(bs) - self.ndim + self.dim
        if bs[d] != len(self.specs):
            return (-1, (), f"batch dim {d} has size {bs[d]}, expected {len(self.specs)}")
        for i, (s, part) in enumerate(zip(self.specs, td.unbind(d))):
            bad = s._violation(part)
            if bad is not None:
                return (i, bad[0], bad[1])
        return None

    def is_in(self, td: Any) -> bool:
        return self._violation(td) is None

    def assert_is_in(self, td: Any) -> None:
        """Raise ``AssertionError`` naming the member index and the key."""
        bad = self._violation(td)
        if bad is not None:
            i, key, why = bad
            where = f"member {i}, key {key[0] if len(key) == 1 else key!r}: " if i >= 0 else ""
            raise AssertionError(f"StackedComposite: {where}{why}")

    def project(self, td: Any) -> Any:
        """A lazy stack of the members' projections."""
        if self.is_in(td):
            return td
        d = len(td.batch_size) - self.ndim + self.dim
        return lazy_stack([s.project(p) for s, p in zip(self.specs, td.unbind(d))], d)

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list:
        """The keys every member has (in the first member's order)."""
        common = set(self.specs[0].keys(include_nested, leaves_only))
        for s in self.specs[1:]:
            common &= set(s.keys(include_nested, leaves_only))
        return [k for k in self.specs[0].keys(include_nested, leaves_only) if k in common]

    def __contains__(self, key: Any) -> bool:
        return all(key in s for s in self.specs)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, (str, tuple)) and all(isinstance(k, str) for k in ((index,) if isinstance(index, str) else index)):
            return stack_specs([s[index] for s in self.specs], self.dim)
        if self.dim == 0 and isinstance(index, int):
            return self.specs[index]
        raise IndexError("StackedComposite: index with a key or an integer along a leading stack dim")

    def unbind(self, dim: int = 0) -> tuple:
        if _norm_dim(dim, self.ndim - 1) != self.dim:
            raise ValueError(f"StackedComposite.unbind: only the stack dim {self.dim} can be unbound")
        return self.specs

    def to(self, dest: Any) -> "StackedComposite":
        out = StackedComposite([s.to(dest) for s in self.specs], self.dim)
        out.device = _device(dest)
        return out

    def clone(self) -> "StackedComposite":
        return StackedComposite([s.clone() for s in self.specs], self.dim)

    def __eq__(self, other: Any) -> bool:
        return type(other) is StackedComposite and self.dim == other.dim and len(self.specs) == len(other.specs) and all(a == b for a, b in zip(self.specs, other.specs))

    __hash__ = None

    def __repr__(self) -> str:
        return f"StackedComposite(shape={tuple(self.shape)}, dim={self.dim}, specs={list(self.specs)})"
