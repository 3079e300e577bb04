"""TensorDictBase: the API every tensor collection shares.

Concrete classes (:class:`~tdict.TensorDict`, :class:`~tdict.LazyStackedTensorDict`,
:class:`~tdict.NonTensorData`) implement a handful of primitives (``_items_raw``,
``_get_str``, ``_set_str``, ``_del_str``, ``_index``, ``_map_entries``, ``batch_size``,
``device``, ``names``); everything here is written in terms of them.
"""
from __future__ import annotations

import enum
from typing import Any, Callable, Iterator, Sequence

import torch

from ._arithmetic import ArithmeticMixin
from ._keys import KeysView, default_is_leaf
from ._shape_ops import ShapeOpsMixin
from ._utils import NO_DEFAULT, NestedKey, _key_to_tuple, parse_device, unravel_key

# torch functions handled through ``__torch_function__``; filled by ``_torch_function``.
TD_HANDLED_FUNCTIONS: dict[Callable, Callable] = {}
# Classes whose ``td[key]`` returns the wrapped Python object; registered by ``non_tensor``.
NON_TENSOR_CLASSES: set[type] = set()


def is_tensor_collection(obj: Any) -> bool:
    """True for TensorDicts, lazy stacks, tensorclasses and non-tensor data."""
    return getattr(type(obj), "_is_tensor_collection", False)


def _is_leaf_value(value: Any) -> bool:
    return isinstance(value, torch.Tensor) or type(value)._is_non_tensor


