"""BufferPart: what storages, samplers and writers share (state, sharing, checkpoints)."""
from __future__ import annotations

from typing import Any

__all__ = ["BufferPart"]


class BufferPart:
    """Base of the three parts of a buffer: default state handling and crash-safe ``dumps``/``loads``."""

    def share_memory_(self) -> "BufferPart":
        """Moves the part's state to shared memory (nothing to share by default)."""
        return self

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def dumps(self, path: Any) -> None:
        """Writes this part alone as a crash-safe checkpoint directory (see :mod:`rl_replay.checkpoint`)."""
        from .checkpoint import dump_part

        dump_part(self, path)

    def loads(self, path: Any) -> None:
        """Restores what :meth:`dumps` wrote (no unpickling)."""
        from .checkpoint import load_part

        load_part(self, path)
