"""Env factories for the worker processes of tests/rl_envs/test_batched.py.

Importable by name from a fresh interpreter (pytest's importlib mode does not make test modules
importable), so "spawn" workers can unpickle them. The test puts this folder on ``sys.path``; spawned
children inherit it. Keep imports minimal.
"""
from __future__ import annotations

import time

from rl_envs import PendulumEnv


def make_pendulum(**kwargs) -> PendulumEnv:
    return PendulumEnv(**kwargs)


class FailingPendulum(PendulumEnv):
    """A PendulumEnv whose ``_step`` raises on its ``fail_at``-th call."""

    def __init__(self, fail_at: int = 3, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fail_at, self.calls = fail_at, 0

    def _step(self, tensordict):
        self.calls += 1
        if self.calls == self.fail_at:
            raise ValueError(f"sub-env exploded at step {self.calls}")
        return super()._step(tensordict)


class HangingPendulum(PendulumEnv):
    """A PendulumEnv whose ``_step`` sleeps for a minute on its ``hang_at``-th call."""

    def __init__(self, hang_at: int = 2, **kwargs) -> None:
        super().__init__(**kwargs)
        self.hang_at, self.calls = hang_at, 0

    def _step(self, tensordict):
        self.calls += 1
        if self.calls == self.hang_at:
            time.sleep(60)
        return super()._step(tensordict)
