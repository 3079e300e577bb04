"""Weight synchronisation between a learner and collector workers, with a policy-version counter.

A scheme has two sides. The learner calls :meth:`WeightSyncScheme.send` with a TensorDict of weights
(from ``TensorDict.from_module(policy)``) and a version number; each worker holds a
:class:`WeightReceiver` (from :meth:`WeightSyncScheme.receiver`, picklable) whose ``receive()``
returns ``(weights, version)`` once per new version and ``(None, version)`` otherwise.

Four transports live here:

* :class:`SharedMemWeightSyncScheme`: one shared-memory copy of the weights plus a shared version
  counter; ``send`` copies in place and bumps the version; workers copy a consistent snapshot.
* :class:`PipeWeightSyncScheme`: the weights travel through each worker's command pipe.
* :class:`RayWeightSyncScheme`: one object-store copy per version; actors fetch it when the version
  changed (used by :class:`~rl_collect.RayCollector`).
* :class:`DistributedWeightSyncScheme`: one flat byte buffer, broadcast (or sent point to point to
  idle workers) over a ``torch.distributed`` group (used by :class:`~rl_collect.DistributedCollector`).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Sequence

import torch
from tdict import TensorDict, TensorDictBase

__all__ = [
    "DistributedWeightReceiver",
    "DistributedWeightSyncScheme",
    "PipeWeightReceiver",
    "PipeWeightSyncScheme",
    "RayWeightReceiver",
    "RayWeightSyncScheme",
    "SharedMemWeightReceiver",
    "SharedMemWeightSyncScheme",
    "WeightReceiver",
    "WeightSyncScheme",
]

WEIGHTS_MESSAGE = "weights"


def _cpu_copy(weights: TensorDictBase) -> TensorDictBase:
    """A detached copy of ``weights`` on the CPU (one copy per leaf, from any device)."""
    return weights.detach().apply(lambda t: t.to("cpu", copy=True))


class WeightReceiver:
    """The worker side of a scheme: ``receive()`` returns ``(weights or None, version)``."""

    def receive(self) -> tuple[TensorDictBase | None, int]:
        """``(weights, version)``: new weights since the last call, or ``None`` when there are none (abstract)."""
        raise NotImplementedError

    def handle(self, message: tuple) -> bool:
        """Takes a command-pipe message meant for the scheme (returns whether it was one)."""
        return False


class WeightSyncScheme:
    """The learner side: ``init_sender`` once, then ``send(weights, version)`` after each update.

    Subclasses define the transport. ``receiver(worker_id)`` gives the object a worker process
    calls ``receive()`` on; it must be picklable (it travels to the worker when it starts).
    """

    def init_sender(self, weights: TensorDictBase | None, pipes: Sequence[Any] = ()) -> None:
        """Prepares the transport for ``len(pipes)`` workers (``weights`` is a template)."""
        raise NotImplementedError

    def attach_pipes(self, pipes: Sequence[Any]) -> None:
        """Gives the scheme the learner ends of the workers' command pipes (once they exist)."""

    def send(self, weights: TensorDictBase | None, version: int) -> None:
        """Publishes ``weights`` as ``version``: every receiver sees them at its next ``receive()``."""
        raise NotImplementedError

    def receiver(self, worker_id: int) -> WeightReceiver:
        """The picklable receiver that worker ``worker_id`` calls ``receive()`` on (abstract)."""
        raise NotImplementedError


