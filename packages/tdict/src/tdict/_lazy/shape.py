"""Shape ops of a lazy stack that keep it lazy.

Ops that keep the stack dim (``unsqueeze``, ``squeeze``, ``permute``, ``flatten``/``unflatten``
of other dims, ``expand``, ``flip``, ``roll``, ``rot90``, ``narrow``, ``tile`` and ``pad`` of
other dims, ``unbind``, ``split``, ``tensor_split``) are applied to every member, or select /
reorder the members, and return lazy stacks; ops that merge the stack dim with others fall back
to :class:`~tdict._core.shape_ops.ShapeOpsMixin`, which works on the dense stack. ``movedim``,
``swapdims``, ``atleast_*d``, ``broadcast_to``, ``fliplr``/``flipud`` are built on those and stay
lazy too.
"""

# Mixin of LazyStackedTensorDict: the attributes it reads (tensordicts, stack_dim, _like...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, cast

import torch

from .index import _FULL
from .._core.locking import keeps_lock
from .._core.shape_ops import (
    ShapeOpsMixin,
    _shape_args,
    check_inplace,
    infer_shape,
    narrow_range,
    permutation_dims,
    rot90_args,
    split_bounds,
    split_dim,
    split_lengths,
    split_slices,
    tile_reps,
)
from .._core.utils import normalize_dim, normalize_dims
from ..tensordict import TensorDict

if TYPE_CHECKING:
    from ..base import TensorDictBase
    from ..lazy import LazyStackedTensorDict


