"""Writes of :class:`tdict.PersistentTensorDict`: set, set_, update, ``td[index] = value``, renames.

Every write is planned first: each entry of the value is converted and checked (key, batch size,
dtype, lock, shape of the target) and the write itself is queued as a callable; only when the
whole value has passed are the callables run, so a bad entry leaves the file as it was. Leaves of
a view (an indexed PersistentTensorDict) are written in place through its selection.

In-place operations that are not plain writes (math, ``apply_``, ``masked_fill_``...) run on a
loaded copy whose values are then written back (:func:`install_through_memory`).
"""

# Mixin of PersistentTensorDict: the attributes it reads (_group, _sel, _child...) live on the final class.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import torch

from .._core.indexing import broadcasts_to
from .._core.update import _ALL, _SKIP, _narrow
from .._core.utils import NO_DEFAULT, NestedKey, _key_to_tuple, unravel_key
from ..base import TensorDictBase, is_tensor_collection
from ..errors import LOCKED, ShapeMismatchError, batch_mismatch_error, locked_error
from ..tensordict import TensorDict
from . import h5
from .layout import is_persistent

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is new in 3.11

__all__ = ["DATASET_KWARGS", "PersistentWritesMixin", "dense_first", "install_through_memory"]

# create_dataset keywords that a scalar or empty dataset refuses (h5py: no chunks or filters there)
FILTER_KWARGS = frozenset("chunks compression compression_opts shuffle fletcher32 scaleoffset maxshape".split())
DATASET_KWARGS = FILTER_KWARGS | frozenset("fillvalue track_times track_order external allow_unknown_filter".split())


class _Payload:
    """A non-tensor value on its way into the file."""

    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        self.data = data


