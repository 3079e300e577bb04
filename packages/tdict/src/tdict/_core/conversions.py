"""Conversions of a collection to other data (dense TensorDict, namedtuples, pytrees, padded
tensors) and the ``from_*`` / ``fromkeys`` class methods, which delegate to :mod:`.constructors`."""

# Mixin of TensorDictBase: the attributes it reads (batch_size, get, _items_raw...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

import torch

from .entries import _is_lazy_stack, _probe
from .utils import NO_DEFAULT, NestedKey, unravel_key

if TYPE_CHECKING:
    from ..base import TensorDictBase


class ConversionsMixin:
    """To and from other data: dense copies, namedtuples, pytrees, padded tensors, ``from_*``."""

    __slots__ = ()

    # ------------------------------------------------------------------ conversions
    def attrs(self, *, fields: Any = ("device", "dtype", "shape"), num_threads: int | None = None) -> Any:
        """A batch-less, device-less TensorDict holding the :class:`~tdict.attrs.TensorAttrs` (device,
        dtype, shape; those in ``fields``) of each tensor leaf, at its key: ``other.to(attrs)`` casts
        each leaf of ``other`` to its own. ``num_threads`` is accepted (tensordict's signature).

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> TensorDict(a=torch.zeros(2, dtype=torch.int8)).attrs(fields=("dtype",))["a"].tgt_dtype
            torch.int8
        """
        from ..attrs import record_attrs

        return record_attrs(self, fields)

    def as_tensor(self) -> "TensorDictBase":
        """The same collection with memory-mapped leaves as plain tensors viewing the same memory
        (other leaves are kept as they are).

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.zeros(2)).memmap_()
            >>> type(td.as_tensor()["a"]).__name__
            'Tensor'
        """
        from ..memmap import MemoryMappedTensor

        return self.apply(lambda v: v.as_tensor() if isinstance(v, MemoryMappedTensor) else v)

    def to_tensordict(self, *, retain_none: bool | None = None) -> "TensorDictBase":
        """A dense TensorDict copy: tensors cloned, lazy stacks and tensor classes converted."""
        from ..tensordict import TensorDict

        def convert(v: Any) -> Any:
            return (
                v.clone()
                if isinstance(v, torch.Tensor)
                else v.copy()
                if v._is_non_tensor
                else v.to_tensordict(retain_none=retain_none)
            )

        out = {key: convert(value) for key, value in self._items_raw()}
        return TensorDict._new_unsafe(out, self.batch_size, self.device, self._maybe_names())

    def to_namedtuple(self, dest_cls: type | None = None) -> Any:
        """Nested namedtuples (``GenericDict``, or ``dest_cls`` at the top) of the entries."""

        def build(tree: dict, cls: type | None, path: tuple) -> Any:
            values = {k: build(v, None, path + (k,)) if isinstance(v, dict) else v for k, v in tree.items()}
            if cls is None:
                try:
                    cls = collections.namedtuple("GenericDict", list(values))
                except ValueError as err:
                    raise ValueError(
                        f"to_namedtuple: the keys {list(values)} at {path or 'the root'} are not valid field names: {err}"
                    ) from None
            return cls(**values)

        return build(self.to_dict(), dest_cls, ())

    def to_pytree(self) -> Any:
        """The pytree :func:`tdict.from_pytree` built this collection from (``self`` if none)."""
        from .constructors import to_pytree

        return to_pytree(self)

    def to_padded_tensor(self, padding: float = 0.0, mask_key: NestedKey | None = None) -> "TensorDictBase":
        """A dense TensorDict whose ragged leaves are padded with ``padding`` (on the right).

        Ragged leaves are nested (jagged) tensors and leaves of a lazy stack whose shapes differ
        between members. ``mask_key``: where to write a bool mask (True on real data) for the first
        ragged leaf, of its padded shape.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict, lazy_stack
            >>> s = lazy_stack([TensorDict(x=torch.ones(1)), TensorDict(x=torch.ones(2))])
            >>> s.to_padded_tensor(mask_key="mask")["mask"]
            tensor([[ True, False],
                    [ True,  True]])
        """
        ragged: list = []
        out = _padded(self, padding, (), ragged)
        if mask_key is not None:
            if not ragged:
                raise ValueError(f"to_padded_tensor: mask_key={mask_key!r} given but no leaf is ragged.")
            key = unravel_key(ragged[0])
            leaf = self.select(key).apply(lambda x: torch.ones_like(x, dtype=torch.bool))
            out.set(mask_key, _padded(leaf, False, (), []).get(key))
        return out

    # ------------------------------------------------------------------ constructors (see .constructors)
    @classmethod
    def fromkeys(cls, keys: Any, value: Any = 0) -> "TensorDictBase":
        """A TensorDict with an empty batch size holding ``value`` under every key of ``keys`` (:func:`tdict.fromkeys`)."""
        return _constructors().fromkeys(keys, value)

    @classmethod
    def from_list(cls, input: Any, **kwargs: Any) -> Any:
        """A TensorDict stacked from a list of dicts along a new first dim (:func:`tdict.from_list`)."""
        return _constructors().from_list(input, **kwargs)

    def to_struct_array(self) -> Any:
        """A numpy structured array of the entries, shaped like the batch (:func:`tdict._core.constructors.to_struct_array`)."""
        return _constructors().to_struct_array(self)

    @classmethod
    def from_struct_array(cls, struct_array: Any, **kwargs: Any) -> Any:
        """A TensorDict of a numpy structured array, one entry per field (:func:`tdict.from_struct_array`)."""
        return _constructors().from_struct_array(struct_array, **kwargs)

    @classmethod
    def from_any(cls, obj: Any, **kwargs: Any) -> Any:
        """Convert dicts, namedtuples, tuples, dataclasses and numpy structured arrays to a TensorDict (:func:`tdict.from_any`)."""
        return _constructors().from_any(obj, **kwargs)

    @classmethod
    def from_pytree(cls, pytree: Any, **kwargs: Any) -> Any:
        """A TensorDict mirroring a pytree of lists, tuples, namedtuples and dicts (:func:`tdict.from_pytree`)."""
        return _constructors().from_pytree(pytree, **kwargs)

    @classmethod
    def from_namedtuple(cls, named_tuple: Any, **kwargs: Any) -> "TensorDictBase":
        """A TensorDict of a namedtuple's fields, converted recursively (:func:`tdict.from_namedtuple`)."""
        return _constructors().from_namedtuple(named_tuple, **kwargs)

    @classmethod
    def from_tuple(cls, obj: Any, **kwargs: Any) -> "TensorDictBase":
        """A TensorDict with keys ``"0"``, ``"1"``... holding the elements of a tuple or list (:func:`tdict.from_tuple`)."""
        return _constructors().from_tuple(obj, **kwargs)

    @classmethod
    def from_dataclass(cls, dataclass: Any, *, as_tensorclass: bool = False, **kwargs: Any) -> Any:
        """A TensorDict of a dataclass instance's fields; a tensor class with ``as_tensorclass`` (:func:`tdict.from_dataclass`)."""
        module = _constructors()
        return (
            module.from_dataclass(dataclass, **kwargs)
            if as_tensorclass
            else module.td_from_dataclass(dataclass, **kwargs)
        )


def _constructors() -> Any:
    from . import constructors as module  # deferred: it builds on the collection classes

    return module


def _padded(td: Any, padding: Any, prefix: tuple, ragged: list) -> Any:
    """``td`` as a dense TensorDict with ragged leaves padded; their keys are appended to ``ragged``."""
    from ..tensordict import TensorDict

    lazy = _is_lazy_stack(td)
    out = {}
    for key in td.keys():
        path = prefix + (key,)
        rep = _probe(td, key)
        if isinstance(rep, torch.Tensor):
            if lazy and -1 in td.get_item_shape(key):
                ragged.append(path)
                out[key] = td.get(key, as_padded_tensor=True, padding_value=padding)
            else:
                value = td._get_str(key, NO_DEFAULT)
                if value.is_nested:
                    ragged.append(path)
                    value = torch.nested.to_padded_tensor(value, padding)
                out[key] = value
        elif rep._is_non_tensor:
            out[key] = td._get_str(key, NO_DEFAULT)
        else:
            out[key] = _padded(td._get_str(key, NO_DEFAULT), padding, path, ragged)
    return TensorDict._new_unsafe(out, td.batch_size, td.device, td._maybe_names())


__all__ = ["ConversionsMixin"]
