"""Weight synchronisation between a learner and collector workers, with a policy-version counter
(TorchRL's ``torchrl.weight_update``).

A scheme has two sides. The learner calls :meth:`WeightSyncScheme.send` with a TensorDict of weights
(from ``TensorDict.from_module(policy)``) and a version number; each worker holds a
:class:`WeightReceiver` (from :meth:`WeightSyncScheme.receiver`, picklable) whose ``receive()``
returns ``(weights, version)`` once per new version and ``(None, version)`` otherwise.

The transports, one module each:

* :class:`SharedMemWeightSyncScheme`: a shared-memory copy of the weights (one for all workers, or
  one each) plus a shared version counter; ``send`` copies in place and bumps the version; workers
  copy a consistent snapshot.
* :class:`PipeWeightSyncScheme` (TorchRL's :class:`MultiProcessWeightSyncScheme`): the weights travel
  through each worker's command pipe.
* :class:`RayWeightSyncScheme`: one object-store copy per version; actors fetch it when the version
  changed (used by :class:`~rl_collect.RayCollector`).
* :class:`DistributedWeightSyncScheme`: one flat byte buffer, broadcast (or sent point to point to
  idle workers) over a ``torch.distributed`` group (used by :class:`~rl_collect.DistributedCollector`).
* :class:`NoWeightSyncScheme`: nothing is sent.

:meth:`WeightSyncScheme.from_backend` picks one by TorchRL's backend names.
"""

from __future__ import annotations

from .base import WEIGHTS_MESSAGE, NoWeightSyncScheme, WeightReceiver, WeightSyncScheme, cpu_copy
from .distributed import (
    DIST_COMMAND_LEN,
    DIST_WEIGHTS_COMMAND,
    DistributedWeightReceiver,
    DistributedWeightSyncScheme,
)
from .pipe import MultiProcessWeightSyncScheme, PipeWeightReceiver, PipeWeightSyncScheme
from .ray import RayWeightReceiver, RayWeightSyncScheme
from .shared import SharedMemWeightReceiver, SharedMemWeightSyncScheme

__all__ = [
    "DIST_COMMAND_LEN",
    "DIST_WEIGHTS_COMMAND",
    "WEIGHTS_MESSAGE",
    "DistributedWeightReceiver",
    "DistributedWeightSyncScheme",
    "MultiProcessWeightSyncScheme",
    "NoWeightSyncScheme",
    "PipeWeightReceiver",
    "PipeWeightSyncScheme",
    "RayWeightReceiver",
    "RayWeightSyncScheme",
    "SharedMemWeightReceiver",
    "SharedMemWeightSyncScheme",
    "WeightReceiver",
    "WeightSyncScheme",
    "cpu_copy",
]
