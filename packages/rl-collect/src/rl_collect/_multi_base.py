"""What the multi-process collectors share: worker start-up, seeding, weights, state, shutdown."""

from __future__ import annotations

import copy
import multiprocessing as mp
from typing import Any, Callable, Sequence

import torch
from torch import nn
from tdict import TensorDict, TensorDictBase

from tdict.liveness import check_heartbeat_args
from tdict.seeding import chain_seeds, check_seed
from tdict.validation import check_positive_int
from ._worker import WorkerPool
from .trajectories import split_trajectories
from .weight_sync import SharedMemWeightSyncScheme, WeightSyncScheme

# handled in the parent, not by the workers' collectors
_PARENT_KWARGS = ("split_trajs", "postproc", "replay_buffer", "progress_bar")
_UNSUPPORTED = ("trajs_per_batch",)


def _policy_for_workers(owner: str, policy: Any, collector_kwargs: dict, start_method: str | None) -> Any:
    """What the workers get as their policy when the learner's policy is on a GPU.

    Workers collecting on the CPU (``policy_device`` or ``device`` "cpu") get a CPU copy (later weights
    still come from the GPU policy). Workers that run the policy on the GPU need a start method other
    than ``fork`` (a forked process cannot use CUDA): that case is refused up front.
    """
    if not isinstance(policy, nn.Module):
        return policy
    cuda = next((t.device for t in (*policy.parameters(), *policy.buffers()) if t.device.type == "cuda"), None)
    if cuda is None:
        return policy
    target = collector_kwargs.get("policy_device", collector_kwargs.get("device"))
    if target is not None and torch.device(target).type == "cpu":
        return copy.deepcopy(policy).to("cpu")
    method = start_method or ("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    if method == "fork":
        raise ValueError(
            f"{owner}: the policy is on {cuda} and the workers would start with 'fork', where CUDA cannot be "
            "used; pass mp_start_method='spawn' (the workers run the policy on the GPU) or policy_device='cpu' "
            "(the workers collect with a CPU copy, and weight updates still come from the GPU policy)."
        )
    return policy


class MultiCollectorBase:
    """Base of :class:`MultiSyncCollector` and :class:`MultiAsyncCollector` (not public)."""

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
        _preemptive: bool = False,
        **collector_kwargs: Any,
    ) -> None:
        name = type(self).__name__
        if not isinstance(create_env_fns, (list, tuple)) or not create_env_fns:
            raise TypeError(
                f"{name}: create_env_fns must be a non-empty list of env factories, got {create_env_fns!r}."
            )
        check_positive_int(name, "frames_per_batch", frames_per_batch)
        if not isinstance(total_frames, int) or (total_frames < 1 and total_frames != -1):
            raise ValueError(f"{name}: total_frames must be a positive int or -1, got {total_frames!r}.")
        if worker_timeout is not None and worker_timeout <= 0:
            raise ValueError(f"{name}: worker_timeout must be > 0 or None, got {worker_timeout!r}.")
        check_heartbeat_args(name, heartbeat_interval, heartbeat_timeout)
        for key in _UNSUPPORTED:
            if collector_kwargs.get(key) is not None:
                raise ValueError(f"{name}: {key} is not supported by multi-process collectors.")
        collector_kwargs.pop("progress_bar", None)
        self.num_workers = len(create_env_fns)
        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.split_trajs = split_trajs
        self.postproc = postproc
        self.replay_buffer = replay_buffer
        self.policy = policy
        self.policy_version = 0
        self.worker_timeout = worker_timeout
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self._frames = 0
        self._iter = 0
        self.weight_sync_scheme = weight_sync_scheme if weight_sync_scheme is not None else SharedMemWeightSyncScheme()
        self._stop = torch.zeros(self.num_workers, dtype=torch.int8).share_memory_() if _preemptive else None
        worker_policy = _policy_for_workers(name, policy, collector_kwargs, mp_start_method)
        self.weight_sync_scheme.init_sender(self._policy_weights(), [])
        receivers = [self.weight_sync_scheme.receiver(i) for i in range(self.num_workers)]
        self._pool = WorkerPool(
            create_env_fns,
            worker_policy,
            collector_kwargs,
            receivers,
            stop=self._stop,
            timeout=worker_timeout,
            start_method=mp_start_method,
            num_threads=num_threads,
            heartbeat_interval=heartbeat_interval,
            heartbeat_timeout=heartbeat_timeout,
        )
        self.weight_sync_scheme.attach_pipes(self._pool.conns)
        self._n_envs = self._pool.n_envs

    # ------------------------------------------------------------------ helpers
    def _policy_weights(self) -> TensorDictBase | None:
        if isinstance(self.policy, nn.Module):
            return TensorDict.from_module(self.policy)
        return None

    def _finish(self, batch: TensorDictBase) -> Any:
        if self.split_trajs:
            batch = split_trajectories(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        if self.replay_buffer is not None:
            self.replay_buffer.extend(batch)
            return None
        return batch

    # ------------------------------------------------------------------ public API
    @property
    def frames(self) -> int:
        """Frames yielded so far."""
        return self._frames

    def update_policy_weights_(self, weights: TensorDictBase | None = None) -> None:
        """Publishes new weights to every worker and bumps :attr:`policy_version`.

        Args:
            weights: a TensorDict from ``TensorDict.from_module`` (``None``: the current weights of
                the policy this collector was given).
        """
        if weights is None:
            weights = self._policy_weights()
        self.policy_version += 1
        self.weight_sync_scheme.send(weights, self.policy_version)

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the workers' collectors in turn, each with the seed the previous one returned.

        Every random stream of every worker (its env's, its collector's) gets a distinct seed
        (:mod:`tdict.seeding`). Returns the seed after the last worker's (``seed`` with ``static_seed``).
        Batches still being collected (async collectors) are dropped first.
        """
        seed = check_seed(f"{type(self).__name__}.set_seed", seed)
        self._drain()

        def seed_worker(i: int) -> Callable[[int], int]:
            def run(seed: int) -> int:
                self._pool.send(i, ("seed", seed, False))
                return self._pool.recv(i, "seed")[1]

            return run

        following = chain_seeds(seed, [seed_worker(i) for i in range(self.num_workers)])
        return seed if static_seed else following

    def reset(self) -> None:
        """Restarts every worker's trajectories."""
        self._drain()
        for i in range(self.num_workers):
            self._pool.send(i, ("reset",))
            self._pool.recv(i, "ok")

    def state_dict(self) -> dict:
        """Counters, policy version and each worker's collector state."""
        self._drain()
        workers = []
        for i in range(self.num_workers):
            self._pool.send(i, ("state_dict",))
            workers.append(self._pool.recv(i, "state")[1])
        return {"frames": self._frames, "iter": self._iter, "policy_version": self.policy_version, "workers": workers}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`: each worker's collector state, then the counters and policy version.

        Batches still being collected are dropped first.

        Raises:
            ValueError: the state was saved from a collector with a different number of workers.
        """
        if len(state["workers"]) != self.num_workers:
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: the state has {len(state['workers'])} workers, "
                f"this collector {self.num_workers}."
            )
        self._drain()
        for i, worker_state in enumerate(state["workers"]):
            self._pool.send(i, ("load_state_dict", worker_state))
            self._pool.recv(i, "ok")
        self._frames = int(state["frames"])
        self._iter = int(state["iter"])
        self.policy_version = int(state["policy_version"])

    def _drain(self) -> None:
        """Waits for batches still being collected (async collectors); they are dropped."""

    def shutdown(self) -> None:
        """Stops every worker process (also done on garbage collection and at exit)."""
        self._pool.close()

    def __enter__(self) -> "MultiCollectorBase":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_workers={self.num_workers}, frames_per_batch={self.frames_per_batch}, "
            f"total_frames={self.total_frames}, frames={self._frames})"
        )
