"""Saving, memory-mapping and consolidating collections: methods that delegate to
:mod:`tdict.persistence`, :mod:`tdict._io.state_dict` (through persistence) and :mod:`tdict.consolidate`."""

# Mixin of TensorDictBase: the attributes it reads (batch_size, get, _items_raw...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable


if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is new in 3.11

    from ..base import TensorDictBase


def _run_maybe_early(return_early: bool, write: Callable[[], Any]) -> Any:
    """``write()``, or with ``return_early`` a Future of it, written by a (non-daemon) background thread."""
    if not return_early:
        return write()
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(write())
        except BaseException as err:  # raised by future.result()
            future.set_exception(err)

    threading.Thread(target=run, name="tdict_memmap", daemon=False).start()
    return future


class StorageMixin:
    """``memmap_``, ``save``/``load``, ``state_dict``, ``consolidate`` and friends."""

    __slots__ = ()

    def state_dict(
        self, destination: dict | None = None, prefix: str = "", keep_vars: bool = False, flatten: bool = True
    ) -> dict:
        """An ``OrderedDict`` of the tensors (``"."`` keys; nested with ``flatten=False``) whose ``_metadata``
        attribute holds the batch sizes, devices and non-tensor payloads (tensordict 0.14's layout)."""
        from ..persistence import state_dict

        return state_dict(self, destination=destination, prefix=prefix, keep_vars=keep_vars, flatten=flatten)

    def load_state_dict(
        self, state_dict: dict, strict: bool = True, assign: bool = False, from_flatten: bool = False
    ) -> "TensorDictBase":
        """Load a dict made by :meth:`state_dict` (nested or flat) into ``self`` and return ``self``.

        Every key, shape and batch size is checked before the first write. Tensors are copied
        into the existing leaves, or replace them with ``assign``; ``strict`` requires the same keys.
        """
        from ..persistence import load_state_dict

        return load_state_dict(self, state_dict, strict=strict, assign=assign, from_flatten=from_flatten)

    def memmap_(
        self,
        prefix: Any = None,
        copy_existing: bool = False,
        *,
        num_threads: int = 0,
        existsok: bool = True,
        robust_key: bool | None = None,
        share_non_tensor: bool = False,
        fsync: bool = False,
        return_early: bool = False,
    ) -> Any:
        """Write every leaf to memory-mapped files under ``prefix`` (crash-safe) and point the leaves at them.

        ``return_early=True`` returns a :class:`concurrent.futures.Future` at once; a background
        thread writes the files and its ``result()`` is the collection (or raises the write's error).
        """
        from ..persistence import memmap_

        return _run_maybe_early(
            return_early,
            lambda: memmap_(self, prefix, copy_existing=copy_existing, existsok=existsok, inplace=True, fsync=fsync),
        )

    def memmap(
        self,
        prefix: Any = None,
        copy_existing: bool = False,
        *,
        num_threads: int = 0,
        existsok: bool = True,
        robust_key: bool | None = None,
        share_non_tensor: bool = False,
        fsync: bool = False,
        return_early: bool = False,
    ) -> Any:
        """Like :meth:`memmap_` (``return_early`` included) but returns a new collection and leaves
        ``self`` untouched."""
        from ..persistence import memmap_

        return _run_maybe_early(
            return_early,
            lambda: memmap_(self, prefix, copy_existing=copy_existing, existsok=existsok, inplace=False, fsync=fsync),
        )

    def memmap_like(
        self,
        prefix: Any = None,
        copy_existing: bool = False,
        *,
        existsok: bool = True,
        num_threads: int = 0,
        return_early: bool = False,
    ) -> "TensorDictBase":
        """A memory-mapped collection with the same structure, shapes and dtypes, contents uninitialised."""
        if return_early:
            raise NotImplementedError(
                "memmap_like: return_early=True is not supported (there is no data to write in the background); "
                "call it without return_early."
            )
        from ..persistence import memmap_like

        return memmap_like(self, prefix, existsok=existsok)

    def save(
        self,
        prefix: Any = None,
        copy_existing: bool = False,
        *,
        num_threads: int = 0,
        existsok: bool = True,
        robust_key: bool | None = None,
        share_non_tensor: bool = False,
        fsync: bool = False,
    ) -> Self:
        """Save to ``prefix`` (memmap layout, JSON metadata); returns ``self``."""
        self.memmap(prefix, copy_existing=copy_existing, existsok=existsok, fsync=fsync)
        return self

    dumps = save

    @classmethod
    def load_memmap(
        cls,
        prefix: Any,
        device: Any = None,
        non_blocking: bool = False,
        *,
        out: Any = None,
        robust_key: bool | None = None,
    ) -> "TensorDictBase":
        """Open a collection saved with :meth:`memmap_`/:meth:`save` (never unpickles).

        ``robust_key`` is tensordict's switch for file names made from keys; accepted and unused
        here, where keys live in the metadata and any string key round-trips."""
        from ..persistence import load_memmap

        return load_memmap(prefix, device=device, non_blocking=non_blocking, out=out)

    @classmethod
    def load(
        cls,
        prefix: Any,
        device: Any = None,
        non_blocking: bool = False,
        *,
        out: Any = None,
        robust_key: bool | None = None,
    ) -> "TensorDictBase":
        """Alias of :meth:`load_memmap`."""
        return cls.load_memmap(prefix, device=device, non_blocking=non_blocking, out=out, robust_key=robust_key)

    def to_h5(self, filename: Any, **kwargs: Any) -> Any:
        """Write to a new HDF5 file (crash-safe) and return the :class:`~tdict.PersistentTensorDict` on it.

        ``kwargs`` go to h5py's ``create_dataset`` (``compression="gzip"``...). Needs ``rl-tdict[h5]``.

        Examples:
            >>> import os, tempfile, torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.zeros(3, 2), batch_size=[3])
            >>> td.to_h5(os.path.join(tempfile.mkdtemp(), "td.h5"))["a"].shape
            torch.Size([3, 2])
        """
        from ..persistent import PersistentTensorDict

        return PersistentTensorDict.from_dict(self, filename, **kwargs)

    @classmethod
    def from_h5(cls, filename: Any, *, mode: str = "r", batch_size: Any = None, device: Any = None) -> Any:
        """Open an HDF5 file as a :class:`~tdict.PersistentTensorDict` (see its ``from_h5``)."""
        from ..persistent import PersistentTensorDict

        return PersistentTensorDict.from_h5(filename, mode=mode, batch_size=batch_size, device=device)

    def is_memmap(self) -> bool:
        """True when there is at least one tensor leaf and every one is a :class:`~tdict.MemoryMappedTensor`."""
        from ..memmap import MemoryMappedTensor

        leaves = self._tensor_leaves()[1]  # the stored leaves: a lazy stack's values would be stacked copies
        return bool(leaves) and all(isinstance(v, MemoryMappedTensor) for v in leaves)

    def consolidate(
        self,
        filename: Any = None,
        *,
        num_threads: int = 0,
        device: Any = None,
        non_blocking: bool = False,
        inplace: bool = False,
        return_early: bool = False,
        use_buffer: bool = False,
        share_memory: bool = False,
        pin_memory: bool = False,
        metadata: bool = False,
    ) -> "TensorDictBase":
        """A copy whose leaves all live in one contiguous storage (fast to move and to share).

        ``return_early=True`` builds it on a worker thread and returns a
        :class:`~tdict.future.TensorDictFuture` at once (its ``result()`` is the copy).
        """
        from ..consolidate import consolidate

        kwargs = {"filename": filename, "device": device, "share_memory": share_memory, "pin_memory": pin_memory}
        if return_early:
            for name, value in (("use_buffer", use_buffer), ("non_blocking", non_blocking)):
                if value:
                    raise NotImplementedError(f"consolidate: return_early=True does not support {name}=True.")
            from ..future import TensorDictFuture

            return TensorDictFuture.submit(consolidate, self, **kwargs)  # type: ignore[return-value]
        return consolidate(self, **kwargs)

    @classmethod
    def from_consolidated(cls, filename: Any) -> "TensorDictBase":
        """Open a file written by ``consolidate(filename=...)`` (see :func:`tdict.from_consolidated`).

        Examples:
            >>> import os, tempfile, torch
            >>> from tdict import TensorDict
            >>> path = os.path.join(tempfile.mkdtemp(), "td.bin")
            >>> _ = TensorDict(a=torch.arange(3.0), batch_size=[3]).consolidate(filename=path)
            >>> TensorDict.from_consolidated(path)["a"].tolist()
            [0.0, 1.0, 2.0]
        """
        from ..consolidate import from_consolidated

        return from_consolidated(filename)

    def is_consolidated(self) -> bool:
        """True when ``self`` was made by :meth:`consolidate` and every leaf still is a view of its storage."""
        from ..consolidate import is_consolidated

        return is_consolidated(self)

    dumps = save
