"""Shape ops of a lazy stack that keep it lazy.

Ops that keep the stack dim (``unsqueeze``, ``squeeze``, ``permute``, ``flatten``/``unflatten``
of other dims, ``expand``, ``flip``, ``unbind``, ``split``) are applied to every member and
return lazy stacks; ops that merge the stack dim with others fall back to
:class:`~tdict._shape_ops.ShapeOpsMixin`, which works on the dense stack.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ._lazy_index import _FULL
from ._shape_ops import ShapeOpsMixin, _shape_args, infer_shape, split_lengths
from ._utils import normalize_dim, normalize_dims

if TYPE_CHECKING:
    from .base import TensorDictBase
    from .lazy import LazyStackedTensorDict


class LazyShapeMixin:
    """Member-wise shape ops of :class:`~tdict.lazy.LazyStackedTensorDict`. The host provides
    ``tensordicts``, ``stack_dim``, ``_batch_size``, ``_like``, ``_index``, ``_stack_of`` and
    ``_empty_stack``."""

    __slots__ = ()

    def _member_dim(self, d: int) -> int:
        return d if d < self.stack_dim else d - 1

    def unbind(self, dim: int = 0) -> tuple:
        d = normalize_dim(dim, self.batch_dims)
        sd = self.stack_dim
        if d == sd:
            return tuple(self.tensordicts)
        md = self._member_dim(d)
        new_sd = sd if d > sd else sd - 1
        per = [td.unbind(md) for td in self.tensordicts]
        if not per:
            return tuple(self._empty_stack([_FULL] * d + [i]) for i in range(self._batch_size[d]))
        return tuple(self._stack_of([p[i] for p in per], new_sd) for i in range(self._batch_size[d]))

    def split(self, split_size: int | Sequence[int], dim: int = 0) -> tuple:
        d = normalize_dim(dim, self.batch_dims)
        sd = self.stack_dim
        if d != sd:
            per = [td.split(split_size, self._member_dim(d)) for td in self.tensordicts]
            if not per:
                return ShapeOpsMixin.split(self, split_size, dim)
            return tuple(self._stack_of(list(group), sd) for group in zip(*per))
        lengths = split_lengths(split_size, self._batch_size[d])
        out, start = [], 0
        for n in lengths:
            out.append(self._index((_FULL,) * sd + (slice(start, start + n),)))
            start += n
        return tuple(out)

    def unsqueeze(self, dim: int) -> "LazyStackedTensorDict":
        d = normalize_dim(dim, self.batch_dims + 1)
        sd = self.stack_dim
        if d <= sd:
            return self._like([td.unsqueeze(d) for td in self.tensordicts], sd + 1)
        return self._like([td.unsqueeze(d - 1) for td in self.tensordicts], sd)

    def squeeze(self, dim: int | Sequence[int] | None = None) -> TensorDictBase:
        bs = self._batch_size
        if dim is None:
            dims = [i for i, s in enumerate(bs) if s == 1]
        else:
            dims = [d for d in normalize_dims(dim, self.batch_dims) if bs[d] == 1]
        if not dims:
            return self
        sd = self.stack_dim
        member_dims = tuple(self._member_dim(d) for d in dims if d != sd)
        if sd in dims:
            td = self.tensordicts[0]
            return td.squeeze(member_dims) if member_dims else td
        new_sd = sd - sum(1 for d in dims if d < sd)
        return self._like([td.squeeze(member_dims) for td in self.tensordicts], new_sd)

    def permute(self, *dims: int) -> "LazyStackedTensorDict":
        n = self.batch_dims
        dims = normalize_dims(_shape_args(dims), n)
        if sorted(dims) != list(range(n)):
            raise ValueError(f"permute: dims {list(dims)} are not a permutation of the {n} batch dims.")
        sd = self.stack_dim
        member_perm = [self._member_dim(d) for d in dims if d != sd]
        members = [td.permute(*member_perm) for td in self.tensordicts] if member_perm != sorted(member_perm) else list(self.tensordicts)
        return self._like(members, dims.index(sd))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> TensorDictBase:
        n = self.batch_dims
        s, e = normalize_dim(start_dim, n, "start_dim"), normalize_dim(end_dim, n, "end_dim")
        sd = self.stack_dim
        if e <= s or s <= sd <= e:
            return ShapeOpsMixin.flatten(self, start_dim, end_dim)
        ms, me = self._member_dim(s), self._member_dim(e)
        new_sd = sd if sd < s else sd - (e - s)
        return self._like([td.flatten(ms, me) for td in self.tensordicts], new_sd)

    def unflatten(self, dim: int, unflattened_size: Sequence[int]) -> TensorDictBase:
        d = normalize_dim(dim, self.batch_dims)
        sd = self.stack_dim
        if d == sd:
            return ShapeOpsMixin.unflatten(self, dim, unflattened_size)
        sizes = infer_shape(unflattened_size, self._batch_size[d], "unflatten")
        new_sd = sd if d > sd else sd + len(sizes) - 1
        return self._like([td.unflatten(self._member_dim(d), sizes) for td in self.tensordicts], new_sd)

    def reshape(self, *shape: int) -> TensorDictBase:
        if infer_shape(_shape_args(shape), self.numel()) == self._batch_size:
            return self
        return ShapeOpsMixin.reshape(self, *shape)

    def expand(self, *shape: int) -> TensorDictBase:
        shape = _shape_args(shape)
        n = self.batch_dims
        sd = self.stack_dim
        offset = len(shape) - n
        if offset < 0 or shape[sd + offset] not in (-1, self._batch_size[sd]):
            return ShapeOpsMixin.expand(self, *shape)
        member_shape = tuple(shape[: sd + offset]) + tuple(shape[sd + offset + 1 :])
        return self._like([td.expand(*member_shape) for td in self.tensordicts], sd + offset)

    def flip(self, dims: int | Sequence[int]) -> "LazyStackedTensorDict":
        dims = normalize_dims(dims, self.batch_dims)
        sd = self.stack_dim
        tds = self.tensordicts[::-1] if sd in dims else list(self.tensordicts)
        member_dims = tuple(self._member_dim(d) for d in dims if d != sd)
        return self._like([td.flip(member_dims) for td in tds] if member_dims else tds)