class SharedMemWeightReceiver(WeightReceiver):
    """Reads the shared copy of :class:`SharedMemWeightSyncScheme` (a seqlock: never a torn read)."""

    def __init__(self, weights: TensorDictBase | None, meta: torch.Tensor, timeout: float = 30.0) -> None:
        self._weights = weights
        self._meta = meta  # [sequence (odd while a write is in progress), version]
        self._seen = int(meta[1])
        self._timeout = timeout

    def receive(self) -> tuple[TensorDictBase | None, int]:
        """A copy of the shared weights when their version changed since the last call, else ``None``.

        Raises:
            TimeoutError: the learner stayed in the middle of a write longer than ``timeout`` seconds.
        """
        deadline = time.monotonic() + self._timeout
        while True:
            seq = int(self._meta[0])
            version = int(self._meta[1])
            if seq % 2 == 0:
                if version == self._seen:
                    return None, version
                snapshot = self._weights.clone() if self._weights is not None else None
                if int(self._meta[0]) == seq:  # no write happened while we copied
                    self._seen = version
                    return snapshot, version
            if time.monotonic() > deadline:
                raise TimeoutError("SharedMemWeightReceiver: the weights stayed mid-write for too long.")
            time.sleep(1e-4)


class SharedMemWeightSyncScheme(WeightSyncScheme):
    """Weights in shared memory: ``send`` copies them in place and bumps a shared version.

    The shared copy is on the CPU even when the learner's weights are on a GPU; each worker copies
    it onto its own policy's device.

    Examples:
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> policy = nn.Linear(2, 1)
        >>> scheme = SharedMemWeightSyncScheme()
        >>> scheme.init_sender(TensorDict.from_module(policy))
        >>> receiver = scheme.receiver(0)
        >>> receiver.receive()[1]
        0
        >>> new = TensorDict.from_module(policy).apply(lambda t: t.detach() * 0)
        >>> scheme.send(new, version=1)
        >>> weights, version = receiver.receive()
        >>> version, float(weights["weight"].abs().sum())
        (1, 0.0)
        >>> receiver.receive()  # nothing new
        (None, 1)
    """

    def __init__(self) -> None:
        self._weights: TensorDictBase | None = None
        self._meta = torch.zeros(2, dtype=torch.int64).share_memory_()

    def init_sender(self, weights: TensorDictBase | None, pipes: Sequence[Any] = ()) -> None:
        if weights is not None and weights.numel() == 0 and not list(weights.keys()):
            weights = None
        # the shared copy lives in CPU shared memory whatever the learner's device: any worker can map
        # it (a forked one cannot touch CUDA) and copies it onto its own policy's device
        self._weights = _cpu_copy(weights).share_memory_() if weights is not None else None

    def send(self, weights: TensorDictBase | None, version: int) -> None:
        meta = self._meta
        meta[0] += 1  # odd: readers wait
        try:
            if weights is not None and self._weights is not None:
                self._weights.update_(weights.detach())
            meta[1] = int(version)
        finally:
            meta[0] += 1

    def receiver(self, worker_id: int) -> SharedMemWeightReceiver:
        """A receiver reading this scheme's shared copy (the same for every worker)."""
        return SharedMemWeightReceiver(self._weights, self._meta)

    @property
    def weights(self) -> TensorDictBase | None:
        """The shared copy (what workers read)."""
        return self._weights


class PipeWeightReceiver(WeightReceiver):
    """Holds the last weights that arrived through the worker's command pipe."""

    def __init__(self) -> None:
        self._pending: TensorDictBase | None = None
        self._version = 0
        self._new = False

    def handle(self, message: tuple) -> bool:
        if message[0] != WEIGHTS_MESSAGE:
            return False
        _, weights, version = message
        self._pending = weights if weights is not None else self._pending
        self._version = int(version)
        self._new = True
        return True

    def receive(self) -> tuple[TensorDictBase | None, int]:
        """The weights that arrived through the pipe since the last call (``None`` if none), with their version."""
        if not self._new:
            return None, self._version
        self._new = False
        weights, self._pending = self._pending, None
        return weights, self._version


