"""rl_envs: environments on rl-tdict, with TorchRL's names (``torchrl.envs`` → ``rl_envs``).

EnvBase and the rollout contract, native envs (Pendulum, CartPole), the Gymnasium wrapper and
transforms. Heavy integrations are optional extras imported lazily (``rl-envs[gymnasium]``...).

Examples:
    >>> from rl_envs import PendulumEnv, StepCounter, TransformedEnv
    >>> env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=200))
    >>> env.rollout(32).batch_size
    torch.Size([32])
"""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

from . import transforms
from ._lazy import load_lazy
from .env_base import EnvBase
from .mdp import step_mdp
from .native import PendulumEnv
from .rollout import rollout
from .transforms import Compose, StepCounter, Transform, TransformedEnv

__version__ = "0.1.0"

# name -> module that defines it (imported on first use: gymnasium & co stay optional)
_LAZY = {
    "AtariEnv": "libs.atari",
    "make_atari_env": "libs.atari",
    "CartPoleEnv": "native.cartpole",
    "HumanoidMacroAction": "native.mujoco",
    "SatelliteEnv": "native.mujoco",
    "SatelliteMacroAction": "native.mujoco",
    "AntEnv": "native.mujoco",
    "HalfCheetahEnv": "native.mujoco",
    "HopperEnv": "native.mujoco",
    "HumanoidEnv": "native.mujoco",
    "InvertedPendulumEnv": "native.mujoco",
    "MujocoEnv": "native.mujoco",
    "ReacherEnv": "native.mujoco",
    "Walker2dEnv": "native.mujoco",
    "DMControlEnv": "libs.dm_control",
    "DMControlWrapper": "libs.dm_control",
    "GymEnv": "libs.gymnasium",
    "GymWrapper": "libs.gymnasium",
    "default_info_dict_reader": "libs.gymnasium",
    "BaseInfoDictReader": "libs.gymnasium",
    "BraxEnv": "libs.brax",
    "BraxWrapper": "libs.brax",
    "gym_backend": "libs.gymnasium",
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
    "DreamerDecoder": "model_based",
    "DreamerEnv": "model_based",
    "ModelBasedEnvBase": "model_based",
    "WorldModelEnv": "model_based",
    "ExplorationType": "utils",
    "exploration_type": "utils",
    "set_exploration_type": "utils",
    "make_composite_from_td": "utils",
}

if TYPE_CHECKING:  # type checkers and IDEs see these (`X as X`: re-exported); at run time __getattr__ loads them
    from .batched.parallel import (
        ParallelEnv as ParallelEnv,
    )
    from .batched.serial import (
        SerialEnv as SerialEnv,
    )
    from .checks import (
        check_env_specs as check_env_specs,
    )
    from .env_creator import (
        EnvCreator as EnvCreator,
    )
    from .libs.atari import (
        AtariEnv as AtariEnv,
        make_atari_env as make_atari_env,
    )
    from .libs.brax import (
        BraxEnv as BraxEnv,
        BraxWrapper as BraxWrapper,
    )
    from .libs._marl import (
        MarlGroupMapType as MarlGroupMapType,
        check_marl_grouping as check_marl_grouping,
    )
    from .libs.dm_control import (
        DMControlEnv as DMControlEnv,
        DMControlWrapper as DMControlWrapper,
    )
    from .libs.gymnasium import (
        BaseInfoDictReader as BaseInfoDictReader,
        GymEnv as GymEnv,
        GymWrapper as GymWrapper,
        default_info_dict_reader as default_info_dict_reader,
        gym_backend as gym_backend,
    )
    from .libs.pettingzoo import (
        PettingZooEnv as PettingZooEnv,
        PettingZooWrapper as PettingZooWrapper,
    )
    from .libs.vmas import (
        VmasEnv as VmasEnv,
        VmasWrapper as VmasWrapper,
    )
    from .model_based import (
        DreamerDecoder as DreamerDecoder,
        DreamerEnv as DreamerEnv,
        ModelBasedEnvBase as ModelBasedEnvBase,
        WorldModelEnv as WorldModelEnv,
    )
    from .native.cartpole import (
        CartPoleEnv as CartPoleEnv,
    )
    from .native.mujoco import (
        AntEnv as AntEnv,
        HalfCheetahEnv as HalfCheetahEnv,
        HopperEnv as HopperEnv,
        HumanoidEnv as HumanoidEnv,
        HumanoidMacroAction as HumanoidMacroAction,
        InvertedPendulumEnv as InvertedPendulumEnv,
        MujocoEnv as MujocoEnv,
        ReacherEnv as ReacherEnv,
        SatelliteEnv as SatelliteEnv,
        SatelliteMacroAction as SatelliteMacroAction,
        Walker2dEnv as Walker2dEnv,
    )
    from .policies import (
        RandomPolicy as RandomPolicy,
    )
    from .utils import (
        ExplorationType as ExplorationType,
        exploration_type as exploration_type,
        make_composite_from_td as make_composite_from_td,
        set_exploration_type as set_exploration_type,
    )
    from .transforms import (
        ActionDiscretizer as ActionDiscretizer,
        ActionMask as ActionMask,
        ActionScaling as ActionScaling,
        BinarizeReward as BinarizeReward,
        CatFrames as CatFrames,
        CatTensors as CatTensors,
        CenterCrop as CenterCrop,
        ClipTransform as ClipTransform,
        Crop as Crop,
        DTypeCastTransform as DTypeCastTransform,
        DeviceCastTransform as DeviceCastTransform,
        DiscreteActionProjection as DiscreteActionProjection,
        DoubleToFloat as DoubleToFloat,
        EndOfLifeTransform as EndOfLifeTransform,
        ExcludeTransform as ExcludeTransform,
        FiniteTensorDictCheck as FiniteTensorDictCheck,
        FlattenAction as FlattenAction,
        FlattenObservation as FlattenObservation,
        FrameSkipTransform as FrameSkipTransform,
        GrayScale as GrayScale,
        InitTracker as InitTracker,
        MacroAction as MacroAction,
        MacroPrimitive as MacroPrimitive,
        MacroPrimitiveTransform as MacroPrimitiveTransform,
        MultiAction as MultiAction,
        NextObservationDelta as NextObservationDelta,
        NextStateReconstructor as NextStateReconstructor,
        NoopResetEnv as NoopResetEnv,
        NormalizeReward as NormalizeReward,
        ObservationNorm as ObservationNorm,
        PermuteTransform as PermuteTransform,
        PolicyAgeFilter as PolicyAgeFilter,
        RandomTruncationTransform as RandomTruncationTransform,
        RenameTransform as RenameTransform,
        Resize as Resize,
        Reward2GoTransform as Reward2GoTransform,
        RewardClipping as RewardClipping,
        RewardScaling as RewardScaling,
        RewardSum as RewardSum,
        SelectTransform as SelectTransform,
        SignTransform as SignTransform,
        SqueezeTransform as SqueezeTransform,
        TargetMacroAction as TargetMacroAction,
        TargetReturn as TargetReturn,
        TensorDictPrimer as TensorDictPrimer,
        TerminateTransform as TerminateTransform,
        TimeMaxPool as TimeMaxPool,
        ToTensorImage as ToTensorImage,
        TrajCounter as TrajCounter,
        UnaryTransform as UnaryTransform,
        UnsqueezeTransform as UnsqueezeTransform,
        VecNorm as VecNorm,
        VideoRecorder as VideoRecorder,
    )

