"""Transforms: key-mapped changes to env outputs (and inputs), usable on envs, buffers and plain TensorDicts.

Each transform lives in the module of its family; names are imported on first use.
"""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

from .._lazy import load_lazy

from .base import Compose, Transform
from .step_counter import StepCounter
from .transformed_env import TransformedEnv

# name -> module of this package that defines it
_LAZY = {
    **dict.fromkeys(["DoubleToFloat", "DTypeCastTransform", "DeviceCastTransform"], "dtype"),
    **dict.fromkeys(["ExcludeTransform", "SelectTransform", "RenameTransform", "CatTensors"], "keys"),
    **dict.fromkeys(["UnsqueezeTransform", "SqueezeTransform", "FlattenObservation", "PermuteTransform"], "shape"),
    **dict.fromkeys(["ToTensorImage", "Resize", "CenterCrop", "Crop", "GrayScale"], "image"),
    **dict.fromkeys(["ClipTransform", "SignTransform", "UnaryTransform"], "elementwise"),
    **dict.fromkeys(
        ["RewardSum", "RewardScaling", "RewardClipping", "BinarizeReward", "Reward2GoTransform", "TargetReturn"],
        "reward",
    ),
    **dict.fromkeys(
        [
            "InitTracker",
            "TrajCounter",
            "NoopResetEnv",
            "FrameSkipTransform",
            "RandomTruncationTransform",
            "TerminateTransform",
            "EndOfLifeTransform",
        ],
        "episode",
    ),
    "TensorDictPrimer": "primer",
    "NextStateReconstructor": "next_state",
    "PolicyAgeFilter": "policy_age",
    "FiniteTensorDictCheck": "finite_check",
    **dict.fromkeys(["CatFrames", "TimeMaxPool", "NextObservationDelta"], "temporal"),
    **dict.fromkeys(
        ["ActionScaling", "FlattenAction", "ActionMask", "DiscreteActionProjection", "MultiAction"], "action"
    ),
    "ActionDiscretizer": "discretize",
    **dict.fromkeys(["ObservationNorm", "VecNorm", "NormalizeReward"], "norm"),
    "VideoRecorder": "video",
    **dict.fromkeys(["MacroAction", "MacroPrimitive", "TargetMacroAction", "MacroPrimitiveTransform"], "macro"),
}

if TYPE_CHECKING:  # type checkers and IDEs see these (`X as X`: re-exported); at run time __getattr__ loads them
    from .action import (
        ActionMask as ActionMask,
        ActionScaling as ActionScaling,
        DiscreteActionProjection as DiscreteActionProjection,
        FlattenAction as FlattenAction,
        MultiAction as MultiAction,
    )
    from .discretize import (
        ActionDiscretizer as ActionDiscretizer,
    )
    from .dtype import (
        DTypeCastTransform as DTypeCastTransform,
        DeviceCastTransform as DeviceCastTransform,
        DoubleToFloat as DoubleToFloat,
    )
    from .elementwise import (
        ClipTransform as ClipTransform,
        SignTransform as SignTransform,
        UnaryTransform as UnaryTransform,
    )
    from .episode import (
        EndOfLifeTransform as EndOfLifeTransform,
        FrameSkipTransform as FrameSkipTransform,
        InitTracker as InitTracker,
        NoopResetEnv as NoopResetEnv,
        RandomTruncationTransform as RandomTruncationTransform,
        TerminateTransform as TerminateTransform,
        TrajCounter as TrajCounter,
    )
    from .finite_check import (
        FiniteTensorDictCheck as FiniteTensorDictCheck,
    )
    from .next_state import (
        NextStateReconstructor as NextStateReconstructor,
    )
    from .policy_age import (
        PolicyAgeFilter as PolicyAgeFilter,
    )
    from .image import (
        CenterCrop as CenterCrop,
        Crop as Crop,
        GrayScale as GrayScale,
        Resize as Resize,
        ToTensorImage as ToTensorImage,
    )
    from .keys import (
        CatTensors as CatTensors,
        ExcludeTransform as ExcludeTransform,
        RenameTransform as RenameTransform,
        SelectTransform as SelectTransform,
    )
    from .norm import (
        NormalizeReward as NormalizeReward,
        ObservationNorm as ObservationNorm,
        VecNorm as VecNorm,
    )
    from .primer import (
        TensorDictPrimer as TensorDictPrimer,
    )
    from .reward import (
        BinarizeReward as BinarizeReward,
        Reward2GoTransform as Reward2GoTransform,
        RewardClipping as RewardClipping,
        RewardScaling as RewardScaling,
        RewardSum as RewardSum,
        TargetReturn as TargetReturn,
    )
    from .shape import (
        FlattenObservation as FlattenObservation,
        PermuteTransform as PermuteTransform,
        SqueezeTransform as SqueezeTransform,
        UnsqueezeTransform as UnsqueezeTransform,
    )
    from .temporal import (
        CatFrames as CatFrames,
        NextObservationDelta as NextObservationDelta,
        TimeMaxPool as TimeMaxPool,
    )
    from .video import (
        VideoRecorder as VideoRecorder,
    )
    from .macro import (
        MacroAction as MacroAction,
        MacroPrimitive as MacroPrimitive,
        MacroPrimitiveTransform as MacroPrimitiveTransform,
        TargetMacroAction as TargetMacroAction,
    )

# static, so that documentation tools read it (tests/integration/test_layout.py checks it against _LAZY)
__all__ = [
    "ActionDiscretizer",
    "ActionMask",
    "ActionScaling",
    "BinarizeReward",
    "CatFrames",
    "CatTensors",
    "CenterCrop",
    "ClipTransform",
    "Compose",
    "Crop",
    "DTypeCastTransform",
    "DeviceCastTransform",
    "DiscreteActionProjection",
    "DoubleToFloat",
    "EndOfLifeTransform",
    "ExcludeTransform",
    "FiniteTensorDictCheck",
    "FlattenAction",
    "FlattenObservation",
    "FrameSkipTransform",
    "GrayScale",
    "InitTracker",
    "MultiAction",
    "NextObservationDelta",
    "NextStateReconstructor",
    "NoopResetEnv",
    "NormalizeReward",
    "ObservationNorm",
    "PermuteTransform",
    "PolicyAgeFilter",
    "RandomTruncationTransform",
    "RenameTransform",
    "Resize",
    "Reward2GoTransform",
    "RewardClipping",
    "RewardScaling",
    "RewardSum",
    "SelectTransform",
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
    "MacroAction",
    "MacroPrimitive",
    "MacroPrimitiveTransform",
    "TargetMacroAction",
]


def __getattr__(name: str) -> Any:
    return load_lazy(__name__, globals(), _LAZY, name)


def __dir__() -> list:
    return __all__
