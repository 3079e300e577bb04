"""Shape operations on the batch dims of a tensor collection.

Every op is expressed once, on an entry (a tensor or a nested collection) whose shape starts
with the batch dims: the op touches those leading dims and leaves the feature dims alone.
"""

# Mixin of TensorDictBase: the attributes it reads (batch_size, get, _items_raw...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

import torch

from ..errors import DimError, InvalidArgumentError, ShapeMismatchError, locked_error
from ..unbatched import UNBATCHED_TYPES
from .key_ops import _write_back_on_exit
from .keys import is_leaf_nontensor
from .locking import keeps_lock
from .utils import is_tensor_collection, leaf_shape, normalize_dim, normalize_dims

if TYPE_CHECKING:
    from ..base import TensorDictBase


def _shape_args(shape: tuple, size: Any = None, what: str = "reshape") -> tuple[int, ...]:
    """The shape given as ints, as one sequence, or as ``size=`` (not both)."""
    if size is not None:
        if shape:
            raise TypeError(f"{what}: pass the shape positionally or as size=, not both (got {shape} and size={size}).")
        return tuple(size)
    if len(shape) == 1 and isinstance(shape[0], (list, tuple, torch.Size)):
        return tuple(shape[0])
    return tuple(shape)


def permutation_dims(dims: tuple, n: int) -> tuple[int, ...]:
    """``permute``'s ``dims`` (ints or one sequence) checked as a permutation of ``n`` batch dims:
    first their number (as torch does), then each one's range, then that none repeats."""
    dims = _shape_args(dims)
    if len(dims) != n:
        raise InvalidArgumentError(f"permute: {len(dims)} dims {list(dims)} given for the {n} batch dims.")
    dims = normalize_dims(dims, n)
    if sorted(dims) != list(range(n)):
        raise InvalidArgumentError(f"permute: dims {list(dims)} are not a permutation of the {n} batch dims.")
    return dims


def infer_shape(shape: Sequence[int], numel: int, what: str = "reshape") -> torch.Size:
    """Resolve a single ``-1`` in ``shape`` so that it holds ``numel`` elements."""
    shape = list(shape)
    unknown = [i for i, s in enumerate(shape) if s == -1]
    if len(unknown) > 1:
        raise ValueError(f"{what}: only one dim may be -1, got {shape}.")
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if unknown:
        if known == 0 or numel % known:
            raise ValueError(f"{what}: cannot infer -1 in {shape} for a batch of {numel} elements.")
        shape[unknown[0]] = numel // known
    elif known != numel:
        raise ValueError(f"{what}: shape {shape} holds {known} elements, the batch holds {numel}.")
    return torch.Size(shape)


def split_lengths(split_size: int | Sequence[int], length: int) -> list[int]:
    """The part lengths of ``split(split_size)`` over a dim of ``length`` (checked)."""
    if isinstance(split_size, int):
        if isinstance(split_size, bool):
            raise TypeError(f"split: split_size must be int or list of ints, got bool: {split_size!r}.")
        if split_size <= 0:
            raise ValueError(f"split: split_size must be positive, got {split_size}.")
        return [min(split_size, length - i) for i in range(0, length, split_size)]
    try:
        if isinstance(split_size, (str, bytes)):
            raise TypeError
        lengths = [operator.index(n) for n in split_size]
    except TypeError:
        raise TypeError(
            f"split: split_size must be int or list of ints, got {type(split_size).__name__}: {split_size!r}."
        ) from None
    if not lengths and length:
        raise ShapeMismatchError(
            f"split: Insufficient number of elements in split_size: an empty list cannot cover a dim of {length}."
        )
    if sum(lengths) != length:
        raise ShapeMismatchError(
            f"split: sizes {lengths} sum to {sum(lengths)}, but split expects split_size to sum exactly to the "
            f"dim's size, {length}."
        )
    return lengths


def split_dim(dim: int, ndim: int) -> int:
    """``dim`` of ``split`` mapped into ``[0, ndim)`` (checked)."""
    if type(dim) is int and -ndim <= dim < ndim:
        return dim + ndim if dim < 0 else dim
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"split: dim must be an int, got {dim!r} ({type(dim).__name__}).")
    accepted = f"expected -{ndim} <= dim < {ndim}" if ndim else "there is no batch dim to split"
    raise DimError(f"split: Incompatible dim {dim} for a batch of {ndim} dims ({accepted}).")


def expanded_size(batch_size: torch.Size, shape: Sequence[int], what: str) -> torch.Size:
    """The batch size ``expand(shape)`` / ``broadcast_to(shape)`` gives (``-1`` keeps a size; checked)."""
    n = len(batch_size)
    if len(shape) < n:
        raise ValueError(f"{what}: the new shape {list(shape)} has fewer dims than the batch {list(batch_size)}.")
    offset = len(shape) - n
    out = []
    for i, s in enumerate(shape):
        if type(s) is not int:
            s = _int_arg(s, what, f"shape[{i}]")
        if s == -1 and i >= offset:
            s = batch_size[i - offset]
        elif s < 0:
            raise ValueError(
                f"{what}: size {s} at position {i} of {list(shape)} is invalid (-1 only keeps an existing batch dim)."
            )
        if i >= offset and batch_size[i - offset] not in (s, 1):
            raise ValueError(
                f"{what}: batch dim {i - offset} of size {batch_size[i - offset]} cannot expand to {s} (shape {list(shape)})."
            )
        out.append(s)
    return torch.Size(out)


def _int_arg(value: Any, what: str, name: str) -> int:
    """``value`` as a Python int (numpy ints and 1-element integer tensors too), or a TypeError naming ``name``."""
    if type(value) is int:
        return value
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what}: {name} must be an int, got {value!r} ({type(value).__name__}).") from None


