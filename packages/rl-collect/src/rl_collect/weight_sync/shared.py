"""SharedMemWeightSyncScheme: weights in shared memory, with a seqlock'd version counter."""

from __future__ import annotations

import time
from typing import Any, Sequence

import torch
from tdict import TensorDictBase

from .base import WeightReceiver, WeightSyncScheme, cpu_copy

__all__ = ["SharedMemWeightReceiver", "SharedMemWeightSyncScheme"]


BUFFER_MESSAGE = "weights_buffer"


class SharedMemWeightReceiver(WeightReceiver):
    """Reads a shared copy of :class:`SharedMemWeightSyncScheme` (a seqlock: never a torn read).

    The copy comes with the receiver, or, when the learner had no weights to copy when the worker
    started (a policy built by a factory in the worker), through the command pipe with the first send.
    """

    def __init__(self, weights: TensorDictBase | None, meta: torch.Tensor, timeout: float = 30.0) -> None:
        self._weights = weights
        self._meta = meta  # [sequence (odd while a write is in progress), version]
        self._seen = int(meta[1])
        self._timeout = timeout

    def handle(self, message: tuple) -> bool:
        if message[0] != BUFFER_MESSAGE:
            return False
        self._weights = message[1]
        return True

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


class _Slot:
    """One shared copy of the weights (or None until the first send) and its ``[sequence, version]``."""

    def __init__(self, weights: TensorDictBase | None = None) -> None:
        self.weights = weights
        self.meta = torch.zeros(2, dtype=torch.int64).share_memory_()


def _shared(weights: TensorDictBase) -> TensorDictBase:
    # the shared copy lives in CPU shared memory whatever the learner's device: any worker can map
    # it (a forked one cannot touch CUDA) and copies it onto its own policy's device
    return cpu_copy(weights).share_memory_()


class SharedMemWeightSyncScheme(WeightSyncScheme):
    """Weights in shared memory: ``send`` copies them in place and bumps a shared version.

    The shared copy is on the CPU even when the learner's weights are on a GPU; each worker copies
    it onto its own policy's device. With ``per_worker_weights=True`` every worker has a copy of
    its own, so ``send(..., worker_ids=[i])`` updates worker ``i`` only (workers whose policies
    differ, e.g. built by one factory each).

    Args:
        strategy: ``"tensordict"`` or ``"state_dict"`` (TorchRL's choice of layout; weights travel as
            a TensorDict here either way).
        sync: accepted for TorchRL compatibility (workers read the newest weights before each batch).
        per_worker_weights: one shared copy per worker instead of one for all.

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

    def __init__(self, strategy: str = "tensordict", sync: bool = True, per_worker_weights: bool = False) -> None:
        if strategy not in ("tensordict", "state_dict"):
            raise ValueError(
                f"SharedMemWeightSyncScheme: strategy must be 'tensordict' or 'state_dict', got {strategy!r}."
            )
        self.strategy = strategy
        self.sync = sync
        self.per_worker_weights = per_worker_weights
        self._template: TensorDictBase | None = None
        self._common = _Slot()  # read by every worker unless per_worker_weights
        self._slots: dict[int, _Slot] = {}  # per_worker_weights: one per worker, made by receiver()
        self._preset: dict[int, TensorDictBase] = {}
        self._pipes: list = []

    @property
    def _meta(self) -> torch.Tensor:
        return self._common.meta

    def init_on_sender(
        self, model: Any = None, params_map: dict[int, TensorDictBase] | None = None, **kwargs: Any
    ) -> None:
        """TorchRL's way to prepare the learner side: ``model`` gives the weights' layout (see
        :meth:`WeightSyncScheme.init_on_sender`); ``params_map={worker_id: weights}`` gives the shared
        buffers themselves. Weights already in shared memory are used as they are (sends write into
        them); others are moved there in place. One object for every worker means one buffer for all."""
        super().init_on_sender(model)
        if not params_map:
            return
        buffers = {int(i): (w if w.is_shared() else w.share_memory_()) for i, w in params_map.items()}
        if not self.per_worker_weights and len({id(w) for w in buffers.values()}) == 1:
            self._common.weights = next(iter(buffers.values()))
        else:
            self.per_worker_weights = True
            self._preset = buffers

    def init_sender(self, weights: TensorDictBase | None, pipes: Sequence[Any] = ()) -> None:
        if weights is not None and weights.numel() == 0 and not list(weights.keys()):
            weights = None
        if weights is not None:  # else keep what init_on_sender gave
            self._template = weights
        if not self.per_worker_weights and self._common.weights is None and weights is not None:
            self._common.weights = _shared(weights)
        self._pipes = list(pipes)

    def attach_pipes(self, pipes: Sequence[Any]) -> None:
        self._pipes = list(pipes)

    def _slot(self, worker_id: int) -> _Slot:
        if not self.per_worker_weights:
            return self._common
        slot = self._slots.get(worker_id)
        if slot is None:
            preset = self._preset.get(worker_id)
            if preset is None and self._template is not None:
                preset = _shared(self._template)
            slot = self._slots[worker_id] = _Slot(preset)
        return slot

    def send(self, weights: TensorDictBase | None, version: int, worker_ids: Sequence[int] | None = None) -> None:
        if not self.per_worker_weights:
            targets = [(self._common, range(len(self._pipes)))]
        else:
            ids = sorted(self._slots) if worker_ids is None else list(worker_ids)
            targets = [(self._slot(i), [i]) for i in ids]
        for slot, readers in targets:
            if slot.weights is None and weights is not None:  # no copy yet: it travels to the readers now
                slot.weights = _shared(weights)
                for i in readers:
                    self._pipes[i].send((BUFFER_MESSAGE, slot.weights))
            meta = slot.meta
            meta[0] += 1  # odd: readers wait
            try:
                if weights is not None and slot.weights is not None:
                    slot.weights.update_(weights.detach())
                meta[1] = int(version)
            finally:
                meta[0] += 1

    def receiver(self, worker_id: int) -> SharedMemWeightReceiver:
        """A receiver reading worker ``worker_id``'s shared copy (the common one unless ``per_worker_weights``)."""
        slot = self._slot(worker_id)
        return SharedMemWeightReceiver(slot.weights, slot.meta)

    @property
    def weights(self) -> TensorDictBase | None:
        """The common shared copy (what workers read unless ``per_worker_weights``)."""
        return self._common.weights