class PipeWeightSyncScheme(WeightSyncScheme):
    """Weights sent as tensors through each worker's command pipe (``("weights", td, version)``).

    Messages on a pipe are ordered, so a worker applies the weights before any command sent after
    them. The worker's command loop passes scheme messages to ``receiver.handle``.

    Examples:
        >>> import multiprocessing as mp
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> learner_end, worker_end = mp.Pipe()
        >>> scheme = PipeWeightSyncScheme()
        >>> weights = TensorDict.from_module(nn.Linear(2, 1))
        >>> scheme.init_sender(weights, [learner_end])
        >>> receiver = scheme.receiver(0)
        >>> scheme.send(weights, version=4)
        >>> receiver.handle(worker_end.recv())
        True
        >>> receiver.receive()[1], receiver.receive()
        (4, (None, 4))
    """

    def __init__(self) -> None:
        self._pipes: list = []

    def init_sender(self, weights: TensorDictBase | None, pipes: Sequence[Any] = ()) -> None:
        self._pipes = list(pipes)

    def attach_pipes(self, pipes: Sequence[Any]) -> None:
        self._pipes = list(pipes)

    def send(self, weights: TensorDictBase | None, version: int) -> None:
        # CPU tensors on the pipe: a CUDA tensor would travel as a CUDA IPC handle, which a forked worker
        # cannot open; the worker copies the weights onto its policy's device
        payload = _cpu_copy(weights) if weights is not None else None
        for pipe in self._pipes:
            pipe.send((WEIGHTS_MESSAGE, payload, int(version)))

    def receiver(self, worker_id: int) -> PipeWeightReceiver:
        """A fresh :class:`PipeWeightReceiver` for worker ``worker_id``."""
        return PipeWeightReceiver()


# ---------------------------------------------------------------------- Ray
def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("RayWeightSyncScheme needs Ray: `pip install rl-collect[ray]`.") from exc
    return ray


class RayWeightReceiver(WeightReceiver):
    """The actor side of :class:`RayWeightSyncScheme`: keeps the newest ``(ObjectRef, version)`` it was
    told about and fetches the weights from the object store at ``receive()`` only when the version
    changed (versions skipped in between are never fetched)."""

    def __init__(self) -> None:
        self._ref: Any = None
        self._version = 0
        self._new = False

    def handle(self, message: tuple) -> bool:
        if message[0] != WEIGHTS_MESSAGE:
            return False
        _, refs, version = message  # the ref sits in a list, so Ray does not resolve it on the call
        self._ref = refs[0] if refs else None
        self._new = int(version) != self._version or self._new
        self._version = int(version)
        return True

    def receive(self) -> tuple[TensorDictBase | None, int]:
        """The newest weights, fetched from the object store, when a new version was announced since the last call (else ``None``)."""
        if not self._new:
            return None, self._version
        self._new = False
        weights = _import_ray().get(self._ref) if self._ref is not None else None
        return weights, self._version


class RayWeightSyncScheme(WeightSyncScheme):
    """Weights through the Ray object store: ``send`` puts them once per version and tells every actor
    the new ``(ObjectRef, version)``; an actor fetches them at its next ``receive()``.

    The "pipes" are the actor handles; each actor exposes a method (``method``, default
    ``"handle_weights"``) that passes its argument to its receiver's ``handle``. Ray runs the calls of
    one caller in order, so an actor sees the weights before any call submitted after ``send``.

    Examples:
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> scheme = RayWeightSyncScheme()
        >>> receiver = scheme.receiver(0)  # travels to the actor when it is created
        >>> receiver.receive()
        (None, 0)
        >>> scheme.init_sender(None, [])  # actor handles go here (none: this example needs no Ray)
        >>> receiver.handle(("weights", [], 3))  # what an actor gets from send(None, 3)
        True
        >>> receiver.receive(), receiver.receive()
        ((None, 3), (None, 3))
    """

    def __init__(self, method: str = "handle_weights") -> None:
        self.method = method
        self._actors: list = []
        self._ref: Any = None
        self._version = 0

    def init_sender(self, weights: TensorDictBase | None, pipes: Sequence[Any] = ()) -> None:
        self._actors = list(pipes)

    def attach_pipes(self, pipes: Sequence[Any]) -> None:
        self._actors = list(pipes)

    def message(self) -> tuple:
        """The latest ``("weights", [ref], version)`` message (to replay to a restarted actor)."""
        return (WEIGHTS_MESSAGE, [self._ref] if self._ref is not None else [], self._version)

    def send(self, weights: TensorDictBase | None, version: int) -> None:
        self._ref = _import_ray().put(weights.detach().clone()) if weights is not None else self._ref
        self._version = int(version)
        for index in range(len(self._actors)):
            self.resend(index)

    def resend(self, worker_id: int) -> Any:
        """Sends the latest message to one actor again (e.g. after Ray restarted it); returns the call's ref."""
        return getattr(self._actors[worker_id], self.method).remote(self.message())

    def receiver(self, worker_id: int) -> RayWeightReceiver:
        """A fresh :class:`RayWeightReceiver` for actor ``worker_id``."""
        return RayWeightReceiver()


