"""LazyStackedTensorDict: a stack of collections that keeps its members apart.

``lazy_stack(tds, dim)`` puts collections side by side along a new batch dim without copying.
Members need the same batch size but may hold different keys and differently shaped leaves
(heterogeneous stacks: graphs with different node counts, sequences of different lengths,
agents with different observation sizes). Values are stacked only when read.

Semantics (as in tensordict 0.14, except where noted):

- ``keys()`` lists the keys every member holds; keys held by only some members are invisible
  (``get`` raises ``KeyError`` for them unless a default is given).
- ``get(key)`` on a leaf returns ``torch.stack`` of the members' tensors; when their shapes
  differ it raises a ``RuntimeError`` naming the key and the shapes and pointing at
  ``get(key, as_padded_tensor=True)`` / :meth:`~LazyStackedTensorDict.as_padded_tensor`,
  ``get(key, as_nested_tensor=True)``, ``get(key, as_list=True)`` and ``densify(layout=torch.jagged)``.
  A sub-collection comes back as a lazy stack of the members' sub-collections (a view: writes
  reach the members).
- Indexing: an int on the stack dim returns the member itself (indexed on the other dims if the
  index says so); slices and index tensors on the stack dim return lazy stacks of the selected
  members; indices on the other dims are forwarded to every member. An advanced index that mixes
  the stack dim with other dims yields nested lazy stacks of the selected elements.
- Writes (``set``, ``td[index] = value``, in-place ops, ``apply_``, ``update``) split the value
  along the stack dim and write into the members.
- Shape ops that keep the stack dim (``unsqueeze``, ``squeeze``, ``permute``, ``transpose``,
  ``flatten``/``unflatten`` of other dims, ``expand``, ``flip``, ``unbind``, ``split``) return lazy
  stacks; ops that merge the stack dim with others (``reshape``, ``view``, ``repeat``, ``gather``,
  reductions along a dim, ``contiguous``) work on the dense stack and return a TensorDict
  (tensordict keeps some of them lazy).
- ``torch.stack`` / ``torch.cat`` of lazy stacks return lazy stacks (no copy).
- Differences from tensordict: members must share one batch size (no ragged ``-1`` batch dims);
  ``get`` of a key missing from some member raises ``KeyError`` (DESIGN: no silent ``None``);
  ``as_padded_tensor`` pads every feature dim to the largest size.

Example:
    >>> import torch
    >>> from tdict import TensorDict, lazy_stack
    >>> a = TensorDict(obs=torch.zeros(3, 2), batch_size=[3])
    >>> b = TensorDict(obs=torch.ones(3, 4), extra=torch.ones(3), batch_size=[3])
    >>> s = lazy_stack([a, b])
    >>> s.batch_size, list(s.keys())
    (torch.Size([2, 3]), ['obs'])
    >>> s.as_padded_tensor("obs").shape
    torch.Size([2, 3, 4])
    >>> s[1] is b
    True
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator, Sequence

import torch

from ._keys import KeysView
from ._shape_ops import ShapeOpsMixin, _shape_args, infer_shape
from ._utils import NO_DEFAULT, NestedKey, _key_to_tuple, normalize_dim, normalize_dims, parse_batch_size, unravel_key
from .base import _MISSING, TensorDictBase, _indexed_batch_size, is_tensor_collection
from .tensordict import TensorDict

_FULL = slice(None)


class LazyStackedTensorDict(TensorDictBase):
    """A lazy stack of tensor collections along ``stack_dim`` (see the module docstring).

    Args:
        *tensordicts: the members (or one list of them); they must share one batch size.
        stack_dim: the position of the new dim in the batch size (default ``0``).
        batch_size: needed only for an empty stack (no members).
        names: optional names of the batch dims (the stack dim's name included).
        stack_dim_name: name of the stack dim only.
        lock: lock the stack (and its members) right away.

    Attributes:
        tensordicts: the list of members, in stack order.
        stack_dim: the dim along which they are stacked.

    Example:
        >>> import torch
        >>> from tdict import TensorDict, LazyStackedTensorDict
        >>> tds = [TensorDict(x=torch.full((2, i + 1), float(i)), batch_size=[2]) for i in range(3)]
        >>> s = LazyStackedTensorDict(*tds, stack_dim=1)
        >>> s.batch_size
        torch.Size([2, 3])
        >>> s[:, 2] is tds[2]
        True
        >>> s.get("x", as_list=True)[1].shape
        torch.Size([2, 2])
    """

    __slots__ = ("tensordicts", "stack_dim", "_batch_size", "_is_locked", "_lock_ops", "_stack_dim_name", "__weakref__")
    _is_lazy = True
    _is_non_tensor = False

    def __init__(
        self,
        *tensordicts: TensorDictBase,
        stack_dim: int = 0,
        batch_size: Sequence[int] | None = None,
        names: Sequence[str | None] | None = None,
        stack_dim_name: str | None = None,
        lock: bool = False,
    ) -> None:
        if len(tensordicts) == 1 and isinstance(tensordicts[0], (list, tuple)):
            tensordicts = tuple(tensordicts[0])
        tds = list(tensordicts)
        for i, td in enumerate(tds):
            if not is_tensor_collection(td):
                raise TypeError(f"lazy_stack: member {i} is a {type(td).__name__}, expected a tensor collection.")
        if tds:
            bs = tds[0].batch_size
            for i, td in enumerate(tds):
                if td.batch_size != bs:
                    raise RuntimeError(
                        f"lazy_stack: collection {i} has batch size {list(td.batch_size)}, collection 0 has {list(bs)}; "
                        "members must share one batch size (their keys and feature shapes may differ)."
                    )
            stack_dim = normalize_dim(stack_dim, len(bs) + 1, "stack_dim")
            full = torch.Size(tuple(bs[:stack_dim]) + (len(tds),) + tuple(bs[stack_dim:]))
            if batch_size is not None and parse_batch_size(batch_size) != full:
                raise RuntimeError(f"lazy_stack: batch_size {list(batch_size)} does not match the stacked batch size {list(full)}.")
        else:
            if batch_size is None:
                raise ValueError("lazy_stack: an empty stack needs an explicit batch_size.")
            full = parse_batch_size(batch_size)
            stack_dim = normalize_dim(stack_dim, len(full), "stack_dim")
            if full[stack_dim] != 0:
                raise ValueError(f"lazy_stack: an empty stack needs size 0 on the stack dim, got batch_size {list(full)}.")
        self.tensordicts = tds
        self.stack_dim = stack_dim
        self._batch_size = full
        self._is_locked = False
        self._lock_ops = None
        self._stack_dim_name = stack_dim_name
        if names is not None:
            self.names = names
        if lock:
            self.lock_()

    @classmethod
    def _new_unsafe(cls, tds: list, stack_dim: int, batch_size: torch.Size | None = None, stack_dim_name: str | None = None) -> "LazyStackedTensorDict":
        """Build without checks: ``tds`` share one batch size (``batch_size`` needed if empty)."""
        self = object.__new__(cls)
        self.tensordicts = tds
        self.stack_dim = stack_dim
        if batch_size is None:
            bs = tds[0].batch_size
            batch_size = torch.Size(tuple(bs[:stack_dim]) + (len(tds),) + tuple(bs[stack_dim:]))
        self._batch_size = batch_size
        self._is_locked = False
        self._lock_ops = None
        self._stack_dim_name = stack_dim_name
        return self

    def _like(self, tds: list, stack_dim: int | None = None) -> "LazyStackedTensorDict":
        """A new stack of ``tds`` (same length as ``self``'s) along ``stack_dim`` (default: own)."""
        sd = self.stack_dim if stack_dim is None else stack_dim
        if not tds:
            return LazyStackedTensorDict._new_unsafe(tds, sd, self._batch_size, self._stack_dim_name)
        return LazyStackedTensorDict._new_unsafe(tds, sd, None, self._stack_dim_name)

    # ------------------------------------------------------------------ attributes
    @property
    def batch_size(self) -> torch.Size:
        return self._batch_size

    @batch_size.setter
    def batch_size(self, new: Any) -> None:
        if parse_batch_size(new) != self._batch_size:
            raise RuntimeError(
                f"Cannot set the batch size of a lazy stack ({list(self._batch_size)} -> {list(new)}): "
                "change the members' batch sizes and restack, or densify first."
            )

    @property
    def device(self) -> torch.device | None:
        tds = self.tensordicts
        if not tds:
            return None
        device = tds[0].device
        for td in tds:
            if td.device != device:
                return None
        return device

    @property
    def names(self) -> list:
        tds = self.tensordicts
        sd = self.stack_dim
        inner = tds[0].names if tds else [None] * (len(self._batch_size) - 1)
        return inner[:sd] + [self._stack_dim_name] + inner[sd:]

    @names.setter
    def names(self, value: Sequence[str | None] | None) -> None:
        if value is None:
            self._stack_dim_name = None
            for td in self.tensordicts:
                td.names = None
            return
        value = list(value)
        if len(value) != len(self._batch_size):
            raise ValueError(f"names: expected {len(self._batch_size)} names (one per batch dim), got {value}.")
        named = [v for v in value if v is not None]
        if len(set(named)) != len(named):
            raise ValueError(f"names must be unique, got {value}.")
        sd = self.stack_dim
        inner = value[:sd] + value[sd + 1 :]
        for td in self.tensordicts:
            td.names = inner if any(v is not None for v in inner) else None
        self._stack_dim_name = value[sd]

    def _maybe_names(self):
        names = self.names
        return names if any(n is not None for n in names) else None

    # ------------------------------------------------------------------ keys
    def _common_keys(self) -> list:
        """Keys every member holds, in the first member's order."""
        tds = self.tensordicts
        if not tds:
            return []
        keys = list(tds[0].keys())
        for td in tds[1:]:
            keys = [k for k in keys if k in td]
        return keys

    def _probe_str(self, key: str) -> Any:
        """Without stacking: a member's leaf under ``key`` (for its type), a lazy view of the
        sub-collections, or ``_MISSING`` if some member lacks the key."""
        vals = []
        for td in self.tensordicts:
            v = td._probe_str(key) if isinstance(td, LazyStackedTensorDict) else td._get_str(key, _MISSING)
            if v is _MISSING:
                return _MISSING
            vals.append(v)
        if not vals:
            return _MISSING
        first = vals[0]
        if isinstance(first, torch.Tensor) or not is_tensor_collection(first) or first._is_non_tensor:
            return first
        return LazyStackedTensorDict._new_unsafe(vals, self.stack_dim)

    def keys(self, include_nested: bool = False, leaves_only: bool = False, is_leaf: Callable | None = None, *, sort: bool = False):
        """The keys every member holds (nested keys as tuples when ``include_nested``)."""
        return _LazyKeysView(self, include_nested, leaves_only, is_leaf, sort)

    def __contains__(self, key: Any) -> bool:
        if type(key) is str:
            for td in self.tensordicts:
                if key not in td:
                    return False
            return bool(self.tensordicts)
        if isinstance(key, tuple):
            return _probe(self, _key_to_tuple(key)) is not _MISSING
        raise TypeError(f"'in' expects a key (str or tuple of str), got {type(key).__name__}.")

    def _missing_key_error(self, key: Any) -> KeyError:
        tup = _key_to_tuple(key)
        holders = [i for i, td in enumerate(self.tensordicts) if _probe(td, tup) is not _MISSING]
        where = f" It is held by members {holders} only (keys must be in every member)." if holders else ""
        return KeyError(f"Key {key!r} not found in the lazy stack.{where} Keys common to all members: {list(self.keys(True))}.")

    # ------------------------------------------------------------------ get
    def get(
        self,
        key: NestedKey,
        default: Any = NO_DEFAULT,
        *,
        as_list: bool = False,
        as_padded_tensor: bool = False,
        as_nested_tensor: bool = False,
        padding_side: str = "right",
        layout: torch.layout | None = None,
        padding_value: float | int | bool = 0.0,
    ) -> Any:
        """The entry at ``key``: a dense stack of the members' leaves, or a lazy stack of sub-collections.

        Keyword Args:
            as_list: return the members' values as a list (works for ragged leaves).
            as_padded_tensor: pad ragged leaves with ``padding_value`` (on ``padding_side``) and stack.
            as_nested_tensor: return a nested tensor (``layout``, default ``torch.jagged``; stack dim 0 only).
        """
        if not (as_list or as_padded_tensor or as_nested_tensor):
            if type(key) is str:
                return self._get_str(key, default)
            return self._get_tuple(_key_to_tuple(key), default)
        if as_list + as_padded_tensor + as_nested_tensor > 1:
            raise ValueError("get: as_list, as_padded_tensor and as_nested_tensor are exclusive.")
        flags = {"as_list": as_list, "as_padded_tensor": as_padded_tensor, "as_nested_tensor": as_nested_tensor,
                 "padding_side": padding_side, "layout": layout, "padding_value": padding_value}
        vals = self._member_values(key, default, flags)
        if vals is default and default is not NO_DEFAULT:
            return default
        if as_list:
            return vals
        if as_padded_tensor:
            return _pad_stack(key, vals, self.stack_dim, padding_value, padding_side)
        return _nested(key, vals, self.stack_dim, layout or torch.jagged)

    def _member_values(self, key: NestedKey, default: Any = NO_DEFAULT, flags: dict | None = None) -> Any:
        """The members' values under ``key``; lazy members answer with the same ragged ``flags``."""
        key = _key_to_tuple(key)
        vals = []
        for td in self.tensordicts:
            if flags is not None and isinstance(td, LazyStackedTensorDict):
                v = td.get(key, _MISSING, **flags)
            else:
                v = td.get(key, _MISSING) if len(key) > 1 else td._get_str(key[0], _MISSING)
            if v is _MISSING:
                if default is NO_DEFAULT:
                    raise self._missing_key_error(unravel_key(key))
                return default
            vals.append(v)
        return vals

    def _get_str(self, key: str, default: Any) -> Any:
        vals = []
        for td in self.tensordicts:
            v = td._get_str(key, _MISSING)
            if v is _MISSING:
                if default is NO_DEFAULT:
                    raise self._missing_key_error(key)
                return default
            vals.append(v)
        if not vals:
            if default is NO_DEFAULT:
                raise self._missing_key_error(key)
            return default
        return self._combine(key, vals)

    def _get_tuple(self, key: tuple, default: Any) -> Any:
        if len(key) == 1:
            return self._get_str(key[0], default)
        vals = []
        for td in self.tensordicts:
            v = td._get_tuple(key, _MISSING)
            if v is _MISSING:
                if default is NO_DEFAULT:
                    raise self._missing_key_error(key)
                return default
            vals.append(v)
        if not vals:
            if default is NO_DEFAULT:
                raise self._missing_key_error(key)
            return default
        return self._combine(key, vals)

    def _combine(self, key: Any, vals: list) -> Any:
        """Stack the members' values of one key: dense for leaves, lazy for sub-collections."""
        first = vals[0]
        if isinstance(first, torch.Tensor):
            try:
                return torch.stack(vals, self.stack_dim)
            except (RuntimeError, TypeError) as err:
                raise _stack_error(key, vals) from err
        if not is_tensor_collection(first):
            raise TypeError(f"Key {key!r}: unexpected entry of type {type(first).__name__} in a member.")
        if first._is_non_tensor:
            return torch.stack(vals, self.stack_dim)
        bs = first.batch_size
        for v in vals:
            if isinstance(v, torch.Tensor) or not is_tensor_collection(v) or v._is_non_tensor:
                raise _stack_error(key, vals)
            if v.batch_size != bs:
                raise RuntimeError(
                    f"Key {key!r}: the members' sub-collections have different batch sizes "
                    f"{sorted({tuple(x.batch_size) for x in vals})}; they cannot form one lazy stack."
                )
        out = LazyStackedTensorDict._new_unsafe(vals, self.stack_dim)
        out._is_locked = self._is_locked
        return out

    def _items_raw(self) -> Iterator[tuple[str, Any]]:
        tds = self.tensordicts
        for key in self._common_keys():
            yield key, self._combine(key, [td._get_str(key, NO_DEFAULT) for td in tds])

    # ------------------------------------------------------------------ ragged access
    def as_padded_tensor(self, key: NestedKey, dim: int | None = None, value: float | int | bool = 0.0, *, padding_side: str = "right") -> torch.Tensor:
        """Pad the members' leaves under ``key`` to the largest size on every dim and stack them.

        Args:
            key: a leaf key held by every member.
            dim: where the members go in the result (default: the stack dim).
            value: the padding value.
            padding_side: ``"right"`` (pad after the data) or ``"left"``.

        Example:
            >>> import torch
            >>> from tdict import TensorDict, lazy_stack
            >>> s = lazy_stack([TensorDict(x=torch.ones(1)), TensorDict(x=torch.ones(3))])
            >>> s.as_padded_tensor("x", value=-1)
            tensor([[ 1., -1., -1.],
                    [ 1.,  1.,  1.]])
        """
        flags = {"as_padded_tensor": True, "padding_value": value, "padding_side": padding_side}
        vals = self._member_values(key, NO_DEFAULT, flags)
        return _pad_stack(key, vals, self.stack_dim if dim is None else dim, value, padding_side)

    def densify(self, *, layout: torch.layout = torch.strided) -> TensorDict:
        """A dense TensorDict of the common keys.

        ``layout=torch.strided`` needs equal shapes per key (raises naming the key otherwise);
        ``layout=torch.jagged`` turns ragged leaves into nested tensors (stack dim 0 only) and
        stacks the others densely.
        """
        if layout not in (torch.strided, torch.jagged):
            raise ValueError(f"densify: layout must be torch.strided or torch.jagged, got {layout}.")
        return self._dense(layout, ())

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDict:
        """A dense TensorDict (a copy) of the keys common to all members."""
        return self._dense(torch.strided, ())

    def _dense(self, layout: torch.layout, prefix: tuple) -> TensorDict:
        tds = [td._dense(layout, prefix) if isinstance(td, LazyStackedTensorDict) else td for td in self.tensordicts]
        sd = self.stack_dim
        out = {}
        for key in self._common_keys():
            vals = [td._get_str(key, NO_DEFAULT) for td in tds]
            first = vals[0]
            path = prefix + (key,)
            if isinstance(first, torch.Tensor):
                out[key] = _dense_leaf(unravel_key(path), vals, sd, layout)
            elif first._is_non_tensor:
                out[key] = torch.stack(vals, sd)
            else:
                out[key] = self._combine(unravel_key(path), vals)._dense(layout, path)
        return TensorDict._new_unsafe(out, self._batch_size, self.device, self._maybe_names())

    # ------------------------------------------------------------------ set / delete
    def _check_writable(self, key: Any, inplace: bool) -> None:
        locked = self._is_locked
        if not locked:
            for td in self.tensordicts:
                if td._is_locked:
                    locked = True
                    break
        if locked and not (inplace and key in self):
            raise RuntimeError(f"Cannot set key {key!r}: the lazy stack or one of its members is locked (use set_() for in-place writes, or unlock_()).")

    def _split_value(self, key: Any, value: Any) -> Sequence:
        """``value`` (with the stack's batch size) cut along the stack dim: one part per member."""
        n = len(self.tensordicts)
        sd = self.stack_dim
        bs = self._batch_size
        if isinstance(value, torch.Tensor):
            if value.shape[: len(bs)] != bs:
                raise RuntimeError(f"Key {key!r}: value of shape {list(value.shape)} does not start with the batch size {list(bs)} of the lazy stack.")
            return value.unbind(sd)
        if is_tensor_collection(value):
            parts = self._split_collection(value)
            if parts is None:
                raise RuntimeError(
                    f"Key {key!r}: collection of batch size {list(value.batch_size)} does not start with the batch size {list(bs)} of the lazy stack."
                )
            return parts
        if isinstance(value, dict):
            return TensorDict(value, batch_size=bs, device=self.device).unbind(sd)
        if type(value).__module__ == "numpy" and getattr(value, "ndim", 0) > 0:
            return self._split_value(key, torch.as_tensor(value))
        return [value] * n  # scalars and Python objects: every member converts them itself

    def _split_collection(self, value: TensorDictBase) -> Sequence | None:
        """The parts of a collection that go to each member, or None if its batch size does not fit."""
        bs = self._batch_size
        sd = self.stack_dim
        if (
            isinstance(value, LazyStackedTensorDict)
            and value.stack_dim == sd
            and len(value.tensordicts) == len(self.tensordicts)
            and value._batch_size[: len(bs)] == bs
        ):
            return value.tensordicts
        if value.batch_size[: len(bs)] != bs:
            return None
        if value._is_non_tensor:
            return [value._index((_FULL,) * sd + (j,)) for j in range(bs[sd])]
        return value.unbind(sd)

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool, ignore_lock: bool = False) -> None:
        if not ignore_lock:
            self._check_writable(key, inplace)
        parts = self._split_value(key, value)
        validated = False
        if isinstance(value, torch.Tensor):  # batch prefix checked above: members skip it unless a device move is due
            device = value.device
            validated = True
            for td in self.tensordicts:
                d = td.device
                if d is not None and d != device:
                    validated = False
                    break
        for td, part in zip(self.tensordicts, parts):
            td._set_str(key, part, inplace=inplace, validated=validated, ignore_lock=ignore_lock)

    def _set_tuple(self, key: tuple, item: Any, *, inplace: bool) -> None:
        if len(key) == 1:
            self._set_str(key[0], item, inplace=inplace, validated=False)
            return
        self._check_writable(key, inplace)
        parts = self._split_value(key, item)
        for td, part in zip(self.tensordicts, parts):
            td._set_tuple(key, part, inplace=inplace)

    def _del_str(self, key: str) -> None:
        holders = [td for td in self.tensordicts if key in td]
        if not holders:
            raise self._missing_key_error(key)
        for td in holders:  # keys held by some members only are removed from those
            td._del_str(key)

    def set_(self, key: NestedKey, item: Any) -> "LazyStackedTensorDict":
        key = unravel_key(key)
        parts = self._split_value(key, item)
        tds = self.tensordicts
        targets = [td.get(key) for td in tds]  # raises before any write if a member lacks the key
        for target, part in zip(targets, parts):
            if isinstance(target, torch.Tensor) and isinstance(part, torch.Tensor) and part.shape != target.shape:
                raise RuntimeError(f"set_({key!r}): shape {tuple(part.shape)} does not match a member's {tuple(target.shape)}.")
        for td, part in zip(tds, parts):
            td.set_(key, part)
        return self

    def rename_key_(self, old_key: NestedKey, new_key: NestedKey, safe: bool = False) -> "LazyStackedTensorDict":
        """Rename in every member (ragged leaves included)."""
        old_key, new_key = unravel_key(old_key), unravel_key(new_key)
        if old_key not in self:
            raise self._missing_key_error(old_key)
        if safe and any(new_key in td for td in self.tensordicts):
            raise KeyError(f"rename_key_: {new_key!r} already exists and safe=True.")
        for td in self.tensordicts:
            td.rename_key_(old_key, new_key, safe=safe)
        return self

    def insert(self, index: int, tensordict: TensorDictBase) -> None:
        """Insert a new member at ``index`` of the stack dim (it needs the members' batch size)."""
        if not is_tensor_collection(tensordict):
            raise TypeError(f"insert: expected a tensor collection, got {type(tensordict).__name__}.")
        bs = self._batch_size
        sd = self.stack_dim
        member_bs = torch.Size(tuple(bs[:sd]) + tuple(bs[sd + 1 :]))
        if tensordict.batch_size != member_bs:
            raise RuntimeError(f"insert: the collection has batch size {list(tensordict.batch_size)}, the members have {list(member_bs)}.")
        if self._is_locked:
            tensordict._set_lock(True)
        self.tensordicts.insert(index, tensordict)
        self._batch_size = torch.Size(tuple(bs[:sd]) + (len(self.tensordicts),) + tuple(bs[sd + 1 :]))

    def append(self, tensordict: TensorDictBase) -> None:
        """Add a member at the end of the stack dim."""
        self.insert(len(self.tensordicts), tensordict)

    # ------------------------------------------------------------------ indexing
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
                return _empty_stack(self._batch_size, parts)
            members = sel if trivial else [td._index(sub) for td in sel]
            return LazyStackedTensorDict._new_unsafe(members, k)
        # an index tensor on the stack dim
        if other_tensor:
            return self._index_elementwise(parts)
        n = len(self.tensordicts)
        ids = sp
        if ids.numel() and (int(ids.min()) < -n or int(ids.max()) >= n):
            raise IndexError(f"Index tensor holds values out of range for the stack dim (dim {self.stack_dim}) of size {n}.")
        if ids.numel() == 0:
            return _empty_stack(self._batch_size, parts)
        k = _out_pos(parts, pos)
        tds = self.tensordicts

        def build(t: torch.Tensor) -> Any:
            if t.dim() == 1:
                return LazyStackedTensorDict._new_unsafe([tds[i] if trivial else tds[i]._index(sub) for i in t.tolist()], k)
            return LazyStackedTensorDict._new_unsafe([build(row) for row in t.unbind(0)], k)

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
            raise IndexError(f"Too many indices for a batch of size {list(self._batch_size)}: {index!r}.")
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
                    raise IndexError(f"Boolean mask of shape {list(sp.shape)} does not match the stack dim of size {self._batch_size[sd]}.")
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
            return _empty_stack(self._batch_size, parts)
        expanded = [p.expand(shape) if isinstance(p, torch.Tensor) else p for p in parts]
        k = _block_pos(parts)

        def build(prefix: tuple) -> Any:
            if len(prefix) == len(shape):
                return self._index(tuple(int(p[prefix]) if isinstance(p, torch.Tensor) else p for p in expanded))
            return LazyStackedTensorDict._new_unsafe([build(prefix + (j,)) for j in range(shape[len(prefix)])], k)

        return build(())

    def _set_at_index(self, index: Any, value: Any) -> None:
        """``stack[index] = value``: the value is cut along the stack dim and written into the members."""
        parts, pos = self._parse_index(index, split_masks=False)
        sp = parts[pos]
        others = parts[:pos] + parts[pos + 1 :]
        sub = tuple(others)
        if type(sp) is int:
            self._member(sp)._set_at_index(sub, value)
            return
        other_tensor = any(isinstance(o, torch.Tensor) for o in others)
        if isinstance(sp, torch.Tensor) and sp.dtype is torch.bool:  # a mask over several dims, the stack dim among them
            if not other_tensor and not (isinstance(value, torch.Tensor) and value.dim() > 0):
                self._set_masked(parts, pos, value)
                return
            parts, pos = self._parse_index(index)
            sp = parts[pos]
            others = parts[:pos] + parts[pos + 1 :]
            sub = tuple(others)
            other_tensor = True
        if (type(sp) is slice and not (other_tensor and _adjacency_changes(parts, pos))) or (isinstance(sp, torch.Tensor) and sp.dim() == 1 and not other_tensor):
            tds = self.tensordicts
            n = len(tds)
            ids = list(range(n))[sp] if type(sp) is slice else [i % n if -n <= i < n else _raise_range(i, n) for i in sp.tolist()]
            k = _out_pos(parts, pos)
            values = self._split_for_index(value, k, ids, sub)
            for i, v in zip(ids, values):
                tds[i]._set_at_index(sub, v)
            return
        # mixed advanced indices: element by element
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            raise NotImplementedError("stack[index] = tensor with an advanced index mixing the stack dim and other dims: pass a scalar or a collection.")
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
        d = sum(p.dim() if isinstance(p, torch.Tensor) and p.dtype is torch.bool else 1 for p in parts[:pos] if p is not None)
        off = self.stack_dim - d  # which of the mask's dims is the stack dim
        tds = self.tensordicts
        writes = []
        if is_tensor_collection(value) and not value._is_non_tensor:
            k = _out_pos(parts, pos)
            owner = mask.nonzero()[:, off]
            if value.batch_dims <= k or value.batch_size[k] not in (1, owner.numel()):
                raise RuntimeError(f"stack[mask] = value: value of batch size {list(value.batch_size)} does not fit {owner.numel()} masked elements on dim {k}.")
        for j, td in enumerate(tds):
            member_mask = mask.select(off, j)
            if not bool(member_mask.any()):
                continue
            v = value
            if is_tensor_collection(value) and not value._is_non_tensor:
                rows = (owner == j).nonzero().squeeze(1) if value.batch_size[k] != 1 else torch.zeros(1, dtype=torch.long)
                v = value._index((_FULL,) * k + (rows,))
                for key in v.keys(True, True):  # every key checked before the first write
                    if key not in td:
                        raise KeyError(f"stack[mask] = value: key {key!r} of the value is not in member {j} of the lazy stack.")
            writes.append((td, tuple(parts[:pos] + [member_mask] + parts[pos + 1 :]), v))
        for td, sub, v in writes:
            td._set_at_index(sub, v)

    def _split_for_index(self, value: Any, k: int, ids: list, sub: tuple) -> list:
        """The part of ``value`` that goes to each selected member (``k``: the stack dim's output position)."""
        count = len(ids)
        if is_tensor_collection(value) and not value._is_non_tensor:
            if isinstance(value, LazyStackedTensorDict) and value.stack_dim == k and len(value.tensordicts) == count:
                vals = value.tensordicts
            elif value.batch_dims > k and value.batch_size[k] == count:
                vals = value.unbind(k)
            elif value.batch_dims > k and value.batch_size[k] == 1:
                vals = [value._index((_FULL,) * k + (0,))] * count
            else:
                raise RuntimeError(f"stack[index] = value: value of batch size {list(value.batch_size)} does not fit {count} selected members on dim {k}.")
            for i, v in zip(ids, vals):  # check every key before the first write
                member = self.tensordicts[i]
                for key in v.keys(True, True):
                    if key not in member:
                        raise KeyError(f"stack[index] = value: key {key!r} of the value is not in member {i} of the lazy stack.")
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
                        raise RuntimeError(f"stack[index] = value: a tensor of shape {list(value.shape)} cannot be broadcast to key {key!r}.") from None
                out.append(TensorDict(entries, batch_size=member_out))
            return out
        return [value] * count

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str:
            self._set_str(index, value, inplace=False, validated=False)
        else:
            TensorDictBase.__setitem__(self, index, value)

    # ------------------------------------------------------------------ per-member whole-collection ops
    def _map_entries(self, fn: Callable[[Any], Any], batch_size: torch.Size, names: Any = None) -> TensorDict:
        # Ops that mix the stack dim with others work on the dense stack.
        return TensorDict._new_unsafe({k: fn(v) for k, v in self._items_raw()}, torch.Size(batch_size), self.device, names)

    def clone(self, recurse: bool = True, **kwargs: Any) -> "LazyStackedTensorDict":
        """A deep copy, member by member (``recurse=False``: new structure, shared tensors)."""
        return self._like([td.clone(recurse) for td in self.tensordicts])

    def copy(self) -> "LazyStackedTensorDict":
        return self._like([td.copy() for td in self.tensordicts])

    def to(self, *args: Any, **kwargs: Any) -> "LazyStackedTensorDict":
        """Move / cast every member (same arguments as :meth:`TensorDict.to`)."""
        if kwargs.get("batch_size") is not None:
            raise RuntimeError("to(batch_size=...) is not supported on a lazy stack: change the members and restack.")
        kwargs.pop("batch_size", None)
        tds = self.tensordicts
        members = [td.to(*args, **kwargs) for td in tds]
        if all(m is td for m, td in zip(members, tds)):
            return self
        return self._like(members)

    def detach(self) -> "LazyStackedTensorDict":
        return self._like([td.detach() for td in self.tensordicts])

    def pin_memory(self, num_threads: int | None = None, inplace: bool = False) -> "LazyStackedTensorDict":
        members = [td.pin_memory(inplace=inplace) for td in self.tensordicts]
        return self if inplace else self._like(members)

    def empty(self, recurse: bool = False, *, batch_size: Any = None, device: Any = NO_DEFAULT, names: Any = None) -> TensorDictBase:
        if batch_size is not None or device is not NO_DEFAULT or names is not None:
            return TensorDictBase.empty(self, recurse, batch_size=batch_size, device=device, names=names)
        return self._like([td.empty(recurse) for td in self.tensordicts])

    def select(self, *keys: NestedKey, inplace: bool = False, strict: bool = True) -> "LazyStackedTensorDict":
        members = [td.select(*keys, inplace=inplace, strict=strict) for td in self.tensordicts]
        return self if inplace else self._like(members)

    def exclude(self, *keys: NestedKey, inplace: bool = False) -> "LazyStackedTensorDict":
        members = [td.exclude(*keys, inplace=inplace) for td in self.tensordicts]
        return self if inplace else self._like(members)

    def update(self, input_dict_or_td: Any, clone: bool = False, inplace: bool = False, *, keys_to_update: Sequence | None = None, non_blocking: bool = False, is_leaf: Callable | None = None, update_batch_size: bool = False, ignore_lock: bool = False) -> "LazyStackedTensorDict":
        if input_dict_or_td is self:
            return self
        source = input_dict_or_td
        if isinstance(source, dict) and source:
            source = TensorDict(source, batch_size=self._batch_size, device=self.device)
        if is_tensor_collection(source) and not source._is_non_tensor:
            parts = self._split_collection(source)
            if parts is not None:
                for td, part in zip(self.tensordicts, parts):
                    td.update(part, clone=clone, inplace=inplace, keys_to_update=keys_to_update, ignore_lock=ignore_lock)
                return self
        return TensorDictBase.update(self, source, clone=clone, inplace=inplace, keys_to_update=keys_to_update, ignore_lock=ignore_lock)

    def update_(self, input_dict_or_td: Any, clone: bool = False, *, keys_to_update: Sequence | None = None) -> "LazyStackedTensorDict":
        source = input_dict_or_td
        if not is_tensor_collection(source):
            source = TensorDict(source, batch_size=self._batch_size)
        parts = self._split_collection(source)
        if parts is None:
            raise RuntimeError(f"update_: collection of batch size {list(source.batch_size)} does not start with the batch size {list(self._batch_size)} of the lazy stack.")
        tds = self.tensordicts
        for td, part in zip(tds, parts):  # every key checked before the first write
            for key in part.keys(True, True):
                if key not in td:
                    raise td._missing_key_error(key)
        for td, part in zip(tds, parts):
            td.update_(part, clone=clone, keys_to_update=keys_to_update)
        return self

    def _apply(self, fn, others, named, path, batch_size, device, names, inplace, default, filter_empty, call_on_nested, constructor_kwargs):
        if batch_size is not None or constructor_kwargs:
            # the result has another batch size: compute it on the dense stack
            return TensorDictBase._apply(self, fn, others, named, path, batch_size, device, names, inplace, default, filter_empty, call_on_nested, constructor_kwargs)
        tds = self.tensordicts
        split_others = []
        for other in others:
            parts = self._split_collection(other) if is_tensor_collection(other) else None
            if parts is None:
                raise RuntimeError(
                    f"apply: the other collection's batch size {list(getattr(other, 'batch_size', []))} does not start with "
                    f"the lazy stack's {list(self._batch_size)}."
                )
            split_others.append(parts)
        results = [
            td._apply(fn, [parts[i] for parts in split_others], named, path, None, device, NO_DEFAULT, inplace, default, filter_empty, call_on_nested, {})
            for i, td in enumerate(tds)
        ]
        if inplace:
            return self
        if tds and all(r is None for r in results):
            return None
        results = [td.empty() if r is None else r for td, r in zip(tds, results)]
        out = self._like(results)
        if names is not NO_DEFAULT and names is not None:
            out.names = names
        return out

    def _tensor_leaves(self) -> tuple[list, list]:
        keys, leaves = [], []
        for td in self.tensordicts:
            k, v = td._tensor_leaves()
            keys.extend(k)
            leaves.extend(v)
        return keys, leaves

    def _compare(self, other: Any, op: Callable) -> "LazyStackedTensorDict":
        """``==``/``!=`` member by member (ragged members never get stacked)."""
        parts = self._split_collection(other) if is_tensor_collection(other) else [other] * len(self.tensordicts)
        if parts is None:
            raise RuntimeError(f"Comparison: the other collection's batch size {list(other.batch_size)} does not start with {list(self._batch_size)}.")
        return self._like([td._compare(part, op) for td, part in zip(self.tensordicts, parts)])

    def _binary_(self, other: Any, foreach: Callable, fallback: Callable) -> "LazyStackedTensorDict":
        tds = self.tensordicts
        if is_tensor_collection(other):
            parts = self._split_collection(other)
            if parts is None:
                raise RuntimeError(f"In-place op: the other collection's batch size {list(other.batch_size)} does not start with {list(self._batch_size)}.")
            for td, part in zip(tds, parts):
                td._binary_(part, foreach, fallback)
        elif isinstance(other, torch.Tensor) and other.dim() > 0:
            sd = self.stack_dim
            for j, td in enumerate(tds):
                for leaf in td._tensor_leaves()[1]:
                    d = other.dim() - (leaf.dim() + 1 - sd)
                    fallback(leaf, other if d < 0 else other.select(d, 0 if other.shape[d] == 1 else j))
        else:
            for td in tds:
                td._binary_(other, foreach, fallback)
        return self

    def allclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
        parts = self._split_collection(other)
        if parts is None:
            raise RuntimeError(f"allclose: batch size {list(other.batch_size)} does not match {list(self._batch_size)}.")
        return all(td.allclose(p, rtol=rtol, atol=atol, equal_nan=equal_nan) for td, p in zip(self.tensordicts, parts))

    def zero_(self) -> "LazyStackedTensorDict":
        for td in self.tensordicts:
            td.zero_()
        return self

    def fill_(self, key: NestedKey, value: float | bool) -> "LazyStackedTensorDict":
        tds = self.tensordicts
        for td in tds:
            if key not in td:
                raise td._missing_key_error(key)
        for td in tds:
            td.fill_(key, value)
        return self

    def detach_(self) -> "LazyStackedTensorDict":
        for td in self.tensordicts:
            td.detach_()
        return self

    def requires_grad_(self, requires_grad: bool = True) -> "LazyStackedTensorDict":
        for td in self.tensordicts:
            td.requires_grad_(requires_grad)
        return self

    @property
    def requires_grad(self) -> bool:
        return any(td.requires_grad for td in self.tensordicts)

    def is_shared(self) -> bool:
        return bool(self.tensordicts) and all(td.is_shared() for td in self.tensordicts)

    def share_memory_(self) -> "LazyStackedTensorDict":
        for td in self.tensordicts:
            td.share_memory_()
        return self.lock_()

    def _split_mask(self, mask: torch.Tensor) -> Sequence:
        self._check_mask(mask)
        return mask.unbind(self.stack_dim) if mask.dim() > self.stack_dim else [mask] * len(self.tensordicts)

    def masked_fill(self, mask: torch.Tensor, value: Any) -> "LazyStackedTensorDict":
        return self._like([td.masked_fill(m, value) for td, m in zip(self.tensordicts, self._split_mask(mask))])

    def masked_fill_(self, mask: torch.Tensor, value: Any) -> "LazyStackedTensorDict":
        for td, m in zip(self.tensordicts, self._split_mask(mask)):
            td.masked_fill_(m, value)
        return self

    # ------------------------------------------------------------------ locking
    def _set_lock(self, locked: bool) -> None:
        self._is_locked = locked
        for td in self.tensordicts:
            td._set_lock(locked)

    def _push_op(self, locked: bool) -> None:
        if self._lock_ops is None:
            self._lock_ops = []
        self._lock_ops.append(locked)

    def _pop_op(self):
        return self._lock_ops.pop() if self._lock_ops else None

    # ------------------------------------------------------------------ shape ops
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
            return tuple(_empty_stack(self._batch_size, [_FULL] * d + [i]) for i in range(self._batch_size[d]))
        return tuple(LazyStackedTensorDict._new_unsafe([p[i] for p in per], new_sd) for i in range(self._batch_size[d]))

    def split(self, split_size: int | Sequence[int], dim: int = 0) -> tuple:
        d = normalize_dim(dim, self.batch_dims)
        sd = self.stack_dim
        if d != sd:
            per = [td.split(split_size, self._member_dim(d)) for td in self.tensordicts]
            if not per:
                return ShapeOpsMixin.split(self, split_size, dim)
            return tuple(LazyStackedTensorDict._new_unsafe(list(group), sd) for group in zip(*per))
        length = self._batch_size[d]
        if isinstance(split_size, int):
            if split_size <= 0:
                raise ValueError(f"split: split_size must be positive, got {split_size}.")
            lengths = [min(split_size, length - i) for i in range(0, length, split_size)]
        else:
            lengths = list(split_size)
            if sum(lengths) != length:
                raise ValueError(f"split: sizes {lengths} sum to {sum(lengths)}, the dim has {length}.")
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

    # ------------------------------------------------------------------ torch.stack / torch.cat hooks
    @classmethod
    def _stack_impl(cls, tds: Sequence, dim: int, out: Any = None) -> TensorDictBase:
        """``torch.stack`` of lazy stacks: a lazy stack of them (no copy)."""
        return lazy_stack(list(tds), dim, out=out)

    @classmethod
    def _cat_impl(cls, tds: Sequence, dim: int, out: Any = None) -> TensorDictBase:
        """``torch.cat`` of lazy stacks: members are concatenated (stack dim) or cat member-wise (other dims)."""
        first = tds[0]
        sd = first.stack_dim
        bs = first.batch_size
        for i, td in enumerate(tds):
            if not is_tensor_collection(td):
                raise TypeError(f"cat: item {i} is a {type(td).__name__}, expected a tensor collection.")
            other = td.batch_size
            if len(other) != len(bs) or other[:dim] != bs[:dim] or other[dim + 1 :] != bs[dim + 1 :]:
                raise RuntimeError(f"cat: collection {i} has batch size {list(other)}, incompatible with {list(bs)} along dim {dim}.")
        per = [td.tensordicts if isinstance(td, LazyStackedTensorDict) and td.stack_dim == sd else list(td.unbind(sd)) for td in tds]
        new_bs = torch.Size(tuple(bs[:dim]) + (sum(td.batch_size[dim] for td in tds),) + tuple(bs[dim + 1 :]))
        if dim == sd:
            members = [m for p in per for m in p]
        else:
            md = dim if dim < sd else dim - 1
            members = [torch.cat([p[j] for p in per], md) for j in range(bs[sd])]
        result = LazyStackedTensorDict._new_unsafe(members, sd, new_bs)
        if out is not None:
            out.update_(result)
            return out
        return result

    # ------------------------------------------------------------------ misc
    def __repr__(self) -> str:
        return self._repr_nested(0)

    def _leaf_shape(self, key: str) -> torch.Size | None:
        """The stacked shape of leaf ``key`` without stacking (None when the members' shapes differ)."""
        shapes = [_leaf_shape_of(td, key) for td in self.tensordicts]
        first = shapes[0] if shapes else None
        if first is None or any(sh != first for sh in shapes):
            return None
        sd = self.stack_dim
        return torch.Size(tuple(first[:sd]) + (len(shapes),) + tuple(first[sd:]))

    def _repr_nested(self, indent: int) -> str:
        pad = " " * (indent + 8)
        lines = []
        tds = self.tensordicts
        for key in self._common_keys():
            rep = self._probe_str(key)
            if isinstance(rep, torch.Tensor):
                shape = self._leaf_shape(key)
                if shape is not None:
                    desc = f"Tensor(shape={shape}, device={rep.device}, dtype={rep.dtype})"
                else:
                    desc = f"Tensor(heterogeneous shapes, dtype={rep.dtype})"
            elif isinstance(rep, LazyStackedTensorDict):
                desc = rep._repr_nested(indent + 8)
            else:
                desc = f"{type(rep).__name__} x {len(tds)}"
            lines.append(f"{pad}{key}: {desc}")
        common = set(self._common_keys())
        exclusive = {i: [k for k in td.keys() if k not in common] for i, td in enumerate(tds)}
        exclusive = {i: ks for i, ks in exclusive.items() if ks}
        inner = " " * (indent + 4)
        fields = ",\n".join(lines)
        return (
            f"{type(self).__name__}(\n{inner}fields={{\n{fields}}},\n{inner}exclusive_fields={exclusive},\n"
            f"{inner}batch_size={self._batch_size},\n{inner}device={self.device},\n{inner}stack_dim={self.stack_dim})"
        )


def _leaf_shape_of(td: Any, key: str) -> torch.Size | None:
    if isinstance(td, LazyStackedTensorDict):
        return td._leaf_shape(key)
    v = td._get_str(key, None)
    return v.shape if isinstance(v, torch.Tensor) else None


class _LazyKeysView(KeysView):
    """Keys of a lazy stack, found without stacking any value."""

    __slots__ = ()

    def _collect(self, td: Any, prefix: tuple, out: list) -> list:
        if not isinstance(td, LazyStackedTensorDict):
            return KeysView._collect(self, td, prefix, out)
        if not self._include_nested and not self._leaves_only:  # no value needed to tell leaves apart
            out.extend(prefix + (key,) if prefix else key for key in td._common_keys())
            return out
        is_leaf = self._is_leaf
        for key in td._common_keys():
            rep = td._probe_str(key)
            full = prefix + (key,) if prefix else key
            leaf = isinstance(rep, torch.Tensor) or is_leaf(type(rep))
            if leaf or not self._leaves_only:
                out.append(full)
            if not leaf and self._include_nested:
                self._collect(rep, full if prefix else (key,), out)
        return out

    def __contains__(self, key: Any) -> bool:
        key = _key_to_tuple(unravel_key(key))
        if len(key) > 1 and not self._include_nested:
            return False
        rep = _probe(self._td, key)
        if rep is _MISSING:
            return False
        return not self._leaves_only or isinstance(rep, torch.Tensor) or self._is_leaf(type(rep))


def lazy_stack(list_of_tds: Sequence[TensorDictBase], dim: int = 0, *, out: TensorDictBase | None = None, stack_dim_name: str | None = None) -> TensorDictBase:
    """Stack collections lazily along a new batch dim ``dim`` (no copy).

    Members need one batch size; keys and feature shapes may differ. Non-tensor data are
    stacked with ``torch.stack``. With ``out``, the members are written into ``out`` in place.

    Example:
        >>> import torch
        >>> from tdict import TensorDict, lazy_stack
        >>> s = lazy_stack([TensorDict(a=torch.zeros(2)), TensorDict(a=torch.ones(3))])
        >>> s.batch_size, s.get("a", as_list=True)[1].shape
        (torch.Size([2]), torch.Size([3]))
    """
    if not isinstance(list_of_tds, (list, tuple)) or not list_of_tds:
        raise ValueError(f"lazy_stack expects a non-empty list of tensor collections, got {type(list_of_tds).__name__}.")
    items = list(list_of_tds)
    if all(is_tensor_collection(td) and td._is_non_tensor for td in items):
        return torch.stack(items, dim, out=out) if out is not None else torch.stack(items, dim)
    result = LazyStackedTensorDict(*items, stack_dim=dim, stack_dim_name=stack_dim_name)
    if out is not None:
        if out.batch_size != result.batch_size:
            raise RuntimeError(f"lazy_stack: out has batch size {list(out.batch_size)}, the stack has {list(result.batch_size)}.")
        out.update_(result)
        return out
    return result


# ---------------------------------------------------------------------- helpers
def _probe(node: Any, parts: tuple) -> Any:
    """The entry at nested key ``parts`` without stacking leaves (``_MISSING`` if absent)."""
    for part in parts:
        if isinstance(node, torch.Tensor) or not is_tensor_collection(node) or node._is_non_tensor:
            return _MISSING
        node = node._probe_str(part) if isinstance(node, LazyStackedTensorDict) else node._get_str(part, _MISSING)
        if node is _MISSING:
            return _MISSING
    return node


def _stack_error(key: Any, vals: list) -> RuntimeError:
    kinds = {type(v).__name__ for v in vals}
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return RuntimeError(f"Key {key!r}: the stacked collections hold different kinds of entries ({sorted(kinds)}); it cannot be stacked.")
    shapes = [tuple(v.shape) for v in vals]
    if len(set(shapes)) == 1:
        devices = sorted({str(v.device) for v in vals})
        return RuntimeError(f"Key {key!r}: the members' tensors cannot be stacked (devices {devices}, dtypes {sorted({str(v.dtype) for v in vals})}).")
    return RuntimeError(
        f"Key {key!r}: the stacked collections hold tensors of different shapes {shapes}, which cannot be stacked densely. "
        f"Use get({key!r}, as_padded_tensor=True) or as_padded_tensor({key!r}) to pad them, "
        f"get({key!r}, as_nested_tensor=True) or densify(layout=torch.jagged) for nested tensors, "
        f"or get({key!r}, as_list=True) for the list."
    )


def _dense_leaf(key: Any, vals: list, sd: int, layout: torch.layout) -> torch.Tensor:
    shape = vals[0].shape
    if all(v.shape == shape for v in vals):
        return torch.stack(vals, sd)
    shapes = [tuple(v.shape) for v in vals]
    if layout is torch.strided:
        raise RuntimeError(
            f"Key {key!r}: the stacked collections hold tensors of different shapes {shapes}; a strided TensorDict needs equal shapes. "
            f"Use densify(layout=torch.jagged), as_padded_tensor({key!r}) or get({key!r}, as_list=True)."
        )
    return _nested(key, vals, sd, layout)


def _nested(key: Any, vals: list, sd: int, layout: torch.layout) -> torch.Tensor:
    if sd != 0:
        raise ValueError(f"Key {key!r}: nested tensors need the stack dim first (stack_dim=0), this stack has stack_dim={sd}.")
    if not all(isinstance(v, torch.Tensor) for v in vals):
        raise TypeError(f"Key {key!r}: nested tensors need tensor leaves in every member.")
    try:
        return torch.nested.as_nested_tensor(vals, layout=layout)
    except (RuntimeError, ValueError, TypeError) as err:
        raise RuntimeError(f"Key {key!r}: cannot build a nested tensor ({layout}) from shapes {[tuple(v.shape) for v in vals]}: {err}") from err


def _pad_stack(key: Any, vals: list, dim: int, value: Any, padding_side: str) -> torch.Tensor:
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}.")
    if not all(isinstance(v, torch.Tensor) for v in vals):
        raise TypeError(f"as_padded_tensor: key {key!r} is not a tensor leaf in every member ({sorted({type(v).__name__ for v in vals})}).")
    ndim = vals[0].dim()
    if any(v.dim() != ndim for v in vals):
        raise RuntimeError(f"as_padded_tensor: key {key!r} has tensors with different numbers of dims {[tuple(v.shape) for v in vals]}.")
    dim = normalize_dim(dim, ndim + 1)
    maxs = [max(v.shape[i] for v in vals) for i in range(ndim)]
    out_shape = maxs[:dim] + [len(vals)] + maxs[dim:]
    out = torch.full(out_shape, value, dtype=vals[0].dtype, device=vals[0].device)
    right = padding_side == "right"
    for j, v in enumerate(vals):
        region = tuple(slice(0, s) if right else slice(m - s, m) for s, m in zip(v.shape, maxs))
        out.select(dim, j)[region] = v
    return out


_NOTHING = object()


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


def _empty_stack(batch_size: torch.Size, parts: list) -> LazyStackedTensorDict:
    """An empty lazy stack with the batch size ``parts`` would give (zero elements)."""
    out_bs = _indexed_batch_size(batch_size, tuple(parts))
    zero = next((i for i, s in enumerate(out_bs) if s == 0), None)
    if zero is None:  # pragma: no cover - callers only ask when some dim is empty
        raise IndexError("internal: expected an empty selection.")
    return LazyStackedTensorDict._new_unsafe([], zero, out_bs)


__all__ = ["LazyStackedTensorDict", "lazy_stack"]
