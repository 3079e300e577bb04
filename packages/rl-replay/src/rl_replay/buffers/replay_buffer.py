"""ReplayBuffer: a storage, a writer and a sampler behind add/extend/sample."""

from __future__ import annotations

import atexit
import contextlib
import operator
import queue
import threading
import warnings
import weakref
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Iterator, Sequence, cast

import tdict
import torch
from tdict import TensorDictBase, is_tensor_collection
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from .._dict_items import as_tensordict, check_dicts, converts_to_tensordict, is_dict_list, stack_dicts
from ..storages._trees import is_tensor_tree
from .._part import check_compilable, check_loadable
from ..samplers.base import Sampler
from ..samplers.consuming import ConsumingSampler
from ..samplers.uniform import RandomSampler
from ..storages.base import Storage
from ..storages.list import ListStorage
from ..storages._write_checks import write_shape
from ..storages.tensor import TensorStorage
from .._generations import slot_count
from ..writers import RoundRobinWriter, Writer, _count

__all__ = ["ReplayBuffer", "default_collate"]


def default_collate(items: Any) -> Any:
    """Stacks a list of tensors or TensorDicts (what a ListStorage returns); a list of dicts becomes one
    dict of stacked leaves (numbers as tensors, other objects as lists); anything else is kept as is."""
    if isinstance(items, list) and items:
        first = items[0]
        if isinstance(first, torch.Tensor) or is_tensor_collection(first):
            return torch.stack(items)
        if isinstance(first, dict):
            return stack_dicts(items, "default_collate", objects=True)
    return items


def _batch_size_arg(value: Any) -> int:
    """``sample``'s batch size as an int >= 0 (the slow path: not a plain non-negative int)."""
    try:
        n = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        n = None
    if n is None or n < 0:
        raise ValueError(
            f"ReplayBuffer.sample: batch_size must be an int >= 0 (or None for the buffer's default), got {value!r}."
        )
    return n


def _identity(data: Any) -> Any:
    return data


# the parts a buffer built with ``delayed_init=True`` creates on first use (see ReplayBuffer.__getattr__)
_DELAYED = frozenset({"_storage", "_sampler", "_writer", "_collate_fn", "_consuming", "_dim_extend"})


def _process_write_lock(storage: Any) -> Any:
    """The cross-process write lock of a ``shared_init`` storage (a no-op for the others)."""
    shared = getattr(storage, "_shared_init", None)
    return contextlib.nullcontext() if shared is None else shared.write_lock()


def _consume_arg(owner: str, value: Any) -> int | None:
    """``consume_after_n_samples`` as an int >= 1 or ``None``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}: consume_after_n_samples must be a positive integer or None, got {value!r}.")
    if value < 1:
        raise ValueError(f"{owner}: consume_after_n_samples must be a positive integer, got {value}.")
    return int(value)


def _make_part(owner: str, name: str, value: Any, kind: type, default: Callable[[], Any]) -> Any:
    """``value`` as a buffer part: itself, ``default()`` for ``None``, or what a factory returns."""
    if value is None:
        return default()
    if isinstance(value, kind):
        return value
    made = value() if callable(value) else value
    if not isinstance(made, kind):
        raise TypeError(
            f"{owner}: {name} must be a {kind.__name__} or a callable returning one, got {type(made).__name__}."
        )
    return made


def _prefetch_arg(owner: str, value: Any) -> int:
    """``prefetch`` as an int >= 0 (``None`` and 0: no prefetching)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{owner}: prefetch must be an int >= 0 or None (0 and None: no prefetching), got {value!r}.")
    return int(value)


def _timeout_arg(owner: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{owner}: prefetch_timeout must be a number of seconds > 0 or None, got {value!r}.")
    return float(value)


# the running threads and their job queues, also those of deleted buffers
_PREFETCH_THREADS: dict[threading.Thread, queue.SimpleQueue] = {}
_EXITING = threading.Event()
_EXIT_JOIN_SECONDS = 10.0


class _Prefetcher:
    """One daemon thread that draws batches ahead, in submission order; results come back as Futures.

    The thread holds only a weak reference to the buffer, so a buffer that is no longer used is
    collected (its ``__del__`` then stops the thread). At interpreter exit every running thread drops
    its queued batches and is joined after the batch it is drawing (a thread left inside a torch op
    while the interpreter finalizes aborts the process); one that hangs is left behind after
    ``_EXIT_JOIN_SECONDS``, a daemon that never blocks the exit.
    """

    def __init__(self, buffer: "ReplayBuffer") -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=_Prefetcher._run, args=(self._jobs, weakref.ref(buffer)), name="rl_replay_prefetch", daemon=True
        )
        _PREFETCH_THREADS[self._thread] = self._jobs
        self._thread.start()

    @staticmethod
    def _run(jobs: queue.SimpleQueue, buffer_ref: Any) -> None:
        try:
            _Prefetcher._serve(jobs, buffer_ref)
        finally:
            _PREFETCH_THREADS.pop(threading.current_thread(), None)

    @staticmethod
    def _serve(jobs: queue.SimpleQueue, buffer_ref: Any) -> None:
        while True:
            job = jobs.get()
            if job is None:
                return
            future, batch_size = job
            if _EXITING.is_set():
                future.cancel()
            if not future.set_running_or_notify_cancel():
                continue
            buffer = buffer_ref()
            try:
                if buffer is None:
                    raise RuntimeError("the replay buffer was deleted before its prefetched batch was drawn.")
                future.set_result(buffer._sample_now(batch_size))
            except BaseException as err:  # surfaced in the caller by future.result()
                future.set_exception(err)
            finally:
                del buffer  # no strong reference kept while waiting for the next job

    def submit(self, batch_size: int) -> Future:
        future: Future = Future()
        self._jobs.put((future, batch_size))
        return future

    def close(self, timeout: float | None = None) -> bool:
        """Stops the thread after its current batch; waits up to ``timeout`` (0: not at all).
        Returns whether the thread has ended."""
        self._jobs.put(None)
        if timeout != 0 and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()


