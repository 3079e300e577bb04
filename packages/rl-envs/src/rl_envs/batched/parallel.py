"""ParallelEnv: one process per sub-env, data through shared-memory buffers, commands through pipes."""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from multiprocessing import connection
from typing import Any, cast

import torch
import torch.multiprocessing as mp
from tdict import TensorDictBase

from ..env_base import EnvBase
from ..env_creator import EnvCreator
from tdict.liveness import HeartbeatBoard, check_heartbeat_args
from tdict.seeding import chain_seeds
from tdict.validation import check_positive_int
from ._shared import BatchedEnvBase
from ._worker import BufferLayout, CommandServer, EnvRunner, worker_main

__all__ = ["ParallelEnv"]

_SAME_KEYS = ("step", None, None)  # a step reading the same root keys as the worker's last one

# pools with live workers; closed at interpreter exit by a hook registered after multiprocessing's own
# (atexit runs last-registered first), so multiprocessing never waits on a worker that waits for us
_LIVE_POOLS: weakref.WeakSet[_WorkerPool] = weakref.WeakSet()
_ATEXIT_REGISTERED = False


def _close_live_pools() -> None:
    for pool in list(_LIVE_POOLS):
        pool.close(grace=1.0)


def _register_pool(pool: _WorkerPool) -> None:
    global _ATEXIT_REGISTERED
    _LIVE_POOLS.add(pool)
    if not _ATEXIT_REGISTERED:
        atexit.register(_close_live_pools)
        _ATEXIT_REGISTERED = True


