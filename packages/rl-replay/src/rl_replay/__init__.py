"""rl_replay: replay buffers on rl-tdict, with TorchRL's names (``torchrl.data`` buffers → ``rl_replay``).

Storages (list, tensor, memory-mapped, compressed), samplers (uniform, without replacement,
prioritized on vectorised sum/min trees, trajectory slices), writers, HER, n-step returns,
crash-safe checkpoints and offline datasets. Pure torch: no compiled extension. Useful outside RL
too: any TensorDict (or tensor, or Python object) can be stored and sampled.

Example:
    >>> import torch
    >>> from tdict import TensorDict
    >>> from rl_replay import LazyTensorStorage, ReplayBuffer
    >>> rb = ReplayBuffer(storage=LazyTensorStorage(1000), batch_size=32)
    >>> _ = rb.extend(TensorDict(image=torch.zeros(100, 3, 8, 8), label=torch.arange(100), batch_size=[100]))
    >>> rb.sample()["image"].shape
    torch.Size([32, 3, 8, 8])
"""
from __future__ import annotations

import importlib
from typing import Any, TYPE_CHECKING

from .buffers import ReplayBuffer, TensorDictReplayBuffer
from .samplers import RandomSampler, Sampler, SamplerWithoutReplacement
from .storages import LazyTensorStorage, ListStorage, Storage, TensorStorage
from .writers import ImmutableDatasetWriter, RoundRobinWriter, TensorDictRoundRobinWriter, Writer

__version__ = "0.1.0"

# name -> module that defines it (imported on first use)
_LAZY = {
    "LazyMemmapStorage": "storages.memmap",
    "CompressedListStorage": "storages.compressed",
    "CompactTensorStorage": "storages.compact",
    "PrioritizedSampler": "samplers.prioritized",
    "SliceSampler": "samplers.slice",
    "SliceSamplerWithoutReplacement": "samplers.slice",
    "PrioritizedSliceSampler": "samplers.prioritized_slice",
    "TensorDictMaxValueWriter": "max_value_writer",
    "SumTree": "trees",
    "MinTree": "trees",
    "PrioritizedReplayBuffer": "buffers.prioritized",
    "TensorDictPrioritizedReplayBuffer": "buffers.prioritized",
    "HERReplayBuffer": "buffers.her",
    "HindsightStrategy": "buffers.her",
    "ReplayBufferEnsemble": "buffers.ensemble",
    "MultiStepTransform": "transforms",
    "RandomCropTensorDict": "transforms",
    "LinearScheduler": "schedulers",
    "StepScheduler": "schedulers",
    "SchedulerList": "schedulers",
    "ParameterScheduler": "schedulers",
    "LambdaScheduler": "schedulers",
    "OfflineDataset": "datasets.offline",
    "MinariExperienceReplay": "datasets.minari",
    "D4RLExperienceReplay": "datasets.d4rl",
    "make_shared": "shared",
    "BufferProcess": "shared",
    "register_dataset": "datasets.registry",
    "load_dataset": "datasets.registry",
}

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time the names load on first use (__getattr__)
    from .buffers.ensemble import ReplayBufferEnsemble
    from .buffers.her import HERReplayBuffer, HindsightStrategy
    from .buffers.prioritized import PrioritizedReplayBuffer, TensorDictPrioritizedReplayBuffer
    from .datasets.d4rl import D4RLExperienceReplay
    from .datasets.minari import MinariExperienceReplay
    from .datasets.offline import OfflineDataset
    from .datasets.registry import load_dataset, register_dataset
    from .max_value_writer import TensorDictMaxValueWriter
    from .samplers.prioritized import PrioritizedSampler
    from .samplers.prioritized_slice import PrioritizedSliceSampler
    from .samplers.slice import SliceSampler, SliceSamplerWithoutReplacement
    from .schedulers import LambdaScheduler, LinearScheduler, ParameterScheduler, SchedulerList, StepScheduler
    from .shared import BufferProcess, make_shared
    from .storages.compact import CompactTensorStorage
    from .storages.compressed import CompressedListStorage
    from .storages.memmap import LazyMemmapStorage
    from .transforms import MultiStepTransform, RandomCropTensorDict
    from .trees import MinTree, SumTree

__all__ = sorted([
    "ImmutableDatasetWriter", "LazyTensorStorage", "ListStorage", "RandomSampler", "ReplayBuffer",
    "RoundRobinWriter", "Sampler", "SamplerWithoutReplacement", "Storage", "TensorDictReplayBuffer",
    "TensorDictRoundRobinWriter", "TensorStorage", "Writer", "__version__", *_LAZY,
])


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return __all__
