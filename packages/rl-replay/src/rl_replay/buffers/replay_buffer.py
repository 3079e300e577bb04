"""ReplayBuffer: a storage, a writer and a sampler behind add/extend/sample."""

from __future__ import annotations

import contextlib
import operator
import queue
import threading
import weakref
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Iterator, Sequence

import torch
from tdict import TensorDictBase, is_tensor_collection

from .._dict_items import as_tensordict, check_dicts, is_dict_list, stack_dicts
from .._part import check_compilable, check_loadable
from ..samplers.base import Sampler
from ..samplers.uniform import RandomSampler
from ..storages.base import Storage
from ..storages.list import ListStorage
from ..storages.tensor import TensorStorage
from ..writers import RoundRobinWriter, Writer

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


class _Prefetcher:
    """One daemon thread that draws batches ahead, in submission order; results come back as Futures.

    The thread holds only a weak reference to the buffer, so a buffer that is no longer used is
    collected (its ``__del__`` then stops the thread), and a daemon thread never blocks the
    interpreter's exit, even when a batch hangs.
    """

    def __init__(self, buffer: "ReplayBuffer") -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=_Prefetcher._run, args=(self._jobs, weakref.ref(buffer)), name="rl_replay_prefetch", daemon=True
        )
        self._thread.start()

    @staticmethod
    def _run(jobs: queue.SimpleQueue, buffer_ref: Any) -> None:
        while True:
            job = jobs.get()
            if job is None:
                return
            future, batch_size = job
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
        storage: Storage | None = None,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable | None = None,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
        compilable: bool | None = None,
        prefetch_timeout: float | None = None,
    ) -> None:
        owner = type(self).__name__
        compilable = False if compilable is None else compilable
        check_compilable(owner, compilable)
        prefetch = _prefetch_arg(owner, prefetch)
        if prefetch and batch_size is None:
            raise ValueError(
                f"{owner}: prefetch={prefetch} needs a batch_size at construction (the batches are drawn "
                "ahead of the sample() calls), got batch_size=None."
            )
        self._compilable = compilable
        self.prefetch_timeout = _timeout_arg(owner, prefetch_timeout)
        self._storage = storage if storage is not None else ListStorage(1000, compilable=compilable)
        self._sampler = sampler if sampler is not None else RandomSampler()
        self._writer = writer if writer is not None else self._default_writer()
        self._writer.register_storage(self._storage)
        self._register_storage_with(self._sampler)
        if collate_fn is None:
            collate_fn = default_collate if isinstance(self._storage, ListStorage) else _identity
        self._collate_fn = collate_fn
        self._pin_memory = pin_memory
        self._prefetch = prefetch
        self._prefetch_queue: list[Future] = []
        self._prefetcher: _Prefetcher | None = None
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"ReplayBuffer: batch_size must be >= 1, got {batch_size}.")
        self._batch_size = batch_size
        self._transforms: list = []
        if transform is not None:
            self.append_transform(transform)
        self._lock = threading.RLock()
        self._rng = None
        self._last_ran_out = False
        self._dict_items = False  # items were written as dicts into a tensor storage: reads give dicts back
        if generator is not None:
            self.set_rng(generator)

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

    def set_sampler(self, sampler: Sampler) -> None:
        """Replaces the sampler (it gets the buffer's generator and, when it takes one, the storage)."""
        sampler._rng = self._rng
        self._register_storage_with(sampler)
        self._sampler = sampler

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

    def append_transform(self, transform: Callable) -> "ReplayBuffer":
        """Adds a transform applied after the others to every sampled batch."""
        if not callable(transform):
            raise TypeError(f"append_transform takes a callable, got {type(transform).__name__}.")
        self._transforms.append(transform)
        return self

    def insert_transform(self, index: int, transform: Callable) -> "ReplayBuffer":
        """Inserts a transform at position ``index`` of the transforms applied to sampled batches.

        Raises:
            TypeError: ``transform`` is not callable.
        """
        if not callable(transform):
            raise TypeError(f"insert_transform takes a callable, got {type(transform).__name__}.")
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
        if not isinstance(self._storage, TensorStorage):
            if type(data) is dict and what == "extend":
                raise TypeError(
                    f"{owner}: a {type(self._storage).__name__} takes a list of items, got a dict; pass [item] for one."
                )
            if what == "extend" and self._collate_fn is default_collate and is_dict_list(data):
                check_dicts(data, owner)
            return data, False
        batch = as_tensordict(data, owner, one=what == "add")
        return (data, False) if batch is None else (batch, True)

    def add(self, data: Any) -> Any:
        """Writes one item; returns its index."""
        dicts = False
        if type(data) is dict:
            data, dicts = self._from_dicts(data, "add")
        if self._transforms:
            data = self._apply_inverse(data)
            if data is None:  # the transform holds the item back (e.g. n-step returns waiting for more steps)
                return None
        with self._guard():
            first = dicts and len(self._storage) == 0
            index = self._writer.add(data)
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
        with self._guard():
            first = dicts and len(self._storage) == 0
            index = self._writer.extend(data)
            self._sampler.extend(index)
            if first:  # the first items were dicts: reads give dicts back, as TorchRL does
                self._dict_items = True
        return index

    def update_priority(self, index: Any, priority: Any) -> None:
        """Sets the priorities of the items at ``index`` (samplers without priorities raise ``RuntimeError``)."""
        with self._lock:
            self._sampler.update_priority(index, priority)

    def empty(self) -> None:
        """Forgets every item (and the sampler's and writer's state)."""
        with self._lock:
            self._clear_prefetch()
            self._writer._empty()
            self._sampler._empty()
            self._storage._empty()
            self._dict_items = False

    # ------------------------------------------------------------------ reads
    def _sample_now(self, batch_size: int) -> tuple[Any, dict]:
        with self._guard():
            index, info = self._sampler.sample(self._storage, batch_size)
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
                raise RuntimeError("ReplayBuffer.sample: no batch_size given and none set at construction.")
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
        if isinstance(index, slice):  # only stored items, not the whole preallocated capacity
            index = slice(*index.indices(len(self)))
        with self._lock:
            data = self._storage.get(index)
        if isinstance(data, list):
            data = self._collate_fn(data)
        if self._transforms:
            data = self._apply_transforms(data)
        return data.to_dict() if self._dict_items else data

    def __iter__(self) -> Iterator[Any]:
        if self._batch_size is None:
            raise RuntimeError("iterating a ReplayBuffer needs a batch_size set at construction.")
        self._sampler.ran_out = False
        while True:
            yield self.sample()
            if self._last_ran_out:  # the epoch of the batch just returned is over
                return

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """The writer's and sampler's state and the storage's item count (not the items: see ``dumps``)."""
        with self._lock:
            return {
                "storage": self._storage.state_dict(),
                "sampler": self._sampler.state_dict(),
                "writer": self._writer.state_dict(),
                "rng": None if self._rng is None else self._rng.get_state(),
            }

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`. Every part's state is checked first: a bad one raises
        ``ValueError`` naming it, with the buffer unchanged."""
        owner = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state, dict) or not {"storage", "sampler", "writer"} <= state.keys():
            got = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                f"{owner}: state must be a dict with 'storage', 'sampler' and 'writer' entries, got {got}."
            )
        rng = state.get("rng")
        with self._lock:
            for name, part in (("sampler", self._sampler), ("writer", self._writer)):
                try:
                    check_loadable(part, state[name])
                except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as err:
                    raise ValueError(
                        f"{owner}: state[{name!r}] is not a valid {type(part).__name__} state: {err}"
                    ) from err
            if rng is not None and self._rng is not None:
                try:
                    torch.Generator(device=self._rng.device).set_state(rng)
                except (TypeError, ValueError, RuntimeError) as err:
                    raise ValueError(f"{owner}: state['rng'] is not a generator state: {err}") from err
            self._clear_prefetch()  # batches drawn from the old state
            self._storage.load_state_dict(state["storage"])  # checks its state before its one change: may go first
            self._sampler.load_state_dict(state["sampler"])
            self._writer.load_state_dict(state["writer"])
            if rng is not None and self._rng is not None:
                self._rng.set_state(rng)

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
