"""LazyMemmapStorage: a tensor storage whose items live in memory-mapped files on disk."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import weakref
from typing import Any

import torch
from tdict import LazyStackedTensorDict, TensorDict, is_tensor_collection
from tdict.persistence import load_memmap

from .._part import check_shareable
from ._trees import TREE_ROOTS, td_to_tree
from ._write_checks import check_write, is_ragged_stack, stored_leaves, write_shape
from .tensor import _TENSOR_KEY, TensorStorage, unwrap_items

__all__ = ["LazyMemmapStorage", "ScratchDirNotEmptyError"]


class ScratchDirNotEmptyError(FileExistsError, RuntimeError):
    """The scratch directory already holds files and ``existsok`` is ``False`` (a
    ``FileExistsError``, and the ``RuntimeError`` TorchRL raises here)."""


_CPU = torch.device("cpu")


def _broadcast_row(data: Any, rows: int) -> Any:
    """The first row of ``data`` (on the CPU) expanded to ``rows`` rows, as a zero-stride view."""
    one = data[:1]
    if (
        one.device is not None
        and one.device.type != "cpu"
        or any(v.device.type != "cpu" for v in one.values(include_nested=True, leaves_only=True))
    ):
        one = one.to(_CPU)
    return one.expand(rows, *one.batch_size[1:])


def _remove_scratch_dir(path: str, owner_pid: int) -> None:
    # only the process that created the temporary directory removes it: a forked or spawned
    # process holding a copy of the storage must not delete the files its parent still uses
    if os.getpid() == owner_pid:
        shutil.rmtree(path, ignore_errors=True)


class LazyMemmapStorage(TensorStorage):
    """A :class:`TensorStorage` whose items are memory-mapped files, allocated on the first write.

    Items live on disk (page cache) rather than in process memory, so a buffer can hold more than
    RAM, survive as files, and be shared by several processes: pickling the storage (for instance
    into a ``torch.multiprocessing`` child) sends file names, not data, and every process maps the
    same files. Share the item count with :meth:`share_memory_` (``ReplayBuffer.share_memory_``
    also shares the writer's cursor); a process that never wrote opens the files on its first read.

    Args:
        max_size: the capacity in items.
        scratch_dir: the directory of the files. ``None``: a fresh temporary directory.
        device: where ``get`` returns the items. The files are always on the CPU; with
            ``device="cuda"`` each read is copied to the GPU (TorchRL refuses non-CPU devices here).
        ndim: how many leading dims of the written data index items.
        existsok: allow a ``scratch_dir`` that already holds files (they are overwritten). With the
            default ``False`` the first write into a non-empty ``scratch_dir`` raises
            :class:`ScratchDirNotEmptyError` (a ``FileExistsError`` and a ``RuntimeError``).
        compilable: keep the item count in a Python int (for ``torch.compile``); the files can still
            be opened by other processes, but the count cannot be shared (default ``False``).
        auto_cleanup: remove ``scratch_dir`` when the storage is garbage collected or the
            interpreter exits (by the creating process only). ``None``: for a temporary directory
            only. :meth:`cleanup` removes it at once.
        shared_init: the first write of any process allocates the files, under a lock, and the
            processes that write later map them (several processes may make the first write of a
            buffer shared before it was used, ``ReplayBuffer.share()``). Shares the item count.

    Examples:
        >>> import os, torch
        >>> from tdict import TensorDict
        >>> s = LazyMemmapStorage(100)
        >>> s.set(torch.arange(3), TensorDict(obs=torch.arange(6.0).view(3, 2), batch_size=[3]))
        >>> len(s), s.get(torch.tensor([2, 0]))["obs"].tolist()
        (3, [[4.0, 5.0], [0.0, 1.0]])
        >>> os.path.isdir(s.scratch_dir)
        True
    """

    def __init__(
        self,
        max_size: int,
        *,
        scratch_dir: str | os.PathLike | None = None,
        device: Any = "cpu",
        ndim: int = 1,
        existsok: bool = False,
        compilable: bool = False,
        auto_cleanup: bool | None = None,
        shared_init: bool = False,
    ) -> None:
        super().__init__(None, max_size, device=device, ndim=ndim, compilable=compilable)
        self._setup_shared_init(shared_init)
        if auto_cleanup is not None and not isinstance(auto_cleanup, bool):
            raise TypeError(f"LazyMemmapStorage: auto_cleanup must be a bool or None, got {auto_cleanup!r}.")
        self.existsok = existsok
        self._finalizer = None
        self._scratch_dir_is_temp = scratch_dir is None
        self._auto_cleanup = self._scratch_dir_is_temp if auto_cleanup is None else auto_cleanup
        self._cleaned_up = False
        if scratch_dir is None:
            self.scratch_dir = tempfile.mkdtemp(prefix="rl_replay_memmap_")
        else:
            self.scratch_dir = os.path.abspath(os.fspath(scratch_dir))
        if self._auto_cleanup:
            self._finalizer = weakref.finalize(self, _remove_scratch_dir, self.scratch_dir, os.getpid())
        self._leaves: dict = {}
        self._get_device = None if self.device is None or self.device.type == "cpu" else self.device

    def _check_scratch_dir(self) -> None:
        path = self.scratch_dir
        if os.path.exists(path) and not os.path.isdir(path):
            raise NotADirectoryError(f"LazyMemmapStorage: scratch_dir {path!r} exists and is not a directory.")
        if not self.existsok and os.path.isdir(path):
            entries = os.listdir(path)
            if entries:
                raise ScratchDirNotEmptyError(
                    f"LazyMemmapStorage: scratch_dir {path!r} is not empty ({len(entries)} entries, e.g. "
                    f"{min(entries)!r}); pass existsok=True to overwrite its files, or choose an empty directory."
                )

    # ------------------------------------------------------------------ allocation
    def _allocate(self, data: Any) -> None:
        if self._shared_init is None:
            self._adopt(self._allocate_files(data))
            return

        def allocate() -> str:
            self._allocate_files(data)
            return self.scratch_dir

        mapped = self._shared_init.allocate_or_open(allocate)
        self._adopt(unwrap_items(mapped))

    def _allocate_shared_only(self) -> None:
        mapped = self._shared_init.allocate_or_open(lambda: self.scratch_dir)  # type: ignore[union-attr]
        self._adopt(unwrap_items(mapped))

    def _allocate_files(self, data: Any) -> Any:
        """Allocates the memory-mapped files from the first write; returns the mapped collection."""
        leading = data.batch_size if is_tensor_collection(data) else data.shape
        if len(leading) < self.ndim:
            raise ValueError(
                f"LazyMemmapStorage: the first write must have at least {self.ndim} leading dims (ndim), "
                f"got shape {list(leading)}."
            )
        item_dims = torch.Size(leading[1 : self.ndim])
        per_row = math.prod(item_dims)
        rows = self.max_size // per_row  # (a max_size that is not a multiple leaves the remainder unused, as TorchRL)
        if rows == 0:
            raise ValueError(
                f"LazyMemmapStorage: max_size {self.max_size} holds no row of {list(item_dims)} = {per_row} items."
            )
        if not self._scratch_dir_is_temp:  # checked at the first write: nothing is written if it fails
            self._check_scratch_dir()
        is_tensor = not is_tensor_collection(data)
        template = TensorDict({_TENSOR_KEY: data}, batch_size=leading[: self.ndim]) if is_tensor else data
        # one row of the data broadcast to the capacity (a zero-stride view): memmap_like only reads
        # the structure, shapes and dtypes, so nothing of capacity size is allocated in RAM
        if isinstance(template, LazyStackedTensorDict) and is_ragged_stack(template, self.ndim):
            # members of different shapes: a lazy stack of per-member files
            full = LazyStackedTensorDict(
                *[_broadcast_row(m, rows) for m in template.tensordicts], stack_dim=template.stack_dim
            )
        else:
            full = _broadcast_row(template, rows)
        mapped = full.memmap_like(self.scratch_dir, existsok=True)
        return mapped[_TENSOR_KEY] if is_tensor else mapped

    def _adopt(self, storage: Any) -> None:
        self._storage = storage
        self._item_dims = torch.Size(
            (storage.shape if isinstance(storage, torch.Tensor) else storage.batch_size)[1 : self.ndim]
        )
        self._lead_dims = self.ndim if isinstance(storage, torch.Tensor) else storage.batch_dims
        self._leaves = stored_leaves(storage, self._lead_dims)

    def _open_existing(self) -> bool:
        """Maps the files another process allocated (this process never wrote). True if it could."""
        if self._storage is not None:
            return True
        if int(self._len_t) == 0:
            return False
        self._adopt(unwrap_items(load_memmap(self.scratch_dir)))
        return True

    # ------------------------------------------------------------------ reads and writes
    def set(self, index: Any, data: Any, *, set_cursor: bool = True) -> None:
        if type(index) is range:
            index = slice(index.start, index.stop, index.step)
        spec = None
        if type(data) in TREE_ROOTS:
            data, spec = self._tree_as_td(index, data)
        if self._storage is None and not self._open_existing():
            # a single item (add) as the first write: allocate from it as a batch of one
            self._allocate(data.unsqueeze(0) if isinstance(index, int) else data)
        storage = self._storage
        assert storage is not None  # allocated (or opened) above
        lead = write_shape(storage.shape[: self._lead_dims], index)
        check_write("LazyMemmapStorage.set", self._leaves, data, lead)
        if data.device is None or data.device.type != "cpu":
            data = data.to(_CPU)
        if type(data) is LazyStackedTensorDict:  # written item by item, without stacking them first
            storage.update_at_(data, index)
        else:
            storage[index] = data
        self._grow_len(index, 1)
        self._mutation_revision += 1
        if spec is not None:
            self._tree_spec = spec

    def _add_entries(self, new: dict, rows: torch.Size) -> None:
        if new:
            raise TypeError(
                f"LazyMemmapStorage.update_at: cannot add entries {sorted(map(str, new))} to the memory-mapped files; "
                "write every entry from the first write on (or use LazyTensorStorage)."
            )

    def get(self, index: Any) -> Any:
        if self._storage is None and not self._open_existing():
            raise RuntimeError("LazyMemmapStorage is empty: nothing was written yet.")
        assert self._storage is not None  # opened by _open_existing
        if type(index) is range:
            index = slice(index.start, index.stop, index.step)
        out = self._storage[index]
        if self._get_device is not None:
            out = out.to(self._get_device)
        return out if self._tree_spec is None else td_to_tree(out, self._tree_spec)

    def __len__(self) -> int:
        if self._storage is None and self.ndim > 1:
            self._open_existing()
        return super().__len__()

    def _rand_given_ndim(self, batch_size: int, generator: torch.Generator | None = None) -> Any:
        if self._storage is None:
            self._open_existing()
        return super()._rand_given_ndim(batch_size, generator)

    # ------------------------------------------------------------------ lifecycle
    def share_memory_(self) -> LazyMemmapStorage:
        """Shares the item count; the items are files, shared already.

        Raises:
            RuntimeError: the storage is ``compilable`` (its count is a Python int).
        """
        check_shareable(self)
        self._len_t.share_memory_()
        self._share_marks()
        return self

    def cleanup(self) -> bool:
        """Removes the scratch directory and its files now, whoever created it (the storage is
        unusable afterwards; with ``auto_cleanup`` this happens at garbage collection or exit).

        Returns ``True`` if files were removed (``False``: nothing was written, the directory is
        gone already, or an earlier call removed it).
        """
        if self._cleaned_up:
            return False
        self._cleaned_up = True
        if self._finalizer is not None:
            self._finalizer.detach()
        path = self.scratch_dir
        removed = os.path.isdir(path) and bool(os.listdir(path))
        self._storage = None
        self._len_t.zero_()
        shutil.rmtree(path, ignore_errors=True)
        return removed

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_finalizer"] = None  # the receiving process does not own the temporary directory
        return state

    def __repr__(self) -> str:
        return (
            f"LazyMemmapStorage(max_size={self.max_size}, len={len(self)}, scratch_dir={self.scratch_dir!r}, "
            f"device={self.device}, ndim={self.ndim})"
        )
