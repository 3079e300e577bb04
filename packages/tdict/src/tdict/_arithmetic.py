"""Element-wise arithmetic, comparisons and reductions over the leaves of a collection."""
from __future__ import annotations

import operator
from collections import namedtuple
from typing import Any, Callable

import torch

from ._utils import NO_DEFAULT, normalize_dims

_FLOAT_ONLY = frozenset({"mean", "nanmean", "std", "var"})
ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


def _is_collection(obj: Any) -> bool:
    return getattr(type(obj), "_is_tensor_collection", False)


def _compare_payloads(src: Any, out: Any, other: Any, op: Callable) -> None:
    """Replace the non-tensor entries that ``_binary`` copied into ``out`` by their comparison."""
    for key, value in src._items_raw():
        if isinstance(value, torch.Tensor):
            continue
        other_value = other._get_str(key, None) if _is_collection(other) else other
        if value._is_non_tensor:
            equal = value == other_value
            out._set_str(key, equal if op is operator.eq else ~equal, inplace=False, validated=False, ignore_lock=True)
        elif value._is_lazy:
            out._set_str(key, value._compare(other_value, op), inplace=False, validated=True, ignore_lock=True)
        else:
            _compare_payloads(value, out._get_str(key, None), other_value, op)


class ArithmeticMixin:
    """``+ - * / ** == < ...``, their in-place forms, unary math, and reductions."""

    __slots__ = ()
    __hash__ = object.__hash__

    # ---- core helpers
    def _binary(self, other: Any, op: Callable) -> Any:
        if _is_collection(other):
            def pair(v, o):
                return op(v, o)

            return self._apply(pair, (other,), None, (), None, NO_DEFAULT, NO_DEFAULT, False, NO_DEFAULT, None, False, {})
        return self._apply(lambda v: op(v, other), (), None, (), None, NO_DEFAULT, NO_DEFAULT, False, NO_DEFAULT, None, False, {})

    def _compare(self, other: Any, op: Callable) -> Any:
        """``==``/``!=``: tensors element-wise, non-tensor payloads by value (a batch-shaped bool)."""
        out = self._binary(other, op)
        _compare_payloads(self, out, other, op)
        return out

    def _binary_(self, other: Any, foreach: Callable, fallback: Callable) -> Any:
        """In-place op: one fused ``torch._foreach_*_`` call over all leaves when possible."""
        keys, leaves = self._tensor_leaves()
        if _is_collection(other):
            others = [other.get(k) for k in keys]
            foreach(leaves, others)
        elif isinstance(other, torch.Tensor) and other.dim() > 0:
            for leaf in leaves:
                fallback(leaf, other)
        else:
            foreach(leaves, other)
        return self

    def _tensor_leaves(self) -> tuple[list, list]:
        keys, leaves = [], []
        for key, value in self.items(True, True):
            if isinstance(value, torch.Tensor):
                keys.append(key)
                leaves.append(value)
        return keys, leaves

    def _unary(self, fn: Callable) -> Any:
        return self._apply(fn, (), None, (), None, NO_DEFAULT, NO_DEFAULT, False, NO_DEFAULT, None, False, {})

    # ---- reductions
    def _reduce(self, name: str, dim: Any, keepdim: bool, reduce: bool | None, **kwargs) -> Any:
        fn = getattr(torch, name)
        if name in _FLOAT_ONLY:  # integer and bool leaves are averaged as floats
            raw = fn
            fn = lambda v, **kw: raw(v if v.is_floating_point() or v.is_complex() else v.float(), **kw)  # noqa: E731
        if dim is NO_DEFAULT or dim is None:
            if reduce:
                leaves = [v.reshape(-1) for v in self._tensor_leaves()[1]]
                flat = torch.cat([v.to(torch.promote_types(leaves[0].dtype, leaves[-1].dtype)) for v in leaves]) if leaves else torch.zeros(0)
                return fn(flat, **kwargs)
            return self._apply(lambda v: fn(v, **kwargs), (), None, (), torch.Size(()), NO_DEFAULT, None, False, NO_DEFAULT, None, False, {})
        dims = normalize_dims(dim, self.batch_dims)
        if keepdim:
            bs = torch.Size(1 if i in dims else s for i, s in enumerate(self.batch_size))
        else:
            bs = torch.Size(s for i, s in enumerate(self.batch_size) if i not in dims)
        if reduce:
            raise ValueError(f"{name}: reduce=True reduces over every leaf and cannot take dim={dim}.")
        axis = dims[0] if len(dims) == 1 else dims  # some reductions (prod, all) take one int only
        return self._apply(lambda v: fn(v, dim=axis, keepdim=keepdim, **kwargs), (), None, (), bs, NO_DEFAULT, None, False, NO_DEFAULT, None, False, {})

    def sum(self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, dtype: torch.dtype | None = None, reduce: bool | None = None) -> Any:
        """Sum over batch ``dim`` (all elements of each leaf if omitted; one scalar if ``reduce``)."""
        return self._reduce("sum", dim, keepdim, reduce, **({"dtype": dtype} if dtype else {}))

    def nansum(self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, dtype: torch.dtype | None = None, reduce: bool | None = None) -> Any:
        return self._reduce("nansum", dim, keepdim, reduce, **({"dtype": dtype} if dtype else {}))

    def mean(self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, dtype: torch.dtype | None = None, reduce: bool | None = None) -> Any:
        return self._reduce("mean", dim, keepdim, reduce, **({"dtype": dtype} if dtype else {}))

    def nanmean(self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, dtype: torch.dtype | None = None, reduce: bool | None = None) -> Any:
        return self._reduce("nanmean", dim, keepdim, reduce, **({"dtype": dtype} if dtype else {}))

    def std(self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, correction: int = 1, reduce: bool | None = None) -> Any:
        return self._reduce("std", dim, keepdim, reduce, correction=correction)

    def var(self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, correction: int = 1, reduce: bool | None = None) -> Any:
        return self._reduce("var", dim, keepdim, reduce, correction=correction)

    def prod(self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, dtype: torch.dtype | None = None, reduce: bool | None = None) -> Any:
        if dim is not NO_DEFAULT and dim is not None:
            dims = normalize_dims(dim, self.batch_dims)
            out = self
            for d in sorted(dims, reverse=True):  # torch.prod takes a single dim
                out = out._reduce("prod", d, keepdim, reduce, **({"dtype": dtype} if dtype else {}))
            return out
        return self._reduce("prod", dim, keepdim, reduce, **({"dtype": dtype} if dtype else {}))

    def _minmax(self, name: str, dim: Any, keepdim: bool, reduce: bool | None, return_indices: bool) -> Any:
        if dim is NO_DEFAULT or dim is None:
            return self._reduce("amax" if name == "max" else "amin", None, keepdim, reduce)
        if not isinstance(dim, int):
            raise TypeError(f"{name}: dim must be an int when indices are returned, got {dim!r}.")
        if not return_indices:
            return self._reduce("amax" if name == "max" else "amin", dim, keepdim, reduce)
        (d,) = normalize_dims(dim, self.batch_dims)
        fn = getattr(torch, name)
        bs = torch.Size(1 if i == d else s for i, s in enumerate(self.batch_size)) if keepdim else self.batch_size[:d] + self.batch_size[d + 1 :]
        values = self._apply(lambda v: fn(v, dim=d, keepdim=keepdim).values, (), None, (), bs, NO_DEFAULT, None, False, NO_DEFAULT, None, False, {})
        indices = self._apply(lambda v: fn(v, dim=d, keepdim=keepdim).indices, (), None, (), bs, NO_DEFAULT, None, False, NO_DEFAULT, None, False, {})
        return ValuesIndices(values, indices)

    def max(self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, reduce: bool | None = None, return_indices: bool = True) -> Any:
        """Max over batch ``dim``: a ``(values, indices)`` pair of collections, like ``torch.max``."""
        return self._minmax("max", dim, keepdim, reduce, return_indices)

    def min(self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, reduce: bool | None = None, return_indices: bool = True) -> Any:
        return self._minmax("min", dim, keepdim, reduce, return_indices)

    def amax(self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, reduce: bool | None = None) -> Any:
        return self._reduce("amax", dim, keepdim, reduce)

    def amin(self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, reduce: bool | None = None) -> Any:
        return self._reduce("amin", dim, keepdim, reduce)

    def norm(self, *, p: float = 2.0, reduce: bool | None = None) -> Any:
        """The ``p``-norm of each leaf (or of all leaves together when ``reduce``)."""
        if reduce:
            leaves = self._tensor_leaves()[1]
            return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(v.float(), p) for v in leaves]), p)
        return self._apply(lambda v: torch.linalg.vector_norm(v.float() if not v.is_floating_point() else v, p), (), None, (), torch.Size(()), NO_DEFAULT, None, False, NO_DEFAULT, None, False, {})

    def all(self, dim: Any = NO_DEFAULT) -> Any:
        """``bool`` over every leaf, or a collection reduced along batch ``dim``."""
        if dim is NO_DEFAULT or dim is None:
            return all(bool(v.all()) for v in self._tensor_leaves()[1])
        return self._reduce("all", dim, False, None)

    def any(self, dim: Any = NO_DEFAULT) -> Any:
        if dim is NO_DEFAULT or dim is None:
            return any(bool(v.any()) for v in self._tensor_leaves()[1])
        return self._reduce("any", dim, False, None)

    def cumsum(self, dim: int) -> Any:
        (d,) = normalize_dims(dim, self.batch_dims)
        return self._unary(lambda v: torch.cumsum(v, d))

    def cumprod(self, dim: int) -> Any:
        (d,) = normalize_dims(dim, self.batch_dims)
        return self._unary(lambda v: torch.cumprod(v, d))

    def isfinite(self) -> Any:
        return self._unary(torch.isfinite)

    def isnan(self) -> Any:
        return self._unary(torch.isnan)

    def allclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
        return all(torch.allclose(v, other.get(k), rtol=rtol, atol=atol, equal_nan=equal_nan) for k, v in zip(*self._tensor_leaves()))

    def add(self, other: Any, *, alpha: float | None = None) -> Any:
        return self._binary(other, operator.add if alpha is None else (lambda a, b: torch.add(a, b, alpha=alpha)))

    def add_(self, other: Any, *, alpha: float | None = None) -> Any:
        if alpha is not None:
            other = other * alpha
        return self._binary_(other, torch._foreach_add_, torch.Tensor.add_)

    def lerp(self, end: Any, weight: Any) -> Any:
        return self._binary(end, lambda a, b: torch.lerp(a, b, weight))

    def lerp_(self, end: Any, weight: Any) -> Any:
        return self._binary_(end, lambda xs, ys: torch._foreach_lerp_(xs, ys, weight), lambda x, y: x.lerp_(y, weight))

    def clamp(self, min: Any = None, max: Any = None) -> Any:
        return self._unary(lambda v: v.clamp(min, max))

    def clamp_(self, min: Any = None, max: Any = None) -> Any:
        for leaf in self._tensor_leaves()[1]:
            leaf.clamp_(min, max)
        return self

    def maximum(self, other: Any) -> Any:
        return self._binary(other, torch.maximum)

    def minimum(self, other: Any) -> Any:
        return self._binary(other, torch.minimum)


