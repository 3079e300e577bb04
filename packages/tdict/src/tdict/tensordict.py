"""TensorDict: a dict of tensors that shares leading batch dims and behaves like one tensor."""

from __future__ import annotations

import operator
from types import GenericAlias
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence, cast

import torch
from torch import _VF  # torch._foreach_* (the same functions; pyright knows them from here)

from ._core.keys import KeysView, is_leaf_nontensor
from ._core.utils import (
    NO_DEFAULT,
    NestedKey,
    _key_to_tuple,
    check_names,
    content_of,
    normalize_dim,
    parse_batch_size,
    parse_device,
    parse_to_args,
)
from ._core.indexing import _batch_size_from_entry, _indexed_batch_size, _normalize_index, check_write_shape
from ._core.locking import keeps_lock
from ._core.update import with_entries
from ._core.names import indexed_names, leading_names
from .base import _MISSING, NON_TENSOR_CLASSES, TensorDictBase, is_tensor_collection
from .errors import LOCKED, BatchIndexError, ShapeMismatchError, batch_mismatch_error, incompatible_leaf
from .unbatched import UNBATCHED_TYPES as _UNBATCHED

_Tensor = torch.Tensor


_DEVICE_OR_DTYPE = (str, torch.device, torch.dtype)


class TensorDict(TensorDictBase):
    """A dictionary of tensors (and nested TensorDicts) with common leading batch dims.

    Args:
        source: a mapping of keys to tensors, nested mappings, TensorDicts or Python objects
            (the latter are stored as :class:`~tdict.NonTensorData`). Tuple keys are nested keys.
        batch_size: the leading dims every entry shares (default ``[]``).
        device: if given, every tensor is moved to it on write.
        names: optional names of the batch dims.
        lock: lock the structure right away (see :meth:`lock_`).
        **kwargs: more entries, as keyword arguments.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict({"obs": torch.zeros(4, 3), "next": {"reward": torch.ones(4)}}, batch_size=[4])
        >>> td[1:3].batch_size
        torch.Size([2])
        >>> td["next", "reward"].shape
        torch.Size([4])
    """

    # _consolidated: the one storage of a consolidated TensorDict (tdict.consolidate); unset otherwise
    # _lock_parents: weak references to the locked collections that locked this one (_core.lock_graph); unset until then
    __slots__ = (
        "_tensordict",
        "_batch_size",
        "_device",
        "_names",
        "_is_locked",
        "_lock_ops",
        "_consolidated",
        "_lock_parents",
        "__weakref__",
    )

    if TYPE_CHECKING:  # static methods attached at the end of this module (tdict._core.functional)
        from_module: Callable[..., Any]
        from_modules: Callable[..., Any]

    def __class_getitem__(cls, params: Any) -> Any:
        """``TensorDict[str, torch.Tensor]``: a generic alias for annotations (as ``dict[str, Tensor]``);
        tensor classes read its origin, ``TensorDict``."""
        return GenericAlias(cls, params)

    def __init__(
        self,
        source: Any = None,
        batch_size: Sequence[int] | torch.Size | int | None = None,
        device: Any = None,
        names: Sequence[str | None] | None = None,
        non_blocking: bool | None = None,
        lock: bool = False,
        **kwargs: Any,
    ) -> None:
        self._tensordict: dict[str, Any] = {}
        self._is_locked = False
        self._lock_ops: list[Callable[[], Any]] | None = None
        self._names = None
        self._batch_size = parse_batch_size(batch_size)
        self._device = parse_device(device)
        if names is not None:  # before the entries: sub-collections are stored with these names
            self._names = _parsed_names(names, len(self._batch_size))
        if source is None:
            items = kwargs.items()
        else:
            if kwargs:
                raise ValueError(
                    f"TensorDict: pass the entries as source or as keywords, not both (got source and {list(kwargs)})."
                )
            if is_tensor_collection(source):
                items = source._items_raw()
            elif hasattr(source, "items"):
                items = source.items()
            else:
                raise TypeError(
                    f"TensorDict source must be a mapping or a tensor collection, got {type(source).__name__}."
                )
            if kwargs:
                items = list(items) + list(kwargs.items())
        self._fill(items)
        if lock:
            self.lock_()

    def _fill(self, items: Any) -> None:
        """Validate and store ``(key, value)`` pairs (the constructor's loop)."""
        entries = self._tensordict
        bs, device = self._batch_size, self._device
        n = len(bs)
        for key, value in items:
            if type(key) is not str:
                self._set_tuple(_key_to_tuple(key), value, inplace=False)
            elif (
                (type(value) is _Tensor or isinstance(value, torch.Tensor) and type(value) not in _UNBATCHED)
                and (not n or value.shape[:n] == bs)
                and (device is None or value.device == device)
            ):
                entries[key] = value  # the common case, checked inline
            elif type(value) is dict:
                sub = TensorDict._new_unsafe({}, bs, device, self._names)
                sub._fill(value.items())
                entries[key] = sub
            else:
                entries[key] = checked = self._validate(key, value)
                if not isinstance(checked, torch.Tensor):
                    self._adopt_child_names(checked)

    @classmethod
    def unchecked(
        cls,
        source: dict,
        batch_size: torch.Size,
        device: torch.device | None = None,
        names: Sequence[str | None] | None = None,
    ) -> "TensorDict":
        """Wraps ``source`` as it is: no copy and no check (the fast constructor of hot paths).

        For code that builds entries whose shapes it already knows (an env's step output, a view
        of another TensorDict's entries): the dict becomes the TensorDict's own storage, so the
        caller must not reuse it. Each value must be a tensor or a TensorDict whose leading dims
        equal ``batch_size`` and that lives on ``device`` when one is given; nothing verifies this.
        ``names`` is ``None`` or one name (or ``None``) per batch dim, as ``td.names`` returns.
        Build with ``TensorDict(...)`` everywhere else.

        Examples:
            >>> import torch
            >>> td = TensorDict.unchecked({"obs": torch.zeros(4, 3)}, torch.Size([4]))
            >>> td.batch_size, td["obs"].shape
            (torch.Size([4]), torch.Size([4, 3]))
        """
        if names is not None:
            names = list(names) if any(n is not None for n in names) else None
        return cls._new_unsafe(source, batch_size, device, names)

    @classmethod
    def _new_unsafe(
        cls, source: dict, batch_size: torch.Size, device: torch.device | None = None, names: Any = None
    ) -> "TensorDict":
        """Build without any check: ``source`` must already be valid for ``batch_size``."""
        self = object.__new__(cls)
        self._tensordict = source
        self._batch_size = batch_size
        self._device = device
        self._names = names
        self._is_locked = False
        self._lock_ops = None
        return self

    @classmethod
    def from_dict(
        cls,
        input_dict: Any,
        batch_size: Any = None,
        device: Any = None,
        batch_dims: int | None = None,
        names: Any = None,
        auto_batch_size: bool | None = None,
    ) -> "TensorDict":
        """Build from a (nested) dict; without ``batch_size`` the largest common leading shape is used.

        Examples:
            >>> import torch
            >>> TensorDict.from_dict({"a": torch.zeros(3, 4), "b": {"c": torch.zeros(3, 4, 5)}}).batch_size
            torch.Size([3, 4])
        """
        if batch_size is not None and batch_dims is not None:
            raise ValueError(
                f"from_dict: pass batch_size or batch_dims, not both (got {batch_size!r} and {batch_dims!r})."
            )
        out = (
            cls(input_dict, batch_size=batch_size, device=device)
            if batch_size is not None
            else cls(_as_nested(input_dict), device=device)
        )
        if batch_size is None and auto_batch_size is not False:
            out.auto_batch_size_(batch_dims)
        if names is not None:
            out.names = names
        return out

    def from_dict_instance(
        self,
        input_dict: Any,
        batch_size: Any = None,
        device: Any = None,
        batch_dims: int | None = None,
        names: Any = None,
        *,
        auto_batch_size: bool | None = None,
    ) -> "TensorDict":
        """:meth:`from_dict`, with ``self`` as the template: a dict under a key where ``self`` holds a
        tensor class becomes that class again (the inverse of ``to_dict``).

        Examples:
            >>> import torch
            >>> td = TensorDict(a=torch.zeros(2), b={"c": torch.ones(2)}, batch_size=[2])
            >>> td.from_dict_instance(td.to_dict())["b", "c"].tolist()
            [1.0, 1.0]
        """
        from ._core.constructors import like_template

        if not isinstance(input_dict, dict):
            raise TypeError(f"from_dict_instance: input_dict must be a dict, got {type(input_dict).__name__}.")
        return type(self).from_dict(
            like_template(self, input_dict),
            batch_size=batch_size,
            device=device,
            batch_dims=batch_dims,
            names=names,
            auto_batch_size=auto_batch_size,
        )

    def auto_batch_size_(self, batch_dims: int | None = None) -> "TensorDict":
        """Set the batch size to the longest leading shape all entries share (at most ``batch_dims`` dims,
        at every level: sub-collections are sized first, with the same limit)."""
        for value in self._tensordict.values():
            if not isinstance(value, torch.Tensor) and not value._is_non_tensor and not value._is_lazy:
                value.auto_batch_size_(batch_dims)
        # non-tensor data count as sub-collections once batched (a list of strings sizes the batch);
        # a batch-less one (one value) is broadcast over whatever the others give
        shapes = [
            v.shape if isinstance(v, torch.Tensor) else v.batch_size
            for v in self._tensordict.values()
            if (type(v) not in _UNBATCHED if isinstance(v, torch.Tensor) else not v._is_non_tensor or v.batch_size)
        ]
        if not shapes:
            return self
        common = []
        for dims in zip(*shapes):
            if any(d != dims[0] for d in dims):
                break
            common.append(dims[0])
        if batch_dims is not None:
            common = common[:batch_dims]
        self._batch_size = torch.Size(common)
        for key, value in list(self._tensordict.items()):
            if type(value) in _UNBATCHED or (
                not isinstance(value, torch.Tensor) and value._is_non_tensor and not value.batch_size
            ):
                self._tensordict[key] = value._with_batch_size(self._batch_size)
        return self

    # ------------------------------------------------------------------ validation
    def _validate(self, key: str, value: Any) -> Any:
        """Check (and convert) an entry before it is stored under ``key``."""
        if isinstance(value, torch.Tensor):
            bs = self._batch_size
            if type(value) in _UNBATCHED:  # any shape: tagged with the batch size instead
                if self._device is not None and value.device != self._device:
                    value = value.to(self._device)
                return cast(Any, value)._with_batch_size(bs)
            if bs and value.shape[: len(bs)] != bs:
                raise batch_mismatch_error(key, value, self._batch_size)
            if self._device is not None and value.device != self._device:
                value = value.to(self._device)
            return value
        if is_tensor_collection(value):
            bs = self._batch_size
            if bs and value.batch_size[: len(bs)] != bs:
                if value._is_non_tensor and not value.batch_size and not value._is_lazy:
                    # a batch-less non-tensor entry (one value) is broadcast over the batch, as in tensordict
                    return self._validate(key, value._with_batch_size(bs))
                grown = _grown_to(value, bs)
                if grown is None:
                    raise batch_mismatch_error(key, value, bs)
                value = grown
            if self._device is not None and value.device != self._device:
                value = value.to(self._device)
            if self._names is not None and not value._is_non_tensor:
                names = leading_names(value, self._names, key, force=False)
                if names is not None:  # a shallow copy carries the parent's names (the caller's object is left alone)
                    value = value.copy()
                    value.names = names
            return value
        if isinstance(value, dict):
            return TensorDict(value, self._batch_size, self._device, names=self._names)
        return self._convert(key, value)

    def _convert(self, key: str, value: Any) -> Any:
        """Numbers, numpy arrays and numeric lists become tensors; other non-empty lists a stack of their
        items (:func:`tdict.non_tensor_stack.list_to_stack`); anything else NonTensorData."""
        if isinstance(value, (bool, int, float, complex, list)) or type(value).__module__ == "numpy":
            try:
                tensor = torch.as_tensor(value, device=self._device)
            except (TypeError, ValueError, RuntimeError):
                tensor = None
            if tensor is not None:
                return self._validate(key, tensor)
            if isinstance(value, list) and value:  # a LinkedList (td[key] of a stack) too
                from .non_tensor_stack import list_to_stack

                return self._validate(key, list_to_stack(value, self._device))
        from .non_tensor import NonTensorData

        return NonTensorData(data=value, batch_size=self._batch_size, device=self._device)

    # ------------------------------------------------------------------ primitives
    def _items_raw(self) -> Iterable[tuple[str, Any]]:
        return self._tensordict.items()

    def _get_str(self, key: str, default: Any) -> Any:
        try:
            return self._tensordict[key]
        except KeyError:
            if default is NO_DEFAULT:
                raise self._missing_key_error(key) from None
            return default

    def _get_tuple(self, key: tuple, default: Any) -> Any:
        node = self
        try:
            for part in key:
                # tensor classes / other collections use their primitive (their _tensordict is not a dict)
                node = node._tensordict[part] if type(node) is TensorDict else node._get_str(part, NO_DEFAULT)
        except KeyError:
            if default is NO_DEFAULT:
                raise self._missing_key_error(key) from None
            return default
        except (AttributeError, TypeError):
            return TensorDictBase._get_tuple(self, key, default)
        return node

    def _adopt_child_names(self, value: Any) -> None:
        """After writing the collection ``value`` (callers skip tensors, the hot case): an unnamed
        TensorDict takes a named sub-collection's leading dim names (tensordict's rule; a named
        parent already gave the child its names in :meth:`_validate`)."""
        bs = self._batch_size
        if self._names is not None or not bs or value._is_non_tensor:
            return
        child = value._maybe_names()
        if child is not None and any(name is not None for name in child[: len(bs)]):
            self._names = list(child[: len(bs)])

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool, ignore_lock: bool = False) -> None:
        if not validated:
            value = self._validate(key, value)
        entries = self._tensordict
        if inplace:
            dest = entries.get(key)
            if dest is not None:
                if isinstance(dest, torch.Tensor):
                    if dest.shape != value.shape:
                        raise ShapeMismatchError(
                            f"Failed to update {key!r}: in-place write of shape {list(value.shape)} into an entry "
                            f"of shape {list(dest.shape)}."
                        )
                    dest.copy_(value)
                    return
                if not dest._is_non_tensor:
                    dest.update(value, inplace=True)
                    return
        if self._is_locked and not ignore_lock:
            raise RuntimeError(
                f"{LOCKED}. For in-place modification of key {key!r} use set_() (the key must exist); "
                "to add or replace keys, unlock_() first."
            )
        entries[key] = value
        if not isinstance(value, torch.Tensor):
            self._adopt_child_names(value)

    def _del_str(self, key: str) -> None:
        try:
            del self._tensordict[key]
        except KeyError:
            raise self._missing_key_error(key) from None

    def _map_entries(self, fn: Callable[[Any], Any], batch_size: torch.Size, names: Any = None) -> "TensorDict":
        return TensorDict._new_unsafe({k: fn(v) for k, v in self._tensordict.items()}, batch_size, self._device, names)

    def _map_batch(self, fn: Callable[[Any], Any], batch_size: torch.Size, names: Any = None) -> "TensorDict":
        # ShapeOpsMixin._map_batch, inlined: UnbatchedTensors are kept whole, tagged with the batch size
        plain, unbatched_types = _Tensor, _UNBATCHED
        out = {
            k: fn(v) if type(v) is plain or type(v) not in unbatched_types else v._with_batch_size(batch_size)
            for k, v in self._tensordict.items()
        }
        return TensorDict._new_unsafe(out, batch_size, self._device, names)

    # ------------------------------------------------------------------ hot paths
    def get(self, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
        if type(key) is str:  # _get_str's body, inlined: this is the hottest call of the library
            try:
                return self._tensordict[key]
            except KeyError:
                if default is NO_DEFAULT:
                    raise self._missing_key_error(key) from None
                return default
        if type(key) is tuple and key:  # walk the entry dicts directly; anything unusual takes the general path
            node = self
            try:
                for part in key:
                    node = node._tensordict[part]
            except (KeyError, AttributeError, TypeError):
                pass
            else:  # a payload means the walk went through a tensorclass's TensorDict.__getitem__
                if isinstance(node, torch.Tensor) or is_tensor_collection(node):
                    return node
        return self._get_tuple(_key_to_tuple(key), default)

    def set(self, key: NestedKey, item: Any, inplace: bool = False, *, non_blocking: bool = False) -> "TensorDict":
        if type(key) is str:
            if (
                not inplace
                and not self._is_locked
                and (type(item) is _Tensor or isinstance(item, torch.Tensor) and type(item) not in _UNBATCHED)
            ):  # the common case, inlined
                bs = self._batch_size
                if bs and item.shape[: len(bs)] != bs:
                    raise batch_mismatch_error(key, item, self._batch_size)
                if self._device is not None and item.device != self._device:
                    item = item.to(self._device)
                self._tensordict[key] = item
            else:
                self._set_str(key, item, inplace=inplace, validated=False)
        elif type(key) is tuple and len(key) > 1 and type(key[-1]) is str:
            node = self
            try:  # an existing path of plain TensorDicts: write into the last one directly
                for part in key[:-1]:
                    node = node._tensordict[part]
            except (KeyError, AttributeError, TypeError):
                node = None
            if type(node) is TensorDict:
                node.set(key[-1], item, inplace=inplace)
            else:
                self._set_tuple(_key_to_tuple(key), item, inplace=inplace)
        else:
            self._set_tuple(_key_to_tuple(key), item, inplace=inplace)
        return self

    def _set_tuple(self, key: tuple, item: Any, *, inplace: bool) -> None:
        node = self
        for depth in range(len(key) - 1):  # walk existing plain TensorDicts directly
            child = node._tensordict.get(key[depth])
            if type(child) is not TensorDict:
                TensorDictBase._set_tuple(node, key[depth:], item, inplace=inplace)
                return
            node = child
        node.set(key[-1], item, inplace=inplace)

    def __getitem__(self, index: Any) -> Any:
        if type(index) is str:
            try:
                value = self._tensordict[index]
            except KeyError:
                raise self._missing_key_error(index) from None
            if type(value) is _Tensor:
                return value
            if value.__class__ in NON_TENSOR_CLASSES:
                return value._linked_list() if value._is_lazy else value.data
            return value
        return TensorDictBase.__getitem__(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str:
            self._set_str(index, value, inplace=False, validated=False)
        else:
            TensorDictBase.__setitem__(self, index, value)

    def __contains__(self, key: Any) -> bool:
        if type(key) is str:
            return key in self._tensordict
        return TensorDictBase.__contains__(self, key)

    def keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable | None = None,
        *,
        sort: bool = False,
    ):
        if not include_nested and not leaves_only and not sort:
            return self._tensordict.keys()
        if is_leaf is None or is_leaf is is_leaf_nontensor:  # the fast walk: tensors are leaves, TensorDicts nodes
            return _TensorDictKeysView(self, include_nested, leaves_only, is_leaf, sort)
        return KeysView(self, include_nested, leaves_only, is_leaf, sort)

    def items(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable | None = None,
        *,
        sort: bool = False,
    ):
        """The ``(key, entry)`` pairs, as :meth:`keys` selects them (the entry dict's own view by default)."""
        if not include_nested and not leaves_only and not sort:
            return self._tensordict.items()
        return TensorDictBase.items(self, include_nested, leaves_only, is_leaf, sort=sort)

    def values(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable | None = None,
        *,
        sort: bool = False,
    ):
        """The entries, as :meth:`keys` selects them (the entry dict's own view by default)."""
        if not include_nested and not leaves_only and not sort:
            return self._tensordict.values()
        return TensorDictBase.values(self, include_nested, leaves_only, is_leaf, sort=sort)

    def _index(self, index: Any) -> "TensorDict":
        bs = self._batch_size
        kind = type(index)
        if kind is int:
            if not bs:
                raise BatchIndexError(
                    "Cannot index a TensorDict with an empty batch size: indexing a tensordict with td.batch_dims==0 "
                    "is not permitted (use a key, or unsqueeze it first)."
                )
            if not -bs[0] <= index < bs[0]:
                raise IndexError(f"Index {index} is out of range for batch dim 0 of size {bs[0]}.")
            new_bs = bs[1:]
            names = self._names[1:] if self._names else None
        elif kind is slice:
            if not bs:
                raise BatchIndexError(
                    "Cannot index a TensorDict with an empty batch size: indexing a tensordict with td.batch_dims==0 "
                    "is not permitted (use a key, or unsqueeze it first)."
                )
            new_bs = torch.Size((len(range(*index.indices(bs[0]))),)) + bs[1:]
            names = self._names
        elif (
            kind is torch.Tensor
            and index.dtype is torch.int64
            and index.ndim == 1
            and bs
            and not torch.compiler.is_compiling()
        ):
            # rows by position (a replay buffer's sample): index_select is 2-4x faster than value[index]
            # (eager only: the bounds checks below read values, which a compiled graph must not branch on)
            if index.numel():  # one reduction checks both bounds
                low, high = torch.aminmax(index)
                if low.item() < 0:
                    index = torch.where(index < 0, index + bs[0], index)
                    low, high = torch.aminmax(index)
                if low.item() < 0 or high.item() >= bs[0]:
                    bad = low.item() - bs[0] if low.item() < 0 else high.item()  # as the caller wrote it
                    raise IndexError(f"index {bad} is out of bounds for batch dim 0 of size {bs[0]}.")
            return self._take_rows(index)
        elif (
            kind is torch.Tensor
            and index.dtype is torch.bool
            and index.ndim == 1
            and bs
            and index.shape[0] == bs[0]
            and not torch.compiler.is_compiling()
        ):
            # a mask over the rows: its positions found once, then the rows taken (value[mask] on
            # every leaf would search the mask once per leaf)
            return self._take_rows(index.nonzero().squeeze(-1), new_dim=True)
        else:
            index = _normalize_index(index, bs)
            new_bs = None
            names = None
        out = {}
        first = None
        unbatched = None
        plain, unbatched_types = _Tensor, _UNBATCHED  # locals: the loop below is hot
        for key, value in self._tensordict.items():
            if type(value) is not plain and type(value) in unbatched_types:
                out[key] = value  # kept whole; tagged with the new batch size below
                unbatched = [key] if unbatched is None else unbatched + [key]
                continue
            out[key] = value[index]
            if first is None:
                first = key
        if new_bs is None:
            new_bs = (
                _batch_size_from_entry(self._tensordict[first], out[first], len(bs))
                if first is not None
                else _indexed_batch_size(bs, index)
            )
            if self._names:
                names = indexed_names(self._names, index, len(new_bs))
        if unbatched is not None:
            for key in unbatched:
                out[key] = out[key]._with_batch_size(new_bs)
        return TensorDict._new_unsafe(out, new_bs, self._device, names)

    def _take_rows(self, index: torch.Tensor, new_dim: bool = False) -> "TensorDict":
        """``self[index]`` for a 1-D int64 ``index`` of positions already checked to lie in ``[0, n)``
        (``new_dim``: the positions of a mask, whose result dim is unnamed, as a mask makes a new dim)."""
        out = {}
        new_bs = torch.Size((index.shape[0],)) + self._batch_size[1:]
        for key, value in self._tensordict.items():
            if type(value) is _Tensor or isinstance(value, torch.Tensor) and type(value) not in _UNBATCHED:
                out[key] = value.index_select(0, index if value.device == index.device else index.to(value.device))
            elif type(value) is TensorDict:
                out[key] = value._take_rows(index, new_dim)
            elif type(value) in _UNBATCHED:
                out[key] = cast(Any, value)._with_batch_size(new_bs)
            else:
                out[key] = value[index]
        names = self._names
        if new_dim and names is not None:
            names = [None, *names[1:]] if any(names[1:]) else None
        return TensorDict._new_unsafe(out, new_bs, self._device, names)

    # ------------------------------------------------------------------ whole-collection ops
    def clone(self, recurse: bool = True, *, device: Any = None) -> "TensorDict":
        """A deep copy (``recurse=False``: new structure, shared tensors); ``device``: the copy's device."""
        if not recurse:
            out = self.copy()
        else:
            out = TensorDict._new_unsafe(
                {k: v.clone() for k, v in self._tensordict.items()}, self._batch_size, self._device, self._names
            )
        return out if device is None else out.to(device)

    def copy(self) -> "TensorDict":
        return TensorDict._new_unsafe(
            {k: v if isinstance(v, torch.Tensor) else v.copy() for k, v in self._tensordict.items()},
            self._batch_size,
            self._device,
            self._names,
        )

    @keeps_lock
    def to(self, *args: Any, **kwargs: Any) -> "TensorDictBase":
        """Move to a device and/or cast floating dtypes: ``to(device)``, ``to(dtype)``, ``to(other)``, ``to(batch_size=...)``,
        or each leaf to its own device and dtype: ``to(attrs)`` with ``attrs`` from :meth:`attrs` (:mod:`tdict.attrs`).

        ``inplace=True`` rebinds ``self``'s leaves to the moved ones and returns ``self`` (refused
        on a locked TensorDict); ``non_blocking_pin=True`` pins CPU leaves before a non-blocking
        copy to an accelerator and waits for it; ``num_threads`` is accepted (the copies are
        issued from this thread).
        """
        # td.to(td.attrs()): per-leaf devices and dtypes (a device or dtype, the common case, is checked first)
        if args and type(args[0]) not in _DEVICE_OR_DTYPE and is_tensor_collection(args[0]):
            from .attrs import cast_to_attrs

            return cast_to_attrs(self, args[0], args[1:], kwargs)
        if kwargs:
            inplace = kwargs.pop("inplace", False)
            pin = kwargs.pop("non_blocking_pin", False)
            kwargs.pop("num_threads", None)
            if inplace or pin:
                return self._to_pinned_or_inplace(args, kwargs, inplace, pin)
        device, dtype, non_blocking, batch_size = parse_to_args(args, kwargs)
        result = self
        if batch_size is not None:
            result = self.copy()
            result.batch_size = batch_size
        if device is not None and dtype is None and device == self._device:
            return result
        if device is None and dtype is None:
            return result
        if dtype is None and device is not None and result is self and getattr(self, "_consolidated", None) is not None:
            from .consolidate import _to  # one storage copy instead of one per leaf

            moved = _to(self, device, non_blocking)
            if moved is not None:
                return moved

        new_device = device if device is not None else result._device
        items = result._tensordict.items()
        if dtype is None and not non_blocking:
            entries = {k: v.to(device) for k, v in items}
        else:
            cast = [a for a in (device, dtype) if a is not None]
            entries = {
                k: v.to(device=device, dtype=dtype, non_blocking=non_blocking)
                if isinstance(v, torch.Tensor)
                else v.to(*cast)
                for k, v in items
            }
        return TensorDict._new_unsafe(entries, result._batch_size, new_device, result._names)

    def _to_pinned_or_inplace(self, args: tuple, kwargs: dict, inplace: bool, pin: bool) -> "TensorDictBase":
        device, _dtype, _non_blocking, _bs = parse_to_args(args, dict(kwargs))  # checks the arguments
        if pin and device is not None and device.type != "cpu":
            source = cast(TensorDict, self.apply(lambda v: v.pin_memory() if v.device.type == "cpu" else v))
            moved = source.to(*args, non_blocking=True, **kwargs)
            getattr(torch, device.type).synchronize()
        else:
            moved = self.to(*args, **kwargs)
        if not inplace or moved is self:
            return moved
        if self._is_locked:
            raise RuntimeError(f"{LOCKED}: to(..., inplace=True) would rebind its leaves; unlock_() it first.")
        moved = cast(TensorDict, moved)  # TensorDict.to gives a TensorDict
        self._tensordict = dict(moved._tensordict)
        self._device = moved._device
        self._batch_size = moved._batch_size
        return self

    def update(
        self,
        input_dict_or_td: Any = None,
        clone: bool = False,
        inplace: bool = False,
        *,
        keys_to_update: Sequence | None = None,
        non_blocking: bool = False,
        is_leaf: Callable | None = None,
        update_batch_size: bool = False,
        ignore_lock: bool = False,
        **entries: Any,
    ) -> "TensorDict":
        if entries or input_dict_or_td is None:
            input_dict_or_td = with_entries(input_dict_or_td, entries)
            if input_dict_or_td is None:
                return self
        # the common case (plain TensorDicts, no options) walks the entry dicts directly; anything
        # else, or any problem, takes the general path, which names the offending key
        if not (
            clone
            or inplace
            or update_batch_size
            or keys_to_update is not None
            or type(input_dict_or_td) is not TensorDict
            or input_dict_or_td is self
            or input_dict_or_td._batch_size != self._batch_size
        ):
            writes: list = []
            if _plain_updates(self, input_dict_or_td, writes):
                for dest, key, value in writes:  # all validated: nothing is half-written
                    dest._tensordict[key] = value
                    if not isinstance(value, torch.Tensor):
                        dest._adopt_child_names(value)
                return self
        out = TensorDictBase.update(
            self,
            input_dict_or_td,
            clone=clone,
            inplace=inplace,
            keys_to_update=keys_to_update,
            ignore_lock=ignore_lock,
            update_batch_size=update_batch_size,
        )
        return cast(TensorDict, out)  # the base method returns self

    def select(
        self, *keys: NestedKey, inplace: bool = False, strict: bool = True, as_tensordict: bool = False
    ) -> "TensorDict":
        if inplace:
            return cast(TensorDict, TensorDictBase.select(self, *keys, inplace=inplace, strict=strict))  # self
        src, out, new = self._tensordict, {}, _new_tensordict
        for key in keys:
            if type(key) is str:
                try:
                    out[key] = src[key]
                except KeyError:
                    if strict:
                        raise self._missing_key_error(key) from None
                continue
            if strict and type(key) is tuple:  # the common nested key: str parts through plain TensorDicts
                node, source = out, src
                try:
                    for part in key[:-1]:
                        child = source[part]
                        sub = node.get(part)
                        if type(child) is not TensorDict or sub is child:
                            break  # a tensor class on the way, or the whole sub-collection is selected
                        if sub is None:
                            sub = node[part] = new({}, child._batch_size, child._device, child._names)
                        node, source = sub._tensordict, child._tensordict
                    else:
                        node[key[-1]] = source[key[-1]]
                        continue
                except (LookupError, TypeError):
                    pass  # missing, or not a plain key: the general walk raises the error naming the key
            self._select_path(_key_to_tuple(key), out, strict)
        return new(out, self._batch_size, self._device, self._names)

    def _select_path(self, path: tuple, out: dict, strict: bool) -> None:
        """Copy the entry at ``path`` into ``out`` (the general walk: tensor classes, missing keys)."""
        if self._get_tuple(path, _MISSING) is _MISSING:
            if strict:
                raise self._missing_key_error(path)
            return  # checked first so that no empty parents get created
        node, source = out, self
        for part in path[:-1]:
            source = source._get_str(part, NO_DEFAULT)
            if isinstance(source, torch.Tensor):
                raise self._missing_key_error(path)
            child = node.get(part)
            if child is None:
                if type(source) is TensorDict:
                    child = TensorDict._new_unsafe({}, source._batch_size, source._device, source._names)
                else:
                    child = TensorDict._new_unsafe({}, source.batch_size, source.device, source._maybe_names())
                node[part] = child
            elif child is source:
                return  # the whole sub-collection is already selected
            node = child._tensordict
        node[path[-1]] = source._get_str(path[-1], NO_DEFAULT)

    def exclude(self, *keys: NestedKey, inplace: bool = False) -> "TensorDict":
        if inplace:
            return cast(TensorDict, TensorDictBase.exclude(self, *keys, inplace=inplace))  # self
        drop: set[str] = set()
        nested: dict[str, list] = {}
        for key in keys:
            if type(key) is str:
                drop.add(key)
                continue
            path = _key_to_tuple(key)
            if len(path) == 1:
                drop.add(path[0])
            else:
                nested.setdefault(path[0], []).append(path[1:])
        out = {}
        for k, v in self._tensordict.items():
            if k in drop:
                continue
            if k in nested and not isinstance(v, torch.Tensor) and not v._is_non_tensor:
                v = v.exclude(*nested[k])
            out[k] = v
        return TensorDict._new_unsafe(out, self._batch_size, self._device, self._names)

    def unbind(self, dim: int = 0) -> tuple:
        """The slices along batch dim ``dim``, as a tuple of TensorDicts (their leaves are views)."""
        d = normalize_dim(dim, len(self._batch_size))
        bs = self._batch_size[:d] + self._batch_size[d + 1 :]
        names = self._names[:d] + self._names[d + 1 :] if self._names else None
        n = self._batch_size[d]
        columns = [
            (k, v.unbind(d) if type(v) not in _UNBATCHED else (v._with_batch_size(bs),) * n)
            for k, v in self._tensordict.items()
        ]
        new, device = TensorDict._new_unsafe, self._device
        return tuple(new({k: c[i] for k, c in columns}, bs, device, names) for i in range(self._batch_size[d]))

    def _set_at_index(self, index: Any, value: Any) -> None:
        if type(value) is not TensorDict:
            return TensorDictBase._set_at_index(self, index, value)
        index = _normalize_index(index, self._batch_size) if type(index) not in (int, slice) else index
        dest_bs = _indexed_batch_size(self._batch_size, index)
        pairs: list = []
        _collect_writes(self, value, dest_bs, len(self._batch_size), pairs, ())
        for dest, leaf in pairs:  # every key and shape was checked before the first write
            dest[index] = leaf

    def empty(
        self, recurse: bool = False, *, batch_size: Any = None, device: Any = NO_DEFAULT, names: Any = None
    ) -> "TensorDict":
        if recurse or batch_size is not None or device is not NO_DEFAULT or names is not None:
            out = TensorDictBase.empty(self, recurse, batch_size=batch_size, device=device, names=names)
            return cast(TensorDict, out)  # the base method builds a TensorDict
        return TensorDict._new_unsafe({}, self._batch_size, self._device, self._names)

    def _tensor_leaves(self) -> tuple[list, list]:
        keys, leaves = [], []
        for key, value in self._tensordict.items():
            if isinstance(value, torch.Tensor):
                keys.append(key)
                leaves.append(value)
            elif not value._is_non_tensor:
                sub_keys, sub_leaves = value._tensor_leaves()
                keys.extend((key,) + (k if isinstance(k, tuple) else (k,)) for k in sub_keys)
                leaves.extend(sub_leaves)
        return keys, leaves

    def _binary(self, other: Any, op: Callable, default: Any = NO_DEFAULT) -> Any:
        """Out-of-place ``+ - * / **``, maximum, minimum: one fused ``torch._foreach_*`` call over
        all leaves when both sides are plain TensorDict trees (or ``other`` is a number)."""
        foreach = _FOREACH.get(op) if default is NO_DEFAULT else None
        if foreach is not None:
            leaves: list = []
            if type(other) is TensorDict:
                others: list = []
                if _paired_leaves(self, other, leaves, others):
                    return self._with_leaves(iter(foreach(leaves, others)))
            elif type(other) in (int, float) and _paired_leaves(self, None, leaves, None):
                return self._with_leaves(iter(foreach(leaves, other)))
        return TensorDictBase._binary(self, other, op, default)

    def _with_leaves(self, leaves: Iterator) -> "TensorDict":
        """A TensorDict of the same structure whose tensor leaves come from ``leaves``, in order."""
        out = {
            k: next(leaves) if isinstance(v, torch.Tensor) else v._with_leaves(leaves)
            for k, v in self._tensordict.items()
        }
        return TensorDict._new_unsafe(out, self._batch_size, self._device, self._names)

    # ------------------------------------------------------------------ attributes
    @property
    def batch_size(self) -> torch.Size:
        return self._batch_size

    @batch_size.setter
    def batch_size(self, new: Any) -> None:
        new = parse_batch_size(new)
        problem = self._batch_size_problem(new, ())
        if problem is not None:
            raise ShapeMismatchError(f"Cannot set batch_size {list(new)}: {problem}.")
        self._apply_batch_size(new)

    def _batch_size_problem(self, new: torch.Size, prefix: tuple) -> str | None:
        """Why this TensorDict's entries cannot take batch size ``new`` (``None``: they can). A nested
        TensorDict with fewer batch dims, a prefix of ``new``, is looked into: it takes ``new`` too
        (as in tensordict)."""
        n = len(new)
        for key, value in self._tensordict.items():
            if type(value) in _UNBATCHED or (not isinstance(value, torch.Tensor) and value._is_non_tensor):
                continue
            shape = value.shape if isinstance(value, torch.Tensor) else value.batch_size
            if shape[:n] == new:
                continue
            full = (*prefix, key) if prefix else key
            if type(value) is TensorDict and len(shape) < n and new[: len(shape)] == shape:
                problem = value._batch_size_problem(new, (*prefix, key))
                if problem is None:
                    continue
                return problem
            return incompatible_leaf(full, shape, new)
        return None

    def _apply_batch_size(self, new: torch.Size) -> None:
        """Sets batch size ``new``, checked by :meth:`_batch_size_problem`, here and in the nested
        TensorDicts that grow to it."""
        n = len(new)
        for key, value in list(self._tensordict.items()):
            if type(value) in _UNBATCHED or not isinstance(value, torch.Tensor) and value._is_non_tensor:
                self._tensordict[key] = value._with_batch_size(new)
            elif type(value) is TensorDict and len(value._batch_size) < n:
                value._apply_batch_size(new)
        if self._names is not None and len(self._names) != n:  # the leading dims keep their names
            names = [*self._names[:n], *([None] * (n - len(self._names)))]
            self._names = names if any(name is not None for name in names) else None
        self._batch_size = new

    @property
    def device(self) -> torch.device | None:
        """The device every tensor is moved to on write, or ``None`` (leaves may then be anywhere)."""
        return self._device

    @device.setter
    def device(self, value: Any) -> None:
        raise RuntimeError("device cannot be assigned: use td.to(device) or td.clear_device_().")

    def clear_device_(self) -> "TensorDict":
        """Forget the device (leaves stay where they are); nested collections too."""
        self._device = None
        for value in self._tensordict.values():
            if not isinstance(value, torch.Tensor) and hasattr(value, "clear_device_"):
                value.clear_device_()
        return self

    @property
    def names(self) -> list:
        """The batch dim names, one per dim (``None`` for an unnamed dim); assignable."""
        return list(self._names) if self._names is not None else [None] * len(self._batch_size)

    @names.setter
    def names(self, value: Sequence[str | None] | None) -> None:
        """Name the batch dims; sub-collections get the same names on these dims."""
        value = None if value is None else _parsed_names(value, len(self._batch_size))
        self._names = value
        for key, sub in self._tensordict.items():
            if not isinstance(sub, torch.Tensor) and not sub._is_non_tensor:
                names = leading_names(sub, value, key, force=True)
                if names is not None:
                    sub.names = names

    def _maybe_names(self):
        return self._names

    def __getstate__(self):
        if getattr(self, "_consolidated", None) is not None:
            from .consolidate import _getstate  # one storage + structure

            state = _getstate(self)
            if state is not None:
                return state
        return {
            "source": self._tensordict,
            "batch_size": tuple(self._batch_size),
            "device": self._device,
            "names": self._names,
            "locked": self._is_locked,
        }

    def __setstate__(self, state):
        if "consolidated" in state:
            from .consolidate import _setstate

            _setstate(self, state)
            return
        self._tensordict = state["source"]
        self._batch_size = torch.Size(state["batch_size"])
        self._device = state["device"]
        self._names = state["names"]
        self._is_locked = state["locked"]
        self._lock_ops = None


_FOREACH = {
    operator.add: _VF._foreach_add,
    operator.sub: _VF._foreach_sub,
    operator.mul: _VF._foreach_mul,
    operator.truediv: _VF._foreach_div,
    operator.pow: _VF._foreach_pow,
    torch.maximum: _VF._foreach_maximum,
    torch.minimum: _VF._foreach_minimum,
}


def _paired_leaves(td: "TensorDict", other: "TensorDict | None", leaves: list, others: list | None) -> bool:
    """Collect ``td``'s tensor leaves (and ``other``'s matching ones, same shapes) depth-first;
    False when either tree holds anything but tensors and plain TensorDicts, or their keys differ."""
    if other is not None and len(other._tensordict) != len(td._tensordict):
        return False
    for key, value in td._tensordict.items():
        match = None if other is None else other._tensordict.get(key)
        if isinstance(value, torch.Tensor):
            if other is not None:
                if not isinstance(match, torch.Tensor) or match.shape != value.shape:
                    return False
                assert others is not None  # given together with other
                others.append(match)
            leaves.append(value)
        elif type(value) is not TensorDict or (other is not None and type(match) is not TensorDict):
            return False
        elif not _paired_leaves(value, match, leaves, others):
            return False
    return True


_new_tensordict = TensorDict._new_unsafe  # bound once: select and friends call it per call


class _TensorDictKeysView(KeysView):
    """Keys of a TensorDict tree under the default leaf rule: plain TensorDict nodes are walked
    through their entry dicts; any other entry takes the general rule."""

    __slots__ = ()

    def _collect(self, td: Any, prefix: tuple, out: list) -> list:
        if type(td) is not TensorDict:
            return KeysView._collect(self, td, prefix, out)
        append = out.append
        for key, value in td._tensordict.items():
            kind = type(value)
            if kind is _Tensor:
                append(prefix + (key,) if prefix else key)
            elif kind is TensorDict:
                full = prefix + (key,)
                if not self._leaves_only:
                    append(full if prefix else key)
                if self._include_nested:
                    self._collect(value, full, out)
            else:
                self._collect_entry(key, value, prefix, out)
        return out

    def _count(self, td: Any) -> int:
        if type(td) is not TensorDict:
            return KeysView._count(self, td)
        count = 0
        for value in td._tensordict.values():
            kind = type(value)
            if kind is _Tensor:
                count += 1
            elif kind is TensorDict:
                count += (0 if self._leaves_only else 1) + (self._count(value) if self._include_nested else 0)
            else:
                count += self._count_entry(value)
        return count


def _parsed_names(names: Sequence[str | None], ndim: int) -> list | None:
    names = check_names(names, ndim)
    return names if any(n is not None for n in names) else None


def _plain_updates(dest: "TensorDict", source: "TensorDict", writes: list) -> bool:
    """Collect the validated ``(destination, key, value)`` writes of ``dest.update(source)``; False when
    the general path must decide (a locked level, a value that does not validate)."""
    if dest._is_locked:
        return False
    entries = dest._tensordict
    for key, value in source._tensordict.items():
        current = entries.get(key)
        if type(current) is TensorDict and type(value) is TensorDict:
            if not _plain_updates(current, value, writes):
                return False
            continue
        if (
            current is not None
            and not isinstance(current, torch.Tensor)
            and not current._is_non_tensor
            and is_tensor_collection(value)
        ):
            return False  # merging into a tensor class or a lazy stack
        try:
            writes.append((dest, key, dest._validate(key, value)))
        except (RuntimeError, TypeError, ValueError):
            return False
    return True


def _collect_writes(
    dest: "TensorDict", value: "TensorDict", dest_bs: torch.Size, batch_dims: int, pairs: list, path: tuple
) -> None:
    """Pair every tensor leaf of ``value`` with its destination in ``dest``, checking keys and shapes."""
    for key, leaf in value._tensordict.items():
        target = dest._tensordict.get(key)
        if target is None:
            raise KeyError(f"td[index] = value: key {path + (key,)!r} of the value is absent from the destination.")
        if isinstance(leaf, torch.Tensor):
            if type(target) in _UNBATCHED or type(leaf) in _UNBATCHED:
                continue  # UnbatchedTensors are not written through batch indices
            if not isinstance(target, torch.Tensor):
                raise KeyError(
                    f"td[index] = value: key {path + (key,)!r} is a tensor in the value but not in the destination."
                )
            expected = dest_bs + target.shape[batch_dims:]
            if leaf.shape != expected:
                check_write_shape(path + (key,), leaf.shape, expected, len(dest_bs))
            pairs.append((target, leaf))
        elif type(content_of(leaf)) is TensorDict and type(content_of(target)) is TensorDict:
            # sub-collections, either side possibly a tensor class (written through its TensorDict)
            _collect_writes(content_of(target), content_of(leaf), dest_bs, batch_dims, pairs, path + (key,))
        elif leaf._is_non_tensor and not isinstance(target, torch.Tensor) and target._is_non_tensor:
            from .non_tensor import _non_tensor_write

            pairs.append((_non_tensor_write(dest, key, target, leaf, dest_bs, batch_dims, path + (key,)), leaf))
        elif not leaf._is_non_tensor:
            raise KeyError(
                f"td[index] = value: key {path + (key,)!r} cannot be written through (unsupported nested type {type(target).__name__})."
            )


def _grown_to(value: Any, batch_size: torch.Size) -> Any:
    """``value`` (a collection with fewer batch dims, leading ``batch_size``) given the parent's
    ``batch_size`` in place, as tensordict does when such an entry is set, so that the stored entry is
    the caller's object; ``None`` when its dims do not lead ``batch_size`` or a leaf does not fit."""
    own = value.batch_size
    if value._is_non_tensor or len(own) >= len(batch_size) or batch_size[: len(own)] != own:
        return None
    try:
        value.batch_size = batch_size
    except (RuntimeError, ValueError):
        return None
    return value


def _as_nested(d: Any) -> Any:
    """Nested plain dicts become TensorDicts with an empty batch size (to be inferred later)."""
    if isinstance(d, dict):
        return {k: TensorDict(_as_nested(v)) if isinstance(v, dict) else v for k, v in d.items()}
    return d


from ._core import functional as _functional  # noqa: E402, F401  (functional parameters: module <-> TensorDict)

TensorDict.from_module = staticmethod(_functional.from_module)
TensorDict.from_modules = staticmethod(_functional.from_modules)
TensorDictBase.to_module = _functional.to_module
