"""Non-tensor data in tensor collections: :class:`NonTensorData` and what both non-tensor leaves share.

A :class:`NonTensorData` carries one Python object (a string, a dict, any object) together with
a batch size: every element of the batch holds that same object. Stacking non-tensor data gives
a :class:`NonTensorStack` (defined in :mod:`tdict.non_tensor_stack`, re-exported here), whose
elements may differ. Both are key-less leaves; ``_NonTensorBase`` holds what they share.
"""

from __future__ import annotations

import copy as _copy
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, cast

import torch

from ._core.utils import NO_DEFAULT, parse_batch_size, parse_device, parse_to_args
from ._core.indexing import _indexed_batch_size, index_on_cpu, write_shape_error
from .base import NON_TENSOR_CLASSES, TensorDictBase

if TYPE_CHECKING:
    from .non_tensor_stack import NonTensorStack

__all__ = ["NonTensorData", "is_non_tensor"]


def is_non_tensor(obj: Any) -> bool:
    """True for :class:`NonTensorData` and :class:`NonTensorStack` instances.

    Examples:
        >>> from tdict import NonTensorData, is_non_tensor
        >>> is_non_tensor(NonTensorData("hello")), is_non_tensor("hello")
        (True, False)
    """
    return getattr(type(obj), "_is_non_tensor", False)


def _payload_equal(a: Any, b: Any) -> bool:
    """``a == b`` reduced to one bool; objects whose ``==`` fails or is ambiguous compare unequal."""
    if a is b:
        return True
    try:
        result = a == b
    except Exception:
        return False
    if type(result) is bool:
        return result
    try:
        if isinstance(result, torch.Tensor) or hasattr(result, "all"):
            return bool(result.all())
        return bool(result)
    except Exception:
        return False


def _deepcopy_payload(data: Any) -> Any:
    try:
        return _copy.deepcopy(data)
    except Exception:  # objects that refuse to be copied are shared, like tensordict does
        return data


def _no_keys(self: Any, key: str) -> KeyError:
    return KeyError(f"{type(self).__name__} is a leaf holding a Python object: it has no key {key!r}.")


class _NotUnique:
    __slots__ = ()


_NOT_UNIQUE = _NotUnique()


