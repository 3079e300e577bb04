"""What the multi-process collectors share: worker start-up, seeding, weights, state, shutdown."""

from __future__ import annotations

import copy
import multiprocessing as mp
from typing import Any, Callable, Iterator, Sequence, cast

import torch
from torch import nn
from tdict import TensorDict, TensorDictBase

from tdict.liveness import check_heartbeat_args
from tdict.seeding import chain_seeds, check_seed
from tdict.validation import check_positive_int
from ._buffer import write
from ._options import check_unsupported, policy_scheme
from ._policy import weights_of
from ._worker import TRAJ_ID_STRIDE, Portable, WorkerPool, error_line
from .assembly import TrajectoryAssembler, check_traj_format
from .base import BaseCollector, _calls
from .profiling import ProfilerHook
from .trajectories import split_trajectories
from .weight_sync import SharedMemWeightSyncScheme

#: per-worker options: one value for every worker, or a sequence with one value per worker
_PER_WORKER = ("device", "storing_device", "env_device", "policy_device", "create_env_kwargs", "policy_factory")


def _policy_for_workers(owner: str, policy: Any, per_worker: dict, start_method: str | None) -> Any:
    """What the workers get as their policy when the learner's policy is on a GPU.

    Workers that all collect on the CPU (``policy_device``, else ``device``, "cpu" for each; ``per_worker``
    holds those arguments split per worker) get a CPU copy (later weights still come from the GPU
    policy). Workers that run the policy on the GPU need a start method other than ``fork`` (a forked
    process cannot use CUDA): that case is refused up front.
    """
    if not isinstance(policy, nn.Module):
        return policy
    cuda = next((t.device for t in (*policy.parameters(), *policy.buffers()) if t.device.type == "cuda"), None)
    if cuda is None:
        return policy
    n = max((len(v) for v in per_worker.values()), default=1)
    policy_devices, devices = per_worker.get("policy_device", [None] * n), per_worker.get("device", [None] * n)
    targets = [p if p is not None else d for p, d in zip(policy_devices, devices)]
    if all(t is not None and torch.device(t).type == "cpu" for t in targets):
        return copy.deepcopy(policy).to("cpu")
    method = start_method or ("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    if method == "fork":
        raise ValueError(
            f"{owner}: the policy is on {cuda} and the workers would start with 'fork', where CUDA cannot be "
            "used; pass mp_start_method='spawn' (the workers run the policy on the GPU) or policy_device='cpu' "
            "(the workers collect with a CPU copy, and weight updates still come from the GPU policy)."
        )
    return policy


def _env_factories(owner: str, create_env_fn: Any, create_env_fns: Any, num_workers: Any) -> list:
    """One env factory per worker: ``create_env_fn`` as a sequence, or one factory for ``num_workers``."""
    if create_env_fns is not None:
        if create_env_fn is not None:
            raise TypeError(f"{owner}: give create_env_fn or create_env_fns (its former name), not both.")
        create_env_fn = create_env_fns
    if isinstance(create_env_fn, (list, tuple)):
        if not create_env_fn:
            raise TypeError(f"{owner}: create_env_fn must hold one env factory per worker, got an empty sequence.")
        if num_workers is not None and num_workers != len(create_env_fn):
            raise ValueError(
                f"{owner}: num_workers={num_workers} does not match the {len(create_env_fn)} env factories given."
            )
        return list(create_env_fn)
    if create_env_fn is None or num_workers is None:
        raise TypeError(
            f"{owner}: create_env_fn (create_env_fns) must be a non-empty list of env factories, or one factory "
            f"with num_workers=N; got {create_env_fn!r} and num_workers={num_workers!r}."
        )
    check_positive_int(owner, "num_workers", num_workers)
    return [create_env_fn] * num_workers


def _split_per_worker(owner: str, name: str, value: Any, n: int) -> list:
    """``value`` for each of ``n`` workers: a sequence (one per worker) or one value for all."""
    scalar = not isinstance(value, (list, tuple)) or (name == "create_env_kwargs" and isinstance(value, dict))
    if scalar:
        return [value] * n
    if len(value) != n:
        raise ValueError(f"{owner}: {name} has {len(value)} entries for {n} workers (one per worker expected).")
    return list(value)


class MultiCollector(BaseCollector):
    """What :class:`~rl_collect.MultiSyncCollector` and :class:`~rl_collect.MultiAsyncCollector` share
    (TorchRL's ``MultiCollector``): worker processes, weights, seeding, state, hooks, stats.

    Build one of the two subclasses: TorchRL's ``MultiCollector(..., sync=...)`` returns one of them,
    a constructor returning another class than the one called, which rl_collect does not do.

    Examples:
        >>> from rl_envs import PendulumEnv
        >>> from rl_collect import MultiSyncCollector
        >>> collector = MultiSyncCollector(PendulumEnv, num_workers=2, frames_per_batch=8, total_frames=8)
        >>> isinstance(collector, MultiCollector), collector.stats(workers="aggregate")["workers"]
        (True, 2)
        >>> collector.shutdown()
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is MultiCollector:
            raise TypeError(
                "MultiCollector is the shared base: build MultiSyncCollector or MultiAsyncCollector (TorchRL's "
                "MultiCollector(sync=True/False) chooses one of them)."
            )
        return super().__new__(cls)

    def __init__(
        self,
        create_env_fn: Sequence[Any] | Any = None,
        policy: Any = None,
        *,
        num_workers: int | None = None,
        frames_per_batch: int | Sequence[int],
        total_frames: int | None = -1,
        weight_sync_scheme: Any = None,
        weight_sync_schemes: dict | None = None,
        worker_timeout: float | None = None,
        heartbeat_interval: float = 1.0,
        heartbeat_timeout: float | None = 20.0,
        mp_start_method: str | None = None,
        num_threads: int | None = 1,
        num_sub_threads: int | None = None,
        split_trajs: bool | None = None,
        postproc: Callable | None = None,
        replay_buffer: Any = None,
        extend_buffer: bool = True,
        trajs_per_batch: int | None = None,
        trajs_per_write: int | None = None,
        traj_format: str | None = None,
        update_at_each_batch: bool = False,
        pre_collect_hook: Callable[[], Any] | None = None,
        post_collect_hook: Callable[[Any], Any] | None = None,
        create_env_fns: Sequence[Any] | None = None,
        _preemptive: bool = False,
        **collector_kwargs: Any,
    ) -> None:
        name = type(self).__name__
        factories = _env_factories(name, create_env_fn, create_env_fns, num_workers)
        n = len(factories)
        if isinstance(frames_per_batch, (list, tuple)):
            if len(frames_per_batch) != n:
                raise ValueError(
                    f"{name}: If `frames_per_batch` is provided as a sequence, it should contain exactly one value per "
                    f"worker; got {len(frames_per_batch)} values for {n} workers."
                )
            for share in frames_per_batch:
                check_positive_int(name, "frames_per_batch", share)
            self._worker_frames: list[int] | None = [int(f) for f in frames_per_batch]
            total_per_batch = sum(self._worker_frames)
        else:
            check_positive_int(name, "frames_per_batch", frames_per_batch)
            self._worker_frames = None
            total_per_batch = int(cast(int, frames_per_batch))
        total_frames = -1 if total_frames is None else total_frames
        if not isinstance(total_frames, int) or (total_frames < 1 and total_frames != -1):
            raise ValueError(f"{name}: total_frames must be a positive int or -1, got {total_frames!r}.")
        if worker_timeout is not None and worker_timeout <= 0:
            raise ValueError(f"{name}: worker_timeout must be > 0 or None, got {worker_timeout!r}.")
        check_heartbeat_args(name, heartbeat_interval, heartbeat_timeout)
        if trajs_per_write is not None and (trajs_per_batch is None or replay_buffer is None or trajs_per_write < 1):
            raise ValueError(
                f"{name}: trajs_per_write={trajs_per_write!r} must be >= 1 and needs trajs_per_batch and a replay_buffer."
            )
        if trajs_per_batch is not None and trajs_per_batch < 1:
            raise ValueError(f"{name}: trajs_per_batch must be >= 1 or None, got {trajs_per_batch}.")
        check_unsupported(name, weight_updater=collector_kwargs.pop("weight_updater", None))
        scheme = policy_scheme(name, weight_sync_schemes, weight_sync_scheme)
        self.traj_format = check_traj_format(name, traj_format, trajs_per_batch, replay_buffer)
        collector_kwargs.pop("progress_bar", None)
        per_worker = {
            k: _split_per_worker(name, k, collector_kwargs.pop(k), n) for k in _PER_WORKER if k in collector_kwargs
        }
        factories_given = any(f is not None for f in per_worker.get("policy_factory", []))
        if factories_given and policy is not None and scheme is None:
            raise TypeError(f"{name}: policy and policy_factory are mutually exclusive (without weight_sync_schemes).")
        if num_sub_threads is not None:  # TorchRL's name for the threads of each worker
            num_threads = num_sub_threads
        self.num_workers = n
        self.create_env_fn = factories
        self.frames_per_batch = total_per_batch
        self.total_frames = total_frames
        self.split_trajs = bool(split_trajs)
        self.postproc = postproc
        self.replay_buffer = replay_buffer
        self.extend_buffer = extend_buffer
        self.trajs_per_batch = trajs_per_batch
        self.trajs_per_write = trajs_per_write
        self.update_at_each_batch = update_at_each_batch
        self.track_policy_version = bool(collector_kwargs.get("track_policy_version", False))
        self.policy = policy
        self.policy_version = 0
        self.worker_timeout = worker_timeout
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self._pre_collect_hook = pre_collect_hook
        self._post_collect_hook = post_collect_hook
        self._frames = 0
        self._iter = 0
        self._assembler = TrajectoryAssembler(self.traj_format) if trajs_per_batch is not None else None
        self.weight_sync_scheme = scheme if scheme is not None else SharedMemWeightSyncScheme()
        self._weight_sync_schemes = {"policy": self.weight_sync_scheme}  # TorchRL's attribute
        self._stop = torch.zeros(n, dtype=torch.int8).share_memory_() if _preemptive else None
        worker_policy = None if factories_given and policy is not None else policy  # the factories build theirs
        worker_policy = _policy_for_workers(name, worker_policy, per_worker, mp_start_method)
        hooks = {
            "pre_collect_hook": Portable.wrap(pre_collect_hook),
            "post_collect_hook": Portable.wrap(post_collect_hook),
        }
        kwargs_list = [
            {**collector_kwargs, **{k: v[i] for k, v in per_worker.items()}, **hooks, "worker_idx": i} for i in range(n)
        ]
        self.weight_sync_scheme.init_sender(self._policy_weights(), [])
        receivers = [self.weight_sync_scheme.receiver(i) for i in range(n)]
        self._pool = WorkerPool(
            factories,
            worker_policy,
            kwargs_list,
            receivers,
            stop=self._stop,
            timeout=worker_timeout,
            start_method=mp_start_method,
            num_threads=num_threads,
            heartbeat_interval=heartbeat_interval,
            heartbeat_timeout=heartbeat_timeout,
        )
        self.weight_sync_scheme.attach_pipes(self._pool.locked_pipes())
        self._n_envs = self._pool.n_envs

    # ------------------------------------------------------------------ helpers
    def _policy_weights(self) -> TensorDictBase | None:
        if isinstance(self.policy, nn.Module):
            return TensorDict.from_module(self.policy)
        return None

    def _write(self, batches: list[TensorDictBase]) -> None:
        """Writes the workers' batches into the replay buffer, one worker's batch at a time (whole, or
        one time step at a time without ``extend_buffer``)."""
        buffer = self.replay_buffer
        for batch in batches:
            if self.postproc is not None:
                batch = self.postproc(batch)
            write(buffer, batch, whole=self.extend_buffer)

    def _finish(self, batch: TensorDictBase) -> Any:
        if self.split_trajs:
            batch = split_trajectories(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        if self.replay_buffer is not None:
            write(self.replay_buffer, batch)
            return None
        return batch

    # ------------------------------------------------------------------ public API
    @property
    def frames(self) -> int:
        """Frames yielded so far."""
        return self._frames

    @property
    def pre_collect_hook(self) -> Callable[[], Any] | None:
        """Run in each worker before each of its batches; setting it updates the running workers."""
        return self._pre_collect_hook

    @pre_collect_hook.setter
    def pre_collect_hook(self, hook: Callable[[], Any] | None) -> None:
        self._set_worker_hook("pre_collect_hook", hook)

    @property
    def post_collect_hook(self) -> Callable[[Any], Any] | None:
        """Run in each worker with each of its batches; setting it updates the running workers."""
        return self._post_collect_hook

    @post_collect_hook.setter
    def post_collect_hook(self, hook: Callable[[Any], Any] | None) -> None:
        self._set_worker_hook("post_collect_hook", hook)

    def _set_worker_hook(self, name: str, hook: Any) -> None:
        self._set_hook(name, hook)
        self._drain()
        self._results(self._broadcast(("setattr", name, Portable.wrap(hook)), "result"))

    def _install_profiler(self, config: Any) -> None:
        chosen = [i for i in config.workers if 0 <= i < self.num_workers]
        self._drain()
        for i in chosen:
            hook = ProfilerHook(config, i, inner=Portable.wrap(self._post_collect_hook))
            self._pool.send(i, ("setattr", "post_collect_hook", Portable(hook)))
        self._results([self._pool.recv(i, "result") for i in chosen])
        self._profiled = chosen

    def _uninstall_profiler(self) -> None:
        chosen = getattr(self, "_profiled", [])
        self._drain()
        for i in chosen:  # the worker's hook is a Portable around a ProfilerHook
            self._pool.send(i, ("call", "post_collect_hook.fn.stop", (), {}))
        self._results([self._pool.recv(i, "result") for i in chosen])
        for i in chosen:
            self._pool.send(i, ("setattr", "post_collect_hook", Portable.wrap(self._post_collect_hook)))
        self._results([self._pool.recv(i, "result") for i in chosen])
        self._profiled = []

    def _broadcast(self, message: tuple, reply: str) -> list:
        for i in range(self.num_workers):
            self._pool.send(i, message)
        return [self._pool.recv(i, reply) for i in range(self.num_workers)]

    def _results(self, replies: list) -> list:
        """The values of ``("result", value, error)`` replies; a worker's error is raised here."""
        for i, (_, _, error) in enumerate(replies):
            if error is not None:
                raise RuntimeError(f"{type(self).__name__}: worker {i} raised {error_line(error)}\n{error}")
        return [value for _, value, _ in replies]

    def map_fn(
        self, fn: str, list_of_args: Sequence[Sequence[Any]] | None = None, list_of_kwargs: Sequence[dict] | None = None
    ) -> list[Any]:
        """Calls the method at dotted path ``fn`` of each worker's collector, worker ``i`` with
        ``list_of_args[i]`` / ``list_of_kwargs[i]`` (no arguments when both are None); returns the results.

        Raises:
            ValueError: not one entry per worker.
        """
        name = type(self).__name__
        given = list_of_args is not None or list_of_kwargs is not None
        calls = _calls(name, list_of_args, list_of_kwargs, self.num_workers if given else None)
        if not given:
            calls = calls * self.num_workers
        self._drain()
        for i, (args, kwargs) in enumerate(calls):
            self._pool.send(i, ("call", fn, args, kwargs))
        return self._results([self._pool.recv(i, "result") for i in range(self.num_workers)])

    def get_distant_attr(self, attr: str) -> list[Any]:
        """The attribute at dotted path ``attr`` of each worker's collector."""
        self._drain()
        return self._results(self._broadcast(("getattr", attr), "result"))

    def stats(self, workers: str = "aggregate") -> dict[str, Any]:
        """Progress counters (see :meth:`BaseCollector.stats`) plus ``workers`` and ``workers_alive``;
        ``workers="per_worker"`` or ``"both"`` adds each worker's own as ``"worker_<i>/<name>"``.

        Raises:
            ValueError: ``workers`` is none of ``"aggregate"``, ``"per_worker"``, ``"both"``.
        """
        if workers not in ("aggregate", "per_worker", "both"):
            raise ValueError(f"stats: workers must be one of 'aggregate', 'per_worker' or 'both', got {workers!r}.")
        stats: dict[str, Any] = super().stats() if workers != "per_worker" else {}
        stats["workers"] = self.num_workers
        stats["workers_alive"] = sum(int(proc.is_alive()) for proc in self._pool.procs)
        if workers != "aggregate":
            for i, worker_stats in enumerate(self.map_fn("stats")):
                stats.update({f"worker_{i}/{k}": v for k, v in worker_stats.items()})
        return stats

    def fake_tensordict(self) -> TensorDictBase:
        """Not available for multi-process collectors (each worker's env shapes its own batches).

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.fake_tensordict is not implemented: build a Collector on one worker's env and "
            "call its fake_tensordict()."
        )

    def _tracked_version(self) -> int | None:
        return self.policy_version if self.track_policy_version else None

    def update_policy_weights_(
        self, policy_or_weights: Any = None, *, worker_ids: int | Sequence[int] | None = None, weights: Any = None
    ) -> None:
        """Publishes new weights to the workers and bumps :attr:`policy_version`.

        Args:
            policy_or_weights: a TensorDict from ``TensorDict.from_module``, a module (its weights), or
                ``{worker_id: weights}`` for workers whose policies differ (with a
                ``SharedMemWeightSyncScheme(per_worker_weights=True)`` or a pipe scheme); ``None``: the
                current weights of the policy this collector was given.
            worker_ids: the workers to update (default: all).
            weights: the former name of ``policy_or_weights``.
        """
        owner = f"{type(self).__name__}.update_policy_weights_"
        given = weights_of(owner, policy_or_weights if weights is None else weights)
        if isinstance(worker_ids, int):
            worker_ids = [worker_ids]
        if given is None:
            given = self._policy_weights()
        self.policy_version += 1
        if isinstance(given, dict):
            for i, worker_weights in given.items():
                if not 0 <= i < self.num_workers:
                    raise ValueError(f"{owner}: worker id {i} is out of range for {self.num_workers} workers.")
                self.weight_sync_scheme.send(worker_weights, self.policy_version, worker_ids=[i])
            others = [i for i in range(self.num_workers) if i not in given]
            if others:  # their weights are unchanged but their version follows
                self.weight_sync_scheme.send(None, self.policy_version, worker_ids=others)
            return
        self.weight_sync_scheme.send(
            given, self.policy_version, worker_ids=None if worker_ids is None else list(worker_ids)
        )

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

    def _assembled_batches(self) -> Iterator[Any]:
        """Every batch of ``trajs_per_batch`` whole trajectories the assembler holds now (``postproc``
        applied, each counted as an iteration); none with a replay buffer, which gets the
        trajectories instead."""
        assembler = self._assembler
        if assembler is None or self.replay_buffer is not None:
            return
        per_batch = self.trajs_per_batch or 0  # set whenever there is an assembler
        while assembler.complete >= per_batch:
            out = assembler.pop(per_batch)
            self._iter += 1
            yield out if self.postproc is None else self.postproc(out)

    def reset(self, reset_idx: Sequence[bool] | None = None) -> None:
        """Restarts the trajectories of every worker (those whose ``reset_idx`` entry is True)."""
        self._drain()
        if self._assembler is not None:
            self._assembler.clear()
        chosen = [i for i in range(self.num_workers) if reset_idx is None or reset_idx[i]]
        for i in chosen:
            self._pool.send(i, ("reset",))
        for i in chosen:
            self._pool.recv(i, "ok")

    def state_dict(self) -> dict:
        """``{"worker<i>": worker i's collector state, "frames", "iter", "policy_version", "traj_pool"}``
        (TorchRL's layout). ``state["traj_pool"]["traj_id"]`` is the largest trajectory id a worker gives
        out next, in the batches' numbering (worker ``i``'s ids start at ``i * TRAJ_ID_STRIDE``); each
        worker's own counter is in its state, and that is what :meth:`load_state_dict` restores."""
        self._drain()
        replies = self._broadcast(("state_dict",), "state")
        state: dict[str, Any] = {f"worker{i}": message[1] for i, message in enumerate(replies)}
        next_ids = [int(w["traj_pool"]["traj_id"]) + i * TRAJ_ID_STRIDE for i, w in enumerate(state.values())]
        state.update(
            frames=self._frames,
            iter=self._iter,
            policy_version=self.policy_version,
            traj_pool={"traj_id": torch.tensor(max(next_ids))},
        )
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`: each worker's collector state, then the counters and policy version.

        Batches still being collected are dropped first.

        Raises:
            ValueError: the state was saved from a collector with a different number of workers.
        """
        workers = state["workers"] if "workers" in state else [state[f"worker{i}"] for i in range(_count(state))]
        if len(workers) != self.num_workers:
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: the state has {len(workers)} workers, "
                f"this collector {self.num_workers}."
            )
        self._drain()
        for i, worker_state in enumerate(workers):
            self._pool.send(i, ("load_state_dict", worker_state))
            self._pool.recv(i, "ok")
        self._frames = int(state["frames"])
        self._iter = int(state["iter"])
        self.policy_version = int(state["policy_version"])

    def _drain(self) -> None:
        """Waits for batches still being collected (async collectors); they are dropped."""

    def shutdown(self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True) -> None:
        """Stops every worker process (also done on garbage collection and at exit).

        Raises:
            RuntimeError: ``close_env=False`` (the envs live in the workers and end with them).
        """
        if not close_env:
            raise RuntimeError(f"Cannot shutdown {type(self).__name__} collector without environment being closed.")
        if self._runner is not None:
            runner, self._runner = self._runner, None
            runner.join(timeout)
        self._pool.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_workers={self.num_workers}, frames_per_batch={self.frames_per_batch}, "
            f"total_frames={self.total_frames}, frames={self._frames})"
        )


def _count(state: dict) -> int:
    return sum(1 for key in state if isinstance(key, str) and key.startswith("worker") and key[6:].isdigit())


MultiCollectorBase = MultiCollector  # the former name
