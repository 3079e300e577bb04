"""MultiSyncCollector: one worker process per env factory; each batch gathers every worker's share."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Sequence

import tdict
import torch
from tdict import TensorDictBase

from ._multi_base import MultiCollectorBase
from ._worker import split_frames
from .weight_sync import WeightSyncScheme

__all__ = ["MultiSyncCollector"]

_TRAJ = ("collector", "traj_ids")
_MASK = ("collector", "mask")


def _pad_time(batch: TensorDictBase, steps: int) -> TensorDictBase:
    """``batch`` padded with zeros to ``steps`` along its last dim (padding: traj id -1, mask False)."""
    have = batch.batch_size[-1]
    mask = torch.ones(batch.batch_size, dtype=torch.bool)
    if have < steps:
        pad = tdict.stack([batch[..., -1].apply(torch.zeros_like)] * (steps - have), -1)
        pad.set(_TRAJ, torch.full(pad.batch_size, -1, dtype=torch.int64))
        batch = tdict.cat([batch, pad], -1)
        mask = torch.cat([mask, torch.zeros(pad.batch_size, dtype=torch.bool)], -1)
    batch.set(_MASK, mask)
    return batch


class MultiSyncCollector(MultiCollectorBase):
    """Runs one :class:`~rl_collect.Collector` per env factory in worker processes; each batch waits
    for every worker (TorchRL's ``MultiSyncCollector``).

    ``frames_per_batch`` is the total over workers, split evenly in whole env steps. With
    ``cat_results="stack"`` (the default) batches are ``[num_workers, *env_batch, T]``; with ``cat_results=-1`` they are
    concatenated along time. Every step carries ``("collector", "traj_ids")`` (unique across workers:
    worker ``i``'s ids start at ``i * 2**40``), ``("collector", "worker_id")`` and
    ``("collector", "policy_version")``. When the shares differ in length (the last batch, or
    preemption) the stacked batch is padded and ``("collector", "mask")`` marks the real steps.

    Args:
        create_env_fns: one env factory per worker (picklable when ``mp_start_method="spawn"``).
        policy: as for :class:`~rl_collect.Collector`; each worker gets a copy.
        frames_per_batch: frames per batch, over all workers.
        total_frames: stop after exactly this many frames (``-1``: never).
        preemptive_threshold: once this fraction of workers has finished its share, the others stop
            at their next step and their partial batches are used.
        weight_sync_scheme: how :meth:`update_policy_weights_` reaches the workers (default: shared
            memory, :class:`~rl_collect.SharedMemWeightSyncScheme`).
        worker_timeout: the longest a worker may take to deliver its share before it counts as
            hung, busy or not (:class:`TimeoutError`, every worker killed); ``None`` (default): no
            limit, as long as it sends heartbeats.
        heartbeat_interval: seconds between two looks of a worker's heartbeat thread at its CPU use
            (a heartbeat is sent when the worker used CPU since the last one).
        heartbeat_timeout: a worker whose batch is due and that sends no heartbeat for this long
            (stopped, sleeping, blocked or deadlocked) counts as hung: 20 s by default, so a slow
            step that computes is waited for and a stuck one surfaces within about 21 s; ``None``
            turns the check off. A dead worker surfaces at once, and workers die with this process,
            even in the middle of a batch.
        cat_results: ``"stack"`` or ``-1`` (see above).
        mp_start_method: ``"fork"`` (default where available) or ``"spawn"``/``"forkserver"``.
        num_threads: torch threads in each worker (``None``: leave torch's default).
        split_trajs, postproc, replay_buffer: applied in this process to the gathered batch.
        **collector_kwargs: passed to each worker's :class:`~rl_collect.Collector`.

    Examples:
        >>> from rl_envs import PendulumEnv
        >>> collector = MultiSyncCollector([PendulumEnv, PendulumEnv], None, frames_per_batch=20, total_frames=50)
        >>> [batch.batch_size for batch in collector]
        [torch.Size([2, 10]), torch.Size([2, 10]), torch.Size([2, 5])]
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fns: Sequence[Any],
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        preemptive_threshold: float | None = None,
        weight_sync_scheme: WeightSyncScheme | None = None,
        worker_timeout: float | None = None,
        heartbeat_interval: float = 1.0,
        heartbeat_timeout: float | None = 20.0,
        cat_results: str | int = "stack",
        mp_start_method: str | None = None,
        num_threads: int | None = 1,
        split_trajs: bool = False,
        postproc: Callable | None = None,
        replay_buffer: Any = None,
        **collector_kwargs: Any,
    ) -> None:
        if preemptive_threshold is not None and not 0.0 < preemptive_threshold <= 1.0:
            raise ValueError(f"MultiSyncCollector: preemptive_threshold must be in (0, 1], got {preemptive_threshold}.")
        if cat_results not in ("stack", -1):
            raise ValueError(f"MultiSyncCollector: cat_results must be 'stack' or -1, got {cat_results!r}.")
        self.preemptive_threshold = preemptive_threshold
        self.cat_results = cat_results
        super().__init__(
            create_env_fns,
            policy,
            frames_per_batch=frames_per_batch,
            total_frames=total_frames,
            weight_sync_scheme=weight_sync_scheme,
            worker_timeout=worker_timeout,
            heartbeat_interval=heartbeat_interval,
            heartbeat_timeout=heartbeat_timeout,
            mp_start_method=mp_start_method,
            num_threads=num_threads,
            split_trajs=split_trajs,
            postproc=postproc,
            replay_buffer=replay_buffer,
            _preemptive=preemptive_threshold is not None,
            **collector_kwargs,
        )

    def _gather(self, frames: int) -> tuple[list, int]:
        shares = split_frames(frames, self._n_envs)
        pool = self._pool
        if self._stop is not None:
            self._stop.zero_()
        pending = [i for i, share in enumerate(shares) if share > 0]
        for i in pending:
            pool.send(i, ("collect", shares[i]))
        needed = len(pending)
        if self.preemptive_threshold is not None:
            needed = max(1, math.ceil(self.preemptive_threshold * len(pending)))
        results: dict[int, TensorDictBase] = {}
        collected = 0
        while pending:
            i, message = pool.recv_any(pending, "batch")
            pending.remove(i)
            results[i] = message[1]
            collected += message[2]
            if len(results) == needed and pending:
                assert self._stop is not None  # needed < len(pending) only with a preemptive threshold
                for j in pending:  # stragglers stop at their next step
                    self._stop[j] = 1
        return [results[i] for i in sorted(results)], collected

    def _combine(self, batches: list) -> TensorDictBase:
        if self.cat_results == -1:
            return tdict.cat(batches, -1) if len(batches) > 1 else batches[0]
        lengths = {b.batch_size[-1] for b in batches}
        if len(lengths) > 1 or self.preemptive_threshold is not None:
            steps = max(lengths)
            batches = [_pad_time(b, steps) for b in batches]
        return tdict.stack(batches, 0)

    def __iter__(self) -> Iterator[Any]:
        while self.total_frames < 0 or self._frames < self.total_frames:
            frames = self.frames_per_batch
            if self.total_frames > 0:
                frames = min(frames, self.total_frames - self._frames)
            batches, collected = self._gather(frames)
            if self.split_trajs:
                # one flat, time-ordered row per worker: padding never becomes a trajectory
                batch = tdict.cat([b.reshape(-1) for b in batches], 0)
            else:
                batch = self._combine(batches)
            self._frames += collected
            self._iter += 1
            yield self._finish(batch)
