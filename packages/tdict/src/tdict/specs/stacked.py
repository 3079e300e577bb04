"""Stacks of specs: ``torch.stack`` of leaf specs or Composites (heterogeneous, multi-agent)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch

from ..lazy import lazy_stack
from .base import TensorSpec, _device, _shape_args, _size
from .choice import Choice
from .composite import Composite, _is_key, _KeyList
from .bounded import Bounded
from .unbounded import Unbounded

__all__ = ["Stacked", "StackedComposite", "index_select_spec", "stack_specs"]


def _family(cls: type) -> type:
    """The class specs must share to be stacked: the Unbounded family (Unbounded, UnboundedContinuous,
    UnboundedDiscrete) counts as one, as TorchRL's (whose ``Unbounded(...)`` builds one of the two), and
    so does the Bounded family (Bounded, BoundedContinuous, BoundedDiscrete)."""
    return Unbounded if issubclass(cls, Unbounded) else Bounded if issubclass(cls, Bounded) else cls


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

    Raises:
        RuntimeError: the specs are of different classes (the Unbounded family counts as one), or leaf
            specs differ in device, dtype or number of dims, or Composites in shape (TorchRL's errors).
    """
    specs = list(specs)
    if not specs:
        raise ValueError("stack: expected a non-empty list of specs")
    if all(s is None for s in specs):  # placeholder entries of stacked Composites stay placeholders
        return None
    first = specs[0]
    family = _family(type(first))
    if any(_family(type(s)) is not family for s in specs):
        raise RuntimeError(
            "Stacking specs cannot occur: Found more than one type of specs in the list "
            f"({sorted({type(s).__name__ for s in specs})})."
        )
    if isinstance(first, Composite):
        if any(s.shape != first.shape for s in specs):
            raise RuntimeError(f"stack: Shapes differ, got {[tuple(s.shape) for s in specs]}")
        d = _norm_dim(dim, first.ndim)
        if all(s == first for s in specs[1:]):
            return first.unsqueeze(d).expand(first.shape[:d] + (len(specs),) + first.shape[d:])
        return StackedComposite(specs, dim=d)
    if isinstance(first, (Stacked, StackedComposite)):
        raise TypeError("stack: stacking already stacked specs is not supported")
    for s in specs[1:]:
        if s.device != first.device:
            raise RuntimeError(f"stack: Devices differ, got {first.device} and {s.device}")
        if s.dtype != first.dtype:
            raise RuntimeError(f"stack: Dtypes differ, got {first.dtype} and {s.dtype}")
        if s.ndim != first.ndim:
            raise RuntimeError(f"stack: Ndims differ, got {first.ndim} and {s.ndim}")
    d = _norm_dim(dim, len(first._batch_shape))
    if isinstance(first, Choice):  # identical choices stack densely, others member by member
        if all(s == first for s in specs[1:]):
            return first.unsqueeze(d).expand(first.shape[:d] + (len(specs),) + first.shape[d:])
        return Stacked(specs, dim=d)
    dense = all(
        s.shape == first.shape
        and s.dtype == first.dtype
        and s.device == first.device
        and s._tensors.keys() == first._tensors.keys()
        and s._extra_eq(first)
        for s in specs[1:]
    )
    if dense:
        return first._rebuild(
            first.shape[:d] + (len(specs),) + first.shape[d:],
            {k: torch.stack([s._tensors[k] for s in specs], d) for k in first._tensors},
        )
    return Stacked(specs, dim=d)


