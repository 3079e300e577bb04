"""MultiAsyncCollector (first ready batch of any worker) and AsyncCollector (one background worker)."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from ._multi_base import MultiCollector
from .assembly import write_trajectories
from .weight_sync import WeightSyncScheme

__all__ = ["AsyncCollector", "MultiAsyncCollector"]


class MultiAsyncCollector(MultiCollector):
    """Worker processes collect continuously; iteration yields whichever batch is ready first
    (TorchRL's ``MultiAsyncCollector``).

    Each batch comes from one worker, holds ``frames_per_batch`` frames (``[*env_batch, T]``; the
    sum when given one count per worker) and is tagged with ``("collector", "worker_id")`` and
    ``("collector", "policy_version")``. A worker starts its next batch as soon as its previous one
    is received, so batches are being collected while the caller trains; a batch started before
    :meth:`update_policy_weights_` carries the previous version. ``total_frames`` is exact: no more
    frames are requested than remain.

    Args:
        create_env_fn: one env factory per worker, or one factory with ``num_workers``
            (``create_env_fns``: its former name).
        policy: as for :class:`~rl_collect.Collector`; each worker gets a copy.
        frames_per_batch: frames per yielded batch.
        total_frames: stop after exactly this many frames (``-1``: never).
        **kwargs: as for :class:`~rl_collect.MultiSyncCollector` (``cat_results`` may only be
            ``"stack"`` or ``None`` here).

    Examples:
        >>> from rl_envs import PendulumEnv
        >>> collector = MultiAsyncCollector([PendulumEnv, PendulumEnv], None, frames_per_batch=10, total_frames=35)
        >>> sorted(batch.numel() for batch in collector)
        [5, 10, 10, 10]
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
        cat_results: str | None = None,
        **kwargs: Any,
    ) -> None:
        if cat_results not in (None, "stack"):
            raise ValueError(
                f"MultiAsyncCollector: cat_results can only be used with MultiSyncCollector, got {cat_results!r}."
            )
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
            **kwargs,
        )
        self._in_flight: dict[int, int] = {}  # worker -> frames requested

    def _request(self, i: int) -> None:
        frames = self.frames_per_batch
        if self.total_frames > 0:
            frames = min(frames, self.total_frames - self._frames - sum(self._in_flight.values()))
        if frames > 0:
            steps = -(-frames // self._n_envs[i])
            self._in_flight[i] = steps * self._n_envs[i]
            self._pool.send(i, ("collect", frames))

    def _drain(self) -> None:
        while self._in_flight:
            i, _ = self._pool.recv_any(list(self._in_flight), "batch")
            del self._in_flight[i]

    def __iter__(self) -> Iterator[Any]:
        assembler = self._assembler
        for i in range(self.num_workers):
            if i not in self._in_flight:
                self._request(i)
        while True:
            yield from self._assembled_batches()
            if not self._in_flight:
                return
            i, message = self._pool.recv_any(list(self._in_flight), "batch")
            del self._in_flight[i]
            batch = message[1]
            self._frames += message[2]
            if self.update_at_each_batch:
                self.update_policy_weights_()
            self._request(i)  # collects while the caller works on this batch
            if assembler is not None:
                assembler.add(batch)
                if self.replay_buffer is None:
                    continue
                write_trajectories(assembler, self.replay_buffer, self.trajs_per_write, self.postproc)
                out = None
            elif self.replay_buffer is not None and not self.split_trajs:
                self._write([batch])
                out = None
            else:
                out = self._finish(batch)
            self._iter += 1
            yield out


class AsyncCollector(MultiAsyncCollector):
    """One :class:`~rl_collect.Collector` in a background process: the next batch is collected while
    the caller trains on the current one (TorchRL's ``AsyncCollector``).

    Takes :class:`~rl_collect.Collector`'s arguments plus ``weight_sync_scheme``, ``worker_timeout``,
    ``heartbeat_interval``, ``heartbeat_timeout``, ``mp_start_method`` and ``num_threads`` (see
    :class:`~rl_collect.MultiSyncCollector`).

    Examples:
        >>> from rl_envs import PendulumEnv
        >>> collector = AsyncCollector(PendulumEnv, None, frames_per_batch=10, total_frames=25)
        >>> [batch.numel() for batch in collector]
        [10, 10, 5]
        >>> collector.shutdown()
    """

    def __init__(self, create_env_fn: Any, policy: Any = None, *, frames_per_batch: int, **kwargs: Any) -> None:
        super().__init__([create_env_fn], policy, frames_per_batch=frames_per_batch, **kwargs)
