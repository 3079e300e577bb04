"""Losses and what they share: the LossModule base and the target-network updaters."""

from .common import LossModule
from .target_updaters import HardUpdate, SoftUpdate, TargetNetUpdater

__all__ = ["HardUpdate", "LossModule", "SoftUpdate", "TargetNetUpdater"]
