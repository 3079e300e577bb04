"""ReplayBufferEnsemble: sample from several replay buffers at once (mixing datasets, offline + online)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from tdict import TensorDict, TensorDictBase, is_tensor_collection, maybe_dense_stack
from tdict.validation import check_positive_int

from ..storages.list import ListStorage
from .replay_buffer import ReplayBuffer

__all__ = ["ReplayBufferEnsemble"]


def _stack_anything(batches: list) -> Any:
    """Stacks member batches: TensorDicts densely when their keys agree (lazily otherwise), tensors with
    ``torch.stack``; anything else stays a list."""
    first = batches[0]
    if is_tensor_collection(first):
        return maybe_dense_stack(batches)
    if isinstance(first, torch.Tensor):
        return torch.stack(batches)
    return batches


def _members(obj: Any, attr: str) -> list:
    if obj is None:
        return []
    inner = getattr(obj, attr, None)
    return list(inner if inner is not None else obj)


class ReplayBufferEnsemble(ReplayBuffer):
    """Several replay buffers sampled as one (names and semantics of TorchRL 0.14).

    A batch of ``batch_size`` items is split into ``num_buffer_sampled`` chunks of
    ``batch_size // num_buffer_sampled`` items; each chunk comes from one member buffer, drawn with
    probabilities ``p`` (uniform by default, with replacement), or every member gives one chunk
    (``sample_from_all=True``). Each member samples with its own sampler, collate_fn and transforms;
    the chunks are stacked into a ``[num_buffer_sampled, batch_size // num_buffer_sampled]`` batch
    (a dense stack when the members' entries agree, a lazy stack otherwise), then the ensemble's
    ``transform`` runs. TensorDict batches hold ``("index", "buffer_ids")`` and ``("index", "index")``
    (member and position of each item); ``info["index"]`` holds the same TensorDict.

    ``ensemble[i]`` is member ``i``, ``ensemble[i, idx]`` is ``ensemble[i][idx]``. Writes go to the
    members (``ensemble[i].extend(...)``); the ensemble itself refuses them.

    Args:
        *rbs: the member buffers.
        storages, samplers, writers: instead of ``rbs``, parallel sequences of parts (one buffer per
            storage is built; samplers default to :class:`RandomSampler`, writers to round robin).
        transform: applied to every stacked batch.
        batch_size: the default ``sample()`` size.
        collate_fn: turns the list of member batches into one batch (default: stack).
        collate_fns: with ``storages``, the members' collate functions.
        p: relative weights of the members (normalised). Not with ``sample_from_all``.
        sample_from_all: every member gives one chunk per batch.
        num_buffer_sampled: chunks per batch (default: the number of members).
        generator: the ``torch.Generator`` member choice and member samplers draw from.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage, ReplayBuffer
        >>> rb0, rb1 = ReplayBuffer(storage=LazyTensorStorage(10)), ReplayBuffer(storage=LazyTensorStorage(10))
        >>> _ = rb0.extend(TensorDict(x=torch.zeros(10), batch_size=[10]))
        >>> _ = rb1.extend(TensorDict(x=torch.ones(10), batch_size=[10]))
        >>> ens = ReplayBufferEnsemble(rb0, rb1, sample_from_all=True, batch_size=6)
        >>> batch = ens.sample()
        >>> batch.batch_size, batch["x"].tolist(), batch["index", "buffer_ids"][:, 0].tolist()
        (torch.Size([2, 3]), [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]], [0, 1])
        >>> ens[1] is rb1
        True
    """

    def __init__(
        self,
        *rbs: ReplayBuffer,
        storages: Sequence | None = None,
        samplers: Sequence | None = None,
        writers: Sequence | None = None,
        transform: Callable | None = None,
        batch_size: int | None = None,
        collate_fn: Callable | None = None,
        collate_fns: Sequence[Callable] | None = None,
        p: Sequence[float] | torch.Tensor | None = None,
        sample_from_all: bool = False,
        num_buffer_sampled: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if rbs:
            if storages is not None or samplers is not None or writers is not None:
                raise ValueError(
                    "ReplayBufferEnsemble: pass either replay buffers or storages/samplers/writers, not both."
                )
            members = list(rbs)
        else:
            storage_list = _members(storages, "_storages")
            if not storage_list:
                raise ValueError("ReplayBufferEnsemble: give at least one replay buffer (or storages=[...]).")
            sampler_list = _members(samplers, "_samplers") or [None] * len(storage_list)
            writer_list = _members(writers, "_writers") or [None] * len(storage_list)
            fns = list(collate_fns) if collate_fns is not None else [None] * len(storage_list)
            if not len(storage_list) == len(sampler_list) == len(writer_list) == len(fns):
                raise ValueError(
                    f"ReplayBufferEnsemble: storages, samplers, writers and collate_fns must have the same length, got "
                    f"{len(storage_list)}, {len(sampler_list)}, {len(writer_list)}, {len(fns)}."
                )
            members = [
                ReplayBuffer(storage=s, sampler=sa, writer=w, collate_fn=c)
                for s, sa, w, c in zip(storage_list, sampler_list, writer_list, fns)
            ]
        for i, rb in enumerate(members):
            if not isinstance(rb, ReplayBuffer):
                raise TypeError(f"ReplayBufferEnsemble: member {i} is a {type(rb).__name__}, expected a ReplayBuffer.")
        if sample_from_all and p is not None:
            raise ValueError("ReplayBufferEnsemble: p and sample_from_all=True are exclusive.")
        n = len(members)
        if p is not None:
            p = torch.as_tensor(p, dtype=torch.float64).flatten()
            if p.numel() != n or bool((p < 0).any()) or float(p.sum()) <= 0:
                raise ValueError(
                    f"ReplayBufferEnsemble: p must hold {n} non-negative weights with a positive sum, got {p.tolist()}."
                )
            p = p / p.sum()
        if sample_from_all:
            num_buffer_sampled = n
        elif num_buffer_sampled is None:
            num_buffer_sampled = n
        else:
            check_positive_int("ReplayBufferEnsemble", "num_buffer_sampled", num_buffer_sampled)
        self._rbs = tuple(members)
        self.p = p
        self.sample_from_all = bool(sample_from_all)
        self.num_buffer_sampled = num_buffer_sampled
        # the base class's own storage is a placeholder: items live in the members
        super().__init__(
            storage=ListStorage(1),
            transform=transform,
            batch_size=batch_size,
            collate_fn=collate_fn if collate_fn is not None else _stack_anything,
        )
        if generator is not None:
            self.set_rng(generator)

    def set_rng(self, generator: torch.Generator) -> None:
        """Makes member choice and every member's sampler draw from ``generator``."""
        super().set_rng(generator)
        for rb in self._rbs:
            rb.set_rng(generator)

    @property
    def buffers(self) -> tuple:
        """The member buffers, in order."""
        return self._rbs

    def __len__(self) -> int:
        return sum(len(rb) for rb in self._rbs)

    # ------------------------------------------------------------------ reads
    def _choose(self) -> torch.Tensor:
        n = len(self._rbs)
        if self.sample_from_all:
            return torch.arange(n)
        if self.p is None:
            return torch.randint(n, (self.num_buffer_sampled,), generator=self._rng)
        return torch.multinomial(self.p, self.num_buffer_sampled, replacement=True, generator=self._rng)

    @staticmethod
    def _draw(rb: ReplayBuffer, count: int) -> tuple[list, list]:
        """``count`` items of ``rb`` (several draws when a sampler without replacement ends its epoch)."""
        parts, indices, remaining = [], [], count
        while remaining:
            data, info = rb._sample_now(remaining)
            index = info["index"]
            if isinstance(index, tuple):
                index = torch.stack(index, -1)
            got = index.shape[0]
            if got == 0:
                raise RuntimeError(f"ReplayBufferEnsemble: a member returned no item ({type(rb._sampler).__name__}).")
            parts.append(data)
            indices.append(index)
            remaining -= got
        return parts, indices

    def _sample_now(self, batch_size: int) -> tuple[Any, dict]:
        k = self.num_buffer_sampled
        if batch_size % k:
            raise ValueError(
                f"ReplayBufferEnsemble.sample: batch_size {batch_size} must be divisible by num_buffer_sampled={k}."
            )
        sub = batch_size // k
        buffer_ids = self._choose()
        chunks: list = [None] * k
        chunk_index: list = [None] * k
        for member in buffer_ids.unique(sorted=True).tolist():  # one sampler call per member, not per item
            positions = (buffer_ids == member).nonzero().flatten().tolist()
            parts, indices = self._draw(self._rbs[member], sub * len(positions))
            data = parts[0] if len(parts) == 1 else _cat(parts)
            index = torch.cat(indices) if len(indices) > 1 else indices[0]
            for j, pos in enumerate(positions):
                chunks[pos] = data[j * sub : (j + 1) * sub]
                chunk_index[pos] = index[j * sub : (j + 1) * sub]
        ids = buffer_ids.reshape(k, 1).expand(k, sub)
        index = torch.stack(chunk_index)
        if is_tensor_collection(chunks[0]):
            for pos in range(k):
                chunks[pos].set(
                    "index",
                    TensorDict(buffer_ids=ids[pos].clone(), index=chunk_index[pos], batch_size=[sub]),
                )
        batch = self._collate_fn(chunks)
        if self._transforms:
            batch = self._apply_transforms(batch)
        info = {"index": TensorDict(buffer_ids=ids.clone(), index=index, batch_size=[k, sub])}
        return batch, info

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, tuple):
            rb = self[index[0]]
            rest = index[1:] if len(index) > 2 else index[1]  # pyright: ignore[reportGeneralTypeIssues]  # (a pair)
            if rb is self:
                return self._collate_fn([member[rest] for member in self._rbs])
            return rb[rest]
        if isinstance(index, slice) and index == slice(None):
            return self
        if isinstance(index, torch.Tensor) and index.numel() == 1 and not index.is_floating_point():
            index = int(index)
        if isinstance(index, int) and not isinstance(index, bool):
            return self._rbs[index]
        raise IndexError(
            f"ReplayBufferEnsemble: index with an int (a member), (int, item index) or ':', got {type(index).__name__}."
        )

    def __iter__(self):
        raise TypeError("ReplayBufferEnsemble is not iterable; call sample() or iterate over a member.")

    # ------------------------------------------------------------------ writes go to members
    def add(self, data: Any) -> Any:
        raise RuntimeError("ReplayBufferEnsemble: write to a member (ensemble[i].add(...)), not to the ensemble.")

    def extend(self, data: Any) -> Any:
        raise RuntimeError("ReplayBufferEnsemble: write to a member (ensemble[i].extend(...)), not to the ensemble.")

    def update_priority(self, index: Any, priority: Any) -> None:
        """Routes priorities to the members: ``index`` is the ``info["index"]`` TensorDict of a sample."""
        if not isinstance(index, TensorDictBase):
            raise TypeError(
                "ReplayBufferEnsemble.update_priority: index must be the TensorDict info['index'] of a sample."
            )
        ids = index.get("buffer_ids").reshape(-1)
        local = index.get("index")
        local = local.reshape(ids.numel(), *local.shape[index.batch_dims :])
        priority = torch.as_tensor(priority)
        if priority.numel() != ids.numel():
            raise ValueError(
                f"ReplayBufferEnsemble.update_priority: {priority.numel()} priorities for {ids.numel()} indices."
            )
        priority = priority.reshape(-1)
        for member in ids.unique().tolist():
            mask = ids == member
            self._rbs[member].update_priority(local[mask], priority[mask])

    def empty(self) -> None:
        for rb in self._rbs:
            rb.empty()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {
            "buffers": [rb.state_dict() for rb in self._rbs],
            "rng": None if self._rng is None else self._rng.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        if len(state["buffers"]) != len(self._rbs):
            raise ValueError(
                f"ReplayBufferEnsemble.load_state_dict: {len(state['buffers'])} buffer states for {len(self._rbs)} members."
            )
        for rb, sub in zip(self._rbs, state["buffers"]):
            rb.load_state_dict(sub)
        if state.get("rng") is not None and self._rng is not None:
            self._rng.set_state(state["rng"])

    def dumps(self, path: Any) -> None:
        """Checkpoints each member under ``path/buffer_<i>`` (each one crash-safe on its own)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for i, rb in enumerate(self._rbs):
            rb.dumps(path / f"buffer_{i}")

    def loads(self, path: Any) -> None:
        path = Path(path)
        for i, rb in enumerate(self._rbs):
            rb.loads(path / f"buffer_{i}")

    def share_memory_(self) -> "ReplayBufferEnsemble":
        for rb in self._rbs:
            rb.share_memory_()
        return self

    def __repr__(self) -> str:
        inner = ", ".join(repr(rb) for rb in self._rbs)
        return (
            f"ReplayBufferEnsemble(buffers=[{inner}], p={None if self.p is None else self.p.tolist()}, "
            f"sample_from_all={self.sample_from_all}, num_buffer_sampled={self.num_buffer_sampled}, batch_size={self._batch_size})"
        )


def _cat(parts: list) -> Any:
    if isinstance(parts[0], list):
        return [x for part in parts for x in part]
    return torch.cat(parts)