# ---------------------------------------------------------------------- torch.distributed
DIST_WEIGHTS_COMMAND = 2  # command header: [DIST_WEIGHTS_COMMAND, nbytes, version, broadcast]
DIST_COMMAND_LEN = 4


def _flatten(weights: TensorDictBase) -> torch.Tensor:
    leaves = [v.detach().contiguous().reshape(-1).view(torch.uint8) for _, v in weights.items(True, True)]
    return torch.cat(leaves) if leaves else torch.empty(0, dtype=torch.uint8)


class DistributedWeightReceiver(WeightReceiver):
    """The worker side of :class:`DistributedWeightSyncScheme`.

    The worker loop passes the command header (a tuple of ints starting with
    ``DIST_WEIGHTS_COMMAND``) to :meth:`handle`, which receives the flat byte buffer right away
    (``broadcast`` or ``recv`` from ``src``); ``receive()`` returns it as a TensorDict shaped like
    ``template`` (views into the buffer), once per version.

    Args:
        template: weights with the layout (keys, shapes, dtypes) the learner flattens; None: versions only.
        src: the learner's rank.
        device: where the buffer is received (``"cuda"`` for nccl).
    """

    def __init__(
        self, template: TensorDictBase | None = None, src: int = 0, device: torch.device | str = "cpu"
    ) -> None:
        self._layout = (
            [(k, tuple(v.shape), v.dtype) for k, v in template.items(True, True)] if template is not None else []
        )
        self._src = src
        self._device = torch.device(device)
        self._buf: torch.Tensor | None = None
        self._version = 0
        self._new = False

    def handle(self, message: tuple) -> bool:
        if int(message[0]) != DIST_WEIGHTS_COMMAND:
            return False
        import torch.distributed as dist

        nbytes, version, broadcast = (int(x) for x in message[1:4])
        buf = torch.empty(nbytes, dtype=torch.uint8, device=self._device)
        if broadcast:
            dist.broadcast(buf, src=self._src)
        elif nbytes:
            dist.recv(buf, src=self._src)
        self._buf = buf.cpu() if nbytes else self._buf
        self._version = version
        self._new = True
        return True

    def receive(self) -> tuple[TensorDictBase | None, int]:
        """The weights received since the last call as a TensorDict shaped like ``template`` (views into
        the byte buffer), or ``None`` when nothing new arrived.

        Raises:
            RuntimeError: the buffer's size does not match the template's layout.
        """
        if not self._new:
            return None, self._version
        self._new = False
        if self._buf is None or not self._layout:
            return None, self._version
        out = TensorDict({}, batch_size=[])
        offset = 0
        for key, shape, dtype in self._layout:
            nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
            out.set(key, self._buf[offset : offset + nbytes].view(dtype).reshape(shape))
            offset += nbytes
        if offset != self._buf.numel():
            raise RuntimeError(
                f"DistributedWeightReceiver: got {self._buf.numel()} bytes of weights, the "
                f"policy's layout holds {offset}."
            )
        self._buf = None
        return out, self._version