def index_select_spec(spec: Any, dim: int, index: torch.Tensor) -> Any:
    """The spec of ``torch.index_select(value, dim, index)`` for values of ``spec`` (what
    ``torch.index_select(spec, dim, index)`` calls): ``dim`` counts over the whole shape.

    Raises:
        IndexError: ``dim`` is out of range, or an index is outside ``0..shape[dim]-1``.
        ValueError: ``dim`` is the event dim of a one-hot spec (the domain, as TorchRL says).
        NotImplementedError: ``spec`` is a heterogeneous stack.

    Examples:
        >>> import torch
        >>> from tdict.specs import Bounded, OneHot
        >>> torch.index_select(Bounded(0.0, 1.0, shape=(5, 4)), 0, torch.tensor([0, 2])).shape
        torch.Size([2, 4])
        >>> torch.index_select(OneHot(3, shape=(5, 3)), -1, torch.tensor([0]))
        Traceback (most recent call last):
        ...
        ValueError: Cannot index_select along the last dimension of OneHot spec, as it represents the domain.
    """
    name = type(spec).__name__
    if isinstance(spec, (Stacked, StackedComposite)):
        raise NotImplementedError(f"index_select is not supported for {name} specs (heterogeneous stacks)")
    index = torch.as_tensor(index)
    if index.ndim > 1 or index.is_floating_point() or index.dtype is torch.bool:
        raise IndexError(f"index_select on a {name} spec: index must be a 1-D integer tensor, got {index!r}")
    n = len(spec.shape)
    if not -n <= dim < n:
        raise IndexError(f"index_select on a {name} spec: dim {dim} out of range for shape {tuple(spec.shape)}")
    d = dim + n if dim < 0 else dim
    if d >= n - getattr(spec, "_ev", 0):
        raise ValueError(f"Cannot index_select along the last dimension of {name} spec, as it represents the domain.")
    size = spec.shape[d]
    if index.numel() and bool(((index < 0) | (index >= size)).any()):
        raise IndexError(f"index {index.tolist()} is out of bounds for dimension {d} with size {size}")
    return spec[(slice(None),) * d + (index.reshape(-1).long(),)]


def _torch_function(cls, func, types, args=(), kwargs=None):
    """``torch.stack``, ``torch.index_select``, ``torch.squeeze`` and ``torch.unsqueeze`` on specs."""
    kwargs = kwargs or {}
    if func is torch.stack:
        return stack_specs(*args, **kwargs)
    if func is torch.index_select:
        return index_select_spec(*args, **kwargs)
    if func is torch.squeeze:
        return args[0].squeeze(*args[1:], **kwargs)
    if func is torch.unsqueeze:
        return args[0].unsqueeze(*args[1:], **kwargs)
    return NotImplemented


class _TorchStack:
    """Mixin routing ``torch.stack`` (and ``index_select``, ``squeeze``, ``unsqueeze``) on specs here."""

    __torch_function__ = classmethod(_torch_function)


TensorSpec.__torch_function__ = _TorchStack.__torch_function__  # type: ignore[attr-defined]
Composite.__torch_function__ = _TorchStack.__torch_function__  # type: ignore[attr-defined]


def _common(values: list) -> Any:
    """The value every member shares, or ``None``."""
    first = values[0]
    return first if all(v == first for v in values[1:]) else None


def _np_merge(parts: list, axis: int) -> Any:
    """Stack member numpy outputs along ``axis`` (nested dicts merged key by key); ragged ones stay a list."""
    import numpy as np  # only callers of to_numpy need numpy

    if all(isinstance(p, dict) for p in parts):
        keys = list(dict.fromkeys(k for p in parts for k in p))
        return {
            k: _np_merge([p.get(k) for p in parts], axis) if all(k in p for p in parts) else [p.get(k) for p in parts]
            for k in keys
        }
    if all(isinstance(p, np.ndarray) for p in parts) and len({p.shape for p in parts}) == 1:
        return np.stack(parts, axis)
    return list(parts)


