"""Trajectory slice samplers: contiguous sub-trajectories, with or without replacement.

Trajectory boundaries are not rescanned at every ``sample`` (TorchRL scans the whole done/trajectory
column each time). The sampler keeps a compact index of trajectory ends instead: ``extend`` only
records the written rows, and the next ``sample`` reads the end flags (or trajectory ids) of those
rows alone and appends their ends. Drawing a batch then costs O(batch) tensor ops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import tdict
import torch
from tdict import TensorDictBase, is_tensor_collection
from tdict.validation import check_positive_int

from .base import EndsPasses, Sampler

__all__ = ["SliceSampler", "SliceSamplerWithoutReplacement"]

NestedKey = Any  # str or tuple of str


def _replace_last(key: NestedKey, new: str) -> NestedKey:
    return new if isinstance(key, str) else (*key[:-1], new)


def _has_key(data: Any, key: NestedKey) -> bool:
    try:
        data.get(key)
    except KeyError:
        return False
    return True


class _TrajectoryIndex:
    """Trajectory boundaries of a storage written row by row (round robin).

    Rows are numbered by write time ``t``; row ``t`` lives at physical row ``(t + phase) % rows``
    and the valid rows are ``lo <= t < w``. Every row holds ``per_row`` items (``ndim > 1``
    storages), each item column being its own sequence of trajectories. A trajectory ends at every
    flagged step (or where the trajectory id changes) and at the newest row (older data follows it
    physically); it starts at ``lo`` or right after an end. Ends are kept, sorted, as keys
    ``t * per_row + column`` in a growable buffer; ends that fall out of the window are dropped.
    """

    def __init__(self) -> None:
        self.rows = 0
        self.per_row = 1
        self.reset()

    def reset(self) -> None:
        self.w = self.lo = self.phase = 0
        self.buf = torch.empty(1024, dtype=torch.int64)
        self.head = self.tail = 0
        self.last_ids: torch.Tensor | None = None
        self.version = 0
        self._derived: tuple | None = None
        self._eligible: dict = {}

    def _append_ends(self, keys: torch.Tensor) -> None:
        k = keys.numel()
        if not k:
            return
        if self.tail + k > self.buf.numel():
            live = self.buf[self.head : self.tail]
            size = max(self.buf.numel(), 2 * (live.numel() + k))
            buf = torch.empty(size, dtype=torch.int64)
            buf[: live.numel()] = live
            self.buf, self.head, self.tail = buf, 0, live.numel()
        self.buf[self.tail : self.tail + k] = keys
        self.tail += k

    def append(self, signal: torch.Tensor, is_end: bool) -> None:
        """Adds rows ``w .. w + n - 1`` given their end flags or trajectory ids, shaped ``[n, per_row]``."""
        n, e = signal.shape[0], self.per_row
        if is_end:
            flat = signal.reshape(-1).nonzero().squeeze(-1)
            self._append_ends(flat + self.w * e)
        else:
            ids = signal if self.last_ids is None or self.w == self.lo else torch.cat([self.last_ids, signal])
            base = self.w - (ids.shape[0] - n)
            change = (ids[1:] != ids[:-1]).reshape(-1).nonzero().squeeze(-1)
            self._append_ends(change + base * e)
            self.last_ids = signal[-1:].clone()
        self.w += n
        self.lo = max(self.lo, self.w - self.rows)
        self.version += 1
        self._derived = None
        self._eligible = {}

    def trajectories(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(start_t, length, column)`` of every stored trajectory, ordered by column then time."""
        if self._derived is not None:
            return self._derived
        e, lo, w = self.per_row, self.lo, self.w
        live = self.buf[self.head : self.tail]
        drop = int(torch.searchsorted(live, torch.tensor(lo * e)))
        self.head += drop
        keys = live[drop:]
        # the newest row ends every column's last trajectory
        last = torch.arange((w - 1) * e, w * e)
        missing = torch.ones(e, dtype=torch.bool)
        tail_keys = keys[keys >= (w - 1) * e]
        missing[tail_keys - (w - 1) * e] = False
        keys = torch.cat([keys, last[missing]])
        t, col = keys // e, keys % e
        if e > 1:
            order = torch.argsort(col * (w - lo + 1) + (t - lo))
            t, col = t[order], col[order]
        start = torch.full_like(t, lo)
        if t.numel() > 1:
            same = col[1:] == col[:-1]
            start[1:] = torch.where(same, t[:-1] + 1, lo)
        self._derived = (start, t - start + 1, col)
        return self._derived

    def eligible(self, min_len: int) -> torch.Tensor:
        """Indices of the trajectories at least ``min_len`` long."""
        out = self._eligible.get(min_len)
        if out is None:
            _, length, _ = self.trajectories()
            out = (length >= min_len).nonzero().squeeze(-1) if min_len > 1 else torch.arange(length.numel())
            self._eligible[min_len] = out
        return out


