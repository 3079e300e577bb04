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

Examples:
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

from typing import Any, Callable, Iterator, Sequence, cast

import torch

from ._core.keys import _LEAF, _NODE, _TENSOR, KeysView
from ._lazy.index import _FULL, LazyIndexMixin
from ._lazy.ops import LazyMemberOpsMixin
from ._lazy.ragged import LazyRaggedMixin, _nested, _pad_stack, _stack_error
from ._lazy.shape import LazyShapeMixin
from ._core.utils import (
    NO_DEFAULT,
    NestedKey,
    _key_to_tuple,
    check_names,
    content_of,
    normalize_dim,
    parse_batch_size,
    unravel_key,
)
from .base import _MISSING, TensorDictBase, is_tensor_collection
from .errors import LOCKED, ShapeMismatchError, batch_mismatch_error, locked_error
from .tensordict import TensorDict
from .unbatched import UNBATCHED_TYPES, _combine_unbatched


class LazyStackedTensorDict(LazyIndexMixin, LazyShapeMixin, LazyMemberOpsMixin, LazyRaggedMixin, TensorDictBase):
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

    Examples:
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

    __slots__ = (
        "tensordicts",
        "stack_dim",
        "_batch_size",
        "_is_locked",
        "_lock_ops",
        "_stack_dim_name",
        "_lock_parents",
        "__weakref__",
    )
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
                raise RuntimeError(
                    f"lazy_stack: batch_size {list(batch_size)} does not match the stacked batch size {list(full)}."
                )
        else:
            if batch_size is None:
                raise ValueError("lazy_stack: an empty stack needs an explicit batch_size.")
            full = parse_batch_size(batch_size)
            stack_dim = normalize_dim(stack_dim, len(full), "stack_dim")
            if full[stack_dim] != 0:
                raise ValueError(
                    f"lazy_stack: an empty stack needs size 0 on the stack dim, got batch_size {list(full)}."
                )
        self.tensordicts = tds
        self.stack_dim = stack_dim
        self._batch_size = full
        self._is_locked = None  # not locked itself: is_locked then asks the members
        self._lock_ops = None
        self._stack_dim_name = stack_dim_name
        if names is not None:
            self.names = names
        if lock:
            self.lock_()

    @classmethod
    def _new_unsafe(
        cls, tds: list, stack_dim: int, batch_size: torch.Size | None = None, stack_dim_name: str | None = None
    ) -> "LazyStackedTensorDict":
        """Build without checks: ``tds`` share one batch size (``batch_size`` needed if empty)."""
        self = object.__new__(cls)
        self.tensordicts = tds
        self.stack_dim = stack_dim
        if batch_size is None:
            bs = tds[0].batch_size
            batch_size = torch.Size(tuple(bs[:stack_dim]) + (len(tds),) + tuple(bs[stack_dim:]))
        self._batch_size = batch_size
        self._is_locked = None
        self._lock_ops = None
        self._stack_dim_name = stack_dim_name
        return self

    def _like(self, tds: list, stack_dim: int | None = None) -> "LazyStackedTensorDict":
        """A new stack of ``tds`` (same length as ``self``'s) along ``stack_dim`` (default: own)."""
        sd = self.stack_dim if stack_dim is None else stack_dim
        if not tds:
            return LazyStackedTensorDict._new_unsafe(tds, sd, self._batch_size, self._stack_dim_name)
        return LazyStackedTensorDict._new_unsafe(tds, sd, None, self._stack_dim_name)

    @staticmethod
    def _stack_of(tds: list, stack_dim: int, batch_size: torch.Size | None = None) -> "LazyStackedTensorDict":
        """A plain lazy stack (never a subclass) built without checks: what indexing and shape ops return."""
        return LazyStackedTensorDict._new_unsafe(tds, stack_dim, batch_size)

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
        """The members' common device; ``None`` when they differ, have none, or the stack is empty."""
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
        """The batch dim names: the members' names with the stack dim's name inserted at ``stack_dim``.

        Assigning sets the stack dim's name here and the other names on every member.
        """
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
        value = check_names(value, len(self._batch_size))
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

    def keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable | None = None,
        *,
        sort: bool = False,
    ):
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
        return KeyError(
            f"key {key!r} not found in the lazy stack.{where} Keys common to all members: {list(self.keys(True))}."
        )

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
        flags = {
            "as_list": as_list,
            "as_padded_tensor": as_padded_tensor,
            "as_nested_tensor": as_nested_tensor,
            "padding_side": padding_side,
            "layout": layout,
            "padding_value": padding_value,
        }
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
                v = td._get_str(key[0], _MISSING) if len(key) == 1 else td.get(key, _MISSING)  # key is never ()
            if v is _MISSING:
                if default is NO_DEFAULT:
                    raise self._missing_key_error(unravel_key(key))
                return default
            vals.append(v)
        return vals

    def _get_str(self, key: str, default: Any) -> Any:
        return self._gather(key, lambda td: td._get_str(key, _MISSING), default)

    def _get_tuple(self, key: tuple, default: Any) -> Any:
        if len(key) == 1:
            return self._get_str(key[0], default)
        return self._gather(key, lambda td: td._get_tuple(key, _MISSING), default)

    def _gather(self, key: Any, fetch: Callable, default: Any) -> Any:
        """Every member's value of ``key`` (``fetch(member)``), combined; ``default`` if one lacks it."""
        vals = []
        for td in self.tensordicts:
            v = fetch(td)
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
            if type(first) in UNBATCHED_TYPES:  # one tensor for the whole stack, tagged with its batch size
                bs = list(cast(Any, first).batch_size)
                bs.insert(self.stack_dim, len(vals))
                return _combine_unbatched(vals, torch.Size(bs), key, "lazy stack")
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
        cls = type(first)
        tensorclass = getattr(cls, "_is_tensorclass", False) and all(type(v) is cls for v in vals)
        out = LazyStackedTensorDict._new_unsafe([content_of(v) for v in vals] if tensorclass else vals, self.stack_dim)
        out._is_locked = self._is_locked
        return cls._from_tensordict(out) if tensorclass else out  # instances of one tensor class: that class

    def _items_raw(self) -> Iterator[tuple[str, Any]]:
        tds = self.tensordicts
        for key in self._common_keys():
            yield key, self._combine(key, [td._get_str(key, NO_DEFAULT) for td in tds])

    # ------------------------------------------------------------------ set / delete
    def _check_writable(self, key: Any, inplace: bool) -> None:
        locked = self._is_locked
        if not locked:
            for td in self.tensordicts:
                if td._is_locked:
                    locked = True
                    break
        if locked and not (inplace and key in self):
            raise RuntimeError(
                f"{LOCKED}. For in-place modification of key {key!r} use set_() (the key must exist in every "
                "member); to add or replace keys, unlock_() the lazy stack and its members first."
            )

    def _split_value(self, key: Any, value: Any) -> Sequence:
        """``value`` (with the stack's batch size) cut along the stack dim: one part per member."""
        n = len(self.tensordicts)
        sd = self.stack_dim
        bs = self._batch_size
        if type(value) in UNBATCHED_TYPES:
            return [value] * n  # whole in every member (each tags it with its batch size)
        if isinstance(value, torch.Tensor):
            if value.shape[: len(bs)] != bs:
                raise batch_mismatch_error(key, value, bs, " of the lazy stack")
            return value.unbind(sd)
        if is_tensor_collection(value):
            parts = self._split_collection(value)
            if parts is None:
                raise batch_mismatch_error(key, value, bs, " of the lazy stack")
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
        if isinstance(value, torch.Tensor) and type(value) not in UNBATCHED_TYPES:
            # batch prefix checked above: members skip it unless a device move is due
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
                raise RuntimeError(
                    f"set_({key!r}): shape {tuple(part.shape)} does not match a member's {tuple(target.shape)}."
                )
        for td, part in zip(tds, parts):
            td.set_(key, part)
        return self

    def rename_key_(self, old_key: NestedKey, new_key: NestedKey, safe: bool = False) -> "LazyStackedTensorDict":
        """Rename in every member (ragged leaves included)."""
        old_key, new_key = unravel_key(old_key), unravel_key(new_key)
        if old_key not in self:
            raise self._missing_key_error(old_key)
        if safe and any(new_key in td for td in self.tensordicts):
            raise KeyError(
                f"rename_key_: {new_key!r} is already present in TensorDict, and safe=True forbids overwriting it."
            )
        for td in self.tensordicts:
            td.rename_key_(old_key, new_key, safe=safe)
        return self

    def insert(self, index: int, tensordict: TensorDictBase) -> None:
        """Insert a new member at ``index`` of the stack dim (it needs the members' batch size)."""
        if not is_tensor_collection(tensordict):
            raise TypeError(
                f"insert: Expected new value to be TensorDictBase instance (a tensor collection), got "
                f"{type(tensordict).__name__}."
            )
        bs = self._batch_size
        sd = self.stack_dim
        member_bs = torch.Size(tuple(bs[:sd]) + tuple(bs[sd + 1 :]))
        if tensordict.batch_size != member_bs:
            raise ShapeMismatchError(
                f"insert: Batch sizes in tensordicts differs, the collection has batch size "
                f"{list(tensordict.batch_size)}, the members have {list(member_bs)}."
            )
        if self.is_locked:
            raise locked_error(
                f"insert/append would add a member to a locked lazy stack; unlock_() it first (got {type(tensordict).__name__})."
            )
        self.tensordicts.insert(index, tensordict)
        self._batch_size = torch.Size(tuple(bs[:sd]) + (len(self.tensordicts),) + tuple(bs[sd + 1 :]))

    def append(self, tensordict: TensorDictBase) -> None:
        """Add a member at the end of the stack dim."""
        self.insert(len(self.tensordicts), tensordict)

    # ------------------------------------------------------------------ locking
    @property
    def is_locked(self) -> bool:
        """Whether adding and removing keys is forbidden: the stack was locked (``lock_``, or a locked
        parent), or every member is locked on its own (then ``_is_locked`` stays ``None``: unlocking
        a member unlocks the stack). Assigning it locks or unlocks (recursively)."""
        if self._is_locked:
            return True
        tds = self.tensordicts
        return bool(tds) and all(td.is_locked for td in tds)

    @is_locked.setter
    def is_locked(self, value: bool) -> None:
        TensorDictBase.is_locked.fset(self, value)  # pyright: ignore[reportOptionalCall]  # (a property with a setter)

    def _set_lock(self, locked: bool) -> None:
        self._is_locked = True if locked else None
        for td in self.tensordicts:
            td._set_lock(locked)

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
                why = ""
                if len(other) == len(bs) and dim != sd and other[sd] != bs[sd]:
                    why = f" (a cat along dim {dim} needs the same number of stacked tensordicts, {bs[sd]}, in each)"
                raise RuntimeError(
                    f"cat: collection {i} has batch size {list(other)}, incompatible with {list(bs)} along dim {dim}{why}."
                )
        per = [
            td.tensordicts if isinstance(td, LazyStackedTensorDict) and td.stack_dim == sd else list(td.unbind(sd))
            for td in tds
        ]
        new_bs = torch.Size(tuple(bs[:dim]) + (sum(td.batch_size[dim] for td in tds),) + tuple(bs[dim + 1 :]))
        if dim == sd:
            members = [m for p in per for m in p]
        else:
            md = dim if dim < sd else dim - 1
            # collections go through __torch_function__ (torch's stubs only know tensors)
            members = [torch.cat([p[j] for p in per], md) for j in range(bs[sd])]  # pyright: ignore[reportArgumentType]
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
            if type(rep) in UNBATCHED_TYPES:
                desc = f"UnbatchedTensor(shape={rep.shape}, device={rep.device}, dtype={rep.dtype})"
            elif isinstance(rep, torch.Tensor):
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
        for key in td._common_keys():
            rep = td._probe_str(key)
            full = prefix + (key,) if prefix else key
            kind = self._kind(type(rep))
            if kind == _TENSOR or kind == _LEAF or not self._leaves_only:
                out.append(full)
            if kind == _NODE and self._include_nested:
                self._collect(rep, full if prefix else (key,), out)
        return out

    def _count(self, td: Any) -> int:
        return len(self._collect(td, (), []))

    def __contains__(self, key: Any) -> bool:
        key = _key_to_tuple(unravel_key(key))
        if len(key) > 1 and not self._include_nested:
            return False
        rep = _probe(self._td, key)
        if rep is _MISSING:
            return False
        return not self._leaves_only or self._kind(type(rep)) != _NODE


