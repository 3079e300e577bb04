"""MultiSyncCollector: one worker process per env factory; each batch gathers every worker's share."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Sequence

import tdict
import torch
from tdict import TensorDictBase

from ._multi_base import MultiCollector
from ._worker import split_frames
from .assembly import write_trajectories
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
        if _TRAJ in pad.keys(True):
            pad.set(_TRAJ, torch.full(pad.batch_size, -1, dtype=torch.int64))
        batch = tdict.cat([batch, pad], -1)
        mask = torch.cat([mask, torch.zeros(pad.batch_size, dtype=torch.bool)], -1)
    batch.set(_MASK, mask)
    return batch


class MultiSyncCollector(MultiCollector):
    """Runs one :class:`~rl_collect.Collector` per env factory in worker processes; each batch waits
    for every worker (TorchRL's ``MultiSyncCollector``).

    ``frames_per_batch`` is the total over workers, split evenly in whole env steps (or one share
    per worker when it is a sequence). With ``cat_results="stack"`` (the default) batches are
    ``[num_workers, *env_batch, T]``; with ``cat_results=-1`` they are concatenated along time.
    Every step carries ``("collector", "traj_ids")`` (unique across workers: worker ``i``'s ids start
    at ``i * 2**40``), ``("collector", "worker_id")`` and ``("collector", "policy_version")``. When the
    shares differ in length (the last batch, or preemption) the stacked batch is padded and
    ``("collector", "mask")`` marks the real steps. With a ``replay_buffer`` each worker's share is
    written on its own (in worker order) and iteration yields ``None``.

    Args:
        create_env_fn: one env factory per worker (picklable when ``mp_start_method="spawn"``), or one
            factory with ``num_workers``. ``create_env_fns`` is its former name, still accepted.
        policy: as for :class:`~rl_collect.Collector`; each worker gets a copy.
        num_workers: how many workers, when ``create_env_fn`` is a single factory.
        policy_factory: builds the policy in each worker instead (one callable, or one per worker);
            with a ``policy`` too (and ``weight_sync_schemes``), that policy is only where the weights
            sent by :meth:`update_policy_weights_` are read from.
        frames_per_batch: frames per batch over all workers, or one count per worker.
        total_frames: stop after exactly this many frames (``-1``: never).
        preemptive_threshold: once this fraction of workers (in ``[0, 1]``; ``1.0``: never) has
            finished its share, the others stop at their next step and their partial batches are used.
            Every batch then asks each worker for its full share, so ``total_frames`` may be exceeded.
        weight_sync_schemes: ``{"policy": scheme}`` (TorchRL's spelling; ``weight_sync_scheme=scheme``
            is ours): how :meth:`update_policy_weights_` reaches the workers (default: shared
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
        cat_results: ``"stack"`` (or ``None``) or the dim to concatenate along (``-1``: time).
        mp_start_method: ``"fork"`` (default where available) or ``"spawn"``/``"forkserver"``.
        num_threads: torch threads in each worker (``None``: leave torch's default);
            ``num_sub_threads`` (TorchRL's name) wins when given.
        device, storing_device, env_device, policy_device, create_env_kwargs: one for every worker,
            or a sequence with one per worker.
        split_trajs, postproc, replay_buffer, extend_buffer, trajs_per_batch, trajs_per_write: applied
            in this process to the gathered batches, as ``traj_format`` is (as for
            :class:`~rl_collect.Collector`; trajectories are assembled from every worker's steps).
        pre_collect_hook, post_collect_hook: run in each worker around each of its shares.
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
        create_env_fn: Sequence[Any] | Any = None,
        policy: Any = None,
        *,
        num_workers: int | None = None,
        policy_factory: Any = None,
        frames_per_batch: int | Sequence[int],
        total_frames: int | None = -1,
        weight_sync_schemes: dict | None = None,
        weight_sync_scheme: WeightSyncScheme | None = None,
        worker_timeout: float | None = None,
        heartbeat_interval: float = 1.0,
        heartbeat_timeout: float | None = 20.0,
        mp_start_method: str | None = None,
        num_threads: int | None = 1,
        split_trajs: bool | None = None,
        postproc: Callable | None = None,
        replay_buffer: Any = None,
        preemptive_threshold: float | None = None,
        cat_results: str | int | None = None,
        **kwargs: Any,
    ) -> None:
        if preemptive_threshold is not None and not 0.0 <= preemptive_threshold <= 1.0:
            raise ValueError(f"MultiSyncCollector: preemptive_threshold must be in [0, 1], got {preemptive_threshold}.")
        cat_results = "stack" if cat_results is None else cat_results
        if cat_results != "stack" and (not isinstance(cat_results, int) or isinstance(cat_results, bool)):
            raise ValueError(
                f"MultiSyncCollector: cat_results must be 'stack' or an int (the dim to concatenate), got {cat_results!r}."
            )
        # 1.0 waits for every worker: no preemption at all
        preempt = preemptive_threshold is not None and preemptive_threshold < 1.0
        self.preemptive_threshold = 1.0 if preemptive_threshold is None else float(preemptive_threshold)
        self._preempt = preempt
        self.cat_results = cat_results
        super().__init__(
            create_env_fn,
            policy,
            num_workers=num_workers,
            policy_factory=policy_factory,
            frames_per_batch=frames_per_batch,
            total_frames=total_frames,
            weight_sync_schemes=weight_sync_schemes,
            weight_sync_scheme=weight_sync_scheme,
            worker_timeout=worker_timeout,
            heartbeat_interval=heartbeat_interval,
            heartbeat_timeout=heartbeat_timeout,
            mp_start_method=mp_start_method,
            num_threads=num_threads,
            split_trajs=split_trajs,
            postproc=postproc,
            replay_buffer=replay_buffer,
            _preemptive=preempt,
            **kwargs,
        )

    @property
    def interruptor(self) -> torch.Tensor | None:
        """The workers' shared stop flags of preemption (``None`` when it is off)."""
        return self._stop

    def _shares(self, frames: int) -> list[int]:
        if self._worker_frames is None:
            return split_frames(frames, self._n_envs)
        if frames >= self.frames_per_batch:
            return list(self._worker_frames)
        return split_frames(frames, self._n_envs)  # the last, shorter batch

    def _gather(self, frames: int) -> tuple[list, int]:
        shares = self._shares(frames)
        pool = self._pool
        if self._stop is not None:
            self._stop.zero_()
        pending = [i for i, share in enumerate(shares) if share > 0]
        for i in pending:
            pool.send(i, ("collect", shares[i]))
        needed = len(pending)
        if self._preempt:
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
        if self.cat_results != "stack":
            return tdict.cat(batches, int(self.cat_results)) if len(batches) > 1 else batches[0]
        lengths = {b.batch_size[-1] for b in batches}
        if len(lengths) > 1 or self._preempt:
            steps = max(lengths)
            batches = [_pad_time(b, steps) for b in batches]
        return tdict.stack(batches, 0)

    def __iter__(self) -> Iterator[Any]:
        assembler = self._assembler
        while True:
            yield from self._assembled_batches()
            if 0 < self.total_frames <= self._frames:
                return
            if self.update_at_each_batch:
                self.update_policy_weights_()
            frames = self.frames_per_batch
            if self.total_frames > 0 and not self._preempt:
                # exact totals; with preemption every worker gets its full share (a preempted batch is short)
                frames = min(frames, self.total_frames - self._frames)
            batches, collected = self._gather(frames)
            self._frames += collected
            if assembler is not None:
                for batch in batches:
                    assembler.add(batch)
                if self.replay_buffer is None:
                    continue
                write_trajectories(assembler, self.replay_buffer, self.trajs_per_write, self.postproc)
                out = None
            elif self.replay_buffer is not None and not self.split_trajs:
                self._write(batches)
                out = None
            elif self.split_trajs:
                # one flat, time-ordered row per worker: padding never becomes a trajectory
                out = self._finish(tdict.cat([b.reshape(-1) for b in batches], 0))
            else:
                out = self._finish(self._combine(batches))
            self._iter += 1
            yield out
