"""Using one replay buffer from several processes: shared storage and cursor, supervised workers.

A buffer whose storage lives in shared memory (``LazyTensorStorage`` after :func:`make_shared`)
or in files (``LazyMemmapStorage``) can be handed to another process: the items, the item
count and the writer's cursor are shared, so items written by a child are seen by the parent
and the cursor keeps advancing from wherever the last writer left it.

Rules:

- A lazy storage must be allocated *before* it is shared (tensors allocated later in one
  process are invisible to the others). :func:`make_shared` allocates it from an example batch.
- One writing process at a time: the buffer's lock is per process, so two processes extending at
  once could claim the same slots. Any number of processes may sample. A reader may see a row
  that is being overwritten (after the buffer wrapped around) half-written.
- Sampler state (e.g. ``SamplerWithoutReplacement``'s epoch) and the buffer's ``torch.Generator``
  are per process: a child gets a copy of the generator's state when it starts.

Examples:
    >>> import torch
    >>> from tdict import TensorDict
    >>> from rl_replay import LazyTensorStorage, ReplayBuffer
    >>> rb = make_shared(ReplayBuffer(storage=LazyTensorStorage(8)), TensorDict(obs=torch.zeros(1, 3), batch_size=[1]))
    >>> rb.storage._storage["obs"].is_shared(), len(rb)
    (True, 0)
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
import torch.multiprocessing as mp
from tdict import is_tensor_collection

from .storages.list import ListStorage
from .storages.tensor import TensorStorage

__all__ = ["BufferProcess", "make_shared"]


def _rebuild_generator(device: str, state: bytes) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
    return generator


def _reduce_generator(generator: torch.Generator) -> tuple:
    return _rebuild_generator, (str(generator.device), bytes(generator.get_state().tolist()))  # no numpy needed


# A buffer's torch.Generator travels to spawn/forkserver children as a copy of its state: torch's
# own pickling of generators goes through an empty shared tensor that fails to rebuild in the child
# ("unable to resize file"). Registered for multiprocessing's pickler only; plain pickle is untouched.
ForkingPickler.register(torch.Generator, _reduce_generator)


def make_shared(buffer: Any, example: Any = None) -> Any:
    """Allocates ``buffer``'s storage (from ``example`` if still lazy) and moves the storage, its
    item count and the writer's cursor to shared memory. Returns ``buffer``.

    Args:
        buffer: a replay buffer with a tensor storage.
        example: a batch shaped like what ``extend`` will receive (its first ``ndim`` dims index
            items; one item is enough). Needed only while the lazy storage is unallocated.

    Raises:
        TypeError: the storage keeps Python objects (``ListStorage``), which cannot be shared.
        ValueError: the storage is not allocated and no ``example`` was given.
    """
    storage = buffer.storage
    if isinstance(storage, ListStorage):
        raise TypeError(
            "make_shared: a ListStorage keeps Python objects in a per-process list and cannot be shared; "
            "use LazyTensorStorage or LazyMemmapStorage."
        )
    if isinstance(storage, TensorStorage) and storage._storage is None:
        if example is None:
            raise ValueError(
                "make_shared: the lazy storage is not allocated yet and would not be shared; pass an example batch "
                "(e.g. the first batch you will extend with) or extend the buffer before sharing it."
            )
        example = example[:1]
        if is_tensor_collection(example) and _writes_index(buffer.writer) and "index" not in example.keys():  # noqa: SIM118
            example = example.clone()
            example.set("index", torch.zeros(example.batch_size, dtype=torch.int64))
        storage._allocate(example)
    buffer.share_memory_()
    return buffer


def _writes_index(writer: Any) -> bool:
    """Whether the writer adds an ``"index"`` entry to the stored TensorDicts."""
    from .writers import TensorDictRoundRobinWriter

    if isinstance(writer, TensorDictRoundRobinWriter):
        return True
    return type(writer).__name__ == "TensorDictMaxValueWriter"


def _child_main(conn: Any, target: Callable, args: tuple, kwargs: dict) -> None:
    try:
        target(*args, **kwargs)
    except BaseException as err:  # noqa: BLE001 - report to the parent, then fail the process
        try:
            conn.send(f"{type(err).__name__}: {err}\n{traceback.format_exc()}")
        finally:
            conn.close()
        raise SystemExit(1)
    conn.close()


class BufferProcess:
    """Runs ``target(*args, **kwargs)`` in a child process (e.g. a writer extending a shared buffer)
    and turns its failure into an exception in the parent.

    :meth:`join` raises ``ChildProcessError`` (with the child's traceback, or the signal that
    killed it) if the child failed, and ``TimeoutError`` (after killing it) if it did not end in
    time. Leaving the ``with`` block kills a child that is still running, so none is left behind.

    Args:
        target: a picklable function (module level) run in the child.
        *args: its arguments (a shared buffer travels as shared memory, not as a copy).
        context: the multiprocessing start method (``"spawn"`` by default: safe with threads).
        **kwargs: its keyword arguments.

    Examples:
        >>> import operator
        >>> with BufferProcess(operator.truediv, 1, 0, context="fork") as p:  # doctest: +ELLIPSIS
        ...     p.join(timeout=60)
        Traceback (most recent call last):
        ...
        ChildProcessError: child process ... failed (exit code 1): ZeroDivisionError: division by zero...
    """

    def __init__(self, target: Callable, *args: Any, context: str = "spawn", **kwargs: Any) -> None:
        ctx = mp.get_context(context)
        self._recv, send = ctx.Pipe(duplex=False)
        self._send = send
        # (typeshed's BaseContext, what get_context returns for a str, lacks Process; every real context has it)
        self.process = ctx.Process(target=_child_main, args=(send, target, args, kwargs), daemon=True)  # pyright: ignore[reportAttributeAccessIssue]
        self._target_name = getattr(target, "__qualname__", repr(target))

    def start(self) -> BufferProcess:
        """Starts the child process; returns ``self``."""
        self.process.start()
        self._send.close()  # the child holds the write end now
        return self

    def __enter__(self) -> BufferProcess:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        """Whether the child process is running."""
        return self.process.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Waits for the child; raises if it failed or is still running after ``timeout`` seconds."""
        p = self.process
        p.join(timeout)
        if p.is_alive():
            self.close()
            raise TimeoutError(f"child process {self._target_name} did not finish within {timeout} s; it was killed.")
        if p.exitcode != 0:
            message = ""
            if self._recv.poll():
                with contextlib.suppress(EOFError, OSError):
                    message = self._recv.recv()
            code = p.exitcode
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            raise ChildProcessError(f"child process {self._target_name} failed ({how}): {message}".rstrip(": "))

    def close(self) -> None:
        """Kills the child if it still runs and waits for it."""
        p = self.process
        if p.pid is not None and p.is_alive():
            p.kill()
        if p.pid is not None:
            p.join(10)
        self._recv.close()
