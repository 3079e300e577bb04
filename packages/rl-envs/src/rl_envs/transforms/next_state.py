"""NextStateReconstructor: rebuilds ``("next", obs)`` entries of a sampled batch from the row after each row."""

from __future__ import annotations

import math
from typing import Sequence

import torch
from tdict import NestedKey, TensorDictBase, unravel_key

from ._episode_utils import _join
from .base import Transform

__all__ = ["NextStateReconstructor"]

_DEFAULT_TRAJ_KEY = ("collector", "traj_ids")


class NextStateReconstructor(Transform):
    """Fills ``("next", k)`` of a flat sampled batch from ``k`` of the row below (for data stored without it).

    Row ``i`` gets ``data[k][i + 1]`` when row ``i + 1`` continues the same trajectory: same
    ``traj_key`` id, step ``i`` not done (``done_key``), and, with ``step_count_key``, a step count one
    higher. Every other row (the last one included) gets ``fill_value``. An existing ``("next", k)`` is
    overwritten. Works on replay-buffer samples and plain TensorDicts; inside an env it does nothing.

    Args:
        keys: the root entries whose ``("next", k)`` is rebuilt (a sequence of keys).
        traj_key: the trajectory id entry (``None``: no id check).
        done_key: the entry that ends a trajectory at its row (``None``: no done check).
        step_count_key: an optional step counter that must grow by one between rows.
        fill_value: written where no next value exists; the default NaN needs floating-point entries.
        strict: with ``True`` a missing ``traj_key`` / ``done_key`` / ``step_count_key`` raises
            ``KeyError``; with ``False`` that check is skipped.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict({"observation": torch.arange(4.0).view(4, 1),
        ...                  ("collector", "traj_ids"): torch.tensor([0, 0, 1, 1]),
        ...                  ("next", "done"): torch.zeros(4, 1, dtype=torch.bool)}, [4])
        >>> NextStateReconstructor()(td)["next", "observation"].view(-1).tolist()
        [1.0, nan, 3.0, nan]
    """

    def __init__(
        self,
        keys: Sequence[NestedKey] = ("observation",),
        *,
        traj_key: NestedKey | None = _DEFAULT_TRAJ_KEY,
        done_key: NestedKey | None = ("next", "done"),
        step_count_key: NestedKey | None = None,
        fill_value: float = math.nan,
        strict: bool = True,
    ) -> None:
        keys = [unravel_key(k) for k in ([keys] if isinstance(keys, str) else keys)]
        if not keys:
            raise ValueError("NextStateReconstructor: keys must name at least one entry.")
        super().__init__(in_keys=[], out_keys=[])
        self.keys = keys
        self.traj_key = traj_key
        self.done_key = done_key
        self.step_count_key = step_count_key
        self.fill_value = fill_value
        self.strict = bool(strict)

    def _marker(self, data: TensorDictBase, key: NestedKey | None, what: str) -> torch.Tensor | None:
        """The marker entry flattened to one value list per row (``None``: no such check)."""
        if key is None:
            return None
        value = data.get(key, None)
        if value is None:
            if self.strict:
                raise KeyError(
                    f"NextStateReconstructor: the {what} {key!r} is missing from the batch; pass strict=False to "
                    f"skip this check or {what.split()[0]}_key=None to disable it."
                )
            return None
        return value.reshape(value.shape[0], -1)

    def _continues(self, data: TensorDictBase) -> torch.Tensor:
        """Bool ``[n - 1]``: whether row ``i + 1`` is the next step of row ``i``."""
        n = data.batch_size[0]
        keep = torch.ones(max(n - 1, 0), dtype=torch.bool, device=data.device)
        traj = self._marker(data, self.traj_key, "trajectory key")
        if traj is not None:
            keep &= (traj[1:] == traj[:-1]).all(-1).to(keep.device)
        done = self._marker(data, self.done_key, "done key")
        if done is not None:
            keep &= ~done[:-1].bool().any(-1).to(keep.device)
        steps = self._marker(data, self.step_count_key, "step_count key")
        if steps is not None:
            keep &= (steps[1:] == steps[:-1] + 1).all(-1).to(keep.device)
        return keep

    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.batch_dims != 1:
            raise ValueError(
                f"NextStateReconstructor expects a flat batch (one batch dim), got batch_size "
                f"{list(tensordict.batch_size)}; reshape(-1) it first."
            )
        values = []
        for key in self.keys:
            value = tensordict.get(key, None)
            if value is None:
                raise KeyError(f"NextStateReconstructor: key {key!r} not found in the batch.")
            if not value.is_floating_point() and not value.is_complex() and isinstance(self.fill_value, float):
                if math.isnan(self.fill_value) or not float(self.fill_value).is_integer():
                    raise TypeError(
                        f"NextStateReconstructor: {key!r} has a non-floating dtype ({value.dtype}) that cannot hold "
                        f"fill_value={self.fill_value}; pass an integer fill_value."
                    )
            values.append((key, value))
        keep = self._continues(tensordict)
        for key, value in values:
            out = torch.full_like(value, self.fill_value)
            if keep.numel():
                mask = keep.to(value.device).view(-1, *([1] * (value.ndim - 1)))
                out[:-1] = torch.where(mask, value[1:], out[:-1])
            tensordict.set(_join(("next",), key), out)
        return tensordict

    # an env step or reset holds one row per sub-env: there is no next row to read
    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return tensordict_reset

    def __repr__(self) -> str:
        return (
            f"NextStateReconstructor(keys={self.keys}, traj_key={self.traj_key!r}, done_key={self.done_key!r}, "
            f"step_count_key={self.step_count_key!r}, fill_value={self.fill_value}, strict={self.strict})"
        )
