"""split_trajectories: a batch of steps regrouped as one padded row per trajectory."""

from __future__ import annotations

from typing import Any

import torch
from tdict import TensorDictBase

__all__ = ["split_trajectories"]


def split_trajectories(
    batch: TensorDictBase,
    trajectory_dim: int | None = None,
    *,
    prefix: str | None = None,
    trajectory_key: Any = None,
    done_key: Any = None,
) -> TensorDictBase:
    """Regroups the steps of ``batch`` by ``("collector", "traj_ids")`` into ``[n_traj, T_max]``.

    Steps keep their time order; rows shorter than the longest trajectory are zero-padded and
    ``("collector", "mask")`` marks the valid steps. Trajectories appear in order of their ids; the
    second dim is named ``"time"``.

    Args:
        batch: a ``[*env_batch, T]`` batch (or a flat ``[N]`` one in time order per trajectory).
        trajectory_dim: unused compatibility argument.
        prefix: the sub-collection of the ids and of the mask written (default ``"collector"``).
        trajectory_key: where the trajectory ids are (default ``(prefix, "traj_ids")``). When the
            batch has none, trajectories are cut after every step whose ``done_key`` (default
            ``("next", "done")``) is set, along the last dim of each sub-env's row.
        done_key: see ``trajectory_key``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> steps = TensorDict({"obs": torch.arange(5.0), ("collector", "traj_ids"): torch.tensor([0, 0, 1, 1, 1])},
        ...                    batch_size=[5])
        >>> out = split_trajectories(steps)
        >>> out["obs"].tolist(), out["collector", "mask"].tolist()
        ([[0.0, 1.0, 0.0], [2.0, 3.0, 4.0]], [[True, True, False], [True, True, True]])
    """
    group = "collector" if prefix is None else prefix
    key = (group, "traj_ids") if trajectory_key is None else trajectory_key
    mask_key = (group, "mask")
    if key in batch.keys(True):
        ids = batch.get(key).reshape(-1)
    else:
        ids = _ids_from_done(batch, ("next", "done") if done_key is None else done_key)
    flat = batch.reshape(-1)
    unique, inverse, counts = torch.unique(ids, return_inverse=True, return_counts=True)
    n_traj, t_max = unique.numel(), int(counts.max()) if counts.numel() else 0
    # position of each step inside its trajectory: its rank among the steps with the same id (stable order)
    order = torch.sort(inverse, stable=True).indices
    starts = torch.cumsum(counts, 0) - counts
    rank_sorted = torch.arange(order.numel()) - starts.repeat_interleave(counts)
    position = torch.empty_like(rank_sorted)
    position[order] = rank_sorted
    out = flat.new_zeros(n_traj, t_max) if hasattr(flat, "new_zeros") else None
    if out is None:
        raise TypeError("split_trajectories: the batch type does not support new_zeros.")
    out[inverse, position] = flat
    mask = torch.zeros(n_traj, t_max, dtype=torch.bool)
    mask[inverse, position] = True
    out.set(mask_key, mask)
    out.names = [None, "time"]
    return out


def _ids_from_done(batch: TensorDictBase, done_key: Any) -> torch.Tensor:
    """Flat trajectory ids of a ``[*env_batch, T]`` batch without ids: a new id after every done step."""
    done = batch.get(done_key)
    if done.ndim > batch.ndim:  # feature dims (a trailing 1, agents): any of them ends the step's trajectory
        done = done.reshape(*batch.batch_size, -1).any(-1)
    rows = done.reshape(-1, batch.batch_size[-1]) if batch.ndim else done.reshape(1, 1)
    starts = torch.zeros_like(rows, dtype=torch.int64)
    starts[:, 1:] = rows[:, :-1].to(torch.int64)  # a step after a done one starts a trajectory
    starts[:, 0] = 1
    return torch.cumsum(starts.reshape(-1), 0) - 1
