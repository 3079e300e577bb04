"""Trajectory boundaries in storage order: where each stored trajectory starts and stops.

A storage holds steps along its first dim (time), possibly with more dims after it (one column
per env). Boundaries come from end-of-trajectory flags or from trajectory ids (a change of id
ends a trajectory). A full storage is a ring: a trajectory without an end before the last row
continues at row 0, and the row last written (the cursor) always ends one (what followed it was
overwritten). A storage that is not full ends a trajectory at its last row.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["DEFAULT_DONE_KEYS", "find_start_stop_traj"]

#: the entries that end a trajectory in TorchRL's data layout (under ``"next"`` in a step)
DEFAULT_DONE_KEYS = ("done", "truncated", "terminated")


def _cursor_row(cursor: Any) -> int:
    """The last written row from an int, a tensor of written rows, or a range of them."""
    if isinstance(cursor, torch.Tensor):
        cursor = cursor.reshape(-1)
        if not cursor.numel():
            raise RuntimeError("find_start_stop_traj: cursor must not be an empty tensor.")
        return int(cursor[-1])
    if isinstance(cursor, range):
        if not len(cursor):
            raise RuntimeError("find_start_stop_traj: cursor must not be an empty range.")
        return cursor[-1]
    if isinstance(cursor, bool) or not isinstance(cursor, int):
        raise RuntimeError(
            f"find_start_stop_traj: cursor must be an int, a 1-D tensor or a range, got {type(cursor).__name__}."
        )
    return cursor


def end_flags(
    *, trajectory: torch.Tensor | None = None, end: torch.Tensor | None = None, at_capacity: bool, cursor: Any = None
) -> torch.Tensor:
    """A ``[T, *B]`` bool tensor in which every trajectory has its end flagged (a new tensor)."""
    if (trajectory is None) == (end is None):
        raise TypeError(
            "find_start_stop_traj: Exactly one of `trajectory` and `end` must be provided, got "
            f"trajectory={'a tensor' if trajectory is not None else None}, end={'a tensor' if end is not None else None}."
        )
    signal = trajectory if trajectory is not None else end
    assert signal is not None  # one of the two (checked above)
    if signal.ndim == 0:
        raise RuntimeError("find_start_stop_traj: the trajectory ids / end flags must have a time dim (ndim >= 1).")
    if signal.shape[0] == 0:
        raise RuntimeError("find_start_stop_traj: cannot find trajectories in an empty (T=0) input.")
    if trajectory is not None:
        # the last row ends a trajectory unless the ring continues with the same id at row 0
        last = trajectory[-1:] != trajectory[:1] if at_capacity else torch.ones_like(trajectory[:1], dtype=torch.bool)
        flags = torch.cat([trajectory[:-1] != trajectory[1:], last])
    else:
        assert end is not None
        flags = end.to(torch.bool).clone()
        if not at_capacity:
            flags[-1] = True
    if at_capacity:
        if cursor is not None:
            flags[_cursor_row(cursor)] = True
        # a column without any end is one trajectory ending at the last row
        flags[-1] |= ~flags.any(0)
    return flags


def find_start_stop_traj(
    *,
    trajectory: torch.Tensor | None = None,
    end: torch.Tensor | None = None,
    at_capacity: bool,
    cursor: int | torch.Tensor | range | None = None,
    device: torch.device | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(start, stop, lengths)`` of the trajectories in storage-order data, as TorchRL's function.

    Args:
        trajectory: trajectory ids shaped ``[T, *B]`` (time first); exclusive with ``end``.
        end: end-of-trajectory flags shaped ``[T, *B]``; exclusive with ``trajectory``.
        at_capacity: the storage is full (a ring: trajectories may wrap from the last row to row 0).
        cursor: the last written row (an int, a tensor or range of written rows: its last entry);
            with ``at_capacity`` it always ends a trajectory.
        device: where to compute (results come back on the input's device).

    Returns:
        ``start`` and ``stop`` (inclusive), ``[N, 1 + len(B)]`` int64 coordinates (time, then the
        column), grouped by column then ordered by stop; ``lengths`` ``[N]`` (a trajectory that
        wraps has ``start > stop``).

    Examples:
        >>> end = torch.zeros(10, dtype=torch.bool)
        >>> end[2] = end[7] = True
        >>> start, stop, lengths = find_start_stop_traj(end=end, at_capacity=True, cursor=4)
        >>> start.squeeze(-1).tolist(), stop.squeeze(-1).tolist(), lengths.tolist()
        ([8, 3, 5], [2, 4, 7], [5, 2, 3])
    """
    flags = end_flags(trajectory=trajectory, end=end, at_capacity=at_capacity, cursor=cursor)
    home = flags.device
    if device is not None:
        flags = flags.to(device)
    length = flags.shape[0]
    # time last, so that nonzero() lists the ends column by column, in time order
    stop = flags.movedim(0, -1).nonzero()
    stop = torch.cat([stop[:, -1:], stop[:, :-1]], 1)  # back to (time, *column)
    start = stop.clone()
    start[:, 0] = (stop[:, 0] + 1) % length
    if stop.shape[0] > 1:
        # each trajectory starts after the previous end of its column; a column's first one after
        # the column's last end (the ring wraps; not full: that end is the last row, so row 0)
        same = (stop[1:, 1:] == stop[:-1, 1:]).all(-1)
        first = torch.cat([torch.ones(1, dtype=torch.bool, device=stop.device), ~same])
        last = torch.cat([~same, torch.ones(1, dtype=torch.bool, device=stop.device)])
        shifted = torch.empty_like(start)
        shifted[1:] = start[:-1]
        shifted[first] = start[last]
        start = shifted
    lengths = stop[:, 0] - start[:, 0] + 1
    lengths = torch.where(lengths <= 0, lengths + length, lengths)
    return start.to(home), stop.to(home), lengths.to(home)
