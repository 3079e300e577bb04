"""Native environments: pure torch, vectorised over a batch dimension."""

from .pendulum import PendulumEnv

__all__ = ["PendulumEnv"]