class SliceSampler(Sampler):
    """Samples contiguous slices of stored trajectories (with replacement), as TorchRL's ``SliceSampler``.

    A batch of ``batch_size`` items holds ``num_slices`` slices of ``slice_len`` steps each (give
    one of the two; the other follows from ``batch_size``), laid out flat (``[num_slices * slice_len]``,
    slice after slice). Each slice comes from a trajectory drawn uniformly among the eligible ones,
    at a start drawn uniformly within it. Trajectories are read from ``traj_key`` (ids that change
    between trajectories) or ``end_key`` (True at the last step); with neither given,
    ``("collector", "traj_ids")`` then ``"episode"`` are used when stored, else ``("next", "done")``.
    The newest row always ends a trajectory, so a slice never joins the newest data to the oldest
    in a wrapped-around storage; a trajectory written across the physical end of the storage is
    followed into its beginning. On ``ndim=2`` storages (``[time, env]``) each env column is its own
    sequence: extend the buffer with a collector's ``[env, time]`` batch as it is (the buffer's
    ``dim_extend`` defaults to ``ndim - 1`` and moves time first); transposing it beforehand puts
    the envs on the time axis and gives 1-step trajectories.

    Info entries (written into the batch by ``TensorDictReplayBuffer``): ``truncated_key`` True at
    the last step of every slice, the matching ``done`` (stored done OR truncated) and
    ``terminated`` (stored, or False), ``init_key`` (stored flag OR first step of each slice, only
    when the storage holds that key) and, with ``pad_output``, the real-step mask
    ``("collector", "mask")``.

    Args:
        num_slices: slices per batch (exclusive with ``slice_len``).
        slice_len: steps per slice (exclusive with ``num_slices``).
        end_key: the end-of-trajectory flag (default ``("next", "done")``).
        traj_key: the trajectory-id entry (e.g. ``"episode"`` or ``("collector", "traj_ids")``).
            Given with ``end_key``, the ids are read when stored, else the end flags.
        end_keys: several end flags OR-ed together (e.g. ``("next", "terminated")`` and
            ``("next", "truncated")``); the stored ones are used (exclusive with ``end_key``).
        ends: a static 1-D bool tensor of end flags, one per stored row, for a full storage (needs
            ``cache_values=True``; a trajectory without end at the last row continues at row 0).
        trajectories: a static 1-D tensor of trajectory ids, as ``ends``.
        cache_values: accepted for TorchRL compatibility; boundaries are always kept incrementally.
        truncated_key: where the slice-end flag goes (``None``: write no done/truncated entries).
        init_key: the first-step flag OR-ed with the stored one (``None``: leave it alone).
        strict_length: drop trajectories shorter than the slice length (otherwise their slices
            are shorter and the batch smaller).
        pad_output: with ``strict_length=False``, pad every slice to the slice length by repeating
            its last step and write the mask ``("collector", "mask")``.
        compile: accepted for TorchRL compatibility (sampling is already a handful of tensor ops).
        span: let slices start before / end after the trajectory: ``True`` (at least one step
            inside), an int ``i`` (at least ``slice_len - i`` steps inside) or a ``(left, right)``
            pair of those. Such slices are shorter than the slice length.
        use_gpu: accepted for TorchRL compatibility (the boundary index is small and stays on CPU).

    Writes that the sampler did not hear about (a storage written directly, another process) are
    detected through the storage length only; after them call ``sampler._empty()`` or let the
    buffer's ``extend`` notify it.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=SliceSampler(slice_len=4),
        ...                             batch_size=8, generator=torch.Generator().manual_seed(0))
        >>> episode = torch.arange(20) // 10  # two trajectories of 10 steps
        >>> done = torch.arange(20) % 10 == 9
        >>> _ = rb.extend(TensorDict(step=torch.arange(20), next=TensorDict(done=done, batch_size=[20]),
        ...                          batch_size=[20]))
        >>> batch = rb.sample()
        >>> steps = batch["step"].view(2, 4)
        >>> bool(((steps[:, 1:] - steps[:, :-1]) == 1).all()), bool((steps // 10).unique(dim=1).shape[1] == 1)
        (True, True)
        >>> batch["next", "truncated"].view(2, 4)[:, -1].tolist()
        [True, True]
    """

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        end_key: NestedKey | None = None,
        traj_key: NestedKey | None = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        cache_values: bool = False,
        truncated_key: NestedKey | None = ("next", "truncated"),
        init_key: NestedKey | None = "is_init",
        strict_length: bool = True,
        pad_output: bool = False,
        compile: bool | dict = False,
        span: bool | int | tuple = False,
        use_gpu: bool | torch.device = False,
        end_keys: Sequence[NestedKey] | None = None,
    ) -> None:
        Sampler.__init__(self)  # not super(): subclasses mixing in PrioritizedSampler initialise it themselves
        name = type(self).__name__
        if end_keys is not None and end_key is not None:
            raise RuntimeError(
                f"{name}: end_key and end_keys are exclusive arguments: pass one boundary flag as end_key, or the "
                "flags to OR together as end_keys."
            )
        if end_keys is not None:
            end_keys = tuple(end_keys)
            if not end_keys:
                raise ValueError(f"{name}: end_keys must name at least one entry, got an empty sequence.")
            if ends is not None or trajectories is not None:
                raise RuntimeError(f"{name}: ends/trajectories and end_keys are exclusive arguments.")
        if (num_slices is None) == (slice_len is None):
            raise TypeError(
                f"{name}: give exactly one of num_slices and slice_len, got num_slices={num_slices}, slice_len={slice_len}."
            )
        for arg, value in (("num_slices", num_slices), ("slice_len", slice_len)):
            check_positive_int(name, arg, value, allow_none=True)
        if pad_output and strict_length:
            raise ValueError(
                f"{name}: pad_output=True is incompatible with strict_length=True (only short slices are padded, and "
                "strict_length=True drops them); pass strict_length=False."
            )
        if (ends is not None or trajectories is not None) and (end_key is not None or traj_key is not None):
            raise RuntimeError(f"{name}: ends/trajectories and end_key/traj_key are exclusive arguments.")
        if ends is not None and trajectories is not None:
            raise RuntimeError(f"{name}: ends and trajectories are exclusive arguments.")
        if (ends is not None or trajectories is not None) and not cache_values:
            raise RuntimeError(f"{name}: ends/trajectories describe a static storage and need cache_values=True.")
        self.span = self._check_span(span)
        self.num_slices, self.slice_len = num_slices, slice_len
        self.end_key = ("next", "done") if end_key is None else end_key
        self.end_keys = end_keys
        self.traj_key = traj_key
        self._auto_key = (
            end_key is None and end_keys is None and traj_key is None and ends is None and trajectories is None
        )
        # the entries boundaries are read from (end flags are OR-ed), and whether they are end flags
        # (else trajectory ids)
        self._signal_keys: list = [traj_key] if traj_key is not None else list(end_keys or [self.end_key])
        self._signal_is_end = traj_key is None
        self.truncated_key = truncated_key
        self.init_key = init_key
        self.strict_length, self.pad_output = bool(strict_length), bool(pad_output)
        self.cache_values, self.compile, self.use_gpu = cache_values, bool(compile), bool(use_gpu)
        self._index = _TrajectoryIndex()
        self._pending: list[torch.Tensor] = []
        self._pending_rows = 0
        self._last_row = -1  # physical row of the newest write (-1: unknown)
        self._storage_id: int | None = None
        self._key_resolved = False
        self._static: tuple[torch.Tensor, bool] | None = None
        if ends is not None or trajectories is not None:
            self._static = self._check_static(ends if ends is not None else trajectories, ends is not None)

    # ------------------------------------------------------------------ construction helpers
    def _check_span(self, span: Any) -> tuple[int, int]:
        pair = span if isinstance(span, (tuple, list)) else (span, span)
        if len(pair) != 2:
            raise ValueError(
                f"{type(self).__name__}: span must be a bool, an int or a (left, right) pair, got {span!r}."
            )
        out = []
        for side in pair:
            if isinstance(side, bool):
                out.append(-1 if side else 0)  # -1: at least one step inside
            elif isinstance(side, int) and side >= 0:
                out.append(side)
            else:
                raise ValueError(
                    f"{type(self).__name__}: span values must be bools or non-negative ints, got {span!r}."
                )
        return tuple(out)

    def _check_static(self, signal: torch.Tensor | None, is_end: bool) -> tuple[torch.Tensor, bool]:
        name = "ends" if is_end else "trajectories"
        if not isinstance(signal, torch.Tensor) or signal.ndim != 1 or not signal.numel():
            raise ValueError(f"{type(self).__name__}: {name} must be a non-empty 1-D tensor, got {signal!r}.")
        if is_end and signal.dtype != torch.bool:
            raise ValueError(f"{type(self).__name__}: ends must be a bool tensor, got dtype {signal.dtype}.")
        return signal.clone(), is_end

    # ------------------------------------------------------------------ write hooks
    def add(self, index: Any) -> None:
        """Records the row written at ``index`` (the trajectory index is updated at the next sample)."""
        self.extend(torch.as_tensor(index).reshape(1))

    def extend(self, index: Any) -> None:
        """Records the rows just written (the first entry of a multi-dim index); the trajectory index is updated at the next sample."""
        if isinstance(index, tuple):  # multi-dim index: rows are its first entry
            index = index[0]
        index = torch.as_tensor(index).reshape(-1)
        if index.numel():
            self._pending.append(index)
            self._pending_rows += index.numel()
            self._last_row = int(index[-1])
            self._on_write()

    def _on_write(self) -> None:
        pass

    def _empty(self) -> None:
        self._index.reset()
        self._pending, self._pending_rows, self._last_row = [], 0, -1
        self._on_write()

    # ------------------------------------------------------------------ boundary index upkeep
    def _resolve_key(self, storage: Any) -> None:
        inner = getattr(storage, "_storage", None)
        if not is_tensor_collection(inner):
            inner = storage.get(torch.zeros(1, dtype=torch.int64))
            inner = (
                tdict.stack(inner) if isinstance(inner, list) and inner and is_tensor_collection(inner[0]) else inner
            )
            if not is_tensor_collection(inner):
                raise RuntimeError(
                    f"{type(self).__name__} needs a storage of TensorDicts, got {type(storage).__name__} "
                    f"holding {type(inner).__name__}."
                )
        inner = cast(TensorDictBase, inner)  # a tensor collection (checked above)
        # trajectory ids first (the given traj_key, or the usual ones when no key was given), then the
        # end flags; a given key missing from the storage falls back to the other kind, as in TorchRL
        given_end = not self._auto_key and self.traj_key is None
        trajs = [self.traj_key] if self.traj_key is not None else [("collector", "traj_ids"), "episode"]
        ends = list(self.end_keys or [self.end_key])
        order = [([k], False) for k in trajs] + [(ends, True)]
        if given_end:
            order = order[-1:] + order[:-1]
        for keys, is_end in order:
            present = [k for k in keys if _has_key(inner, k)]
            if present:
                if not is_end and self._auto_key:
                    self.traj_key = present[0]
                self._signal_keys, self._signal_is_end = present, is_end
                self._key_resolved = True
                return
        tried = [k for keys, _ in order for k in keys]
        raise KeyError(
            f"{type(self).__name__}: none of the boundary keys {tried} is in the storage (traj_key={self.traj_key!r}, "
            f"end_key={self.end_key!r}); stored keys: {sorted(map(str, inner.keys(include_nested=True, leaves_only=True)))}."
        )

    def _read_signal(self, storage: Any, first: int, count: int, rows: torch.Tensor | None = None) -> torch.Tensor:
        """End flags / trajectory ids of the ``count`` physical rows from ``first`` on (wrapping),
        shaped ``[count, per_row]``; ``rows`` lists them when already at hand."""
        keys = self._signal_keys
        inner = getattr(storage, "_storage", None)
        if is_tensor_collection(inner):  # read as at most two contiguous slices
            stop = first + count
            columns = [cast(TensorDictBase, inner).get(key) for key in keys]
            columns = [
                c[first:stop] if stop <= c.shape[0] else torch.cat([c[first:], c[: stop - c.shape[0]]]) for c in columns
            ]
        else:
            rows = (torch.arange(count) + first) % self._index.rows if rows is None else rows
            data = storage.get(rows)
            data = tdict.stack(data) if isinstance(data, list) else data
            columns = [data.get(key) for key in keys]
        values = columns[0]
        for other in columns[1:]:  # several end flags: any of them ends the trajectory
            values = values.bool() | other.bool()
        key = keys[0] if len(keys) == 1 else keys
        per_row = self._index.per_row
        if values.numel() != count * per_row:
            raise RuntimeError(
                f"{type(self).__name__}: Expected the end-of-trajectory signal to be {len(storage.shape)}-dimensional "
                f"(one value per stored item): {key!r} has shape {list(values.shape)}."
            )
        values = values.reshape(count, per_row)
        return values.bool() if self._signal_is_end else values

    def _sync(self, storage: Any) -> _TrajectoryIndex:
        """Brings the trajectory index up to date with ``storage``."""
        index = self._index
        if self._static is not None:
            if index.w == 0:
                self._build_static(storage)
            return index
        shape = storage.shape
        rows, per_row = int(shape[0]), math.prod(shape[1:])
        if id(storage) != self._storage_id or rows != index.rows or per_row != index.per_row:
            self._storage_id = id(storage)
            index.rows, index.per_row = rows, per_row
            index.reset()
            if not self._key_resolved and len(storage):
                self._resolve_key(storage)
            return self._rebuild(storage)
        if not self._key_resolved and len(storage):
            self._resolve_key(storage)
        if self._pending:
            pending = self._pending[0] if len(self._pending) == 1 else torch.cat(self._pending)
            self._pending, self._pending_rows = [], 0
            n = pending.numel()
            expected_first = (index.w + index.phase) % rows
            contiguous = (
                n <= rows
                and int(pending[0]) == expected_first
                and bool((pending == (torch.arange(n) + expected_first) % rows).all())
            )
            if not contiguous:
                return self._rebuild(storage)
            index.append(self._read_signal(storage, int(pending[0]), n, pending), self._signal_is_end)
        if index.w - index.lo != len(storage) // per_row:
            return self._rebuild(storage)  # writes we did not hear about
        return index

    def _rebuild(self, storage: Any) -> _TrajectoryIndex:
        """Re-reads the whole storage: oldest row right after the last written one."""
        index = self._index
        n_rows = len(storage) // index.per_row
        self._pending, self._pending_rows = [], 0
        index.reset()
        if n_rows == 0:
            return index
        last = self._last_row if 0 <= self._last_row < n_rows else n_rows - 1
        index.phase = (last + 1) % index.rows if n_rows == index.rows else 0
        index.append(self._read_signal(storage, index.phase, n_rows), self._signal_is_end)
        return index

    def _build_static(self, storage: Any) -> None:
        assert self._static is not None  # called only for a sampler given ends or trajectories
        signal, is_end = self._static
        index = self._index
        index.rows, index.per_row = signal.numel(), 1
        if is_end:
            ends = signal
        else:
            ends = torch.cat([signal[1:] != signal[:-1], signal[-1:] != signal[:1]])
        if not ends.any():
            ends = ends.clone()
            ends[-1] = True
        first = int(ends.nonzero()[0])
        index.reset()
        index.phase = (first + 1) % index.rows  # start right after an end: no trajectory wraps in time
        index.append(ends.roll(-index.phase).reshape(-1, 1), True)

    # ------------------------------------------------------------------ boundaries, TorchRL's way
    def _find_start_stop_traj(
        self,
        *,
        trajectory: torch.Tensor | None = None,
        end: torch.Tensor | None = None,
        at_capacity: bool,
        cursor: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:func:`~rl_replay.find_start_stop_traj` (TorchRL's method name)."""
        from ..boundaries import find_start_stop_traj

        return find_start_stop_traj(trajectory=trajectory, end=end, at_capacity=at_capacity, cursor=cursor)

    def _get_stop_and_length(self, storage: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(start, stop, lengths)`` of the stored trajectories in storage coordinates, read from the
        whole storage (what TorchRL computes at every sample; the sampler itself keeps an index)."""
        from ..boundaries import find_start_stop_traj

        self._sync(storage)  # resolves the keys and the storage layout
        shape = storage.shape
        rows = len(storage) // max(1, math.prod(shape[1:]))
        signal = self._read_signal(storage, 0, rows).reshape(rows, *shape[1:])
        full = rows == int(shape[0])
        cursor = self._last_row if full and 0 <= self._last_row < rows else None
        if self._signal_is_end:
            return find_start_stop_traj(end=signal, at_capacity=full, cursor=cursor)
        return find_start_stop_traj(trajectory=signal, at_capacity=full, cursor=cursor)

    # ------------------------------------------------------------------ sampling
    def _seq_length(self, batch_size: int) -> tuple[int, int]:
        if self.num_slices is not None:
            if batch_size % self.num_slices:
                raise RuntimeError(
                    f"{type(self).__name__}: batch_size {batch_size} is not divisible by num_slices={self.num_slices}."
                )
            return batch_size // self.num_slices, self.num_slices
        assert self.slice_len is not None  # __init__: exactly one of num_slices and slice_len
        if batch_size % self.slice_len:
            raise RuntimeError(
                f"{type(self).__name__}: batch_size {batch_size} is not divisible by slice_len={self.slice_len}."
            )
        return self.slice_len, batch_size // self.slice_len

    def _candidates(self, index: _TrajectoryIndex, seq_length: int) -> torch.Tensor:
        cand = index.eligible(seq_length if self.strict_length else 1)
        if not cand.numel():
            _, length, _ = index.trajectories()
            raise RuntimeError(
                f"{type(self).__name__}: no trajectory is at least {seq_length} steps long (lengths range "
                f"{int(length.min())}-{int(length.max())}); use strict_length=False or a shorter slice."
            )
        return cand

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """``num_slices`` slices of ``seq_length`` steps, each from a trajectory drawn uniformly.

        Raises:
            RuntimeError: the storage is empty, or ``batch_size`` is not divisible as the slicing needs.
        """
        if len(storage) == 0:
            raise RuntimeError(
                f"Cannot sample from an empty storage ({type(storage).__name__} is empty: nothing to sample)."
            )
        seq_length, num_slices = self._seq_length(batch_size)
        index = self._sync(storage)
        cand = self._candidates(index, seq_length)
        traj = cand[torch.randint(cand.numel(), (num_slices,), generator=self._rng)]
        return self._slices(storage, index, traj, seq_length)

    def _relative_starts(self, length: torch.Tensor, seq_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Start offsets within each trajectory (maybe negative with span) and the slice lengths."""
        left, right = self.span
        short = torch.clamp(length, max=seq_length)  # strict_length=False: short trajectories give short slices
        out_left = 0 if not left else (seq_length - 1 if left < 0 else min(left, seq_length - 1))
        lowest = -torch.clamp(short - 1, max=out_left)  # at least one step inside
        inside_right = seq_length if not right else (1 if right < 0 else max(seq_length - right, 1))
        highest = length - torch.clamp(short, max=inside_right)  # inclusive
        u = torch.rand(length.shape, generator=self._rng)
        rel = (u * (highest - lowest + 1)).floor().long() + lowest
        start = rel.clamp_min(0)
        stop = torch.minimum(rel + short, length)  # exclusive
        return start, stop - start

    def _slices(self, storage: Any, index: _TrajectoryIndex, traj: torch.Tensor, seq_length: int) -> tuple[Any, dict]:
        tstart, tlen, tcol = index.trajectories()
        length = tlen[traj]
        fixed = not self.span[0] and not self.span[1] and (self.strict_length or bool((length >= seq_length).all()))
        if fixed:
            u = torch.rand(traj.shape, generator=self._rng)
            t0 = tstart[traj] + (u * (length - seq_length + 1)).floor().long()
            lengths = None
        else:
            rel, lengths = self._relative_starts(length, seq_length)
            t0 = tstart[traj] + rel
        return self._emit(storage, index, t0, tcol[traj], lengths, seq_length)

    def _emit(
        self,
        storage: Any,
        index: _TrajectoryIndex,
        t0: torch.Tensor,
        cols: torch.Tensor,
        lengths: torch.Tensor | None,
        seq_length: int,
    ) -> tuple[Any, dict]:
        """The storage index and info of slices starting at write times ``t0`` in item columns ``cols``
        (``lengths``: steps of each slice, ``None`` when all are ``seq_length`` long)."""
        ar = torch.arange(seq_length)
        if lengths is None:
            steps = t0.unsqueeze(1) + ar
            real = None
            mask = None  # nothing padded: no mask entry (as TorchRL)
        else:
            real = ar < lengths.unsqueeze(1)
            steps = t0.unsqueeze(1) + torch.minimum(ar, (lengths - 1).unsqueeze(1))
            # the mask only when something was padded (no short slice: no mask entry, as TorchRL)
            mask = real.reshape(-1) if self.pad_output and not bool(real.all()) else None
            if self.pad_output:
                real = None
            else:
                steps = steps[real]
        rows = ((steps + index.phase) % index.rows).reshape(-1)
        if index.per_row == 1:
            out: Any = rows
        else:
            cols = cols.unsqueeze(1).expand(-1, seq_length)
            cols = (cols[real] if real is not None else cols).reshape(-1)
            item_dims = tuple(storage.shape[1:])
            out = (rows, *torch.unravel_index(cols, item_dims)) if len(item_dims) > 1 else (rows, cols)
        return out, self._info(storage, out, t0.numel(), seq_length, lengths, mask)

    def _info(
        self,
        storage: Any,
        out: Any,
        num_slices: int,
        seq_length: int,
        lengths: torch.Tensor | None,
        mask: torch.Tensor | None,
    ) -> dict:
        n = out[0].numel() if isinstance(out, tuple) else out.numel()
        if lengths is None or self.pad_output:
            firsts = torch.arange(num_slices) * seq_length
            lasts = firsts + (seq_length - 1 if lengths is None else (lengths - 1).clamp_min(0))
        else:
            lasts = lengths.cumsum(0) - 1
            firsts = lasts - lengths + 1
        info: dict = {}
        inner = getattr(storage, "_storage", None)
        inner = inner if is_tensor_collection(inner) else None
        if self.truncated_key is not None:
            truncated = torch.zeros(n, dtype=torch.bool)
            truncated[lasts] = True
            done_key = _replace_last(self.truncated_key, "done")
            term_key = _replace_last(self.truncated_key, "terminated")
            done = _gather(inner, done_key, out, n)
            term = _gather(inner, term_key, out, n)
            info[self.truncated_key] = truncated
            info[done_key] = truncated if done is None else done.bool() | truncated
            info[term_key] = torch.zeros(n, dtype=torch.bool) if term is None else term
        if self.init_key is not None and inner is not None:
            stored = _gather(inner, self.init_key, out, n)
            if stored is not None:
                init = stored.bool().clone()
                init[firsts] = True
                info[self.init_key] = init
        if mask is not None:
            info[("collector", "mask")] = mask
        return info

    def state_dict(self) -> dict:
        """The row of the newest write (the trajectory index is rebuilt from the storage)."""
        return {"last_row": self._last_row}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`; the trajectory index is rebuilt from the storage at the next sample."""
        self._last_row = int(state.get("last_row", -1))
        self._pending, self._pending_rows = [], 0
        self._storage_id = None  # rebuild from the restored storage on the next sample

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_slices={self.num_slices}, slice_len={self.slice_len}, end_key={self.end_key}, "
            f"traj_key={self.traj_key}, truncated_key={self.truncated_key}, strict_length={self.strict_length})"
        )


def _gather(inner: Any, key: NestedKey, out: Any, n: int) -> torch.Tensor | None:
    """The stored ``key`` at the sampled items (one value each), or ``None`` when not stored."""
    if inner is None:
        return None
    try:
        column = inner.get(key)
    except KeyError:
        return None
    values = column[out] if not isinstance(out, torch.Tensor) else column.index_select(0, out)
    return values.reshape(n) if values.numel() == n else None


class SliceSamplerWithoutReplacement(EndsPasses, SliceSampler):
    """Slices of every eligible trajectory once per epoch (one slice per trajectory), as TorchRL's.

    An epoch is a random (or, with ``shuffle=False``, stored) order of the eligible trajectories;
    each batch takes the next ``num_slices`` of them and one slice (random start) from each. The
    last batch of an epoch is smaller unless ``drop_last``; ``ran_out`` turns True when the epoch
    is over. A write to the buffer starts a new epoch at the next sample.

    Args:
        drop_last: drop the last, smaller batch of an epoch.
        shuffle: random trajectory order within an epoch (default ``True``).
        **kwargs: as :class:`SliceSampler` (``span`` excepted).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage, TensorDictReplayBuffer
        >>> sampler = SliceSamplerWithoutReplacement(slice_len=5, traj_key="episode", shuffle=False)
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, batch_size=10)
        >>> _ = rb.extend(TensorDict(episode=torch.arange(30) // 10, batch_size=[30]))
        >>> [batch["episode"].tolist() for batch in rb]
        [[0, 0, 0, 0, 0, 1, 1, 1, 1, 1], [2, 2, 2, 2, 2]]
    """

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        drop_last: bool = False,
        end_key: NestedKey | None = None,
        traj_key: NestedKey | None = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        truncated_key: NestedKey | None = ("next", "truncated"),
        init_key: NestedKey | None = "is_init",
        strict_length: bool = True,
        pad_output: bool = False,
        shuffle: bool = True,
        compile: bool | dict = False,
        use_gpu: bool | torch.device = False,
    ) -> None:
        super().__init__(
            num_slices=num_slices,
            slice_len=slice_len,
            end_key=end_key,
            traj_key=traj_key,
            ends=ends,
            trajectories=trajectories,
            cache_values=True,
            truncated_key=truncated_key,
            init_key=init_key,
            strict_length=strict_length,
            pad_output=pad_output,
            compile=compile,
            use_gpu=use_gpu,
        )
        self.drop_last, self.shuffle = bool(drop_last), bool(shuffle)
        self._order: torch.Tensor | None = None
        self._pos = 0
        self._ran_out = False

    def _on_write(self) -> None:
        self._order, self._pos = None, 0

    def sample(self, storage: Any, batch_size: int) -> tuple[Any, dict]:
        """The next ``num_slices`` trajectories of the current epoch's order, sliced as :class:`SliceSampler` does.

        Raises:
            RuntimeError: the storage is empty, or ``drop_last`` and fewer eligible trajectories than ``num_slices``.
        """
        if len(storage) == 0:
            raise RuntimeError(
                f"Cannot sample from an empty storage ({type(storage).__name__} is empty: nothing to sample)."
            )
        seq_length, num_slices = self._seq_length(batch_size)
        index = self._sync(storage)
        order = self._order
        if order is None or self._pos >= order.numel() or (self.drop_last and order.numel() - self._pos < num_slices):
            cand = self._candidates(index, seq_length)
            if self.drop_last and cand.numel() < num_slices:
                raise RuntimeError(
                    f"{type(self).__name__}(drop_last=True): {num_slices} slices per batch exceed the "
                    f"{cand.numel()} eligible trajectories."
                )
            order = cand[torch.randperm(cand.numel(), generator=self._rng)] if self.shuffle else cand
            self._order, self._pos, self._ran_out = order, 0, False
        traj = order[self._pos : self._pos + num_slices]
        self._pos += traj.numel()
        remaining = order.numel() - self._pos
        if remaining == 0 or (self.drop_last and remaining < num_slices):
            self._ran_out = True
        return self._slices(storage, index, traj, seq_length)

    def _empty(self) -> None:
        super()._empty()
        self._ran_out = False

    def state_dict(self) -> dict:
        """:class:`SliceSampler`'s state plus the epoch's order, the position in it and ``ran_out``."""
        return {
            **super().state_dict(),
            "order": None if self._order is None else self._order.tolist(),
            "pos": self._pos,
            "ran_out": self._ran_out,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict` (the epoch's order and position included)."""
        super().load_state_dict(state)
        order = state.get("order")
        self._order = None if order is None else torch.tensor(order, dtype=torch.int64)
        self._pos, self._ran_out = int(state.get("pos", 0)), bool(state.get("ran_out", False))
