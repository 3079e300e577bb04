"""Sampler: picks which stored items a batch holds."""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["Sampler"]


class Sampler:
    """Base class of samplers: ``sample(storage, batch_size) -> (index, info)``.

    Samplers that track items (priorities, trajectories) hear about writes through :meth:`add` and
    :meth:`extend` (with the written indices). ``_rng`` is the generator the buffer hands down
    (``ReplayBuffer(generator=...)``); ``None`` means torch's global one.
    """

    def __init__(self) -> None:
        self._rng: torch.Generator | None = None

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        raise NotImplementedError

    def add(self, index: Any) -> None:
        pass

    def extend(self, index: Any) -> None:
        pass

    def update_priority(self, index: Any, priority: Any) -> None:
        raise RuntimeError(f"{type(self).__name__} has no priorities; use a PrioritizedSampler.")

    def mark_update(self, index: Any) -> None:
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

    def share_memory_(self) -> "Sampler":
        return self

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def dumps(self, path: Any) -> None:
        """Writes this part alone as a crash-safe checkpoint directory (see :mod:`rl_replay.checkpoint`)."""
        from ..checkpoint import dump_part

        dump_part(self, path)

    def loads(self, path: Any) -> None:
        """Restores what :meth:`dumps` wrote (no unpickling)."""
        from ..checkpoint import load_part

        load_part(self, path)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