class PersistentWritesMixin:
    """The write path of :class:`tdict.PersistentTensorDict` (see the module docstring)."""

    def _lock_error(self, key: Any) -> RuntimeError:
        return RuntimeError(
            f"{LOCKED}. For in-place modification of key {key!r} use set_() (the key must exist); to add or "
            "replace keys, unlock_() the PersistentTensorDict first."
        )

    def _coerce(self, key: Any, value: Any) -> Any:
        """``value`` as a tensor, a tensor collection or a :class:`_Payload`; raises naming ``key``."""
        if isinstance(value, torch.Tensor):
            pass
        elif is_tensor_collection(value):
            if not value._is_non_tensor:
                return value
            if value._is_lazy:
                raise TypeError(
                    f"Key {key!r}: a PersistentTensorDict stores one non-tensor value per entry, not a "
                    f"{type(value).__name__} of different values."
                )
            value = value.data
            check_payload(key, value)
            return _Payload(value)
        elif isinstance(value, dict):
            return TensorDict(value, batch_size=self._batch_size)
        elif isinstance(value, (bool, int, float, complex, list)) or type(value).__module__ == "numpy":
            try:
                value = torch.as_tensor(value)
            except (TypeError, ValueError, RuntimeError):
                check_payload(key, value)
                return _Payload(value)
        else:
            check_payload(key, value)
            return _Payload(value)
        if value.requires_grad:
            raise RuntimeError(
                f"Key {key!r}: Cannot set a tensor that has requires_grad=True in a PersistentTensorDict "
                "(the file keeps values, not autograd graphs): detach it first."
            )
        check_dtype(key, value.dtype)
        return value

    def _check_new_leaf(self, key: Any, value: Any) -> None:
        """A new tensor leaf must start with the batch size."""
        n = len(self._batch_size)
        if isinstance(value, torch.Tensor) and value.shape[:n] != self._batch_size:
            raise batch_mismatch_error(key, value, self._batch_size)
        if is_tensor_collection(value) and value.batch_size[:n] != self._batch_size:
            raise batch_mismatch_error(key, value, self._batch_size)

    def _check_tree(self, path: tuple, tree: Any) -> None:
        """Every leaf of the collection ``tree`` can be stored (checked before the first write)."""
        if is_persistent(tree):
            return  # what a file holds can be stored
        for key, value in tree._items_raw():
            full = path + (key,)
            check_key(full, key)
            if isinstance(value, torch.Tensor) or value._is_non_tensor:
                self._coerce(unravel_key(full), value)
            else:
                self._check_tree(full, value)

    def _plan_write(
        self, key: str, value: Any, inplace: bool, ignore_lock: bool, actions: list, path: tuple = ()
    ) -> None:
        """Check writing ``value`` under ``key``; append the write to ``actions``.

        ``inplace``: write into an existing entry (merging into a sub-collection) when there is one.
        A view always writes in place. Raises before anything is written.
        """
        full = unravel_key(path + (key,))
        check_key(full, key)
        value = self._coerce(full, value)
        h5py = h5.require_h5py()
        node = self._node(key)
        in_view = self._sel is not None
        if is_tensor_collection(value):  # a sub-collection
            self._check_new_leaf(full, value)
            if isinstance(node, h5py.Group) and (inplace or in_view):
                child = self._child(key, node)
                for sub_key, sub_value in value._items_raw():
                    child._plan_write(sub_key, sub_value, True, ignore_lock, actions, path + (key,))
                return
            if self._is_locked and not ignore_lock:
                raise self._lock_error(full)
            if in_view and node is not None:
                raise RuntimeError(
                    f"Key {full!r}: cannot replace a {describe(node)} with a collection through an indexed "
                    "PersistentTensorDict (a view); write it on the unindexed one."
                )
            self._check_tree(path + (key,), value)
            actions.append(lambda: self._write_tree(key, value))
            return
        if isinstance(value, _Payload):
            if isinstance(node, h5py.Group):
                raise RuntimeError(f"Key {full!r}: cannot replace a nested collection with non-tensor data in place.")
            if self._is_locked and not ignore_lock and (node is None or not (inplace or in_view)):
                raise self._lock_error(full)
            actions.append(lambda: self._write_payload(key, value.data))
            return
        # a tensor
        if isinstance(node, h5py.Dataset) and not h5.is_non_tensor_dataset(node):
            target = self._batch_size + torch.Size(node.shape[len(self._full_bs) :])
            if inplace or in_view:
                if not broadcasts_to(value.shape, target):
                    raise ShapeMismatchError(
                        f"Failed to update {full!r}: in-place write of shape {list(value.shape)} into an entry of "
                        f"shape {list(target)}."
                    )
                actions.append(lambda: self._write_at(node, value))
                return
            self._check_new_leaf(full, value)
            if self._is_locked and not ignore_lock:
                raise self._lock_error(full)
            if value.shape == target and value.dtype == h5.torch_dtype(node):
                actions.append(lambda: self._write_at(node, value))
            else:
                actions.append(lambda: self._write_tensor(key, value))
            return
        if isinstance(node, h5py.Group) and (inplace or in_view):
            raise RuntimeError(f"Key {full!r}: holds a nested collection, a tensor cannot be written into it in place.")
        self._check_new_leaf(full, value)
        if self._is_locked and not ignore_lock:
            raise self._lock_error(full)
        actions.append(lambda: self._write_tensor(key, value))

    def _write_at(self, node: Any, value: torch.Tensor) -> None:
        if self._sel is None:
            h5.Selection.full(self._full_bs).write(node, value)
        else:
            self._sel.write(node, value)

    def _delete(self, key: str) -> None:
        if key in self._group:
            del self._group[key]
        self._origin._children.pop(key, None)

    def _create_dataset(self, key: str, value: torch.Tensor) -> Any:
        array, tag = h5.encode(value)
        kwargs = (
            self._kwargs
            if array.ndim and array.size
            else {k: v for k, v in self._kwargs.items() if k not in FILTER_KWARGS}
        )
        ds = self._group.create_dataset(key, data=array, **kwargs)
        h5.tag_dataset(ds, tag)
        return ds

    def _write_tensor(self, key: str, value: torch.Tensor) -> None:
        """Store ``value`` as a new dataset ``key`` (replacing what is there)."""
        self._delete(key)
        if self._sel is None:
            self._create_dataset(key, value)
            return
        # a new key through a view: a zero dataset over the whole batch, then the view's part
        feature = value.shape[len(self._batch_size) :]
        ds = self._create_dataset(key, torch.zeros(self._full_bs + feature, dtype=value.dtype))
        self._sel.write(ds, value)

    def _write_payload(self, key: str, data: Any) -> None:
        self._delete(key)
        h5.create_non_tensor(self._group, key, data)

    def _write_tree(self, key: str, tree: TensorDictBase) -> None:
        """Store the collection ``tree`` as a new group ``key`` (replacing what is there)."""
        self._delete(key)
        group = self._group.create_group(key, track_order=True)
        origin = self._origin
        extra = tree.batch_size[len(self._batch_size) :]
        child = type(origin)._of_group(
            group, origin._full_bs + extra, origin._device, None, origin._kwargs, origin._mode
        )
        child._is_locked = origin._is_locked
        origin._children[key] = child
        names = origin.names + tree.names[len(self._batch_size) :]
        child._names = names if any(n is not None for n in names) else None
        target = self._child(key, group)
        actions: list = []
        for sub_key, sub_value in tree._items_raw():
            target._plan_write(sub_key, sub_value, False, True, actions)
        for action in actions:
            action()

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool, ignore_lock: bool = False) -> None:
        actions: list = []
        self._plan_write(key, value, inplace, ignore_lock, actions)
        for action in actions:
            action()

    def _del_str(self, key: str) -> None:
        if self._node(key) is None:
            raise self._missing_key_error(key)
        self._delete(key)

    def set_(self, key: NestedKey, item: Any) -> Self:
        """Write ``item`` into the existing entry ``key`` in place (``KeyError`` if absent)."""
        actions: list = []
        self._plan_path(_key_to_tuple(key), item, "copy", _ALL, False, actions, ())
        for action in actions:
            action()
        return self

    def set_non_tensor(self, key: NestedKey, value: Any) -> Self:
        """Not supported: store non-tensor data with ``set(key, NonTensorData(value))``."""
        raise RuntimeError(
            "set_non_tensor is not compatible with the tensordict type PersistentTensorDict: "
            "use td.set(key, NonTensorData(value)) instead."
        )

    def update(
        self,
        input_dict_or_td: Any,
        clone: bool = False,
        inplace: bool = False,
        *,
        keys_to_update: Sequence | None = None,
        non_blocking: bool = False,
        is_leaf: Callable | None = None,
        update_batch_size: bool = False,
        ignore_lock: bool = False,
    ) -> Self:
        """Write every entry of ``input_dict_or_td`` into the file (sub-collections are merged).

        ``inplace``: write into existing datasets. Every entry is checked before the first write.
        """
        if input_dict_or_td is self:
            return self
        return self._update(input_dict_or_td, "inplace" if inplace else "set", keys_to_update, ignore_lock)

    def update_(self, input_dict_or_td: Any, clone: bool = False, *, keys_to_update: Sequence | None = None) -> Self:
        """Copy every tensor of ``input_dict_or_td`` into the existing datasets, in place (values
        broadcast); non-tensor entries are skipped. Every entry is checked before the first write."""
        return self._update(input_dict_or_td, "copy", keys_to_update, False)

    def _update(self, source: Any, mode: str, keys_to_update: Sequence | None, ignore_lock: bool) -> Self:
        if not isinstance(source, dict) and not (is_tensor_collection(source) and not source._is_non_tensor):
            raise TypeError(f"update: expected a dict or a tensor collection, got {type(source).__name__}.")
        allowed = _ALL if keys_to_update is None else [_key_to_tuple(k) for k in keys_to_update]
        actions: list = []
        self._plan_entries(entries_of(source), mode, allowed, ignore_lock, actions, ())
        for action in actions:
            action()
        return self

    def _plan_entries(
        self, entries: Iterable, mode: str, allowed: Any, ignore_lock: bool, actions: list, path: tuple
    ) -> None:
        for key, value in entries:
            parts = _key_to_tuple(key)
            below = _narrow(allowed, parts)
            if below is not _SKIP:
                self._plan_path(parts, value, mode, below, ignore_lock, actions, path)

    def _plan_path(
        self, parts: tuple, value: Any, mode: str, allowed: Any, ignore_lock: bool, actions: list, path: tuple
    ) -> None:
        """Plan writing ``value`` at the nested key ``parts``: ``mode`` is ``"set"`` (replace leaves),
        ``"inplace"`` (into existing entries when there are) or ``"copy"`` (existing entries only)."""
        h5py = h5.require_h5py()
        head = parts[0]
        full = path + (head,)
        node = self._node(head)
        is_tree = isinstance(value, dict) or (is_tensor_collection(value) and not value._is_non_tensor)
        if len(parts) > 1 or (is_tree and isinstance(node, h5py.Group)):
            if isinstance(node, h5py.Group):
                child = self._child(head, node)
                if len(parts) > 1:
                    child._plan_path(parts[1:], value, mode, allowed, ignore_lock, actions, full)
                else:
                    child._plan_entries(entries_of(value), mode, allowed, ignore_lock, actions, full)
                return
            if node is not None:
                raise KeyError(
                    f"Cannot write {unravel_key(path + parts)!r}: {unravel_key(full)!r} holds a leaf, not a collection."
                )
            if mode == "copy":
                raise self._missing_key_error(unravel_key(path + parts))
            value = TensorDict({parts[1:]: value}, batch_size=self._batch_size)
            self._plan_write(head, value, mode == "inplace", ignore_lock, actions, path)
            return
        if mode != "copy":
            self._plan_write(head, value, mode == "inplace", ignore_lock, actions, path)
            return
        if node is None:
            raise self._missing_key_error(unravel_key(full))
        if is_tensor_collection(value) and value._is_non_tensor:
            return  # as tensordict: in-place updates copy tensors only
        if is_tree or isinstance(node, h5py.Group):
            raise TypeError(
                f"update_: key {unravel_key(full)!r} holds a {describe(node)}, the value is a {type(value).__name__}."
            )
        if h5.is_non_tensor_dataset(node):
            return
        self._plan_write(head, value, True, ignore_lock, actions, path)

    def _set_at_index(self, index: Any, value: Any) -> None:
        view = self._index(index)
        if isinstance(value, dict):
            try:  # a dict of the indexed part's shape, or of values broadcast over it
                value = TensorDict(value, batch_size=view.batch_size)
            except RuntimeError:
                value = TensorDict(value, batch_size=[])
        if is_tensor_collection(value) and not value._is_non_tensor:
            if not broadcasts_to(value.batch_size, view.batch_size):
                raise RuntimeError(
                    f"td[index] = value: batch size {list(value.batch_size)} does not broadcast to the indexed "
                    f"batch size {list(view.batch_size)}."
                )
            if value.batch_size != view.batch_size:
                value = value.expand(view.batch_size)
            view._update(value, "inplace", None, False)
            return
        leaf = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
        actions: list = []
        for key in view.keys(True, True):
            view._plan_path(_key_to_tuple(key), leaf, "copy", _ALL, False, actions, ())
        for action in actions:
            action()

    def rename_key_(self, old_key: NestedKey, new_key: NestedKey, safe: bool = False) -> Self:
        """Move the entry ``old_key`` to ``new_key`` inside the file (no data is copied)."""
        old, new = _key_to_tuple(old_key), _key_to_tuple(new_key)
        if self._is_locked:
            raise locked_error(f"cannot rename key {unravel_key(old)!r}; unlock_() the PersistentTensorDict first.")
        for part in new:
            check_key(unravel_key(new), part)
        if self._path_node(old) is None:
            raise self._missing_key_error(unravel_key(old))
        if old == new:
            return self
        if self._path_node(new) is not None:
            if safe:
                raise KeyError(
                    f"rename_key_: {unravel_key(new)!r} is already present in TensorDict, and safe=True forbids overwriting it."
                )
        old_parent = self if len(old) == 1 else self._get_tuple(old[:-1], NO_DEFAULT)
        if len(new) == 1:
            new_parent = self
        else:
            if self._path_node(new[:-1]) is None:
                self.set(new[:-1], TensorDict(batch_size=self._batch_size))
            new_parent = self._get_tuple(new[:-1], NO_DEFAULT)
            if not is_persistent(new_parent):
                raise KeyError(f"rename_key_: {unravel_key(new[:-1])!r} is a leaf, not a collection.")
        if new_parent._node(new[-1]) is not None:
            new_parent._delete(new[-1])
        child = old_parent._origin._children.pop(old[-1], None)
        self._group.move("/".join(old), "/".join(new))
        if child is not None:
            child._group = new_parent._group[new[-1]]
            new_parent._origin._children[new[-1]] = child
        return self

    def fill_(self, key: NestedKey, value: float | bool) -> Self:
        """Fill the entry ``key`` (every dataset of it, for a nested collection) with ``value``."""
        h5py = h5.require_h5py()
        parts = _key_to_tuple(key)
        node = self._path_node(parts)
        if node is None:
            raise self._missing_key_error(unravel_key(parts))
        if isinstance(node, h5py.Group):
            target = self._get_tuple(parts, NO_DEFAULT)
            for sub in target.keys(True, True):
                target.fill_(sub, value)
        elif not h5.is_non_tensor_dataset(node):
            self.set_(parts, torch.full((), value, dtype=h5.torch_dtype(node)))
        return self

    def zero_(self) -> Self:
        """Set every dataset (of the view) to zero."""
        for key in self.keys(True, True):
            self.fill_(key, 0)
        return self

    def load_state_dict(
        self, state_dict: dict, strict: bool = True, assign: bool = False, from_flatten: bool = False
    ) -> Self:
        """Load a dict made by ``state_dict()`` into the file (checked in memory first)."""
        dense = self.to_tensordict()
        dense.load_state_dict(state_dict, strict=strict, assign=assign, from_flatten=from_flatten)
        self._update(dense, "set" if assign else "copy", None, False)
        return self


