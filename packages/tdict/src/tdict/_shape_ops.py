"""Shape operations on the batch dims of a tensor collection.

Every op is expressed once, on an entry (a tensor or a nested collection) whose shape starts
with the batch dims: the op touches those leading dims and leaves the feature dims alone.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from ._utils import is_tensor_collection, leaf_shape, normalize_dim, normalize_dims


def _shape_args(shape: tuple) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (list, tuple, torch.Size)):
        return tuple(shape[0])
    return tuple(shape)


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
        if split_size <= 0:
            raise ValueError(f"split: split_size must be positive, got {split_size}.")
        return [min(split_size, length - i) for i in range(0, length, split_size)]
    lengths = list(split_size)
    if sum(lengths) != length:
        raise ValueError(f"split: sizes {lengths} sum to {sum(lengths)}, the dim has {length}.")
    return lengths


def _trailing_ones(t: torch.Tensor, ndim: int) -> torch.Tensor:
    """View a batch-shaped tensor with singleton dims appended up to ``ndim`` dims."""
    return t.reshape(t.shape + (1,) * (ndim - t.dim())) if t.dim() < ndim else t


def _tensordict_class() -> type:
    from .tensordict import TensorDict  # deferred: tensordict.py imports this module

    return TensorDict


class ShapeOpsMixin:
    """reshape, view, (un)squeeze, permute, expand, split... over batch dims."""

    __slots__ = ()

    # ---- ops that keep a single output
    def reshape(self, *shape: int) -> Any:
        n, bs = self.batch_dims, infer_shape(_shape_args(shape), self.numel())
        return self._map_entries(lambda v: v.reshape(bs + leaf_shape(v)[n:]), bs)

    def view(self, *shape: Any) -> Any:
        if len(shape) == 1 and isinstance(shape[0], torch.dtype):
            return self._map_entries(lambda v: v.view(shape[0]), self.batch_size, self._maybe_names())
        n, bs = self.batch_dims, infer_shape(_shape_args(shape), self.numel(), "view")
        return self._map_entries(lambda v: v.view(bs + leaf_shape(v)[n:]), bs)

    def unsqueeze(self, dim: int) -> Any:
        dim = normalize_dim(dim, self.batch_dims + 1)
        bs = self.batch_size[:dim] + (1,) + self.batch_size[dim:]
        names = self._maybe_names()
        if names is not None:
            names = names[:dim] + [None] + names[dim:]
        return self._map_entries(lambda v: v.unsqueeze(dim), torch.Size(bs), names)

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Any:
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
        return self._map_entries(lambda v: v.squeeze(dims), bs, names)

    def permute(self, *dims: int) -> Any:
        n = self.batch_dims
        dims = normalize_dims(_shape_args(dims), n)
        if sorted(dims) != list(range(n)):
            raise ValueError(f"permute: dims {list(dims)} are not a permutation of the {n} batch dims.")
        bs = torch.Size(self.batch_size[d] for d in dims)
        names = self._maybe_names()
        if names is not None:
            names = [names[d] for d in dims]
        return self._map_entries(lambda v: v.permute(tuple(dims) + tuple(range(n, len(leaf_shape(v))))), bs, names)

    def transpose(self, dim0: int, dim1: int) -> Any:
        n = self.batch_dims
        d0, d1 = normalize_dim(dim0, n, "dim0"), normalize_dim(dim1, n, "dim1")
        order = list(range(n))
        order[d0], order[d1] = order[d1], order[d0]
        return self.permute(*order)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Any:
        n = self.batch_dims
        if n == 0:
            return self
        s, e = normalize_dim(start_dim, n, "start_dim"), normalize_dim(end_dim, n, "end_dim")
        if e < s:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}.")
        if e == s:
            return self
        merged = 1
        for d in self.batch_size[s : e + 1]:
            merged *= d
        bs = self.batch_size[:s] + (merged,) + self.batch_size[e + 1 :]
        return self._map_entries(lambda v: v.flatten(s, e), torch.Size(bs))

    def unflatten(self, dim: int, unflattened_size: Sequence[int]) -> Any:
        d = normalize_dim(dim, self.batch_dims)
        sizes = infer_shape(unflattened_size, self.batch_size[d], "unflatten")
        bs = self.batch_size[:d] + sizes + self.batch_size[d + 1 :]
        return self._map_entries(lambda v: v.unflatten(d, sizes), torch.Size(bs))

    def expand(self, *shape: int) -> Any:
        shape = _shape_args(shape)
        n = self.batch_dims
        if len(shape) < n:
            raise ValueError(f"expand: the new shape {list(shape)} has fewer dims than the batch {list(self.batch_size)}.")
        offset = len(shape) - n
        bs = torch.Size(self.batch_size[i - offset] if s == -1 and i >= offset else s for i, s in enumerate(shape))
        for i in range(n):
            old, new = self.batch_size[i], bs[i + offset]
            if old != new and old != 1:
                raise ValueError(f"expand: batch dim {i} of size {old} cannot expand to {new}.")
        return self._map_entries(lambda v: v.expand(bs + leaf_shape(v)[n:]), bs)

    def expand_as(self, other: Any) -> Any:
        return self.expand(*other.shape)

    def repeat(self, *repeats: int) -> Any:
        repeats = _shape_args(repeats)
        n = self.batch_dims
        if len(repeats) != n:
            raise ValueError(f"repeat: expected {n} repeat counts (one per batch dim), got {len(repeats)}.")
        bs = torch.Size(s * r for s, r in zip(self.batch_size, repeats))
        return self._map_entries(lambda v: v.repeat(tuple(repeats) + (1,) * (len(leaf_shape(v)) - n)), bs)

    def repeat_interleave(self, repeats: int | torch.Tensor, dim: int = 0, *, output_size: int | None = None) -> Any:
        d = normalize_dim(dim, self.batch_dims)
        if isinstance(repeats, torch.Tensor) and repeats.numel() > 1:
            new = int(repeats.sum())
        else:
            new = self.batch_size[d] * int(repeats)
        bs = self.batch_size[:d] + (new,) + self.batch_size[d + 1 :]
        return self._map_entries(lambda v: v.repeat_interleave(repeats, dim=d, output_size=output_size), torch.Size(bs), self._maybe_names())

    def flip(self, dims: int | Sequence[int]) -> Any:
        dims = normalize_dims(dims, self.batch_dims)
        return self._map_entries(lambda v: v.flip(dims), self.batch_size, self._maybe_names())

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int]) -> Any:
        dims = normalize_dims(dims, self.batch_dims)
        return self._map_entries(lambda v: v.roll(shifts, dims), self.batch_size, self._maybe_names())

    def contiguous(self) -> Any:
        return self._map_entries(lambda v: v.contiguous(), self.batch_size, self._maybe_names())

    def masked_fill(self, mask: torch.Tensor, value: Any) -> Any:
        """A copy where entries at ``mask`` (a batch-shaped bool tensor) are ``value``."""
        self._check_mask(mask)
        return self._map_entries(
            lambda v: v.masked_fill(_trailing_ones(mask, len(leaf_shape(v))), value) if isinstance(v, torch.Tensor) else v.masked_fill(mask, value),
            self.batch_size,
            self._maybe_names(),
        )

    def masked_fill_(self, mask: torch.Tensor, value: Any) -> Any:
        self._check_mask(mask)
        for leaf in self.values(True, True):
            if isinstance(leaf, torch.Tensor):
                leaf.masked_fill_(_trailing_ones(mask, leaf.dim()), value)
        return self

    def _check_mask(self, mask: torch.Tensor) -> None:
        if mask.shape != self.batch_size[: mask.dim()]:
            raise ValueError(f"mask has shape {tuple(mask.shape)}, expected a prefix of the batch size {tuple(self.batch_size)}.")

    def where(self, condition: torch.Tensor, other: Any, *, pad: Any = None) -> Any:
        """``torch.where(condition, self, other)`` leaf by leaf; ``condition`` is batch-shaped."""
        def pick(v, key):
            o = other.get(key) if is_tensor_collection(other) else other
            return torch.where(_trailing_ones(condition, v.dim()), v, o)

        out = self.empty(recurse=True)
        for key, value in self.items(True, True):
            if isinstance(value, torch.Tensor):
                out.set(key, pick(value, key))
        return out

    def gather(self, dim: int, index: torch.Tensor) -> Any:
        """``torch.gather`` along batch dim ``dim``; ``index`` has as many dims as the batch."""
        d = normalize_dim(dim, self.batch_dims)
        if index.dim() != self.batch_dims:
            raise ValueError(f"gather: index has {index.dim()} dims, expected {self.batch_dims} (the batch dims).")

        def take(v):
            if not isinstance(v, torch.Tensor):
                return v.gather(d, index)
            feat = v.shape[self.batch_dims :]
            idx = _trailing_ones(index, v.dim()).expand(*index.shape, *feat)
            return torch.gather(v, d, idx)

        return self._map_entries(take, index.shape)

    # ---- ops with several outputs
    def _split_entries(self, fn, sizes: Sequence[torch.Size]) -> tuple:
        parts: dict[str, Any] = {}
        for key, value in self._items_raw():
            parts[key] = fn(value)
        return tuple(self._from_parts({k: p[i] for k, p in parts.items()}, bs) for i, bs in enumerate(sizes))

    def unbind(self, dim: int = 0) -> tuple:
        d = normalize_dim(dim, self.batch_dims)
        bs = self.batch_size[:d] + self.batch_size[d + 1 :]
        return self._split_entries(lambda v: v.unbind(d), [bs] * self.batch_size[d])

    def split(self, split_size: int | Sequence[int], dim: int = 0) -> tuple:
        d = normalize_dim(dim, self.batch_dims)
        lengths = split_lengths(split_size, self.batch_size[d])
        sizes = [self.batch_size[:d] + (n,) + self.batch_size[d + 1 :] for n in lengths]
        return self._split_entries(lambda v: v.split(lengths, d), sizes)

    def chunk(self, chunks: int, dim: int = 0) -> tuple:
        d = normalize_dim(dim, self.batch_dims)
        if chunks <= 0:
            raise ValueError(f"chunk: chunks must be positive, got {chunks}.")
        length = self.batch_size[d]
        return self.split(max(-(-length // chunks), 1), d) if length else (self,)

    def _from_parts(self, entries: dict, batch_size: torch.Size) -> Any:
        return _tensordict_class()._new_unsafe(entries, torch.Size(batch_size), self.device, None)
