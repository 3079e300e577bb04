"""TrajectoryAssembler: gathers steps from batches and hands out whole trajectories (``trajs_per_batch``)."""

from __future__ import annotations

import warnings
from typing import Any

import tdict
import torch
from tdict import TensorDictBase

from ._buffer import write
from .trajectories import split_trajectories

__all__ = ["TrajectoryAssembler", "check_traj_format", "write_trajectories"]

_TRAJ = ("collector", "traj_ids")
_DONE = ("next", "done")
TRAJ_FORMATS = ("padded", "cat")


def check_traj_format(owner: str, traj_format: Any, trajs_per_batch: Any, replay_buffer: Any) -> str:
    """The trajectory layout to use: ``traj_format`` checked against ``trajs_per_batch``.

    ``None`` means ``"padded"`` (with a ``FutureWarning`` when trajectories are yielded, as the
    default follows TorchRL's announced change to ``"cat"``); a replay buffer always receives ``"cat"``.

    Raises:
        ValueError: an unknown format, or a format without ``trajs_per_batch``.
    """
    if traj_format is not None and traj_format not in TRAJ_FORMATS:
        raise ValueError(f"{owner}: traj_format must be 'padded' or 'cat', got {traj_format!r}.")
    if trajs_per_batch is None:
        if traj_format is not None:
            raise ValueError(
                f"{owner}: traj_format={traj_format!r} needs trajs_per_batch (it shapes whole trajectories)."
            )
        return "padded"
    if traj_format is None:
        if replay_buffer is None:
            warnings.warn(
                f"{owner}: traj_format is not given and defaults to 'padded'; the default will change to 'cat' in "
                "torchrl v0.16 (rl_collect follows). Pass traj_format='padded' or 'cat' to choose.",
                FutureWarning,
                stacklevel=3,
            )
        return "padded"
    return traj_format


class TrajectoryAssembler:
    """Keeps the steps of unfinished trajectories until they end, then hands out whole ones.

    Steps are added as batches (any shape: they are flattened, and steps of one trajectory must come
    in time order); a trajectory is complete once one of its steps has ``("next", "done")`` set.
    :meth:`pop` returns the ``n`` first completed trajectories (in completion order) as
    ``"padded"`` (``[n, T_max]`` with ``("collector", "mask")``) or ``"cat"`` (the steps of each
    trajectory contiguous, one after the other).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> steps = TensorDict({("collector", "traj_ids"): torch.tensor([0, 1, 0, 1, 1]),
        ...                     ("next", "done"): torch.tensor([False, False, True, False, True])}, [5])
        >>> assembler = TrajectoryAssembler("cat")
        >>> assembler.add(steps)
        >>> assembler.complete
        2
        >>> assembler.pop(2)["collector", "traj_ids"].tolist()
        [0, 0, 1, 1, 1]
    """

    def __init__(self, traj_format: str = "padded") -> None:
        if traj_format not in TRAJ_FORMATS:
            raise ValueError(f"TrajectoryAssembler: traj_format must be 'padded' or 'cat', got {traj_format!r}.")
        self.traj_format = traj_format
        self._steps: TensorDictBase | None = None
        self._ended: list[int] = []  # ids of the completed trajectories, in completion order

    @property
    def complete(self) -> int:
        """How many complete trajectories are waiting."""
        return len(self._ended)

    def add(self, batch: TensorDictBase) -> None:
        """Adds the steps of ``batch`` (which must hold ``("collector", "traj_ids")`` and ``("next", "done")``)."""
        keys = batch.keys(True)
        if _TRAJ not in keys:
            raise KeyError(
                "TrajectoryAssembler: the batch has no ('collector', 'traj_ids') entry, which trajectories are "
                "assembled by (was the collector built with track_traj_ids=False?)."
            )
        flat = batch.reshape(-1)
        done = flat.get(_DONE)
        if done.ndim > 1:
            done = done.reshape(done.shape[0], -1).any(-1)
        if bool(done.any()):
            self._ended.extend(int(i) for i in flat.get(_TRAJ)[done].tolist())
        self._steps = flat if self._steps is None else tdict.cat([self._steps, flat])

    def pop(self, n: int | None = None, traj_format: str | None = None) -> TensorDictBase | None:
        """The ``n`` first completed trajectories (all of them when ``n`` is None), or None when fewer are complete."""
        if n is None:
            n = len(self._ended)
        if n == 0 or len(self._ended) < n or self._steps is None:
            return None
        chosen, self._ended = self._ended[:n], self._ended[n:]
        steps = self._steps
        ids = steps.get(_TRAJ)
        chosen_t = torch.tensor(chosen, dtype=ids.dtype, device=ids.device)
        keep = torch.isin(ids, chosen_t)
        rest = steps[~keep]
        self._steps = rest if rest.numel() else None
        picked = steps[keep]
        # group the steps by trajectory, trajectories in completion order (a stable sort keeps time order)
        rank = (picked.get(_TRAJ).unsqueeze(-1) == chosen_t).to(torch.int64).argmax(-1)
        picked = picked[torch.sort(rank, stable=True).indices]
        if (traj_format or self.traj_format) == "cat":
            return picked
        return split_trajectories(picked)

    def clear(self) -> None:
        """Drops every step held (complete trajectories too): what a collector's ``reset()`` does."""
        self._steps = None
        self._ended = []


def write_trajectories(assembler: TrajectoryAssembler, buffer: Any, per_write: int | None, postproc: Any = None) -> int:
    """Writes the completed trajectories of ``assembler`` into ``buffer``, flat (``"cat"``), ``per_write``
    at a time (all at once when None; a remainder smaller than ``per_write`` waits). Returns how many."""
    written = 0
    while assembler.complete and (per_write is None or assembler.complete >= per_write):
        steps = assembler.pop(per_write, traj_format="cat")
        assert steps is not None  # enough are complete
        written += per_write or 0
        write(buffer, steps if postproc is None else postproc(steps))
        if per_write is None:
            break
    return written