_DTYPE_OK: dict[torch.dtype, bool] = {}


def dense_first(op: str) -> str:
    return (
        f"Cannot call {op} on a PersistentTensorDict: the result would be a view of the file. Make it dense "
        "first with to_tensordict()."
    )


def check_dtype(key: Any, dtype: torch.dtype) -> None:
    ok = _DTYPE_OK.get(dtype)
    if ok is None:
        try:
            h5.encode(torch.empty(0, dtype=dtype))
            ok = True
        except TypeError:
            ok = False
        _DTYPE_OK[dtype] = ok
    if not ok:
        raise TypeError(f"Key {key!r}: HDF5 datasets cannot hold tensors of dtype {dtype}.")


def check_payload(key: Any, value: Any) -> None:
    try:
        h5.encode_non_tensor(value)
    except TypeError as err:
        raise TypeError(f"Key {key!r}: {err}") from None


def check_key(full: Any, key: Any) -> None:
    if type(key) is not str or not key or "/" in key or key == ".":
        raise KeyError(f"Key {full!r}: HDF5 names must be non-empty strings without '/' (and not '.'), got {key!r}.")


def describe(node: Any) -> str:
    h5py = h5.require_h5py()
    if isinstance(node, h5py.Group):
        return "nested collection"
    return "non-tensor entry" if h5.is_non_tensor_dataset(node) else "tensor"


