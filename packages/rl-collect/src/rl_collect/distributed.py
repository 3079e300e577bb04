"""DistributedCollector: Collector workers on torch.distributed, the learner on rank 0.

The learner (rank 0) sends each worker (ranks ``1..N``) a small command tensor; a worker runs a
:class:`~rl_collect.Collector` and answers with its batch as tensors: a length header, a JSON layout
(keys, shapes, dtypes, batch size) and one consolidated byte buffer holding every leaf. New weights
travel through a :class:`~rl_collect.weight_sync.DistributedWeightSyncScheme` (one flat byte buffer in
the order of ``TensorDict.from_module(policy)``, broadcast when every worker is idle).

Launching:

* ``launcher="mp"`` (default): the collector spawns the workers with ``multiprocessing`` (spawn
  start method), so ``create_env_fn`` and ``policy`` must be picklable.
* ``launcher="torchrun"``: every rank runs the same script; rank 0 builds the collector, the other
  ranks call :func:`run_worker`::

      # torchrun --nproc-per-node 3 --master-addr 127.0.0.1 script.py
      import os
      from rl_collect.distributed import DistributedCollector, run_worker
      if int(os.environ["RANK"]) == 0:
          collector = DistributedCollector(make_env, policy, frames_per_batch=200, total_frames=10_000,
                                           launcher="torchrun")
          for batch in collector:
              ...
          collector.shutdown()
      else:
          run_worker()  # receives the config from rank 0; returns when the collector shuts down

  Set ``GLOO_SOCKET_IFNAME=lo`` (or your interface) for the gloo transport under torchrun.

``backend="gloo"`` moves CPU tensors; ``backend="nccl"`` (untested here) needs each worker's batch
on its GPU: pass ``storing_device="cuda"`` in ``collector_kwargs``.
"""

from __future__ import annotations

import datetime
import json
import math
import multiprocessing as mp
import os
import queue
import socket
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import tdict
import torch
import torch.distributed as dist
from tdict import TensorDict, TensorDictBase

from tdict.liveness import die_with_parent, start_heartbeat
from tdict.seeding import chain_seeds, check_seed
from tdict.validation import check_positive_int
from .collector import Collector
from .weight_sync import (
    DIST_COMMAND_LEN,
    DIST_WEIGHTS_COMMAND,
    DistributedWeightReceiver,
    DistributedWeightSyncScheme,
)

if TYPE_CHECKING:  # torch.distributed.TCPStore's definition: torch's stubs do not re-export it
    from torch._C._distributed_c10d import TCPStore

__all__ = ["DistributedCollector", "run_worker"]

_TRAJ = ("collector", "traj_ids")
# commands (learner -> worker): [cmd, arg0, arg1, arg2] (weights: the scheme's header)
_CMD_COLLECT, _CMD_WEIGHTS, _CMD_SEED, _CMD_STOP = 1, DIST_WEIGHTS_COMMAND, 3, 4
# a worker waits this long for its next command: the learner may train for hours between batches,
# and an idle worker that timed out on its own would be blamed for the learner's wait on another
_WORKER_IDLE_TIMEOUT = datetime.timedelta(days=7)
# spawning a worker imports torch: start-up may take longer than a request
_START_TIMEOUT = 60.0
# seconds the learner waits, after a worker's connection broke, for its report or its exit (a loaded
# machine may delay both well past the broken connection)
_FAILURE_REPORT_S = 30.0
# characters of a worker's traceback that are sent: every report must fit in the status pipe
_MAX_REPORT_CHARS = 8000


def _listening_socket(addr: str, port: int) -> socket.socket:
    """A socket bound to ``addr`` only (never the wildcard address) and listening."""
    family, kind, proto, _, sockaddr = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.bind(sockaddr)
        sock.listen()
    except BaseException:
        sock.close()
        raise
    return sock


