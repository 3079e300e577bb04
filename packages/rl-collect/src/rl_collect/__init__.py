"""rl_collect: collectors on rl-tdict, with TorchRL's names (``torchrl.collectors`` → ``rl_collect``).

A collector turns an env and a policy into a stream of TensorDict batches. Envs and policies are
duck-typed: anything with the rl-envs contract (``reset``/``step``/``step_and_maybe_reset``,
``batch_size``, specs) works; rl-collect imports no sibling package.

Examples:
    >>> from rl_envs import PendulumEnv
    >>> from rl_collect import Collector
    >>> collector = Collector(PendulumEnv, frames_per_batch=64, total_frames=128)
    >>> sum(batch.numel() for batch in collector)
    128
"""

from __future__ import annotations

from .assembly import TrajectoryAssembler
from .base import BaseCollector
from .cloudpickle_wrapper import CloudpickleWrapper
from .collector import Collector
from .distributed import DistributedCollector, run_worker
from ._multi_base import MultiCollector
from .multi_async import AsyncCollector, MultiAsyncCollector
from .multi_sync import MultiSyncCollector
from .profiling import ProfileConfig, ProfilerHook
from .ray_collector import RayCollector
from .trajectories import split_trajectories
from .weight_sync import (
    MultiProcessWeightSyncScheme,
    NoWeightSyncScheme,
    DistributedWeightReceiver,
    DistributedWeightSyncScheme,
    PipeWeightReceiver,
    PipeWeightSyncScheme,
    RayWeightReceiver,
    RayWeightSyncScheme,
    SharedMemWeightReceiver,
    SharedMemWeightSyncScheme,
    WeightReceiver,
    WeightSyncScheme,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncCollector",
    "BaseCollector",
    "CloudpickleWrapper",
    "Collector",
    "DistributedCollector",
    "DistributedWeightReceiver",
    "DistributedWeightSyncScheme",
    "MultiAsyncCollector",
    "MultiCollector",
    "MultiProcessWeightSyncScheme",
    "MultiSyncCollector",
    "NoWeightSyncScheme",
    "PipeWeightReceiver",
    "PipeWeightSyncScheme",
    "ProfileConfig",
    "ProfilerHook",
    "RayCollector",
    "RayWeightReceiver",
    "RayWeightSyncScheme",
    "SharedMemWeightReceiver",
    "SharedMemWeightSyncScheme",
    "TrajectoryAssembler",
    "WeightReceiver",
    "WeightSyncScheme",
    "__version__",
    "run_worker",
    "split_trajectories",
]
