"""Native MuJoCo tasks: batches of simulations stepped together, Gymnasium's v5 tasks without Gymnasium.

They need ``mujoco`` (``pip install rl-envs[mujoco]``; ``backend="mjx"``: ``rl-envs[mjx]``); the
locomotion tasks load the model files that Gymnasium ships (``pip install gymnasium``: its package is only read, never imported).
"""

from .ant import AntEnv
from .env import MujocoEnv
from .half_cheetah import HalfCheetahEnv
from .hopper import HopperEnv, Walker2dEnv
from .humanoid import HumanoidEnv
from .humanoid_macro import HumanoidMacroAction
from .inverted_pendulum import InvertedPendulumEnv
from .mjx_simulation import MjxSimulation
from .reacher import ReacherEnv
from .satellite import SatelliteEnv
from .satellite_macro import SatelliteMacroAction
from .simulation import MujocoSimulation

__all__ = [
    "AntEnv",
    "HalfCheetahEnv",
    "HopperEnv",
    "HumanoidEnv",
    "HumanoidMacroAction",
    "InvertedPendulumEnv",
    "MjxSimulation",
    "MujocoEnv",
    "MujocoSimulation",
    "ReacherEnv",
    "SatelliteEnv",
    "SatelliteMacroAction",
    "Walker2dEnv",
]
