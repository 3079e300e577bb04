"""Env factories for the worker processes of tests/rl_envs/test_batched.py.

Importable by name from a fresh interpreter (pytest's importlib mode does not make test modules
importable), so "spawn" workers can unpickle them. The test puts this folder on ``sys.path``; spawned
children inherit it. Keep imports minimal.
"""

from __future__ import annotations

import threading
import time

import torch
from rl_envs import EnvBase, PendulumEnv
from tdict import TensorDict
from tdict.specs import Composite, NonTensor, Unbounded


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


def spin(seconds: float) -> None:
    """Computes for ``seconds`` of wall-clock time (a step that is slow, not stuck)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))


class HangingPendulum(PendulumEnv):
    """A PendulumEnv whose ``_step`` sleeps for ``seconds`` (a minute) on its ``hang_at``-th call, or
    computes for that long with ``busy=True`` (a slow but live step); it first creates the file
    ``marker``, if given, so a test knows the worker is inside the step."""

    def __init__(
        self, hang_at: int = 2, seconds: float = 60.0, marker: str | None = None, busy: bool = False, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.hang_at, self.seconds, self.marker, self.busy, self.calls = hang_at, seconds, marker, busy, 0

    def _step(self, tensordict):
        self.calls += 1
        if self.calls == self.hang_at:
            if self.marker is not None:
                open(self.marker, "w").close()
            if self.busy:
                spin(self.seconds)
            else:
                time.sleep(self.seconds)
        return super()._step(tensordict)


class _Nested:
    value = 42

    def get(self, plus: int = 0) -> int:
        return self.value + plus


class CountingPendulum(PendulumEnv):
    """A PendulumEnv that counts its steps (``steps``), with a method, a nested object, an attribute
    that does not pickle and a method that raises: what batched envs forward to their sub-envs."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.steps = 0
        self.nested = _Nested()
        self.unpicklable = threading.Lock()

    def _step(self, tensordict):
        self.steps += 1
        return super()._step(tensordict)

    def scaled(self, k: int) -> int:
        return self.steps * k

    def explode(self) -> None:
        raise ValueError("explode was called")


class NoteEnv(EnvBase):
    """An env with a non-tensor observation and state ``note`` (an int counting the steps since the
    last reset) next to a tensor one: what batched envs must carry without a buffer for it."""

    def __init__(self, start: int = 0) -> None:
        super().__init__()
        self.start = start
        self.observation_spec = Composite(tensor=Unbounded(3), note=NonTensor(shape=()))
        self.state_spec = Composite(note=NonTensor(shape=()))
        self.action_spec = Unbounded(1)
        self.reward_spec = Unbounded(1)

    def _reset(self, tensordict):
        out = TensorDict({"tensor": torch.zeros(3), "done": torch.zeros((), dtype=torch.bool)}, [])
        out["terminated"] = torch.zeros((), dtype=torch.bool)
        out.set_non_tensor("note", self.start)
        return out

    def _step(self, tensordict):
        note = tensordict.get("note").data + 1
        out = TensorDict({"tensor": torch.full((3,), float(note)), "reward": torch.ones(1)}, [])
        out["done"] = torch.zeros((), dtype=torch.bool)
        out["terminated"] = torch.zeros((), dtype=torch.bool)
        out.set_non_tensor("note", note)
        return out

    def _set_seed(self, seed):
        return seed