def _dims_arg(value: Any, ndim: int, what: str, name: str) -> tuple[int, ...]:
    """An int or a sequence of ints, normalized over ``ndim`` batch dims, without repeats."""
    dims = (
        (value,) if isinstance(value, int) else tuple(value) if isinstance(value, (list, tuple, torch.Size)) else None
    )
    if dims is None:
        raise TypeError(f"{what}: {name} must be an int or a sequence of ints, got {value!r} ({type(value).__name__}).")
    out = tuple(normalize_dim(d, ndim, name) for d in dims)
    if len(set(out)) != len(out):
        raise InvalidArgumentError(f"{what}: repeated dim in {name} {list(dims)}.")
    return out


def movedim_order(source: Any, destination: Any, ndim: int) -> list[int]:
    """The permutation ``movedim(source, destination)`` applies to ``ndim`` batch dims."""
    src = _dims_arg(source, ndim, "movedim", "source")
    dst = _dims_arg(destination, ndim, "movedim", "destination")
    if len(src) != len(dst):
        raise ValueError(
            f"movedim: source and destination must have the same number of elements, source has {len(src)} dims "
            f"({list(src)}), destination has {len(dst)} ({list(dst)})."
        )
    order: list = [None] * ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(i for i in range(ndim) if i not in src)
    return [o if o is not None else next(rest) for o in order]


def narrow_range(dim: int, start: Any, length: Any, size: int) -> tuple[int, int]:
    """``(start, length)`` of ``narrow`` on a dim of ``size``, negative ``start`` resolved (checked)."""
    start, length = _int_arg(start, "narrow", "start"), _int_arg(length, "narrow", "length")
    if not -size <= start <= size:
        raise IndexError(
            f"narrow: start={start} is out of range for batch dim {dim} of size {size} (expected -{size} to {size})."
        )
    if start < 0:
        start += size
    if length < 0:
        raise ValueError(f"narrow: length must be non-negative, got {length}.")
    if start + length > size:
        raise RuntimeError(f"narrow: start ({start}) + length ({length}) exceeds batch dim {dim} of size {size}.")
    return start, length


def tile_reps(reps: Sequence[Any], ndim: int) -> tuple[int, ...]:
    """``tile``'s repetitions, left-padded with ones to at least ``ndim`` entries (checked)."""
    reps = tuple(_int_arg(r, "tile", "dims") for r in reps)
    for r in reps:
        if r < 0:
            raise ValueError(f"tile: repetitions must be non-negative, got dims={list(reps)}.")
    return (1,) * (ndim - len(reps)) + reps


def split_bounds(indices_or_sections: Any, size: int) -> list[int]:
    """The split points of ``tensor_split``: torch's semantics (sections or indices) as indices."""
    arg = indices_or_sections
    if isinstance(arg, torch.Tensor):
        if arg.dtype.is_floating_point or arg.dtype.is_complex or arg.dtype == torch.bool or arg.dim() > 1:
            raise TypeError(
                f"tensor_split: a tensor indices_or_sections must be a 0-dim or 1-dim integer tensor, got dtype {arg.dtype} and shape {list(arg.shape)}."
            )
        arg = int(arg) if arg.dim() == 0 else arg.tolist()
    if isinstance(arg, int) and not isinstance(arg, bool):
        if arg <= 0:
            raise ValueError(f"tensor_split: the number of sections must be positive, got indices_or_sections={arg}.")
        small, extra = divmod(size, arg)
        bounds, at = [], 0
        for i in range(arg - 1):
            at += small + (i < extra)
            bounds.append(at)
        return bounds
    if isinstance(arg, (list, tuple)):
        return [_int_arg(i, "tensor_split", "indices_or_sections") for i in arg]
    raise TypeError(
        f"tensor_split: indices_or_sections must be an int, a sequence of ints or an integer tensor, got {type(indices_or_sections).__name__}."
    )


def split_slices(bounds: Sequence[int], size: int) -> list[range]:
    """The ranges ``tensor_split`` at ``bounds`` selects (Python slice semantics, as torch)."""
    starts, stops = [0, *bounds], [*bounds, size]
    return [range(*slice(a, b).indices(size)) for a, b in zip(starts, stops)]


def rot90_args(k: Any, dims: Sequence[int], ndim: int) -> tuple[int, int, int]:
    """``(k mod 4, dim0, dim1)`` of ``rot90`` over ``ndim`` batch dims (checked)."""
    k = _int_arg(k, "rot90", "k")
    if not isinstance(dims, (list, tuple, torch.Size)) or len(dims) != 2:
        raise ValueError(f"rot90: dims must hold exactly two batch dims, got {dims!r}.")
    if ndim < 2:
        raise RuntimeError(f"rot90 requires at least 2 batch dims, the batch size is {ndim}-dim.")
    d0, d1 = normalize_dim(dims[0], ndim, "dims[0]"), normalize_dim(dims[1], ndim, "dims[1]")
    if d0 == d1:
        raise ValueError(f"rot90: dims must be two different batch dims, got {list(dims)}.")
    return k % 4, d0, d1


def _trailing_ones(t: torch.Tensor, ndim: int) -> torch.Tensor:
    """View a batch-shaped tensor with singleton dims appended up to ``ndim`` dims."""
    return t.reshape(t.shape + (1,) * (ndim - t.dim())) if t.dim() < ndim else t


def _named_or_none(names: list) -> list | None:
    return names if any(n is not None for n in names) else None


def _tensordict_class() -> type:
    from ..tensordict import TensorDict  # deferred: tensordict.py imports this module

    return TensorDict


def check_inplace(td: Any, what: str, inplace: bool) -> None:
    """Refuse ``inplace=True`` up front where it cannot work: on anything but a TensorDict (a lazy
    stack: densify it first), and on a locked collection."""
    if not inplace:
        return
    if not isinstance(td, _tensordict_class()):
        raise NotImplementedError(
            f"{what}(inplace=True) is not supported on {type(td).__name__}: "
            "call .to_tensordict() first, or use inplace=False."
        )
    if td._is_locked:
        raise locked_error(f"{what}(inplace=True) replaces its entries; unlock_() it first.")


