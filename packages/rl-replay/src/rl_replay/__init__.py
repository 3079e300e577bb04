"""rl_replay: replay buffers on rl-tdict, with TorchRL's names (``torchrl.data`` buffers → ``rl_replay``).

Storages (list, tensor, memory-mapped, compressed), samplers (uniform, without replacement,
prioritized on vectorised sum/min trees, trajectory slices), writers, HER, n-step returns,
crash-safe checkpoints and offline datasets. Pure torch: no compiled extension. Useful outside RL
too: any TensorDict (or tensor, or Python object) can be stored and sampled.

Examples:
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
    "RemoteTensorDictReplayBuffer": "buffers.remote",
    "SampleUnit": "sample_units",
    "ConditionalUpdateResult": "conditional_update",
    "Transition": "sample_units",
    "Sequence": "sample_units",
    "LazyStackStorage": "storages.lazy_stack",
    "PromptGroupSampler": "samplers.prompt_group",
    "StalenessAwareSampler": "samplers.staleness",
    "find_start_stop_traj": "boundaries",
    "tree_iter": "storages._trees",
    "DEFAULT_DONE_KEYS": "boundaries",
    "ConsumingSampler": "samplers.consuming",
    "HindsightStrategy": "buffers.her",
    "ReplayBufferEnsemble": "buffers.ensemble",
    "MultiStepTransform": "transforms",
    "MultiStep": "postprocs",
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

if TYPE_CHECKING:  # type checkers and IDEs see these (`X as X`: re-exported); at run time __getattr__ loads them
    from .conditional_update import (
        ConditionalUpdateResult as ConditionalUpdateResult,
    )
    from .sample_units import (
        SampleUnit as SampleUnit,
        Sequence as Sequence,
        Transition as Transition,
    )
    from .boundaries import (
        DEFAULT_DONE_KEYS as DEFAULT_DONE_KEYS,
        find_start_stop_traj as find_start_stop_traj,
    )
    from .samplers.prompt_group import (
        PromptGroupSampler as PromptGroupSampler,
    )
    from .samplers.staleness import (
        StalenessAwareSampler as StalenessAwareSampler,
    )
    from .storages._trees import (
        tree_iter as tree_iter,
    )
    from .storages.lazy_stack import (
        LazyStackStorage as LazyStackStorage,
    )
    from .buffers.ensemble import (
        ReplayBufferEnsemble as ReplayBufferEnsemble,
    )
    from .buffers.her import (
        HERReplayBuffer as HERReplayBuffer,
        HindsightStrategy as HindsightStrategy,
    )
    from .buffers.remote import (
        RemoteTensorDictReplayBuffer as RemoteTensorDictReplayBuffer,
    )
    from .samplers.consuming import (
        ConsumingSampler as ConsumingSampler,
    )
    from .buffers.prioritized import (
        PrioritizedReplayBuffer as PrioritizedReplayBuffer,
        TensorDictPrioritizedReplayBuffer as TensorDictPrioritizedReplayBuffer,
    )
    from .datasets.d4rl import (
        D4RLExperienceReplay as D4RLExperienceReplay,
    )
    from .datasets.minari import (
        MinariExperienceReplay as MinariExperienceReplay,
    )
    from .datasets.offline import (
        OfflineDataset as OfflineDataset,
    )
    from .datasets.registry import (
        load_dataset as load_dataset,
        register_dataset as register_dataset,
    )
    from .max_value_writer import (
        TensorDictMaxValueWriter as TensorDictMaxValueWriter,
    )
    from .samplers.prioritized import (
        PrioritizedSampler as PrioritizedSampler,
    )
    from .samplers.prioritized_slice import (
        PrioritizedSliceSampler as PrioritizedSliceSampler,
    )
    from .samplers.slice import (
        SliceSampler as SliceSampler,
        SliceSamplerWithoutReplacement as SliceSamplerWithoutReplacement,
    )
    from .schedulers import (
        LambdaScheduler as LambdaScheduler,
        LinearScheduler as LinearScheduler,
        ParameterScheduler as ParameterScheduler,
        SchedulerList as SchedulerList,
        StepScheduler as StepScheduler,
    )
    from .shared import (
        BufferProcess as BufferProcess,
        make_shared as make_shared,
    )
    from .storages.compact import (
        CompactTensorStorage as CompactTensorStorage,
    )
    from .storages.compressed import (
        CompressedListStorage as CompressedListStorage,
    )
    from .storages.memmap import (
        LazyMemmapStorage as LazyMemmapStorage,
    )
    from .postprocs import (
        MultiStep as MultiStep,
    )
    from .transforms import (
        MultiStepTransform as MultiStepTransform,
        RandomCropTensorDict as RandomCropTensorDict,
    )
    from .trees import (
        MinTree as MinTree,
        SumTree as SumTree,
    )

# static, so that documentation tools read it (tests/integration/test_layout.py checks it against _LAZY)
__all__ = [
    "BufferProcess",
    "CompactTensorStorage",
    "CompressedListStorage",
    "ConditionalUpdateResult",
    "ConsumingSampler",
    "D4RLExperienceReplay",
    "DEFAULT_DONE_KEYS",
    "HERReplayBuffer",
    "HindsightStrategy",
    "ImmutableDatasetWriter",
    "LambdaScheduler",
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "LinearScheduler",
    "ListStorage",
    "MinTree",
    "MinariExperienceReplay",
    "MultiStep",
    "MultiStepTransform",
    "OfflineDataset",
    "ParameterScheduler",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "PromptGroupSampler",
    "RandomCropTensorDict",
    "RandomSampler",
    "RemoteTensorDictReplayBuffer",
    "ReplayBuffer",
    "ReplayBufferEnsemble",
    "RoundRobinWriter",
    "SampleUnit",
    "Sampler",
    "SamplerWithoutReplacement",
    "SchedulerList",
    "Sequence",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "StalenessAwareSampler",
    "StepScheduler",
    "Storage",
    "SumTree",
    "TensorDictMaxValueWriter",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorDictRoundRobinWriter",
    "TensorStorage",
    "Transition",
    "Writer",
    "__version__",
    "find_start_stop_traj",
    "load_dataset",
    "make_shared",
    "register_dataset",
    "tree_iter",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return __all__
