"""TensorDictReplayBuffer: a ReplayBuffer of TensorDicts that writes ``"index"`` back and reads priorities by key."""

from __future__ import annotations

from typing import Any

import torch
from tdict import TensorDictBase, is_tensor_collection
from tdict import NestedKey

from .._dict_items import as_tensordict
from ..writers import TensorDictRoundRobinWriter, Writer
from .replay_buffer import ReplayBuffer

__all__ = ["TensorDictReplayBuffer"]


class TensorDictReplayBuffer(ReplayBuffer):
    """A :class:`ReplayBuffer` for TensorDicts.

    ``extend`` writes each item's position under ``"index"`` (in the stored data and in the
    argument; a list of dicts, one per item, is stacked into a TensorDict first), ``sample``
    returns a TensorDict that also holds the sampler's info entries (e.g. ``"priority_weight"``
    for prioritized samplers) and :meth:`update_tensordict_priority` reads priorities from
    ``priority_key``.

    Args:
        priority_key: the entry that holds new priorities (default ``"td_error"``).
        **kwargs: as :class:`ReplayBuffer`.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=3)
        >>> _ = rb.extend(TensorDict(obs=torch.arange(5.0), batch_size=[5]))
        >>> sample = rb.sample()
        >>> bool((sample["obs"] == sample["index"].float()).all())
        True
    """

    def __init__(self, *, priority_key: NestedKey = "td_error", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.priority_key = priority_key

    def _default_writer(self) -> Writer:
        return TensorDictRoundRobinWriter(compilable=self._compilable)

    def _from_dicts(self, data: Any, what: str) -> tuple[Any, bool]:
        # every storage gets a TensorDict, and reads give TensorDicts
        owner = f"{type(self).__name__}.{what}"
        if type(data) is list and data and is_tensor_collection(data[0]):
            from .replay_buffer import _stack_items

            return _stack_items(owner, data), False
        batch = as_tensordict(data, owner, one=what == "add")
        if batch is None:
            raise TypeError(_not_a_tensordict(owner, data))
        return batch, False

    def add(self, data: Any) -> Any:
        """Writes one item (a TensorDict with the items' batch dims dropped, or a dict); returns its index."""
        if not is_tensor_collection(data) and type(data) is not dict:
            raise TypeError(_not_a_tensordict(f"{type(self).__name__}.add", data, one=True))
        return super().add(data)

    def extend(self, data: Any) -> torch.Tensor:
        """Writes a TensorDict of items (or a list of dicts, one per item); returns their indices."""
        if not is_tensor_collection(data) and type(data) is not list and type(data) is not dict:
            raise TypeError(_not_a_tensordict(f"{type(self).__name__}.extend", data))
        return super().extend(data)

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        data, info = super().sample(batch_size, return_info=True)
        if isinstance(data, TensorDictBase):
            batch = data.batch_size
            index = info.get("index")
            if isinstance(index, tuple) and len(index) > 1 and index[0].shape == batch[:1]:
                data.set("index", torch.stack(index, -1))  # a flat batch from a multi-dim storage: coordinates
            for key, value in info.items():
                if not isinstance(value, torch.Tensor) or not batch or (key == "index" and key in data.keys()):
                    continue  # the sampler's info overrides stored entries (e.g. "is_init" of a slice start)
                if value.shape[: len(batch)] == batch:
                    pass  # one entry per sampled item (maybe with feature dims, e.g. anchor coordinates)
                elif value.ndim < len(batch) and value.shape == batch[: value.ndim]:
                    # one value per sampled item: shared by its trailing batch dims
                    value = value.reshape(*value.shape, *([1] * (len(batch) - value.ndim))).expand(batch)
                else:
                    continue  # not aligned with the batch (e.g. per-slice info of another layout)
                data.set(key, value)
        return (data, info) if return_info else data

    def _anchor_reduced_priority(self, data: TensorDictBase, priority: torch.Tensor) -> tuple | None:
        """``(anchors, priorities)``: per-record priorities of a sample drawn through a
        :class:`~rl_replay.sample_units.Sequence` unit reduced to one per anchor (the max over the
        anchor's valid records). ``None`` without such a unit (priorities go to the records)."""
        from ..sample_units import Sequence

        anchor = data.get("anchor_index", None) if isinstance(self._sample_unit, Sequence) else None
        if anchor is None:
            return None
        n = anchor.shape[0]
        priority = torch.as_tensor(priority).reshape(n, -1).amax(-1)
        valid = data.get("validity_mask", None)
        if valid is not None:
            keep = valid.reshape(n).bool()
            anchor, priority = anchor[keep], priority[keep]
        unique, slot = torch.unique(anchor, dim=0, return_inverse=True)
        reduced = torch.full((unique.shape[0],), -torch.inf, dtype=priority.dtype, device=priority.device)
        reduced = reduced.scatter_reduce(0, slot.to(priority.device), priority, "amax")
        return unique, reduced

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Sets the priorities of ``data["index"]`` to ``data[priority_key]`` (reduced to one value per
        item; to one per anchor for a sample drawn through a ``Sequence`` unit)."""
        priority = data.get(self.priority_key)
        anchored = self._anchor_reduced_priority(data, priority)
        if anchored is not None:
            self.update_priority(*anchored)
            return
        index = data.get("index")
        if priority.shape != index.shape:
            if priority.shape[: index.ndim] != index.shape:
                raise ValueError(
                    f"update_tensordict_priority: {self.priority_key!r} has shape {list(priority.shape)}, "
                    f"expected one value per index (shape {list(index.shape)}, optionally with trailing dims)."
                )
            priority = priority.reshape(*index.shape, -1).amax(-1)
        self.update_priority(index, priority)


def _not_a_tensordict(owner: str, data: Any, one: bool = False) -> str:
    got = type(data).__name__
    if isinstance(data, torch.Tensor):
        got = f"a tensor of shape {list(data.shape)}"
    elif isinstance(data, list) and data:
        got = f"a list of {type(data[0]).__name__}"
    want = "a TensorDict (or a dict)" if one else "a TensorDict of items (or a list of dicts, one per item)"
    return f"{owner}: data must be {want}, got {got}; use a ReplayBuffer for other data."
