"""TensorStorage and LazyTensorStorage: items kept in preallocated tensors (or a TensorDict of them)."""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import torch
from tdict import LazyStackedTensorDict, is_tensor_collection

from ._shared_init import SharedInit
from ._trees import TREE_ROOTS, td_to_tree, tree_to_td
from ._write_checks import RaggedLeaves, check_write, is_ragged_stack, stored_leaves, write_shape
from .base import Storage

__all__ = ["TensorStorage", "LazyTensorStorage"]


def _leading(data: Any) -> torch.Size:
    return data.batch_size if is_tensor_collection(data) else data.shape


class TensorStorage(Storage):
    """Items stored along the first dim(s) of a tensor or TensorDict (given, or built on first write).

    Pytrees (dicts and tuples nesting tensors, with any keys, lists inside) are stored too, as a
    TensorDict of their leaves; reads give the same structure back (see ``storages/_trees.py``).

    Args:
        storage: the preallocated tensor/TensorDict (its first ``ndim`` dims index the items), or
            ``None`` to allocate on the first write (see :class:`LazyTensorStorage`).
        max_size: the capacity (default: the given storage's item count).
        device: where the items live (written data is moved there).
        ndim: how many leading dims index items (2 for ``[time, env]`` storages of batched envs).
        compilable: keep the item count in a Python int, for ``torch.compile``: reading it needs no
            ``Tensor.item()`` graph break, but the storage cannot be shared between processes
            (default ``False``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> s = TensorStorage(TensorDict(obs=torch.zeros(4, 2), batch_size=[4]))  # a given storage is full
        >>> s.set(torch.tensor([0, 1]), TensorDict(obs=torch.ones(2, 2), batch_size=[2]))
        >>> len(s), s.get(torch.tensor([1, 2]))["obs"].tolist()
        (4, [[1.0, 1.0], [0.0, 0.0]])
    """

    #: the structure of the stored pytrees (``None``: the items are tensors or TensorDicts)
    _tree_spec: Any = None
    #: allocate in shared memory (``share_memory_`` was called before the first write)
    _shared: bool = False
    #: ``shared_init=True``: the control directory that makes the first allocation shared by all processes
    _shared_init: SharedInit | None = None

    def __init__(
        self,
        storage: Any = None,
        max_size: int | None = None,
        *,
        device: Any = "cpu",
        ndim: int = 1,
        compilable: bool = False,
    ) -> None:
        name = type(self).__name__
        spec = None
        if type(storage) in TREE_ROOTS:  # a preallocated pytree: kept as a TensorDict of its leaves
            storage, spec = tree_to_td(name, storage, ndim)
        if storage is not None:
            leading = _leading(storage)
            if len(leading) < ndim:
                raise ValueError(f"{name}: storage has {len(leading)} leading dims, ndim={ndim} needs more.")
            items = math.prod(leading[:ndim])
            if max_size is not None and max_size != items:
                raise ValueError(
                    f"{name}: The max-size and the storage shape mismatch: max_size={max_size}, the storage holds "
                    f"{items} items (leading dims {list(leading[:ndim])})."
                )
            max_size = items
        if max_size is None:
            raise ValueError(
                f"{name}: Expected storage to be non-null: give the preallocated tensor / TensorDict, or max_size "
                "(or use LazyTensorStorage to allocate on the first write)."
            )
        super().__init__(max_size, compilable=compilable)
        if ndim < 1:
            raise ValueError(f"{type(self).__name__}: ndim must be >= 1, got {ndim}.")
        self.ndim = ndim
        self.device = torch.device(device) if device is not None and device != "auto" else None
        # the tensor or tensor collection (a TensorDict, a tensorclass, ...) holding the items; None until allocated
        self._storage: Any = storage
        if storage is not None:
            self._adopt_layout(storage)
            self._len_t.fill_(min(int(_leading(storage)[0]), self.max_size))  # a given storage is full
            self._tree_spec = spec

    @property
    def initialized(self) -> bool:
        """Whether the tensor (or TensorDict) holding the items exists yet."""
        return self._storage is not None

    @property
    def shape(self) -> torch.Size:
        if self._storage is None:
            return torch.Size([self.max_size])
        return torch.Size(_leading(self._storage)[: self.ndim])

    @property
    def _rows(self) -> int:
        return self.shape[0]

    def _cpu_for_shared_init(self) -> None:
        if self._shared_init is not None and self.device is not None and self.device.type != "cpu":
            warnings.warn(
                f"{type(self).__name__}: device={str(self.device)!r} cannot be honored with shared_init=True "
                "(the items live in memory-mapped files on the CPU); the storage uses the CPU.",
                UserWarning,
                stacklevel=4,
            )
            self.device = torch.device("cpu")

    def _init(self, item: Any) -> None:
        """Allocates the storage from one item (TorchRL's hook: ``item`` has no item dim)."""
        if type(item) in TREE_ROOTS:
            item, self._tree_spec = tree_to_td(f"{type(self).__name__}._init", item, self.ndim - 1)
        self._allocate(item.unsqueeze(0))

    def _allocate(self, data: Any) -> None:
        """Allocates zeros shaped like one row of ``data`` times the capacity."""
        leading = _leading(data)
        if len(leading) < self.ndim:
            raise ValueError(
                f"{type(self).__name__}: the first write must have at least {self.ndim} leading dims (ndim), "
                f"got shape {list(leading)}."
            )
        item_dims = torch.Size(leading[1 : self.ndim])
        per_row = math.prod(item_dims)
        rows = self.max_size // per_row  # (a max_size that is not a multiple leaves the remainder unused, as TorchRL)
        if rows == 0:
            raise ValueError(
                f"{type(self).__name__}: max_size {self.max_size} holds no row of {list(item_dims)} = {per_row} items."
            )
        self._cpu_for_shared_init()
        device = self.device

        def alloc(x: torch.Tensor) -> torch.Tensor:
            return torch.zeros((rows, *x.shape[1:]), dtype=x.dtype, device=device if device is not None else x.device)

        if is_ragged_stack(data, self.ndim):  # members of different shapes: a lazy stack of per-member storages
            members = []
            for m in data.tensordicts:
                members.append(m[:1].apply(alloc, batch_size=[rows, *m.batch_size[1:]]))
                _keep_nested_batch_dims(members[-1], m)
            storage = LazyStackedTensorDict(*members, stack_dim=data.stack_dim)
        elif is_tensor_collection(data):
            storage = data[:1].apply(alloc, batch_size=[rows, *data.batch_size[1:]])
            _keep_nested_batch_dims(storage, data)
        else:
            storage = alloc(data)
        shared = self._shared_init
        if shared is not None:  # memory-mapped files all processes map (the first writer makes them)
            storage = shared.allocate_or_open(lambda: _memmap_items(storage, shared))
            storage = unwrap_items(storage)
        elif self._shared:  # shared before it was allocated: the memory other processes see
            storage.share_memory_()
        self._storage = storage
        self._adopt_layout(storage)

    def _setup_shared_init(self, shared_init: bool) -> None:
        """Makes the first allocation shared by every process (``shared_init=True``); see ``_shared_init.py``."""
        if not isinstance(shared_init, bool):
            raise TypeError(f"{type(self).__name__}: shared_init must be a bool, got {shared_init!r}.")
        if not shared_init:
            return
        if self._compilable:
            raise ValueError(
                f"{type(self).__name__}: shared_init=True needs compilable=False (the item count must be "
                "shared between processes)."
            )
        self._shared_init = SharedInit()
        self._len_t.share_memory_()
        self._share_marks()

    def _attach_shared(self) -> bool:
        """Maps the items another process allocated (``shared_init``); ``True`` if the storage exists now."""
        if self._storage is not None:
            return True
        if self._shared_init is None or self._shared_init.ready() is None:
            return False
        self._allocate_shared_only()
        return True

    def _allocate_shared_only(self) -> None:
        mapped = self._shared_init.allocate_or_open(lambda: "")  # type: ignore[union-attr]  # ready: opens
        self._storage = unwrap_items(mapped)
        self._adopt_layout(self._storage)

    def _adopt_layout(self, storage: Any) -> None:
        """Records what every write is checked against: the item dims and ``{key: feature shape}``."""
        leading = _leading(storage)
        self._item_dims = torch.Size(leading[1 : self.ndim])
        self._lead_dims = len(leading)
        self._leaves = stored_leaves(storage, self._lead_dims)

    def _tree_as_td(self, index: Any, data: Any) -> tuple[Any, Any]:
        """A pytree to write as ``(TensorDict of its leaves, its structure)``; checked, nothing changed."""
        owner = f"{type(self).__name__}.set"
        if self._storage is not None and self._tree_spec is None:
            held = "a tensor" if isinstance(self._storage, torch.Tensor) else "TensorDicts"
            raise TypeError(f"{owner}: this storage holds {held}; got a {type(data).__name__} (a pytree) to write.")
        item_dims = self.ndim - 1 if isinstance(index, int) else self.ndim
        return tree_to_td(owner, data, item_dims, self._tree_spec)

    def set(self, index: Any, data: Any, *, set_cursor: bool = True) -> None:
        """Writes ``data`` at ``index`` (an int, slice, range, list or index tensor along dim 0).

        ``set_cursor`` is accepted for TorchRL compatibility (the write position is the writer's).
        """
        if type(index) is range:
            index = slice(index.start, index.stop, index.step)
        spec = None
        if type(data) in TREE_ROOTS:
            data, spec = self._tree_as_td(index, data)
        if self._storage is None and not self._attach_shared():
            # a single item (add) as the first write: allocate from it as a batch of one
            self._allocate(data.unsqueeze(0) if isinstance(index, int) else data)
        storage = self._storage
        assert storage is not None  # allocated by _allocate above
        # missing keys or shapes that would broadcast raise here, before anything is written
        check_write(type(self).__name__, self._leaves, data, write_shape(_leading(storage)[: self._lead_dims], index))
        if self.device is not None and data.device is not None and data.device != self.device:
            data = data.to(self.device)  # (no device on the data: the copy into storage moves each leaf)
        if type(data) is LazyStackedTensorDict:  # written item by item, without stacking them first
            storage.update_at_(data, index)
        else:
            storage[index] = data
        self._grow_len(index, 1)
        self._mutation_revision += 1
        if spec is not None:
            self._tree_spec = spec

    def update_at(self, index: Any, data: Any) -> None:
        """Writes the entries ``data`` holds at ``index`` (a partial update: the others are kept);
        entries the storage does not hold yet are added, zero at the other items.

        Raises:
            TypeError: the storage does not hold TensorDicts, or ``data`` is not one.
            ValueError: an entry's shape does not fit (checked before anything is written).
        """
        owner = f"{type(self).__name__}.update_at"
        inner = self._storage
        if inner is None:
            self.set(index, data)
            return
        if (
            not is_tensor_collection(inner)
            or self._tree_spec is not None
            or not is_tensor_collection(data)
            or isinstance(self._leaves, RaggedLeaves)
        ):
            raise TypeError(
                f"{owner}: needs a storage of TensorDicts (not a stack of differently shaped ones) and a "
                f"TensorDict to write, got {type(data).__name__}."
            )
        if type(index) is range:
            index = slice(index.start, index.stop, index.step)
        rows = _leading(inner)[: self._lead_dims]
        lead = write_shape(rows, index)
        got = dict(data.items(include_nested=True, leaves_only=True))
        new = {}
        for key, value in got.items():
            feature = self._leaves.get(key)
            if feature is None:
                if value.shape[: len(lead)] != lead:
                    raise ValueError(
                        f"{owner}: key {key!r} has shape {list(value.shape)}, expected {list(lead)} first."
                    )
                new[key] = (value.shape[len(lead) :], value.dtype, value.device)
            elif value.shape != lead + feature:
                raise ValueError(
                    f"{owner}: key {key!r} has shape {list(value.shape)}, expected {list(lead + feature)} at this index."
                )
        self._add_entries(new, rows)
        for key, value in got.items():
            leaf = inner.get(key)
            leaf[index] = value.to(leaf.device)
        self._grow_len(index, 1)
        self._mutation_revision += 1

    def _add_entries(self, new: dict, rows: torch.Size) -> None:
        """Adds zero-filled entries ``{key: (feature shape, dtype, device)}`` (new keys of a write)."""
        if not new:
            return
        inner = self._storage
        for key, (feature, dtype, device) in new.items():
            inner.set(key, torch.zeros((*rows, *feature), dtype=dtype, device=self.device or device))
        self._adopt_layout(inner)

    def get(self, index: Any) -> Any:
        if self._storage is None and not self._attach_shared():
            raise RuntimeError(f"{type(self).__name__} is empty: nothing was written yet.")
        if type(index) is range:
            index = slice(index.start, index.stop, index.step)
        out = self._storage[index]  # pyright: ignore[reportOptionalSubscript]  # attached above
        return out if self._tree_spec is None else td_to_tree(out, self._tree_spec)

    def __len__(self) -> int:
        if self._storage is None and self.ndim > 1:
            self._attach_shared()
        rows = int(self._len_t)
        return rows * math.prod(self._item_dims) if self.ndim > 1 and self._storage is not None else rows

    def _grow_len(self, index: Any, count: int) -> None:
        # the count is kept in rows (first dim); len() multiplies by the items per row
        if isinstance(index, tuple):
            index = index[0]
        rows = self._rows
        if isinstance(index, int):
            top = index + 1
        elif isinstance(index, slice):
            span = range(*index.indices(rows))
            top = (max(span[0], span[-1]) + 1) if len(span) else 0
        elif isinstance(index, torch.Tensor):
            top = int(index.max()) + 1 if index.numel() else 0
        else:
            top = max(int(i) for i in index) + 1 if len(index) else 0
        if torch.compiler.is_compiling():  # no branch on a traced value: fullgraph compiles of set()
            self._len_t.fill_(torch.sym_min(torch.sym_max(top, int(self._len_t)), rows))
        elif top > int(self._len_t):
            self._len_t.fill_(min(top, rows))

    def _rand_given_ndim(self, batch_size: int, generator: torch.Generator | None = None) -> Any:
        if self._storage is None:
            self._attach_shared()
        n = len(self)
        if n == 0:
            raise RuntimeError(
                f"Cannot sample from an empty storage ({type(self).__name__} is empty: nothing to sample)."
            )
        flat = torch.randint(0, n, (batch_size,), generator=generator)
        if self.ndim == 1:
            return flat
        return torch.unravel_index(flat, (int(self._len_t), *self._item_dims))

    def _empty(self) -> None:
        super()._empty()

    def state_dict(self) -> dict:
        """``{"len": rows, "_storage": a copy of the stored rows}`` (``None`` before the first write).

        Raises:
            TypeError: the storage holds pytrees (their structure is not a tensor): use ``dumps``.
        """
        if self._tree_spec is not None:
            raise TypeError(
                f"{type(self).__name__}.state_dict: pytrees are not supported by state_dict() (their structure is "
                "not a tensor); checkpoint the buffer with dumps()/loads() instead."
            )
        rows = int(self._len_t)
        return {"len": rows, "_storage": None if self._storage is None else self._storage[:rows].clone()}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`: copies the rows in (allocating a lazy storage from them).

        Raises:
            ValueError: the rows do not fit the storage (count, keys or shapes).
        """
        owner = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state, dict) or "_storage" not in state:
            super().load_state_dict(state)  # a state of the item count alone
            return
        n, data = state.get("len"), state["_storage"]
        if type(n) is not int or n < 0:
            raise ValueError(f"{owner}: state['len'] must be an int >= 0, got {n!r}.")
        if data is None:
            if n:
                raise ValueError(f"{owner}: state['len'] is {n} but state['_storage'] holds no rows.")
            self._len_t.fill_(0)
            return
        if not (isinstance(data, torch.Tensor) or is_tensor_collection(data)) or _leading(data)[:1] != (n,):
            got = list(_leading(data)) if hasattr(data, "shape") else type(data).__name__
            raise ValueError(f"{owner}: state['_storage'] must hold {n} rows (a tensor or TensorDict), got {got}.")
        if self._storage is None:
            self._allocate(data)
        if n > self._rows:
            raise ValueError(f"{owner}: {n} rows do not fit the {self._rows} rows of this storage.")
        storage: Any = self._storage  # allocated above
        check_write(owner, self._leaves, data, write_shape(_leading(storage)[: self._lead_dims], slice(0, n)))
        storage[:n] = data
        self._len_t.fill_(n)
        self._mutation_revision += 1

    def share_memory_(self) -> "TensorStorage":
        """Moves the items and their count to shared memory (a lazy storage allocates there later)."""
        super().share_memory_()
        self._shared = True
        if self._storage is not None:
            self._storage.share_memory_()
        return self

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_size={self.max_size}, len={len(self)}, device={self.device}, ndim={self.ndim})"
        )


class LazyTensorStorage(TensorStorage):
    """A :class:`TensorStorage` allocated on the first write from the data's structure.

    Args:
        max_size: the capacity in items.
        device: where the items live (``"cpu"`` by default).
        ndim: how many leading dims of the written data index items.
        compilable: as :class:`TensorStorage`.
        shared_init: the first write of any process allocates the items in memory-mapped CPU files
            that every process (forked or spawned after construction) maps: a buffer shared before
            its first write (``ReplayBuffer.share()``). Implies a CPU ``device`` (another one warns).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> s = LazyTensorStorage(100)
        >>> s.set(torch.arange(3), TensorDict(obs=torch.ones(3, 5), batch_size=[3]))
        >>> len(s), s.get(torch.tensor([2]))["obs"].shape
        (3, torch.Size([1, 5]))
    """

    def __init__(
        self,
        max_size: int,
        *,
        device: Any = "cpu",
        ndim: int = 1,
        compilable: bool = False,
        shared_init: bool = False,
    ) -> None:
        super().__init__(None, max_size, device=device, ndim=ndim, compilable=compilable)
        self._setup_shared_init(shared_init)


def _keep_nested_batch_dims(storage: Any, data: Any) -> None:
    """Give each sub-TensorDict of ``storage`` the extra batch dims it has in ``data``.

    ``apply(..., batch_size=...)`` sets every level to the root's batch size; a group such as
    ``"agents"`` (batch ``[B, n_agents]`` under a ``[B]`` root) keeps its own dims in the storage,
    so samples come back with per-agent batch dims.
    """
    rows = storage.batch_size[0]
    keys = sorted(data.keys(include_nested=True), key=lambda k: -len(k) if isinstance(k, tuple) else -1)
    for key in keys:  # deepest first: a parent's batch dims must stay a prefix of its children's
        sub = data.get(key)
        if is_tensor_collection(sub) and not sub._is_non_tensor and sub.batch_dims > storage.batch_dims:
            storage.get(key).batch_size = torch.Size([rows, *sub.batch_size[1:]])


# plain-tensor items are memory-mapped as the single entry of a TensorDict under this key, so that
# the files carry tdict's JSON metadata and another process can open them with load_memmap
_TENSOR_KEY = "__rl_replay_tensor__"


def unwrap_items(mapped: Any) -> Any:
    """The items of memory-mapped files: the tensor stored under :data:`_TENSOR_KEY`, or the collection."""
    return mapped.get(_TENSOR_KEY) if _TENSOR_KEY in mapped.keys() else mapped


def _memmap_items(storage: Any, shared: SharedInit) -> str:
    """Writes the allocated ``storage`` as memory-mapped files in ``shared``'s directory; returns it."""
    from tdict import TensorDict

    where = os.path.join(shared.control_dir, "items")
    if not is_tensor_collection(storage):
        storage = TensorDict({_TENSOR_KEY: storage}, batch_size=storage.shape[:1])
    storage.memmap_(where)
    return where