_BINARY = {
    "__add__": operator.add, "__sub__": operator.sub, "__mul__": operator.mul, "__truediv__": operator.truediv,
    "__floordiv__": operator.floordiv, "__mod__": operator.mod, "__pow__": operator.pow,
    "__and__": operator.and_, "__or__": operator.or_, "__xor__": operator.xor,
    "__lt__": operator.lt, "__le__": operator.le,
    "__gt__": operator.gt, "__ge__": operator.ge,
    "__radd__": lambda a, b: b + a, "__rsub__": lambda a, b: b - a, "__rmul__": lambda a, b: b * a,
    "__rtruediv__": lambda a, b: b / a, "__rpow__": lambda a, b: b**a,
    "sub": operator.sub, "mul": operator.mul, "div": operator.truediv, "pow": operator.pow,
}
_INPLACE = {
    # name: (foreach op, per-tensor fallback for broadcasting tensors)
    "sub_": (torch._foreach_sub_, torch.Tensor.sub_), "mul_": (torch._foreach_mul_, torch.Tensor.mul_),
    "div_": (torch._foreach_div_, torch.Tensor.div_), "pow_": (torch._foreach_pow_, torch.Tensor.pow_),
}
_INPLACE_ALIASES = {"__iadd__": "add_", "__isub__": "sub_", "__imul__": "mul_", "__itruediv__": "div_", "__ipow__": "pow_"}
_UNARY = ["abs", "neg", "exp", "log", "sqrt", "sigmoid", "tanh", "sign", "reciprocal", "sin", "cos", "floor", "ceil", "round", "log1p", "expm1", "logical_not"]