class _WorkerPool:
    """The worker processes and their pipes. Every wait watches the workers' exits and heartbeats, and
    any fault stops every worker (the rule is in ``tdict.liveness``).

    Holds no reference to the env, so a ``weakref.finalize`` on the env can close it.
    """

    def __init__(self, timeout: float | None, heartbeat_interval: float, heartbeat_timeout: float | None) -> None:
        self.timeout = timeout
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.board: HeartbeatBoard | None = None
        self.procs: list = []
        self.conns: list = []
        self.owner_pid = os.getpid()
        self.closed = False
        self._index: dict = {}  # pipe or process sentinel -> worker index

    def start(
        self,
        ctx: Any,
        creators: list,
        buffer: TensorDictBase | None,
        layout: BufferLayout | None,
        num_threads: int | None,
        daemon: bool,
    ) -> None:
        _register_pool(self)
        self.board = board = HeartbeatBoard(len(creators), self.heartbeat_interval, self.heartbeat_timeout)
        # the kernel's parent-death signal follows the starting thread: only ask for it from the main one
        kernel_signal = threading.current_thread() is threading.main_thread()
        for i, creator in enumerate(creators):
            parent_end, child_end = ctx.Pipe()
            proc = ctx.Process(
                target=worker_main,
                args=(
                    i,
                    creator,
                    buffer,
                    layout,
                    child_end,
                    os.getpid(),
                    num_threads,
                    board.beats,
                    self.heartbeat_interval,
                    kernel_signal,
                ),
                daemon=daemon,
                name=f"ParallelEnv-worker-{i}",
            )
            try:
                proc.start()
                board.asked(i)
            finally:
                child_end.close()
            self.procs.append(proc)
            self.conns.append(parent_end)
            self._index[parent_end] = i
            self._index[proc.sentinel] = i
        self.gather(range(len(self.procs)), "ready")

    def send(self, i: int, message: tuple) -> None:
        board = self.board
        assert board is not None  # set by start, before any command
        board.asked(i)
        try:
            self.conns[i].send(message)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self._raise_dead(i)

    def gather(self, indices: Any, expected: str) -> dict:
        """The reply of each worker in ``indices``; raises on an error reply, a dead or a silent worker."""
        if self.closed:
            raise RuntimeError(
                "ParallelEnv: the workers were stopped after an earlier failure; call close() and retry."
            )
        pending = set(indices)
        replies: dict = {}
        board = self.board
        assert board is not None  # set by start, before any command
        now = time.monotonic()
        deadline = None if self.timeout is None else now + self.timeout
        # heartbeats are read only when a wait lasts this long: nothing extra on the per-step path
        check = None if board.timeout is None else now + board.timeout
        while pending:
            waiting = [self.conns[i] for i in pending] + [self.procs[i].sentinel for i in pending]
            until = min((t for t in (deadline, check) if t is not None), default=None)
            ready = connection.wait(waiting, None if until is None else max(0.0, until - time.monotonic()))
            if not ready:
                hung = board.hung(sorted(i for i in pending if not self.conns[i].poll()))
                if hung:
                    self._raise_silent(
                        hung,
                        "no progress (heartbeat) from worker(s) {} for heartbeat_timeout="
                        f"{board.timeout}s (stopped, sleeping, blocked or deadlocked in a step)",
                    )
                if deadline is not None and time.monotonic() >= deadline:
                    self._raise_silent(
                        sorted(pending),
                        f"no {expected!r} reply from worker(s) {{}} within worker_timeout={self.timeout}s",
                    )
                check = board.next_check(pending)
                continue
            exited = []
            for obj in ready:
                i = self._index[obj]
                if obj is not self.conns[i]:
                    exited.append(i)
                    continue
                try:
                    message = cast(connection.Connection, obj).recv()  # a pipe: sentinels were set aside above
                except (EOFError, OSError):
                    self._raise_dead(i)
                if message[0] == "error":
                    pid = self.procs[i].pid
                    self.close(grace=1.0)
                    raise RuntimeError(f"ParallelEnv: worker {i} (pid {pid}) raised:\n{message[1]}")
                if message[0] != expected:
                    self.close(grace=0.0)
                    raise RuntimeError(f"ParallelEnv: worker {i} replied {message[0]!r}, expected {expected!r}.")
                replies[i] = message
                pending.discard(i)
            for i in exited:
                if i in pending and not self.conns[i].poll():  # a reply sent before exiting is read first
                    self._raise_dead(i)
        return replies

    def _raise_silent(self, indices: list, what: str) -> None:
        """Stops every worker, then raises ``what`` (its ``{}`` names the silent workers)."""
        late = ", ".join(f"{i} (pid {self.procs[i].pid})" for i in indices)
        self.close(grace=0.0)
        raise TimeoutError(f"ParallelEnv: {what.format(late)}; every worker was stopped.")

    def _raise_dead(self, i: int) -> None:
        proc = self.procs[i]
        proc.join(1.0)
        code, pid = proc.exitcode, proc.pid
        self.close(grace=0.0)
        why = ""
        if code is not None and code < 0:
            try:
                why = f" (killed by {signal.Signals(-code).name})"
            except ValueError:
                why = f" (killed by signal {-code})"
        raise RuntimeError(
            f"ParallelEnv: worker {i} (pid {pid}) died with exit code {code}{why}; every worker was stopped."
        )

    def close(self, grace: float = 2.0) -> None:
        """Asks the workers to exit, kills those still alive after ``grace`` seconds, joins all (idempotent)."""
        if self.closed or os.getpid() != self.owner_pid:  # a forked child holds a copy: not its workers
            return
        self.closed = True
        _LIVE_POOLS.discard(self)
        for proc, conn in zip(self.procs, self.conns):
            if proc.is_alive():
                try:
                    conn.send(("close",))
                except Exception:
                    pass
        deadline = time.monotonic() + grace
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join(5.0)
        for conn in self.conns:
            try:
                conn.close()
            except Exception:
                pass


class _InProcessPool:
    """The worker pool's interface over one sub-env run in this process (``serial_for_single``):
    each command is served as it is sent; the sub-env's exceptions surface as they are."""

    def __init__(self, server: CommandServer) -> None:
        self.server = server
        self.procs: list = []
        self.closed = False
        self._replies: dict = {}

    def send(self, i: int, message: tuple) -> None:
        self._replies[i] = self.server.handle(message)

    def gather(self, indices: Any, expected: str) -> dict:
        return {i: self._replies.pop(i) for i in indices}

    def close(self, grace: float = 0.0) -> None:
        if not self.closed:
            self.closed = True
            self.server.runner.env.close()


