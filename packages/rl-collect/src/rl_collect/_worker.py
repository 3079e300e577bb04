"""Collector worker processes: the worker's command loop and the parent's pool (faults, shutdown).

Protocol (parent -> worker, one duplex pipe per worker): ``("collect", frames)`` -> ``("batch", td,
frames)``; ``("seed", seed, static)`` -> ``("seed", next_seed)``; ``("state_dict",)`` ->
``("state", dict)``; ``("load_state_dict", dict)`` -> ``("ok",)``; ``("reset",)`` -> ``("ok",)``;
``("setattr", name, value)``, ``("getattr", path)`` and ``("call", path, args, kwargs)`` on the
worker's collector -> ``("result", value, None)``, or ``("result", None, traceback_text)`` when
that raised (the worker lives on); ``("close",)`` -> the worker exits. Scheme messages
(``("weights", td, version)``, ``("weights_buffer", td)``) get no reply. A worker that raises
otherwise replies ``("error", traceback_text, exception_type_name)`` and exits. Every worker beats and dies with
its parent, even in the middle of a batch (``tdict.liveness``).
"""

from __future__ import annotations

import copy
import os
import pickle
import threading
import traceback
import weakref
from multiprocessing import connection
from typing import Any, Sequence

import torch
from torch import multiprocessing as mp
from torch import nn
from tdict import TensorDictBase

from tdict.liveness import HeartbeatBoard, die_with_parent, start_heartbeat
from .base import call_path, resolve_attr
from .collector import Collector
from .weight_sync import WeightReceiver

_TRAJ = ("collector", "traj_ids")
_WORKER = ("collector", "worker_id")
#: trajectory ids of worker ``i`` start at ``i * TRAJ_ID_STRIDE`` (unique across workers)
TRAJ_ID_STRIDE = 1 << 40


