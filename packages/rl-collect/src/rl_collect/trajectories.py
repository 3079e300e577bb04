"""split_trajectories: a batch of steps regrouped as one padded row per trajectory."""

from __future__ import annotations

import torch
from tdict import TensorDictBase

__all__ = ["split_trajectories"]

_TRAJ = ("collector", "traj_ids")
_MASK = ("collector", "mask")


def split_trajectories(batch: TensorDictBase, trajectory_dim: int | None = None) -> TensorDictBase:
    """Regroups the steps of ``batch`` by ``("collector", "traj_ids")`` into ``[n_traj, T_max]``.

    Steps keep their time order; rows shorter than the longest trajectory are zero-padded and
    ``("collector", "mask")`` marks the valid steps. Trajectories appear in order of their ids; the
    second dim is named ``"time"``.

    Args:
        batch: a ``[*env_batch, T]`` batch (or a flat ``[N]`` one in time order per trajectory).
        trajectory_dim: unused compatibility argument.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> steps = TensorDict({"obs": torch.arange(5.0), ("collector", "traj_ids"): torch.tensor([0, 0, 1, 1, 1])},
        ...                    batch_size=[5])
        >>> out = split_trajectories(steps)
        >>> out["obs"].tolist(), out["collector", "mask"].tolist()
        ([[0.0, 1.0, 0.0], [2.0, 3.0, 4.0]], [[True, True, False], [True, True, True]])
    """
    flat = batch.reshape(-1)
    ids = flat.get(_TRAJ)
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
    out.set(_MASK, mask)
    out.names = [None, "time"]
    return out