class _StackOps:
    """Shape operations shared by :class:`Stacked` and :class:`StackedComposite`.

    Each op maps the members (whose dims are the stack's dims minus the stack dim) and stacks the
    results again with :func:`stack_specs`, so identical results collapse to a dense spec as
    ``torch.stack`` would.
    """

    specs: tuple
    dim: int
    shape: torch.Size

    if TYPE_CHECKING:  # what Stacked and StackedComposite define

        def __init__(self, specs: Sequence[Any], dim: int = 0) -> None: ...

        def to(self, dest: Any) -> Any: ...

    @property
    def ndim(self) -> int:
        """The number of dims of :attr:`shape` (the stack dim included)."""
        return len(self.shape)

    def ndimension(self) -> int:
        """The number of dims of :attr:`shape` (the stack dim included)."""
        return len(self.shape)

    @property
    def stack_dim(self) -> int:
        """The dim the members are stacked along (``dim``)."""
        return self.dim

    def __len__(self) -> int:
        return len(self.specs)

    def _nb(self) -> int:
        """Number of dims that shape ops may touch (leaf event dims excluded)."""
        return self.ndim - getattr(self.specs[0], "_ev", 0)

    def _norm(self, dim: int, n: int, what: str) -> int:
        if not -n <= dim < n:
            raise IndexError(f"{type(self).__name__}.{what}: dim {dim} out of range for shape {tuple(self.shape)}")
        return dim + n if dim < 0 else dim

    def expand(self, *shape: Any) -> Any:
        """Expand to ``shape``: new leading dims, singleton dims grown (``-1`` keeps a dim, as for tensors).

        A stack dim of size 1 may grow (the member is repeated); a heterogeneous dim (``-1`` in
        ``shape``) must stay ``-1`` unless every member can be expanded to the requested size.
        """
        shape = _shape_args(shape)
        name, n = type(self).__name__, self.ndim
        if len(shape) < n:
            raise ValueError(f"{name}.expand: {tuple(shape)} has fewer dims than the spec shape {tuple(self.shape)}")
        lead, tail = shape[: len(shape) - n], shape[len(shape) - n :]
        specs = self.specs
        size = tail[self.dim]
        if size not in (-1, len(specs)):
            if len(specs) != 1:
                raise ValueError(
                    f"{name}.expand: the stack dim {self.dim} has {len(specs)} members and cannot become {size}"
                )
            specs = [specs[0].clone() for _ in range(size)]
        member = lead + torch.Size([s for i, s in enumerate(tail) if i != self.dim])
        out = []
        for i, spec in enumerate(specs):
            try:
                out.append(spec.expand(member))
            except (ValueError, RuntimeError) as err:
                raise ValueError(
                    f"{name}.expand: member {i} of shape {tuple(spec.shape)} cannot expand to {tuple(shape)}: {err}"
                ) from None
        return stack_specs(out, self.dim + len(lead))

    def unsqueeze(self, dim: int) -> Any:
        """Insert a singleton dim at ``dim`` (before or after the stack dim)."""
        dim = self._norm(dim, self._nb() + 1, "unsqueeze")
        if dim > self.dim:
            return stack_specs([s.unsqueeze(dim - 1) for s in self.specs], self.dim)
        return stack_specs([s.unsqueeze(dim) for s in self.specs], self.dim + 1)

    def squeeze(self, dim: int | None = None) -> Any:
        """Remove singleton dims (all, or only ``dim``); squeezing a 1-member stack dim gives the member."""
        if dim is None:
            out = self
            for d in reversed(range(self._nb())):
                if self.shape[d] == 1:
                    out = out.squeeze(d)
            return out
        dim = self._norm(dim, self._nb(), "squeeze")
        if self.shape[dim] != 1:
            return self
        if dim == self.dim:
            return self.specs[0]
        if dim > self.dim:
            return stack_specs([s.squeeze(dim - 1) for s in self.specs], self.dim)
        return stack_specs([s.squeeze(dim) for s in self.specs], self.dim - 1)

    def reshape(self, *shape: Any) -> Any:
        """Reshape the member dims only: ``shape[:dim + 1]`` must equal ``self.shape[:dim + 1]``.

        Members are reshaped one by one (a ``-1`` is inferred per member, so heterogeneous members
        keep their own sizes); reshaping across the stack dim of a heterogeneous stack is impossible
        and raises a ``ValueError``.
        """
        shape = _shape_args(shape)
        d = self.dim
        if len(shape) <= d or tuple(shape[: d + 1]) != tuple(self.shape[: d + 1]):
            raise ValueError(
                f"{type(self).__name__}.reshape: cannot reshape {tuple(self.shape)} to {tuple(shape)}: a heterogeneous "
                f"stack cannot be reshaped across its stack dim {d}; keep the leading dims {tuple(self.shape[: d + 1])} "
                "and reshape only the member dims"
            )
        member = shape[:d] + shape[d + 1 :]
        return stack_specs([s.reshape(member) for s in self.specs], d)

    view = reshape

    def unbind(self, dim: int = 0) -> tuple:
        """Split along ``dim``: the members for the stack dim, else stacks of the members' slices."""
        dim = self._norm(dim, self._nb(), "unbind")
        if dim == self.dim:
            return self.specs
        if self.shape[dim] == -1:
            raise ValueError(
                f"{type(self).__name__}.unbind: dim {dim} differs across members (shape {tuple(self.shape)})"
            )
        parts = [s.unbind(dim - 1 if dim > self.dim else dim) for s in self.specs]
        new = self.dim if dim > self.dim else self.dim - 1
        return tuple(stack_specs(list(p), new) for p in zip(*parts))

    def _index(self, index: Any) -> Any:
        """Basic indexing (ints, slices, and any index along the stack dim)."""
        idx = index if isinstance(index, tuple) else (index,)
        if len(idx) >= 2 and idx[-1] is Ellipsis:  # a trailing `...` changes nothing
            idx = idx[:-1]
        if len(idx) == 2 and idx[0] is Ellipsis and self.dim != self._nb() - 1:
            raise IndexError(
                f"Indexing a {type(self).__name__} with [..., idx] is only permitted if the stack dimension is the "
                f"last dimension (stack dim {self.dim}, shape {tuple(self.shape)})"
            )
        if sum(i is Ellipsis for i in idx) == 1:  # `...` stands for the dims the other components leave out
            at = next(j for j, i in enumerate(idx) if i is Ellipsis)
            fill = self._nb() - (len(idx) - 1)
            if fill >= 0:
                idx = idx[:at] + (slice(None),) * fill + idx[at + 1 :]
        if any(i is Ellipsis or i is None for i in idx) or len(idx) > self._nb():
            raise IndexError(
                f"{type(self).__name__}: unsupported index {index!r} (use ints and slices over the dims {tuple(self.shape[: self._nb()])})"
            )
        idx = idx + (slice(None),) * (self._nb() - len(idx))
        for i, comp in enumerate(idx):
            if i != self.dim and not isinstance(comp, (int, slice)):
                raise IndexError(
                    f"{type(self).__name__}: only ints and slices are supported outside the stack dim {self.dim}, got {comp!r} at dim {i}"
                )
            if self.shape[i] == -1 and comp != slice(None):
                raise IndexError(f"{type(self).__name__}: dim {i} differs across members and cannot be indexed")
        member_idx = idx[: self.dim] + idx[self.dim + 1 :]
        trivial = all(c == slice(None) for c in member_idx)
        sel = idx[self.dim]
        if isinstance(sel, int):
            spec = self.specs[sel]
            return spec if trivial else spec[member_idx]
        chosen = [self.specs[i] for i in torch.arange(len(self.specs))[sel].reshape(-1).tolist()]
        if not chosen:
            raise IndexError(f"{type(self).__name__}: index {index!r} selects no member")
        if not trivial:
            chosen = [s[member_idx] for s in chosen]
        new_dim = sum(1 for c in idx[: self.dim] if not isinstance(c, int))
        return stack_specs(chosen, new_dim)

    def cardinality(self) -> int:
        """The members' common cardinality (batch dims share the value, as for dense specs)."""
        cards = [s.cardinality() for s in self.specs]
        if _common(cards) is None:
            raise NotImplementedError(f"{type(self).__name__}.cardinality: the members' cardinalities differ ({cards})")
        return cards[0]

    def index(self, index: Any, tensor_to_index: Any) -> Any:
        """Not supported here: always raises ``NotImplementedError`` (:class:`Stacked` overrides it)."""
        raise NotImplementedError(f"`index` is not implemented for {type(self).__name__} specs.")

    def cpu(self) -> Any:
        """Move to the CPU: ``self.to("cpu")``."""
        return self.to("cpu")

    def memoize_encode(self, mode: bool = True) -> None:
        """Accepted for TorchRL compatibility (passed to the members); :meth:`encode` caches nothing here."""
        for spec in self.specs:
            spec.memoize_encode(mode)

    def erase_memoize_cache(self) -> None:
        """Accepted for TorchRL compatibility: there is no encode cache to clear."""

    def clear_device_(self) -> Any:
        """Erase the device of Composite members (leaf members keep theirs); returns ``self``."""
        for spec in self.specs:
            spec.clear_device_()
        if isinstance(self, StackedComposite):
            self.device = None
        return self

    def clone(self) -> Any:
        """A stack of the members' clones, along the same dim."""
        return type(self)([s.clone() for s in self.specs], self.dim)

    def __eq__(self, other: Any) -> bool:
        return (
            type(other) is type(self)
            and self.dim == other.dim
            and len(self.specs) == len(other.specs)
            and all(a == b for a, b in zip(self.specs, other.specs))
        )

    def __ne__(self, other: Any) -> bool:
        return not self == other

    __hash__ = None  # pyright: ignore[reportAssignmentType]  (mutable, like TensorSpec)


