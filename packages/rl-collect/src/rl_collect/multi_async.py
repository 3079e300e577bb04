"""MultiAsyncCollector (first ready batch of any worker) and AsyncCollector (one background worker)."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from ._multi_base import MultiCollectorBase
from .weight_sync import WeightSyncScheme

__all__ = ["AsyncCollector", "MultiAsyncCollector"]


class MultiAsyncCollector(MultiCollectorBase):
    """Worker processes collect continuously; iteration yields whichever batch is ready first
    (TorchRL's ``MultiAsyncCollector``).

    Each batch comes from one worker, holds ``frames_per_batch`` frames (``[*env_batch, T]``) and is
    tagged with ``("collector", "worker_id")`` and ``("collector", "policy_version")``. A worker
    starts its next batch as soon as its previous one is received, so batches are being collected
    while the caller trains; a batch started before :meth:`update_policy_weights_` carries the
    previous version. ``total_frames`` is exact: no more frames are requested than remain.

    Args:
        create_env_fns: one env factory per worker.
        policy: as for :class:`~rl_collect.Collector`; each worker gets a copy.
        frames_per_batch: frames per yielded batch.
        total_frames: stop after exactly this many frames (``-1``: never).
        weight_sync_scheme, worker_timeout, heartbeat_interval, heartbeat_timeout, mp_start_method, num_threads, split_trajs, postproc, replay_buffer, **collector_kwargs: as for
            :class:`~rl_collect.MultiSyncCollector`.

    Examples:
        >>> from rl_envs import PendulumEnv
        >>> collector = MultiAsyncCollector([PendulumEnv, PendulumEnv], None, frames_per_batch=10, total_frames=35)
        >>> sorted(batch.numel() for batch in collector)
        [5, 10, 10, 10]
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fns: Sequence[Any],
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        weight_sync_scheme: WeightSyncScheme | None = None,
        worker_timeout: float | None = None,
        heartbeat_interval: float = 1.0,
        heartbeat_timeout: float | None = 20.0,
        mp_start_method: str | None = None,
        num_threads: int | None = 1,
        split_trajs: bool = False,
        postproc: Callable | None = None,
        replay_buffer: Any = None,
        **collector_kwargs: Any,
    ) -> None:
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
            **collector_kwargs,
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
        for i in range(self.num_workers):
            if i not in self._in_flight:
                self._request(i)
        while self._in_flight:
            i, message = self._pool.recv_any(list(self._in_flight), "batch")
            del self._in_flight[i]
            batch = message[1]
            self._frames += message[2]
            self._iter += 1
            self._request(i)  # collects while the caller works on this batch
            yield self._finish(batch)


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