def entries_of(source: Any) -> Iterable:
    """The ``(key, value)`` pairs of a dict or a collection; a dict's nested keys (``("a", "b")``) are
    folded into nested dicts first, so that every entry below one new key is written at once."""
    if not isinstance(source, dict):
        return source._items_raw()
    if all(type(key) is str for key in source):
        return source.items()
    nested: dict = {}
    for key, value in source.items():
        parts = _key_to_tuple(key)
        node = nested
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {} if child is None or not is_tensor_collection(child) else dict(child.items())
            node = child
        node[parts[-1]] = value
    return nested.items()


# In-place operations other than writes (math, apply_, masked_fill_...): run on a loaded copy,
# then written back into the file. Each name is a method of TensorDictBase returning ``self``.
_THROUGH_MEMORY = (
    "abs_ acos_ add_ addcdiv_ addcmul_ apply_ asin_ atan_ ceil_ clamp_ clamp_max_ clamp_min_ copy_ "
    "copy_at_ cos_ cosh_ div_ erf_ erfc_ exp_ expm1_ floor_ frac_ lerp_ lgamma_ log10_ log1p_ log2_ log_ "
    "logical_not_ masked_fill_ maximum_ minimum_ mul_ neg_ pow_ reciprocal_ round_ sigmoid_ sign_ sin_ "
    "sinh_ sqrt_ sub_ tan_ tanh_ trunc_"
).split()


def _through_memory(name: str) -> Callable:
    method = getattr(TensorDictBase, name)

    def inplace(self: Any, *args: Any, **kwargs: Any) -> Any:
        dense = self.to_tensordict()
        getattr(dense, name)(*args, **kwargs)
        self._update(dense, "copy", None, False)
        return self

    inplace.__name__ = name
    inplace.__doc__ = (method.__doc__ or "").strip().split("\n")[0] + " (written back into the file)."
    return inplace


def install_through_memory(cls: type) -> None:
    """Give ``cls`` the in-place operations above (and ``+=`` & co), each run on a loaded copy and written back."""
    for name in _THROUGH_MEMORY:
        method = _through_memory(name)
        method.__qualname__ = f"{cls.__name__}.{name}"
        setattr(cls, name, method)
    for dunder, name in (
        ("__iadd__", "add_"),
        ("__isub__", "sub_"),
        ("__imul__", "mul_"),
        ("__itruediv__", "div_"),
        ("__ipow__", "pow_"),
    ):
        setattr(cls, dunder, getattr(cls, name))
