"""Transforms: key-mapped changes to env outputs (and inputs), usable on envs, buffers and plain TensorDicts.

Each transform lives in the module of its family; names are imported on first use.
"""
from __future__ import annotations

import importlib
from typing import Any

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