def lazy_stack(
    list_of_tds: Sequence[TensorDictBase],
    dim: int = 0,
    *,
    out: TensorDictBase | None = None,
    stack_dim_name: str | None = None,
) -> TensorDictBase:
    """Stack collections lazily along a new batch dim ``dim`` (no copy).

    Members need one batch size; keys and feature shapes may differ. Non-tensor data are
    stacked with ``torch.stack``. With ``out``, the members are written into ``out`` in place.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict, lazy_stack
        >>> s = lazy_stack([TensorDict(a=torch.zeros(2)), TensorDict(a=torch.ones(3))])
        >>> s.batch_size, s.get("a", as_list=True)[1].shape
        (torch.Size([2]), torch.Size([3]))
    """
    if not isinstance(list_of_tds, (list, tuple)) or not list_of_tds:
        raise ValueError(
            f"lazy_stack expects a non-empty list of tensor collections, got {type(list_of_tds).__name__}."
        )
    items = list(list_of_tds)
    first = type(items[0])
    if getattr(first, "_is_tensorclass", False) and out is None and all(type(td) is first for td in items):
        # instances of one tensor class: an instance over the lazy stack of their TensorDicts
        inner = lazy_stack([content_of(td) for td in items], dim, stack_dim_name=stack_dim_name)
        return first._from_tensordict(inner)  # pyright: ignore[reportAttributeAccessIssue]
    if all(is_tensor_collection(td) and td._is_non_tensor for td in items):
        # collections go through __torch_function__ (torch's stubs only know tensors)
        return torch.stack(items, dim, out=out) if out is not None else torch.stack(items, dim)  # pyright: ignore[reportArgumentType, reportReturnType]
    result = LazyStackedTensorDict(*items, stack_dim=dim, stack_dim_name=stack_dim_name)
    if out is not None:
        if out.batch_size != result.batch_size:
            raise RuntimeError(
                f"lazy_stack: out has batch size {list(out.batch_size)}, the stack has {list(result.batch_size)}."
            )
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


__all__ = ["LazyStackedTensorDict", "lazy_stack"]