class _NonTensorBase(TensorDictBase):
    """Behaviour shared by the two non-tensor classes (a leaf with no keys)."""

    __slots__ = ()
    _is_non_tensor = True

    if TYPE_CHECKING:  # what both subclasses define (their slots and these methods)
        _device: torch.device | None
        _names: list | None

        def _with_batch_size(self, batch_size: torch.Size) -> _NonTensorBase: ...

        def copy(self) -> _NonTensorBase: ...

        def __eq__(self, other: Any) -> torch.Tensor: ...  # a bool tensor of the batch shape

    # ---- primitives: a leaf has no entries
    def _items_raw(self) -> Iterator:
        return iter(())

    def _get_str(self, key: str, default: Any) -> Any:
        if default is NO_DEFAULT:
            raise _no_keys(self, key)
        return default

    def _get_tuple(self, key: tuple, default: Any) -> Any:
        return self._get_str(key[0], default)

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool, ignore_lock: bool = False) -> None:
        raise TypeError(f"Cannot set key {key!r} on a {type(self).__name__}: it holds a Python object, not entries.")

    def _del_str(self, key: str) -> None:
        raise _no_keys(self, key)

    def is_empty(self) -> bool:
        return False

    def _tensor_leaves(self) -> tuple[list, list]:
        return [], []

    def _apply(
        self,
        fn,
        others,
        named,
        path,
        batch_size,
        device,
        names,
        inplace,
        default,
        filter_empty,
        call_on_nested,
        constructor_kwargs,
    ):
        # functions map tensors; a Python payload goes through unchanged (as in a TensorDict's apply)
        return self if batch_size is None else self._with_batch_size(torch.Size(batch_size))

    def _set_lock(self, locked: bool) -> None:
        self._is_locked = locked

    @property
    def device(self) -> torch.device | None:
        """The device recorded for the leaf (the payload itself is never moved), or ``None``."""
        return self._device

    @device.setter
    def device(self, value: Any) -> None:
        raise RuntimeError("device cannot be assigned: use .to(device).")

    def clear_device_(self):
        """Forget the recorded device; returns ``self``."""
        self._device = None
        return self

    @property
    def names(self) -> list:
        """The batch dim names, one per dim (``None`` for an unnamed dim); assignable."""
        return list(self._names) if self._names is not None else [None] * self.batch_dims

    @names.setter
    def names(self, value: Sequence[str | None] | None) -> None:
        if value is None:
            self._names = None
            return
        value = list(value)
        if len(value) != self.batch_dims:
            raise ValueError(
                f"names: the length of the dimension names must equate the tensordict batch_dims: expected "
                f"{self.batch_dims} names (one per batch dim), got {len(value)}: {value}."
            )
        self._names = value if any(v is not None for v in value) else None

    def _maybe_names(self):
        return self._names

    def masked_fill(self, mask: torch.Tensor, value: Any) -> Any:
        """A copy: a fill value is a number and Python payloads are not numbers (as in tensordict)."""
        self._check_mask(mask)
        return self.copy()

    def masked_fill_(self, mask: torch.Tensor, value: Any) -> Any:
        """Check ``mask`` and return ``self`` unchanged: a Python payload is not filled with a number."""
        self._check_mask(mask)
        return self

    def empty(
        self, recurse: bool = False, *, batch_size: Any = None, device: Any = NO_DEFAULT, names: Any = None
    ) -> Any:
        """A copy (a non-tensor leaf has no entries to drop), optionally with a new batch size or device."""
        out = self.copy() if batch_size is None else self._with_batch_size(parse_batch_size(batch_size))
        if device is not NO_DEFAULT:
            out._device = parse_device(device)
        return out

    def to(self, *args: Any, **kwargs: Any) -> Any:
        """``to(device)`` records the device; dtypes do not apply to Python payloads."""
        device, _dtype, _non_blocking, batch_size = parse_to_args(args, dict(kwargs))
        out = self
        if batch_size is not None:
            out = out._with_batch_size(parse_batch_size(batch_size))
        if device is not None and device != out._device:
            out = out.copy()
            out._device = device
        return out

    def __ne__(self, other: Any) -> torch.Tensor:
        return ~self.__eq__(other)

    __hash__ = object.__hash__

    def _set_at(self, index: Any, value: Any) -> Any:
        """The leaf after ``leaf[index] = value`` (copy-on-write: ``self`` is left unchanged).

        The caller stores the returned leaf in place of ``self``; writing a different payload
        into part of a :class:`NonTensorData` gives a :class:`NonTensorStack`.
        """
        if isinstance(index, list) or type(index).__module__ == "numpy":
            index = torch.as_tensor(index)
        if isinstance(self, NonTensorData):
            payload = (
                value.data if isinstance(value, NonTensorData) else value if not is_non_tensor(value) else _NOT_UNIQUE
            )
            if payload is not _NOT_UNIQUE and _payload_equal(self.data, payload):
                _indexed_batch_size(self._batch_size, index)  # still validate the index (on its device)
                return self
            origins, table = torch.zeros(self._batch_size, dtype=torch.long), [self.data]
        else:
            stack = cast("NonTensorStack", self)
            origins, table = stack._origins, stack._table
            if len(table) > 2 * origins.numel() + 16:  # drop payloads no element points to any more
                origins, table = stack._compact()
            origins, table = origins.clone(), list(table)
        index = index_on_cpu(index)  # the origins table lives on the CPU
        region = origins[index].shape
        if not is_non_tensor(value):
            value = NonTensorData._new(value, region, self._device)
        from .non_tensor_stack import NonTensorStack, _as_origins  # deferred: that module builds on this one

        ids = _as_origins(value, table, "td[index] = value", 0)
        try:
            origins[index] = ids
        except RuntimeError:
            raise RuntimeError(
                f"td[index] = value: non-tensor value of batch size {list(ids.shape)} does not fit the indexed batch size {list(region)}."
            ) from None
        return NonTensorStack._new(origins, table, self._device, self._names)

    @classmethod
    def _stack_impl(cls, items: Sequence, dim: int, out: Any = None) -> Any:
        from .non_tensor_stack import _stack_non_tensor  # deferred: that module builds on this one

        return _stack_non_tensor(items, dim, out)

    @classmethod
    def _cat_impl(cls, items: Sequence, dim: int, out: Any = None) -> Any:
        from .non_tensor_stack import _cat_non_tensor  # deferred: that module builds on this one

        return _cat_non_tensor(items, dim, out)


