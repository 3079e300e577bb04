"""Batched envs: several copies of an env run as one env with a leading worker dim.

:class:`SerialEnv` steps the copies in turn in this process; :class:`ParallelEnv` runs each in its
own process and exchanges data through shared memory. Both follow ``torchrl.envs.SerialEnv`` /
``ParallelEnv``.

Examples:
    >>> from rl_envs import PendulumEnv
    >>> from rl_envs.batched import SerialEnv
    >>> env = SerialEnv(2, PendulumEnv, {"batch_size": [3]})
    >>> env.batch_size
    torch.Size([2, 3])
"""

from __future__ import annotations

from ._shared import BatchedEnvBase
from .parallel import ParallelEnv
from .serial import SerialEnv

__all__ = ["BatchedEnvBase", "ParallelEnv", "SerialEnv"]