class Portable:
    """A callable that travels to spawned workers: pickled by reference when it can be, else by value
    with ``cloudpickle`` (lambdas, closures), when that is installed.

    Examples:
        >>> import pickle
        >>> hook = Portable(len)
        >>> pickle.loads(pickle.dumps(hook))([1, 2])
        2
    """

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    @classmethod
    def wrap(cls, fn: Any) -> Portable | None:
        return None if fn is None else cls(fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __reduce__(self) -> tuple:
        try:
            payload = pickle.dumps(self.fn)
        except Exception as err:
            try:
                import cloudpickle
            except ImportError:
                raise TypeError(
                    f"rl_collect: {self.fn!r} cannot be pickled by reference ({err}) to reach the workers; install "
                    "cloudpickle to send lambdas and closures, or use a module-level function."
                ) from err
            payload = cloudpickle.dumps(self.fn)
        return (_load_portable, (payload,))


def _load_portable(payload: bytes) -> Portable:
    return Portable(pickle.loads(payload))  # cloudpickle output loads with plain pickle


class _WeightsApplier:
    """Loads what the receiver delivers into the worker's policy; the collector's version follows the
    receiver's only when that changed (a version restored by ``load_state_dict`` stays until then)."""

    def __init__(self, collector: Collector, receiver: WeightReceiver) -> None:
        self.collector = collector
        self.receiver = receiver
        self.seen: int | None = None

    def __call__(self) -> None:
        weights, version = self.receiver.receive()
        if weights is None and version == self.seen:
            return
        first = self.seen is None
        self.seen = version
        if first and weights is None:
            return  # the version the worker started with
        policy = self.collector._user_policy_module()
        if weights is not None and isinstance(policy, nn.Module):
            weights.to_module(policy, inplace=True)
        self.collector.policy_version = version


def _attr_command(collector: Collector, message: tuple) -> tuple:
    """The reply to a ``setattr``/``getattr``/``call`` command: ``("result", value, error_text)``."""
    try:
        command = message[0]
        if command == "setattr":
            setattr(collector, message[1], message[2])
            value = None
        elif command == "getattr":
            value = resolve_attr(collector, message[1])
        else:
            value = call_path(collector, message[1], message[2], message[3])
    except Exception:
        return ("result", None, traceback.format_exc())
    return ("result", value, None)


def _collect(collector: Collector, worker_id: int, frames: int, stop: torch.Tensor | None) -> Any:
    """``frames`` frames (fewer when ``stop[worker_id]`` is raised mid-way), as one batch."""
    batch = collector.rollout_frames(frames, None if stop is None else lambda: bool(stop[worker_id]))
    batch.set(_TRAJ, batch.get(_TRAJ) + worker_id * TRAJ_ID_STRIDE)
    batch.set(_WORKER, torch.full(batch.batch_size, worker_id, dtype=torch.int64))
    return collector.finish_batch(batch)


def worker_main(
    worker_id: int,
    create_env_fn: Any,
    policy: Any,
    collector_kwargs: dict,
    conn: Any,
    receiver: WeightReceiver,
    stop: torch.Tensor | None,
    num_threads: int | None,
    parent_pid: int,
    beats: torch.Tensor,
    heartbeat_interval: float,
    kernel_signal: bool,
) -> None:
    """The worker process: builds a :class:`Collector` and serves the parent's commands."""
    die_with_parent(parent_pid, kernel_signal)
    start_heartbeat(beats, worker_id, heartbeat_interval, parent_pid)  # before the env: building it may be slow
    try:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        policy = copy.deepcopy(policy)  # never write into the parent's (possibly shared) tensors
        collector = Collector(create_env_fn, policy, frames_per_batch=1, total_frames=-1, **collector_kwargs)
        apply_weights = _WeightsApplier(collector, receiver)
        apply_weights()
        conn.send(("ready", collector.n_envs))
        while True:
            message = conn.recv()  # the heartbeat thread ends this process if the parent dies meanwhile
            command = message[0]
            if receiver.handle(message):
                continue
            if command in ("setattr", "getattr", "call"):
                apply_weights()
                conn.send(_attr_command(collector, message))
            elif command == "collect":
                apply_weights()
                batch = _collect(collector, worker_id, message[1], stop)
                if isinstance(batch, TensorDictBase):
                    # one storage for every leaf: the pipe shares one block of memory instead of one per tensor
                    batch = batch.consolidate(share_memory=True)
                conn.send(("batch", batch, batch.numel() if batch is not None else 0))
            elif command == "seed":
                conn.send(("seed", collector.set_seed(message[1], static_seed=message[2])))
            elif command == "state_dict":
                apply_weights()
                conn.send(("state", collector.state_dict()))
            elif command == "load_state_dict":
                collector.load_state_dict(message[1])
                conn.send(("ok",))
            elif command == "reset":
                collector.reset()
                conn.send(("ok",))
            elif command == "close":
                collector.shutdown()
                return
            else:
                raise ValueError(f"rl_collect worker: unknown command {command!r}")
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return
    except BaseException as exc:
        try:
            conn.send(("error", traceback.format_exc(), type(exc).__name__))
        except Exception:
            pass
    finally:
        conn.close()


def _shutdown_processes(procs: list, conns: list, grace: float = 2.0) -> None:
    """Asks the workers to stop, then kills what is still alive; joins everything."""
    for proc, conn in zip(procs, conns):
        if proc.is_alive():
            try:
                conn.send(("close",))
            except Exception:
                pass
    deadline = _now() + grace
    for proc in procs:
        proc.join(max(0.0, deadline - _now()))
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)
    for conn in conns:
        try:
            conn.close()
        except Exception:
            pass


def _now() -> float:
    import time

    return time.monotonic()


def error_line(trace: str) -> str:
    """The last line of a formatted traceback (``"ValueError: ..."``): what a worker raised, in brief."""
    lines = [line for line in trace.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no traceback)"