# static, so that documentation tools read it (tests/integration/test_layout.py checks it against _LAZY)
__all__ = [
    "HumanoidMacroAction",
    "SatelliteEnv",
    "SatelliteMacroAction",
    "MacroAction",
    "MacroPrimitive",
    "MacroPrimitiveTransform",
    "TargetMacroAction",
    "AntEnv",
    "HalfCheetahEnv",
    "HopperEnv",
    "HumanoidEnv",
    "InvertedPendulumEnv",
    "MujocoEnv",
    "ReacherEnv",
    "Walker2dEnv",
    "ActionDiscretizer",
    "ActionMask",
    "ActionScaling",
    "AtariEnv",
    "BaseInfoDictReader",
    "BinarizeReward",
    "BraxEnv",
    "BraxWrapper",
    "CartPoleEnv",
    "CatFrames",
    "CatTensors",
    "CenterCrop",
    "ClipTransform",
    "Compose",
    "Crop",
    "DMControlEnv",
    "DMControlWrapper",
    "DTypeCastTransform",
    "DeviceCastTransform",
    "DiscreteActionProjection",
    "DoubleToFloat",
    "DreamerDecoder",
    "DreamerEnv",
    "EndOfLifeTransform",
    "EnvBase",
    "EnvCreator",
    "ExcludeTransform",
    "FiniteTensorDictCheck",
    "ExplorationType",
    "FlattenAction",
    "FlattenObservation",
    "FrameSkipTransform",
    "GrayScale",
    "GymEnv",
    "GymWrapper",
    "InitTracker",
    "gym_backend",
    "MarlGroupMapType",
    "ModelBasedEnvBase",
    "MultiAction",
    "NextObservationDelta",
    "NextStateReconstructor",
    "NoopResetEnv",
    "NormalizeReward",
    "ObservationNorm",
    "ParallelEnv",
    "PendulumEnv",
    "PermuteTransform",
    "PolicyAgeFilter",
    "PettingZooEnv",
    "PettingZooWrapper",
    "RandomPolicy",
    "RandomTruncationTransform",
    "RenameTransform",
    "Resize",
    "Reward2GoTransform",
    "RewardClipping",
    "RewardScaling",
    "RewardSum",
    "SelectTransform",
    "SerialEnv",
    "SignTransform",
    "SqueezeTransform",
    "StepCounter",
    "TargetReturn",
    "TensorDictPrimer",
    "TerminateTransform",
    "TimeMaxPool",
    "ToTensorImage",
    "TrajCounter",
    "Transform",
    "TransformedEnv",
    "UnaryTransform",
    "UnsqueezeTransform",
    "VecNorm",
    "VideoRecorder",
    "VmasEnv",
    "VmasWrapper",
    "__version__",
    "check_env_specs",
    "check_marl_grouping",
    "default_info_dict_reader",
    "exploration_type",
    "make_atari_env",
    "make_composite_from_td",
    "rollout",
    "set_exploration_type",
    "step_mdp",
    "WorldModelEnv",
]


# every transform is also a top-level name: loaded through rl_envs.transforms (itself lazy)
_RESOLVE = {**dict.fromkeys(transforms.__all__, "transforms"), **_LAZY}


def __getattr__(name: str) -> Any:
    return load_lazy(__name__, globals(), _RESOLVE, name)


def __dir__() -> list:
    return __all__
