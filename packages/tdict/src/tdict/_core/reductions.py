"""Reductions and scans over the batch dims of a collection: sum, mean, max, quantile, cummax, softmax, ...

Every reduction takes ``dim`` as a batch dim (or a tuple of them), ``None`` for "all elements of
each leaf", or ``"feature"`` for "the feature dims of each leaf" (the batch shape is kept).
``reduce=True`` reduces across all leaves together and returns one tensor.
"""

# Mixin of TensorDictBase: the attributes it reads (batch_size, get, _items_raw...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

from typing import Any, Callable

import torch

from .locking import keeps_lock
from .names import reduced_names
from .utils import NO_DEFAULT, normalize_dim, normalize_dims
from ..validation import check_one_of

# Reductions torch defines on floating tensors only: integer and bool leaves are reduced as floats.
_FLOAT_ONLY = frozenset({"mean", "nanmean", "std", "var", "quantile"})
_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def values_indices(name: str, values: Any, indices: Any) -> Any:
    """``(values, indices)`` as torch returns them from ``torch.<name>`` (``torch.return_types.<name>``:
    a named tuple with ``.values`` and ``.indices``), here holding collections."""
    return getattr(torch.return_types, name)((values, indices))


def _as_float(v: torch.Tensor) -> torch.Tensor:
    return v if v.is_floating_point() or v.is_complex() else v.float()


def _reduced_size(batch_size: torch.Size, dims: tuple, keepdim: bool) -> torch.Size:
    if keepdim:
        return torch.Size(1 if i in dims else s for i, s in enumerate(batch_size))
    return torch.Size(s for i, s in enumerate(batch_size) if i not in dims)


def _check_q(q: Any) -> Any:
    """``q`` as torch.quantile takes it: a number in [0, 1] or a 0-d / 1-d floating tensor."""
    if isinstance(q, torch.Tensor):
        if q.dim() > 1:
            raise ValueError(
                f"quantile: q must be a number or a 0-d/1-d tensor, got a tensor of shape {list(q.shape)}."
            )
        if not q.is_floating_point():
            raise TypeError(f"quantile: q must hold floats in [0, 1], got a {q.dtype} tensor.")
        return q
    if isinstance(q, bool) or not isinstance(q, (int, float)):
        raise TypeError(f"quantile: q must be a float in [0, 1] or a tensor of them, got {q!r} ({type(q).__name__}).")
    if not 0 <= q <= 1:
        raise ValueError(f"quantile: q must be in [0, 1], got {q}.")
    return float(q)


def _quantile_leaf(v: torch.Tensor, q: Any, dims: tuple | None, keepdim: bool, interpolation: str) -> torch.Tensor:
    v = _as_float(v)
    if isinstance(q, torch.Tensor) and (q.dtype != v.dtype or q.device != v.device):
        q = q.to(device=v.device, dtype=v.dtype)  # torch.quantile wants q in the input's dtype
    if dims is None:
        return torch.quantile(v, q, interpolation=interpolation)
    if len(dims) == 1:
        return torch.quantile(v, q, dim=dims[0], keepdim=keepdim, interpolation=interpolation)
    # torch.quantile takes one dim: bring the reduced dims to the front and flatten them
    k = len(dims)
    out = torch.quantile(v.movedim(dims, tuple(range(k))).flatten(0, k - 1), q, dim=0, interpolation=interpolation)
    if keepdim:
        offset = 1 if isinstance(q, torch.Tensor) and q.dim() == 1 else 0
        for d in sorted(dims):
            out = out.unsqueeze(d + offset)
    return out