class WorkerPool:
    """Worker processes, one per env factory, each running a :class:`Collector`.

    Every receive watches the workers (the rule is in ``tdict.liveness``): a worker that raised surfaces
    its traceback, a dead worker its exit code, a hung one (no heartbeat for ``heartbeat_timeout``
    seconds while its reply is due) and, when ``timeout`` is set, one whose reply is later than
    that, a :class:`TimeoutError`.
    Any fault kills every worker before the exception propagates. The processes are also stopped
    when the pool is garbage collected or the interpreter exits.
    """

    _since: list

    def __init__(
        self,
        create_env_fns: Sequence[Any],
        policy: Any,
        collector_kwargs: Sequence[dict],
        receivers: Sequence[WeightReceiver],
        *,
        stop: torch.Tensor | None,
        timeout: float | None,
        start_method: str | None,
        num_threads: int | None,
        heartbeat_interval: float = 1.0,
        heartbeat_timeout: float | None = 20.0,
    ) -> None:
        if start_method is None:
            start_method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(start_method)
        self.timeout = timeout
        self.board = HeartbeatBoard(len(create_env_fns), heartbeat_interval, heartbeat_timeout)
        # the kernel's parent-death signal follows the starting thread: only ask for it from the main one
        kernel_signal = threading.current_thread() is threading.main_thread()
        self.procs: list = []
        self.conns: list = []
        self.locks: list = []  # one per pipe: a background collection thread and the caller may both send
        self.closed = False
        self.starting = True
        self._finalizer = weakref.finalize(self, _shutdown_processes, self.procs, self.conns)
        try:
            for i, fn in enumerate(create_env_fns):
                parent_end, child_end = ctx.Pipe()
                proc = ctx.Process(  # pyright: ignore[reportAttributeAccessIssue]  # typeshed's BaseContext lacks it
                    target=worker_main,
                    args=(
                        i,
                        fn,
                        policy,
                        collector_kwargs[i],
                        child_end,
                        receivers[i],
                        stop,
                        num_threads,
                        os.getpid(),
                        self.board.beats,
                        heartbeat_interval,
                        kernel_signal,
                    ),
                    name=f"rl_collect-worker-{i}",
                )
                proc.start()
                self.board.asked(i)
                child_end.close()
                self.procs.append(proc)
                self.conns.append(parent_end)
                self.locks.append(threading.Lock())
            self._since = [_now()] * len(self.procs)
            self.n_envs = [self.recv(i, "ready")[1] for i in range(len(self.procs))]
            self.starting = False
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self.procs)

    def send(self, i: int, message: tuple) -> None:
        self._since[i] = _now()  # the reply is due within ``timeout`` of this
        self.board.asked(i)
        try:
            with self.locks[i]:
                self.conns[i].send(message)
        except (BrokenPipeError, OSError):
            self._raise_dead(i)

    def locked_pipes(self) -> list:
        """The parent ends of the pipes for a weight sync scheme, each ``send`` under the pipe's lock."""
        return [_LockedPipe(conn, lock) for conn, lock in zip(self.conns, self.locks)]

    def recv(self, i: int, expected: str | None = None) -> tuple:
        return self.recv_any([i], expected)[1]

    def recv_any(self, indices: Sequence[int], expected: str | None = None) -> tuple[int, tuple]:
        """The first message from any of ``indices`` workers: ``(worker_id, message)``."""
        if self.closed:
            raise RuntimeError("rl_collect: the workers were shut down.")
        conns = {self.conns[i]: i for i in indices}
        sentinels = {self.procs[i].sentinel: i for i in indices}
        # checked before every wait too: in async mode busy siblings keep answering, and would hide a hung worker
        self._raise_if_hung(indices)
        while True:
            until = self._next_check(indices)
            ready = connection.wait([*conns, *sentinels], None if until is None else max(0.0, until - _now()))
            if ready:
                break
            self._raise_if_hung(indices)
        for obj in ready:
            if obj in conns:
                i = conns[obj]
                try:
                    message = self.conns[i].recv()
                except (EOFError, OSError):
                    self._raise_dead(i)
                if message[0] == "error":
                    pid = self.procs[i].pid
                    self.close(grace=0.0)
                    text = f"rl_collect: worker {i} (pid {pid}) raised {error_line(message[1])}\n{message[1]}"
                    # while the workers start, a bad argument (a policy the env cannot feed) raises what the
                    # single-process Collector raises; later faults are RuntimeErrors naming the worker
                    kind = _STARTUP_ERRORS.get(message[2]) if self.starting and len(message) > 2 else None
                    raise (kind or RuntimeError)(text)
                if message[0] == "batch" and isinstance(message[1], TensorDictBase) and message[1].is_locked:
                    message[1].unlock_()  # consolidated for the trip; the parent adds entries (masks, ids)
                if expected is not None and message[0] != expected:
                    self.close()
                    raise RuntimeError(f"rl_collect: worker {i} replied {message[0]!r}, expected {expected!r}.")
                return i, message
        i = sentinels[ready[0]]
        if self.conns[i].poll():  # it replied before exiting
            return self.recv_any([i], expected)
        self._raise_dead(i)
        raise AssertionError("unreachable")

    def _next_check(self, indices: Sequence[int]) -> float | None:
        """When the first of ``indices`` would be hung (no heartbeat, or past ``timeout``) if nothing changed."""
        due = [] if self.timeout is None else [min(self._since[i] for i in indices) + self.timeout]
        check = self.board.next_check(indices)
        return min(due + ([] if check is None else [check]), default=None)

    def _raise_if_hung(self, indices: Sequence[int]) -> None:
        indices = [i for i in indices if not self.conns[i].poll()]  # a reply waiting to be read is no hang
        hung = self.board.hung(indices)
        if hung:
            self._raise_silent(
                hung,
                "no progress (heartbeat) from worker(s) {} for heartbeat_timeout="
                f"{self.board.timeout}s (stopped, sleeping, blocked or deadlocked in a step)",
            )
        if self.timeout is not None:
            now = _now()
            late = [i for i in indices if now - self._since[i] >= self.timeout]
            if late:
                self._raise_silent(late, f"no reply from worker(s) {{}} within worker_timeout={self.timeout}s")

    def _raise_silent(self, indices: Sequence[int], what: str) -> None:
        """Kills every worker, then raises ``what`` (its ``{}`` names the silent workers)."""
        names = ", ".join(f"{i} (pid {self.procs[i].pid})" for i in indices)
        self.close(grace=0.0)
        raise TimeoutError(f"rl_collect: {what.format(names)}; killed every worker.")

    def _raise_dead(self, i: int) -> None:
        proc = self.procs[i]
        proc.join(1.0)
        code = proc.exitcode
        self.close(grace=0.0)
        raise RuntimeError(
            f"rl_collect: worker {i} (pid {proc.pid}) died with exit code {code}"
            + (f" (signal {-code})" if code is not None and code < 0 else "")
            + "; killed every worker."
        )

    def close(self, grace: float = 2.0) -> None:
        """Stops every worker (idempotent); after ``grace`` seconds the survivors are killed."""
        self.closed = True
        if self._finalizer.detach() is not None:
            _shutdown_processes(self.procs, self.conns, grace)