def _learner_store(addr: str, port: int, world_size: int, timeout: float) -> TCPStore:
    """The rendezvous store, served on ``addr`` alone: c10d's own server would bind every interface
    whatever address it is given, so it is handed a socket bound here."""
    sock = _listening_socket(addr, port)
    return dist.TCPStore(  # pyright: ignore[reportPrivateImportUsage]  (public at run time)
        addr,
        sock.getsockname()[1],
        world_size,
        True,
        datetime.timedelta(seconds=timeout),
        wait_for_workers=False,
        master_listen_fd=sock.detach(),  # the store owns the descriptor now
    )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _device_for(backend: str) -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


# ---------------------------------------------------------------------- tensor packing
def _pack(td: TensorDictBase) -> tuple[bytes, torch.Tensor]:
    """(JSON layout, one uint8 buffer with every leaf's bytes)."""
    layout: list = []
    chunks: list = []
    for key, value in td.items(include_nested=True, leaves_only=True):
        if not isinstance(value, torch.Tensor):
            continue  # non-tensor leaves do not travel
        value = value.detach().contiguous()
        key = [key] if isinstance(key, str) else list(key)
        layout.append([key, list(value.shape), _dtype_name(value.dtype)])
        raw = value.reshape(-1).view(torch.uint8) if value.numel() else value.new_empty(0, dtype=torch.uint8)
        chunks.append(raw)
        if raw.numel() % 8:  # keep every leaf 8-byte aligned in the buffer
            chunks.append(raw.new_zeros(8 - raw.numel() % 8))
    header = json.dumps({"batch_size": list(td.batch_size), "leaves": layout}).encode()
    buf = torch.cat(chunks) if chunks else torch.empty(0, dtype=torch.uint8)
    return header, buf


