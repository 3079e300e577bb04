"""DistributedWeightSyncScheme: weights as one flat byte buffer over a ``torch.distributed`` group
(used by :class:`~rl_collect.DistributedCollector`)."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
from tdict import TensorDict, TensorDictBase

from .base import WeightReceiver, WeightSyncScheme

__all__ = ["DIST_COMMAND_LEN", "DIST_WEIGHTS_COMMAND", "DistributedWeightReceiver", "DistributedWeightSyncScheme"]


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

    def send(self, weights: TensorDictBase | None, version: int, worker_ids: Sequence[int] | None = None) -> None:
        if worker_ids is not None:
            raise ValueError(
                "DistributedWeightSyncScheme.send: every worker gets the same weights; worker_ids is not supported."
            )
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
