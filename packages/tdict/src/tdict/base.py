"""TensorDictBase: the API every tensor collection shares.

Concrete classes (:class:`~tdict.TensorDict`, :class:`~tdict.LazyStackedTensorDict`,
:class:`~tdict.NonTensorData`) implement a handful of primitives (``_items_raw``,
``_get_str``, ``_set_str``, ``_del_str``, ``_index``, ``_map_entries``, ``batch_size``,
``device``, ``names``); everything here is written in terms of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import torch

from ._core.apply import ApplyMixin
from ._core.arithmetic import ArithmeticMixin
from ._core.autograd import AutogradMixin
from ._core.conversions import ConversionsMixin
from ._core.entries import EntryOpsMixin
from ._core.factories import FactoriesMixin
from ._core.introspection import IntrospectionMixin
from ._core.key_ops import KeyOpsMixin, _WriteBack
from ._core.reductions import ReductionsMixin
from ._core.shape_ops import ShapeOpsMixin
from ._io.storage_methods import StorageMixin
from ._core.keys import is_leaf_nontensor
from ._core.lock_graph import lock_graph, unlock_graph
from ._core.locking import keeps_lock
from ._core.indexing import _expand_index, check_write_shape
from ._core.indexing import _indexed_batch_size as _indexed_batch_size, _is_key_tuple as _is_key_tuple  # re-exported
from ._core.utils import NO_DEFAULT, NestedKey, _key_to_tuple, parse_device, unravel_key
from ._core.utils import _MISSING as _MISSING, is_tensor_collection as is_tensor_collection  # re-exported
from .errors import KeyValueError, ShapeMismatchError, locked_error
from .unbatched import UNBATCHED_TYPES
from .future import TensorDictFuture as TensorDictFuture  # re-exported (tensordict.utils has it)

# torch functions handled through ``__torch_function__``; filled by ``tdict._core.torch_function``.
TD_HANDLED_FUNCTIONS: dict[Callable, Callable] = {}
# Classes whose ``td[key]`` returns the wrapped Python object; registered by ``non_tensor``.
NON_TENSOR_CLASSES: set[type] = set()


class TensorDictBase(
    KeyOpsMixin,
    ApplyMixin,
    ArithmeticMixin,
    ReductionsMixin,
    ShapeOpsMixin,
    StorageMixin,
    EntryOpsMixin,
    ConversionsMixin,
    IntrospectionMixin,
    FactoriesMixin,
    AutogradMixin,
):
    """Abstract base of all tensor collections. See :class:`tdict.TensorDict`.

    The methods come from one mixin per topic; where to find each:

    | module (under `tdict/`)  | methods |
    | ------------------------ | ------- |
    | `base.py` (this class)   | `get`, `set`, `clone`, `copy`, `to_dict`, `detach`, `cpu`, `cuda`, dtype casts, `lock_`, `rename` |
    | `_core/key_ops.py`       | `keys`, `items`, `select`, `exclude`, `update`, `pop`, `del_`, `rename_key`, `flatten_keys` |
    | `_core/apply.py`         | `apply`, `apply_`, `named_apply`, `map` |
    | `_core/arithmetic.py`    | element-wise math, comparisons, casts: `add`, `mul_`, `exp`, `clamp`, `isnan`, `float32` |
    | `_core/reductions.py`    | `sum`, `mean`, `std`, `max`, `quantile`, `cumsum`, `softmax`, `all`, `any` |
    | `_core/shape_ops.py`     | `reshape`, `view`, `permute`, `unsqueeze`, `expand`, `split`, `unbind`, `gather`, `where` |
    | `_io/storage_methods.py` | `save`, `load`, `memmap`, `memmap_`, `memmap_like`, `consolidate`, `state_dict`, `to_h5` |
    | `_core/entries.py`       | `get_at`, `set_at_`, `masked_select`, non-tensor entries, `clear`, `zero_grad`, `separates` |
    | `_core/conversions.py`   | `to_tensordict`, `to_namedtuple`, `to_pytree`, `to_padded_tensor`, `from_*`, `fromkeys` |
    | `_core/introspection.py` | `entry_class`, `get_item_shape`, `is_contiguous`, `data_ptr`, `bytes`, `depth` |
    | `_core/factories.py`     | `replace`, `new_zeros`, `new_ones`, `new_empty`, `new_full`, `new_tensor` |
    | `_core/autograd.py`      | `data`, `grad`, `backward` |
    | `tensordict.py`          | `TensorDict`: entry storage, indexing, `to`; `from_module` (`_core/functional.py`) |
    | `lazy.py`, `_lazy/`      | `LazyStackedTensorDict`: member-wise versions of the above |
    | `persistent.py`, `_persistent/` | `PersistentTensorDict`: HDF5-backed (h5py), read lazily, written through |

    ``torch.stack``, ``torch.cat`` and the other torch functions on collections are in
    ``_core/torch_function.py``; module-level builders (``from_dict``, ``merge_tensordicts``, ...) in
    ``_core/constructors.py`` and ``_core/combining.py``.
    """

    __slots__ = ()
    _is_tensor_collection = True
    _is_non_tensor = False
    _is_lazy = False

    # ------------------------------------------------------------------ primitives
    def _items_raw(self) -> Iterable[tuple[str, Any]]:
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
        """The leading dims every entry shares (assignable on :class:`~tdict.TensorDict`)."""
        raise NotImplementedError

    if TYPE_CHECKING:  # implemented by each concrete class (TensorDict, LazyStackedTensorDict, NonTensorData...)

        @property
        def device(self) -> torch.device | None: ...

        @property
        def names(self) -> list: ...

        @names.setter
        def names(self, value: Sequence[str | None] | None) -> None: ...

        def to(self, *args: Any, **kwargs: Any) -> TensorDictBase: ...

        # ``td.to_module(module, ...)``: attached at the end of tdict/tensordict.py (tdict._core.functional)
        to_module: Callable[..., Any]

    # ------------------------------------------------------------------ shape info
    @property
    def shape(self) -> torch.Size:
        """The batch size (same as :attr:`batch_size`)."""
        return self.batch_size

    @property
    def batch_dims(self) -> int:
        """The number of batch dims."""
        return len(self.batch_size)

    @property
    def ndim(self) -> int:
        """The number of batch dims."""
        return len(self.batch_size)

    def ndimension(self) -> int:
        """The number of batch dims."""
        return len(self.batch_size)

    def dim(self) -> int:
        """The number of batch dims."""
        return len(self.batch_size)

    def size(self, dim: int | None = None) -> torch.Size | int:
        """The batch size, or its size along ``dim`` when given."""
        return self.batch_size if dim is None else self.batch_size[dim]

    def numel(self) -> int:
        """The number of elements of the batch (the product of the batch size)."""
        return self.batch_size.numel()

    def __len__(self) -> int:
        return self.batch_size[0] if self.batch_size else 0

    def __bool__(self) -> bool:
        raise RuntimeError(
            f"Converting a tensordict to boolean value is not permitted ({type(self).__name__} holds many values, "
            "its truth is ambiguous): use .all() or .any()."
        )

    def __iter__(self) -> Iterator["TensorDictBase"]:
        if not self.batch_size:
            raise StopIteration
        for i in range(self.batch_size[0]):
            yield self._index(i)

    @property
    def is_locked(self) -> bool:
        """Whether adding and removing keys is forbidden (see :meth:`lock_`); assigning it locks or
        unlocks (recursively)."""
        return self._is_locked

    @is_locked.setter
    def is_locked(self, value: bool) -> None:
        (lock_graph if value else unlock_graph)(self)

    # ------------------------------------------------------------------ getting
    def _get_tuple(self, key: tuple, default: Any) -> Any:
        value = self
        for i, part in enumerate(key):
            if isinstance(value, torch.Tensor) or not is_tensor_collection(value) or value._is_non_tensor:
                raise KeyValueError(
                    f"Key {key!r}: Expected a TensorDictBase instance at {key[:i]!r}, but it is a leaf "
                    f"({type(value).__name__}) with no sub-key {part!r}."
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
        return KeyError(f"key {key!r} not found in {type(self).__name__} with keys {keys}.")

    def get_non_tensor(self, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
        """The Python object stored under ``key`` (the payload of a NonTensorData)."""
        value = self.get(key, default)
        if is_tensor_collection(value) and value._is_non_tensor:
            return value.tolist() if value._is_lazy else value.data
        return value

    def __getitem__(self, index: Any) -> Any:
        if type(index) is str:
            value = self._get_str(index, NO_DEFAULT)
        elif _is_key_index(index):
            value = self._get_tuple(_key_to_tuple(index), NO_DEFAULT)
        else:
            return self._index(index)
        if not isinstance(value, torch.Tensor) and type(value)._is_non_tensor:
            return value._linked_list() if value._is_lazy else value.data
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
    def set(self, key: NestedKey, item: Any, inplace: bool = False, *, non_blocking: bool = False) -> "TensorDictBase":
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
                raise locked_error(f"cannot add key {key!r}; unlock_() it first.")
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
                raise ShapeMismatchError(
                    f"Failed to update {key!r} with set_(): shape {tuple(item.shape)} does not match the existing "
                    f"{tuple(target.shape)}."
                )
            target.copy_(item)
        else:
            if not (is_tensor_collection(item) or target._is_non_tensor or type(item) is dict):
                item = self._to_leaf(item, key)
            target.update_(item)
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str or _is_key_index(index):
            self.set(index, value)
            return
        if type(value) is dict:  # read as a TensorDict of the indexed batch size
            from .tensordict import TensorDict

            value = TensorDict(value, batch_size=_indexed_batch_size(self.batch_size, index), device=self.device)
        self._set_at_index_creating(index, value)

    def _set_at_index_creating(self, index: Any, value: Any) -> None:
        """``self[index] = value`` for a batch index: ``_set_at_index``, after creating the keys that
        ``value`` has and ``self`` lacks where ``self`` creates keys (:meth:`_creates_keys_on_index_write`)."""
        try:
            self._set_at_index(index, value)  # checks every key and shape before its first write
            return
        except KeyError:
            if not self._creates_keys_on_index_write(value):
                raise
        created = self._create_missing_leaves(index, value)  # then write again, with every key there
        try:
            self._set_at_index(index, value)
        except BaseException:
            for key in created:  # the write was refused: the keys it would have added go too
                self.del_(key)
            raise

    def _creates_keys_on_index_write(self, value: Any) -> bool:
        """Whether ``self[index] = value`` creates the leaves ``self`` lacks: plain TensorDicts do
        (lazy stacks, tensor classes and files keep their keys)."""
        from .tensordict import TensorDict

        return type(self) is TensorDict and is_tensor_collection(value)

    def _create_missing_leaves(self, index: Any, value: Any) -> list:
        """For ``td[index] = value``: the tensor leaves of ``value`` that ``self`` lacks, created
        zero-filled with ``self``'s batch size (pre-allocation, as in tensordict), and its non-tensor
        entries, created holding the value's (first) payload over the whole batch; returns the keys to
        delete to undo it (the first missing key along each path: new sub-collections go too)."""
        missing = [
            (key, leaf)
            for key, leaf in value.items(True, True, is_leaf_nontensor)
            if type(leaf) not in UNBATCHED_TYPES and self.get(key, None) is None
        ]
        if not missing:
            return []
        if self.is_locked:
            raise locked_error(f"td[index] = value would add the keys {[k for k, _ in missing]}; unlock_() it first.")
        dest_bs = _indexed_batch_size(self.batch_size, index)
        for key, leaf in missing:
            shape = leaf.shape if isinstance(leaf, torch.Tensor) else leaf.batch_size
            check_write_shape(key, shape, dest_bs + shape[len(dest_bs) :], len(dest_bs))
        created: list = []
        for key, _ in missing:  # computed before any write: the first prefix of each path that is absent
            path = _key_to_tuple(key)
            prefix = next(path[:i] for i in range(1, len(path) + 1) if self.get(path[:i], None) is None)
            if not any(prefix[: len(c)] == c for c in created):
                created.append(prefix)
        for key, leaf in missing:
            if not isinstance(leaf, torch.Tensor):  # non-tensor data: the write below sets the indexed part
                full = self.batch_size + leaf.batch_size[len(dest_bs) :]
                self.set(key, leaf._emptied(full) if leaf._is_lazy else leaf._with_batch_size(full))
                continue
            self.set(
                key, torch.zeros(self.batch_size + leaf.shape[len(dest_bs) :], dtype=leaf.dtype, device=self.device)
            )
        return created

    def _set_at_index(self, index: Any, value: Any) -> None:
        """``td[index] = value``: write ``value`` into every leaf at ``index``, in place.

        All keys and shapes are checked before the first write.
        """
        non_tensor_pairs = []
        # UnbatchedTensors are not written through batch indices (they lack the batch dims)
        if not is_tensor_collection(value):
            pairs = [
                (key, value)
                for key, leaf in self.items(True, True)
                if isinstance(leaf, torch.Tensor) and type(leaf) not in UNBATCHED_TYPES
            ]
        else:
            dest_bs = _indexed_batch_size(self.batch_size, index)
            pairs = []
            for key, leaf in value.items(True, True, is_leaf_nontensor):
                if not isinstance(leaf, torch.Tensor):
                    target = self.get(key, None)
                    if (
                        leaf._is_non_tensor
                        and target is not None
                        and not isinstance(target, torch.Tensor)
                        and target._is_non_tensor
                    ):
                        non_tensor_pairs.append((key, target, leaf))
                    continue
                target = self.get(key, None)
                if type(target) in UNBATCHED_TYPES or type(leaf) in UNBATCHED_TYPES:
                    continue
                if not isinstance(target, torch.Tensor):
                    raise KeyError(
                        f"td[index] = value: key {key!r} of the value is not a tensor leaf of the destination."
                    )
                expected = dest_bs + target.shape[self.batch_dims :]
                check_write_shape(key, leaf.shape, expected, len(dest_bs))
                pairs.append((key, leaf))
        full_index = _expand_index(index, self.batch_dims)
        if non_tensor_pairs:  # copy-on-write leaves, computed (and checked) before any write
            non_tensor_pairs = [(key, target._set_at(full_index, leaf)) for key, target, leaf in non_tensor_pairs]
        for key, leaf in pairs:
            self.get(key)[full_index] = leaf
        for key, new in non_tensor_pairs:
            parent = self if isinstance(key, str) else self._get_tuple(key[:-1], NO_DEFAULT)
            parent._set_str(
                key if isinstance(key, str) else key[-1], new, inplace=False, validated=True, ignore_lock=True
            )

    # ------------------------------------------------------------------ copies, dtype, device
    def clone(self, recurse: bool = True, *, device: Any = None) -> "TensorDictBase":
        """A copy; ``recurse=False`` copies the structure but shares the tensors; ``device``: the copy's device."""
        out = (
            self.copy() if not recurse else self._map_entries(lambda v: v.clone(), self.batch_size, self._maybe_names())
        )
        return out if device is None else out.to(device)

    def copy(self) -> "TensorDictBase":
        """A shallow copy: new structure, same tensors."""
        return self._map_entries(
            lambda v: v if isinstance(v, torch.Tensor) else v.copy(), self.batch_size, self._maybe_names()
        )

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.clone()

    def copy_(self, other: "TensorDictBase", non_blocking: bool = False) -> "TensorDictBase":
        """Copy ``other``'s leaves into ``self`` in place."""
        return self.update_(other)

    def zero_(self) -> "TensorDictBase":
        """Set every tensor leaf to zero in place; returns ``self``."""
        for leaf in self._tensor_leaves()[1]:  # the real leaves (a lazy stack's members' too)
            leaf.zero_()
        return self

    def fill_(self, key: NestedKey, value: float | bool) -> "TensorDictBase":
        """Fill the entry ``key`` (a tensor or a whole sub-collection) with ``value``."""
        target = self.get(key)
        if isinstance(target, torch.Tensor):
            target.fill_(value)
        else:
            for leaf in target._tensor_leaves()[1]:
                leaf.fill_(value)
        return self

    @keeps_lock
    def detach(self) -> "TensorDictBase":
        """A copy whose leaves are detached from the autograd graph (they share storage with ``self``'s)."""
        return self._map_entries(lambda v: v.detach(), self.batch_size, self._maybe_names())

    def detach_(self) -> "TensorDictBase":
        """Detach every tensor leaf from the autograd graph in place; returns ``self``."""
        for leaf in self._tensor_leaves()[1]:
            leaf.detach_()
        return self

    def requires_grad_(self, requires_grad: bool = True) -> "TensorDictBase":
        """Set ``requires_grad`` on every tensor leaf; returns ``self``."""
        for leaf in self._tensor_leaves()[1]:
            leaf.requires_grad_(requires_grad)
        return self

    @property
    def requires_grad(self) -> bool:
        """Whether any tensor leaf requires a gradient."""
        return any(leaf.requires_grad for leaf in self._tensor_leaves()[1])

    def float(self) -> "TensorDictBase":
        """Cast the tensor leaves to ``torch.float32``: ``self.to(torch.float32)``."""
        return self.to(torch.float32)

    def double(self) -> "TensorDictBase":
        """Cast the tensor leaves to ``torch.float64``: ``self.to(torch.float64)``."""
        return self.to(torch.float64)

    def half(self) -> "TensorDictBase":
        """Cast the tensor leaves to ``torch.float16``: ``self.to(torch.float16)``."""
        return self.to(torch.float16)

    def bfloat16(self) -> "TensorDictBase":
        """Cast the tensor leaves to ``torch.bfloat16``: ``self.to(torch.bfloat16)``."""
        return self.to(torch.bfloat16)

    def int(self) -> "TensorDictBase":
        """Cast the tensor leaves to ``torch.int32``: ``self.to(torch.int32)``."""
        return self.to(torch.int32)

    def long(self) -> "TensorDictBase":
        """Cast the tensor leaves to ``torch.int64``: ``self.to(torch.int64)``."""
        return self.to(torch.int64)

    def bool(self) -> "TensorDictBase":
        """Cast the tensor leaves to ``torch.bool``: ``self.to(torch.bool)``."""
        return self.to(torch.bool)

    def cpu(self, *, non_blocking: bool = False) -> "TensorDictBase":
        """Move to the CPU: ``self.to("cpu")``."""
        return self.to("cpu", non_blocking=non_blocking)

    def cuda(self, device: Any = None, *, non_blocking: bool = False) -> "TensorDictBase":
        """Move to ``device`` (default ``"cuda"``): ``self.to(device)``."""
        return self.to(torch.device("cuda") if device is None else parse_device(device), non_blocking=non_blocking)

    def pin_memory(self, num_threads: int | None = None, inplace: bool = False) -> "TensorDictBase":
        """A copy with tensor leaves in page-locked memory (``inplace=True``: replace them in ``self``).

        ``num_threads`` is accepted for compatibility and ignored.
        """
        if inplace:
            for key, value in list(self.items(True, True)):
                if isinstance(value, torch.Tensor):
                    self.set(key, value.pin_memory())
            return self
        return self._map_entries(lambda v: v.pin_memory(), self.batch_size, self._maybe_names())

    def is_shared(self) -> bool:
        """Whether every tensor leaf is in shared memory or on a CUDA device (False without leaves)."""
        leaves = self._tensor_leaves()[1]  # member leaves of lazy stacks: nothing is stacked
        return bool(leaves) and all(v.is_shared() or v.is_cuda for v in leaves)

    def share_memory_(self) -> "TensorDictBase":
        """Move every leaf to shared memory (visible across processes) and lock the structure."""
        for leaf in self._tensor_leaves()[1]:
            leaf.share_memory_()
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

    def tolist(
        self, *, convert_nodes: bool = True, convert_tensors: bool | str = False, tolist_first: bool = False
    ) -> Any:
        """The batch as nested lists (one level per batch dim) of its elements.

        Args:
            convert_nodes: each element as a dict (else the element collection itself).
            convert_tensors: the tensors in those dicts as Python lists (``True``), numpy arrays
                (``"numpy"``) or kept as tensors (``False``); needs ``convert_nodes=True``.
            tolist_first: a nested collection with batch dims of its own becomes nested lists too
                (else a dict of its whole tensors).

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.arange(4).view(2, 2), b={"c": torch.zeros(2, 2)}, batch_size=[2])
            >>> td.tolist(convert_tensors=True)
            [{'a': [0, 1], 'b': {'c': [0.0, 0.0]}}, {'a': [2, 3], 'b': {'c': [0.0, 0.0]}}]
            >>> td["b"].batch_size = [2, 2]
            >>> td.tolist(convert_tensors=True, tolist_first=True)[0]["b"]
            [{'c': 0.0}, {'c': 0.0}]
        """
        if convert_tensors not in (True, False, "numpy"):
            raise ValueError(f"tolist: convert_tensors must be True, False or 'numpy', got {convert_tensors!r}.")
        if convert_tensors and not convert_nodes:
            raise TypeError(
                "tolist: convert_tensors needs convert_nodes=True (tensors are converted inside the element dicts)."
            )
        if self.batch_size:
            return [
                sub.tolist(convert_nodes=convert_nodes, convert_tensors=convert_tensors, tolist_first=tolist_first)
                for sub in self
            ]
        if not convert_nodes:
            return self
        return _element_dict(self, convert_tensors, tolist_first)

    def numpy(self) -> dict:
        """A nested dict of numpy arrays (non-tensor entries keep their Python objects)."""
        return _numpy_tree(self.to_dict())

    # ------------------------------------------------------------------ locking
    def lock_(self) -> "TensorDictBase":
        """Forbid adding or removing keys (recursively); usable as a context manager, which
        restores the previous state on exit (an already-locked collection stays locked).

        The collections under it cannot be unlocked on their own while it stays locked."""
        was_locked = bool(self._is_locked)  # a lazy stack's is None when it was not locked itself
        lock_graph(self)
        self._push_op(was_locked)
        return self

    def unlock_(self) -> "TensorDictBase":
        """Allow adding and removing keys again; as a context manager, restores the previous state on exit.

        A consolidated collection stops being one (see :mod:`tdict.consolidate`). Raises
        ``RuntimeError`` (changing nothing) when a locked collection holds this one or one under it
        (a parent, or a second locked tree sharing a child)."""
        was_locked = bool(self._is_locked)
        unlock_graph(self)  # first: it may refuse
        if getattr(self, "_consolidated", None) is not None:
            delattr(self, "_consolidated")  # its structure may change from now on
        self._push_op(was_locked)
        return self

    def clear_refs_for_compile_(self) -> "TensorDictBase":
        """Returns ``self``: tdict collections hold no weak references that a compiled region would
        have to drop before returning them (tensordict's method clears its own)."""
        return self

    def _set_lock(self, locked: bool) -> None:
        self._is_locked = locked
        for _, value in self._items_raw():
            if not isinstance(value, torch.Tensor):
                value._set_lock(locked)

    def _push_op(self, op: Any) -> None:
        """Remember what leaving the next ``with`` block must undo: the lock state before a
        lock_/unlock_ (a bool), or a callable (to_module, write-backs of flatten_keys & co)."""
        ops = getattr(self, "_lock_ops", None)
        if ops is None:
            try:
                ops = self._lock_ops = []
            except AttributeError:  # no _lock_ops slot (non-tensor data): nothing to undo on exit
                return
        ops.append(op)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        last = self._pop_op()
        if type(last) is _WriteBack:  # the block's result goes back to the source, unless it failed
            if exc_type is None:
                last.fn(self)
            return False
        if callable(last):  # pushed by to_module: put the module's previous tensors back
            last()
            return False  # an exception raised inside the block still propagates
        if last is not None:
            (lock_graph if last else unlock_graph)(self)
        return False

    def _pop_op(self):
        ops = getattr(self, "_lock_ops", None)
        return ops.pop() if ops else None

    # ------------------------------------------------------------------ names
    def _maybe_names(self):
        return None

    def refine_names(self, *names: str | None) -> "TensorDictBase":
        """Set names on unnamed dims (``...``, anywhere once, stands for the dims it covers, kept as they are)."""
        current = list(self.names)
        refined: list[str | None] = list(names)
        if Ellipsis in names:
            at = names.index(Ellipsis)
            fill = self.batch_dims - len(names) + 1
            if fill < 0 or Ellipsis in names[at + 1 :]:
                raise ValueError(f"refine_names: {names!r} does not fit {self.batch_dims} dims (one ... at most).")
            refined = list(names[:at]) + current[at : at + fill] + list(names[at + 1 :])
        if len(refined) != self.batch_dims:
            raise ValueError(f"refine_names: expected {self.batch_dims} names, got {len(refined)}.")
        for i, (old, new) in enumerate(zip(current, refined)):
            if old is not None and new is not None and old != new:
                raise RuntimeError(
                    f"refine_names: cannot coerce TensorDict names {current} to {refined}: dim {i} is already named "
                    f"{old!r}, it cannot be renamed {new!r}."
                )
            if new is None:
                refined[i] = old
        self.names = refined
        return self

    def rename(self, *names: str | None, **rename_map: str) -> "TensorDictBase":
        """A shallow copy with new dim names (positional) or renamed dims (keyword)."""
        out = self.copy()
        out.rename_(*names, **rename_map)
        return out

    def rename_(self, *names: str | None, **rename_map: str) -> "TensorDictBase":
        """Set new dim names (positional) or rename dims (``old=new`` keywords) in place; returns ``self``.

        Raises:
            ValueError: a keyword names no existing dim.
        """
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

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        handler = TD_HANDLED_FUNCTIONS.get(func)
        if handler is None:
            return NotImplemented
        return handler(*args, **(kwargs or {}))

    def __repr__(self) -> str:
        return _repr(self, 0)


