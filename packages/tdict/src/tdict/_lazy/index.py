"""Indexing of a lazy stack: ``stack[index]`` and ``stack[index] = value``.

An int on the stack dim returns the member itself (indexed on the other dims if the index says
so); slices and index tensors on the stack dim return lazy stacks of the selected members;
indices on the other dims are forwarded to every member. An advanced index that mixes the stack
dim with other dims yields nested lazy stacks of the selected elements. Writes cut the value
along the stack dim and write into the members.
"""

# Mixin of LazyStackedTensorDict: the attributes it reads (tensordicts, stack_dim, _like...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, cast

import torch

from .._core.keys import is_leaf_nontensor
from ..base import TensorDictBase, _indexed_batch_size, is_tensor_collection
from ..tensordict import TensorDict

if TYPE_CHECKING:
    from ..lazy import LazyStackedTensorDict

_FULL = slice(None)
_NOTHING = object()


class LazyIndexMixin:
    """Indexing of :class:`~tdict.lazy.LazyStackedTensorDict`, the only class that inherits it
    (so ``isinstance(x, LazyIndexMixin)`` tells a lazy stack). The host provides
    ``tensordicts``, ``stack_dim``, ``_batch_size``, ``_set_str`` and ``_stack_of``."""

    __slots__ = ()

    def _member(self, i: int) -> TensorDictBase:
        tds = self.tensordicts
        if not -len(tds) <= i < len(tds):
            raise IndexError(f"Index {i} is out of range for the stack dim (dim {self.stack_dim}) of size {len(tds)}.")
        return tds[i]

    def _index(self, index: Any) -> Any:
        if type(index) is int and self.stack_dim == 0:
            return self._member(index)
        parts, pos = self._parse_index(index)
        sp = parts[pos]
        others = parts[:pos] + parts[pos + 1 :]
        other_tensor = any(isinstance(o, torch.Tensor) for o in others)
        sub = _member_index(others)
        trivial = sub is _NOTHING
        if type(sp) is int:
            member = self._member(sp)
            return member if trivial else member._index(sub)
        if type(sp) is slice:
            if other_tensor and _adjacency_changes(parts, pos):
                return self._index_elementwise(parts)
            k = _out_pos(parts, pos)
            sel = self.tensordicts[sp]
            if not sel:
                return self._empty_stack(parts)
            members = sel if trivial else [td._index(sub) for td in sel]
            return self._stack_of(members, k)
        # an index tensor on the stack dim
        if other_tensor:
            return self._index_elementwise(parts)
        n = len(self.tensordicts)
        ids = sp
        if ids.numel() and (int(ids.min()) < -n or int(ids.max()) >= n):
            raise IndexError(
                f"Index tensor holds values out of range for the stack dim (dim {self.stack_dim}) of size {n}."
            )
        if ids.numel() == 0:
            return self._empty_stack(parts)
        k = _out_pos(parts, pos)
        tds = self.tensordicts

        def build(t: torch.Tensor) -> Any:
            if t.dim() == 1:
                return self._stack_of([tds[i] if trivial else tds[i]._index(sub) for i in t.tolist()], k)
            return self._stack_of([build(row) for row in t.unbind(0)], k)

        return build(ids)

    def _parse_index(self, index: Any, split_masks: bool = True) -> tuple[list, int]:
        """Index parts covering every batch dim, and the position of the part that hits the stack dim.

        Lists, ranges and arrays become tensors, 0-dim integer tensors become ints, ``...`` is
        expanded, a 1-D boolean mask on the stack dim becomes the indices of its True entries, and
        (if ``split_masks``) a mask over several dims that include the stack dim becomes one index
        tensor per dim.
        """
        raw = index if type(index) is tuple else (index,)
        parts = []
        ellipsis = None
        used = 0
        for p in raw:
            kind = type(p)
            if kind is int or kind is slice:
                used += 1
            elif p is None:
                pass
            elif p is Ellipsis:
                if ellipsis is not None:
                    raise IndexError("An index can only have a single ellipsis ('...').")
                ellipsis = len(parts)
            elif isinstance(p, (torch.Tensor, list, range)) or kind.__module__ == "numpy":
                if not isinstance(p, torch.Tensor):
                    p = torch.as_tensor(p if not isinstance(p, range) else list(p))
                if p.dtype is torch.bool:
                    if p.dim() == 0:
                        raise IndexError("A 0-dim boolean index is not supported on a lazy stack.")
                    used += p.dim()
                elif p.is_floating_point() or p.is_complex():
                    raise IndexError(f"Index tensors must hold integers or booleans, got dtype {p.dtype}.")
                elif p.dim() == 0:
                    p = int(p)
                    used += 1
                else:
                    used += 1
            elif kind is bool:
                raise IndexError("A Python bool index is not supported on a lazy stack.")
            elif hasattr(p, "__index__"):
                p = p.__index__()
                used += 1
            else:
                raise IndexError(f"Unsupported index {p!r} ({kind.__name__}) for a lazy stack.")
            parts.append(p)
        n = len(self._batch_size)
        if used > n:
            raise IndexError(
                f"too many indices for tensor of dimension {n} (the lazy stack's batch size is "
                f"{list(self._batch_size)}): {used} indexed dims in {index!r}."
            )
        fill = [_FULL] * (n - used)
        if ellipsis is not None:
            parts[ellipsis : ellipsis + 1] = fill
        else:
            parts.extend(fill)
        sd = self.stack_dim
        d = 0
        for pos, p in enumerate(parts):
            if p is None:
                continue
            width = p.dim() if isinstance(p, torch.Tensor) and p.dtype is torch.bool else 1
            if d + width > sd:
                break
            d += width
        sp = parts[pos]
        if isinstance(sp, torch.Tensor) and sp.dtype is torch.bool:
            if sp.dim() == 1:
                if sp.shape[0] != self._batch_size[sd]:
                    raise IndexError(
                        f"Boolean mask of shape {list(sp.shape)} does not match the stack dim of size {self._batch_size[sd]}."
                    )
                parts[pos] = sp.nonzero().squeeze(1)
            elif split_masks:  # a mask over several dims, the stack dim among them: index by its True positions
                parts[pos : pos + 1] = list(sp.nonzero(as_tuple=True))
                pos += sd - d
        return parts, pos

    def _index_elementwise(self, parts: list) -> Any:
        """Advanced indices that mix the stack dim with other dims: one element at a time."""
        parts = _masks_to_indices(parts)
        tensors = [p for p in parts if isinstance(p, torch.Tensor)]
        shape = torch.broadcast_shapes(*(t.shape for t in tensors))
        if shape.numel() == 0:
            return self._empty_stack(parts)
        expanded = [p.expand(shape) if isinstance(p, torch.Tensor) else p for p in parts]
        k = _block_pos(parts)

        def build(prefix: tuple) -> Any:
            if len(prefix) == len(shape):
                return self._index(tuple(int(p[prefix]) if isinstance(p, torch.Tensor) else p for p in expanded))
            return self._stack_of([build(prefix + (j,)) for j in range(shape[len(prefix)])], k)

        return build(())

    def _set_at_index(self, index: Any, value: Any) -> None:
        """``stack[index] = value``: the value is cut along the stack dim and written into the members."""
        parts, pos = self._parse_index(index, split_masks=False)
        sp = parts[pos]
        others = parts[:pos] + parts[pos + 1 :]
        sub = tuple(others)
        if type(sp) is int:  # one member: a plain TensorDict member takes the keys it lacks
            self._member(sp)._set_at_index_creating(sub, value)
            return
        other_tensor = any(isinstance(o, torch.Tensor) for o in others)
        if (
            isinstance(sp, torch.Tensor) and sp.dtype is torch.bool
        ):  # a mask over several dims, the stack dim among them
            if not other_tensor and not (isinstance(value, torch.Tensor) and value.dim() > 0):
                self._set_masked(parts, pos, value)
                return
            parts, pos = self._parse_index(index)
            sp = parts[pos]
            others = parts[:pos] + parts[pos + 1 :]
            sub = tuple(others)
            other_tensor = True
        if (type(sp) is slice and not (other_tensor and _adjacency_changes(parts, pos))) or (
            isinstance(sp, torch.Tensor) and sp.dim() == 1 and not other_tensor
        ):
            tds = self.tensordicts
            n = len(tds)
            ids = (
                list(range(n))[sp]
                if type(sp) is slice
                else [i % n if -n <= i < n else _raise_range(i, n) for i in sp.tolist()]
            )
            k = _out_pos(parts, pos)
            values = self._split_for_index(value, k, ids, sub)
            for i, v in zip(ids, values):
                tds[i]._set_at_index(sub, v)
            return
        # mixed advanced indices: element by element
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            raise NotImplementedError(
                "stack[index] = tensor with an advanced index mixing the stack dim and other dims: pass a scalar or a collection."
            )
        flat = _masks_to_indices(parts)
        tensors = [p for p in flat if isinstance(p, torch.Tensor)]
        shape = torch.broadcast_shapes(*(t.shape for t in tensors))
        expanded = [p.expand(shape) if isinstance(p, torch.Tensor) else p for p in flat]
        k = _block_pos(flat)
        for e in itertools.product(*(range(s) for s in shape)):
            v = value._index((_FULL,) * k + e) if is_tensor_collection(value) else value
            self._set_at_index(tuple(int(p[e]) if isinstance(p, torch.Tensor) else p for p in expanded), v)

    def _set_masked(self, parts: list, pos: int, value: Any) -> None:
        """``stack[mask] = value`` for a mask over several dims including the stack dim: one
        masked write per member (the mask with the stack dim removed)."""
        mask = parts[pos]
        d = sum(
            p.dim() if isinstance(p, torch.Tensor) and p.dtype is torch.bool else 1
            for p in parts[:pos]
            if p is not None
        )
        off = self.stack_dim - d  # which of the mask's dims is the stack dim
        tds = self.tensordicts
        writes = []
        if is_tensor_collection(value) and not value._is_non_tensor:
            k = _out_pos(parts, pos)
            owner = mask.nonzero()[:, off]
            if value.batch_dims <= k or value.batch_size[k] not in (1, owner.numel()):
                raise RuntimeError(
                    f"stack[mask] = value: value of batch size {list(value.batch_size)} does not fit {owner.numel()} masked elements on dim {k}."
                )
        for j, td in enumerate(tds):
            member_mask = mask.select(off, j)
            if not bool(member_mask.any()):
                continue
            v = value
            if is_tensor_collection(value) and not value._is_non_tensor:
                rows = (
                    (owner == j).nonzero().squeeze(1) if value.batch_size[k] != 1 else torch.zeros(1, dtype=torch.long)
                )
                v = value._index((_FULL,) * k + (rows,))
                for key in v.keys(True, True, is_leaf_nontensor):  # every key checked before the first write
                    if key not in td:
                        raise KeyError(
                            f"stack[mask] = value: key {key!r} of the value is not in member {j} of the lazy stack."
                        )
            writes.append((td, tuple(parts[:pos] + [member_mask] + parts[pos + 1 :]), v))
        for td, sub, v in writes:
            td._set_at_index(sub, v)

    def _split_for_index(self, value: Any, k: int, ids: list, sub: tuple) -> list:
        """The part of ``value`` that goes to each selected member (``k``: the stack dim's output position)."""
        count = len(ids)
        if is_tensor_collection(value) and not value._is_non_tensor:
            if isinstance(value, LazyIndexMixin) and value.stack_dim == k and len(value.tensordicts) == count:
                vals = value.tensordicts
            elif value.batch_dims > k and value.batch_size[k] == count:
                vals = value.unbind(k)
            elif value.batch_dims > k and value.batch_size[k] == 1:
                vals = [value._index((_FULL,) * k + (0,))] * count
            else:
                raise RuntimeError(
                    f"stack[index] = value: value of batch size {list(value.batch_size)} does not fit {count} selected members on dim {k}."
                )
            for i, v in zip(ids, vals):  # check every key before the first write
                member = self.tensordicts[i]
                for key in v.keys(True, True, is_leaf_nontensor):
                    if key not in member:
                        raise KeyError(
                            f"stack[index] = value: key {key!r} of the value is not in member {i} of the lazy stack."
                        )
            return list(vals)
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            # A tensor is broadcast against every leaf from the right: which of its dims is the
            # stack dim depends on each leaf's feature dims, so build one value per member.
            out = []
            for pos_j, i in enumerate(ids):
                member = self.tensordicts[i]
                member_out = _indexed_batch_size(member.batch_size, sub) if sub else member.batch_size
                entries = {}
                for key, leaf in member.items(True, True):
                    if not isinstance(leaf, torch.Tensor):
                        continue
                    target = member_out + leaf.shape[member.batch_dims :]
                    full_ndim = len(target) + 1
                    d = value.dim() - (full_ndim - k)
                    part = value if d < 0 else value.select(d, 0 if value.shape[d] == 1 else pos_j)
                    try:
                        entries[key] = part.expand(target)
                    except RuntimeError:
                        raise RuntimeError(
                            f"stack[index] = value: a tensor of shape {list(value.shape)} cannot be broadcast to key {key!r}."
                        ) from None
                out.append(TensorDict(entries, batch_size=member_out))
            return out
        return [value] * count

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str:
            self._set_str(index, value, inplace=False, validated=False)
        else:
            TensorDictBase.__setitem__(cast(TensorDictBase, self), index, value)

    def _empty_stack(self, parts: list) -> "LazyStackedTensorDict":
        """An empty lazy stack with the batch size ``parts`` would give (zero elements)."""
        out_bs = _indexed_batch_size(self._batch_size, tuple(parts))
        zero = next((i for i, s in enumerate(out_bs) if s == 0), None)
        if zero is None:  # pragma: no cover - callers only ask when some dim is empty
            raise IndexError("internal: expected an empty selection.")
        return self._stack_of([], zero, out_bs)