#: exception types a worker's start-up failure keeps in the parent (by name, as the worker reports it)
_STARTUP_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls for cls in (TypeError, ValueError, KeyError, NotImplementedError, AttributeError)
}


def split_frames(frames: int, n_envs: Sequence[int]) -> list[int]:
    """``frames`` split over workers in whole env steps (worker ``i`` steps ``n_envs[i]`` frames at
    a time), as evenly as possible: the shares sum to ``frames`` or overshoot it by less than the
    largest env count (exactly ``frames`` when every worker has the same env count and it divides
    ``frames``).

    Examples:
        >>> split_frames(8, [2, 2, 2])  # rounding each third up would give 4 + 4 + 2 = 10
        [4, 2, 2]
        >>> split_frames(7, [1, 3])
        [4, 3]
    """
    n = len(n_envs)
    shares = [(frames // n) // m * m for m in n_envs]  # whole steps under an even share
    total = sum(shares)
    while total < frames:  # fewer than n * max(n_envs) frames left: a step at a time to the least loaded
        i = min(range(n), key=lambda j: (shares[j], j))
        shares[i] += n_envs[i]
        total += n_envs[i]
    return shares


class _LockedPipe:
    """A pipe end whose ``send`` holds a lock (messages from two threads never interleave)."""

    def __init__(self, conn: Any, lock: Any) -> None:
        self._conn = conn
        self._lock = lock

    def send(self, message: Any) -> None:
        with self._lock:
            self._conn.send(message)