def _element_dict(td: Any, convert_tensors: bool | str, tolist_first: bool) -> dict:
    """``td``'s entries as a dict, for :meth:`TensorDictBase.tolist`."""
    out = {}
    for key, value in td._items_raw():
        if isinstance(value, torch.Tensor):
            if convert_tensors == "numpy":
                out[key] = value.detach().cpu().numpy()
            else:
                out[key] = value.tolist() if convert_tensors else value
        elif value._is_non_tensor:
            out[key] = value.tolist() if value._is_lazy else value.data
        elif tolist_first and value.batch_size:
            out[key] = value.tolist(convert_tensors=convert_tensors, tolist_first=True)
        else:
            out[key] = _element_dict(value, convert_tensors, tolist_first)
    return out


def _numpy_tree(tree: dict) -> dict:
    return {
        k: _numpy_tree(v) if isinstance(v, dict) else v.numpy() if isinstance(v, torch.Tensor) else v
        for k, v in tree.items()
    }


def _repr(td: TensorDictBase, indent: int) -> str:
    pad = " " * (indent + 8)
    lines = []
    for key, value in td._items_raw():
        if isinstance(value, torch.Tensor):
            desc = f"{type(value).__name__}(shape={value.shape}, device={value.device}, dtype={value.dtype}, is_shared={value.is_shared()})"
        else:
            desc = (
                repr(value)
                if value._is_non_tensor
                else value._repr_nested(indent + 8)
                if value._is_lazy
                else _repr(value, indent + 8)
            )
        lines.append(f"{pad}{key}: {desc}")
    fields = ",\n".join(lines)
    inner = " " * (indent + 4)
    return (
        f"{type(td).__name__}(\n{inner}fields={{\n{fields}}},\n{inner}batch_size={td.batch_size},\n"
        f"{inner}device={td.device},\n{inner}is_shared={td.is_shared()})"
    )


def _is_key_index(index: Any) -> bool:
    """``td[("a", "b")]`` addresses a nested key; ``td[0, 1]`` indexes the batch."""
    return isinstance(index, tuple) and bool(index) and isinstance(index[0], (str, tuple)) and _is_key_tuple(index)