def _install() -> None:
    for name, op in _BINARY.items():
        setattr(ArithmeticMixin, name, lambda self, other, _op=op: self._binary(other, _op))
    for name, (foreach, fallback) in _INPLACE.items():
        setattr(ArithmeticMixin, name, lambda self, other, _f=foreach, _b=fallback: self._binary_(other, _f, _b))
    for alias, name in _INPLACE_ALIASES.items():
        setattr(ArithmeticMixin, alias, lambda self, other, _n=name: getattr(self, _n)(other))
    for name in _UNARY:
        fn = getattr(torch, name)
        setattr(ArithmeticMixin, name, lambda self, _fn=fn: self._unary(_fn))
        foreach_ = getattr(torch, f"_foreach_{name}_", None)
        if foreach_ is not None:
            setattr(ArithmeticMixin, name + "_", lambda self, _f=foreach_: (_f(self._tensor_leaves()[1]), self)[1])
        else:
            setattr(ArithmeticMixin, name + "_", lambda self, _n=name: ([getattr(v, _n + "_")() for v in self._tensor_leaves()[1]], self)[1])
    ArithmeticMixin.__eq__ = lambda self, other: self._compare(other, operator.eq)
    ArithmeticMixin.__ne__ = lambda self, other: self._compare(other, operator.ne)
    ArithmeticMixin.__neg__ = lambda self: self._unary(torch.neg)
    ArithmeticMixin.__abs__ = lambda self: self._unary(torch.abs)
    ArithmeticMixin.__invert__ = lambda self: self._unary(torch.bitwise_not)


_install()
