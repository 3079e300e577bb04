"""Transforms: key-mapped changes to env outputs (and inputs), usable on envs, buffers and plain TensorDicts.

Each transform lives in the module of its family; names are imported on first use.
"""
from __future__ import annotations

import importlib
from typing import Any, TYPE_CHECKING

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
        ["RewardSum", "RewardScaling", "RewardClipping", "BinarizeReward", "Reward2GoTransform", "TargetReturn"], "reward"
    ),
    **dict.fromkeys(
        ["InitTracker", "TrajCounter", "NoopResetEnv", "FrameSkipTransform", "RandomTruncationTransform",
         "TerminateTransform", "EndOfLifeTransform"],
        "episode",
    ),
    "TensorDictPrimer": "primer",
    **dict.fromkeys(["CatFrames", "TimeMaxPool", "NextObservationDelta"], "temporal"),
    **dict.fromkeys(["ActionScaling", "FlattenAction", "ActionMask", "DiscreteActionProjection", "MultiAction"], "action"),
    "ActionDiscretizer": "discretize",
    **dict.fromkeys(["ObservationNorm", "VecNorm", "NormalizeReward"], "norm"),
    "VideoRecorder": "video",
}

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time the names load on first use (__getattr__)
    from .action import ActionMask, ActionScaling, DiscreteActionProjection, FlattenAction, MultiAction
    from .discretize import ActionDiscretizer
    from .dtype import DTypeCastTransform, DeviceCastTransform, DoubleToFloat
    from .elementwise import ClipTransform, SignTransform, UnaryTransform
    from .episode import (
        EndOfLifeTransform,
        FrameSkipTransform,
        InitTracker,
        NoopResetEnv,
        RandomTruncationTransform,
        TerminateTransform,
        TrajCounter,
    )
    from .image import CenterCrop, Crop, GrayScale, Resize, ToTensorImage
    from .keys import CatTensors, ExcludeTransform, RenameTransform, SelectTransform
    from .norm import NormalizeReward, ObservationNorm, VecNorm
    from .primer import TensorDictPrimer
    from .reward import BinarizeReward, Reward2GoTransform, RewardClipping, RewardScaling, RewardSum, TargetReturn
    from .shape import FlattenObservation, PermuteTransform, SqueezeTransform, UnsqueezeTransform
    from .temporal import CatFrames, NextObservationDelta, TimeMaxPool
    from .video import VideoRecorder

__all__ = sorted(["Compose", "StepCounter", "Transform", "TransformedEnv", *_LAZY])


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return __all__
