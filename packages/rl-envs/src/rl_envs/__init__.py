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
from typing import Any

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