@atexit.register
def _stop_prefetchers_at_exit() -> None:
    """Runs before the interpreter finalizes: queued batches are dropped, running ones finish."""
    _EXITING.set()
    running = list(_PREFETCH_THREADS.items())
    for _, jobs in running:
        jobs.put(None)  # wakes a thread waiting for work
    for thread, _ in running:
        thread.join(_EXIT_JOIN_SECONDS)


class _WriteTransform:
    """A callable applied to written data only: the inverse of an identity on sampled data."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn

    def __call__(self, data: Any) -> Any:
        return data

    def inv(self, data: Any) -> Any:
        return self.fn(data)

    def __repr__(self) -> str:
        return f"WriteTransform({self.fn!r})"


def _stack_items(owner: str, items: list) -> Any:
    """A list of items (tensors, TensorDicts or pytrees of tensors) stacked along a new first dim."""
    first = items[0]
    try:
        if is_tensor_collection(first):
            return tdict.stack(items)
        if isinstance(first, torch.Tensor):
            return torch.stack(items)
        if type(first) in (dict, tuple):
            flat = [tree_flatten(item) for item in items]
            spec = flat[0][1]
            if any(s != spec for _, s in flat):
                raise ValueError("the items have different structures")
            return tree_unflatten([torch.stack(leaves) for leaves in zip(*(f for f, _ in flat))], spec)
    except (RuntimeError, ValueError, TypeError) as err:
        raise RuntimeError(
            f"{owner}: Stacking the elements of the list resulted in an error ({err}); a tensor storage takes items "
            "of one structure and shape (store others in a ListStorage)."
        ) from err
    raise TypeError(
        f"{owner}: a tensor storage takes a list of tensors, TensorDicts or pytrees of tensors, got a list of "
        f"{type(first).__name__}."
    )


def _dim_first(data: Any, dim: int) -> Any:
    """``data`` with dim ``dim`` moved to the front (leaf by leaf for a pytree)."""
    if is_tensor_collection(data) or isinstance(data, torch.Tensor):
        return data.transpose(dim, 0)
    if type(data) in (dict, tuple):
        return tree_map(lambda x: x.transpose(dim, 0), data)
    raise TypeError(
        f"ReplayBuffer.extend: dim_extend={dim} needs a tensor, TensorDict or pytree, got {type(data).__name__}."
    )


def _is_key(index: Any) -> bool:
    """An entry name (a string or a tuple of strings) rather than an item index."""
    return isinstance(index, str) or (
        isinstance(index, tuple) and bool(index) and all(isinstance(k, str) for k in index)
    )


def _share_transform(transform: Any) -> None:
    """Shares a transform's write state with the buffer's other processes, or raises if it cannot."""
    inner = getattr(transform, "transforms", None)
    if isinstance(inner, (list, tuple, torch.nn.ModuleList)):  # a Compose
        for t in inner:
            _share_transform(t)
        return
    share_memory = getattr(transform, "share_memory_", None)
    if callable(share_memory):
        share_memory()
    elif getattr(transform, "requires_shared_write_state", False):
        raise RuntimeError(
            f"{type(transform).__name__} keeps replay-buffer write state but has no share_memory_(): it cannot be "
            "used by a shared buffer. Write from one process, or give the transform a share_memory_()."
        )


class ReplayBuffer:
    """A replay buffer: ``extend`` writes items, ``sample`` draws batches (names follow TorchRL 0.14).

    Args:
        storage: where items live (default ``ListStorage(1000)``).
        sampler: which items a batch holds (default :class:`RandomSampler`).
        writer: where new items go (default :class:`RoundRobinWriter`).
        collate_fn: applied to the sampled items (default: stack lists of tensors/TensorDicts for a
            ListStorage, nothing for tensor storages).
        pin_memory: pin sampled tensors (for fast host-to-GPU copies).
        prefetch: keep this many batches sampled ahead in a background thread (``None`` or 0: none;
            needs ``batch_size``). An error raised while drawing a batch is raised by the
            ``sample()`` call that would return it; :meth:`close` stops the thread.
        transform: applied to each sampled batch (any callable; rl-envs transforms work as they are:
            their ``inv`` runs on ``extend``). More with :meth:`append_transform`.
        batch_size: the default ``sample()`` size.
        generator: the ``torch.Generator`` the sampler draws from (reproducible sampling).
        compilable: build the default storage and writer with ``compilable=True`` (their counters
            are Python ints, so ``torch.compile`` traces ``extend``/``sample`` without
            ``Tensor.item()`` graph breaks; such parts cannot be shared between processes).
            ``None`` (TorchRL's default) is ``False``.
        prefetch_timeout: seconds ``sample()`` waits for a prefetched batch before raising
            ``TimeoutError`` (``None``: no limit, as TorchRL). Not a TorchRL argument.
        delayed_init: build the storage, sampler, writer and ``transform_factory``'s transform on
            first use rather than now (a buffer sent to another process before it is used).
            ``None``: ``True`` when ``transform_factory`` is given. ``storage``, ``sampler`` and
            ``writer`` may also be callables that build the part.
        transform_factory: a callable returning the transform (exclusive with ``transform``).
        shared: the buffer will be shared between processes (see :meth:`share`); refuses
            ``prefetch`` and transforms that keep write state they cannot share.
        consume_after_n_samples: an item leaves the buffer once it was sampled this many times
            (its slot is written first by later writes); uses a :class:`~rl_replay.ConsumingSampler`.
        sample_unit: what each sampled index expands into (a :class:`~rl_replay.sample_units.SampleUnit`,
            e.g. ``Sequence(length=8)``; ``None``: one record per index).
        dim_extend: the dim of the data ``extend`` writes along, moved first (rows of the storage).
            ``None`` (TorchRL's default): the storage's last item dim, ``storage.ndim - 1``: an
            ``ndim=2`` storage keeps ``[time, env]`` rows and ``extend`` takes ``[env, time]``
            rollouts (time last, as collectors return them); ``rb[:]`` reads them back so.
            ``0``: the data is written as it comes, its first dim along the storage's rows.

    All reads and writes of the storage, writer and sampler happen under one lock, so a collector
    thread can ``extend`` while the learner ``sample``s (the lock is skipped while
    ``torch.compile`` traces, as TorchRL does: Dynamo cannot enter it).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)
        >>> rb.extend(TensorDict(obs=torch.randn(10, 3), batch_size=[10])).shape
        torch.Size([10])
        >>> len(rb), rb.sample()["obs"].shape
        (10, torch.Size([4, 3]))
    """

    def __init__(
        self,
        *,
        storage: Storage | Callable[[], Storage] | None = None,
        sampler: Sampler | Callable[[], Sampler] | None = None,
        writer: Writer | Callable[[], Writer] | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable | None = None,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
        compilable: bool | None = None,
        prefetch_timeout: float | None = None,
        delayed_init: bool | None = None,
        transform_factory: Callable[[], Callable] | None = None,
        shared: bool = False,
        consume_after_n_samples: int | None = None,
        sample_unit: Any = None,
        dim_extend: int | None = None,
    ) -> None:
        owner = type(self).__name__
        from ..sample_units import SampleUnit

        if sample_unit is not None and not isinstance(sample_unit, SampleUnit):
            raise TypeError(f"{owner}: sample_unit must be a SampleUnit (or None), got {type(sample_unit).__name__}.")
        if dim_extend is not None and (
            isinstance(dim_extend, bool) or not isinstance(dim_extend, int) or dim_extend < 0
        ):
            raise ValueError(f"{owner}: dim_extend must be an int >= 0 or None, got {dim_extend!r}.")
        compilable = False if compilable is None else compilable
        check_compilable(owner, compilable)
        prefetch = _prefetch_arg(owner, prefetch)
        if prefetch and batch_size is None:
            raise ValueError(
                f"{owner}: prefetch={prefetch} needs a batch_size at construction (the batches are drawn "
                "ahead of the sample() calls), got batch_size=None."
            )
        if transform is not None and transform_factory is not None:
            raise TypeError(f"{owner}: transform and transform_factory are mutually exclusive; pass one of them.")
        if transform_factory is not None and not callable(transform_factory):
            raise TypeError(f"{owner}: transform_factory must be a callable, got {type(transform_factory).__name__}.")
        if delayed_init is None:
            delayed_init = transform_factory is not None
        if not isinstance(delayed_init, bool):
            raise TypeError(f"{owner}: delayed_init must be a bool or None, got {delayed_init!r}.")
        consume = _consume_arg(owner, consume_after_n_samples)
        if consume is not None and prefetch:
            raise ValueError(
                f"{owner}: Prefetching is not supported when consume_after_n_samples is set (a prefetched batch "
                "would consume items before it is asked for); pass prefetch=None."
            )
        if shared and prefetch:
            raise ValueError(
                f"{owner}: Cannot share prefetched replay buffers (the prefetching thread cannot follow the buffer "
                "into another process). Pass prefetch=0 or shared=False."
            )
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"ReplayBuffer: batch_size must be >= 1, got {batch_size}.")
        self._compilable = compilable
        self.prefetch_timeout = _timeout_arg(owner, prefetch_timeout)
        self._batch_size = batch_size
        self._prefetch = prefetch
        self._rng = generator
        self._sample_unit = sample_unit
        self._dim_extend_arg = dim_extend
        self.shared = False
        self._pin_memory = pin_memory
        self._prefetch_queue: list[Future] = []
        self._prefetcher: _Prefetcher | None = None
        self._transforms: list = []
        if transform is not None:
            self.append_transform(transform)
        self._lock = threading.RLock()
        self._last_ran_out = False
        self._dict_items = False  # items were written as dicts into a tensor storage: reads give dicts back
        parts = (storage, sampler, writer, collate_fn, transform_factory, consume)
        if delayed_init:
            self._pending_parts: tuple | None = parts
        else:
            self._pending_parts = None
            self._build_parts(*parts)
        if shared:
            self.share()

    def _build_parts(
        self,
        storage: Any,
        sampler: Any,
        writer: Any,
        collate_fn: Callable | None,
        transform_factory: Callable | None,
        consume: int | None,
    ) -> None:
        """Creates and wires the storage, sampler and writer (now, or on first use with ``delayed_init``)."""
        from ..samplers.consuming import ConsumingSampler, check_consuming_setup

        owner = type(self).__name__
        storage = _make_part(owner, "storage", storage, Storage, lambda: ListStorage(1000, compilable=self._compilable))
        sampler = _make_part(owner, "sampler", sampler, Sampler, RandomSampler)
        writer = _make_part(owner, "writer", writer, Writer, self._default_writer)
        if consume is not None:
            if isinstance(sampler, ConsumingSampler):
                if sampler.max_sample_count != consume:
                    raise ValueError(
                        f"{owner}: consume_after_n_samples={consume} conflicts with the given "
                        f"ConsumingSampler(max_sample_count={sampler.max_sample_count})."
                    )
            elif type(sampler) is RandomSampler:
                sampler = ConsumingSampler(max_sample_count=consume)
            else:
                raise ValueError(
                    f"{owner}: consume_after_n_samples only supports the default RandomSampler or an explicit "
                    f"ConsumingSampler, got {type(sampler).__name__} (prioritized, slice and without-replacement "
                    "samplers cannot consume items)."
                )
        if isinstance(sampler, ConsumingSampler):
            check_consuming_setup(owner, storage, writer, bool(self._prefetch))
        if self._batch_size is None and getattr(sampler, "drop_last", False):
            raise ValueError(
                f"{owner}: Samplers with drop_last=True must work with a predictable batch-size: pass batch_size "
                f"to the buffer (the {type(sampler).__name__} drops the last, smaller batch of each epoch)."
            )
        writer.register_storage(storage)
        register = getattr(sampler, "register_storage", None)
        if register is not None:
            register(storage)
        if self._rng is not None:
            sampler._rng = self._rng
        self._storage, self._sampler, self._writer = storage, sampler, writer
        self._consuming = isinstance(sampler, ConsumingSampler)
        ndim = getattr(storage, "ndim", 1)
        dim_extend = ndim - 1 if self._dim_extend_arg is None else self._dim_extend_arg
        if dim_extend >= max(ndim, 1) and dim_extend:
            raise ValueError(f"{owner}: dim_extend={dim_extend} must be below the storage's ndim={ndim}.")
        self._dim_extend = dim_extend
        if collate_fn is None:
            collate_fn = default_collate if isinstance(storage, ListStorage) else _identity
        self._collate_fn = collate_fn
        if transform_factory is not None:
            self.append_transform(transform_factory())
        if self.shared:
            self._share_parts()

    def __getattr__(self, name: str) -> Any:
        # only reached when normal lookup fails: a part of a ``delayed_init`` buffer not built yet
        if name in _DELAYED:
            pending = self.__dict__.get("_pending_parts")
            if pending is not None:
                self._pending_parts = None
                try:
                    self._build_parts(*pending)
                except BaseException:
                    self._pending_parts = pending
                    raise
                return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def initialized(self) -> bool:
        """Whether the storage, sampler and writer exist (``False`` until first use with ``delayed_init``)."""
        return self.__dict__.get("_pending_parts") is None

    def _default_writer(self) -> Writer:
        return RoundRobinWriter(compilable=self._compilable)

    @property
    def compilable(self) -> bool:
        """Whether the default storage and writer were built with ``compilable=True``."""
        return self._compilable

    def _guard(self) -> Any:
        # Dynamo cannot enter a threading lock: skipped while torch.compile traces (TorchRL does the same)
        return contextlib.nullcontext() if torch.compiler.is_compiling() else self._lock

    # ------------------------------------------------------------------ parts
    @property
    def storage(self) -> Storage:
        """The storage holding the items."""
        return self._storage

    @property
    def sampler(self) -> Sampler:
        """The sampler that picks the items of each batch."""
        return self._sampler

    @property
    def writer(self) -> Writer:
        """The writer that decides where new items go."""
        return self._writer

    @property
    def batch_size(self) -> int | None:
        """The default batch size of :meth:`sample` (``None``: it must be passed)."""
        return self._batch_size

    def set_rng(self, generator: torch.Generator) -> None:
        """Makes sampling draw from ``generator``."""
        self._rng = generator
        self._sampler._rng = generator

    @property
    def dim_extend(self) -> int:
        """The dim of the data ``extend`` writes along (moved first to make the storage's rows)."""
        return self._dim_extend

    @property
    def write_count(self) -> int:
        """The number of items written through ``add``/``extend`` (``0`` for writers that do not count)."""
        return int(getattr(self._writer, "_write_count", 0))

    def stats(self) -> dict:
        """A JSON-serializable snapshot: ``size``, ``write_count``, ``prefetch_queue_size``,
        ``initialized`` and, when the storage has one, ``capacity`` and ``utilization``.

        Changes nothing (a ``delayed_init`` buffer stays unbuilt).

        Examples:
            >>> import torch
            >>> from rl_replay import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(10))
            >>> _ = rb.extend(torch.arange(4))
            >>> s = rb.stats()
            >>> s["size"], s["write_count"], s["capacity"], s["utilization"]
            (4, 4, 10, 0.4)
        """
        if not self.initialized:
            pending = self.__dict__["_pending_parts"]
            stats: dict = {"size": 0, "write_count": 0, "prefetch_queue_size": 0, "initialized": False}
            capacity = getattr(pending[0], "max_size", None)
            if isinstance(capacity, int):
                stats.update(capacity=capacity, utilization=0.0)
            return stats
        with self._lock:
            size = len(self)
            capacity = getattr(self._storage, "max_size", None)
            stats = {
                "size": int(size),
                "write_count": self.write_count,
                "prefetch_queue_size": len(self._prefetch_queue),
                "initialized": True,
            }
        if isinstance(capacity, int):
            stats.update(capacity=capacity, utilization=size / capacity if capacity else 0.0)
        return stats

    def share(self, shared: bool = True) -> "ReplayBuffer":
        """Marks the buffer as shared between processes (``False``: not shared any more).

        Transforms that keep write state are shared with it (their ``share_memory_``).

        Raises:
            RuntimeError: a transform keeps write state (``requires_shared_write_state``) but has no
                ``share_memory_``.
        """
        if shared:
            for t in self._transforms:
                _share_transform(t)
        self.shared = bool(shared)
        if shared and self.initialized:
            self._share_parts()
        return self

    def _share_parts(self) -> None:
        """Moves what tensor storages, writers and samplers hold to shared memory, so that processes
        started later (forked or spawned) write to the same items and counters."""
        storage = self._storage
        if not isinstance(storage, TensorStorage):
            return  # a list of Python objects cannot be shared; such a buffer is used by one process
        for part in (storage, self._writer, self._sampler):
            if not getattr(part, "_compilable", False):
                part.share_memory_()

    def set_sampler(self, sampler: Sampler) -> None:
        """Replaces the sampler (it gets the buffer's generator and, when it takes one, the storage)."""
        from ..samplers.consuming import ConsumingSampler, check_consuming_setup

        consuming = isinstance(sampler, ConsumingSampler)
        if consuming:
            check_consuming_setup(type(self).__name__, self._storage, self._writer, bool(self._prefetch))
        sampler._rng = self._rng
        self._register_storage_with(sampler)
        self._sampler = sampler
        self._consuming = consuming

    def _register_storage_with(self, sampler: Sampler) -> None:
        # samplers that map written rows to items (multi-dim storages) or read stored flags need the storage
        register = getattr(sampler, "register_storage", None)
        if register is not None:
            register(self._storage)

    def set_writer(self, writer: Writer) -> None:
        """Replaces the writer (registered with the buffer's storage)."""
        writer.register_storage(self._storage)
        self._writer = writer

    def __len__(self) -> int:
        if self._consuming:  # consumed items are gone
            return cast(ConsumingSampler, self._sampler)._num_sampleable(self._storage)
        return len(self._storage)

    # ------------------------------------------------------------------ transforms
    @property
    def transform(self) -> Callable | None:
        """The transform applied to sampled batches: the only one, all of them in order, or ``None``."""
        return (
            self._transforms[0]
            if len(self._transforms) == 1
            else (self._apply_transforms if self._transforms else None)
        )

    def append_transform(self, transform: Callable, *, invert: bool = False) -> "ReplayBuffer":
        """Adds a transform applied after the others to every sampled batch (``invert=True``: a
        callable applied to the data written instead, before the other transforms' inverses)."""
        if not callable(transform):
            raise TypeError(f"append_transform takes a callable, got {type(transform).__name__}.")
        if invert:
            transform = _WriteTransform(transform)
        if self.shared:
            _share_transform(transform)
        self._transforms.append(transform)
        return self

    def insert_transform(self, index: int, transform: Callable, *, invert: bool = False) -> "ReplayBuffer":
        """Inserts a transform at position ``index`` of the transforms applied to sampled batches
        (``invert=True``: of those applied to written data, see :meth:`append_transform`).

        Raises:
            TypeError: ``transform`` is not callable or ``index`` is not an int.
            ValueError: ``index`` is outside ``[-n, n]`` for ``n`` transforms (nothing inserted).
        """
        if not callable(transform):
            raise TypeError(f"insert_transform takes a callable, got {type(transform).__name__}.")
        n = len(self._transforms)
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"insert_transform: index must be an int, got {index!r}.")
        if not -n <= index <= n:
            raise ValueError(
                f"insert_transform: index {index} is out of range for {n} transform(s) (valid: {-n} to {n})."
            )
        if invert:
            transform = _WriteTransform(transform)
        if self.shared:
            _share_transform(transform)
        self._transforms.insert(index, transform)
        return self

    def _apply_transforms(self, data: Any) -> Any:
        for t in self._transforms:
            data = t(data)
        return data

    def _apply_inverse(self, data: Any) -> Any:
        # rl-envs transforms map "outside" entries back to what is stored (e.g. Reward2GoTransform)
        for t in reversed(self._transforms):
            inv = getattr(t, "inv", None)
            if inv is not None and getattr(t, "has_inverse", True):
                data = inv(data)
        return data

    # ------------------------------------------------------------------ writes
    def _from_dicts(self, data: Any, what: str) -> tuple[Any, bool]:
        """Dicts as the storage takes them, and whether reads should give dicts back.

        A tensor storage gets one TensorDict (a list of dicts stacked, one dict as one item, a dict of
        batches as is); other storages keep each dict as it is (checked first when the default collate
        will stack them). Raises, naming the item and the key, before anything is written.
        """
        owner = f"{type(self).__name__}.{what}"
        if type(data) is list and isinstance(self._storage, TensorStorage) and data and not isinstance(data[0], dict):
            return _stack_items(owner, data), False  # one item per entry: stacked as the storage holds them
        if not isinstance(self._storage, TensorStorage):
            if type(data) is dict and what == "extend":
                raise TypeError(
                    f"{owner}: a {type(self._storage).__name__} takes a list of items, got a dict; pass [item] for one."
                )
            if what == "extend" and self._collate_fn is default_collate and is_dict_list(data):
                check_dicts(data, owner)
            return data, False
        if is_tensor_tree(data) and (not converts_to_tensordict(data) or self._storage._tree_spec is not None):
            return data, False  # a pytree (non-string keys, lists, tuples): the storage keeps its structure
        batch = as_tensordict(data, owner, one=what == "add")
        return (data, False) if batch is None else (batch, True)

    def add(self, data: Any) -> Any:
        """Writes one item; returns its index."""
        dicts = False
        if type(data) is dict:
            data, dicts = self._from_dicts(data, "add")
        elif is_tensor_collection(data) and data.batch_dims >= self._storage.ndim:
            warnings.warn(
                f"Using `add()` with a TensorDict that has batch_size={list(data.batch_size)}: it is stored as one "
                f"item of the {self._storage.ndim}-dim storage. Use `extend()` to write one item per entry of its "
                "first dim, or `add()` an item with batch_size=[] to silence this warning.",
                UserWarning,
                stacklevel=2,
            )
        if self._transforms:
            data = self._apply_inverse(data)
            if data is None:  # the transform holds the item back (e.g. n-step returns waiting for more steps)
                return None
        with self._guard(), _process_write_lock(self._storage):
            first = dicts and len(self._storage) == 0
            index = self._writer.add(data) if not self._consuming else self._write_consuming(data, None)
            self._sampler.add(index)
            if first:
                self._dict_items = True
        return index

    def extend(self, data: Sequence | dict | TensorDictBase | torch.Tensor) -> torch.Tensor:
        """Writes items along their first dim (or a list of items, e.g. one dict per item); returns their indices."""
        dicts = False
        if type(data) is list or type(data) is dict:
            data, dicts = self._from_dicts(data, "extend")
        if self._transforms:
            data = self._apply_inverse(data)
            if data is None:  # nothing complete to write yet (e.g. MultiStepTransform)
                return torch.zeros(0, dtype=torch.int64)
        if self._dim_extend:
            data = _dim_first(data, self._dim_extend)
        with self._guard(), _process_write_lock(self._storage):
            first = dicts and len(self._storage) == 0
            index = self._writer.extend(data) if not self._consuming else self._write_consuming(data, _count(data))
            self._sampler.extend(index)
            if first:  # the first items were dicts: reads give dicts back, as TorchRL does
                self._dict_items = True
        return index

    def _write_consuming(self, data: Any, n: int | None) -> Any:
        """Writes one item (``n=None``) or ``n`` items into consumed slots first, oldest consumed
        first; what remains goes to the writer's cursor, which skips the slots just reused."""
        writer: Any = self._writer  # a RoundRobinWriter (checked when the ConsumingSampler was set)
        free = cast(ConsumingSampler, self._sampler)._pop_consumed_indices(1 if n is None else n)
        if not free.numel():
            return writer.add(data) if n is None else writer.extend(data)
        if n is None:
            return writer.write_at(int(free[0]), data)
        if free.numel() < n:
            capacity = slot_count(self._storage)
            reused = set(free.tolist())
            cursor, rest, scanned = writer._cursor, [], 0
            while len(rest) < n - free.numel():
                if cursor not in reused or scanned >= capacity:
                    rest.append(cursor)
                cursor = (cursor + 1) % capacity
                scanned += 1
            writer._cursor = cursor
            free = torch.cat([free, torch.tensor(rest, dtype=torch.int64)])
        return writer.write_at(free, data)

    def update_if_present(
        self,
        *,
        index: Any,
        generation: Any,
        patch: Any,
        version_key: Any = None,
        version: Any = None,
        require_newer: bool = False,
    ) -> Any:
        """Writes ``patch`` into the records at ``index`` whose slot generation still equals
        ``generation`` (the stamps a sample carries as ``"index_generation"``); records whose slot
        was rewritten or emptied since are skipped, untouched.

        Needs a writer built with ``track_generations=True`` and a tensor storage of TensorDicts.
        The whole patch is checked (keys, shapes, dtypes) before anything is written.

        Args:
            index: the records' indices (as ``extend`` returns them or a sample's ``"index"``).
            generation: their generation stamps, one per index.
            patch: ``{key: tensor}`` (or a TensorDict), one row per record.
            version_key: a stored per-record scalar; with ``version``, a live record is patched only
                if ``version`` is newer (``require_newer``) or at least as new as the stored one,
                and the version is written with the patch.
            version: an int, or one per record.
            require_newer: refuse equal versions.

        Returns:
            A :class:`~rl_replay.conditional_update.ConditionalUpdateResult` (``updated``,
            ``version_rejected``, counts), in input order.

        Raises:
            RuntimeError: the writer does not track generations or the storage cannot be patched.
            KeyError: a patch key (or ``version_key``) is not stored.
            ValueError: a shape or dtype mismatch, or ``version_key`` without ``version``.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> from rl_replay import LazyTensorStorage, TensorDictReplayBuffer, TensorDictRoundRobinWriter
            >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4),
            ...                             writer=TensorDictRoundRobinWriter(track_generations=True))
            >>> index = rb.extend(TensorDict(value=torch.zeros(4), batch_size=[4]))
            >>> generation = rb.writer.generations_of(index)
            >>> _ = rb.extend(TensorDict(value=torch.ones(1), batch_size=[1]))  # slot 0 is reused
            >>> result = rb.update_if_present(index=index, generation=generation, patch={"value": torch.full((4,), 7.0)})
            >>> result.updated.tolist(), rb[:]["value"].tolist()
            ([False, True, True, True], [1.0, 7.0, 7.0, 7.0])
        """
        from ..conditional_update import update_if_present

        return update_if_present(
            self,
            index=index,
            generation=generation,
            patch=patch,
            version_key=version_key,
            version=version,
            require_newer=require_newer,
        )

    def update_priority(self, index: Any, priority: Any) -> None:
        """Sets the priorities of the items at ``index`` (samplers without priorities raise ``RuntimeError``)."""
        with self._lock:
            self._sampler.update_priority(index, priority)

    def empty(self, empty_write_count: bool = True) -> None:
        """Forgets every item (and the sampler's and writer's state; the write count too unless
        ``empty_write_count=False``)."""
        with self._lock:
            self._clear_prefetch()
            self._writer._empty(empty_write_count)
            self._sampler._empty()
            self._storage._empty()
            self._dict_items = False

    # ------------------------------------------------------------------ reads
    def _sample_now(self, batch_size: int) -> tuple[Any, dict]:
        with self._guard():
            index, info = self._sampler.sample(self._storage, batch_size)
            if self._sample_unit is not None:
                index, info = self._sample_unit.expand(index, info, self._storage)
            if self._writer.tracks_generations:
                info["index_generation"] = self._writer.generations_of(index)
            data = self._storage.get(index)
            # read with the sample: a prefetching thread may start the next epoch before the caller looks
            ran_out = self._sampler.ran_out
        info["index"] = index
        info["_ran_out"] = ran_out
        data = self._collate_fn(data)
        if self._transforms:
            data = self._apply_transforms(data)
        if self._pin_memory and torch.cuda.is_available():
            data = data.pin_memory()
        if self._dict_items:  # last: transforms and pinning work on the TensorDict
            data = data.to_dict()
        return data, info

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """A batch of ``batch_size`` items (the buffer's default when ``None``); with ``return_info``,
        ``(batch, info)`` where ``info["index"]`` holds the sampled indices."""
        if batch_size is None:
            batch_size = self._batch_size
            if batch_size is None:
                raise RuntimeError(
                    f"{type(self).__name__}.sample: batch_size not specified: pass one to sample() or set it at construction."
                )
        elif type(batch_size) is not int or batch_size < 0:
            batch_size = _batch_size_arg(batch_size)
        if self._batch_size is not None and batch_size != self._batch_size and self._prefetch:
            raise ValueError(
                f"ReplayBuffer.sample: batch_size {batch_size} differs from the buffer's {self._batch_size} used for prefetching."
            )
        if self._prefetch and not self._lock_held():
            data, info = self._sample_prefetched(batch_size)
        else:  # (with the buffer's lock held by this thread, the prefetching thread could never take it)
            data, info = self._sample_now(batch_size)
        self._last_ran_out = info.pop("_ran_out", self._sampler.ran_out)
        return (data, info) if return_info else data

    def _lock_held(self) -> bool:
        owned = getattr(self._lock, "_is_owned", None)
        return bool(owned is not None and owned())

    def _sample_prefetched(self, batch_size: int) -> tuple[Any, dict]:
        """The oldest prefetched batch (drawn now when none is queued), then the queue topped up to
        ``prefetch`` batches; a failed or timed-out batch empties the queue before raising."""
        if self._prefetcher is None:
            self._prefetcher = _Prefetcher(self)
        queue = self._prefetch_queue
        if not queue:
            queue.append(self._prefetcher.submit(batch_size))
        future = queue.pop(0)
        while len(queue) < self._prefetch:
            queue.append(self._prefetcher.submit(batch_size))
        try:
            return future.result(timeout=self.prefetch_timeout)
        except FutureTimeout:
            # the thread is stuck in a batch: drop it (a daemon, it cannot block the exit); the next call starts a new one
            self._clear_prefetch()
            self._stop_prefetcher(timeout=0)
            raise TimeoutError(
                f"{type(self).__name__}.sample: the prefetching thread gave no batch within "
                f"prefetch_timeout={self.prefetch_timeout}s (stuck in the sampler, storage, collate_fn or a transform?)."
            ) from None
        except BaseException:
            self._clear_prefetch()  # batches queued behind a failed one would be stale
            raise

    def _clear_prefetch(self) -> None:
        for future in self._prefetch_queue:
            future.cancel()
        self._prefetch_queue.clear()

    def _stop_prefetcher(self, timeout: float | None = None) -> bool:
        prefetcher, self._prefetcher = self.__dict__.get("_prefetcher"), None
        return True if prefetcher is None else prefetcher.close(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Drops the prefetched batches and stops the prefetching thread, waiting up to ``timeout``
        seconds for a batch being drawn (``None``: as long as it takes). The buffer stays usable: a
        later ``sample()`` starts a new thread. Deleting the buffer does this without waiting.

        Raises:
            TimeoutError: the thread was still drawing a batch after ``timeout`` seconds.
        """
        self._clear_prefetch()
        if not self._stop_prefetcher(timeout):
            raise TimeoutError(
                f"{type(self).__name__}.close: the prefetching thread is still running after {timeout}s."
            )

    def __getitem__(self, index: Any) -> Any:
        if _is_key(index) or (isinstance(index, tuple) and len(index) > 1):  # an entry, or several dims
            return self[:][index]
        if isinstance(index, tuple):
            index = cast(tuple, index)[0]
        if self._dim_extend:  # items indexed in the layout they were written in (dim_extend back in place)
            with self._lock:
                data = _dim_first(self._stored_rows("__getitem__", tensors=True), self._dim_extend)[index]
        else:
            if isinstance(index, slice):  # only stored items, not the whole preallocated capacity
                index = slice(*index.indices(len(self._storage)))
            with self._lock:
                data = self._storage.get(index)
        if isinstance(data, list):
            data = self._collate_fn(data)
        if self._transforms:
            data = self._apply_transforms(data)
        return data.to_dict() if self._dict_items else data

    def __setitem__(self, index: Any, value: Any) -> None:
        """Overwrites stored items in place (``rb[3] = item``, ``rb[:4] = items``; the inverse
        transforms run first), or one entry of every stored item (``rb["obs"] = values``).

        With a tensor storage of TensorDicts only the entries given are written, and entries the
        storage does not hold yet are added (zero at the other items)."""
        if _is_key(index):
            with self._lock:
                self._stored_rows("__setitem__").set_(index, value)
                self._storage._bump_mutation_revision()
            return
        if isinstance(index, tuple) and len(index) == 1:
            index = index[0]
        if isinstance(index, tuple) or self._dim_extend:  # through a view of the stored items, as indexed by []
            if self._transforms:
                value = self._apply_inverse(value)
            with self._lock:
                view = self._stored_view()
                if is_tensor_collection(view) and is_tensor_collection(value):  # new entries first (zeros elsewhere)
                    lead = write_shape(view.batch_size, index)
                    leaves = self._storage._leaves
                    new = {
                        k: (v.shape[len(lead) :], v.dtype, v.device)
                        for k, v in value.items(include_nested=True, leaves_only=True)
                        if k not in leaves
                    }
                    if new:
                        inner = self._storage._storage
                        self._storage._add_entries(new, inner.batch_size[: self._storage._lead_dims])
                        view = self._stored_view()
                view[index] = value
                self._storage._bump_mutation_revision()
            return
        if self._transforms:
            value = self._apply_inverse(value)
        storage = self._storage
        with self._lock:
            if isinstance(storage, TensorStorage) and is_tensor_collection(value):
                storage.update_at(index, value)  # the entries given (new ones are added to the storage)
            else:
                storage.set(index, value)
            self._sampler.mark_update(index)

    def read_all_in_order(self, end: int | None = None) -> Any:
        """The stored items in storage order (the first ``end`` of them): ``rb[:end]``."""
        return self[:] if end is None else self[:end]

    def write_all(self, data: Any, end: int | None = None) -> None:
        """Writes ``data`` over the first items in storage order: ``rb[:end] = data`` (``end``:
        the length of ``data``)."""
        if end is None:
            end = data.shape[0] if is_tensor_collection(data) or isinstance(data, torch.Tensor) else len(data)
        self[:end] = data

    def _stored_view(self) -> Any:
        """The stored items as ``[]`` indexes them: rows, with ``dim_extend`` moved back in place."""
        view = self._stored_rows("__setitem__", tensors=True)
        return _dim_first(view, self._dim_extend) if self._dim_extend else view

    def _stored_rows(self, what: str, tensors: bool = False) -> Any:
        """The stored rows of a tensor storage of TensorDicts (or of a tensor, with ``tensors``), as
        a view (writes go to the storage)."""
        storage = self._storage
        inner = getattr(storage, "_storage", None)
        kind_ok = is_tensor_collection(inner) or (tensors and isinstance(inner, torch.Tensor))
        if not isinstance(storage, TensorStorage) or not kind_ok or storage._tree_spec is not None:
            raise TypeError(
                f"{type(self).__name__}.{what} writes entries in place: it needs a tensor storage of TensorDicts "
                f"(LazyTensorStorage, LazyMemmapStorage), got {type(storage).__name__}."
            )
        return cast(Any, inner)[: int(storage._len_t)]

    def set_at_(self, key: Any, value: torch.Tensor, index: Any) -> "ReplayBuffer":
        """Writes ``value`` into entry ``key`` of the stored items at ``index``, in place."""
        with self._lock:
            self._stored_rows("set_at_").set_at_(key, value, index)
            self._storage._bump_mutation_revision()
        return self

    def set_(self, key: Any, value: torch.Tensor) -> "ReplayBuffer":
        """Writes ``value`` (one row per stored item) into entry ``key``, in place."""
        with self._lock:
            self._stored_rows("set_").set_(key, value)
            self._storage._bump_mutation_revision()
        return self

    def update_(self, data: Any, clone: bool = False, *, keys_to_update: Any = None) -> "ReplayBuffer":
        """Writes the entries of ``data`` (a dict or TensorDict, one row per stored item) in place."""
        with self._lock:
            self._stored_rows("update_").update_(data, clone=clone, keys_to_update=keys_to_update)
            self._storage._bump_mutation_revision()
        return self

    def __iter__(self) -> Iterator[Any]:
        if self._batch_size is None:
            raise RuntimeError(
                "Cannot iterate over the replay buffer. Batch_size was not specified at construction: "
                "iterating needs a batch_size."
            )
        self._sampler.ran_out = False
        while True:
            yield self.sample()
            if self._last_ran_out:  # the epoch of the batch just returned is over
                return

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """The buffer's state under TorchRL's keys: ``"_storage"`` (the items, copied), ``"_sampler"``,
        ``"_writer"``, ``"_batch_size"`` and ``"_rng"`` (``(state, device)`` of the generator, or ``None``).

        For a crash-safe checkpoint on disk use :meth:`dumps`.
        """
        with self._lock:
            rng = self._rng
            return {
                "_storage": self._storage.state_dict(),
                "_sampler": self._sampler.state_dict(),
                "_writer": self._writer.state_dict(),
                "_batch_size": self._batch_size,
                "_rng": None if rng is None else (rng.get_state(), str(rng.device)),
            }

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` (the unprefixed keys of earlier versions are read too). The
        sampler's, writer's and generator's states are checked first: a bad one raises ``ValueError``
        naming it, with the buffer unchanged."""
        owner = f"{type(self).__name__}.load_state_dict"
        parts = ("storage", "sampler", "writer")
        if isinstance(state, dict) and not {f"_{p}" for p in parts} <= state.keys() and set(parts) <= state.keys():
            state = {f"_{k}": v for k, v in state.items()}  # the earlier, unprefixed keys
        if not isinstance(state, dict) or not {f"_{p}" for p in parts} <= state.keys():
            got = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                f"{owner}: state must be a dict with '_storage', '_sampler' and '_writer' entries, got {got}."
            )
        rng, device = state.get("_rng"), None
        if isinstance(rng, (tuple, list)) and len(rng) == 2:
            rng, device = rng
        with self._lock:
            for name, part in (("_sampler", self._sampler), ("_writer", self._writer)):
                try:
                    check_loadable(part, state[name])
                except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as err:
                    raise ValueError(
                        f"{owner}: state[{name!r}] is not a valid {type(part).__name__} state: {err}"
                    ) from err
            generator = None
            if rng is not None:
                try:
                    generator = torch.Generator(device=device if device is not None else "cpu")
                    generator.set_state(cast(torch.Tensor, rng))
                except (TypeError, ValueError, RuntimeError) as err:
                    raise ValueError(f"{owner}: state['_rng'] is not a generator state: {err}") from err
            self._clear_prefetch()  # batches drawn from the old state
            self._storage.load_state_dict(state["_storage"])  # checks its state before its one change: may go first
            self._sampler.load_state_dict(state["_sampler"])
            self._writer.load_state_dict(state["_writer"])
            if "_batch_size" in state and state["_batch_size"] is not None:
                self._batch_size = state["_batch_size"]
            if generator is not None:
                if self._rng is None:
                    self.set_rng(generator)
                else:
                    self._rng.set_state(generator.get_state())

    def register_save_hook(self, hook: Callable) -> None:
        """Adds a hook applied to the stored items saved by :meth:`dumps` (see ``Storage.register_save_hook``)."""
        self._storage.register_save_hook(hook)

    def register_load_hook(self, hook: Callable) -> None:
        """Adds a hook applied to the items :meth:`loads` reads (see ``Storage.register_load_hook``)."""
        self._storage.register_load_hook(hook)

    def dumps(self, path: Any) -> None:
        """Writes a crash-safe checkpoint of the whole buffer (items, sampler, writer, RNG) to ``path``."""
        from ..checkpoint import dump_buffer

        with self._lock:
            dump_buffer(self, path)

    def loads(self, path: Any) -> None:
        """Restores a checkpoint written by :meth:`dumps` (no unpickling)."""
        from ..checkpoint import load_buffer

        with self._lock:
            self._clear_prefetch()
            load_buffer(self, path)

    def share_memory_(self) -> "ReplayBuffer":
        """Moves the storage, the writer's cursor and the sampler's state to shared memory."""
        self._storage.share_memory_()
        self._writer.share_memory_()
        self._sampler.share_memory_()
        return self

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_lock"] = None
        state["_prefetcher"] = None
        state["_prefetch_queue"] = []
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def __del__(self) -> None:
        for future in self.__dict__.get("_prefetch_queue", ()):
            future.cancel()
        self._stop_prefetcher(timeout=0)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(storage={self._storage!r}, sampler={self._sampler!r}, writer={self._writer!r}, "
            f"batch_size={self._batch_size})"
        )
