"""PipeWeightSyncScheme (TorchRL's ``MultiProcessWeightSyncScheme``): weights through the workers' command pipes."""

from __future__ import annotations

from typing import Any, Sequence

from tdict import TensorDictBase

from .base import WEIGHTS_MESSAGE, WeightReceiver, WeightSyncScheme, cpu_copy

__all__ = ["MultiProcessWeightSyncScheme", "PipeWeightReceiver", "PipeWeightSyncScheme"]


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

    def __init__(self, strategy: str = "tensordict", sync: bool = True) -> None:
        if strategy not in ("tensordict", "state_dict"):
            raise ValueError(f"{type(self).__name__}: strategy must be 'tensordict' or 'state_dict', got {strategy!r}.")
        self.strategy = strategy  # both travel as a TensorDict of weights here
        self.sync = sync  # pipe messages are ordered: a worker applies them before its next command either way
        self._pipes: list = []

    def init_sender(self, weights: TensorDictBase | None, pipes: Sequence[Any] = ()) -> None:
        self._pipes = list(pipes)

    def attach_pipes(self, pipes: Sequence[Any]) -> None:
        self._pipes = list(pipes)

    def send(self, weights: TensorDictBase | None, version: int, worker_ids: Sequence[int] | None = None) -> None:
        # CPU tensors on the pipe: a CUDA tensor would travel as a CUDA IPC handle, which a forked worker
        # cannot open; the worker copies the weights onto its policy's device
        payload = cpu_copy(weights) if weights is not None else None
        targets = range(len(self._pipes)) if worker_ids is None else worker_ids
        for i in targets:
            self._pipes[i].send((WEIGHTS_MESSAGE, payload, int(version)))

    def receiver(self, worker_id: int) -> PipeWeightReceiver:
        """A fresh :class:`PipeWeightReceiver` for worker ``worker_id``."""
        return PipeWeightReceiver()


class MultiProcessWeightSyncScheme(PipeWeightSyncScheme):
    """TorchRL's name for :class:`PipeWeightSyncScheme`: weights through the workers' command pipes.

    Examples:
        >>> isinstance(MultiProcessWeightSyncScheme(), PipeWeightSyncScheme)
        True
    """