class NonTensorData(_NonTensorBase):
    """A Python object (string, dict, any object) with a batch size, stored as a collection leaf.

    ``TensorDict`` wraps non-numeric values in it: ``td["key"]`` returns the payload and
    ``td.get("key")`` the :class:`NonTensorData` itself. Every element of the batch holds ``data``.

    Args:
        data: the payload.
        batch_size: the batch dims (default ``[]``).
        device: the device of the enclosing collection (recorded, the payload is not moved).
        names: optional names of the batch dims.

    Examples:
        >>> import torch
        >>> from tdict import NonTensorData, TensorDict
        >>> td = TensorDict({"obs": torch.zeros(3), "text": "hello"}, batch_size=[3])
        >>> td["text"], td.get("text").batch_size
        ('hello', torch.Size([3]))
        >>> td[0]["text"]
        'hello'
        >>> NonTensorData("a", batch_size=[2]).tolist()
        ['a', 'a']
    """

    __slots__ = ("data", "_batch_size", "_device", "_names", "_is_locked")
    _is_lazy = False

    def __init__(
        self,
        data: Any = None,
        batch_size: Any = None,
        device: Any = None,
        names: Any = None,
        non_blocking: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(f"NonTensorData: unexpected arguments {sorted(kwargs)}.")
        if isinstance(data, NonTensorData):
            data = data.data
        self.data = data
        self._batch_size = parse_batch_size(batch_size)
        self._device = parse_device(device)
        self._names = None
        self._is_locked = False
        if names is not None:
            self.names = names

    @classmethod
    def _new(cls, data: Any, batch_size: torch.Size, device: Any, names: Any = None) -> "NonTensorData":
        self = object.__new__(cls)
        self.data = data
        self._batch_size = batch_size
        self._device = device
        self._names = names
        self._is_locked = False
        return self

    # ---- batch size
    @property
    def batch_size(self) -> torch.Size:
        return self._batch_size

    @batch_size.setter
    def batch_size(self, new: Any) -> None:
        self._batch_size = parse_batch_size(new)
        self._names = None

    # results keep the class (MetaData is a subclass)
    def _with_batch_size(self, batch_size: torch.Size) -> "NonTensorData":
        if batch_size == self._batch_size:
            return self
        return type(self)._new(self.data, torch.Size(batch_size), self._device)

    def _map_entries(self, fn: Callable, batch_size: torch.Size, names: Any = None) -> "NonTensorData":
        # shape ops only change the batch size: every element holds the same payload
        return type(self)._new(self.data, torch.Size(batch_size), self._device, names)

    def _index(self, index: Any) -> "NonTensorData":
        bs = self._batch_size
        if type(index) is int:
            if not bs:
                raise IndexError("Cannot index a NonTensorData with an empty batch size.")
            if not -bs[0] <= index < bs[0]:
                raise IndexError(f"Index {index} is out of range for batch dim 0 of size {bs[0]}.")
            names = self._names[1:] if self._names else None
            return type(self)._new(self.data, bs[1:], self._device, names)
        if type(index) is slice:
            if not bs:
                raise IndexError("Cannot index a NonTensorData with an empty batch size.")
            return type(self)._new(
                self.data, torch.Size((len(range(*index.indices(bs[0]))),)) + bs[1:], self._device, self._names
            )
        if isinstance(index, list) or type(index).__module__ == "numpy":
            index = torch.as_tensor(index)
        return type(self)._new(self.data, _indexed_batch_size(bs, index), self._device)

    def _split_entries(self, fn: Callable, sizes: Sequence[torch.Size], names: Any = None) -> tuple:
        return tuple(type(self)._new(self.data, torch.Size(bs), self._device) for bs in sizes)

    # ---- copies
    def clone(self, recurse: bool = True, *, device: Any = None) -> "NonTensorData":
        """A copy; the payload is deep-copied unless ``recurse=False``; ``device``: the copy's device."""
        data = _deepcopy_payload(self.data) if recurse else self.data
        return type(self)._new(
            data, self._batch_size, self._device if device is None else parse_device(device), self._names
        )

    def copy(self) -> "NonTensorData":
        return type(self)._new(self.data, self._batch_size, self._device, self._names)

    def update(
        self,
        input_dict_or_td: Any,
        clone: bool = False,
        inplace: bool = False,
        *,
        keys_to_update: Any = None,
        non_blocking: bool = False,
        is_leaf: Any = None,
        update_batch_size: bool = False,
        ignore_lock: bool = False,
    ) -> "NonTensorData":
        """Replace the payload with the one of another :class:`NonTensorData` (or with a raw object).
        The other arguments are :meth:`TensorDict.update`'s (a single payload has no keys to select)."""
        if self._is_locked and not ignore_lock:
            raise RuntimeError("Cannot update a locked NonTensorData.")
        return self.update_(input_dict_or_td)

    def update_(self, input_dict_or_td: Any, clone: bool = False, *, keys_to_update: Any = None) -> "NonTensorData":
        self.data = input_dict_or_td.data if isinstance(input_dict_or_td, NonTensorData) else input_dict_or_td
        return self

    # ---- conversion, comparison, display
    def tolist(self) -> Any:
        """The payload, nested in lists of the batch shape (the bare payload for an empty batch)."""

        def build(dims):
            return self.data if not dims else [build(dims[1:]) for _ in range(dims[0])]

        return build(tuple(self._batch_size))

    def to_dict(self, *, retain_none: bool = True, convert_tensors: bool = False) -> Any:
        return self.data

    def __eq__(self, other: Any) -> torch.Tensor:
        """A bool tensor of the batch shape: does each element's payload equal ``other``'s?"""
        single = isinstance(other, NonTensorData)
        if not single and is_non_tensor(other):
            from .non_tensor_stack import NonTensorStack  # deferred: that module builds on this one

            if type(other) is NonTensorStack:
                return other.__eq__(self)
        payload = other.data if single else other
        shape = self._batch_size
        if single and other._batch_size != shape:
            shape = torch.broadcast_shapes(shape, other._batch_size)
        return torch.full(shape, _payload_equal(self.data, payload), dtype=torch.bool)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(data={self.data}, batch_size={self._batch_size}, device={self._device})"

    def __getstate__(self):
        return {
            "data": self.data,
            "batch_size": tuple(self._batch_size),
            "device": self._device,
            "names": self._names,
            "locked": self._is_locked,
        }

    def __setstate__(self, state):
        self.data = state["data"]
        self._batch_size = torch.Size(state["batch_size"])
        self._device = state["device"]
        self._names = state["names"]
        self._is_locked = state["locked"]


class _NonTensorSlot:
    """Write target for ``td[index] = value`` on a non-tensor entry: ``slot[index] = leaf``
    stores ``entry._set_at(index, leaf)`` back under the key (non-tensor leaves are copy-on-write)."""

    __slots__ = ("entries", "key")

    def __init__(self, entries: dict, key: str) -> None:
        self.entries = entries
        self.key = key

    def __setitem__(self, index: Any, value: Any) -> None:
        self.entries[self.key] = self.entries[self.key]._set_at(index, value)


def _non_tensor_write(
    dest: Any, key: str, target: Any, leaf: Any, dest_bs: torch.Size, batch_dims: int, path: tuple
) -> _NonTensorSlot:
    """Check that ``leaf`` fits ``target`` at the indexed batch size; return the write slot."""
    expected = dest_bs + target.batch_size[batch_dims:]
    try:
        torch.broadcast_shapes(leaf.batch_size, expected)
    except RuntimeError:
        raise write_shape_error(path, leaf.batch_size, expected, len(dest_bs)) from None
    return _NonTensorSlot(dest._tensordict, key)


NON_TENSOR_CLASSES.add(NonTensorData)