def _adopt_entry(old: Any, new: Any) -> bool:
    """Make the unlocked TensorDict or NonTensorStack ``old`` take ``new``'s content (same type),
    keeping its identity; ``False`` (nothing done) for any other pair."""
    from ..non_tensor_stack import NonTensorStack  # deferred: it imports this package

    if type(new) is not type(old) or isinstance(old, torch.Tensor) or getattr(old, "_is_locked", True):
        return False
    if isinstance(old, _tensordict_class()):
        _adopt_entries(old, new)
        return True
    if type(old) is NonTensorStack:
        old._origins, old._table, old._names = new._origins, new._table, new._names
        return True
    return False


def _adopt_entries(td: Any, other: Any) -> None:
    """Make the TensorDict ``td`` hold ``other``'s entries, batch size and names, keeping the
    identity of its nested TensorDicts and non-tensor stacks (the in-place form of a shape op)."""
    entries = td._tensordict
    if getattr(td, "_consolidated", None) is not None:
        del td._consolidated
    for key, new in other._tensordict.items():
        if not _adopt_entry(entries.get(key), new):
            entries[key] = new
    td._batch_size = other._batch_size
    td._names = other._names


class ShapeOpsMixin:
    """reshape, view, (un)squeeze, permute, expand, split... over batch dims."""

    __slots__ = ()

    if TYPE_CHECKING:  # TensorDict's entry dict (the in-place forms of the ops only run on a TensorDict)
        _tensordict: dict[str, Any]

    # ---- ops that keep a single output
    @keeps_lock
    def reshape(self, *shape: int, size: Sequence[int] | None = None, inplace: bool = False) -> Any:
        """A collection of batch size ``shape`` (ints, one sequence or ``size=``; one ``-1`` is inferred);
        feature dims are kept. ``inplace=True`` reshapes ``self`` (see :meth:`_reshape_batch`)."""
        check_inplace(self, "reshape", inplace)
        n, bs = self.batch_dims, infer_shape(_shape_args(shape, size), self.numel())
        return self._reshape_batch("reshape", inplace, lambda v: v.reshape(bs + leaf_shape(v)[n:]), bs)

    @keeps_lock
    def view(self, *shape: Any, size: Sequence[int] | None = None, batch_size: Sequence[int] | None = None) -> Any:
        """Like :meth:`reshape`, with views of the leaves; ``view(dtype)`` views every leaf as ``dtype``
        (``batch_size=`` then sets the result's batch size, which the viewed leaves must start with).

        In ``with td.view(shape) as v:``, the new and changed entries of ``v`` are written back
        into ``td`` on exit.
        """
        as_dtype = len(shape) == 1 and isinstance(shape[0], torch.dtype)
        if as_dtype and batch_size is not None:
            dtype = shape[0]
            return self.apply(lambda v: v.view(dtype), batch_size=torch.Size(batch_size))
        if size is not None:
            shape = _shape_args(shape, size, "view")
        out = self._view(*shape)
        if not as_dtype:
            source_bs = self.batch_size
            _write_back_on_exit(self, out, lambda result: result.view(source_bs))
        return out

    def _view(self, *shape: Any) -> Any:
        """``view`` itself (nested collections are viewed without the context-manager bookkeeping)."""
        if len(shape) == 1 and isinstance(shape[0], torch.dtype):
            return self._map_entries(
                lambda v: v.view(shape[0]) if isinstance(v, torch.Tensor) else v._view(shape[0]),
                self.batch_size,
                self._maybe_names(),
            )
        n, bs = self.batch_dims, infer_shape(_shape_args(shape), self.numel(), "view")
        return self._map_batch(
            lambda v: (
                v.view(bs + leaf_shape(v)[n:]) if isinstance(v, torch.Tensor) else v._view(bs + leaf_shape(v)[n:])
            ),
            bs,
        )

    @keeps_lock
    def unsqueeze(self, dim: int) -> Any:
        """Insert a batch dim of size 1 at position ``dim``."""
        dim = normalize_dim(dim, self.batch_dims + 1)
        bs = self.batch_size[:dim] + (1,) + self.batch_size[dim:]
        names = self._maybe_names()
        if names is not None:
            names = names[:dim] + [None] + names[dim:]
        return self._map_batch(lambda v: v.unsqueeze(dim), torch.Size(bs), names)

    @keeps_lock
    def squeeze(self, dim: int | Sequence[int] | None = None) -> Any:
        """Remove the batch dims of size 1 (all of them, or those among ``dim``); ``self`` when there are none."""
        if dim is None:
            dims = tuple(i for i, s in enumerate(self.batch_size) if s == 1)
        else:
            dims = tuple(d for d in normalize_dims(dim, self.batch_dims) if self.batch_size[d] == 1)
        if not dims:
            return self
        bs = torch.Size(s for i, s in enumerate(self.batch_size) if i not in dims)
        names = self._maybe_names()
        if names is not None:
            names = [nm for i, nm in enumerate(names) if i not in dims]
        return self._map_batch(lambda v: v.squeeze(dims), bs, names)

    @keeps_lock
    def permute(self, *dims: int) -> Any:
        """Reorder the batch dims (``dims``: a permutation of them, as ints or one sequence); feature dims stay last."""
        n = self.batch_dims
        dims = permutation_dims(dims, n)
        bs = torch.Size(self.batch_size[d] for d in dims)
        names = self._maybe_names()
        if names is not None:
            names = [names[d] for d in dims]
        return self._map_batch(lambda v: v.permute(tuple(dims) + tuple(range(n, len(leaf_shape(v))))), bs, names)

    def transpose(self, dim0: int, dim1: int) -> Any:
        """Swap batch dims ``dim0`` and ``dim1``."""
        n = self.batch_dims
        try:
            d0, d1 = normalize_dim(dim0, n, "dim0"), normalize_dim(dim1, n, "dim1")
        except DimError as err:
            raise DimError(
                f"transpose: dim0 and dim1 must be within the range of the number of dimensions ({n}): {err}"
            ) from None
        order = list(range(n))
        order[d0], order[d1] = order[d1], order[d0]
        return self.permute(*order)

    @keeps_lock
    def flatten(self, start_dim: int | None = 0, end_dim: int | None = -1, *, inplace: bool = False) -> Any:
        """Merge batch dims ``start_dim`` to ``end_dim`` (``None``: the first / last) into one (unnamed) dim;
        a batch of no dims becomes ``[1]``."""
        check_inplace(self, "flatten", inplace)
        start_dim = 0 if start_dim is None else start_dim
        end_dim = -1 if end_dim is None else end_dim
        n = self.batch_dims
        if n == 0:  # as torch: a 0-dim input flattens to one dim of size 1
            normalize_dim(start_dim, 1, "start_dim")
            normalize_dim(end_dim, 1, "end_dim")
            if inplace:
                return self._reshape_batch("flatten", True, lambda v: v.unsqueeze(0), torch.Size([1]))
            return self.unsqueeze(0)
        s, e = normalize_dim(start_dim, n, "start_dim"), normalize_dim(end_dim, n, "end_dim")
        if e < s:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}.")
        if e == s:
            return self
        merged = 1
        for d in self.batch_size[s : e + 1]:
            merged *= d
        bs = self.batch_size[:s] + (merged,) + self.batch_size[e + 1 :]
        names = self._maybe_names()
        if names is not None:  # the merged dim is unnamed, the others keep their names
            names = _named_or_none(names[:s] + [None] + names[e + 1 :])
        return self._reshape_batch("flatten", inplace, lambda v: v.flatten(s, e), torch.Size(bs), names)

    @keeps_lock
    def unflatten(self, dim: int, unflattened_size: Sequence[int], *, inplace: bool = False) -> Any:
        """Split batch dim ``dim`` into dims of sizes ``unflattened_size`` (one ``-1`` is inferred)."""
        check_inplace(self, "unflatten", inplace)
        d = normalize_dim(dim, self.batch_dims)
        sizes = infer_shape(unflattened_size, self.batch_size[d], "unflatten")
        bs = self.batch_size[:d] + sizes + self.batch_size[d + 1 :]
        names = self._maybe_names()
        if names is not None:  # the split dims are unnamed, the others keep their names
            names = _named_or_none(names[:d] + [None] * len(sizes) + names[d + 1 :])
        return self._reshape_batch("unflatten", inplace, lambda v: v.unflatten(d, sizes), torch.Size(bs), names)

    @keeps_lock
    def expand(self, *shape: int) -> Any:
        """Broadcast every leaf to batch size ``shape`` (no copy): new batch dims lead, ``-1`` keeps a size."""
        n, bs = self.batch_dims, expanded_size(self.batch_size, _shape_args(shape), "expand")
        names = self._maybe_names()
        if names is not None:  # new leading dims are unnamed
            names = [None] * (len(bs) - n) + list(names)
        return self._map_batch(lambda v: v.expand(bs + leaf_shape(v)[n:]), bs, names)

    def expand_as(self, other: Any) -> Any:
        """:meth:`expand` to ``other.shape`` (a tensor); a collection ``other`` gives its batch size
        and each leaf of ``self`` is expanded to the shape of ``other``'s leaf under the same key."""
        if is_tensor_collection(other):
            return self.apply(lambda x, y: x.expand_as(y), other, batch_size=other.batch_size)
        return self.expand(*other.shape)

    @keeps_lock
    def repeat(self, *repeats: int, inplace: bool = False) -> Any:
        """Tile the batch as :meth:`torch.Tensor.repeat`, with one count per batch dim (feature dims are not repeated)."""
        check_inplace(self, "repeat", inplace)
        repeats = _shape_args(repeats)
        n = self.batch_dims
        if len(repeats) != n:
            raise ValueError(f"repeat: expected {n} repeat counts (one per batch dim), got {len(repeats)}.")
        bs = torch.Size(s * r for s, r in zip(self.batch_size, repeats))
        return self._reshape_batch(
            "repeat",
            inplace,
            lambda v: v.repeat(tuple(repeats) + (1,) * (len(leaf_shape(v)) - n)),
            bs,
            self._maybe_names(),  # the dims stay where they are: so do their names
        )

    @keeps_lock
    def repeat_interleave(
        self,
        repeats: int | torch.Tensor,
        dim: int | None = None,
        *,
        output_size: int | None = None,
        inplace: bool = False,
    ) -> Any:
        """Repeat elements along batch ``dim``; without ``dim`` the batch is flattened first (as torch)."""
        check_inplace(self, "repeat_interleave", inplace)
        if dim is None:
            flat = self.reshape(-1, inplace=inplace)
            return flat.repeat_interleave(repeats, 0, output_size=output_size, inplace=inplace)
        d = normalize_dim(dim, self.batch_dims)
        if isinstance(repeats, torch.Tensor) and repeats.numel() > 1:
            new = int(repeats.sum())
        else:
            new = self.batch_size[d] * int(repeats)
        bs = self.batch_size[:d] + (new,) + self.batch_size[d + 1 :]
        return self._reshape_batch(
            "repeat_interleave",
            inplace,
            lambda v: v.repeat_interleave(repeats, dim=d, output_size=output_size),
            torch.Size(bs),
            self._maybe_names(),
        )

    @keeps_lock
    def flip(self, dims: int | Sequence[int]) -> Any:
        """Reverse the order of the elements along batch dims ``dims``."""
        dims = normalize_dims(dims, self.batch_dims)
        return self._map_batch(lambda v: v.flip(dims), self.batch_size, self._maybe_names())

    @keeps_lock
    def roll(
        self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None, *, inplace: bool = False
    ) -> Any:
        """Roll along batch dims; without ``dims``, over the flattened batch (feature dims untouched)."""
        check_inplace(self, "roll", inplace)
        if dims is not None:
            dims = normalize_dims(dims, self.batch_dims)
            return self._reshape_batch(
                "roll", inplace, lambda v: v.roll(shifts, dims), self.batch_size, self._maybe_names()
            )
        shift = _int_arg(shifts, "roll", "shifts (an int when dims is None)")
        n, numel = self.batch_dims, self.numel()

        def roll_flat(v):
            shape = leaf_shape(v)
            return v.reshape((numel,) + tuple(shape[n:])).roll(shift, 0).reshape(shape)

        return self._reshape_batch("roll", inplace, roll_flat, self.batch_size, self._maybe_names())

    # ---- torch-style aliases and compositions
    def movedim(self, source: int | Sequence[int], destination: int | Sequence[int]) -> Any:
        """Move batch dims ``source`` to positions ``destination`` (the others keep their order)."""
        order = movedim_order(source, destination, self.batch_dims)
        return self if order == list(range(self.batch_dims)) else self.permute(*order)

    moveaxis = movedim

    def swapdims(self, axis0: int, axis1: int) -> Any:
        """Alias of :meth:`transpose`."""
        n = self.batch_dims
        normalize_dim(axis0, n, "axis0")
        normalize_dim(axis1, n, "axis1")
        return self.transpose(axis0, axis1)

    swapaxes = swapdims

    def fliplr(self) -> Any:
        """Flip batch dim 1 (needs at least 2 batch dims)."""
        if self.batch_dims < 2:
            raise RuntimeError(f"fliplr requires at least 2 batch dims, the batch size is {list(self.batch_size)}.")
        return self.flip(1)

    def flipud(self) -> Any:
        """Flip batch dim 0 (needs at least 1 batch dim)."""
        if self.batch_dims < 1:
            raise RuntimeError("flipud requires at least 1 batch dim, the batch size is [].")
        return self.flip(0)

    def atleast_1d(self) -> Any:
        """``self`` if it has a batch dim, else a copy with a leading batch dim of size 1."""
        return self._atleast(1)

    def atleast_2d(self) -> Any:
        """``self`` with leading batch dims of size 1 prepended up to 2 batch dims."""
        return self._atleast(2)

    def atleast_3d(self) -> Any:
        """``self`` with leading batch dims of size 1 prepended up to 3 batch dims."""
        return self._atleast(3)

    def _atleast(self, ndim: int) -> Any:
        out = self
        while out.batch_dims < ndim:
            out = out.unsqueeze(0)
        return out

    def broadcast_to(self, *shape: int | Sequence[int]) -> Any:
        """Like :meth:`expand`: ``shape`` covers the batch dims (new ones lead; ``-1`` keeps a size)."""
        shape = _shape_args(shape)
        expanded_size(self.batch_size, shape, "broadcast_to")
        return self.expand(*shape)

    # ---- ops that change sizes
    @keeps_lock
    def narrow(self, dim: int, start: int, length: int) -> Any:
        """Batch elements ``start`` to ``start + length`` along batch dim ``dim`` (a view of each leaf)."""
        d = normalize_dim(dim, self.batch_dims)
        start, length = narrow_range(d, start, length, self.batch_size[d])
        bs = self.batch_size[:d] + (length,) + self.batch_size[d + 1 :]
        return self._map_batch(lambda v: v.narrow(d, start, length), torch.Size(bs), self._maybe_names())

    @keeps_lock
    def tile(self, *dims: int) -> Any:
        """``torch.tile`` over the batch dims: ``dims`` aligns with the last batch dims; extra
        leading entries add batch dims. Feature dims are never tiled."""
        n = self.batch_dims
        reps = tile_reps(_shape_args(dims), n)
        old = (1,) * (len(reps) - n) + tuple(self.batch_size)
        bs = torch.Size(r * s for r, s in zip(reps, old))
        return self._map_batch(lambda v: v.tile(reps + (1,) * (len(leaf_shape(v)) - n)), bs)

    @keeps_lock
    def rot90(self, k: int = 1, dims: Sequence[int] = (0, 1)) -> Any:
        """Rotate by 90 degrees ``k`` times in the plane of batch dims ``dims`` (from the first towards the second)."""
        k, d0, d1 = rot90_args(k, dims, self.batch_dims)
        if k == 0:
            return self
        bs, names = list(self.batch_size), self._maybe_names()
        if k % 2:
            bs[d0], bs[d1] = bs[d1], bs[d0]
            if names is not None:
                names = list(names)
                names[d0], names[d1] = names[d1], names[d0]
        return self._map_batch(lambda v: v.rot90(k, (d0, d1)), torch.Size(bs), names)

    def contiguous(self, *, canonical: bool = False, inplace: bool = False) -> Any:
        """A collection of contiguous leaves (a leaf that already is contiguous is reused, not copied);
        ``canonical=True`` also copies a tensor that torch calls contiguous but whose strides are not the
        row-major ones of its shape (a size-1 dim with any stride); ``inplace=True`` swaps them into ``self``."""
        check_inplace(self, "contiguous", inplace)
        fn = _canonical_contiguous if canonical else (lambda v: v.contiguous())
        return self._reshape_batch("contiguous", inplace, fn, self.batch_size, self._maybe_names())

    def masked_fill(self, mask: torch.Tensor, value: Any) -> Any:
        """A copy where entries at ``mask`` (a batch-shaped bool tensor) are ``value``."""
        self._check_mask(mask)
        return self._map_batch(
            lambda v: (
                v.masked_fill(_trailing_ones(mask, len(leaf_shape(v))), value)
                if isinstance(v, torch.Tensor)
                else v.masked_fill(mask, value)
            ),
            self.batch_size,
            self._maybe_names(),
        )

    def masked_fill_(self, mask: torch.Tensor, value: Any) -> Any:
        """In place: set the tensor leaves to ``value`` where ``mask`` (bool, over the leading batch dims) is True; returns ``self``.

        UnbatchedTensors are left as they are (the mask is over the batch dims, which they lack)."""
        self._check_mask(mask)
        for leaf in self.values(True, True):
            if isinstance(leaf, torch.Tensor) and type(leaf) not in UNBATCHED_TYPES:
                leaf.masked_fill_(_trailing_ones(mask, leaf.dim()), value)
        return self

    def _check_mask(self, mask: torch.Tensor) -> None:
        if mask.shape != self.batch_size[: mask.dim()]:
            raise ValueError(
                f"mask has shape {tuple(mask.shape)}, expected a prefix of the batch size {tuple(self.batch_size)}."
            )

    def where(self, condition: torch.Tensor, other: Any, *, out: Any = None, pad: Any = None) -> Any:
        """``torch.where(condition, self, other)`` leaf by leaf; ``condition`` is batch-shaped.

        ``pad``: the value of a leaf that only one of ``self`` and ``other`` holds (the result then
        has the leaves of both); without it, such a leaf raises ``KeyError``. ``out``: a collection
        that receives the result in place (its missing keys are added) and is returned.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.ones(3), batch_size=[3])
            >>> td.where(torch.tensor([True, False, True]), td.empty(), pad=0)["a"].tolist()
            [1.0, 0.0, 1.0]
        """
        other_is_td = is_tensor_collection(other)
        if self._is_non_tensor:  # a non-tensor leaf itself: element-wise choice of the payloads
            picked = _where_non_tensor(condition, self, other if other is not None else pad)
            return picked if out is None else out.update_(picked)

        def pick(v, o):
            return torch.where(_trailing_ones(condition, v.dim()), v, o)

        def missing(key: Any, where: str) -> KeyError:
            return KeyError(
                f"where: key {key!r} of one operand was not found and no pad value provided (it is missing from "
                f"{where}; pass pad=)."
            )

        result = self.empty(recurse=True)
        for key, value in self.items(True, True, is_leaf=is_leaf_nontensor):
            if type(value) in UNBATCHED_TYPES:
                result.set(key, value)  # whole: the condition is over the batch dims, which it lacks
            elif not isinstance(value, torch.Tensor):  # non-tensor data
                o = other.get(key, None) if other_is_td else other
                if o is None and pad is None:
                    raise missing(key, "other")
                result.set(key, _where_non_tensor(condition, value, o if o is not None else pad))
            elif isinstance(value, torch.Tensor):
                o = other.get(key, None) if other_is_td else other
                if o is None:
                    if pad is None:
                        raise missing(key, "other")
                    o = torch.full_like(value, pad)
                result.set(key, pick(value, o))
        if other_is_td:
            for key, o in other.items(True, True):
                if isinstance(o, torch.Tensor) and type(o) not in UNBATCHED_TYPES and key not in result.keys(True):
                    if pad is None:
                        raise missing(key, "self")
                    result.set(key, pick(torch.full_like(o, pad), o))
        return result if out is None else out.update(result, inplace=True)

    def gather(self, dim: int, index: torch.Tensor, *, out: Any = None, inplace: bool = False) -> Any:
        """``torch.gather`` along batch dim ``dim``; ``index`` has as many dims as the batch.

        ``out=`` receives the result (its entries are written in place); ``inplace=True`` makes ``self`` the result.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.arange(6).view(2, 3), batch_size=[2, 3])
            >>> td.gather(1, torch.tensor([[2], [0]]), inplace=True) is td, td["a"].tolist()
            (True, [[2], [3]])
        """
        if inplace and out is not None:
            raise ValueError("gather: out= and inplace=True are mutually exclusive; pass one of them.")
        check_inplace(self, "gather", inplace)
        d = normalize_dim(dim, self.batch_dims)
        if index.dim() != self.batch_dims:
            msg = f"gather: index has {index.dim()} dims, expected {self.batch_dims} (the batch dims)."
            if inplace:
                raise NotImplementedError(f"{msg} inplace=True needs index.ndim == batch_dims.")
            raise ValueError(msg)
        if out is not None and (not is_tensor_collection(out) or out.batch_size != index.shape):
            got = f"batch size {list(out.batch_size)}" if is_tensor_collection(out) else type(out).__name__
            raise ValueError(f"gather: out must be a collection of batch size {list(index.shape)}, got {got}.")

        def take(v):
            if not isinstance(v, torch.Tensor):  # a nested collection: its own extra batch dims are kept whole
                extra = v.batch_size[self.batch_dims :]
                return v.gather(d, _trailing_ones(index, v.batch_dims).expand(*index.shape, *extra))
            feat = v.shape[self.batch_dims :]
            idx = _trailing_ones(index, v.dim()).expand(*index.shape, *feat)
            return torch.gather(v, d, idx)

        if out is not None:
            return out.update_(self._map_batch(take, index.shape, self._maybe_names()))
        return self._reshape_batch("gather", inplace, take, index.shape, self._maybe_names())

    def _map_batch(self, fn: Callable[[Any], Any], batch_size: torch.Size, names: Any = None) -> Any:
        """``_map_entries`` for an op on the batch dims: an UnbatchedTensor entry is not passed to
        ``fn``, it is kept whole and tagged with ``batch_size`` (TensorDict inlines this)."""

        def entry(value: Any) -> Any:
            return value._with_batch_size(batch_size) if type(value) in UNBATCHED_TYPES else fn(value)

        return self._map_entries(entry, batch_size, names)

    def _reshape_batch(
        self, what: str, inplace: bool, fn: Callable[[Any], Any], batch_size: torch.Size, names: Any = None
    ) -> Any:
        """``_map_batch``, or with ``inplace=True`` its in-place form: ``self`` (and every nested
        TensorDict) keeps its identity and takes the new entries and batch size; the entries are
        replaced one at a time, so an old leaf can be freed before the next one is computed.
        ``check_inplace`` must have run first."""
        if not inplace:
            return self._map_batch(fn, batch_size, names)
        entries = self._tensordict
        if getattr(self, "_consolidated", None) is not None:
            del self._consolidated  # the new leaves live outside the consolidated storage
        for key in list(entries):
            value = entries[key]
            if type(value) in UNBATCHED_TYPES:
                entries[key] = value._with_batch_size(batch_size)
                continue
            new = fn(value)
            if not _adopt_entry(value, new):
                del value
                entries[key] = new
        self._batch_size = torch.Size(batch_size)
        self._names = names
        return self

    # ---- ops with several outputs
    def _split_entries(self, fn, sizes: Sequence[torch.Size], names: Any = None) -> tuple:
        parts: dict[str, Any] = {}
        for key, value in self._items_raw():
            if type(value) in UNBATCHED_TYPES:  # whole in every part, tagged with the part's batch size
                parts[key] = [value._with_batch_size(torch.Size(bs)) for bs in sizes]
                continue
            parts[key] = fn(value)
        return tuple(self._from_parts({k: p[i] for k, p in parts.items()}, bs, names) for i, bs in enumerate(sizes))

    def unbind(self, dim: int = 0) -> tuple:
        """A tuple of collections, one per index along batch dim ``dim`` (which they lack)."""
        d = normalize_dim(dim, self.batch_dims)
        bs = self.batch_size[:d] + self.batch_size[d + 1 :]
        names = self._maybe_names()
        if names is not None:
            names = _named_or_none(names[:d] + names[d + 1 :])
        return self._split_entries(lambda v: v.unbind(d), [bs] * self.batch_size[d], names)

    @keeps_lock
    def split(self, split_size: int | Sequence[int], dim: int = 0) -> tuple:
        """Split along batch dim ``dim`` into parts of ``split_size`` elements (the last may be shorter), or of the listed lengths."""
        d = split_dim(dim, self.batch_dims)
        lengths = split_lengths(split_size, self.batch_size[d])
        sizes = [self.batch_size[:d] + (n,) + self.batch_size[d + 1 :] for n in lengths]
        return self._split_entries(lambda v: _split_leaf(v, lengths, d), sizes, self._maybe_names())

    def chunk(self, chunks: int, dim: int = 0) -> tuple:
        """Split along batch dim ``dim`` into at most ``chunks`` equal parts (the last may be shorter), as :func:`torch.chunk`."""
        d = normalize_dim(dim, self.batch_dims)
        if chunks <= 0:
            raise ValueError(f"chunk: chunks must be positive, got {chunks}.")
        length = self.batch_size[d]
        return self.split(max(-(-length // chunks), 1), d) if length else (self,)

    @keeps_lock
    def tensor_split(self, indices_or_sections: int | Sequence[int] | torch.Tensor, dim: int = 0) -> tuple:
        """``torch.tensor_split`` along batch dim ``dim``: ``n`` near-equal sections, or split
        points (Python slice semantics: out-of-range points clamp, decreasing ones give empty parts)."""
        d = normalize_dim(dim, self.batch_dims)
        size = self.batch_size[d]
        bounds = split_bounds(indices_or_sections, size)
        sizes = [self.batch_size[:d] + (len(r),) + self.batch_size[d + 1 :] for r in split_slices(bounds, size)]
        return self._split_entries(lambda v: v.tensor_split(bounds, d), sizes, self._maybe_names())

    def _from_parts(self, entries: dict, batch_size: torch.Size, names: Any = None) -> Any:
        return _tensordict_class()._new_unsafe(entries, torch.Size(batch_size), self.device, names)

    # ---- padding, layout changes
    def pad(self, pad_size: Sequence[int], value: float = 0.0, inplace: bool = False, safe: bool = True) -> Any:
        """Pad batch dims with ``value``: ``pad_size = [dim0_before, dim0_after, dim1_before, ...]``.

        Non-tensor entries hold ``None`` in the padded slots. ``inplace=True`` swaps the padded
        entries into ``self`` (TensorDicts, and lazy stacks whose stack dim is not padded); every
        check runs before anything changes, so ``safe`` is accepted for compatibility only.
        """
        from .torch_function import pad  # deferred: that module imports the classes

        out = pad(cast("TensorDictBase", self), pad_size, value)
        return self._take_entries(out, "pad") if inplace else out

    def _take_entries(self, other: Any, what: str) -> Any:
        """Make ``self`` hold ``other``'s entries and batch size (in-place variants of size-changing ops)."""
        if type(self) is not _tensordict_class() or type(other) is not type(self):
            raise RuntimeError(f"{what}(inplace=True) is supported on TensorDict, got {type(self).__name__}.")
        if self._is_locked:
            raise locked_error(f"{what}(inplace=True) replaces its entries; unlock_() it first.")
        _adopt_entries(self, other)  # nested TensorDicts and non-tensor stacks keep their identity
        return self

    def densify(self, layout: torch.layout = torch.strided) -> Any:
        """``self`` when no nested entry is a lazy stack; else a copy whose lazy stacks are densified."""
        nested = [v for _, v in self._items_raw() if not isinstance(v, torch.Tensor) and not v._is_non_tensor]
        dense = {id(v): v.densify(layout=layout) for v in nested}
        if all(dense[id(v)] is v for v in nested):
            return self
        return self._map_entries(lambda v: dense.get(id(v), v), self.batch_size, self._maybe_names())

    def to_lazystack(self, dim: int = 0) -> Any:
        """A :class:`~tdict.LazyStackedTensorDict` of ``self.unbind(dim)`` along ``dim`` (``self`` if
        it already is a lazy stack along ``dim``)."""
        from ..lazy import LazyStackedTensorDict  # deferred: lazy.py imports this module

        d = normalize_dim(dim, self.batch_dims)
        if isinstance(self, LazyStackedTensorDict) and self.stack_dim == d:
            return self
        members = list(self.unbind(d))
        if not members:
            return LazyStackedTensorDict._new_unsafe([], d, self.batch_size)
        out = LazyStackedTensorDict._new_unsafe(members, d)
        names = self._maybe_names()
        if names is not None:
            out._stack_dim_name = names[d]
        return out

    # ---- stacking (classmethods, as in tensordict) and stacking the leaves
    @classmethod
    def stack(cls, input: Sequence[Any], dim: int = 0, *, out: Any = None) -> Any:
        """``torch.stack`` of collections (tensors are passed on to ``torch.stack``)."""
        from .torch_function import stack

        if input and not is_tensor_collection(input[0]):
            return torch.stack(list(input), dim, out=out)
        return stack(input, dim, out=out)

    @classmethod
    def cat(cls, input: Sequence[Any], dim: int = 0, *, out: Any = None) -> Any:
        """``torch.cat`` of collections (tensors are passed on to ``torch.cat``)."""
        from .torch_function import cat

        if input and not is_tensor_collection(input[0]):
            return torch.cat(list(input), dim, out=out)
        return cat(input, dim, out=out)

    @classmethod
    def lazy_stack(cls, input: Sequence[Any], dim: int = 0, *, out: Any = None, **kwargs: Any) -> Any:
        """:func:`tdict.lazy_stack` (``stack_dim_name`` is the one extra keyword)."""
        from ..lazy import lazy_stack

        return lazy_stack(input, dim, out=out, **kwargs)

    @classmethod
    def maybe_dense_stack(cls, input: Sequence[Any], dim: int = 0, *, out: Any = None, strict: bool = False) -> Any:
        """:func:`tdict.maybe_dense_stack`: dense where keys and leaf shapes agree, lazy where they
        do not. With ``out``, the result is written into ``out`` in place."""
        from .combining import maybe_dense_stack

        if out is not None and input and not is_tensor_collection(input[0]):
            return torch.stack(list(input), dim, out=out)
        result = maybe_dense_stack(input, dim)
        return result if out is None else out.update_(result)

    def stack_from_tensordict(
        self, dim: int = 0, *, sorted: bool | Sequence[Any] | None = None, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``torch.stack`` of every tensor leaf, in key order (``sorted=True``: alphabetical; a list: that order)."""
        return torch.stack(self._leaves_for("stack_from_tensordict", sorted), dim, out=out)

    def cat_from_tensordict(
        self, dim: int = 0, *, sorted: bool | Sequence[Any] | None = None, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``torch.cat`` of every tensor leaf, in key order (``sorted=True``: alphabetical; a list: that order)."""
        return torch.cat(self._leaves_for("cat_from_tensordict", sorted), dim, out=out)

    def _leaves_for(self, what: str, order: Any) -> list:
        from .utils import unravel_key

        items = list(self.items(True, True, is_leaf_nontensor, sort=order is True))  # non-tensor data raises below
        for key, value in items:
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"{what}: key {key!r} holds a {type(value).__name__}, only tensor leaves can be stacked (exclude it first)."
                )
        if order in (None, False, True):
            return [v for _, v in items]
        wanted = [unravel_key(k) for k in order]
        have = [k for k, _ in items]
        if set(wanted) != set(have) or len(wanted) != len(have):
            missing = [k for k in have if k not in wanted]
            extra = [k for k in wanted if k not in have]
            raise KeyError(
                f"{what}: sorted must list every leaf key once; missing {missing}, unknown {extra}, got {list(order)}."
            )
        leaves = dict(items)
        return [leaves[k] for k in wanted]


def _canonical_contiguous(value: Any) -> Any:
    """``value`` with the row-major strides of its shape (copied only when its strides differ)."""
    if not isinstance(value, torch.Tensor):
        return value.contiguous(canonical=True)
    stride, expected = value.stride(), []
    step = 1
    for size in reversed(value.shape):
        expected.append(step)
        step *= max(size, 1)
    if value.is_contiguous() and tuple(reversed(expected)) == stride:
        return value
    return value.clone(memory_format=torch.contiguous_format)


def _where_non_tensor(condition: torch.Tensor, value: Any, other: Any) -> Any:
    """A non-tensor leaf choosing, element by element of its batch, ``value``'s payload where
    ``condition`` holds and ``other``'s (a non-tensor leaf, or one payload for all) elsewhere."""
    from ..expand import expand_right
    from ..non_tensor_stack import NonTensorStack

    shape = value.batch_size
    chosen = expand_right(condition, shape).tolist()
    mine = value.tolist() if shape else value.data
    if is_tensor_collection(other):
        theirs = other.tolist() if other.batch_size else other.data
    else:
        theirs = other
        for size in reversed(shape):
            theirs = [theirs] * size

    def pick(flag: Any, a: Any, b: Any) -> Any:
        if isinstance(flag, list):
            return [pick(f, x, y) for f, x, y in zip(flag, a, b)]
        return a if flag else b

    picked = pick(chosen, mine, theirs)
    if not shape:
        return type(value)(picked) if not value._is_lazy else picked
    return NonTensorStack._new(torch.arange(shape.numel()).reshape(shape), _flatten(picked, len(shape)), value.device)


def _flatten(nested: Any, depth: int) -> list:
    """The items of ``depth`` levels of nested lists, in order."""
    if depth == 0:
        return [nested]
    return [item for sub in nested for item in _flatten(sub, depth - 1)]


def _split_leaf(value: Any, lengths: list, dim: int) -> Any:
    """``value.split(lengths, dim)``; a nested tensor split along its first dim (which torch does not
    support) is rebuilt part by part from its components."""
    if dim == 0 and isinstance(value, torch.Tensor) and value.is_nested:
        components, out, start = value.unbind(0), [], 0
        for n in lengths:
            out.append(torch.nested.as_nested_tensor(list(components[start : start + n]), layout=value.layout))
            start += n
        return tuple(out)
    return value.split(lengths, dim)
