"""Model-based envs: a learnt model's predictions stepped as an env (TorchRL's ``torchrl.envs.model_based``).

``WorldModelEnv`` steps a ``WorldModel`` in its latent space, ``DreamerEnv`` a Dreamer RSSM's
``state`` and ``belief``; both run rollouts and collectors in imagination with the code that runs
them on a real env.
"""

from .common import ModelBasedEnvBase
from .dreamer import DreamerDecoder, DreamerEnv
from .world_model_env import WorldModelEnv

__all__ = ["DreamerDecoder", "DreamerEnv", "ModelBasedEnvBase", "WorldModelEnv"]
