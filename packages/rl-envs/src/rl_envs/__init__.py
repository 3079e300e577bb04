"""rl_envs: environments on rl-tdict, with TorchRL's names (``torchrl.envs`` → ``rl_envs``).

EnvBase and the rollout contract, native envs (Pendulum, CartPole), the Gymnasium wrapper and
transforms. Heavy integrations are optional extras imported lazily (``rl-envs[gymnasium]``...).

Example:
    >>> from rl_envs import PendulumEnv, StepCounter, TransformedEnv
    >>> env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=200))
    >>> env.rollout(32).batch_size
    torch.Size([32])
"""
from __future__ import annotations

import importlib
from typing import Any, TYPE_CHECKING

from . import transforms
from .env_base import EnvBase
from .mdp import step_mdp
from .native import PendulumEnv
from .rollout import rollout
from .transforms import Compose, StepCounter, Transform, TransformedEnv

__version__ = "0.1.0"

# name -> module that defines it (imported on first use: gymnasium & co stay optional)
_LAZY = {
    "CartPoleEnv": "native.cartpole",
    "DMControlEnv": "libs.dm_control",
    "DMControlWrapper": "libs.dm_control",
    "GymEnv": "libs.gymnasium",
    "GymWrapper": "libs.gymnasium",
    "default_info_dict_reader": "libs.gymnasium",
    "BaseInfoDictReader": "libs.gymnasium",
    "check_env_specs": "checks",
    "RandomPolicy": "policies",
    "EnvCreator": "env_creator",
    "MarlGroupMapType": "libs._marl",
    "ParallelEnv": "batched.parallel",
    "PettingZooEnv": "libs.pettingzoo",
    "PettingZooWrapper": "libs.pettingzoo",
    "check_marl_grouping": "libs._marl",
    "VmasEnv": "libs.vmas",
    "VmasWrapper": "libs.vmas",
    "SerialEnv": "batched.serial",
    "ExplorationType": "utils",
    "exploration_type": "utils",
    "set_exploration_type": "utils",
}

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time the names load on first use (__getattr__)
    from .batched.parallel import ParallelEnv
    from .batched.serial import SerialEnv
    from .checks import check_env_specs
    from .env_creator import EnvCreator
    from .libs._marl import MarlGroupMapType, check_marl_grouping
    from .libs.dm_control import DMControlEnv, DMControlWrapper
    from .libs.gymnasium import BaseInfoDictReader, GymEnv, GymWrapper, default_info_dict_reader
    from .libs.pettingzoo import PettingZooEnv, PettingZooWrapper
    from .libs.vmas import VmasEnv, VmasWrapper
    from .native.cartpole import CartPoleEnv
    from .policies import RandomPolicy
    from .utils import ExplorationType, exploration_type, set_exploration_type
    from .transforms import (
        ActionDiscretizer,
        ActionMask,
        ActionScaling,
        BinarizeReward,
        CatFrames,
        CatTensors,
        CenterCrop,
        ClipTransform,
        Crop,
        DTypeCastTransform,
        DeviceCastTransform,
        DiscreteActionProjection,
        DoubleToFloat,
        EndOfLifeTransform,
        ExcludeTransform,
        FlattenAction,
        FlattenObservation,
        FrameSkipTransform,
        GrayScale,
        InitTracker,
        MultiAction,
        NextObservationDelta,
        NoopResetEnv,
        NormalizeReward,
        ObservationNorm,
        PermuteTransform,
        RandomTruncationTransform,
        RenameTransform,
        Resize,
        Reward2GoTransform,
        RewardClipping,
        RewardScaling,
        RewardSum,
        SelectTransform,
        SignTransform,
        SqueezeTransform,
        TargetReturn,
        TensorDictPrimer,
        TerminateTransform,
        TimeMaxPool,
        ToTensorImage,
        TrajCounter,
        UnaryTransform,
        UnsqueezeTransform,
        VecNorm,
        VideoRecorder,
    )

__all__ = sorted(
    ["EnvBase", "PendulumEnv", "__version__", "rollout", "step_mdp", *_LAZY, *transforms.__all__]
)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    elif name in transforms.__all__:
        value = getattr(transforms, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list:
    return __all__
