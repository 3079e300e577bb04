"""Sample units: what each index a sampler draws (an *anchor*) expands into in the batch.

A sampler decides which anchors a batch holds; a sample unit decides what records each anchor
stands for: itself (:class:`Transition`, the default) or a window of records around it in stored
time order (:class:`Sequence`, for recurrent learners with burn-in and bootstrap steps). The buffer
calls ``unit.expand(index, info, storage)`` right after the sampler, before reading the storage;
the unit returns the record indices and the info, with per-anchor entries repeated per record and
its own metadata added (TensorDict samples carry per-record entries as keys).
"""

from __future__ import annotations

import abc
from typing import Any

import torch
from tdict import is_tensor_collection

from .boundaries import find_start_stop_traj
from .storages.tensor import TensorStorage

__all__ = ["SampleUnit", "Sequence", "Transition"]

_BOUNDARIES = ("pad", "stop", "include_reset")


class SampleUnit(abc.ABC):
    """Base class of sample units: ``expand(index, info, storage) -> (index, info)``.

    ``index`` is what the sampler drew (a tensor, or a tuple of coordinate tensors for a multi-dim
    storage); ``info`` its info dict. ``expand`` must not change the storage; info entries with one
    value per anchor must come back with one value per record.
    """

    @abc.abstractmethod
    def expand(self, index: Any, info: dict, storage: Any) -> tuple[Any, dict]:
        """The record indices of the batch and its info."""


class Transition(SampleUnit):
    """The identity unit: every anchor is one record (what a buffer does without a unit).

    Examples:
        >>> import torch
        >>> index, info = Transition().expand(torch.tensor([3, 1]), {"w": torch.ones(2)}, None)
        >>> index.tolist(), list(info)
        ([3, 1], ['w'])
    """

    def expand(self, index: Any, info: dict, storage: Any) -> tuple[Any, dict]:
        return index, info

    def __repr__(self) -> str:
        return "Transition()"


def _check_count(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"Sequence: {name} must be an int >= {low}, got {value!r}.")
    return value


def _squeeze_flags(done: torch.Tensor, ndim: int) -> torch.Tensor:
    while done.ndim > ndim and done.shape[-1] == 1:
        done = done.squeeze(-1)
    if done.ndim != ndim:
        raise ValueError(f"Sequence: the done flags must hold one value per stored item, got shape {list(done.shape)}.")
    return done.to(torch.bool)