def _unpack(header: bytes, buf: torch.Tensor) -> TensorDictBase:
    meta = json.loads(header.decode())
    out = TensorDict({}, batch_size=meta["batch_size"])
    offset = 0
    for key, shape, dtype_name in meta["leaves"]:
        dtype = getattr(torch, dtype_name)
        nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
        leaf = buf[offset : offset + nbytes].view(dtype).reshape(shape)
        offset += -(-nbytes // 8) * 8
        out.set(tuple(key), leaf)
    return out


def _weights_of(policy: Any) -> TensorDictBase | None:
    if isinstance(policy, torch.nn.Module) and any(True for _ in policy.parameters()):
        return TensorDict.from_module(policy)
    return None


# ---------------------------------------------------------------------- worker side
class _Worker:
    """The loop a worker rank runs: wait for a command, act, answer."""

    def __init__(
        self,
        rank: int,
        num_workers: int,
        create_env_fn: Any,
        policy: Any,
        frames_per_batch: int,
        collector_kwargs: dict,
        backend: str,
    ) -> None:
        self.rank = rank
        self.num_workers = num_workers
        self.backend = backend
        self.device = torch.device("cpu")
        self.policy = policy
        self.collector = Collector(
            create_env_fn, policy, frames_per_batch=frames_per_batch, total_frames=-1, **collector_kwargs
        )
        self.iterator: Iterator | None = None

    def collect(self, frames: int) -> TensorDictBase:
        c = self.collector
        c.total_frames = c.frames + frames  # the generator re-reads total_frames at each step
        if self.iterator is None:
            self.iterator = iter(c)
        batch = next(self.iterator)
        ids = batch.get(_TRAJ, None)
        if ids is not None:  # interleave: unique across workers
            batch.set(_TRAJ, torch.where(ids >= 0, ids * self.num_workers + (self.rank - 1), ids))
        return batch

    def loop(self) -> None:
        self.device = _device_for(self.backend)
        receiver = DistributedWeightReceiver(_weights_of(self.policy), src=0, device=self.device)
        cmd = torch.zeros(DIST_COMMAND_LEN, dtype=torch.int64, device=self.device)
        while True:
            dist.recv(cmd, src=0)
            message = tuple(int(x) for x in cmd.tolist())
            kind, arg0 = message[:2]
            if kind == _CMD_STOP:
                return
            if kind == _CMD_SEED:  # replies with the next seed (tdict.seeding's chain)
                following = self.collector.set_seed(arg0)
                dist.send(torch.tensor([following], dtype=torch.int64, device=self.device), dst=0)
            elif receiver.handle(message):
                weights, version = receiver.receive()
                target = _weights_of(self.policy)
                if weights is not None and target is not None:
                    with torch.no_grad():
                        for key, value in target.items(True, True):
                            value.copy_(weights.get(key))
                self.collector.update_policy_weights_()
                self.collector.policy_version = version
            elif kind == _CMD_COLLECT:
                header, buf = _pack(self.collect(arg0))
                sizes = torch.tensor([len(header), buf.numel()], dtype=torch.int64, device=self.device)
                dist.send(sizes, dst=0)
                dist.send(torch.frombuffer(bytearray(header), dtype=torch.uint8).to(self.device), dst=0)
                if buf.numel():
                    dist.send(buf.to(self.device), dst=0)


def _loopback_ifname(addr: str) -> dict:
    return {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"} if addr in ("127.0.0.1", "localhost", "::1") else {}


def _init_group(backend: str, rank: int, world_size: int, addr: str, store: Any, timeout: datetime.timedelta) -> None:
    """Joins the group: rank 0 with its ``store``, a worker (``store`` is the port) as a client of it."""
    env = _loopback_ifname(addr)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({k: v for k, v in env.items() if k not in os.environ or os.environ[k] == ""})
    try:
        if isinstance(store, int):  # a client of the learner's store (clients never listen)
            store = dist.TCPStore(addr, store, world_size, False, timeout)  # pyright: ignore[reportPrivateImportUsage]
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _mp_worker_main(
    rank: int,
    world_size: int,
    addr: str,
    port: int,
    backend: str,
    parent_pid: int,
    kernel_signal: bool,
    create_env_fn: Any,
    policy: Any,
    frames_per_batch: int,
    collector_kwargs: dict,
    status: Any,
) -> None:
    die_with_parent(parent_pid, kernel_signal)
    start_heartbeat(None, rank, 1.0, parent_pid)  # a watchdog only: ends this worker if the learner dies
    torch.set_num_threads(1)
    worker = None
    try:
        worker = _Worker(rank, world_size - 1, create_env_fn, policy, frames_per_batch, collector_kwargs, backend)
        status.put((rank, "ready", None))
        _init_group(backend, rank, world_size, addr, port, _WORKER_IDLE_TIMEOUT)
        worker.loop()
    except BaseException:  # report, then exit non-zero: the learner raises with this traceback
        report = traceback.format_exc()
        if len(report) > _MAX_REPORT_CHARS:
            report = "...\n" + report[-_MAX_REPORT_CHARS:]
        status.put((rank, "error", report))
        # in the pipe before the connections close: the learner, woken by a closed connection, reads it
        status.close()
        status.join_thread()
        raise SystemExit(1)
    finally:
        if worker is not None:
            worker.collector.shutdown()
        if dist.is_initialized():
            dist.destroy_process_group()


def run_worker(create_env_fn: Any = None, policy: Any = None, **collector_kwargs: Any) -> None:
    """The worker side under ``torchrun`` (ranks ``1..N``); returns when the learner shuts down.

    With no argument, the worker receives ``create_env_fn``, ``policy`` and the collector options from
    rank 0 (pickled through ``torch.distributed.broadcast_object_list``: only run it inside a trusted
    job). Reads ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` (set by torchrun).
    """
    if not dist.is_initialized():  # an idle worker waits as long as the learner trains
        dist.init_process_group(
            os.environ.get("RL_COLLECT_BACKEND", "gloo"), init_method="env://", timeout=_WORKER_IDLE_TIMEOUT
        )
    rank, world_size = dist.get_rank(), dist.get_world_size()
    config: list[Any] = [None]
    dist.broadcast_object_list(config, src=0)
    env_fns, remote_policy, frames_per_batch, kwargs, backend = config[0]
    create_env_fn = create_env_fn if create_env_fn is not None else env_fns[rank - 1]
    policy = policy if policy is not None else remote_policy
    kwargs = {**kwargs, **collector_kwargs}
    worker = _Worker(rank, world_size - 1, create_env_fn, policy, frames_per_batch, kwargs, backend)
    try:
        worker.loop()
    finally:
        worker.collector.shutdown()
        dist.destroy_process_group()


# ---------------------------------------------------------------------- learner side
class DistributedCollector:
    """Collector workers on ``torch.distributed``: the learner is rank 0, workers are ranks ``1..N``.

    Each worker runs a :class:`~rl_collect.Collector` on its env factory. With ``sync=True`` every
    iteration asks each worker for ``frames_per_batch / N`` frames and yields their concatenation (along
    dim 0); with ``sync=False`` each worker keeps one ``frames_per_batch`` request in flight and the first
    ready batch is yielded, tagged with ``("collector", "worker_id")``. Total frames are exact (the last
    requests are cut). Trajectory ids are unique across workers (``local_id * N + worker``).

    Args:
        create_env_fn: an env factory, or a list of them (one worker each).
        policy: as for :class:`~rl_collect.Collector`; must be picklable (``launcher="mp"``).
        frames_per_batch: frames per yielded batch.
        total_frames: total frames (``-1``: never stop).
        num_workers: the number of workers (default: ``len(create_env_fn)`` or 2).
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (GPU).
        master_addr, master_port: the rendezvous address (``master_port=None``: a free port); with
            ``launcher="mp"`` the learner's store listens on this address only (loopback by default).
        sync: see above.
        launcher: ``"mp"`` (spawn workers) or ``"torchrun"`` (the workers call :func:`run_worker`).
        timeout: seconds a worker may take to deliver a batch before the learner raises a
            ``TimeoutError`` naming it (start-up may take ``max(timeout, 60)`` s: spawning imports
            torch). Idle workers wait for their next command as long as the learner needs; spawned
            workers die with the learner.
        **collector_kwargs: passed to each worker's :class:`~rl_collect.Collector`.

    Examples:
        >>> from rl_envs import PendulumEnv
        >>> collector = DistributedCollector(PendulumEnv, None, frames_per_batch=20, total_frames=50,
        ...                                  num_workers=2)  # doctest: +SKIP
        >>> [b.numel() for b in collector]  # doctest: +SKIP
        [20, 20, 10]
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        create_env_fn: Sequence[Callable] | Callable,
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        num_workers: int | None = None,
        backend: str = "gloo",
        master_addr: str = "127.0.0.1",
        master_port: int | None = None,
        sync: bool = True,
        launcher: str = "mp",
        timeout: float = 120.0,
        **collector_kwargs: Any,
    ) -> None:
        check_positive_int("DistributedCollector", "frames_per_batch", frames_per_batch)
        if not isinstance(total_frames, int) or (total_frames < 1 and total_frames != -1):
            raise ValueError(f"DistributedCollector: total_frames must be a positive int or -1, got {total_frames!r}.")
        if launcher not in ("mp", "torchrun"):
            raise ValueError(f"DistributedCollector: launcher must be 'mp' or 'torchrun', got {launcher!r}.")
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"DistributedCollector: backend must be 'gloo' or 'nccl', got {backend!r}.")
        if isinstance(create_env_fn, (list, tuple)):
            if num_workers is not None and num_workers != len(create_env_fn):
                raise ValueError(
                    f"DistributedCollector: num_workers={num_workers} but {len(create_env_fn)} env factories."
                )
            env_fns = list(create_env_fn)
        else:
            if launcher == "torchrun":
                num_workers = int(os.environ["WORLD_SIZE"]) - 1 if num_workers is None else num_workers
            env_fns = [create_env_fn] * (num_workers if num_workers is not None else 2)
        self.num_workers = len(env_fns)
        if self.num_workers < 1:
            raise ValueError("DistributedCollector: needs at least one worker.")
        if sync and frames_per_batch % self.num_workers:
            raise ValueError(
                f"DistributedCollector(sync=True): frames_per_batch={frames_per_batch} must be a "
                f"multiple of num_workers={self.num_workers}."
            )
        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.sync = sync
        self.backend = backend
        self.launcher = launcher
        self.timeout = float(timeout)
        self.policy = policy
        self.policy_version = 0
        self._frames = 0  # yielded
        self._dispatched = 0
        self._traj_offset = 0  # added to the trajectory ids of a resumed run (load_state_dict)
        self._traj_end = 0  # one past the largest trajectory id yielded
        self._procs: list = []
        self._status: Any = None
        self._reports: dict[int, str] = {}  # rank -> the traceback a failed worker sent
        self._shut = False
        self._failed = False  # a wait on a worker failed: shutdown does not wait on them again
        self._device = torch.device("cpu")
        world_size = self.num_workers + 1
        self._worker_frames = frames_per_batch // self.num_workers if sync else frames_per_batch
        if launcher == "mp":
            ctx = mp.get_context("spawn")
            self._status = ctx.Queue()
            # the kernel's parent-death signal follows the starting thread: only ask for it from the main one
            kernel_signal = threading.current_thread() is threading.main_thread()
            try:
                store = _learner_store(master_addr, master_port or 0, world_size, max(self.timeout, _START_TIMEOUT))
                port = store.port
                for rank in range(1, world_size):
                    proc = ctx.Process(
                        target=_mp_worker_main,
                        daemon=True,
                        name=f"rl_collect-dist-worker-{rank}",
                        args=(
                            rank,
                            world_size,
                            master_addr,
                            port,
                            backend,
                            os.getpid(),
                            kernel_signal,
                            env_fns[rank - 1],
                            policy,
                            self._worker_frames,
                            collector_kwargs,
                            self._status,
                        ),
                    )
                    proc.start()
                    self._procs.append(proc)
                self._wait_ready()
                # joining waits for every worker's start-up; each request then waits ``timeout`` (``_wait``)
                _init_group(
                    backend,
                    0,
                    world_size,
                    master_addr,
                    store,
                    datetime.timedelta(seconds=max(self.timeout, _START_TIMEOUT)),
                )
            except BaseException:
                self.shutdown()
                raise
        else:
            if not dist.is_initialized():
                dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=self.timeout))
            if dist.get_rank() != 0 or dist.get_world_size() != world_size:
                raise RuntimeError(
                    f"DistributedCollector(launcher='torchrun') must run on rank 0 of a world of "
                    f"{world_size}; got rank {dist.get_rank()} of {dist.get_world_size()}."
                )
            dist.broadcast_object_list([(env_fns, policy, self._worker_frames, collector_kwargs, backend)], src=0)
        self._device = _device_for(backend)
        self._pending: dict[int, Any] = {}  # rank -> frames
        self._sent_at: dict[int, float] = {}  # rank -> when its request in flight was sent
        self._scheme = DistributedWeightSyncScheme(src=0, device=self._device, wait=self._wait)
        self._scheme.init_sender(None, range(1, self.num_workers + 1))

    # ------------------------------------------------------------------ faults
    def _worker_error(self, wait: float = 0.0) -> RuntimeError | None:
        """An exception naming the workers that died or reported an error (with their tracebacks), or None.

        Reads the workers' reports, waiting up to ``wait`` seconds for one.
        """
        self._read_reports(wait)
        dead = {r: p for r, p in enumerate(self._procs, start=1) if p.exitcode is not None}
        if dead:  # a worker flushes its report before it exits: what is not in the pipe now never comes
            self._read_reports(0.0)
        if not dead and not self._reports:
            return None
        names = ", ".join(
            f"{p.name} (exit code {p.exitcode})" if r in dead else f"{p.name} (raised, exiting)"
            for r, p in enumerate(self._procs, start=1)
            if r in dead or r in self._reports
        )
        detail = "\n".join(f"worker {r}:\n{text}" for r, text in sorted(self._reports.items()))
        return RuntimeError(
            f"DistributedCollector: worker process died or failed: {names}.\n{detail or 'no traceback (killed)'}"
        )

    def _read_reports(self, wait: float) -> None:
        """Moves the error reports waiting in the status queue to ``_reports`` (waits up to ``wait`` s for one)."""
        while self._status is not None:
            try:
                rank, kind, text = self._status.get(timeout=wait)
            except (queue.Empty, OSError, ValueError):  # nothing (more), or the queue is closed
                return
            if kind == "error":
                self._reports[rank] = text
            wait = 0.0

    def _wait_ready(self) -> None:
        ready: set = set()
        deadline = time.monotonic() + max(self.timeout, _START_TIMEOUT)
        while len(ready) < self.num_workers:
            try:
                rank, kind, text = self._status.get(timeout=0.05)
            except queue.Empty:
                if any(p.exitcode is not None for p in self._procs):  # (its report, if any, is read here)
                    error = self._worker_error()
                    assert error is not None  # a worker has exited
                    raise error from None
                if time.monotonic() > deadline:
                    late = sorted(set(range(1, self.num_workers + 1)) - ready)
                    raise TimeoutError(
                        f"DistributedCollector: worker rank(s) {late} not ready after "
                        f"{max(self.timeout, _START_TIMEOUT)}s."
                    ) from None
                continue
            if kind == "error":
                raise RuntimeError(f"DistributedCollector: worker {rank} failed to start:\n{text}")
            ready.add(rank)

    def _wait(self, start: Callable[[], Any], rank: int | None, seconds: float | None = None) -> int:
        """Posts a point-to-point op with ``rank`` (``start()`` returns its work handle; ``None`` rank: a
        receive from any worker) and waits up to ``seconds`` (default ``timeout``) for it; returns the
        worker's rank. A dead peer (connection closed, when posting or waiting) or the timeout raises,
        with the worker's traceback when it sent one. (Gloo's ``is_completed`` cannot be polled.)"""
        work = None
        try:
            work = start()
            work.wait(timeout=datetime.timedelta(seconds=self.timeout if seconds is None else seconds))
        except Exception as exc:
            # the error's traceback keeps this frame: it must not keep gloo's op, whose destructor
            # joins threads, alive until a forked child's garbage collector runs it
            work = None
            raise self._failure(exc, rank) from exc
        return rank if rank is not None else int(work._source_rank())

    def _failure(self, exc: BaseException, rank: int | None) -> Exception:
        """The exception for a failed wait on ``rank`` (``None``: on any worker with a request in flight).

        A timeout blames the silent workers: ``rank``, or every worker whose request in flight outlived
        the timeout. It is decided from the error itself, not from which processes exit next:
        gloo closes the learner's connections on a timeout, so healthy workers die right after it.
        (Idle workers never time out on their own.) Any other error means a peer went away: the
        worker that died is reported, with its traceback when it sent one.
        """
        self._failed = True  # shutdown() then stops the workers without waiting on them again
        timed_out = "timed out" in str(exc).lower() or "timeout" in str(exc).lower()
        if not timed_out:  # the failed worker's report (or its exit) may arrive after its connection broke
            deadline = time.monotonic() + _FAILURE_REPORT_S
            while self._procs and time.monotonic() < deadline:
                err = self._worker_error(wait=0.05)
                if err is not None:
                    return err
        if rank is not None:
            ranks = [rank]
        else:  # the requests that outlived the timeout (a healthy worker in flight is not named)
            now = time.monotonic()
            ranks = [r for r in sorted(self._pending) if now - self._sent_at[r] >= self.timeout - 0.01]
            ranks = ranks or sorted(self._pending)
        pids = {r: p.pid for r, p in enumerate(self._procs, start=1)}
        names = ", ".join(f"rank {r} (pid {pids[r]})" if r in pids else f"rank {r}" for r in ranks)
        why = f"did not answer within timeout={self.timeout}s (hung)" if timed_out else f"failed: {exc}"
        return TimeoutError(f"DistributedCollector: worker {names or '(none)'} {why}; every worker is stopped.")

    # ------------------------------------------------------------------ protocol
    def _send_cmd(self, rank: int, kind: int, arg0: int = 0) -> None:
        cmd = torch.zeros(DIST_COMMAND_LEN, dtype=torch.int64)
        cmd[0], cmd[1] = kind, arg0
        self._wait(lambda: dist.isend(cmd.to(self._device), dst=rank), rank)

    def _dispatch(self, rank: int, frames: int) -> None:
        self._scheme.flush(rank)  # weights it missed while busy
        self._send_cmd(rank, _CMD_COLLECT, frames)
        self._pending[rank] = frames
        self._sent_at[rank] = time.monotonic()  # its batch is due within ``timeout`` of this
        self._scheme.set_busy(rank, True)
        self._dispatched += frames

    def _receive(self, rank: int | None) -> tuple[int, TensorDictBase]:
        """The next batch from ``rank`` (``None``: from whichever worker answers first)."""
        sizes = torch.zeros(2, dtype=torch.int64, device=self._device)
        # bounded by the oldest request waited on: in async mode healthy workers keep answering, and a
        # hung one must still surface within ``timeout`` of its request
        due = min(self._sent_at[r] for r in ([rank] if rank is not None else self._pending)) + self.timeout
        src = self._wait(lambda: dist.irecv(sizes, src=rank), rank, max(due - time.monotonic(), 0.001))
        self._pending.pop(src)
        self._scheme.set_busy(src, False)
        header_len, buf_len = (int(x) for x in sizes.tolist())
        header = torch.empty(header_len, dtype=torch.uint8, device=self._device)
        self._wait(lambda: dist.irecv(header, src=src), src)
        buf = torch.empty(buf_len, dtype=torch.uint8, device=self._device)
        if buf_len:
            self._wait(lambda: dist.irecv(buf, src=src), src)
        batch = _unpack(bytes(header.cpu().numpy()), buf.cpu())
        ids = batch.get(_TRAJ, None)
        if ids is not None and ids.numel():
            if self._traj_offset:
                ids = torch.where(ids >= 0, ids + self._traj_offset, ids)
                batch.set(_TRAJ, ids)
            self._traj_end = max(self._traj_end, int(ids.max()) + 1)
        return src, batch

    def _next_request(self) -> int:
        """Frames for the next request (0 when the total is dispatched)."""
        if self.total_frames < 0:
            return self._worker_frames
        return max(0, min(self._worker_frames, self.total_frames - self._dispatched))

    @staticmethod
    def _cat(batches: list) -> TensorDictBase:
        shapes = {b.batch_size[1:] for b in batches}
        if len(shapes) == 1:
            return tdict.cat(batches, 0)
        return tdict.cat([b.reshape(-1) for b in batches], 0)

    # ------------------------------------------------------------------ public API
    @property
    def frames(self) -> int:
        """Frames yielded so far."""
        return self._frames

    def __iter__(self) -> Iterator[TensorDictBase]:
        if self._shut:
            raise RuntimeError("DistributedCollector: iterating after shutdown().")
        ranks = range(1, self.num_workers + 1)
        try:
            if self.sync:
                while self.total_frames < 0 or self._frames < self.total_frames:
                    remaining = self.total_frames - self._dispatched if self.total_frames > 0 else None
                    for i, rank in enumerate(ranks):
                        frames = self._worker_frames
                        if remaining is not None:  # split what is left evenly (exact total)
                            frames = min(frames, remaining // self.num_workers + (i < remaining % self.num_workers))
                        if frames > 0:
                            self._dispatch(rank, frames)
                    batches = [self._receive(rank)[1] for rank in ranks if rank in self._pending]
                    batch = self._cat(batches)
                    self._frames += batch.numel()
                    yield batch
            else:
                for rank in ranks:
                    frames = self._next_request()
                    if frames:
                        self._dispatch(rank, frames)
                while self._pending:
                    rank, batch = self._receive(None)
                    frames = self._next_request()
                    if frames:
                        self._dispatch(rank, frames)
                    batch.set(("collector", "worker_id"), torch.full(batch.batch_size, rank - 1, dtype=torch.int64))
                    self._frames += batch.numel()
                    yield batch
        except GeneratorExit:
            raise
        except BaseException:
            self.shutdown(raise_on_error=False)
            raise

    def update_policy_weights_(self, weights: TensorDictBase | None = None) -> None:
        """Sends new weights to every worker (``None``: the current weights of the policy given).

        In sync mode the very next batch uses them; in async mode every request dispatched from now on
        does (batches already in flight keep their ``("collector", "policy_version")``).
        """
        if weights is None:
            weights = _weights_of(self.policy)
            if weights is None:
                raise TypeError("DistributedCollector.update_policy_weights_: the policy has no parameters.")
        self.policy_version += 1
        self._scheme.send(weights, self.policy_version)

    def state_dict(self) -> dict:
        """What a fresh collector with the same config needs to resume this run (see :meth:`load_state_dict`).

        Holds the frames yielded so far, the policy version, where trajectory ids continue and, for an
        ``nn.Module`` policy, its weights (``"policy_state_dict"``, a state dict of detached tensor copies).
        Requests in flight (async mode) are not part of it: a resumed collector collects their frames again.
        """
        traj_start = -(-self._traj_end // self.num_workers) * self.num_workers  # keeps id % N == worker
        state: dict = {"frames": self._frames, "policy_version": self.policy_version, "traj_start": traj_start}
        if isinstance(self.policy, torch.nn.Module):
            state["policy_state_dict"] = {k: v.detach().clone() for k, v in self.policy.state_dict().items()}
        return state

    def load_state_dict(self, state: dict) -> None:
        """Resumes from :meth:`state_dict`: the frame count (the run still stops at ``total_frames``) and the
        policy version continue, trajectory ids do not collide with the earlier run's, and the weights are
        loaded into the policy given and sent to the workers, so the next batch uses them and carries the
        restored version. Call it before iterating.
        """
        if self._shut:
            raise RuntimeError("DistributedCollector.load_state_dict: the collector was shut down.")
        self._frames = self._dispatched = int(state["frames"])
        self._traj_offset = int(state.get("traj_start", 0))
        self._traj_end = max(self._traj_end, self._traj_offset)
        weights = None
        if "policy_state_dict" in state:
            if not isinstance(self.policy, torch.nn.Module):
                raise TypeError(
                    "DistributedCollector.load_state_dict: the state has policy weights but the "
                    "policy given has no parameters."
                )
            self.policy.load_state_dict(state["policy_state_dict"])
            weights = _weights_of(self.policy)
        self.policy_version = int(state.get("policy_version", 0))
        self._scheme.send(weights, self.policy_version)  # the workers apply it before their next batch

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the workers' collectors in turn, each with the seed the previous one returned.

        Every random stream of every worker (its env's, its collector's) gets a distinct seed
        (:mod:`tdict.seeding`). Returns the seed after the last worker's (``seed`` with ``static_seed``).
        Call it when no request is in flight (before iterating, or between the batches of a sync run).
        """
        seed = check_seed("DistributedCollector.set_seed", seed)
        if self._pending:
            raise RuntimeError(
                f"DistributedCollector.set_seed: workers {sorted(r - 1 for r in self._pending)} are collecting "
                "(async iteration); seed before iterating or once the run is over."
            )

        def seed_worker(rank: int) -> Callable[[int], int]:
            def run(seed: int) -> int:
                self._send_cmd(rank, _CMD_SEED, seed)
                reply = torch.zeros(1, dtype=torch.int64, device=self._device)
                self._wait(lambda: dist.irecv(reply, src=rank), rank)
                return int(reply.item())

            return run

        following = chain_seeds(seed, [seed_worker(rank) for rank in range(1, self.num_workers + 1)])
        return seed if static_seed else following

    def shutdown(self, raise_on_error: bool = False) -> None:
        """Stops the workers, destroys the process group and joins (then kills) the worker processes."""
        if self._shut:
            return
        self._shut = True
        stopped = False
        if dist.is_initialized():
            alive = not self._failed and (not self._procs or all(p.exitcode is None for p in self._procs))
            if alive:
                try:
                    for rank in list(self._pending):  # drain requests in flight, then stop
                        self._receive(rank)
                    for rank in range(1, self.num_workers + 1):
                        self._send_cmd(rank, _CMD_STOP)
                    stopped = True
                except Exception:
                    if raise_on_error:
                        raise
            self._pending.clear()
            if not self._procs:  # torchrun
                dist.destroy_process_group()
        elif self._procs:
            pass
        for proc in self._procs:
            if stopped:
                proc.join(timeout=5.0)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5.0)
        if self._procs and dist.is_initialized():
            dist.destroy_process_group()
        if self._status is not None:
            self._status.close()
            self._status.join_thread()
        self._procs = []

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (
            f"DistributedCollector(num_workers={self.num_workers}, backend={self.backend!r}, sync={self.sync}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames}, frames={self._frames})"
        )