class ParallelEnv(BatchedEnvBase):
    """Runs ``num_workers`` sub-envs, each in its own process; batch size ``[num_workers, *sub_batch]``.

    The parent and the workers share one buffer in shared memory, preallocated from the specs: a step
    writes the actions (and the state and observation entries the sub-envs read) into it, sends each
    worker a short command through its pipe, and returns a copy of the ``"next"`` entries the
    workers wrote; no tensor is pickled per step. Results equal :class:`SerialEnv`'s for the same
    factories and seeds. Workers start on first use (or with :meth:`start`).

    Faults surface in the parent as exceptions naming the worker, and every worker is stopped first:
    a worker that raises gives a ``RuntimeError`` with its traceback, a worker that dies one with its
    exit code (at once), a hung worker (no heartbeat for ``heartbeat_timeout`` seconds while its
    reply is due: stopped, sleeping, blocked or deadlocked in a step) a ``TimeoutError``, and so
    does any worker whose reply takes longer than ``worker_timeout``, if one is set. A worker sends
    heartbeats only while it uses CPU, so by default a slow step that computes (a minute, say) is
    waited for, and a step that waits on nothing for 20 s is a hang.
    :meth:`close` is idempotent and also runs when the env is garbage collected and at interpreter
    exit; the shared memory is released with the last reference to the buffer. Workers die with
    this process, even in the middle of a step (Linux: at once; elsewhere within one heartbeat
    interval). After :meth:`close` (or a fault) the next reset/step starts fresh workers.

    Args:
        num_workers: the number of sub-envs (and processes).
        create_env_fn: a callable returning an env, an :class:`~rl_envs.EnvCreator`, or a list of
            ``num_workers`` of them whose envs have the same batch size and specs. With ``"spawn"``
            or ``"forkserver"`` it must pickle: a module-level function or class, or a lambda
            wrapped by EnvCreator with ``cloudpickle`` installed.
        create_env_kwargs: keyword arguments for the factory: a dict, or one dict per worker.
        serial_for_single: with ``num_workers == 1``, run the env in this process (no worker; still a
            ParallelEnv, whose commands are served in-process).
        shared_memory: must be True: the buffers live in shared memory (TorchRL also offers memmap
            buffers and per-worker TensorDicts; these are not implemented).
        mp_start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"``; ``None`` uses multiprocessing's
            default (``"fork"`` on Linux up to Python 3.13), as TorchRL does.
        daemon: start the workers as daemon processes.
        num_sub_threads: ``torch.set_num_threads`` in each worker (TorchRL's default, 1).
        num_threads: ``torch.set_num_threads`` in this process when the workers start (``None``:
            left as it is; TorchRL lowers it by the number of workers, a process-wide change we only
            make when asked).
        worker_timeout: the longest a worker may take to reply (start-up included) before it counts
            as hung, busy or not; ``None`` (default): no limit, as long as it sends heartbeats.
        heartbeat_interval: seconds between two looks of a worker's heartbeat thread at its CPU use
            (a heartbeat is sent when the worker used CPU since the last one).
        heartbeat_timeout: a worker whose reply is due and that sends no heartbeat for this long
            counts as hung (default 20 s: a stuck worker surfaces within about 21 s); ``None`` turns
            the check off (for steps that wait a long time on something outside the process).
        device: the sub-envs' device, restated (``"cpu"`` also pins device-free sub-envs); another
            device raises ``ValueError`` (build the sub-envs there instead).
        share_individual_td: accepted for TorchRL compatibility: the sub-envs write into one
            stacked buffer either way, and the data returned is the same.
        use_buffers: ``True`` (default): the data go through the shared-memory buffers, only tensors
            whose shapes the specs fix. ``False``: each step's TensorDicts are pickled through the
            pipes, slower but with non-tensor entries (strings, metadata) and sub-envs whose outputs
            differ in shape (stacked lazily).

    Seeding (:mod:`tdict.seeding`): the workers are seeded in turn, each with the seed the previous
    one's ``set_seed`` returned: with one random stream per sub-env, worker ``i`` gets ``seed + i`` and
    ``set_seed(seed)`` returns ``seed + num_workers``.

    Examples:
        >>> from rl_envs import PendulumEnv
        >>> env = ParallelEnv(2, PendulumEnv, {"batch_size": [3]})
        >>> env.set_seed(0)
        2
        >>> env.rollout(4).batch_size
        torch.Size([2, 3, 4])
        >>> env.close()
    """

    # set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``)
    _pool: _WorkerPool | _InProcessPool | None
    _finalizer: weakref.finalize | None
    _sent_keys: tuple | None
    _written: list

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]] | EnvCreator,
        create_env_kwargs: dict | Sequence[dict] | None = None,
        *,
        serial_for_single: bool = False,
        shared_memory: bool = True,
        mp_start_method: str | None = None,
        daemon: bool = False,
        num_sub_threads: int | None = 1,
        worker_timeout: float | None = None,
        heartbeat_interval: float = 1.0,
        heartbeat_timeout: float | None = 20.0,
        device: Any = None,
        use_buffers: bool = True,
        share_individual_td: bool | None = None,
        num_threads: int | None = None,
    ) -> None:
        if not shared_memory:
            raise ValueError(
                "ParallelEnv: shared_memory=False is not supported; the workers exchange data with the parent through "
                "shared-memory buffers."
            )
        methods = mp.get_all_start_methods()
        if mp_start_method is not None and mp_start_method not in methods:
            raise ValueError(f"ParallelEnv: mp_start_method must be one of {methods} or None, got {mp_start_method!r}.")
        if worker_timeout is not None and not worker_timeout > 0:
            raise ValueError(f"ParallelEnv: worker_timeout must be > 0 seconds or None, got {worker_timeout!r}.")
        check_heartbeat_args("ParallelEnv", heartbeat_interval, heartbeat_timeout)
        check_positive_int("ParallelEnv", "num_sub_threads", num_sub_threads, allow_none=True)
        check_positive_int("ParallelEnv", "num_threads", num_threads, allow_none=True)
        super().__init__(
            num_workers,
            create_env_fn,
            create_env_kwargs,
            serial_for_single=serial_for_single,
            device=device,
            use_buffers=use_buffers,
        )
        self.mp_start_method = mp_start_method or mp.get_start_method()
        self.__dict__["_mp_start_method"] = mp_start_method  # as asked (None: multiprocessing's default)
        self.daemon = daemon
        self.num_sub_threads = num_sub_threads
        self.worker_timeout = worker_timeout
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.num_threads = num_threads
        self.__dict__["_pool"] = None
        self.__dict__["_finalizer"] = None
        self.__dict__["_sent_keys"] = [None] * num_workers  # per worker: the root keys its last step read
        self.__dict__["_written"] = [()] * num_workers

    @property
    def _in_process(self) -> bool:
        return self.serial_for_single and self.num_workers == 1

    @classmethod
    def _view_of(cls, num_workers: int, creators: list, device: Any, use_buffers: bool) -> BatchedEnvBase:
        return cls(num_workers, creators, device=device, use_buffers=use_buffers, serial_for_single=False)

    # ------------------------------------------------------------------ lifecycle
    def _start_runners(self, buffer: TensorDictBase, layout: BufferLayout) -> None:
        self.__dict__["_sent_keys"] = [None] * self.num_workers
        self.__dict__["_written"] = [()] * self.num_workers
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)
        if self._in_process:  # serial_for_single with one worker: its commands are served here
            shared = (buffer[0], layout) if self._use_buffers else (None, None)
            self.__dict__["_pool"] = _InProcessPool(CommandServer(EnvRunner(self._creators[0](), *shared)))
            return
        if self._use_buffers:
            buffer.share_memory_()
        pool = _WorkerPool(self.worker_timeout, self.heartbeat_interval, self.heartbeat_timeout)
        self.__dict__["_pool"] = pool
        self.__dict__["_finalizer"] = weakref.finalize(self, pool.close)
        shared = (buffer, layout) if self._use_buffers else (None, None)
        pool.start(mp.get_context(self.mp_start_method), self._creators, *shared, self.num_sub_threads, self.daemon)

    def _stop_runners(self) -> None:
        pool, finalizer = self._pool, self._finalizer
        self.__dict__.update(_pool=None, _finalizer=None)
        if finalizer is not None:
            finalizer.detach()
        if pool is not None:
            pool.close()

    def _live_pool(self) -> _WorkerPool | _InProcessPool:
        pool = self._owner._pool
        assert pool is not None  # started before any command
        if pool.closed:
            raise RuntimeError(
                "ParallelEnv: the workers were stopped after a failure (see the earlier exception); call close(), "
                "after which the next reset/step starts new workers."
            )
        return pool

    @property
    def _workers(self) -> list:
        """The worker processes (empty while closed)."""
        pool = self._owner._pool
        return list(pool.procs) if pool is not None else []

    # ------------------------------------------------------------------ commands
    def _run_step(self, keys: tuple, extras: list | None, positions: list | None = None) -> tuple[tuple, list]:
        owner = self._owner
        pool, sent, ids = self._live_pool(), owner._sent_keys, self._ids
        if positions is not None:
            ids = tuple(ids[p] for p in positions)
            extras = None if extras is None else [extras[p] for p in positions]
        if extras is None:
            same, new = _SAME_KEYS, ("step", keys, None)
            for i in ids:
                pool.send(i, same if keys == sent[i] else new)
                sent[i] = keys
        else:
            for i, extra in zip(ids, extras):
                pool.send(i, ("step", None if keys == sent[i] else keys, extra))
                sent[i] = keys
        written = owner._written
        replies = pool.gather(ids, "stepped")
        for i, reply in replies.items():
            if reply[1] is not None:
                written[i] = reply[1]
        return written[ids[0]], [replies[i][2] for i in ids]

    def _run_reset(self, need: list, keys: tuple, with_mask: bool, kwargs: dict, extras: list | None) -> tuple:
        pool = self._live_pool()
        positions = [p for p, flag in enumerate(need) if flag]
        for p in positions:
            pool.send(self._ids[p], ("reset", keys, with_mask, kwargs, None if extras is None else extras[p]))
        replies = pool.gather([self._ids[p] for p in positions], "reset")
        extra: list = [None] * len(need)
        for p in positions:
            extra[p] = replies[self._ids[p]][2]
        return (replies[self._ids[positions[0]]][1] if positions else ()), extra

    def _run_seed(self, seed: int | None) -> int | None:
        pool = self._live_pool()

        def seed_worker(i: int) -> Callable[[int | None], int | None]:
            def run(seed: int | None) -> int | None:
                pool.send(i, ("seed", seed))
                return pool.gather([i], "seeded")[i][1]

            return run

        return chain_seeds(seed, [seed_worker(i) for i in self._ids])

    def _run_step_tds(self, parts: list, positions: list | None = None) -> list:
        pool, ids = self._live_pool(), self._ids
        if positions is not None:
            ids = tuple(ids[p] for p in positions)
        for i, part in zip(ids, parts):
            pool.send(i, ("step_td", part))
        replies = pool.gather(ids, "stepped_td")
        return [replies[i][1] for i in ids]

    def _run_reset_tds(self, positions: list, parts: list, kwargs: dict) -> list:
        pool = self._live_pool()
        ids = [self._ids[p] for p in positions]
        for i, part in zip(ids, parts):
            pool.send(i, ("reset_td", part, kwargs))
        replies = pool.gather(ids, "reset_td")
        return [replies[i][1] for i in ids]

    # ------------------------------------------------------------------ the sub-envs' attributes
    def _ask(self, ids: Sequence[int], message: tuple, expected: str) -> list:
        pool = self._live_pool()
        for i in ids:
            pool.send(i, message)
        replies = pool.gather(ids, expected)
        failed = [i for i in ids if replies[i][1] == "failed"]
        if failed:
            raise RuntimeError(f"ParallelEnv: worker {failed[0]} failed on {message[1]!r}:\n{replies[failed[0]][2]}")
        return [replies[i] for i in ids]

    def _sub_env_has(self, name: str) -> bool:
        return self._ask(self._ids[:1], ("attr", (name,), False), "attr")[0][1] != "missing"

    def _sub_env_values(self, path: tuple) -> list:
        replies = self._ask(self._ids, ("attr", path, True), "attr")
        if any(reply[1] == "missing" for reply in replies):
            raise AttributeError(f"ParallelEnv: the sub-envs have no attribute {'.'.join(path)!r}.")
        if any(reply[1] == "callable" for reply in replies):
            raise TypeError(f"ParallelEnv: the sub-envs' {'.'.join(path)!r} is a method: call it.")
        return [reply[2] for reply in replies]

    def _sub_env_call(self, path: tuple, args: tuple, kwargs: dict) -> list:
        return [reply[2] for reply in self._ask(self._ids, ("call", path, args, kwargs), "called")]
