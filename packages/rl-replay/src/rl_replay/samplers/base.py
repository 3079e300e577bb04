"""Sampler: picks which stored items a batch holds."""

from __future__ import annotations

from typing import Any

import torch

from .._part import BufferPart

__all__ = ["Sampler"]


class Sampler(BufferPart):
    """Base class of samplers: ``sample(storage, batch_size) -> (index, info)``.

    Samplers that track items (priorities, trajectories) hear about writes through :meth:`add` and
    :meth:`extend` (with the written indices). ``_rng`` is the generator the buffer hands down
    (``ReplayBuffer(generator=...)``); ``None`` means torch's global one.
    """

    def __init__(self) -> None:
        self._rng: torch.Generator | None = None

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """``(index, info)`` of a batch of ``batch_size`` items of ``storage`` (abstract)."""
        raise NotImplementedError

    def add(self, index: Any) -> None:
        """Hook called with the index a writer just filled for one item (nothing by default)."""
        pass

    def extend(self, index: Any) -> None:
        """Hook called with the indices a writer just filled (nothing by default)."""
        pass

    def update_priority(self, index: Any, priority: Any) -> None:
        """Sets priorities; this sampler has none, so it raises ``RuntimeError``."""
        raise RuntimeError(f"{type(self).__name__} has no priorities; use a PrioritizedSampler.")

    def mark_update(self, index: Any) -> None:
        """Hook called with indices whose items changed in place (nothing by default)."""
        pass

    @property
    def ran_out(self) -> bool:
        """True when a finite pass over the data is over (samplers without replacement)."""
        return False

    @ran_out.setter
    def ran_out(self, value: bool) -> None:
        pass

    def _empty(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class EndsPasses:
    """Mixin of the samplers whose passes over the data end: ``ran_out`` is kept in ``_ran_out``
    (which the sampler sets when a pass is over and the buffer clears to start the next)."""

    _ran_out: bool = False

    @property
    def ran_out(self) -> bool:
        """True when the current pass over the data is over (the next sample starts a new one)."""
        return self._ran_out

    @ran_out.setter
    def ran_out(self, value: bool) -> None:
        self._ran_out = bool(value)