class DistributedWeightSyncScheme(WeightSyncScheme):
    """Weights over a ``torch.distributed`` process group, flattened into one byte buffer.

    The "pipes" are the worker ranks. ``send`` flattens the weights once; when no worker is busy
    and the workers are the whole group, one ``broadcast`` carries them, otherwise each idle worker
    gets a ``send`` and a busy one (see :meth:`set_busy`) gets them at :meth:`flush` (call it before
    giving that worker more work). Each transfer starts with a header
    ``[DIST_WEIGHTS_COMMAND, nbytes, version, broadcast]`` on the worker's command channel; the
    worker passes it to :meth:`DistributedWeightReceiver.handle`.

    Args:
        src: the learner's rank.
        device: where buffers are sent from (``"cuda"`` for nccl).
        wait: how to run and wait for a point-to-point op, ``wait(start, rank)`` where ``start()`` posts it
            and returns its work handle (default: ``start().wait()``).

    Examples:
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> scheme = DistributedWeightSyncScheme()
        >>> scheme.init_sender(TensorDict.from_module(nn.Linear(2, 1)), pipes=[])  # no worker: no group needed
        >>> scheme.send(TensorDict.from_module(nn.Linear(2, 1)), version=1)
        >>> scheme.version, scheme.receiver(1).receive()
        (1, (None, 0))
    """

    def __init__(
        self,
        src: int = 0,
        device: torch.device | str = "cpu",
        wait: Callable[[Callable[[], Any], int], Any] | None = None,
    ) -> None:
        self.src = src
        self.device = torch.device(device)
        self._wait = wait if wait is not None else (lambda start, rank: start().wait())
        self._ranks: list[int] = []
        self._template: TensorDictBase | None = None
        self._buf: torch.Tensor | None = None
        self._stale: set[int] = set()
        self._busy: set[int] = set()
        self.version = 0

    def init_sender(self, weights: TensorDictBase | None, pipes: Sequence[Any] = ()) -> None:
        self._template = weights.detach().clone() if weights is not None else None
        self._ranks = [int(r) for r in pipes]

    def attach_pipes(self, pipes: Sequence[Any]) -> None:
        self._ranks = [int(r) for r in pipes]

    def set_busy(self, rank: int, busy: bool) -> None:
        """Marks a worker as busy (it is not reading commands: weights for it wait for :meth:`flush`)."""
        (self._busy.add if busy else self._busy.discard)(rank)

    def send(self, weights: TensorDictBase | None, version: int) -> None:
        if weights is not None:
            self._buf = _flatten(weights).to(self.device)
        self.version = int(version)
        self._stale = set(self._ranks)
        if not self._ranks:
            return
        import torch.distributed as dist

        if not self._busy and len(self._ranks) == dist.get_world_size() - 1:
            nbytes = self._nbytes()
            for rank in self._ranks:
                self._header(rank, nbytes, broadcast=True)
            buf = self._buf if self._buf is not None else torch.empty(0, dtype=torch.uint8, device=self.device)
            dist.broadcast(buf, src=self.src)
            self._stale.clear()
            return
        for rank in self._ranks:
            if rank not in self._busy:
                self.flush(rank)

    def flush(self, rank: int) -> None:
        """Sends the latest weights to ``rank`` if it has not had them yet."""
        if rank not in self._stale:
            return
        import torch.distributed as dist

        self._stale.discard(rank)
        nbytes = self._nbytes()
        self._header(rank, nbytes, broadcast=False)
        if nbytes:
            buf = self._buf
            assert buf is not None  # nbytes > 0
            self._wait(lambda: dist.isend(buf, dst=rank), rank)

    def _nbytes(self) -> int:
        return int(self._buf.numel()) if self._buf is not None else 0

    def _header(self, rank: int, nbytes: int, broadcast: bool) -> None:
        import torch.distributed as dist

        header = torch.tensor(
            [DIST_WEIGHTS_COMMAND, nbytes, self.version, int(broadcast)], dtype=torch.int64, device=self.device
        )
        self._wait(lambda: dist.isend(header, dst=rank), rank)

    def receiver(self, worker_id: int) -> DistributedWeightReceiver:
        """A :class:`DistributedWeightReceiver` for rank ``worker_id``, with this scheme's template, ``src`` and device."""
        return DistributedWeightReceiver(self._template, src=self.src, device=self.device)
