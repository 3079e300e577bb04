"""BufferPart: what storages, samplers and writers share (state, sharing, checkpoints)."""

from __future__ import annotations

import copy
from typing import Any

import torch

__all__ = ["BufferPart", "HostInts", "check_compilable", "check_loadable", "check_shareable"]


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


def check_compilable(owner: str, compilable: Any) -> None:
    """Raises ``TypeError`` naming ``compilable`` unless it is a bool."""
    if not isinstance(compilable, bool):
        raise TypeError(f"{owner}: compilable must be a bool, got {compilable!r} ({type(compilable).__name__}).")


def check_shareable(part: Any) -> None:
    """Raises ``RuntimeError`` when ``part`` was built with ``compilable=True`` (its counters are Python ints)."""
    if getattr(part, "_compilable", False):
        raise RuntimeError(
            f"{type(part).__name__} was built with compilable=True: its counters are plain Python ints "
            "and cannot be moved to shared memory; build it with compilable=False to share it between processes."
        )


class HostInts:
    """Up to three ints held as Python attributes, with the tensor methods the counters use: the
    counters of a ``compilable`` part (a storage's item count, a writer's cursor), read without
    ``Tensor.item()``. (Attributes rather than a list: ``torch.compile`` treats an int attribute
    that changes between calls as dynamic, while it recompiles for every new value of a list item.)

    Like the int64 tensor it replaces, it is read with ``int(c)`` (the first value) or ``c[i]``,
    and written with ``c[i] = v``, ``fill_`` and ``zero_``; unlike it, it cannot be shared.

    Examples:
        >>> c = HostInts(2)
        >>> c[0] = 3
        >>> c[1] += 2
        >>> c[0], c[1], int(HostInts().fill_(4))
        (3, 2, 4)
    """

    _NAMES = ("v0", "v1", "v2")

    def __init__(self, size: int = 1) -> None:
        if not 1 <= size <= len(self._NAMES):
            raise ValueError(f"HostInts: size must be in [1, {len(self._NAMES)}], got {size}.")
        self.size = size
        self.v0 = self.v1 = self.v2 = 0

    def __int__(self) -> int:
        return self.v0

    def __index__(self) -> int:
        return self.v0

    def _name(self, i: int) -> str:
        if not -self.size <= i < self.size:
            raise IndexError(f"HostInts: index {i} is out of range for {self.size} counters.")
        return self._NAMES[i % self.size]

    def __getitem__(self, i: int) -> int:
        return getattr(self, self._name(i))

    def __setitem__(self, i: int, value: Any) -> None:
        setattr(self, self._name(i), int(value))

    def fill_(self, value: Any) -> "HostInts":
        self.v0 = self.v1 = self.v2 = int(value)
        return self

    def zero_(self) -> "HostInts":
        return self.fill_(0)

    def tolist(self) -> list[int]:
        return [self[i] for i in range(self.size)]

    def share_memory_(self) -> "HostInts":
        raise RuntimeError("the counters of a compilable part are Python ints: they cannot be moved to shared memory.")

    def __repr__(self) -> str:
        return f"HostInts({self.tolist()})"