class TensorDictBase(ArithmeticMixin, ShapeOpsMixin):
    """Abstract base of all tensor collections. See :class:`tdict.TensorDict`."""

    __slots__ = ()
    _is_tensor_collection = True
    _is_non_tensor = False
    _is_lazy = False

    # ------------------------------------------------------------------ primitives
    def _items_raw(self) -> Iterator[tuple[str, Any]]:
        raise NotImplementedError

    def _get_str(self, key: str, default: Any) -> Any:
        raise NotImplementedError

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool, ignore_lock: bool = False) -> None:
        raise NotImplementedError

    def _del_str(self, key: str) -> None:
        raise NotImplementedError

    def _index(self, index: Any) -> "TensorDictBase":
        raise NotImplementedError

    def _map_entries(self, fn: Callable[[Any], Any], batch_size: torch.Size, names: Any = None) -> "TensorDictBase":
        """A new collection whose entries are ``fn(entry)`` (entries are tensors or collections)."""
        raise NotImplementedError

    @property
    def batch_size(self) -> torch.Size:
        raise NotImplementedError

    # ------------------------------------------------------------------ shape info
    @property
    def shape(self) -> torch.Size:
        return self.batch_size

    @property
    def batch_dims(self) -> int:
        return len(self.batch_size)

    @property
    def ndim(self) -> int:
        return len(self.batch_size)

    def ndimension(self) -> int:
        return len(self.batch_size)

    def dim(self) -> int:
        return len(self.batch_size)

    def size(self, dim: int | None = None) -> torch.Size | int:
        return self.batch_size if dim is None else self.batch_size[dim]

    def numel(self) -> int:
        return self.batch_size.numel()

    def __len__(self) -> int:
        return self.batch_size[0] if self.batch_size else 0

    def __bool__(self) -> bool:
        raise RuntimeError("Converting a tensor collection to bool is ambiguous: use .all() or .any().")

    def __iter__(self) -> Iterator["TensorDictBase"]:
        if not self.batch_size:
            raise StopIteration
        for i in range(self.batch_size[0]):
            yield self._index(i)

    @property
    def is_locked(self) -> bool:
        return self._is_locked

    # ------------------------------------------------------------------ getting
    def _get_tuple(self, key: tuple, default: Any) -> Any:
        value = self
        for i, part in enumerate(key):
            if isinstance(value, torch.Tensor) or not is_tensor_collection(value) or value._is_non_tensor:
                raise KeyError(
                    f"Key {key!r}: {key[:i]!r} is a leaf ({type(value).__name__}), it has no sub-key {part!r}."
                )
            value = value._get_str(part, NO_DEFAULT if default is NO_DEFAULT else _MISSING)
            if value is _MISSING:
                return default
        return value

    def get(self, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
        """The entry at ``key``; raises ``KeyError`` listing the existing keys when absent and no default."""
        if type(key) is str:
            return self._get_str(key, default)
        return self._get_tuple(_key_to_tuple(key), default)

    def _missing_key_error(self, key: Any) -> KeyError:
        keys = list(self.keys(include_nested=True))
        return KeyError(f"Key {key!r} not found. Existing keys: {keys}.")

    def get_non_tensor(self, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
        """The Python object stored under ``key`` (the payload of a NonTensorData)."""
        value = self.get(key, default)
        if is_tensor_collection(value) and value._is_non_tensor:
            return value.tolist() if value._is_lazy else value.data
        return value

    def __getitem__(self, index: Any) -> Any:
        if type(index) is str:
            value = self._get_str(index, NO_DEFAULT)
        elif isinstance(index, tuple) and index and isinstance(index[0], (str, tuple)) and _is_key_tuple(index):
            value = self._get_tuple(_key_to_tuple(index), NO_DEFAULT)
        else:
            return self._index(index)
        if type(value)._is_non_tensor if not isinstance(value, torch.Tensor) else False:
            return value.tolist() if value._is_lazy else value.data
        return value

    def __contains__(self, key: Any) -> bool:
        if type(key) is str:
            return self._get_str(key, _MISSING) is not _MISSING
        if isinstance(key, tuple):
            try:
                return self._get_tuple(_key_to_tuple(key), _MISSING) is not _MISSING
            except KeyError:
                return False
        raise TypeError(f"'in' expects a key (str or tuple of str), got {type(key).__name__}.")

    # ------------------------------------------------------------------ setting
    def set(self, key: NestedKey, item: Any, inplace: bool = False, *, non_blocking: bool = False, **kwargs) -> "TensorDictBase":
        """Write ``item`` under ``key`` (nested keys create sub-collections); returns ``self``."""
        if type(key) is str:
            self._set_str(key, item, inplace=inplace, validated=False)
        else:
            self._set_tuple(_key_to_tuple(key), item, inplace=inplace)
        return self

    def _set_tuple(self, key: tuple, item: Any, *, inplace: bool) -> None:
        if len(key) == 1:
            self._set_str(key[0], item, inplace=inplace, validated=False)
            return
        sub = self._get_str(key[0], None)
        if sub is None:
            if self._is_locked:
                raise RuntimeError(f"Cannot add key {key!r}: the collection is locked.")
            sub = self.empty()
            sub._set_tuple(key[1:], item, inplace=inplace)
            self._set_str(key[0], sub, inplace=False, validated=True)
            return
        if isinstance(sub, torch.Tensor) or sub._is_non_tensor:
            raise KeyError(f"Cannot set {key!r}: {key[0]!r} holds a leaf ({type(sub).__name__}), not a collection.")
        sub._set_tuple(key[1:], item, inplace=inplace)

    def set_(self, key: NestedKey, item: Any) -> "TensorDictBase":
        """Copy ``item`` into the existing entry ``key`` in place (raises if absent)."""
        key = unravel_key(key)
        target = self.get(key)
        if isinstance(target, torch.Tensor):
            item = self._to_leaf(item, key)
            if item.shape != target.shape:
                raise RuntimeError(f"set_({key!r}): shape {tuple(item.shape)} does not match the existing {tuple(target.shape)}.")
            target.copy_(item)
        else:
            target.update_(item if is_tensor_collection(item) or target._is_non_tensor else self._to_leaf(item, key))
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str or (isinstance(index, tuple) and index and isinstance(index[0], (str, tuple)) and _is_key_tuple(index)):
            self.set(index, value)
            return
        self._set_at_index(index, value)

    def _set_at_index(self, index: Any, value: Any) -> None:
        """``td[index] = value``: write ``value`` into every leaf at ``index``, in place.

        All keys and shapes are checked before the first write.
        """
        non_tensor_pairs = []
        if not is_tensor_collection(value):
            pairs = [(key, value) for key, leaf in self.items(True, True) if isinstance(leaf, torch.Tensor)]
        else:
            dest_bs = _indexed_batch_size(self.batch_size, index)
            pairs = []
            for key, leaf in value.items(True, True):
                if not isinstance(leaf, torch.Tensor):
                    target = self.get(key, None)
                    if leaf._is_non_tensor and target is not None and not isinstance(target, torch.Tensor) and target._is_non_tensor:
                        non_tensor_pairs.append((key, target, leaf))
                    continue
                target = self.get(key, None)
                if not isinstance(target, torch.Tensor):
                    raise KeyError(f"td[index] = value: key {key!r} of the value is not a tensor leaf of the destination.")
                expected = dest_bs + target.shape[self.batch_dims :]
                try:
                    torch.broadcast_shapes(leaf.shape, expected)
                except RuntimeError:
                    raise RuntimeError(
                        f"td[index] = value: key {key!r} has shape {tuple(leaf.shape)}, expected one broadcastable to {tuple(expected)}."
                    ) from None
                pairs.append((key, leaf))
        full_index = _expand_index(index, self.batch_dims)
        if non_tensor_pairs:  # copy-on-write leaves, computed (and checked) before any write
            non_tensor_pairs = [(key, target._set_at(full_index, leaf)) for key, target, leaf in non_tensor_pairs]
        for key, leaf in pairs:
            self.get(key)[full_index] = leaf
        for key, new in non_tensor_pairs:
            parent = self if isinstance(key, str) else self._get_tuple(key[:-1], NO_DEFAULT)
            parent._set_str(key if isinstance(key, str) else key[-1], new, inplace=False, validated=True, ignore_lock=True)

    def setdefault(self, key: NestedKey, default: Any) -> Any:
        """``get(key)`` if present, else ``set(key, default)`` and return it."""
        if key not in self:
            self.set(key, default)
        return self.get(key)

    # ------------------------------------------------------------------ deleting
    def __delitem__(self, key: NestedKey) -> None:
        self.del_(key)

    def del_(self, key: NestedKey) -> "TensorDictBase":
        if self._is_locked:
            raise RuntimeError(f"Cannot delete key {key!r}: the collection is locked.")
        key = unravel_key(key)
        if isinstance(key, str):
            self._del_str(key)
        else:
            parent = self._get_tuple(key[:-1], NO_DEFAULT)
            parent.del_(key[-1])
        return self

    def pop(self, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
        """Remove ``key`` and return its entry (or ``default`` when absent)."""
        value = self.get(key, _MISSING if default is not NO_DEFAULT else NO_DEFAULT)
        if value is _MISSING:
            return default
        self.del_(key)
        return value

    # ------------------------------------------------------------------ keys
    def keys(self, include_nested: bool = False, leaves_only: bool = False, is_leaf: Callable | None = None, *, sort: bool = False):
        """Keys of the collection; nested keys come out as tuples when ``include_nested``."""
        return KeysView(self, include_nested, leaves_only, is_leaf, sort)

    def values(self, include_nested: bool = False, leaves_only: bool = False, is_leaf: Callable | None = None, *, sort: bool = False):
        for key in self.keys(include_nested, leaves_only, is_leaf, sort=sort):
            yield self.get(key)

    def items(self, include_nested: bool = False, leaves_only: bool = False, is_leaf: Callable | None = None, *, sort: bool = False):
        for key in self.keys(include_nested, leaves_only, is_leaf, sort=sort):
            yield key, self.get(key)

    def is_empty(self) -> bool:
        """True when no leaf exists (empty sub-collections don't count)."""
        for _ in self.keys(True, True):
            return False
        return True

    def empty(self, recurse: bool = False, *, batch_size: Any = None, device: Any = NO_DEFAULT, names: Any = None) -> "TensorDictBase":
        """A collection with no leaves, the same batch size and device (keeps sub-structure if ``recurse``)."""
        from .tensordict import TensorDict

        out = TensorDict(
            batch_size=self.batch_size if batch_size is None else batch_size,
            device=self.device if device is NO_DEFAULT else device,
            names=self._maybe_names() if batch_size is None and names is None else names,
        )
        if recurse:
            for key, value in self._items_raw():
                if not isinstance(value, torch.Tensor) and not value._is_non_tensor:
                    out._set_str(key, value.empty(recurse=True), inplace=False, validated=True)
        return out

    def select(self, *keys: NestedKey, inplace: bool = False, strict: bool = True) -> "TensorDictBase":
        """A collection with only ``keys`` (nested keys keep their parents)."""
        out = self if inplace else self.empty()
        picked = []
        for key in keys:
            key = unravel_key(key)
            value = self.get(key, _MISSING)
            if value is _MISSING:
                if strict:
                    raise self._missing_key_error(key)
                continue
            picked.append((key, value))
        if inplace:
            keep = {k if isinstance(k, str) else k[0] for k, _ in picked}
            for key in [k for k, _ in self._items_raw() if k not in keep]:
                self._del_str(key)
            for key, _ in picked:
                if isinstance(key, tuple):
                    sub = self._get_str(key[0], None)
                    sub.select(key[1:], inplace=True)
            return self
        for key, value in picked:
            out.set(key, value)
        return out

    def exclude(self, *keys: NestedKey, inplace: bool = False) -> "TensorDictBase":
        """A collection without ``keys`` (missing keys are ignored)."""
        out = self if inplace else self.copy()
        for key in keys:
            key = unravel_key(key)
            if isinstance(key, str):
                if out._get_str(key, _MISSING) is not _MISSING:
                    out._del_str(key)
            else:
                parent = out._get_tuple(key[:-1], None) if len(key) > 1 else out
                if parent is None or isinstance(parent, torch.Tensor) or parent._get_str(key[-1], _MISSING) is _MISSING:
                    continue
                if not inplace:  # copy the path so the original is untouched
                    node = out
                    for part in key[:-1]:
                        child = node._get_str(part, None).copy()
                        node._set_str(part, child, inplace=False, validated=True, ignore_lock=True)
                        node = child
                    parent = node
                parent._del_str(key[-1])
        return out

    def split_keys(self, *key_sets: Sequence[NestedKey], inplace: bool = False, default: Any = NO_DEFAULT, strict: bool = True, reproduce_struct: bool = False):
        """Split into one collection per key set, plus one with the remaining keys."""
        outs = [self.select(*ks, strict=strict and default is NO_DEFAULT) for ks in key_sets]
        if default is not NO_DEFAULT:
            for ks, out in zip(key_sets, outs):
                for k in ks:
                    if k not in out:
                        out.set(k, default)
        used = [unravel_key(k) for ks in key_sets for k in ks]
        rest = self.exclude(*used, inplace=inplace)
        return (*outs, rest)

    def rename_key_(self, old_key: NestedKey, new_key: NestedKey, safe: bool = False) -> "TensorDictBase":
        """Move ``old_key`` to ``new_key`` in place (``safe`` refuses to overwrite)."""
        old_key, new_key = unravel_key(old_key), unravel_key(new_key)
        if safe and new_key in self:
            raise KeyError(f"rename_key_: {new_key!r} already exists and safe=True.")
        value = self.get(old_key)
        self.del_(old_key)
        self.set(new_key, value)
        return self

    def flatten_keys(self, separator: str = ".", inplace: bool = False, is_leaf: Callable | None = None) -> "TensorDictBase":
        """Turn nested keys into flat ``"a.b"`` keys."""
        out = self.empty()
        for key, value in self.items(True, True, is_leaf):
            name = key if isinstance(key, str) else separator.join(key)
            if name in out:
                raise KeyError(f"flatten_keys: flattened key {name!r} collides with an existing key.")
            out._set_str(name, value, inplace=False, validated=True)
        if inplace:
            for key in [k for k, _ in self._items_raw()]:
                self._del_str(key)
            self.update(out)
            return self
        return out

    def unflatten_keys(self, separator: str = ".", inplace: bool = False) -> "TensorDictBase":
        """Inverse of :meth:`flatten_keys`."""
        out = self.empty()
        for key, value in self._items_raw():
            out.set(tuple(key.split(separator)), value)
        if inplace:
            for key in [k for k, _ in self._items_raw()]:
                self._del_str(key)
            self.update(out)
            return self
        return out

    # ------------------------------------------------------------------ update
    def update(self, input_dict_or_td: Any, clone: bool = False, inplace: bool = False, *, keys_to_update: Sequence | None = None, non_blocking: bool = False, is_leaf: Callable | None = None, update_batch_size: bool = False, ignore_lock: bool = False) -> "TensorDictBase":
        """Write every entry of ``input_dict_or_td`` into ``self`` (recursively merging sub-collections)."""
        if input_dict_or_td is self:
            return self
        allowed = None if keys_to_update is None else {unravel_key(k) for k in keys_to_update}
        items = input_dict_or_td._items_raw() if is_tensor_collection(input_dict_or_td) else input_dict_or_td.items()
        for key, value in items:
            if not isinstance(key, str):
                if allowed is not None and unravel_key(key) not in allowed:
                    continue
                self.set(key, value.clone() if clone else value, inplace=inplace)
                continue
            if allowed is not None and key not in allowed and not any(isinstance(a, tuple) and a[0] == key for a in allowed):
                continue
            if clone:
                value = value.clone()
            dest = self._get_str(key, None)
            if dest is not None and not isinstance(dest, torch.Tensor) and not dest._is_non_tensor and (is_tensor_collection(value) or isinstance(value, dict)) and not (is_tensor_collection(value) and value._is_non_tensor):
                sub_allowed = None if allowed is None else [a[1:] for a in allowed if isinstance(a, tuple) and a[0] == key] or None
                if allowed is not None and key in allowed:
                    sub_allowed = None
                dest.update(value, inplace=inplace, keys_to_update=sub_allowed, ignore_lock=ignore_lock)
            else:
                self._set_str(key, value, inplace=inplace and dest is not None, validated=False, ignore_lock=ignore_lock)
        return self

    def update_(self, input_dict_or_td: Any, clone: bool = False, *, keys_to_update: Sequence | None = None) -> "TensorDictBase":
        """Like :meth:`update` but every key must exist and values are copied in place."""
        items = input_dict_or_td.items(True, True) if is_tensor_collection(input_dict_or_td) else _flat_dict_items(input_dict_or_td)
        pairs = []
        for key, value in items:
            if keys_to_update is not None and unravel_key(key) not in {unravel_key(k) for k in keys_to_update}:
                continue
            dest = self.get(key, _MISSING)
            if dest is _MISSING:
                raise self._missing_key_error(key)
            pairs.append((dest, value))
        for dest, value in pairs:
            if isinstance(dest, torch.Tensor):
                dest.copy_(value)
        return self

    def update_at_(self, input_dict_or_td: Any, index: Any) -> "TensorDictBase":
        """Write ``input_dict_or_td`` into ``self[index]`` in place."""
        self._set_at_index(index, input_dict_or_td if is_tensor_collection(input_dict_or_td) else self._from_dict_like(input_dict_or_td, index))
        return self

    def _from_dict_like(self, data: dict, index: Any) -> "TensorDictBase":
        from .tensordict import TensorDict

        return TensorDict(data, batch_size=self._index(index).batch_size)

    # ------------------------------------------------------------------ apply family
    def apply(self, fn: Callable, *others: "TensorDictBase", batch_size: Sequence[int] | None = None, device: Any = NO_DEFAULT, names: Any = NO_DEFAULT, inplace: bool = False, default: Any = NO_DEFAULT, filter_empty: bool | None = None, call_on_nested: bool = False, **constructor_kwargs) -> "TensorDictBase | None":
        """Apply ``fn`` to every leaf (and the matching leaves of ``others``).

        Returning ``None`` from ``fn`` drops the key; sub-collections left empty are dropped
        when ``filter_empty`` is true. ``inplace`` writes the results into ``self``.

        Example:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.zeros(3), batch_size=[3])
            >>> td.apply(lambda x: x + 1)["a"]
            tensor([1., 1., 1.])
        """
        return self._apply(fn, others, None, (), batch_size, device, names, inplace, default, filter_empty, call_on_nested, constructor_kwargs)

    def named_apply(self, fn: Callable, *others: "TensorDictBase", nested_keys: bool = False, batch_size: Sequence[int] | None = None, device: Any = NO_DEFAULT, names: Any = NO_DEFAULT, inplace: bool = False, default: Any = NO_DEFAULT, filter_empty: bool | None = None, call_on_nested: bool = False, **constructor_kwargs) -> "TensorDictBase | None":
        """Like :meth:`apply`, with the key passed first: ``fn(key, leaf, *other_leaves)``."""
        return self._apply(fn, others, bool(nested_keys), (), batch_size, device, names, inplace, default, filter_empty, call_on_nested, constructor_kwargs)

    def apply_(self, fn: Callable, *others: "TensorDictBase", **kwargs) -> "TensorDictBase":
        """In-place :meth:`apply`: leaves are replaced (or copied into) by ``fn``'s result."""
        return self._apply(fn, others, None, (), None, NO_DEFAULT, NO_DEFAULT, True, kwargs.get("default", NO_DEFAULT), None, False, {})

    def _apply(self, fn, others, named, path, batch_size, device, names, inplace, default, filter_empty, call_on_nested, constructor_kwargs):
        # named: None for apply, False/True for named_apply (own key / full nested key); path: keys above self.
        from .tensordict import TensorDict

        out_bs = self.batch_size if batch_size is None else torch.Size(batch_size)
        if names is NO_DEFAULT:
            names = self._maybe_names() if batch_size is None else None
        out_device = self.device if device is NO_DEFAULT else parse_device(device)
        result = {}
        had_entries = False
        for key, value in self._items_raw():
            had_entries = True
            other_values = []
            for other in others:
                other_value = other._get_str(key, _MISSING)
                if other_value is _MISSING:
                    if default is NO_DEFAULT:
                        raise KeyError(f"apply: key {path + (key,)!r} is missing from one of the other collections (pass default= to fill it).")
                    other_value = default
                other_values.append(other_value)
            if isinstance(value, torch.Tensor) or call_on_nested:
                if named is None:
                    new = fn(value, *other_values)
                else:
                    new = fn(unravel_key(path + (key,)) if named else key, value, *other_values)
                if new is not None:
                    result[key] = new
            elif value._is_non_tensor:
                result[key] = value if batch_size is None else value._with_batch_size(out_bs)
            else:
                new = value._apply(fn, other_values, named, path + (key,), batch_size, device, NO_DEFAULT, inplace, default, filter_empty, call_on_nested, constructor_kwargs)
                if new is not None and not (filter_empty and new.is_empty()):
                    result[key] = new
        if inplace:
            for key, new in result.items():
                dest = self._get_str(key, None)
                if dest is new:
                    continue
                if isinstance(dest, torch.Tensor) and isinstance(new, torch.Tensor) and dest.shape == new.shape and dest.dtype == new.dtype and dest.device == new.device:
                    dest.copy_(new)
                else:
                    self._set_str(key, new, inplace=False, validated=False, ignore_lock=True)
            return self
        if had_entries and not result and filter_empty is not False:
            return None
        if batch_size is None and not constructor_kwargs:
            return TensorDict._new_unsafe(result, out_bs, out_device, names)
        return TensorDict(result, batch_size=out_bs, device=out_device, names=names, **constructor_kwargs)

    def map(self, fn: Callable, dim: int = 0, num_workers: int | None = None, *, chunksize: int | None = None, num_chunks: int | None = None, pool: Any = None, mp_start_method: str | None = None, **kwargs: Any) -> "TensorDictBase":
        """Apply ``fn`` to chunks of ``self`` along ``dim`` in a process pool and concatenate the results.

        ``fn`` must be picklable (a module-level function) and return a collection, a tensor or
        ``None``. ``kwargs``: ``out``, ``generator``, ``max_tasks_per_child``, ``worker_threads``,
        ``timeout`` (see :func:`tdict._map.map_chunks`).
        """
        from ._map import map_chunks

        return map_chunks(self, fn, dim=dim, num_workers=num_workers, chunksize=chunksize, num_chunks=num_chunks, pool=pool, mp_start_method=mp_start_method, **kwargs)

    # ------------------------------------------------------------------ copies, dtype, device
    def clone(self, recurse: bool = True, **kwargs) -> "TensorDictBase":
        """A copy; ``recurse=False`` copies the structure but shares the tensors."""
        if not recurse:
            return self.copy()
        return self._map_entries(lambda v: v.clone(), self.batch_size, self._maybe_names())

    def copy(self) -> "TensorDictBase":
        """A shallow copy: new structure, same tensors."""
        return self._map_entries(lambda v: v if isinstance(v, torch.Tensor) else v.copy(), self.batch_size, self._maybe_names())

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.clone()

    def copy_(self, other: "TensorDictBase", non_blocking: bool = False) -> "TensorDictBase":
        """Copy ``other``'s leaves into ``self`` in place."""
        return self.update_(other)

    def zero_(self) -> "TensorDictBase":
        for value in self.values(True, True):
            if isinstance(value, torch.Tensor):
                value.zero_()
        return self

    def fill_(self, key: NestedKey, value: float | bool) -> "TensorDictBase":
        """Fill the entry ``key`` (a tensor or a whole sub-collection) with ``value``."""
        target = self.get(key)
        if isinstance(target, torch.Tensor):
            target.fill_(value)
        else:
            for leaf in target.values(True, True):
                if isinstance(leaf, torch.Tensor):
                    leaf.fill_(value)
        return self

    def detach(self) -> "TensorDictBase":
        return self._map_entries(lambda v: v.detach(), self.batch_size, self._maybe_names())

    def detach_(self) -> "TensorDictBase":
        for value in self.values(True, True):
            if isinstance(value, torch.Tensor):
                value.detach_()
        return self

    def requires_grad_(self, requires_grad: bool = True) -> "TensorDictBase":
        for value in self.values(True, True):
            if isinstance(value, torch.Tensor):
                value.requires_grad_(requires_grad)
        return self

    @property
    def requires_grad(self) -> bool:
        return any(v.requires_grad for v in self.values(True, True) if isinstance(v, torch.Tensor))

    def float(self):
        return self.to(torch.float32)

    def double(self):
        return self.to(torch.float64)

    def half(self):
        return self.to(torch.float16)

    def bfloat16(self):
        return self.to(torch.bfloat16)

    def int(self):
        return self.to(torch.int32)

    def long(self):
        return self.to(torch.int64)

    def bool(self):
        return self.to(torch.bool)

    def cpu(self, **kwargs):
        return self.to("cpu", **kwargs)

    def cuda(self, device: Any = None, **kwargs):
        return self.to(torch.device("cuda") if device is None else parse_device(device), **kwargs)

    def pin_memory(self, num_threads: int | None = None, inplace: bool = False) -> "TensorDictBase":
        if inplace:
            for key, value in list(self.items(True, True)):
                if isinstance(value, torch.Tensor):
                    self.set(key, value.pin_memory())
            return self
        return self._map_entries(lambda v: v.pin_memory(), self.batch_size, self._maybe_names())

    def is_shared(self) -> bool:
        leaves = self._tensor_leaves()[1]  # member leaves of lazy stacks: nothing is stacked
        return bool(leaves) and all(v.is_shared() or v.is_cuda for v in leaves)

    def share_memory_(self) -> "TensorDictBase":
        """Move every leaf to shared memory (visible across processes) and lock the structure."""
        for value in self.values(True, True):
            if isinstance(value, torch.Tensor):
                value.share_memory_()
        return self.lock_()

    def to_dict(self, *, retain_none: bool = True, convert_tensors: bool = False) -> dict:
        """A nested dict of the leaves (``convert_tensors`` turns them into Python lists)."""
        out = {}
        for key, value in self._items_raw():
            if isinstance(value, torch.Tensor):
                out[key] = value.tolist() if convert_tensors else value
            elif value._is_non_tensor:
                out[key] = value.tolist() if value._is_lazy else value.data
            else:
                out[key] = value.to_dict(convert_tensors=convert_tensors)
        return out

    def tolist(self) -> list:
        """The batch as nested Python lists of dicts."""
        if not self.batch_size:
            return self.to_dict(convert_tensors=True)
        return [sub.tolist() for sub in self]

    def numpy(self) -> dict:
        """A nested dict of numpy arrays (non-tensor entries keep their Python objects)."""
        return _numpy_tree(self.to_dict())

    # ------------------------------------------------------------------ locking
    def lock_(self) -> "TensorDictBase":
        """Forbid adding or removing keys (recursively); usable as a context manager."""
        self._set_lock(True)
        self._push_op(True)
        return self

    def unlock_(self) -> "TensorDictBase":
        """Allow adding and removing keys again; as a context manager, relocks on exit."""
        self._set_lock(False)
        self._push_op(False)
        return self

    def _set_lock(self, locked: bool) -> None:
        self._is_locked = locked
        for _, value in self._items_raw():
            if not isinstance(value, torch.Tensor):
                value._set_lock(locked)

    def _push_op(self, locked: bool) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        last = self._pop_op()
        if last is not None:
            self._set_lock(not last)
        return False

    def _pop_op(self):
        return None

    # ------------------------------------------------------------------ names
    def _maybe_names(self):
        return None

    def refine_names(self, *names: str | None) -> "TensorDictBase":
        """Set names on unnamed dims (``...`` keeps the leading ones as they are)."""
        current = list(self.names)
        if names and names[0] is Ellipsis:
            names = current[: self.batch_dims - len(names) + 1] + list(names[1:])
        names = list(names)
        if len(names) != self.batch_dims:
            raise ValueError(f"refine_names: expected {self.batch_dims} names, got {len(names)}.")
        for i, (old, new) in enumerate(zip(current, names)):
            if old is not None and new is not None and old != new:
                raise RuntimeError(f"refine_names: dim {i} is already named {old!r}, cannot rename to {new!r}.")
            if new is None:
                names[i] = old
        self.names = names
        return self

    def rename(self, *names: str | None, **rename_map: str) -> "TensorDictBase":
        """A shallow copy with new dim names (positional) or renamed dims (keyword)."""
        out = self.copy()
        out.rename_(*names, **rename_map)
        return out

    def rename_(self, *names: str | None, **rename_map: str) -> "TensorDictBase":
        if names:
            self.names = list(names)
        if rename_map:
            current = list(self.names)
            for old, new in rename_map.items():
                if old not in current:
                    raise ValueError(f"rename_: no dim named {old!r}; dims are {current}.")
                current[current.index(old)] = new
            self.names = current
        return self

    # ------------------------------------------------------------------ misc
    def _to_leaf(self, value: Any, key: Any) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return value
        try:
            return torch.as_tensor(value, device=self.device)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"Key {key!r}: cannot convert {type(value).__name__} to a tensor.") from err

    def state_dict(self, destination: dict | None = None, prefix: str = "", keep_vars: bool = False, flatten: bool = False) -> dict:
        """A plain dict (nested, or flat with ``"."`` keys) of the leaves plus ``__batch_size`` / ``__device``."""
        from .persistence import state_dict

        return state_dict(self, destination=destination, prefix=prefix, keep_vars=keep_vars, flatten=flatten)

    def load_state_dict(self, state_dict: dict, strict: bool = True, assign: bool = False, from_flatten: bool = False) -> "TensorDictBase":
        from .persistence import load_state_dict

        return load_state_dict(self, state_dict, strict=strict, assign=assign, from_flatten=from_flatten)

    def memmap_(self, prefix: Any = None, copy_existing: bool = False, *, num_threads: int = 0, existsok: bool = True, robust_key: bool | None = None, share_non_tensor: bool = False, fsync: bool = False) -> "TensorDictBase":
        """Write every leaf to memory-mapped files under ``prefix`` (crash-safe) and point the leaves at them."""
        from .persistence import memmap_

        return memmap_(self, prefix, copy_existing=copy_existing, existsok=existsok, inplace=True, fsync=fsync)

    def memmap(self, prefix: Any = None, copy_existing: bool = False, *, num_threads: int = 0, existsok: bool = True, fsync: bool = False, **kwargs) -> "TensorDictBase":
        """Like :meth:`memmap_` but returns a new collection and leaves ``self`` untouched."""
        from .persistence import memmap_

        return memmap_(self, prefix, copy_existing=copy_existing, existsok=existsok, inplace=False, fsync=fsync)

    def memmap_like(self, prefix: Any = None, copy_existing: bool = False, *, existsok: bool = True, num_threads: int = 0) -> "TensorDictBase":
        """A memory-mapped collection with the same structure, shapes and dtypes, contents uninitialised."""
        from .persistence import memmap_like

        return memmap_like(self, prefix, existsok=existsok)

    def save(self, prefix: Any = None, copy_existing: bool = False, *, num_threads: int = 0, existsok: bool = True, fsync: bool = False, **kwargs) -> "TensorDictBase":
        """Save to ``prefix`` (memmap layout, JSON metadata); returns ``self``."""
        self.memmap(prefix, copy_existing=copy_existing, existsok=existsok, fsync=fsync)
        return self

    dumps = save

    @classmethod
    def load_memmap(cls, prefix: Any, device: Any = None, non_blocking: bool = False, *, out: Any = None) -> "TensorDictBase":
        """Open a collection saved with :meth:`memmap_`/:meth:`save` (never unpickles)."""
        from .persistence import load_memmap

        return load_memmap(prefix, device=device, non_blocking=non_blocking, out=out)

    @classmethod
    def load(cls, prefix: Any, device: Any = None, non_blocking: bool = False, *, out: Any = None) -> "TensorDictBase":
        return cls.load_memmap(prefix, device=device, non_blocking=non_blocking, out=out)

    def is_memmap(self) -> bool:
        from .memmap import MemoryMappedTensor

        leaves = [v for v in self.values(True, True) if isinstance(v, torch.Tensor)]
        return bool(leaves) and all(isinstance(v, MemoryMappedTensor) for v in leaves)

    def consolidate(self, filename: Any = None, *, num_threads: int = 0, device: Any = None, non_blocking: bool = False, inplace: bool = False, return_early: bool = False, use_buffer: bool = False, share_memory: bool = False, pin_memory: bool = False, metadata: bool = False) -> "TensorDictBase":
        """A copy whose leaves all live in one contiguous storage (fast to move and to share)."""
        from .consolidate import consolidate

        return consolidate(self, filename=filename, device=device, share_memory=share_memory, pin_memory=pin_memory)

    def is_consolidated(self) -> bool:
        from .consolidate import is_consolidated

        return is_consolidated(self)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        handler = TD_HANDLED_FUNCTIONS.get(func)
        if handler is None:
            return NotImplemented
        return handler(*args, **(kwargs or {}))

    def __repr__(self) -> str:
        return _repr(self, 0)

    def __eq_structure__(self, other) -> bool:  # pragma: no cover - helper for tests
        return set(self.keys(True, True)) == set(other.keys(True, True))


class _Missing(enum.Enum):
    # An enum member so that torch.compile (Dynamo) treats the sentinel as a constant.
    MISSING = 0

    def __repr__(self):
        return "MISSING"


_MISSING = _Missing.MISSING


def _is_key_tuple(index: tuple) -> bool:
    for part in index:
        if isinstance(part, str):
            continue
        if isinstance(part, tuple) and part and _is_key_tuple(part):
            continue
        return False
    return True


def _expand_index(index: Any, batch_dims: int) -> Any:
    """Replace an Ellipsis so that it spans batch dims only (leaf feature dims stay whole)."""
    if index is Ellipsis:
        return (slice(None),) * batch_dims
    if isinstance(index, tuple) and any(p is Ellipsis for p in index):
        used = sum(1 for p in index if p is not None and p is not Ellipsis and not (isinstance(p, torch.Tensor) and p.dtype == torch.bool))
        used += sum(p.dim() for p in index if isinstance(p, torch.Tensor) and p.dtype == torch.bool)
        pos = next(i for i, p in enumerate(index) if p is Ellipsis)
        return index[:pos] + (slice(None),) * (batch_dims - used) + index[pos + 1 :]
    return index


def _numpy_tree(tree: dict) -> dict:
    return {k: _numpy_tree(v) if isinstance(v, dict) else v.numpy() if isinstance(v, torch.Tensor) else v for k, v in tree.items()}


def _indexed_batch_size(batch_size: torch.Size, index: Any) -> torch.Size:
    """The batch size that ``index`` produces, computed on a zero-stride stand-in tensor."""
    return torch.zeros(()).expand(batch_size)[index].shape


def _flat_dict_items(d: dict, prefix: tuple = ()):
    for key, value in d.items():
        if isinstance(value, dict):
            yield from _flat_dict_items(value, prefix + (key,))
        else:
            yield (prefix + (key,) if prefix else key), value


def _repr(td: TensorDictBase, indent: int) -> str:
    pad = " " * (indent + 8)
    lines = []
    for key, value in td._items_raw():
        if isinstance(value, torch.Tensor):
            desc = f"{type(value).__name__}(shape={value.shape}, device={value.device}, dtype={value.dtype}, is_shared={value.is_shared()})"
        else:
            desc = repr(value) if value._is_non_tensor else value._repr_nested(indent + 8) if value._is_lazy else _repr(value, indent + 8)
        lines.append(f"{pad}{key}: {desc}")
    fields = ",\n".join(lines)
    inner = " " * (indent + 4)
    return (
        f"{type(td).__name__}(\n{inner}fields={{\n{fields}}},\n{inner}batch_size={td.batch_size},\n"
        f"{inner}device={td.device},\n{inner}is_shared={td.is_shared()})"
    )