class LazyShapeMixin:
    """Member-wise shape ops of :class:`~tdict.lazy.LazyStackedTensorDict`. The host provides
    ``tensordicts``, ``stack_dim``, ``_batch_size``, ``_like``, ``_index``, ``_stack_of`` and
    ``_empty_stack``."""

    __slots__ = ()

    def _member_dim(self, d: int) -> int:
        return d if d < self.stack_dim else d - 1

    def unbind(self, dim: int = 0) -> tuple:
        """Like :meth:`TensorDict.unbind`; along the stack dim, the members themselves (not copies)."""
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

    @keeps_lock
    def split(self, split_size: int | Sequence[int], dim: int = 0) -> tuple:
        """Like :meth:`TensorDict.split`; the parts are lazy stacks (along the stack dim, of the members)."""
        d = split_dim(dim, self.batch_dims)
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

    @keeps_lock
    def unsqueeze(self, dim: int) -> "LazyStackedTensorDict":
        """Like :meth:`TensorDict.unsqueeze`, member by member (the result stays a lazy stack)."""
        d = normalize_dim(dim, self.batch_dims + 1)
        sd = self.stack_dim
        if d <= sd:
            return self._like([td.unsqueeze(d) for td in self.tensordicts], sd + 1)
        return self._like([td.unsqueeze(d - 1) for td in self.tensordicts], sd)

    @keeps_lock
    def squeeze(self, dim: int | Sequence[int] | None = None) -> TensorDictBase:
        """Like :meth:`TensorDict.squeeze`, member by member; squeezing the stack dim (of size 1) gives its single member."""
        bs = self._batch_size
        if dim is None:
            dims = [i for i, s in enumerate(bs) if s == 1]
        else:
            dims = [d for d in normalize_dims(dim, self.batch_dims) if bs[d] == 1]
        if not dims:
            return cast("TensorDictBase", self)
        sd = self.stack_dim
        member_dims = tuple(self._member_dim(d) for d in dims if d != sd)
        if sd in dims:
            td = self.tensordicts[0]
            return td.squeeze(member_dims) if member_dims else td
        new_sd = sd - sum(1 for d in dims if d < sd)
        return self._like([td.squeeze(member_dims) for td in self.tensordicts], new_sd)

    @keeps_lock
    def permute(self, *dims: int) -> "LazyStackedTensorDict":
        """Like :meth:`TensorDict.permute`, member by member; the stack dim moves to its new place."""
        n = self.batch_dims
        dims = permutation_dims(dims, n)
        sd = self.stack_dim
        member_perm = [self._member_dim(d) for d in dims if d != sd]
        members = (
            [td.permute(*member_perm) for td in self.tensordicts]
            if member_perm != sorted(member_perm)
            else list(self.tensordicts)
        )
        return self._like(members, dims.index(sd))

    @keeps_lock
    def flatten(self, start_dim: int | None = 0, end_dim: int | None = -1, *, inplace: bool = False) -> TensorDictBase:
        """Like :meth:`TensorDict.flatten`; flattening a range that holds the stack dim gives a dense TensorDict."""
        check_inplace(self, "flatten", inplace)
        start_dim = 0 if start_dim is None else start_dim
        end_dim = -1 if end_dim is None else end_dim
        n = self.batch_dims
        s, e = normalize_dim(start_dim, n, "start_dim"), normalize_dim(end_dim, n, "end_dim")
        sd = self.stack_dim
        if e <= s or s <= sd <= e:
            return ShapeOpsMixin.flatten(self, start_dim, end_dim)
        ms, me = self._member_dim(s), self._member_dim(e)
        new_sd = sd if sd < s else sd - (e - s)
        return self._like([td.flatten(ms, me) for td in self.tensordicts], new_sd)

    @keeps_lock
    def unflatten(self, dim: int, unflattened_size: Sequence[int], *, inplace: bool = False) -> TensorDictBase:
        """Like :meth:`TensorDict.unflatten`, member by member; unflattening the stack dim gives a dense TensorDict."""
        check_inplace(self, "unflatten", inplace)
        d = normalize_dim(dim, self.batch_dims)
        sd = self.stack_dim
        if d == sd:
            return ShapeOpsMixin.unflatten(self, dim, unflattened_size)
        sizes = infer_shape(unflattened_size, self._batch_size[d], "unflatten")
        new_sd = sd if d > sd else sd + len(sizes) - 1
        return self._like([td.unflatten(self._member_dim(d), sizes) for td in self.tensordicts], new_sd)

    @keeps_lock
    def reshape(self, *shape: int, size: Sequence[int] | None = None, inplace: bool = False) -> TensorDictBase:
        """Like :meth:`TensorDict.reshape`: ``self`` when the batch size does not change, else a dense TensorDict."""
        check_inplace(self, "reshape", inplace)
        shape = _shape_args(shape, size)
        if infer_shape(shape, self.numel()) == self._batch_size:
            return cast("TensorDictBase", self)
        return ShapeOpsMixin.reshape(self, *shape)

    @keeps_lock
    def expand(self, *shape: int) -> TensorDictBase:
        """Like :meth:`TensorDict.expand`, member by member while the stack dim keeps its size (else a dense TensorDict)."""
        shape = _shape_args(shape)
        n = self.batch_dims
        sd = self.stack_dim
        offset = len(shape) - n
        if offset < 0 or shape[sd + offset] not in (-1, self._batch_size[sd]):
            return ShapeOpsMixin.expand(self, *shape)
        member_shape = tuple(shape[: sd + offset]) + tuple(shape[sd + offset + 1 :])
        return self._like([td.expand(*member_shape) for td in self.tensordicts], sd + offset)

    @keeps_lock
    def flip(self, dims: int | Sequence[int]) -> "LazyStackedTensorDict":
        """Like :meth:`TensorDict.flip`: flipping the stack dim reverses the order of the members."""
        dims = normalize_dims(dims, self.batch_dims)
        sd = self.stack_dim
        tds = self.tensordicts[::-1] if sd in dims else list(self.tensordicts)
        member_dims = tuple(self._member_dim(d) for d in dims if d != sd)
        return self._like([td.flip(member_dims) for td in tds] if member_dims else tds)

    @keeps_lock
    def roll(
        self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None, *, inplace: bool = False
    ) -> TensorDictBase:
        """Like :meth:`TensorDict.roll`: a shift along the stack dim rotates the members; without ``dims``, a dense TensorDict."""
        check_inplace(self, "roll", inplace)
        if dims is None or not self.tensordicts:
            return ShapeOpsMixin.roll(self, shifts, dims)
        dims = normalize_dims(dims, self.batch_dims)
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        if len(shifts) != len(dims):
            raise ValueError(f"roll: shifts and dims must pair up, got shifts={shifts} and dims={list(dims)}.")
        sd = self.stack_dim
        tds = list(self.tensordicts)
        member_shifts, member_dims = [], []
        for shift, d in zip(shifts, dims):
            if d == sd:
                cut = -shift % len(tds)
                tds = tds[cut:] + tds[:cut]
            else:
                member_shifts.append(shift)
                member_dims.append(self._member_dim(d))
        if member_dims:
            tds = [td.roll(tuple(member_shifts), tuple(member_dims)) for td in tds]
        return self._like(tds)

    @keeps_lock
    def rot90(self, k: int = 1, dims: Sequence[int] = (0, 1)) -> TensorDictBase:
        """Like :meth:`TensorDict.rot90`, done with flips and a transpose so that the stack stays lazy."""
        # torch's own decomposition: flips and a transpose, which keep the stack lazy
        k, d0, d1 = rot90_args(k, dims, self.batch_dims)
        if k == 0:
            return cast("TensorDictBase", self)
        if k == 2:
            return self.flip((d0, d1))
        return self.flip(d1 if k == 1 else d0).transpose(d0, d1)

    @keeps_lock
    def narrow(self, dim: int, start: int, length: int) -> TensorDictBase:
        """Like :meth:`TensorDict.narrow`: along the stack dim, a lazy stack of the chosen members; else member by member."""
        d = normalize_dim(dim, self.batch_dims)
        start, length = narrow_range(d, start, length, self._batch_size[d])
        sd = self.stack_dim
        if d == sd:
            return self._index((_FULL,) * sd + (slice(start, start + length),))
        if not self.tensordicts:
            return ShapeOpsMixin.narrow(self, dim, start, length)
        return self._like([td.narrow(self._member_dim(d), start, length) for td in self.tensordicts])

    @keeps_lock
    def tile(self, *dims: int) -> TensorDictBase:
        """Like :meth:`TensorDict.tile`, member by member; repeating the stack dim gives a dense TensorDict (members are never aliased)."""
        n = self.batch_dims
        reps = tile_reps(_shape_args(dims), n)
        new_sd = self.stack_dim + len(reps) - n
        if reps[new_sd] != 1 or not self.tensordicts:  # repeating members would alias them: go dense
            return ShapeOpsMixin.tile(self, *reps)
        member_reps = reps[:new_sd] + reps[new_sd + 1 :]
        return self._stack_of([td.tile(member_reps) for td in self.tensordicts], new_sd)

    @keeps_lock
    def tensor_split(self, indices_or_sections: int | Sequence[int] | torch.Tensor, dim: int = 0) -> tuple:
        """Like :meth:`TensorDict.tensor_split`; the parts are lazy stacks (along the stack dim, of the members)."""
        d = normalize_dim(dim, self.batch_dims)
        sd = self.stack_dim
        bounds = split_bounds(indices_or_sections, self._batch_size[d])
        if d == sd:
            return tuple(
                self._index((_FULL,) * sd + (slice(r.start, r.stop),))
                for r in split_slices(bounds, self._batch_size[d])
            )
        if not self.tensordicts:
            return ShapeOpsMixin.tensor_split(self, bounds, dim)
        per = [td.tensor_split(bounds, self._member_dim(d)) for td in self.tensordicts]
        return tuple(self._stack_of(list(group), sd) for group in zip(*per))

    def pad(
        self, pad_size: Sequence[int], value: float = 0.0, inplace: bool = False, safe: bool = True
    ) -> TensorDictBase:
        """Like :meth:`TensorDict.pad`, member by member; padding the stack dim gives a dense TensorDict.

        ``inplace=True`` needs unlocked TensorDict members; it pads them in place, and padding the
        stack dim adds members filled with ``value`` (or drops members, for a negative pad).

        Examples:
            >>> import torch
            >>> from tdict import TensorDict, lazy_stack
            >>> s = lazy_stack([TensorDict(x=torch.ones(2), batch_size=[2])] * 2)
            >>> out = s.pad([0, 1, 1, 0], value=5.0, inplace=True)
            >>> out is s, len(s.tensordicts), s["x"].tolist()
            (True, 3, [[5.0, 1.0, 1.0], [5.0, 1.0, 1.0], [5.0, 5.0, 5.0]])
        """
        sd = self.stack_dim
        pad_size = list(pad_size)
        stack_pad = tuple(pad_size[2 * sd : 2 * sd + 2])
        if not self.tensordicts or (stack_pad not in ((), (0, 0)) and not inplace):
            if inplace:
                raise RuntimeError(
                    "pad(inplace=True) on an empty lazy stack has no member to pad: pad out of place (it returns a dense TensorDict)."
                )
            return ShapeOpsMixin.pad(cast("TensorDictBase", self), pad_size, value)
        if len(pad_size) % 2 or len(pad_size) // 2 > self.batch_dims:  # checked here: members see fewer dims
            raise ValueError(
                f"pad: pad_size must hold two ints per padded batch dim (at most {self.batch_dims} dims), got {pad_size}."
            )
        member_pad = pad_size[: 2 * sd] + pad_size[2 * sd + 2 :]
        if not inplace:
            return self._like([td.pad(member_pad, value) for td in self.tensordicts])
        if self._is_locked or any(type(td) is not TensorDict or td._is_locked for td in self.tensordicts):
            raise RuntimeError(
                "pad(inplace=True) on a lazy stack needs unlocked TensorDict members: pad out of place instead."
            )
        before, after = (tuple(stack_pad) + (0, 0))[:2]
        kept = len(self.tensordicts) + min(before, 0) + min(after, 0)
        if kept < 0:
            raise ValueError(
                f"pad: pad_size {pad_size} crops {-min(before, 0) - min(after, 0)} members from a stack of {len(self.tensordicts)}."
            )
        members = [td.pad(member_pad, value) for td in self.tensordicts]  # every check passes before any swap
        template = members[0]
        fill = [
            ShapeOpsMixin.pad(template.unsqueeze(0), [0, 1], value)[1] for _ in range(max(before, 0) + max(after, 0))
        ]
        for td, new in zip(self.tensordicts, members):
            td._take_entries(new, "pad")
        tds = list(self.tensordicts)[max(-before, 0) : len(self.tensordicts) - max(-after, 0)]
        tds = fill[: max(before, 0)] + tds + fill[max(before, 0) :]
        self.tensordicts[:] = tds
        bs = template.batch_size
        self._batch_size = torch.Size(tuple(bs[:sd]) + (len(tds),) + tuple(bs[sd:]))
        return cast("TensorDictBase", self)