def _masks_to_indices(parts: list) -> list:
    """Boolean masks replaced by the index tensors of their True entries (one per masked dim)."""
    out = []
    for p in parts:
        if isinstance(p, torch.Tensor) and p.dtype is torch.bool:
            out.extend(p.nonzero(as_tuple=True))
        else:
            out.append(p)
    return out


def _member_index(others: list) -> Any:
    """The index a member gets: trailing full slices dropped, a single part passed bare (the
    members' fast paths), ``_NOTHING`` when it selects everything."""
    end = len(others)
    while end and type(others[end - 1]) is slice and others[end - 1] == _FULL:
        end -= 1
    if not end:
        return _NOTHING
    if end == 1:
        return others[0]
    return tuple(others[:end])


def _raise_range(i: int, n: int) -> int:
    raise IndexError(f"Index {i} is out of range for the stack dim of size {n}.")


def _out_pos(parts: list, pos: int) -> int:
    """Output position of the dim produced by ``parts[pos]`` (a slice or the only index tensor).

    Torch semantics: ints select (no dim), ``None`` and slices give one dim each, index tensors
    broadcast into one block of dims that sits where they are if they are adjacent (ints don't
    count), else in front.
    """
    rest = [(i, p) for i, p in enumerate(parts) if type(p) is not int]
    tensor_at = [j for j, (i, p) in enumerate(rest) if isinstance(p, torch.Tensor) and i != pos]
    s = next(j for j, (i, _) in enumerate(rest) if i == pos)
    if not tensor_at:
        return s
    block = max(1 if p.dtype is torch.bool else p.dim() for i, p in rest if isinstance(p, torch.Tensor) and i != pos)
    adjacent = tensor_at[-1] - tensor_at[0] + 1 == len(tensor_at)
    if adjacent and s < tensor_at[0]:
        return s
    before = sum(1 for j, (i, p) in enumerate(rest[:s]) if not isinstance(p, torch.Tensor))
    return before + block


def _adjacency_changes(parts: list, pos: int) -> bool:
    """True if removing the slice ``parts[pos]`` makes separated index tensors adjacent."""
    rest = [(i, p) for i, p in enumerate(parts) if type(p) is not int]
    tensor_at = [j for j, (i, p) in enumerate(rest) if isinstance(p, torch.Tensor)]
    if tensor_at[-1] - tensor_at[0] + 1 == len(tensor_at):
        return False
    without = [j for j, (i, p) in enumerate(r for r in rest if r[0] != pos) if isinstance(p, torch.Tensor)]
    return without[-1] - without[0] + 1 == len(without)


def _block_pos(parts: list) -> int:
    """Output position of the broadcast block of the index tensors in ``parts``."""
    rest = [p for p in parts if type(p) is not int]
    tensor_at = [j for j, p in enumerate(rest) if isinstance(p, torch.Tensor)]
    if tensor_at[-1] - tensor_at[0] + 1 == len(tensor_at):
        return tensor_at[0]
    return 0