class Stacked(_StackOps):
    """A stack of leaf specs that differ in shape or parameters (e.g. one action spec per agent).

    ``shape`` holds ``-1`` where the members' sizes differ; ``dtype`` and ``device`` are the first
    member's (as in TorchRL). Values are stacked tensors when the members share a shape; members
    of different shapes are generated, encoded and checked one by one, as lists (inside a
    :class:`StackedComposite` they become a lazily stacked TensorDict). Shape ops (``expand``,
    ``squeeze``, ``unsqueeze``, ``reshape`` of the member dims, ``unbind``, indexing) map the
    members and stack the results again.

    Args:
        specs: the member specs (same class, same number of dims).
        dim: the new dim.

    Examples:
        >>> import torch
        >>> from tdict.specs import Categorical, Stacked, Unbounded
        >>> spec = torch.stack([Categorical(2), Categorical(5)], 0)
        >>> isinstance(spec, Stacked), spec.shape
        (True, torch.Size([2]))
        >>> x = spec.rand((3,))
        >>> x.shape, spec.is_in(x), spec.is_in(torch.tensor([1, 4])), spec.is_in(torch.tensor([4, 1]))
        (torch.Size([3, 2]), True, True, False)
        >>> ragged = torch.stack([Unbounded(shape=(3,)), Unbounded(shape=(4,))], 0)
        >>> ragged.shape, ragged.expand(5, 2, -1).shape, ragged.unsqueeze(-1).shape
        (torch.Size([2, -1]), torch.Size([5, 2, -1]), torch.Size([2, -1, 1]))
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

    def _gen(self, name: str, shape: Any, **kwargs: Any) -> Any:
        lead = _size(shape)
        vals = [getattr(s, name)(lead, **kwargs) for s in self.specs]
        if self._same_shape:
            return torch.stack(vals, len(lead) + self.dim)
        return vals

    def rand(self, shape: Any = (), *, generator: torch.Generator | None = None) -> Any:
        """Stacked samples (a list of per-member samples when the members' shapes differ)."""
        return self._gen("rand", shape, generator=generator)

    def zero(self, shape: Any = ()) -> Any:
        """The members' zeros, stacked (a list when the members' shapes differ); ``zeros`` too."""
        return self._gen("zero", shape)

    def one(self, shape: Any = ()) -> Any:
        """The members' ones, stacked (a list when the members' shapes differ); ``ones`` too."""
        return self._gen("one", shape)

    zeros, ones = zero, one

    def _lead(self, val: Any) -> int:
        """Number of leading dims ``val`` has before the spec dims."""
        return val.ndim - self.ndim if isinstance(val, torch.Tensor) else 0

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
        """Whether every member of ``val`` (along the stack dim, or a list of members) lies in its spec."""
        return self._violation(val) is None

    def assert_is_in(self, val: Any) -> None:
        """Raise ``AssertionError`` naming the first member outside its spec (see :meth:`is_in`)."""
        why = self._violation(val)
        if why is not None:
            raise AssertionError(f"Stacked: value not in spec: {why}")

    def _restack(self, parts: list, d: int) -> Any:
        if all(isinstance(p, torch.Tensor) for p in parts) and len({p.shape for p in parts}) == 1:
            return torch.stack(parts, d)
        return parts

    def project(self, val: Any) -> Any:
        """Each member projected into its spec (stacked again for a tensor, a list for a list).

        Raises:
            ValueError: ``val`` does not have one member per spec along the stack dim.
        """
        parts = self._members(val)
        if parts is None:
            raise ValueError(f"Stacked.project: expected {len(self.specs)} members along the stack dim")
        out = [s.project(v) for s, v in zip(self.specs, parts)]
        if isinstance(val, torch.Tensor):
            return torch.stack(out, val.ndim - self.ndim + self.dim)
        return out

    def encode(self, val: Any, *, ignore_device: bool = False) -> Any:
        """Encode numpy / Python values member by member (a sequence of members, or an array with the stack dim)."""
        if not isinstance(val, (list, tuple)):
            if isinstance(val, torch.Tensor):
                arr = val
            else:
                import numpy as np  # numpy input: numpy is there

                arr = torch.as_tensor(np.array(val))
            if arr.ndim <= self.dim or arr.shape[self.dim] != len(self.specs):
                raise ValueError(
                    f"Stacked.encode: expected {len(self.specs)} members along dim {self.dim}, got shape {tuple(arr.shape)}"
                )
            val = arr.unbind(self.dim)
        elif len(val) != len(self.specs):
            raise ValueError(f"Stacked.encode: expected {len(self.specs)} members, got {len(val)}")
        return self._restack([s.encode(v, ignore_device=ignore_device) for s, v in zip(self.specs, val)], self.dim)

    def to_numpy(self, val: Any, safe: bool | None = None) -> Any:
        """Member-wise ``to_numpy``, stacked along the stack dim (a list when the members' shapes differ)."""
        if safe:
            self.assert_is_in(val)
        parts = self._members(val)
        if parts is None:
            raise ValueError(f"Stacked.to_numpy: expected {len(self.specs)} members along the stack dim")
        return _np_merge([s.to_numpy(v, safe=False) for s, v in zip(self.specs, parts)], self._lead(val) + self.dim)

    def index(self, index: Any, tensor_to_index: Any) -> Any:
        """Member-wise :meth:`index` (tensors unbound along the stack dim, or per-member lists)."""
        parts = self._members(index)
        if parts is None:
            raise ValueError(f"Stacked.index: expected {len(self.specs)} members along the stack dim")
        d = self._lead(index) + self.dim
        targets = (
            list(tensor_to_index) if isinstance(tensor_to_index, (list, tuple)) else list(tensor_to_index.unbind(d))
        )
        return self._restack([s.index(i, t) for s, i, t in zip(self.specs, parts, targets)], d)

    def enumerate(self) -> torch.Tensor:
        """The members' enumerations stacked along ``dim + 1`` (needs a common cardinality and shape)."""
        self.cardinality()
        if not self._same_shape:
            raise NotImplementedError("Stacked.enumerate: the members' shapes differ")
        return torch.stack([s.enumerate() for s in self.specs], self.dim + 1)

    def __getitem__(self, index: Any) -> Any:
        return self._index(index)

    def type_check(self, value: Any, key: Any = None) -> None:
        """Raise ``TypeError`` when ``value``'s dtype (each member's, for a list) is not the spec's."""
        for v in value if isinstance(value, (list, tuple)) else [value]:
            dtype = getattr(v, "dtype", None)
            if dtype is not self.dtype:
                where = "" if key is None else f" (key {key!r})"
                raise TypeError(f"value.dtype={dtype} but Stacked.dtype={self.dtype}{where}")

    def to(self, dest: Any) -> "Stacked":
        """A stack of the members moved to the device ``dest`` or cast to the dtype ``dest`` (``self`` for ``None``)."""
        if dest is None:
            return self
        return Stacked([s.to(dest) for s in self.specs], self.dim)

    def __repr__(self) -> str:
        return f"Stacked(shape={tuple(self.shape)}, dim={self.dim}, specs={list(self.specs)})"


class StackedComposite(_StackOps):
    """A stack of Composites that differ (heterogeneous agents): values are lazily stacked TensorDicts.

    Members share a batch shape; their keys and feature shapes may differ. ``spec[key]`` stacks
    the members' sub-specs (the key must exist in all of them); other indices select members
    (along the stack dim) or index the members' batch dims. ``dtype`` is the dtype every leaf
    shares, else ``None``.

    Args:
        specs: the member Composites.
        dim: the new batch dim.

    Examples:
        >>> import torch
        >>> from tdict.specs import Composite, Unbounded
        >>> a = Composite(obs=Unbounded(shape=(3,)))
        >>> b = Composite(obs=Unbounded(shape=(5,)), extra=Unbounded(shape=()))
        >>> spec = torch.stack([a, b], 0)
        >>> td = spec.rand()
        >>> td.batch_size, td[1]["obs"].shape, spec.is_in(td), spec["obs"].shape
        (torch.Size([2]), torch.Size([5]), True, torch.Size([2, -1]))
        >>> spec.expand(4, 2).rand().batch_size, spec.unsqueeze(-1).shape
        (torch.Size([4, 2]), torch.Size([2, 1]))
    """

    _is_spec = True
    _is_stacked_composite = True

    def __init__(self, specs: Sequence[Composite], dim: int = 0) -> None:
        self.specs = tuple(specs)
        self.dim = dim
        first = self.specs[0]
        self.shape = first.shape[:dim] + (len(self.specs),) + first.shape[dim:]
        self.device = first.device

    __torch_function__ = _TorchStack.__torch_function__

    @property
    def batch_size(self) -> torch.Size:
        """The batch shape (same as ``shape``)."""
        return self.shape

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype every leaf of every member shares, else ``None``."""
        dtypes = {getattr(v, "dtype", None) for s in self.specs for v in s.values(True, True) if v is not None}
        return dtypes.pop() if len(dtypes) == 1 else None

    def _gen(self, name: str, shape: Any, **kwargs: Any) -> Any:
        lead = _size(shape)
        return lazy_stack([getattr(s, name)(lead, **kwargs) for s in self.specs], len(lead) + self.dim)

    def rand(self, shape: Any = (), *, generator: torch.Generator | None = None) -> Any:
        """A lazily stacked TensorDict of batch size ``shape + self.shape``."""
        return self._gen("rand", shape, generator=generator)

    def zero(self, shape: Any = ()) -> Any:
        """A lazy stack of the members' zero TensorDicts, batch size ``shape + self.shape``; ``zeros`` too."""
        return self._gen("zero", shape)

    def one(self, shape: Any = ()) -> Any:
        """A lazy stack of the members' one-filled TensorDicts, batch size ``shape + self.shape``; ``ones`` too."""
        return self._gen("one", shape)

    zeros, ones = zero, one

    def _unbind_td(self, td: Any) -> tuple[int, tuple] | None:
        bs = getattr(td, "batch_size", None)
        if bs is None or len(bs) < self.ndim:
            return None
        d = len(bs) - self.ndim + self.dim
        return (d, td.unbind(d)) if bs[d] == len(self.specs) else None

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
        """Whether ``td`` has one member per spec along the stack dim, each inside its Composite."""
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

    def encode(self, vals: Any, *, ignore_device: bool = False) -> Any:
        """Encode one (nested) dict of numpy / Python values per member into a lazily stacked TensorDict."""
        if hasattr(vals, "unbind") and hasattr(vals, "batch_size"):
            vals = vals.unbind(self.dim)
        if not isinstance(vals, (list, tuple)) or len(vals) != len(self.specs):
            raise ValueError(
                f"StackedComposite.encode: expected a sequence of {len(self.specs)} per-member dicts, got {type(vals).__name__}"
            )
        return lazy_stack([s.encode(v, ignore_device=ignore_device) for s, v in zip(self.specs, vals)], self.dim)

    def to_numpy(self, td: Any, safe: bool | None = None) -> dict:
        """A nested dict of numpy arrays stacked along the stack dim (a list of member arrays where they differ;
        a key only some members have gives ``None`` for the others); checked with :meth:`assert_is_in` first
        when ``safe``."""
        if safe:
            self.assert_is_in(td)
        found = self._unbind_td(td)
        if found is None:
            raise ValueError(
                f"StackedComposite.to_numpy: expected a TensorDict with {len(self.specs)} members along the stack dim"
            )
        d, parts = found
        return _np_merge([s.to_numpy(p, safe=False) for s, p in zip(self.specs, parts)], d)

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list:
        """The keys every member has (in the first member's order)."""
        common = set(self.specs[0].keys(include_nested, leaves_only))
        for s in self.specs[1:]:
            common &= set(s.keys(include_nested, leaves_only))
        return _KeyList(k for k in self.specs[0].keys(include_nested, leaves_only) if k in common)

    def items(self, include_nested: bool = False, leaves_only: bool = False) -> list:
        """``(key, stacked sub-spec)`` for each key of :meth:`keys`."""
        return [(k, self[k]) for k in self.keys(include_nested, leaves_only)]

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> list:
        """The stacked sub-spec of each key of :meth:`keys`."""
        return [self[k] for k in self.keys(include_nested, leaves_only)]

    def __contains__(self, key: Any) -> bool:
        return all(key in s for s in self.specs)

    def __getitem__(self, index: Any) -> Any:
        if _is_key(index):
            return stack_specs([s[index] for s in self.specs], self.dim)
        return self._index(index)

    def set(self, key: Any, spec: Any) -> "StackedComposite":
        """Set ``key`` in every member: ``spec`` (a stacked spec, or a dense one, along the stack dim) is
        unbound and member ``i`` gets part ``i``; ``None`` sets a placeholder in every member. The members
        are changed in place (as TorchRL's).

        Raises:
            TypeError: ``key`` is not a string or a tuple of strings.
            ValueError: ``spec`` does not have one part per member along the stack dim.

        Examples:
            >>> import torch
            >>> from tdict.specs import Composite, Unbounded
            >>> spec = torch.stack([Composite(a=Unbounded(shape=(3,))), Composite(a=Unbounded(shape=(4,)))], 0)
            >>> spec["b"] = torch.stack([Unbounded(shape=(1,)), Unbounded(shape=(2,))], 0)
            >>> spec["b"].shape, spec[1]["b"].shape
            (torch.Size([2, -1]), torch.Size([2]))
        """
        if not _is_key(key):
            raise TypeError(f"StackedComposite.set: keys are strings or tuples of strings, got {key!r}")
        if spec is None:
            parts: Any = [None] * len(self.specs)
        else:
            if not getattr(type(spec), "_is_spec", False) and not isinstance(spec, dict):
                raise TypeError(
                    f"StackedComposite.set: the value for key {key!r} must be a spec, got {type(spec).__name__}"
                )
            if isinstance(spec, dict):
                spec = Composite(spec, shape=self.shape, device=self.device)
            shape = spec.shape
            if len(shape) <= self.dim or shape[self.dim] != len(self.specs):
                raise ValueError(
                    f"StackedComposite.set: the spec for key {key!r} has shape {tuple(shape)}, which needs "
                    f"{len(self.specs)} entries along the stack dim {self.dim}"
                )
            parts = spec.unbind(self.dim)
        for member, part in zip(self.specs, parts):  # checked by each member before anything is written
            if part is not None:
                Composite(shape=member.shape).set("probe", part)
        for member, part in zip(self.specs, parts):
            member.set(key, part)
        return self

    __setitem__ = set

    def __delitem__(self, key: Any) -> None:
        """Delete ``key`` from every member that has it (as TorchRL's, in place).

        Raises:
            KeyError: no member has ``key``.
        """
        if not _is_key(key):
            raise TypeError(f"StackedComposite: keys are strings or tuples of strings, got {key!r}")
        holders = [m for m in self.specs if key in m]
        if not holders:
            raise KeyError(f"StackedComposite: key {key!r} is in none of the {len(self.specs)} members")
        for m in holders:
            del m[key]

    def update(self, other: Any) -> "StackedComposite":
        """Set every entry of ``other`` (a dict, Composite or StackedComposite) in the members; an entry that
        is a Composite in both is merged member by member. Returns ``self``."""
        for key, item in other.items():
            if key in self and isinstance(item, (dict, Composite, StackedComposite)):
                parts = item.unbind(self.dim) if not isinstance(item, dict) else [item] * len(self.specs)
                for member, part in zip(self.specs, parts):
                    member[key].update(part)
                continue
            self[key] = item
        return self

    def type_check(self, value: Any, selected_keys: Any = None) -> None:
        """Check the dtypes of ``value`` (a lazily stacked TensorDict, or a stacked tensor with
        ``selected_keys`` its key) member by member, raising ``TypeError`` at the first mismatch."""
        if selected_keys is None:
            if isinstance(value, torch.Tensor):
                raise ValueError("StackedComposite.type_check: a tensor value needs its key (selected_keys)")
            found = self._unbind_td(value)
            if found is None:
                raise ValueError(
                    f"StackedComposite.type_check: expected a TensorDict with {len(self.specs)} members along the stack dim"
                )
            for member, part in zip(self.specs, found[1]):
                member.type_check(part)
            return
        keys = [selected_keys] if isinstance(selected_keys, str) else list(selected_keys)
        if isinstance(value, torch.Tensor):
            if len(keys) != 1:
                raise ValueError("StackedComposite.type_check: a tensor value needs exactly one key")
            value = {keys[0]: value}
        for key in keys:
            if key in self:
                self[key].type_check(value[key], key)

    def empty(self) -> "StackedComposite":
        """A stack of the members' empty copies (same shapes and devices)."""
        return StackedComposite([m.empty() for m in self.specs], self.dim)

    def to(self, dest: Any) -> "StackedComposite":
        """A stack of the members moved to the device ``dest`` or cast to the dtype ``dest`` (``self`` for ``None``)."""
        if dest is None:
            return self
        out = StackedComposite([s.to(dest) for s in self.specs], self.dim)
        out.device = self.device if isinstance(dest, torch.dtype) else _device(dest)
        return out

    def __repr__(self) -> str:
        return f"StackedComposite(shape={tuple(self.shape)}, dim={self.dim}, specs={list(self.specs)})"