def _episode_distances(done: torch.Tensor, full: bool, newest: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every stored item: steps since its episode's first record and steps to its last one."""
    start, _, lengths = find_start_stop_traj(end=done, at_capacity=full, cursor=newest if full else None)
    rows = done.shape[0]
    first = lengths.cumsum(0) - lengths
    step = torch.arange(int(lengths.sum())) - first.repeat_interleave(lengths)
    time = (start[:, 0].repeat_interleave(lengths) + step) % rows
    where = (time, *start[:, 1:].repeat_interleave(lengths, dim=0).unbind(1))
    since_start = torch.empty(done.shape, dtype=torch.int64)
    to_stop = torch.empty(done.shape, dtype=torch.int64)
    since_start[where] = step
    to_stop[where] = lengths.repeat_interleave(lengths) - 1 - step
    return since_start, to_stop


class Sequence(SampleUnit):
    """Expands each anchor into a window of ``burn_in + length + bootstrap`` records in stored time
    order: ``burn_in`` records before the anchor, the ``length`` records from the anchor on (the
    learning region), then ``bootstrap`` records; ``dilation`` records apart.

    Episodes come from ``done_key`` (``None``: the stored records are one episode). At an episode
    end, ``episode_boundary`` decides: ``"pad"`` repeats the last record (marked invalid),
    ``"stop"`` moves the window back so it ends at the episode's last record (padding still, if the
    episode is too short), ``"include_reset"`` reads on into the next episode. Burn-in never moves
    the window: records before the episode start (``"include_reset"``: before the oldest record)
    repeat the first one, marked invalid. No window crosses the write seam of a full ring storage.

    Info entries, one per record: ``"sequence_id"`` (which anchor), ``"step_in_sequence"``,
    ``"validity_mask"`` (a real record of the episode), ``"learning_mask"`` (in the learning
    region) and ``"anchor_index"`` (the drawn anchor, for per-anchor priority updates).

    On a multi-dim storage, dim 0 is time and the anchor's other coordinates are kept.

    Args:
        length: records in the learning region.
        episode_boundary: ``"pad"``, ``"stop"`` or ``"include_reset"``.
        done_key: the end-of-episode flag (``None``: no episode ends but the storage's).
        burn_in: records before the anchor.
        bootstrap: records after the learning region.
        dilation: storage steps between consecutive records of a window.

    Needs a tensor storage of TensorDicts (the done flags are read from it).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        >>> done = torch.zeros(10, 1, dtype=torch.bool)
        >>> done[5] = done[9] = True
        >>> _ = rb.extend(TensorDict({"obs": torch.arange(10.0), ("next", "done"): done}, batch_size=[10]))
        >>> index, info = Sequence(length=4).expand(torch.tensor([4]), {}, rb.storage)
        >>> index.tolist(), info["validity_mask"].tolist()
        ([4, 5, 5, 5], [True, True, False, False])
    """

    def __init__(
        self,
        length: int,
        episode_boundary: str = "pad",
        done_key: Any = ("next", "done"),
        burn_in: int = 0,
        bootstrap: int = 0,
        dilation: int = 1,
    ) -> None:
        self.length = _check_count("length", length, 1)
        if episode_boundary not in _BOUNDARIES:
            raise ValueError(
                f"Sequence: episode_boundary must be one of {list(_BOUNDARIES)}, got {episode_boundary!r}."
            )
        self.episode_boundary = episode_boundary
        self.burn_in = _check_count("burn_in", burn_in, 0)
        self.bootstrap = _check_count("bootstrap", bootstrap, 0)
        self.dilation = _check_count("dilation", dilation, 1)
        self.done_key = done_key if done_key is None or isinstance(done_key, str) else tuple(done_key)

    @property
    def window(self) -> int:
        """Records per anchor: ``burn_in + length + bootstrap``."""
        return self.burn_in + self.length + self.bootstrap

    def _stored(self, storage: Any) -> Any:
        if not isinstance(storage, TensorStorage):
            raise TypeError(
                f"Sequence needs a TensorStorage of TensorDicts (LazyTensorStorage, LazyMemmapStorage) to read "
                f"episode ends and the write position, got {type(storage).__name__}."
            )
        inner = storage._storage
        if inner is not None and not is_tensor_collection(inner):
            raise TypeError(
                f"Sequence needs the storage to hold TensorDicts to read {self.done_key!r}; it holds a "
                f"{type(inner).__name__}."
            )
        return inner

    def expand(self, index: Any, info: dict, storage: Any) -> tuple[Any, dict]:
        inner = self._stored(storage)
        ndim = storage.ndim
        anchor = torch.stack(tuple(index), -1) if isinstance(index, tuple) else torch.as_tensor(index).clone()
        if ndim > 1 and (anchor.ndim != 2 or anchor.shape[-1] != ndim):
            raise RuntimeError(f"Sequence: a {ndim}-dim storage needs anchors of shape [batch, {ndim}].")
        home = anchor.device
        anchor = anchor.to("cpu", torch.int64)
        t = anchor[:, 0] if ndim > 1 else anchor
        lanes = tuple(anchor[:, 1:].unbind(1)) if ndim > 1 else ()
        n, total = anchor.shape[0], self.window

        out_info = {}
        for key, value in info.items():
            value_t = torch.as_tensor(value)
            out_info[key] = value if value_t.ndim == 0 else value_t.repeat_interleave(total, dim=0)
        steps = torch.arange(total)
        out_info["sequence_id"] = torch.arange(n).repeat_interleave(total)
        out_info["step_in_sequence"] = steps.repeat(n)
        out_info["learning_mask"] = ((steps >= self.burn_in) & (steps < self.burn_in + self.length)).repeat(n)
        out_info["anchor_index"] = anchor.repeat_interleave(total, dim=0)

        rows = int(storage._len_t)
        capacity = int(storage.shape[0])
        full = rows >= capacity
        newest = getattr(storage, "_last_cursor_index", None)
        newest = (rows - 1) if newest is None or not 0 <= newest < rows else int(newest)
        offset = ((steps - self.burn_in) * self.dilation).unsqueeze(0).expand(n, total)
        if self.episode_boundary == "include_reset":
            # bounded by the write seam only: the newest record forward, the oldest one backward
            oldest = (newest + 1) % rows if full else 0
            ahead = (newest - t) % rows
            behind = (t - oldest) % rows
            base = t
        else:
            if self.done_key is None or inner is None:
                done = torch.zeros(storage.shape[:ndim], dtype=torch.bool)[:rows]
            else:
                done = _squeeze_flags(inner.get(self.done_key)[:rows].cpu(), ndim)
            since_start, to_stop = _episode_distances(done, full, newest)
            behind, ahead = since_start[(t, *lanes)], to_stop[(t, *lanes)]
            base = t
            if self.episode_boundary == "stop":
                shift = (self.dilation * (self.length + self.bootstrap - 1) - ahead).clamp(min=0)
                shift = torch.minimum(shift, behind)
                base, ahead, behind = t - shift, ahead + shift, behind - shift
        valid = (offset <= ahead.unsqueeze(1)) & (offset >= -behind.unsqueeze(1))
        clamped = torch.maximum(torch.minimum(offset, ahead.unsqueeze(1)), -behind.unsqueeze(1))
        time = (base.unsqueeze(1) + clamped) % rows
        out_info["validity_mask"] = valid.reshape(-1)
        out_info = {k: v.to(home) if isinstance(v, torch.Tensor) else v for k, v in out_info.items()}
        if ndim > 1:
            coords = (time.reshape(-1), *(lane.repeat_interleave(total) for lane in lanes))
            return tuple(c.to(home) for c in coords), out_info
        return time.reshape(-1).to(home), out_info

    def __repr__(self) -> str:
        return (
            f"Sequence(length={self.length}, episode_boundary={self.episode_boundary!r}, done_key={self.done_key!r}, "
            f"burn_in={self.burn_in}, bootstrap={self.bootstrap}, dilation={self.dilation})"
        )
