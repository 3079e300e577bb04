"""BufferPart: what storages, samplers and writers share (state, sharing, checkpoints)."""

from __future__ import annotations

import copy
from typing import Any

import torch

__all__ = ["BufferPart", "check_loadable"]


def check_loadable(part: Any, state: Any, method: str = "load_state_dict") -> None:
    """Loads ``state`` into a throwaway copy of ``part``, so that a bad state raises while ``part``
    itself is unchanged (``load_state_dict`` implementations may assign field by field).

    The copy shares the other buffer parts and generators that ``part`` refers to (a sampler's
    storage may be large or memory-mapped); everything of ``part`` itself is copied.
    """
    shared = [v for v in getattr(part, "__dict__", {}).values() if isinstance(v, (BufferPart, torch.Generator))]
    memo = {id(v): v for v in shared}
    getattr(copy.deepcopy(part, memo), method)(state)


class BufferPart:
    """Base of the three parts of a buffer: default state handling and crash-safe ``dumps``/``loads``."""

    def share_memory_(self) -> "BufferPart":
        """Moves the part's state to shared memory (nothing to share by default)."""
        return self

    def state_dict(self) -> dict:
        """The part's state as plain data (empty by default); :meth:`load_state_dict` restores it."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` (nothing to restore by default)."""
        pass

    def dumps(self, path: Any) -> None:
        """Writes this part alone as a crash-safe checkpoint directory (see :mod:`rl_replay.checkpoint`)."""
        from .checkpoint import dump_part

        dump_part(self, path)

    def loads(self, path: Any) -> None:
        """Restores what :meth:`dumps` wrote (no unpickling)."""
        from .checkpoint import load_part

        load_part(self, path)
