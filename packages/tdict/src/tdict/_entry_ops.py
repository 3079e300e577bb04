"""Entry-level operations shared by every collection: indexed reads/writes of one key, conversions,
introspection, non-tensor helpers, ``new_*`` factories, combining leaves and splitting keys off.

Written against the collection primitives (``_items_raw``, ``_get_str``, ``get``, ``set``, ``_index``,
``_map_entries``, ``keys``, ``_tensor_leaves``) so that TensorDict, LazyStackedTensorDict and tensor
classes (through their inner TensorDict) share them. Lazy leaves are never stacked just to learn an
entry's type or shape (``_probe``).
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Callable

import torch

from ._indexing import _expand_index, _indexed_batch_size
from ._keys import is_leaf_nontensor
from ._utils import (
    _MISSING,
    NO_DEFAULT,
    NestedKey,
    _key_to_tuple,
    is_tensor_collection,
    parse_batch_size,
    parse_device,
    unravel_key,
)

if TYPE_CHECKING:
    from .base import TensorDictBase


def _probe(td: Any, key: NestedKey) -> Any:
    """The entry at ``key`` without stacking lazy leaves (a member's leaf stands in); KeyError if absent."""
    from .lazy import _probe as probe

    value = probe(td, _key_to_tuple(key))
    if value is _MISSING:
        raise td._missing_key_error(unravel_key(key))
    return value


def _is_lazy_stack(td: Any) -> bool:
    return td._is_lazy and not td._is_non_tensor


def _non_tensor(value: Any) -> bool:
    return not isinstance(value, torch.Tensor) and getattr(type(value), "_is_non_tensor", False)


def _check_unlocked(td: Any, what: str) -> None:
    members = td.tensordicts if _is_lazy_stack(td) else ()
    if td.is_locked or any(m.is_locked for m in members):
        raise RuntimeError(f"{what}: the collection is locked (unlock_() it first).")


def _new_size(size: tuple, what: str) -> torch.Size:
    if len(size) == 1 and not isinstance(size[0], int):
        size = size[0]
    try:
        return parse_batch_size(size)
    except TypeError as err:
        raise TypeError(f"{what}: size must be ints or one sequence of ints, got {size!r}.") from err
    except ValueError:
        raise ValueError(f"{what}: size must be non-negative ints, got {list(size)}.") from None


def _set_device_tree(td: Any, device: torch.device | None) -> None:
    if _is_lazy_stack(td):
        for member in td.tensordicts:
            _set_device_tree(member, device)
    elif getattr(type(td), "_is_tensorclass", False):
        _set_device_tree(td._tensordict, device)
    else:
        td._device = device
        for _, value in td._items_raw():
            if not isinstance(value, torch.Tensor):
                _set_device_tree(value, device)


def _count_bytes(tensor: torch.Tensor, out: list) -> None:
    from .memmap import MemoryMappedTensor

    if type(tensor) not in (torch.Tensor, torch.nn.Parameter, MemoryMappedTensor) and hasattr(
        tensor, "__tensor_flatten__"
    ):
        for attr in tensor.__tensor_flatten__()[0]:  # nested (jagged) tensors and other wrappers
            part = getattr(tensor, attr)
            if part is not None:
                _count_bytes(part, out)
        return
    out.append(tensor)
    if tensor.is_leaf and tensor.grad is not None:  # .grad of a non-leaf warns (and is None)
        out.append(tensor.grad)


class EntryOpsMixin:
    """Reads, writes and conversions of single entries (see the module docstring)."""

    __slots__ = ()

    # ------------------------------------------------------------------ indexed access
    def get_at(self, key: NestedKey, index: Any, default: Any = NO_DEFAULT) -> Any:
        """``get(key)[index]``; ``default`` when the key is absent (``KeyError`` without one)."""
        value = self.get(key, _MISSING if default is not NO_DEFAULT else NO_DEFAULT)
        if value is _MISSING:
            return default
        try:
            return value[index]
        except IndexError as err:
            raise IndexError(
                f"get_at({key!r}): index {index!r} does not fit the entry of shape {list(_shape_of(value))}: {err}"
            ) from err

    def set_at_(self, key: NestedKey, value: Any, index: Any, *, non_blocking: bool = False) -> "TensorDictBase":
        """Write ``value`` (broadcast) into the existing entry ``key`` at batch index ``index``, in place."""
        from .tensordict import TensorDict

        key, parts = unravel_key(key), _key_to_tuple(key)
        _probe(self, key)  # KeyError (listing the keys) before anything else
        nodes = [self]
        for part in parts[:-1]:
            nodes.append(nodes[-1].get(part))
        target = nodes[-1].get(parts[-1])
        full_index = _expand_index(index, self.batch_dims)
        try:
            if any(_is_lazy_stack(n) for n in nodes):  # get() stacked a copy: write member-wise
                if isinstance(target, torch.Tensor):
                    value = self._to_leaf(value, key).expand(_indexed_batch_size(target.shape, full_index))
                self._set_at_index(
                    index, TensorDict({key: value}, batch_size=_indexed_batch_size(self.batch_size, full_index))
                )
            elif isinstance(target, torch.Tensor):
                target[full_index] = self._to_leaf(value, key)
            elif target._is_non_tensor:
                nodes[-1]._set_str(
                    parts[-1], target._set_at(full_index, value), inplace=False, validated=True, ignore_lock=True
                )
            else:
                target[full_index] = value
        except (RuntimeError, IndexError) as err:
            raise type(err)(f"set_at_({key!r}, index={index!r}): {err}") from err
        return self

    def copy_at_(
        self, tensordict: Any, idx: Any, non_blocking: bool = False, *, fast: bool | None = True
    ) -> "TensorDictBase":
        """Copy ``tensordict``'s entries into ``self[idx]`` in place (every key must exist in ``self``).

        One path serves every ``fast`` value: keys and shapes are all checked before the first write.
        """
        return self.update_at_(tensordict, idx)

    def masked_select(self, mask: torch.Tensor) -> "TensorDictBase":
        """A new collection of the elements where ``mask`` (over the leading batch dims) is True.

        The masked dims collapse into one; lazy stacks give a dense TensorDict.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.arange(3), batch_size=[3])
            >>> td.masked_select(torch.tensor([True, False, True]))["a"]
            tensor([0, 2])
        """
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError(
                f"masked_select: mask must be a bool tensor, got {type(mask).__name__} {getattr(mask, 'dtype', '')}."
            )
        bs = self.batch_size
        while mask.dim() > len(bs) and mask.shape[-1] == 1:
            mask = mask.squeeze(-1)
        if mask.dim() > len(bs) or mask.shape != bs[: mask.dim()]:
            raise ValueError(
                f"masked_select: mask of shape {list(mask.shape)} does not match the leading batch dims of {list(bs)}."
            )
        new_bs = torch.Size((int(mask.sum()),) + tuple(bs[mask.dim() :]))
        host_mask = mask.cpu()  # non-tensor leaves index CPU bookkeeping tensors

        def pick(v: Any) -> Any:
            return (
                v[mask] if isinstance(v, torch.Tensor) else v[host_mask] if v._is_non_tensor else v.masked_select(mask)
            )

        return self._map_entries(pick, new_bs)

    # ------------------------------------------------------------------ conversions
    def to_tensordict(self, *, retain_none: bool | None = None) -> "TensorDictBase":
        """A dense TensorDict copy: tensors cloned, lazy stacks and tensor classes converted."""
        from .tensordict import TensorDict

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
        from ._constructors import to_pytree

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

    # ------------------------------------------------------------------ introspection
    @property
    def sorted_keys(self) -> list:
        """The (top-level) keys, sorted."""
        return sorted(self.keys())

    def entry_class(self, key: NestedKey) -> type:
        """The class of the entry at ``key``, found without stacking lazy leaves."""
        value = _probe(self, key)
        return type(self.get(key)) if _non_tensor(value) else type(value)  # non-tensor: a lazy stack stacks them

    def get_item_shape(self, key: NestedKey) -> torch.Size:
        """The shape of a tensor entry (the batch size of a collection); lazy stacks mark ragged dims with ``-1``."""
        parts = _key_to_tuple(key)
        _probe(self, key)
        node = self
        for part in parts[:-1]:  # sub-collections of lazy stacks come back as lazy views
            node = node.get(part)
        if not _is_lazy_stack(node):
            return _shape_of(node.get(parts[-1]))
        shapes = [member.get_item_shape(parts[-1]) for member in node.tensordicts]
        first = list(shapes[0])
        for shape in shapes[1:]:
            if len(shape) != len(first):
                return torch.Size([-1])
            first = [a if a == b else -1 for a, b in zip(first, shape)]
        first.insert(node.stack_dim, len(shapes))
        return torch.Size(first)

    def is_contiguous(self) -> bool:
        """True when every tensor leaf is contiguous (a lazy stack never is)."""
        if _is_lazy_stack(self):
            return False
        return all(leaf.is_contiguous() for leaf in self._tensor_leaves()[1])

    def data_ptr(self, *, storage: bool = False) -> "TensorDictBase":
        """A TensorDict (same keys) of the leaves' ``data_ptr()`` (``untyped_storage().data_ptr()``
        with ``storage``); a lazy stack gives one sub-TensorDict per member, keyed ``"0"``, ``"1"``..."""
        from .tensordict import TensorDict

        if _is_lazy_stack(self):
            entries = {str(i): member.data_ptr(storage=storage) for i, member in enumerate(self.tensordicts)}
        else:
            entries = {}
            for key, value in self._items_raw():
                if isinstance(value, torch.Tensor):
                    entries[key] = torch.tensor(value.untyped_storage().data_ptr() if storage else value.data_ptr())
                elif not value._is_non_tensor:
                    sub = value.data_ptr(storage=storage)
                    if not sub.is_empty():
                        entries[key] = sub
        return TensorDict._new_unsafe(entries, torch.Size(()), torch.device("cpu"))

    def param_count(self, *, count_duplicates: bool = True) -> int:
        """The number of tensor elements (``count_duplicates=False``: each tensor object once)."""
        leaves = self._tensor_leaves()[1]
        if not count_duplicates:
            leaves = list({id(t): t for t in leaves}.values())
        return sum(t.numel() for t in leaves)

    def bytes(self, *, count_duplicates: bool = True) -> int:
        """The bytes held by the tensor leaves (and their ``.grad``); see :meth:`param_count`."""
        tensors: list = []
        for leaf in self._tensor_leaves()[1]:
            _count_bytes(leaf, tensors)
        if not count_duplicates:
            tensors = list({id(t): t for t in tensors}.values())
        return sum(t.numel() * t.element_size() for t in tensors)

    @property
    def depth(self) -> int:
        """The deepest nesting level of a leaf (0 when no leaf sits in a sub-collection)."""
        return max((len(k) - 1 for k in self.keys(True, True, is_leaf_nontensor) if isinstance(k, tuple)), default=0)

    is_cuda = property(
        lambda self: _device_type(self) == "cuda", doc="True when the collection's device is a CUDA device."
    )
    is_cpu = property(lambda self: _device_type(self) == "cpu", doc="True when the collection's device is the CPU.")
    is_meta = property(lambda self: _device_type(self) == "meta", doc="True when the collection's device is ``meta``.")

    # ------------------------------------------------------------------ non-tensor entries
    def is_non_tensor(self, key: NestedKey) -> bool:
        """True when the entry at ``key`` is a NonTensorData / NonTensorStack (KeyError if absent)."""
        return _non_tensor(_probe(self, key))

    def non_tensor_items(self, include_nested: bool = False) -> tuple:
        """``(key, entry)`` pairs of the non-tensor leaves (stacked for lazy stacks)."""
        return tuple(
            (k, self.get(k)) for k in self.keys(include_nested, True, is_leaf_nontensor) if _non_tensor(_probe(self, k))
        )

    def filter_non_tensor_data(self) -> "TensorDictBase":
        """A copy of the structure without its non-tensor leaves (empty sub-collections stay)."""
        return self.exclude(*(k for k, _ in self.non_tensor_items(True)))

    def set_non_tensor(self, key: NestedKey, value: Any) -> "TensorDictBase":
        """Store ``value`` as-is (never converted to a tensor) under ``key``; missing parents are created."""
        from .non_tensor import NonTensorData

        parts = _key_to_tuple(key)
        parent = self._get_tuple(parts[:-1], None) if len(parts) > 1 else self
        if parent is None:
            parent = self
        elif isinstance(parent, torch.Tensor) or parent._is_non_tensor:
            raise KeyError(
                f"set_non_tensor({unravel_key(key)!r}): {unravel_key(parts[:-1])!r} is a leaf, not a collection."
            )
        entry = NonTensorData(
            data=value, batch_size=parent.batch_size, device=parent.device, names=parent._maybe_names()
        )
        return self.set(unravel_key(key), entry)

    # ------------------------------------------------------------------ new collections
    def replace(self, *args: Any, **kwargs: Any) -> "TensorDictBase":
        """A shallow copy with some entries replaced (one dict / collection and/or keywords).

        Returns ``self`` when nothing is replaced; ``self`` is never modified.
        """
        if len(args) > 1:
            raise TypeError(
                f"replace: takes at most one dict or collection of entries, got {len(args)} positional arguments."
            )
        source = args[0] if args else {}
        if not isinstance(source, dict) and not is_tensor_collection(source):
            raise TypeError(f"replace: expected a dict or a tensor collection of entries, got {type(source).__name__}.")
        if not kwargs and (not source if isinstance(source, dict) else source.is_empty()):
            return self
        result = self.copy()
        result.update(source)
        if kwargs:
            result.update(kwargs)
        return result

    def new_zeros(self, *size: Any, **kwargs: Any) -> "TensorDictBase":
        """A TensorDict of batch size ``size``, same structure and feature shapes, filled with 0.

        Keyword args as :meth:`torch.Tensor.new_zeros` (``dtype``, ``device``, ``requires_grad``,
        ``layout``, ``pin_memory``); ``dtype=None`` keeps each leaf's dtype. Non-tensor leaves
        are carried over with the new batch size. Also :meth:`new_ones`, :meth:`new_empty`, :meth:`new_full`.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> TensorDict(x=torch.ones(3, 2), batch_size=[3]).new_zeros(4, 5)["x"].shape
            torch.Size([4, 5, 2])
        """
        return self._new_filled(_new_size(size, "new_zeros"), "new_zeros", (), **kwargs)

    def new_ones(self, *size: Any, **kwargs: Any) -> "TensorDictBase":
        return self._new_filled(_new_size(size, "new_ones"), "new_ones", (), **kwargs)

    def new_empty(self, *size: Any, **kwargs: Any) -> "TensorDictBase":
        return self._new_filled(_new_size(size, "new_empty"), "new_empty", (), **kwargs)

    def new_full(self, size: Any, fill_value: Any, **kwargs: Any) -> "TensorDictBase":
        return self._new_filled(_new_size((size,), "new_full"), "new_full", (fill_value,), **kwargs)

    def _new_filled(
        self,
        size: torch.Size,
        fn: str,
        extra: tuple,
        *,
        dtype: torch.dtype | None = None,
        device: Any = NO_DEFAULT,
        requires_grad: bool = False,
        layout: torch.layout = torch.strided,
        pin_memory: bool | None = None,
        empty_lazy: bool = False,
        path: tuple = (),
    ) -> "TensorDictBase":
        from .tensordict import TensorDict

        n = self.batch_dims
        kwargs = {"dtype": dtype, "requires_grad": requires_grad, "layout": layout}
        if device is not NO_DEFAULT:
            kwargs["device"] = parse_device(device)
        if pin_memory is not None:
            kwargs["pin_memory"] = pin_memory
        out = {}
        for key, value in self._items_raw():
            if isinstance(value, torch.Tensor):
                out[key] = getattr(value, fn)(size + value.shape[n:], *extra, **kwargs)
            elif value._is_non_tensor:
                try:
                    out[key] = value._with_batch_size(size + value.batch_size[n:])
                except RuntimeError as err:
                    raise RuntimeError(f"{fn}: key {path + (key,)!r}: {err} Exclude it first.") from None
            else:
                out[key] = value._new_filled(
                    size + value.batch_size[n:],
                    fn,
                    extra,
                    dtype=dtype,
                    device=device,
                    requires_grad=requires_grad,
                    layout=layout,
                    pin_memory=pin_memory,
                    path=path + (key,),
                )
        names = self._maybe_names()
        if names is not None:
            names = [None] * (len(size) - n) + list(names) if len(size) >= n else list(names[n - len(size) :])
            names = names if any(nm is not None for nm in names) else None
        return TensorDict._new_unsafe(out, size, self.device if device is NO_DEFAULT else parse_device(device), names)

    def new_tensor(
        self,
        data: Any,
        *,
        dtype: torch.dtype | None = None,
        device: Any = NO_DEFAULT,
        requires_grad: bool = False,
        pin_memory: bool | None = None,
    ) -> "TensorDictBase":
        """A TensorDict of the same structure whose leaves are copies of ``data`` (a tensor: every
        leaf; a collection: the leaf under the same key), cast to each leaf's dtype unless ``dtype``.

        The batch size is ``data``'s shape (batch size); the device ``data``'s unless ``device``.
        """
        from .tensordict import TensorDict

        collection = is_tensor_collection(data)
        if not collection and not isinstance(data, torch.Tensor):
            data = torch.as_tensor(data)
        if collection:  # every key checked before anything is built
            for key in self.keys(True, True):
                if key not in data and not _non_tensor(_probe(self, key)):
                    raise KeyError(
                        f"new_tensor: key {key!r} of self is missing from data (keys: {list(data.keys(True, True))})."
                    )
        dev = data.device if device is NO_DEFAULT else parse_device(device)

        def build(td: Any, src: Any, bs: torch.Size) -> Any:
            out = {}
            for key, value in td._items_raw():
                part = (None if src is None else src._get_str(key, None)) if collection else src
                if isinstance(value, torch.Tensor):
                    t = part.detach().to(
                        device=dev if dev is not None else part.device, dtype=dtype or value.dtype, copy=True
                    )
                    out[key] = (t.pin_memory() if pin_memory else t).requires_grad_(requires_grad)
                elif value._is_non_tensor:
                    out[key] = part.copy() if _non_tensor(part) else value._with_batch_size(bs)
                else:
                    out[key] = build(value, part, part.batch_size if collection and part is not None else bs)
            return TensorDict._new_unsafe(out, bs, dev)

        return build(self, data, data.batch_size if collection else data.shape)

    # ------------------------------------------------------------------ in-place state
    def zero_grad(self, set_to_none: bool = True) -> "TensorDictBase":
        """Reset the ``.grad`` of every tensor leaf (to ``None``, or zero it in place)."""
        for leaf in self._tensor_leaves()[1]:
            if set_to_none:
                leaf.grad = None
            elif leaf.is_leaf and leaf.grad is not None:
                leaf.grad.zero_()
        return self

    def clear(self) -> "TensorDictBase":
        """Remove every entry (a lazy stack empties every member); the batch size stays."""
        _check_unlocked(self, "clear")
        if _is_lazy_stack(self):
            for member in self.tensordicts:
                member.clear()
            return self
        for key in list(self.keys()):
            self.del_(key)
        return self

    def popitem(self) -> tuple:
        """Remove and return the ``(key, entry)`` inserted last (top level only)."""
        _check_unlocked(self, "popitem")
        keys = list(self.keys())
        if not keys:
            raise KeyError("popitem(): the collection has no entries.")
        value = self.get(keys[-1])  # a ragged lazy leaf raises here, before the delete
        self.del_(keys[-1])
        return keys[-1], value

    def pin_memory_(self, num_threads: int | str = 0) -> "TensorDictBase":
        """Pin every tensor leaf in place (needs an accelerator)."""
        return self.pin_memory(num_threads=num_threads if isinstance(num_threads, int) else None, inplace=True)

    def auto_device_(self) -> "TensorDictBase":
        """Set the device (recursively) if all tensor leaves share one, else clear it."""
        devices = {leaf.device for leaf in self._tensor_leaves()[1]}
        _set_device_tree(self, devices.pop() if len(devices) == 1 else None)
        return self

    def filter_empty_(self) -> "TensorDictBase":
        """Remove the sub-collections that hold no leaf, in place (deepest first)."""
        for key in sorted(self.keys(True), key=_key_to_tuple, reverse=True):
            value = _probe(self, key)
            if not isinstance(value, torch.Tensor) and not value._is_non_tensor and self.get(key).is_empty():
                self.del_(key)
        return self

    # ------------------------------------------------------------------ combining and splitting keys
    def cat_tensors(
        self, *keys: NestedKey, out_key: NestedKey, dim: int = 0, keep_entries: bool = False
    ) -> "TensorDictBase":
        """``torch.cat`` the tensors under ``keys`` (along leaf dim ``dim``) into ``out_key``.

        The entries are removed unless ``keep_entries``. Nothing changes if any check fails.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.zeros(2, 1), b=torch.ones(2, 2), batch_size=[2])
            >>> td.cat_tensors("a", "b", out_key="ab", dim=1)["ab"].shape, list(td.keys())
            (torch.Size([2, 3]), ['ab'])
        """
        return self._combine_leaves(keys, out_key, dim, keep_entries, torch.cat, "cat_tensors")

    def stack_tensors(
        self, *keys: NestedKey, out_key: NestedKey, dim: int = 0, keep_entries: bool = False
    ) -> "TensorDictBase":
        """Like :meth:`cat_tensors` with ``torch.stack`` (a new leaf dim ``dim``)."""
        return self._combine_leaves(keys, out_key, dim, keep_entries, torch.stack, "stack_tensors")

    def _combine_leaves(
        self, keys: tuple, out_key: NestedKey, dim: int, keep_entries: bool, fn: Callable, what: str
    ) -> "TensorDictBase":
        if not keys:
            raise ValueError(f"{what}: pass at least one key to combine.")
        keys = [unravel_key(k) for k in keys]
        out_key = unravel_key(out_key)
        values = []
        for key in keys:
            value = self.get(key)
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{what}: key {key!r} holds a {type(value).__name__}, expected a tensor.")
            values.append(value)
        _check_unlocked(self, what)
        try:
            result = fn(values, dim)
        except (RuntimeError, IndexError, TypeError) as err:
            raise RuntimeError(f"{what}: cannot combine keys {keys} along dim {dim}: {err}") from err
        parts = _key_to_tuple(out_key)
        parent = self._get_tuple(parts[:-1], None) if len(parts) > 1 else self
        if parent is not None and (isinstance(parent, torch.Tensor) or parent._is_non_tensor):
            raise KeyError(f"{what}: out_key {out_key!r} runs through the leaf {unravel_key(parts[:-1])!r}.")
        bs = (parent if parent is not None else self).batch_size
        if result.shape[: len(bs)] != bs:
            raise RuntimeError(
                f"{what}: the result of shape {list(result.shape)} does not start with the batch size {list(bs)} of {out_key!r} (combine along a feature dim, dim >= {len(bs)})."
            )
        if not keep_entries:
            for key in dict.fromkeys(keys):
                self.del_(key)
        return self.set(out_key, result)

    def separates(
        self, *keys: NestedKey, default: Any = NO_DEFAULT, strict: bool = True, filter_empty: bool = True
    ) -> "TensorDictBase":
        """Move ``keys`` out of ``self`` into a new collection, which is returned.

        A missing key raises (``strict``) or, with ``default``, is set to it in the result; with
        ``strict=False`` and no default it is skipped. ``filter_empty`` then drops the
        sub-collections of ``self`` left with no leaf. Nothing changes if a check fails.
        """
        keys = [unravel_key(k) for k in keys]
        present = [k for k in keys if k in self]
        missing = [k for k in keys if k not in self]
        if missing and strict and default is NO_DEFAULT:
            raise self._missing_key_error(missing[0])
        if present:
            _check_unlocked(self, "separates")
        out = self.select(*present)
        if default is not NO_DEFAULT:
            for key in missing:
                out.set(key, default)
        tuples = {_key_to_tuple(k) for k in present}
        for key in dict.fromkeys(present):  # a key inside another separated one goes with its parent
            path = _key_to_tuple(key)
            if not any(path[:i] in tuples for i in range(1, len(path))):
                self.del_(key)
        if filter_empty:
            self.filter_empty_()
        return out

    # ------------------------------------------------------------------ constructors (see tdict._constructors)
    @classmethod
    def fromkeys(cls, keys: Any, value: Any = 0) -> "TensorDictBase":
        return _constructors().fromkeys(keys, value)

    @classmethod
    def from_any(cls, obj: Any, **kwargs: Any) -> Any:
        return _constructors().from_any(obj, **kwargs)

    @classmethod
    def from_pytree(cls, pytree: Any, **kwargs: Any) -> Any:
        return _constructors().from_pytree(pytree, **kwargs)

    @classmethod
    def from_namedtuple(cls, named_tuple: Any, **kwargs: Any) -> "TensorDictBase":
        return _constructors().from_namedtuple(named_tuple, **kwargs)

    @classmethod
    def from_tuple(cls, obj: Any, **kwargs: Any) -> "TensorDictBase":
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
    from . import _constructors as module  # deferred: it builds on the collection classes

    return module


def _device_type(td: Any) -> str | None:
    return None if td.device is None else td.device.type


def _shape_of(value: Any) -> torch.Size:
    return value.shape if isinstance(value, torch.Tensor) else value.batch_size


def _padded(td: Any, padding: Any, prefix: tuple, ragged: list) -> Any:
    """``td`` as a dense TensorDict with ragged leaves padded; their keys are appended to ``ragged``."""
    from .tensordict import TensorDict

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


__all__ = ["EntryOpsMixin"]
