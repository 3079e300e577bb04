"""Element-wise arithmetic, comparisons, unary math and dtype casts over the leaves of a collection.

Reductions and scans live in :mod:`tdict._core.reductions`.
"""

# Mixin of TensorDictBase: the attributes it reads (batch_size, get, _items_raw...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

import numbers
import operator
from typing import Any, Callable

import torch
from torch import _VF  # torch._foreach_* (the same functions; pyright knows them from here)

from .locking import keeps_lock
from .utils import NO_DEFAULT


def _is_collection(obj: Any) -> bool:
    return getattr(type(obj), "_is_tensor_collection", False)


def _align(operand: torch.Tensor, feature_dims: int) -> torch.Tensor:
    """View a batch-aligned operand with singleton dims for a leaf's ``feature_dims``."""
    return operand.reshape(operand.shape + (1,) * feature_dims) if feature_dims > 0 else operand


_UNCOMPARABLE = object()


def comparison_operand(other: Any) -> Any:
    """What ``==`` / ``!=`` compare a collection with: a dict becomes a (batch-less) TensorDict;
    anything but a collection, a number or a tensor gives ``_UNCOMPARABLE`` (``td == "z"`` is
    then ``False`` and ``td != "z"`` ``True``, as in tensordict 0.14)."""
    if isinstance(other, dict):
        from ..tensordict import TensorDict

        return TensorDict(other)
    if _is_collection(other) or isinstance(other, (numbers.Number, torch.Tensor)):
        return other
    return _UNCOMPARABLE


def paired_leaves(td: Any, others: list) -> tuple:
    """``td``'s tensor leaves and, for each of ``others``, the leaves under the same keys (a list
    per collection). A lazy stack inside ``td`` pairs member by member, so that keys only some
    members hold are found; every key is checked before anything is computed."""
    out: tuple = tuple([] for _ in range(len(others) + 1))
    _pair(td, others, out, ())
    return out


def _pair(td: Any, others: list, out: tuple, path: tuple) -> None:
    if td._is_lazy and not td._is_non_tensor:
        splits = []
        for other in others:
            parts = td._split_collection(other)
            if parts is None:
                raise RuntimeError(
                    f"key {path or '<root>'!r}: the other collection's batch size {list(other.batch_size)} does not start with {list(td.batch_size)}."
                )
            splits.append(parts)
        for j, member in enumerate(td.tensordicts):
            _pair(member, [parts[j] for parts in splits], out, path)
        return
    for key, value in td._items_raw():
        if not isinstance(value, torch.Tensor) and value._is_non_tensor:
            continue
        full = path + (key,)
        matches = []
        for other in others:
            match = other._get_str(key, None) if _is_collection(other) else None
            if match is None or isinstance(match, torch.Tensor) != isinstance(value, torch.Tensor):
                raise KeyError(
                    f"key {full!r}: the other collection has no {'tensor' if isinstance(value, torch.Tensor) else 'sub-collection'} there."
                )
            matches.append(match)
        if isinstance(value, torch.Tensor):
            out[0].append(value)
            for i, match in enumerate(matches):
                out[i + 1].append(match)
        else:
            _pair(value, matches, out, full)


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


def _logical_payload(value: Any, other: Any, op: Callable) -> Any:
    """``op`` (``& | ^``) of two non-tensor entries' payloads: a result that is a tensor is kept, any other
    gives a bool tensor of the batch shape (one verdict per element of a stack)."""
    if type(value).__name__ == "NonTensorData" and type(other).__name__ == "NonTensorData":
        result = op(value.data, other.data)
        if isinstance(result, torch.Tensor):
            return result
        return torch.full(value.batch_size, bool(result), dtype=torch.bool, device=value.device)

    def combine(a: Any, b: Any) -> Any:
        return [combine(x, y) for x, y in zip(a, b)] if type(a) is list else bool(op(a, b))

    mine, theirs = value.tolist(), other.tolist()
    return torch.tensor(combine(mine, theirs), dtype=torch.bool, device=value.device).reshape(value.batch_size)


def _logical_payloads(src: Any, out: Any, other: Any, op: Callable) -> None:
    """Replace the non-tensor entries that ``_binary`` copied into ``out`` by ``op`` of the payloads
    (``td | other``, ``td ^ other``, ``td & other`` with another collection, as tensordict does)."""
    for key, value in src._items_raw():
        if isinstance(value, torch.Tensor) or value._is_lazy and not value._is_non_tensor:
            continue
        other_value = other._get_str(key, None)
        if other_value is None or isinstance(other_value, torch.Tensor):
            continue
        if value._is_non_tensor:
            if other_value._is_non_tensor and other_value.batch_size == value.batch_size:
                result = _logical_payload(value, other_value, op)
                out._set_str(key, result, inplace=False, validated=False, ignore_lock=True)
        elif not other_value._is_non_tensor:
            _logical_payloads(value, out._get_str(key, None), other_value, op)


