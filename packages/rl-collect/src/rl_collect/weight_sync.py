"""Weight synchronisation between a learner and collector workers, with a policy-version counter.

A scheme has two sides. The learner calls :meth:`WeightSyncScheme.send` with a TensorDict of weights
(from ``TensorDict.from_module(policy)``) and a version number; each worker holds a
:class:`WeightReceiver` (from :meth:`WeightSyncScheme.receiver`, picklable) whose ``receive()``
returns ``(weights, version)`` once per new version and ``(None, version)`` otherwise.

Two transports live here:

* :class:`SharedMemWeightSyncScheme`: one shared-memory copy of the weights plus a shared version
  counter; ``send`` copies in place and bumps the version; workers copy a consistent snapshot.
* :class:`PipeWeightSyncScheme`: the weights travel through each worker's command pipe.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import torch
from tdict import TensorDictBase

__all__ = [
    "PipeWeightReceiver",
    "PipeWeightSyncScheme",
    "SharedMemWeightReceiver",
    "SharedMemWeightSyncScheme",
    "WeightReceiver",
    "WeightSyncScheme",
]

WEIGHTS_MESSAGE = "weights"


class WeightReceiver:
    """The worker side of a scheme: ``receive()`` returns ``(weights or None, version)``."""

    def receive(self) -> tuple[TensorDictBase | None, int]:
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
        raise NotImplementedError


class SharedMemWeightReceiver(WeightReceiver):
    """Reads the shared copy of :class:`SharedMemWeightSyncScheme` (a seqlock: never a torn read)."""

    def __init__(self, weights: TensorDictBase | None, meta: torch.Tensor, timeout: float = 30.0) -> None:
        self._weights = weights
        self._meta = meta  # [sequence (odd while a write is in progress), version]
        self._seen = int(meta[1])
        self._timeout = timeout

    def receive(self) -> tuple[TensorDictBase | None, int]:
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

    Example:
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
        self._weights = weights.detach().clone().share_memory_() if weights is not None else None

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
        if not self._new:
            return None, self._version
        self._new = False
        weights, self._pending = self._pending, None
        return weights, self._version


class PipeWeightSyncScheme(WeightSyncScheme):
    """Weights sent as tensors through each worker's command pipe (``("weights", td, version)``).

    Messages on a pipe are ordered, so a worker applies the weights before any command sent after
    them. The worker's command loop passes scheme messages to ``receiver.handle``.

    Example:
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
        payload = weights.detach().clone() if weights is not None else None
        for pipe in self._pipes:
            pipe.send((WEIGHTS_MESSAGE, payload, int(version)))

    def receiver(self, worker_id: int) -> PipeWeightReceiver:
        return PipeWeightReceiver()
