"""PersistentTensorDict: a TensorDict whose entries live in an HDF5 file (h5py).

Datasets are tensor leaves, groups are nested PersistentTensorDicts, string / opaque datasets are
non-tensor data. Nothing is loaded up front: ``get`` reads the dataset it names, indexing returns
a view (another PersistentTensorDict) whose index is applied when reading and writing, and writes
(``set``, ``set_``, ``update``, ``td[index] = value``, in-place math) go to the file. Operations
that make new data (arithmetic, reductions, shape ops, ``clone()``) return in-memory TensorDicts.

h5py is an optional dependency: ``pip install rl-tdict[h5]``.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Sequence

import torch

from ._core.indexing import _normalize_index
from ._core.key_ops import _write_back_on_exit
from ._core.names import indexed_names
from ._core.utils import (
    NO_DEFAULT,
    NestedKey,
    _key_to_tuple,
    parse_batch_size,
    parse_device,
    parse_to_args,
    unravel_key,
)
from ._persistent import h5
from ._persistent.layout import (
    PersistentKeysView,
    check_group,
    infer_batch_sizes,
    load_batch_sizes,
    parsed_names,
    plan_batch_size,
    repr_of,
    store_batch_sizes,
    tree_restore,
    tree_state,
)
from ._persistent.writes import DATASET_KWARGS, PersistentWritesMixin, dense_first, install_through_memory
from .base import _MISSING, TensorDictBase, is_tensor_collection
from .files import atomic_write_to
from .non_tensor import NonTensorData
from .tensordict import TensorDict

__all__ = ["PersistentTensorDict"]


class PersistentTensorDict(PersistentWritesMixin, TensorDictBase):
    """A TensorDict backed by an HDF5 file or group (read lazily, written through).

    Build one with :meth:`from_h5` (open a file), :meth:`from_dict` / ``td.to_h5(filename)``
    (write a new file), or the constructor (an open file name or an ``h5py.Group``).

    Args:
        batch_size: the leading dims every dataset shares (default ``[]``).
        filename: path of the HDF5 file to open (exclusive with ``group``).
        group: an open ``h5py.File`` or ``h5py.Group`` (exclusive with ``filename``).
        mode: h5py's file mode when opening ``filename`` (``"r"``, ``"r+"``, ``"a"``, ``"w"``).
        device: where the tensors read from the file are put (default: the CPU).
        names: optional names of the batch dims.
        validate_batch_size: check every dataset against ``batch_size`` right away.
        **kwargs: keywords for ``h5py.Group.create_dataset`` (``compression="gzip"``...), used
            for every dataset this object creates.

    Semantics:
        - ``td[index]`` is a view: reads and writes apply the index on the file. Basic indices
          (ints, positive-step slices) go to h5py as they are; index tensors, masks and lists read
          (and for writes, rewrite) the bounding box of the selected elements.
        - ``set`` replaces a dataset (written in place when shape and dtype are unchanged); in a
          view it writes in place. ``set_``, ``update_`` and ``td[index] = value`` write in place.
        - ``clone()`` and ``to_tensordict()`` load everything into a TensorDict;
          ``clone(newfile=path)`` copies into a new file; ``clone(recurse=False)`` and ``to(device)``
          give another PersistentTensorDict on the same file.
        - strings come back as ``bytes`` (as h5py reads them), other non-tensor data as numpy
          values or the JSON value they were stored as; nothing is ever unpickled.
        - ``select``, ``exclude``, ``view``, ``permute``, ``transpose``, ``squeeze``,
          ``unsqueeze``, in-place ``flatten_keys``, ``memmap_``, ``share_memory_``, ``pin_memory``
          and vmap raise: call :meth:`to_tensordict` first.

    Examples:
        >>> import tempfile, os, torch
        >>> from tdict import TensorDict, PersistentTensorDict
        >>> path = os.path.join(tempfile.mkdtemp(), "data.h5")
        >>> td = TensorDict({"obs": torch.arange(12.0).view(4, 3), "nested": {"r": torch.zeros(4)}}, [4])
        >>> ptd = td.to_h5(path)
        >>> ptd["obs"][1]
        tensor([3., 4., 5.])
        >>> ptd[1:3]["nested", "r"] = torch.ones(2)
        >>> ptd.close()
        >>> PersistentTensorDict.from_h5(path)["nested", "r"]
        tensor([0., 1., 1., 0.])
    """

    _is_persistent = True

    def __init__(
        self,
        *,
        batch_size: Sequence[int] | torch.Size | int | None = None,
        filename: str | os.PathLike | None = None,
        group: Any = None,
        mode: str = "r",
        device: Any = None,
        names: Sequence[str | None] | None = None,
        validate_batch_size: bool = True,
        **kwargs: Any,
    ) -> None:
        h5py = h5.require_h5py()
        if (filename is None) == (group is None):
            raise ValueError(
                f"PersistentTensorDict: pass exactly one of filename= and group=, got filename={filename!r}, group={group!r}."
            )
        if group is not None and not isinstance(group, h5py.Group):
            raise TypeError(
                f"PersistentTensorDict: group= must be an h5py.File or h5py.Group, got {type(group).__name__}."
            )
        unknown = sorted(set(kwargs) - DATASET_KWARGS)
        if unknown:
            raise TypeError(
                f"PersistentTensorDict: unexpected keyword arguments {unknown}; extra keywords go to "
                f"h5py's create_dataset and must be among {sorted(DATASET_KWARGS)}."
            )
        bs = parse_batch_size(batch_size)
        checked_names = None if names is None else parsed_names(names, len(bs))
        if group is None:
            assert filename is not None  # one of the two, checked above
            group = h5py.File(os.fspath(filename), mode)
        try:
            if validate_batch_size:
                check_group(group, bs, ())
        except BaseException:
            if filename is not None:
                group.close()
            raise
        self._init(group, bs, parse_device(device), checked_names, dict(kwargs), mode)

    def _init(self, group: Any, bs: torch.Size, device: Any, names: Any, kwargs: dict, mode: str) -> None:
        self._group = group
        self._full_bs = bs
        self._batch_size = bs
        self._sel: h5.Selection | None = None
        self._device = device
        self._names = names
        self._kwargs = kwargs
        self._mode = mode
        self._is_locked = False
        self._lock_ops: list | None = None
        self._children: dict[str, PersistentTensorDict] = {}
        self._origin = self  # the unindexed PersistentTensorDict a view reads through

    @classmethod
    def _of_group(
        cls, group: Any, bs: torch.Size, device: Any, names: Any, kwargs: dict, mode: str
    ) -> "PersistentTensorDict":
        self = object.__new__(cls)
        self._init(group, bs, device, names, kwargs, mode)
        return self

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_h5(
        cls,
        filename: str | os.PathLike,
        *,
        mode: str = "r",
        batch_size: Sequence[int] | torch.Size | None = None,
        device: Any = None,
    ) -> "PersistentTensorDict":
        """Open an HDF5 file. Without ``batch_size``, each group takes the batch size stored by
        :meth:`from_dict` / ``to_h5``, or else the longest leading shape its datasets and groups share.

        Examples:
            >>> import tempfile, os, torch
            >>> from tdict import TensorDict
            >>> path = os.path.join(tempfile.mkdtemp(), "data.h5")
            >>> TensorDict(a=torch.zeros(3, 4), batch_size=[3]).to_h5(path).close()
            >>> PersistentTensorDict.from_h5(path).batch_size
            torch.Size([3])
        """
        out = cls(filename=filename, mode=mode, batch_size=batch_size, device=device)
        if batch_size is None and not load_batch_sizes(out):
            infer_batch_sizes(out)
        return out

    @classmethod
    def _of_h5_group(cls, group: Any, batch_size: Any = None) -> "PersistentTensorDict":
        """An open ``h5py.Group`` / ``h5py.File`` (its mode kept); batch sizes inferred unless given."""
        out = cls(group=group, batch_size=batch_size, mode=group.file.mode)
        if batch_size is None:
            infer_batch_sizes(out)
        return out

    @classmethod
    def from_dict(
        cls,
        input_dict: Any,
        filename: str | os.PathLike,
        *,
        batch_size: Sequence[int] | torch.Size | None = None,
        device: Any = None,
        auto_batch_size: bool = False,
        mode: str = "r+",
        **kwargs: Any,
    ) -> "PersistentTensorDict":
        """Write ``input_dict`` (a dict or a tensor collection) to a new HDF5 file and open it.

        The file is written under a temporary name in the same folder and renamed over
        ``filename`` once complete, so a crash leaves the previous file (or none), never a partial one.
        ``batch_size``: defaults to the collection's (``[]`` for a dict unless ``auto_batch_size``).
        ``mode``: how the new file is then opened (``"r+"``: writable). ``kwargs`` go to h5py's
        ``create_dataset`` (``compression="gzip"``...).

        Examples:
            >>> import tempfile, os, torch
            >>> path = os.path.join(tempfile.mkdtemp(), "data.h5")
            >>> ptd = PersistentTensorDict.from_dict({"a": torch.zeros(2, 3)}, path, auto_batch_size=True)
            >>> ptd.batch_size
            torch.Size([2, 3])
        """
        h5py = h5.require_h5py()
        unknown = sorted(set(kwargs) - DATASET_KWARGS)
        if unknown:
            raise TypeError(
                f"from_dict: unexpected keyword arguments {unknown}; extra keywords go to h5py's "
                f"create_dataset and must be among {sorted(DATASET_KWARGS)}."
            )
        if is_tensor_collection(input_dict):
            if input_dict._is_non_tensor:
                raise TypeError(f"from_dict: expected a dict or a TensorDict, got {type(input_dict).__name__}.")
            source = input_dict
        elif isinstance(input_dict, dict):
            source = TensorDict(input_dict, batch_size=[] if batch_size is None else batch_size)
        else:
            raise TypeError(f"from_dict: expected a dict or a TensorDict, got {type(input_dict).__name__}.")
        if batch_size is not None:
            bs = parse_batch_size(batch_size)
            if source.batch_size[: len(bs)] != bs:
                raise RuntimeError(
                    f"from_dict: batch_size {list(bs)} is not a prefix of the data's batch size {list(source.batch_size)}."
                )
        names = source._maybe_names()

        def write(tmp: str) -> None:
            with h5py.File(tmp, "w", track_order=True) as f:
                writer = cls._of_group(f, source.batch_size, None, names, dict(kwargs), "w")
                writer.update(source)
                store_batch_sizes(writer)

        atomic_write_to(filename, write, suffix=".h5", fsync=False)
        out = cls(filename=filename, mode=mode, device=device, validate_batch_size=False, **kwargs)
        if not load_batch_sizes(out):  # pragma: no cover - written just above
            raise RuntimeError(f"from_dict: {filename!r} was changed while it was being written.")
        if batch_size is not None:
            out.batch_size = batch_size
        elif auto_batch_size or not is_tensor_collection(input_dict):
            infer_batch_sizes(out)
        return out

    # ------------------------------------------------------------------ file
    @property
    def file(self) -> Any:
        """The ``h5py.File`` (or ``h5py.Group``, for a nested collection) holding the data."""
        return self._group

    @property
    def filename(self) -> str:
        """Path of the HDF5 file."""
        return self._group.file.filename

    @property
    def mode(self) -> str:
        """The mode the file was opened with."""
        return self._mode

    def close(self) -> None:
        """Close the HDF5 file (of every collection and view on it); closing it again does nothing."""
        if self._group.id.valid:
            self._group.file.close()

    # ------------------------------------------------------------------ attributes
    @property
    def batch_size(self) -> torch.Size:
        return self._batch_size

    @batch_size.setter
    def batch_size(self, new: Any) -> None:
        if self._sel is not None:
            raise RuntimeError("Cannot set the batch size of an indexed PersistentTensorDict (a view).")
        new = parse_batch_size(new)
        plan: list = []
        plan_batch_size(self, new, plan, ())  # every dataset checked before anything changes
        for td, bs in plan:
            if td._names is not None and len(td._names) != len(bs):
                td._names = None
            td._full_bs = td._batch_size = bs

    @property
    def device(self) -> torch.device | None:
        """Where the tensors read from the file are put (``None``: the CPU)."""
        return self._device

    @device.setter
    def device(self, value: Any) -> None:
        raise RuntimeError("device cannot be assigned: use td.to(device) or td.clear_device_().")

    def clear_device_(self) -> "PersistentTensorDict":
        """Forget the device (reads then land on the CPU)."""
        self._device = None
        for child in self._children.values():
            child.clear_device_()
        return self

    @property
    def names(self) -> list:
        """The batch dim names (``None`` for an unnamed dim); assignable."""
        return list(self._names) if self._names is not None else [None] * len(self._batch_size)

    @names.setter
    def names(self, value: Sequence[str | None] | None) -> None:
        value = None if value is None else parsed_names(value, len(self._batch_size))
        self._names = value
        if self._sel is None:
            for child in self._children.values():
                extra = [None] * (child.batch_dims - len(self._batch_size))
                child.names = None if value is None else list(value) + extra

    def _maybe_names(self):
        return self._names

    def _set_lock(self, locked: bool) -> None:
        self._is_locked = locked
        for child in self._children.values():
            child._set_lock(locked)

    # ------------------------------------------------------------------ reading
    def _node(self, key: str) -> Any:
        """The h5py object under ``key`` (None when absent)."""
        if "/" in key or not key:
            return None
        return self._group.get(key)

    def _child(self, key: str, group: Any) -> "PersistentTensorDict":
        """The nested collection of ``group`` (a view when ``self`` is one)."""
        origin = self._origin
        child = origin._children.get(key)
        if child is None:
            child = PersistentTensorDict._of_group(
                group, origin._full_bs, origin._device, origin._names, origin._kwargs, origin._mode
            )
            child._is_locked = origin._is_locked
            origin._children[key] = child
        if self._sel is None:
            return child
        extra = child._full_bs[len(origin._full_bs) :]
        names = None
        if self._names is not None or child._names is not None:
            names = self.names + child.names[len(origin._full_bs) :]
        return child._view(self._sel.extend(extra), names)

    def _view(self, sel: h5.Selection, names: Any) -> "PersistentTensorDict":
        """A view of ``self`` (unindexed) through ``sel``."""
        origin = self._origin
        out = object.__new__(PersistentTensorDict)
        out._init(origin._group, origin._full_bs, origin._device, None, origin._kwargs, origin._mode)
        out._sel = sel
        out._batch_size = sel.shape
        out._names = names if names is not None and any(n is not None for n in names) else None
        out._is_locked = origin._is_locked
        out._origin = origin
        return out

    def _read(self, key: str, node: Any) -> Any:
        h5py = h5.require_h5py()
        if isinstance(node, h5py.Group):
            return self._child(key, node)
        if h5.is_non_tensor_dataset(node):
            return NonTensorData(data=h5.read_non_tensor(node), batch_size=self._batch_size, device=self._device)
        value = h5.decode(node[()], node) if self._sel is None else self._sel.read(node)
        if self._device is not None and self._device.type != "cpu":
            value = value.to(self._device)
        return value

    def _get_str(self, key: str, default: Any) -> Any:
        node = self._node(key)
        if node is None:
            if default is NO_DEFAULT:
                raise self._missing_key_error(key)
            return default
        return self._read(key, node)

    def _items_raw(self) -> Iterable[tuple[str, Any]]:
        group = self._group
        return [(key, self._read(key, group[key])) for key in group.keys()]

    def _tensor_leaves(self) -> tuple[list, list]:
        keys, leaves = [], []
        for key, value in self._items_raw():
            if isinstance(value, torch.Tensor):
                keys.append(key)
                leaves.append(value)
            elif not value._is_non_tensor:
                sub_keys, sub_leaves = value._tensor_leaves()
                keys.extend((key,) + _key_to_tuple(k) for k in sub_keys)
                leaves.extend(sub_leaves)
        return keys, leaves

    def _kinds(self) -> list[tuple[str, str, Any]]:
        """``(key, kind, h5py object)`` per entry, kind in ``"tensor" / "non_tensor" / "group"``, no data read."""
        h5py = h5.require_h5py()
        out = []
        for key, node in self._group.items():
            if isinstance(node, h5py.Group):
                out.append((key, "group", node))
            elif h5.is_non_tensor_dataset(node):
                out.append((key, "non_tensor", node))
            else:
                out.append((key, "tensor", node))
        return out

    def keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable | None = None,
        *,
        sort: bool = False,
    ):
        """The keys, read from the file's structure (no data is loaded)."""
        return PersistentKeysView(self, include_nested, leaves_only, is_leaf, sort)

    def __contains__(self, key: Any) -> bool:
        if type(key) is str:
            return self._node(key) is not None
        if isinstance(key, tuple):
            return self._path_node(_key_to_tuple(key)) is not None
        raise TypeError(f"'in' expects a key (str or tuple of str), got {type(key).__name__}.")

    def _path_node(self, parts: tuple) -> Any:
        h5py = h5.require_h5py()
        node = self._group
        for part in parts:
            if not isinstance(node, h5py.Group) or "/" in part or not part:
                return None
            node = node.get(part)
            if node is None:
                return None
        return node

    def get_item_shape(self, key: NestedKey) -> torch.Size:
        """The shape of the entry at ``key`` (a batch size for a nested collection), read from the metadata."""
        parts = _key_to_tuple(key)
        parent = self if len(parts) == 1 else self._get_tuple(parts[:-1], NO_DEFAULT)
        node = parent._node(parts[-1]) if isinstance(parent, PersistentTensorDict) else None
        if node is None:
            return super().get_item_shape(key)
        h5py = h5.require_h5py()
        if isinstance(node, h5py.Group):
            return parent._child(parts[-1], node).batch_size
        if h5.is_non_tensor_dataset(node):
            return parent.batch_size
        return parent.batch_size + torch.Size(node.shape[len(parent._full_bs) :])

    # ------------------------------------------------------------------ writing
    # ------------------------------------------------------------------ indexing
    def _index(self, index: Any) -> "PersistentTensorDict":
        if isinstance(index, range):
            index = torch.tensor(list(index))
        elif isinstance(index, tuple):
            index = tuple(torch.tensor(list(p)) if isinstance(p, range) else p for p in index)
        index = _normalize_index(index, self._batch_size)
        sel = (self._sel or h5.Selection.full(self._full_bs)).index(index)
        names = indexed_names(self._names, index, len(sel.shape)) if self._names is not None else None
        return self._origin._view(sel, names)

    # ------------------------------------------------------------------ copies, conversions
    def _map_entries(self, fn: Callable[[Any], Any], batch_size: torch.Size, names: Any = None) -> TensorDict:
        return TensorDict._new_unsafe({k: fn(v) for k, v in self._items_raw()}, batch_size, self._device, names)

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDict:
        """Load everything into an in-memory :class:`~tdict.TensorDict`."""
        out = {}
        for key, value in self._items_raw():
            if isinstance(value, torch.Tensor):
                out[key] = value
            elif value._is_non_tensor:
                out[key] = value
            else:
                out[key] = value.to_tensordict(retain_none=retain_none)
        return TensorDict._new_unsafe(out, self._batch_size, self._device, self._names)

    def contiguous(self, *, canonical: bool = False) -> TensorDict:
        """Load everything into an in-memory :class:`~tdict.TensorDict` (same as :meth:`to_tensordict`; the
        loaded tensors are new, with row-major strides, so ``canonical`` changes nothing)."""
        return self.to_tensordict()

    def clone(self, recurse: bool = True, *, device: Any = None, newfile: Any = None) -> TensorDictBase:
        """A copy: in memory (a TensorDict) by default; ``newfile``: a new HDF5 file holding this
        data (another PersistentTensorDict); ``recurse=False``: another PersistentTensorDict on the same file."""
        if not recurse:
            out = self.copy()
            return out if device is None else out.to(device)
        if newfile is not None:
            return PersistentTensorDict.from_dict(
                self, newfile, device=device if device is not None else self._device, **self._kwargs
            )
        out = self.to_tensordict()
        return out if device is None else out.to(device)

    def copy(self) -> "PersistentTensorDict":
        """Another PersistentTensorDict on the same file (nested batch sizes and names kept)."""
        return self._shallow(self._device)

    def _shallow(self, device: Any) -> "PersistentTensorDict":
        origin = self._origin
        out = PersistentTensorDict._of_group(
            origin._group, origin._full_bs, device, origin._names, origin._kwargs, origin._mode
        )
        out._is_locked = origin._is_locked
        out._children = {k: c._shallow(device) for k, c in origin._children.items()}
        if self._sel is None:
            return out
        return out._view(self._sel, self._names)

    def to(self, *args: Any, **kwargs: Any) -> TensorDictBase:
        """``to(device)``: the same file, read onto ``device``; ``to(dtype)``: an in-memory TensorDict."""
        if kwargs.pop("inplace", False):
            raise TypeError("Cannot use inplace=True with PersistentTensorDict.to(): the data lives in a file.")
        if kwargs.pop("non_blocking_pin", False):
            raise RuntimeError(
                "Cannot use non_blocking_pin=True PersistentTensorDict.to(): call to_tensordict() first."
            )
        kwargs.pop("num_threads", None)
        device, dtype, non_blocking, batch_size = parse_to_args(args, dict(kwargs))
        if dtype is not None:
            out = self.to_tensordict()
            out = out.to(dtype) if device is None else out.to(device, dtype)
            if batch_size is not None:
                out.batch_size = batch_size
            return out
        result: PersistentTensorDict = self
        if device is not None and device != self._device:
            result = self._shallow(device)
        if batch_size is not None:
            if result is self:
                result = self._shallow(self._device)
            result.batch_size = batch_size
        return result

    def where(self, condition: torch.Tensor, other: Any, *, out: Any = None, pad: Any = None) -> Any:
        """``torch.where`` on the loaded values (an in-memory result; ``out`` cannot be a PersistentTensorDict)."""
        if isinstance(out, PersistentTensorDict):
            raise RuntimeError("Cannot use a persistent tensordict as output of torch.where: pass a TensorDict.")
        return self.to_tensordict().where(condition, other, out=out, pad=pad)

    def detach_(self) -> "PersistentTensorDict":
        """Nothing to do: values read from the file carry no autograd graph."""
        return self

    def is_shared(self) -> bool:
        return False

    def is_memmap(self) -> bool:
        return False

    def is_contiguous(self) -> bool:
        return False

    # ------------------------------------------------------------------ unsupported
    def select(self, *keys: NestedKey, inplace: bool = False, strict: bool = True) -> TensorDictBase:
        raise NotImplementedError("Cannot call select on a PersistentTensorDict: load it with to_tensordict() first.")

    def exclude(self, *keys: NestedKey, inplace: bool = False) -> TensorDictBase:
        raise NotImplementedError("Cannot call exclude on a PersistentTensorDict: load it with to_tensordict() first.")

    def flatten_keys(
        self, separator: str = ".", inplace: bool = False, is_leaf: Callable | None = None
    ) -> TensorDictBase:
        """A TensorDict with flat ``"a.b"`` keys (loaded into memory); as a context manager, what
        the block changes is written back into the file on exit."""
        if inplace:
            raise ValueError("Cannot call flatten_keys in_place with a PersistentTensorDict: the file layout is kept.")
        out = self.to_tensordict().flatten_keys(separator, is_leaf=is_leaf)
        out._pop_op()  # written back here, not into the loaded copy
        _write_back_on_exit(self, out, lambda result: result.unflatten_keys(separator))
        return out

    def unflatten_keys(self, separator: str = ".", inplace: bool = False) -> TensorDictBase:
        """A TensorDict with ``"a.b"`` keys nested (loaded into memory); as a context manager, what
        the block changes is written back into the file on exit."""
        if inplace:
            raise ValueError(
                "Cannot call unflatten_keys in_place with a PersistentTensorDict: the file layout is kept."
            )
        out = self.to_tensordict().unflatten_keys(separator)
        out._pop_op()
        _write_back_on_exit(self, out, lambda result: result.flatten_keys(separator))
        return out

    def split_keys(
        self,
        *key_sets: Sequence[NestedKey],
        inplace: bool = False,
        default: Any = NO_DEFAULT,
        strict: bool = True,
        reproduce_struct: bool = False,
    ) -> tuple:
        """In-memory TensorDicts of each key set, plus the rest (``inplace``: the rest is ``self``,
        the split keys deleted from the file)."""
        outs = []
        for keys in key_sets:
            out = self.empty()
            for key in keys:
                value = self.get(key, NO_DEFAULT if strict and default is NO_DEFAULT else _MISSING)
                if value is _MISSING:
                    if default is NO_DEFAULT:
                        continue
                    value = default
                out.set(key, value.to_tensordict() if isinstance(value, PersistentTensorDict) else value)
            outs.append(out)
        used = [unravel_key(k) for keys in key_sets for k in keys]
        if not inplace:
            return (*outs, self.to_tensordict().exclude(*used))
        for key in used:
            if key in self:
                self.del_(key)
        return (*outs, self)

    def filter_non_tensor_data(self) -> TensorDictBase:
        """An in-memory TensorDict without the non-tensor entries."""
        return self.to_tensordict().filter_non_tensor_data()

    def auto_batch_size_(self, batch_dims: int | None = None) -> "PersistentTensorDict":
        """Set each batch size (nested ones first) to the longest leading shape the entries share,
        at most ``batch_dims`` dims."""
        if self._sel is not None:
            raise RuntimeError("Cannot set the batch size of an indexed PersistentTensorDict (a view).")
        infer_batch_sizes(self, batch_dims)
        return self

    def _apply(self, fn, others, named, path, batch_size, device, names, inplace, *rest):
        if not inplace:
            return super()._apply(fn, others, named, path, batch_size, device, names, inplace, *rest)
        dense = self.to_tensordict()  # apply_ / apply(inplace=True): on the loaded values, then written back
        dense._apply(fn, others, named, path, batch_size, device, names, True, *rest)
        self._update(dense, "copy", None, False)
        return self

    def popitem(self) -> tuple:
        raise NotImplementedError("popitem is not implemented for PersistentTensorDict.")

    def memmap_(self, prefix: Any = None, copy_existing: bool = False, **kwargs: Any) -> TensorDictBase:
        raise RuntimeError(
            "Cannot build a memmap TensorDict in-place from a PersistentTensorDict: use td.memmap(prefix), "
            "which copies the data into memory-mapped files."
        )

    def share_memory_(self) -> TensorDictBase:
        raise NotImplementedError("Cannot call share_memory_ on a PersistentTensorDict: call to_tensordict() first.")

    def pin_memory(self, num_threads: int | None = None, inplace: bool = False) -> TensorDictBase:
        raise RuntimeError("Cannot pin memory of a PersistentTensorDict: call to_tensordict() first.")

    def pin_memory_(self, num_threads: int | str = 0) -> TensorDictBase:
        raise RuntimeError("Cannot pin memory of a PersistentTensorDict: call to_tensordict() first.")

    # Ops that return a view of a TensorDict (writes reach the source) cannot return one of a file.
    def view(self, *shape: Any, **kwargs: Any) -> Any:
        raise RuntimeError("Cannot call `view` on a PersistentTensorDict: call reshape (which loads the data) instead.")

    def permute(self, *dims: Any) -> Any:
        raise RuntimeError(dense_first("permute"))

    def transpose(self, dim0: int, dim1: int) -> Any:
        raise RuntimeError(dense_first("transpose"))

    def squeeze(self, dim: Any = None) -> Any:
        raise RuntimeError(dense_first("squeeze"))

    def unsqueeze(self, dim: int) -> Any:
        raise RuntimeError(dense_first("unsqueeze"))

    def empty(
        self, recurse: bool = False, *, batch_size: Any = None, device: Any = NO_DEFAULT, names: Any = None
    ) -> TensorDict:
        """An in-memory TensorDict with no leaves (with the nested structure if ``recurse``)."""
        out = TensorDict(
            batch_size=self._batch_size if batch_size is None else batch_size,
            device=self._device if device is NO_DEFAULT else device,
            names=self._names if batch_size is None and names is None else names,
        )
        if recurse:
            for key, kind, node in self._kinds():
                if kind == "group":
                    sub = self._child(key, node).empty(recurse=True, device=device)
                    out._set_str(key, sub, inplace=False, validated=False)
        return out

    # ------------------------------------------------------------------ pickling, repr
    def __getstate__(self) -> dict:
        origin = self._origin
        mode = origin._mode if origin._mode in ("r", "r+") else "r+"  # reopening must not truncate
        return {
            "filename": self.filename,
            "group": self._group.name,
            "mode": mode,
            "tree": tree_state(origin),
            "sel": self._sel,
            "names": self._names,
            "locked": self._is_locked,
        }

    def __setstate__(self, state: dict) -> None:
        h5py = h5.require_h5py()
        file = h5py.File(state["filename"], state["mode"])
        group = file[state["group"]] if state["group"] != "/" else file
        origin = tree_restore(PersistentTensorDict, group, state["tree"], state["mode"])
        if state["sel"] is None:
            self.__dict__.update(origin.__dict__)
            self._origin = self
            self._is_locked = state["locked"]
            return
        view = origin._view(state["sel"], state["names"])
        self.__dict__.update(view.__dict__)
        self._is_locked = state["locked"]

    def __repr__(self) -> str:
        return repr_of(self, 0)


install_through_memory(PersistentTensorDict)