class ReductionsMixin:
    """Reductions (``sum``, ``mean``, ``max``, ``quantile``, ...) and scans (``cumsum``, ``cummax``, ``softmax``)."""

    __slots__ = ()

    # ---- helpers
    def _dense_leaves(self) -> list:
        """Every tensor leaf with the full batch shape in front (a lazy stack's leaves stacked)."""
        return [v for v in self.values(True, True) if isinstance(v, torch.Tensor)]

    def _feature_map(self, leaf_fn: Callable, lead: torch.Size = torch.Size()) -> Any:
        """``leaf_fn(v)`` on each leaf whose feature dims (those past its parent's batch dims) are
        flattened into one last dim; results get ``lead + batch_size`` as their batch size."""
        nd = self.batch_dims

        def fn(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                return leaf_fn(v.flatten(nd) if v.dim() > nd else v.unsqueeze(-1))
            if v._is_non_tensor:
                return v if not lead else v._with_batch_size(lead + v.batch_size)
            return v._feature_map(leaf_fn, lead)

        return self._map_batch(fn, lead + self.batch_size, None if lead else self._maybe_names())

    def _feature_cat(self) -> torch.Tensor:
        """All leaves as one ``batch_size + (total features,)`` tensor (for ``reduce=True, dim="feature"``)."""
        nd = self.batch_dims
        leaves = [v.flatten(nd) if v.dim() > nd else v.unsqueeze(-1) for v in self._dense_leaves()]
        if not leaves:
            raise ValueError("reduce=True over a collection that holds no tensor.")
        dtype = leaves[0].dtype
        for v in leaves[1:]:
            dtype = torch.promote_types(dtype, v.dtype)
        return torch.cat([v.to(dtype) for v in leaves], -1)

    def _dim_cat(self, name: str, dims: tuple) -> torch.Tensor:
        """All leaves concatenated along batch dim ``dims[0]`` (for ``reduce=True`` with batch ``dim``):
        reducing the result over ``dims`` reduces every leaf's elements together."""
        leaves = self._dense_leaves()
        if not leaves:
            raise ValueError(f"{name}: reduce=True over a collection that holds no tensor.")
        d = dims[0]
        ref = leaves[0].shape
        for v in leaves[1:]:
            if v.dim() != len(ref) or any(a != b for i, (a, b) in enumerate(zip(v.shape, ref)) if i != d):
                raise ValueError(
                    f"{name}: reduce=True with dim={list(dims)} concatenates the leaves along dim {d}, so their "
                    f"shapes must agree elsewhere; got {list(ref)} and {list(v.shape)}. Use dim='feature' or no dim."
                )
        dtype = leaves[0].dtype
        for v in leaves[1:]:
            dtype = torch.promote_types(dtype, v.dtype)
        return torch.cat([v.to(dtype) for v in leaves], d)

    def _flat_cat(self) -> torch.Tensor:
        leaves = [v.reshape(-1) for v in self._tensor_leaves()[1]]
        if not leaves:
            return torch.zeros(0)
        dtype = leaves[0].dtype
        for v in leaves[1:]:
            dtype = torch.promote_types(dtype, v.dtype)
        return torch.cat([v.to(dtype) for v in leaves])

    # ---- reductions
    def _reduce(self, name: str, dim: Any, keepdim: bool, reduce: bool | None, **kwargs) -> Any:
        fn = getattr(torch, name)
        if name in _FLOAT_ONLY:  # integer and bool leaves are averaged as floats
            raw = fn
            fn = lambda v, **kw: raw(_as_float(v), **kw)  # noqa: E731
        if dim is NO_DEFAULT or dim is None:
            if reduce:
                return fn(self._flat_cat(), **kwargs)
            return self._apply(
                lambda v: fn(v, **kwargs),
                (),
                None,
                (),
                torch.Size(()),
                NO_DEFAULT,
                None,
                False,
                NO_DEFAULT,
                None,
                False,
                {},
            )
        if isinstance(dim, str):
            if dim != "feature":
                raise ValueError(f"{name}: dim must be a batch dim, a tuple of them, None or 'feature', got {dim!r}.")
            if keepdim:
                raise TypeError(f"{name}: dim='feature' cannot take keepdim=True.")
            if reduce:
                return fn(self._feature_cat(), dim=-1, **kwargs)
            return self._feature_map(lambda v: fn(v, dim=-1, **kwargs))
        dims = normalize_dims(dim, self.batch_dims)
        if reduce:
            axis = dims[0] if len(dims) == 1 else dims
            return fn(self._dim_cat(name, dims), dim=axis, keepdim=keepdim, **kwargs)
        bs = _reduced_size(self.batch_size, dims, keepdim)
        axis = dims[0] if len(dims) == 1 else dims  # some reductions (prod, all) take one int only
        names = reduced_names(self._maybe_names(), dims, keepdim)
        return self._apply(
            lambda v: fn(v, dim=axis, keepdim=keepdim, **kwargs),
            (),
            None,
            (),
            bs,
            NO_DEFAULT,
            names,
            False,
            NO_DEFAULT,
            None,
            False,
            {},
        )

    def sum(
        self,
        dim: Any = NO_DEFAULT,
        keepdim: bool = False,
        *,
        dtype: torch.dtype | None = None,
        reduce: bool | None = None,
    ) -> Any:
        """Sum over batch ``dim`` (all elements of each leaf if omitted; one scalar if ``reduce``)."""
        return self._reduce("sum", dim, keepdim, reduce, **({"dtype": dtype} if dtype else {}))

    def nansum(
        self,
        dim: Any = NO_DEFAULT,
        keepdim: bool = False,
        *,
        dtype: torch.dtype | None = None,
        reduce: bool | None = None,
    ) -> Any:
        """Like :meth:`sum`, with NaNs counted as zero."""
        return self._reduce("nansum", dim, keepdim, reduce, **({"dtype": dtype} if dtype else {}))

    def mean(
        self,
        dim: Any = NO_DEFAULT,
        keepdim: bool = False,
        *,
        dtype: torch.dtype | None = None,
        reduce: bool | None = None,
    ) -> Any:
        """Mean over batch ``dim`` (as :meth:`sum`); integer and bool leaves are averaged as floats."""
        return self._reduce("mean", dim, keepdim, reduce, **({"dtype": dtype} if dtype else {}))

    def nanmean(
        self,
        dim: Any = NO_DEFAULT,
        keepdim: bool = False,
        *,
        dtype: torch.dtype | None = None,
        reduce: bool | None = None,
    ) -> Any:
        """Like :meth:`mean`, ignoring NaNs."""
        return self._reduce("nanmean", dim, keepdim, reduce, **({"dtype": dtype} if dtype else {}))

    def std(
        self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, correction: int = 1, reduce: bool | None = None
    ) -> Any:
        """Standard deviation over batch ``dim`` (as :meth:`mean`), with ``correction`` as in :func:`torch.std`."""
        return self._reduce("std", dim, keepdim, reduce, correction=correction)

    def var(
        self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, correction: int = 1, reduce: bool | None = None
    ) -> Any:
        """Variance over batch ``dim`` (as :meth:`mean`), with ``correction`` as in :func:`torch.var`."""
        return self._reduce("var", dim, keepdim, reduce, correction=correction)

    def prod(
        self,
        dim: Any = NO_DEFAULT,
        keepdim: bool = False,
        *,
        dtype: torch.dtype | None = None,
        reduce: bool | None = None,
    ) -> Any:
        """Product over batch ``dim`` (as :meth:`sum`; a tuple of dims is reduced one dim at a time)."""
        if dim is not NO_DEFAULT and dim is not None and not isinstance(dim, str):
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
        bs = _reduced_size(self.batch_size, (d,), keepdim)
        names = reduced_names(self._maybe_names(), (d,), keepdim)
        values = self._apply(
            lambda v: fn(v, dim=d, keepdim=keepdim).values,
            (),
            None,
            (),
            bs,
            NO_DEFAULT,
            names,
            False,
            NO_DEFAULT,
            None,
            False,
            {},
        )
        indices = self._apply(
            lambda v: fn(v, dim=d, keepdim=keepdim).indices,
            (),
            None,
            (),
            bs,
            NO_DEFAULT,
            names,
            False,
            NO_DEFAULT,
            None,
            False,
            {},
        )
        return values_indices(name, values, indices)

    def max(
        self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, reduce: bool | None = None, return_indices: bool = True
    ) -> Any:
        """Max over batch ``dim``: a ``(values, indices)`` pair of collections, like ``torch.max``."""
        return self._minmax("max", dim, keepdim, reduce, return_indices)

    def min(
        self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, reduce: bool | None = None, return_indices: bool = True
    ) -> Any:
        """Min over batch ``dim``, like :meth:`max` (see :meth:`amin` for the minima alone)."""
        return self._minmax("min", dim, keepdim, reduce, return_indices)

    def amax(self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, reduce: bool | None = None) -> Any:
        """Max over batch ``dim`` (an int or a tuple; all elements of each leaf if omitted; one scalar if ``reduce``), no indices."""
        return self._reduce("amax", dim, keepdim, reduce)

    def amin(self, dim: Any = NO_DEFAULT, keepdim: bool = False, *, reduce: bool | None = None) -> Any:
        """Min over batch ``dim``, as :meth:`amax`."""
        return self._reduce("amin", dim, keepdim, reduce)

    @keeps_lock  # tensordict 0.14 locks this reduction's result, not the others'
    def norm(self, *, p: float = 2.0, reduce: bool | None = None) -> Any:
        """The ``p``-norm of each leaf (or of all leaves together when ``reduce``)."""
        if reduce:
            leaves = self._tensor_leaves()[1]
            return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(v.float(), p) for v in leaves]), p)
        return self._apply(
            lambda v: torch.linalg.vector_norm(v.float() if not v.is_floating_point() else v, p),
            (),
            None,
            (),
            torch.Size(()),
            NO_DEFAULT,
            None,
            False,
            NO_DEFAULT,
            None,
            False,
            {},
        )

    def all(self, dim: Any = NO_DEFAULT) -> Any:
        """``bool`` over every leaf, or a collection reduced along batch ``dim``."""
        if dim is NO_DEFAULT or dim is None:
            return all(bool(v.all()) for v in self._tensor_leaves()[1])
        return self._reduce("all", dim, False, None)

    def any(self, dim: Any = NO_DEFAULT) -> Any:
        """True if any element of any tensor leaf is; with ``dim``, a collection reduced along that batch dim."""
        if dim is NO_DEFAULT or dim is None:
            return any(bool(v.any()) for v in self._tensor_leaves()[1])
        return self._reduce("any", dim, False, None)

    def logsumexp(self, dim: Any = None, keepdim: bool = False, *, out: Any = None) -> Any:
        """``log(sum(exp(x)))`` over batch ``dim`` (an int or a tuple; ``None``: every batch dim).

        Integer and bool leaves come back as floats (as with :func:`torch.logsumexp`). ``out``, a
        collection, receives the result (its tensors are written in place where shapes match).

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.zeros(2, 3), batch_size=[2, 3])
            >>> td.logsumexp(1)["a"]
            tensor([1.0986, 1.0986])
        """
        dims = tuple(range(self.batch_dims)) if dim is None else normalize_dims(dim, self.batch_dims)
        if out is not None and not getattr(type(out), "_is_tensor_collection", False):
            raise TypeError(f"logsumexp: out must be a tensor collection, got {type(out).__name__}.")
        if not dims:  # nothing to reduce over (a batch of no dims): logsumexp of one element is itself
            result = self._apply(
                lambda v: _as_float(v).clone(),
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
        else:
            bs = _reduced_size(self.batch_size, dims, keepdim)
            result = self._apply(
                lambda v: torch.logsumexp(v, dim=dims, keepdim=keepdim),
                (),
                None,
                (),
                bs,
                NO_DEFAULT,
                None,
                False,
                NO_DEFAULT,
                None,
                False,
                {},
            )
        if out is None:
            return result
        for key, value in result.items(True, True):
            dest = out.get(key, None)
            if isinstance(value, torch.Tensor) and isinstance(dest, torch.Tensor) and dest.shape == value.shape:
                dest.copy_(value)
            else:
                out.set(key, value)
        return out

    def quantile(
        self,
        q: float | torch.Tensor,
        dim: Any = NO_DEFAULT,
        keepdim: bool = False,
        *,
        interpolation: str = "linear",
        reduce: bool | None = None,
    ) -> Any:
        """The ``q``-th quantile of each leaf along batch ``dim`` (see :func:`torch.quantile`).

        ``dim``: a batch dim or a tuple of them; ``None``/omitted: all elements of each leaf (a
        batch of no dims); ``"feature"``: the feature dims of each leaf (the batch is kept).
        ``reduce=True`` computes one quantile over all leaves and returns a tensor. A 1-d ``q``
        of length ``Q`` adds a leading batch dim of size ``Q``. Integer and bool leaves are read
        as floats.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.arange(6.0).view(3, 2), batch_size=[3])
            >>> td.quantile(0.5, dim=0)["a"]
            tensor([2., 3.])
        """
        q = _check_q(q)
        check_one_of("quantile", "interpolation", interpolation, _INTERPOLATIONS)
        lead = q.shape if isinstance(q, torch.Tensor) else torch.Size()
        if dim is NO_DEFAULT or dim is None:
            if reduce:
                return _quantile_leaf(self._flat_cat(), q, None, False, interpolation)
            return self._apply(
                lambda v: _quantile_leaf(v, q, None, False, interpolation),
                (),
                None,
                (),
                torch.Size(()),
                NO_DEFAULT,
                None,
                False,
                NO_DEFAULT,
                None,
                False,
                {},
            )
        if isinstance(dim, str):
            if dim != "feature":
                raise ValueError(f"quantile: dim must be a batch dim, a tuple of them, None or 'feature', got {dim!r}.")
            if keepdim:
                raise TypeError("quantile: dim='feature' cannot take keepdim=True.")
            if reduce:
                return _quantile_leaf(self._feature_cat(), q, (-1,), False, interpolation)
            return self._feature_map(lambda v: _quantile_leaf(v, q, (-1,), False, interpolation), lead)
        dims = normalize_dims(dim, self.batch_dims)
        if len(set(dims)) != len(dims):
            raise ValueError(f"quantile: dim {dim!r} names the same batch dim twice.")
        if reduce:
            return _quantile_leaf(self._dim_cat("quantile", dims), q, dims, keepdim, interpolation)
        bs = lead + _reduced_size(self.batch_size, dims, keepdim)
        return self._apply(
            lambda v: _quantile_leaf(v, q, dims, keepdim, interpolation),
            (),
            None,
            (),
            bs,
            NO_DEFAULT,
            None,
            False,
            NO_DEFAULT,
            None,
            False,
            {},
        )

    # ---- scans (the batch shape is kept)
    def _scan(self, make_fn: Callable[[int], Callable], d: int) -> Any:
        """``make_fn(d)(leaf)`` on every leaf, ``d`` a batch dim of ``self`` (so of every nested level).

        A lazy stack hands its members their own dim (one less past the stack dim); a scan along
        the stack dim itself runs on the dense stack.
        """
        if self._is_lazy and not self._is_non_tensor and d != self.stack_dim:
            md = d if d < self.stack_dim else d - 1
            return self._like([td._scan(make_fn, md) for td in self.tensordicts])
        leaf_fn = make_fn(d)

        def fn(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                return leaf_fn(v)
            return v if v._is_non_tensor else v._scan(make_fn, d)

        return self._map_batch(fn, self.batch_size, self._maybe_names())

    def cumsum(self, dim: int) -> Any:
        """Cumulative sum of each leaf along batch ``dim`` (the shape is kept)."""
        return self._scan(lambda d: lambda v: torch.cumsum(v, d), normalize_dim(dim, self.batch_dims))

    def cumprod(self, dim: int) -> Any:
        """Cumulative product of each leaf along batch ``dim`` (the shape is kept)."""
        return self._scan(lambda d: lambda v: torch.cumprod(v, d), normalize_dim(dim, self.batch_dims))

    def _cum_extreme(self, name: str, dim: int, reduce: bool | None, return_indices: bool) -> Any:
        d = normalize_dim(dim, self.batch_dims)
        fn = getattr(torch, name)
        if reduce:  # as tensordict: the leaves concatenated along dim, scanned as one tensor
            result = fn(torch.cat(self._dense_leaves(), d), d)
            return result if return_indices else result.values
        if not return_indices:
            return self._scan(lambda d: lambda v: fn(v, d).values, d)
        indices = []

        def values(d: int) -> Callable:
            def leaf(v: torch.Tensor) -> torch.Tensor:
                result = fn(v, d)
                indices.append(result.indices)
                return result.values

            return leaf

        values_td = self._scan(values, d)
        it = iter(indices)  # the second pass visits the leaves in the same order as the first
        return values_indices(name, values_td, self._scan(lambda d: lambda v: next(it), d))

    def cummax(self, dim: int, *, reduce: bool | None = None, return_indices: bool = True) -> Any:
        """Running max along batch ``dim``: ``(values, indices)`` collections of the input's shape.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.tensor([1.0, 3.0, 2.0]), batch_size=[3])
            >>> td.cummax(0).values["a"], td.cummax(0).indices["a"]
            (tensor([1., 3., 3.]), tensor([0, 1, 1]))
        """
        return self._cum_extreme("cummax", dim, reduce, return_indices)

    def cummin(self, dim: int, *, reduce: bool | None = None, return_indices: bool = True) -> Any:
        """Running min along batch ``dim`` (see :meth:`cummax`)."""
        return self._cum_extreme("cummin", dim, reduce, return_indices)

    def softmax(self, dim: int, dtype: torch.dtype | None = None) -> Any:
        """Softmax of each leaf along batch ``dim``; integer and bool leaves are read as floats.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> TensorDict(a=torch.zeros(2), batch_size=[2]).softmax(0)["a"]
            tensor([0.5000, 0.5000])
        """
        d = normalize_dim(dim, self.batch_dims)
        if dtype is not None:
            return self._scan(lambda d: lambda v: torch.softmax(v, d, dtype=dtype), d)
        return self._scan(lambda d: lambda v: torch.softmax(_as_float(v), d), d)