class ArithmeticMixin:
    """``+ - * / ** == < ...``, their in-place forms, unary math, dtype casts (and, inherited, reductions)."""

    __slots__ = ()
    __hash__ = object.__hash__

    # ---- core helpers
    def _binary(self, other: Any, op: Callable, default: Any = NO_DEFAULT) -> Any:
        if _is_collection(other):
            if default is not NO_DEFAULT:
                return self._binary_with_default(other, op, default)
            mine = set(self.keys(True, True))
            extra = [k for k in other.keys(True, True) if k not in mine]
            if extra:
                raise KeyError(
                    f"the other collection has keys {extra} that this one lacks: pass default=<value> to fill the "
                    "missing side, or default='intersection' to keep the common keys."
                )

            def pair(v, o):
                return op(v, o)

            return self._apply(
                pair, (other,), None, (), None, NO_DEFAULT, NO_DEFAULT, False, NO_DEFAULT, None, False, {}
            )
        if isinstance(other, torch.Tensor) and other.dim():
            other, n = self._batch_operand(other), self.batch_dims
            return self._apply(
                lambda v: op(v, _align(other, v.dim() - n)),
                (),
                None,
                (),
                None,
                NO_DEFAULT,
                NO_DEFAULT,
                False,
                NO_DEFAULT,
                None,
                False,
                {},
            )
        return self._apply(
            lambda v: op(v, other), (), None, (), None, NO_DEFAULT, NO_DEFAULT, False, NO_DEFAULT, None, False, {}
        )

    def _binary_with_default(self, other: Any, op: Callable, default: Any) -> Any:
        """``op`` against a collection whose tensor keys differ from ``self``'s: ``default="intersection"``
        keeps the common keys only; any other value stands in for the side that lacks a key (tensordict's
        ``default=`` of the arithmetic methods)."""
        mine = set(self.keys(True, True))
        theirs = set(other.keys(True, True))
        if isinstance(default, str):
            if default != "intersection":
                raise ValueError(f"default: expected 'intersection' or a value, got the string {default!r}.")
            common = [k for k in self.keys(True, True) if k in theirs]
            return self.select(*common)._binary(other.select(*common), op)
        left = self.copy()
        for key in (k for k in other.keys(True, True) if k not in mine):
            value = other.get(key)
            left.set(key, torch.as_tensor(default, device=value.device).expand(value.shape))
        return left._apply(op, (other,), None, (), None, NO_DEFAULT, NO_DEFAULT, False, default, None, False, {})

    def _batch_operand(self, other: torch.Tensor) -> torch.Tensor:
        """A tensor operand lines up with the batch dims, as in tensordict: ``td * mask`` with a
        batch-shaped ``mask`` scales every leaf, whatever its feature dims."""
        bs = self.batch_size
        try:
            fits = other.dim() <= len(bs) and torch.broadcast_shapes(other.shape, bs) == bs
        except RuntimeError:
            fits = False
        if not fits:
            raise RuntimeError(
                f"A tensor operand must broadcast to the batch size {list(bs)}; got shape {list(other.shape)}."
            )
        return other

    def _logical(self, other: Any, op: Callable) -> Any:
        """``& | ^``: tensors element-wise; against another collection, non-tensor payloads too (a
        batch-shaped bool, see :func:`_logical_payloads`)."""
        out = self._binary(other, op)
        if _is_collection(other):
            _logical_payloads(self, out, other, op)
        return out

    def _compare(self, other: Any, op: Callable) -> Any:
        """``==``/``!=``: tensors element-wise; non-tensor payloads by value (a batch-shaped bool)
        against another collection, and passed through against a number or a tensor (tensordict
        0.14: ``(td == 0).all()`` looks at the tensors only)."""
        out = self._binary(other, op)
        if _is_collection(other):
            _compare_payloads(self, out, other, op)
        return out

    def _binary_(self, other: Any, foreach: Callable, fallback: Callable) -> Any:
        """In-place op: one fused ``torch._foreach_*_`` call over all leaves when possible."""
        if _is_collection(other):
            leaves, others = paired_leaves(self, [other])
            if leaves:  # torch._foreach_* refuses an empty list
                foreach(leaves, others)
            return self
        leaves = self._tensor_leaves()[1]
        if not leaves:  # torch._foreach_* refuses an empty list
            return self
        if isinstance(other, torch.Tensor) and other.dim() > 0:
            other, n = self._batch_operand(other), self.batch_dims
            for leaf in leaves:
                fallback(leaf, _align(other, leaf.dim() - n))
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

    @keeps_lock
    def isfinite(self) -> Any:
        """Bool leaves: ``torch.isfinite`` of every tensor leaf."""
        return self._unary(torch.isfinite)

    @keeps_lock
    def isnan(self) -> Any:
        """Bool leaves: ``torch.isnan`` of every tensor leaf."""
        return self._unary(torch.isnan)

    def allclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
        """True when every tensor leaf is ``torch.allclose`` to the leaf under the same key of ``other``."""
        leaves, others = paired_leaves(self, [other])
        return all(torch.allclose(v, o, rtol=rtol, atol=atol, equal_nan=equal_nan) for v, o in zip(leaves, others))

    @keeps_lock
    def add(self, other: Any, *, alpha: float | None = None, default: Any = NO_DEFAULT) -> Any:
        """``self + alpha * other`` leaf by leaf (``other``: a number, a tensor broadcast over the batch dims, or
        a collection with the same keys; with other keys, ``default="intersection"`` keeps the common ones and a
        value stands in for a missing side)."""
        op = operator.add if alpha is None else (lambda a, b: torch.add(a, b, alpha=alpha))
        return self._binary(other, op, default)

    def add_(self, other: Any, *, alpha: float | None = None) -> Any:
        """In place :meth:`add` (one fused ``torch._foreach_add_`` call); returns ``self``."""
        if alpha is not None:
            other = other * alpha
        return self._binary_(other, _VF._foreach_add_, torch.Tensor.add_)

    @keeps_lock
    def lerp(self, end: Any, weight: Any) -> Any:
        """``torch.lerp(leaf, end, weight)`` leaf by leaf (``end`` as ``other`` in :meth:`add`)."""
        return self._binary(end, lambda a, b: torch.lerp(a, b, weight))

    def lerp_(self, end: Any, weight: Any) -> Any:
        """In place :meth:`lerp`; returns ``self``."""
        return self._binary_(end, lambda xs, ys: _VF._foreach_lerp_(xs, ys, weight), lambda x, y: x.lerp_(y, weight))

    def clamp(self, min: Any = None, max: Any = None) -> Any:
        """Clamp every leaf; a tensor bound lines up with the batch dims (one bound per batch element),
        a collection bound gives one bound per leaf. The result is not locked (as in tensordict)."""
        if _is_bound_operand(min) or _is_bound_operand(max):
            out = self if min is None else self._binary(min, torch.clamp_min)
            return out if max is None else out._binary(max, torch.clamp_max)
        return self._unary(lambda v: v.clamp(min, max))

    def clamp_(self, min: Any = None, max: Any = None) -> Any:
        """In place :meth:`clamp`; returns ``self``."""
        if _is_bound_operand(min) or _is_bound_operand(max):
            if min is not None:
                self.clamp_min_(min)
            return self if max is None else self.clamp_max_(max)
        for leaf in self._tensor_leaves()[1]:
            leaf.clamp_(min, max)
        return self

    @keeps_lock
    def maximum(self, other: Any) -> Any:
        """Element-wise ``torch.maximum`` (``other``: a number, a tensor broadcast over the batch dims, or a collection with the same keys)."""
        return self._binary(other, torch.maximum)

    @keeps_lock
    def minimum(self, other: Any) -> Any:
        """Element-wise ``torch.minimum`` (``other``: a number, a tensor broadcast over the batch dims, or a collection with the same keys)."""
        return self._binary(other, torch.minimum)

    def maximum_(self, other: Any) -> Any:
        """In place :meth:`maximum`; returns ``self``."""
        return self._binary_(other, _VF._foreach_maximum_, lambda x, y: torch.maximum(x, y, out=x))

    def minimum_(self, other: Any) -> Any:
        """In place :meth:`minimum`; returns ``self``."""
        return self._binary_(other, _VF._foreach_minimum_, lambda x, y: torch.minimum(x, y, out=x))

    @keeps_lock
    def clamp_min(self, other: Any, *, default: Any = NO_DEFAULT) -> Any:
        """Element-wise ``max(self, other)`` (``other``: a number, a tensor or a collection; ``default`` as in :meth:`add`)."""
        return self._binary(other, torch.clamp_min, default)

    @keeps_lock
    def clamp_max(self, other: Any, *, default: Any = NO_DEFAULT) -> Any:
        """Element-wise ``min(self, other)`` (``other``: a number, a tensor or a collection; ``default`` as in :meth:`add`)."""
        return self._binary(other, torch.clamp_max, default)

    def clamp_min_(self, other: Any) -> Any:
        """In place :meth:`clamp_min`; returns ``self``."""
        return self._binary_(other, _VF._foreach_clamp_min_, torch.Tensor.clamp_min_)

    def clamp_max_(self, other: Any) -> Any:
        """In place :meth:`clamp_max`; returns ``self``."""
        return self._binary_(other, _VF._foreach_clamp_max_, torch.Tensor.clamp_max_)

    @keeps_lock
    def logical_and(self, other: Any) -> Any:
        """Element-wise ``torch.logical_and`` (``other``: a number, a tensor broadcast over the batch dims, or a collection with the same keys)."""
        if not _is_collection(other) and not isinstance(other, torch.Tensor):
            other = _scalar_tensor(other, "logical_and", "other")
        return self._binary(other, torch.logical_and)

    @keeps_lock
    def bitwise_and(self, other: Any) -> Any:
        """Element-wise ``torch.bitwise_and`` (``other``: a number, a tensor broadcast over the batch dims, or a collection with the same keys)."""
        return self._binary(other, torch.bitwise_and)

    @keeps_lock
    def rsub(self, other: Any, *, alpha: float | None = None) -> Any:
        """``other - alpha * self``, as :func:`torch.rsub`."""
        if alpha is None:
            return self._binary(other, torch.rsub)
        return self._binary(other, lambda a, b: torch.rsub(a, b, alpha=alpha))

    # ---- fused multiply-add: self + value * other1 (* or /) other2
    def _ternary(self, other1: Any, other2: Any, op: Callable, name: str) -> Any:
        is1, is2 = _is_collection(other1), _is_collection(other2)
        if not is1 and not isinstance(other1, torch.Tensor):
            other1 = _scalar_tensor(other1, name, "other1")
        if not is2 and not isinstance(other2, torch.Tensor):
            other2 = _scalar_tensor(other2, name, "other2")
        if is1 and is2:
            fn, others = op, (other1, other2)
        elif is1:
            fn, others = (lambda v, a: op(v, a, other2)), (other1,)
        elif is2:
            fn, others = (lambda v, b: op(v, other1, b)), (other2,)
        else:
            fn, others = (lambda v: op(v, other1, other2)), ()
        return self._apply(fn, others, None, (), None, NO_DEFAULT, NO_DEFAULT, False, NO_DEFAULT, None, False, {})

    def _ternary_(self, other1: Any, other2: Any, value: Any, foreach: Callable, fallback: Callable, name: str) -> Any:
        if not self._is_lazy and _is_collection(other1) and _is_collection(other2):
            leaves, firsts, seconds = paired_leaves(self, [other1, other2])
            if leaves:  # one fused call over all leaves
                foreach(leaves, firsts, seconds, value=value)
            return self
        # leaf by leaf (a lazy stack's members get their slice of a collection operand); the
        # structure ``_ternary`` builds around the updated leaves is dropped
        self._ternary(other1, other2, lambda v, a, b: fallback(v, a, b, value=value), name)
        return self

    @keeps_lock
    def addcmul(self, other1: Any, other2: Any, *, value: float = 1) -> Any:
        """``self + value * other1 * other2`` (operands: collections, tensors or numbers).

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.ones(2), batch_size=[2])
            >>> td.addcmul(td, td * 3, value=2)["a"]
            tensor([7., 7.])
        """
        return self._ternary(other1, other2, lambda v, a, b: torch.addcmul(v, a, b, value=value), "addcmul")

    def addcmul_(self, other1: Any, other2: Any, *, value: float = 1) -> Any:
        """In place :meth:`addcmul` (one fused ``torch._foreach_addcmul_`` call when both operands are collections)."""
        return self._ternary_(other1, other2, value, _VF._foreach_addcmul_, torch.Tensor.addcmul_, "addcmul_")

    @keeps_lock
    def addcdiv(self, other1: Any, other2: Any, value: float = 1) -> Any:
        """``self + value * other1 / other2`` (operands: collections, tensors or numbers)."""
        return self._ternary(other1, other2, lambda v, a, b: torch.addcdiv(v, a, b, value=value), "addcdiv")

    def addcdiv_(self, other1: Any, other2: Any, *, value: float = 1) -> Any:
        """In place :meth:`addcdiv` (one fused ``torch._foreach_addcdiv_`` call when both operands are collections)."""
        return self._ternary_(other1, other2, value, _VF._foreach_addcdiv_, torch.Tensor.addcdiv_, "addcdiv_")

    # ---- dtypes
    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype shared by every tensor leaf; ``None`` if they differ or there is none."""
        dtype = None
        for v in self._tensor_leaves()[1]:
            if dtype is None:
                dtype = v.dtype
            elif v.dtype != dtype:
                return None
        return dtype

    def is_floating_point(self) -> bool:
        """True when every tensor leaf is floating point (also for a collection without tensors)."""
        return all(v.is_floating_point() for v in self._tensor_leaves()[1])

    def type(self, dst_type: torch.dtype | str) -> Any:
        """Cast every tensor leaf to ``dst_type`` (a dtype, or a tensor type name like ``"torch.DoubleTensor"``)."""
        if isinstance(dst_type, torch.dtype):
            return self.to(dst_type)
        if isinstance(dst_type, str):
            return self._unary(lambda v: v.type(dst_type))
        raise TypeError(
            f"type: dst_type must be a torch.dtype or a tensor type name such as 'torch.FloatTensor', got {dst_type!r}."
        )


def _is_bound_operand(bound: Any) -> bool:
    """A clamp bound that must be aligned per leaf (a batch-shaped tensor or a collection)."""
    return _is_collection(bound) or (isinstance(bound, torch.Tensor) and bound.dim() > 0)


def _scalar_tensor(value: Any, name: str, arg: str) -> torch.Tensor:
    if isinstance(value, (bool, int, float, complex)):
        return torch.tensor(value)
    raise TypeError(f"{name}: {arg} must be a number, a tensor or a tensor collection, got {type(value).__name__}.")


_BINARY = {
    "__add__": operator.add,
    "__sub__": operator.sub,
    "__mul__": operator.mul,
    "__truediv__": operator.truediv,
    "__floordiv__": operator.floordiv,
    "__mod__": operator.mod,
    "__pow__": operator.pow,
    "__and__": operator.and_,
    "__or__": operator.or_,
    "__xor__": operator.xor,
    "__lt__": operator.lt,
    "__le__": operator.le,
    "__gt__": operator.gt,
    "__ge__": operator.ge,
    "__radd__": lambda a, b: b + a,
    "__rsub__": lambda a, b: b - a,
    "__rmul__": lambda a, b: b * a,
    "__rtruediv__": lambda a, b: b / a,
    "__rpow__": lambda a, b: b**a,
    "__ror__": lambda a, b: b | a,
    "__rand__": lambda a, b: b & a,
    "__rxor__": lambda a, b: b ^ a,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "pow": operator.pow,
    "mod": operator.mod,
}
_LOGICAL = frozenset({"__and__", "__or__", "__xor__"})  # non-tensor payloads take part, as in == and !=
_COMPARISONS = frozenset({"__lt__", "__le__", "__gt__", "__ge__"})  # their results are not locked (== and != neither)
_INPLACE = {
    # name: (foreach op, per-tensor fallback for broadcasting tensors)
    "sub_": (_VF._foreach_sub_, torch.Tensor.sub_),
    "mul_": (_VF._foreach_mul_, torch.Tensor.mul_),
    "div_": (_VF._foreach_div_, torch.Tensor.div_),
    "pow_": (_VF._foreach_pow_, torch.Tensor.pow_),
}
_INPLACE_ALIASES = {
    "__iadd__": "add_",
    "__isub__": "sub_",
    "__imul__": "mul_",
    "__itruediv__": "div_",
    "__ipow__": "pow_",
}
_UNARY = [
    "abs",
    "neg",
    "exp",
    "log",
    "sqrt",
    "sigmoid",
    "tanh",
    "sign",
    "reciprocal",
    "sin",
    "cos",
    "floor",
    "ceil",
    "round",
    "log1p",
    "expm1",
    "logical_not",
    "acos",
    "asin",
    "atan",
    "cosh",
    "sinh",
    "tan",
    "erf",
    "erfc",
    "frac",
    "lgamma",
    "log10",
    "log2",
    "trunc",
]
_UNARY_NO_INPLACE = ["isneginf", "isposinf", "isreal"]  # results are bool: no in-place form
# dtype shortcuts (tensordict 0.14's; bfloat16, half, ... are in base.py)
_DTYPE_CASTS = [
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "complex64",
    "complex128",
]


def _method(fn: Callable, name: str, doc: str) -> Callable:
    """``fn`` named ``name`` (as a method of ArithmeticMixin) and documented with ``doc``."""
    fn.__name__, fn.__qualname__, fn.__doc__ = name, f"ArithmeticMixin.{name}", doc
    return fn


def _install() -> None:
    for name, op in _BINARY.items():
        binary = lambda self, other, _op=op: self._binary(other, _op)  # noqa: E731
        if name in _LOGICAL:
            binary = lambda self, other, _op=op: self._logical(other, _op)  # noqa: E731
        if not name.startswith("_"):
            binary = lambda self, other, *, default=NO_DEFAULT, _op=op: self._binary(other, _op, default)  # noqa: E731
            doc = (
                f"``{name}`` leaf by leaf; ``other``: a number, a tensor broadcast over the batch dims, "
                "or a collection with the same keys (``default`` as in :meth:`add`)."
            )
            binary = _method(binary, name, doc)
        setattr(ArithmeticMixin, name, binary if name in _COMPARISONS else keeps_lock(binary))
    for name, (foreach, fallback) in _INPLACE.items():
        doc = (
            f"In place: ``leaf.{name}(other)`` for every tensor leaf (one fused ``torch._foreach_{name}`` call); "
            "``other`` is a number, a tensor broadcast over the batch dims, or a collection with the same keys."
        )
        inplace = lambda self, other, _f=foreach, _b=fallback: self._binary_(other, _f, _b)  # noqa: E731
        setattr(ArithmeticMixin, name, _method(inplace, name, doc))
    for alias, name in _INPLACE_ALIASES.items():
        setattr(ArithmeticMixin, alias, lambda self, other, _n=name: getattr(self, _n)(other))
    for name in _UNARY:
        fn = getattr(torch, name)
        doc = (
            f"A new collection of ``torch.{name}(leaf)`` for every tensor leaf (a locked input gives a locked result)."
        )
        unary = lambda self, _fn=fn: self._unary(_fn)  # noqa: E731
        setattr(ArithmeticMixin, name, keeps_lock(_method(unary, name, doc)))
        doc_ = f"In place: ``leaf.{name}_()`` for every tensor leaf; returns ``self``."
        foreach_ = getattr(torch, f"_foreach_{name}_", None)
        if foreach_ is not None:
            inplace = lambda self, _f=foreach_: _foreach_inplace(self, _f)  # noqa: E731
        else:
            inplace = lambda self, _n=name: ([getattr(v, _n + "_")() for v in self._tensor_leaves()[1]], self)[1]  # noqa: E731
        setattr(ArithmeticMixin, name + "_", _method(inplace, name + "_", doc_))
    for name in _UNARY_NO_INPLACE:
        fn = getattr(torch, name)
        doc = f"A new collection of the bool tensors ``torch.{name}(leaf)`` for every tensor leaf."
        unary = lambda self, _fn=fn: self._unary(_fn)  # noqa: E731
        setattr(ArithmeticMixin, name, keeps_lock(_method(unary, name, doc)))
    for name in _DTYPE_CASTS:
        dtype = getattr(torch, name, None)
        if dtype is None:  # pragma: no cover - an older torch
            continue
        cast = lambda self, _dt=dtype: self.to(_dt)  # noqa: E731
        setattr(ArithmeticMixin, name, _method(cast, name, f"Cast every tensor leaf to ``{dtype}``."))
    ArithmeticMixin.__eq__ = lambda self, other: _equality(self, other, operator.eq)
    ArithmeticMixin.__ne__ = lambda self, other: _equality(self, other, operator.ne)
    ArithmeticMixin.__neg__ = keeps_lock(lambda self: self._unary(torch.neg))
    ArithmeticMixin.__abs__ = keeps_lock(lambda self: self._unary(torch.abs))
    ArithmeticMixin.__invert__ = keeps_lock(lambda self: self._unary(torch.bitwise_not))


def _equality(td: Any, other: Any, op: Callable) -> Any:
    operand = comparison_operand(other)
    return op is operator.ne if operand is _UNCOMPARABLE else td._compare(operand, op)


def _foreach_inplace(td: Any, foreach_: Callable) -> Any:
    leaves = td._tensor_leaves()[1]
    if leaves:  # torch._foreach_* refuses an empty list
        foreach_(leaves)
    return td


_install()
