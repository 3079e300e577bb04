"""``td.map``: apply a function to chunks of a collection in worker processes.

The collection is split along a batch dim into chunks, each chunk goes to a worker process,
``fn(chunk)`` runs there and the results are concatenated (``torch.cat``) along the same dim in
the parent. Semantics follow tensordict 0.14's ``TensorDictBase.map``.

Zero-copy input: before the first chunk is sent, every CPU leaf of the input is moved to shared
memory in place (``Tensor.share_memory_()``; memory-mapped leaves are skipped, they travel by
filename). Chunks are views of those leaves, and ``torch.multiprocessing`` pickles a shared tensor
as a handle to its segment, so a worker maps the parent's memory instead of receiving a copy.
This is what ``torch.multiprocessing`` would do lazily while pickling anyway; doing it once up
front keeps the move out of the queue's feeder thread. Consequences: ``td.is_shared()`` is true
afterwards, and in-place writes a worker makes to its chunk are seen by the parent.

Start method: ``"spawn"`` unless ``mp_start_method`` says otherwise. ``fork`` copies a parent
whose OpenMP / intra-op thread pools or CUDA context may already be initialised, which can
deadlock or crash the child; ``spawn`` is what torch recommends and works everywhere. It costs a
fresh interpreter (one ``import torch``) per worker, so for repeated calls pass a long-lived
``pool``. With ``spawn``, ``fn`` must be importable by the child: a module-level function (or a
picklable callable object), not a lambda or a function defined inside another function.

Failures: an exception raised by ``fn`` is re-raised in the parent with its original type (the
remote traceback is chained, a note names the chunk). A worker that dies (``os._exit``, a signal,
a segfault) raises :class:`~concurrent.futures.process.BrokenProcessPool` as soon as the death is
noticed, and ``timeout`` bounds a hang. When ``map`` created the pool, every worker is terminated
(then killed) and joined before the exception propagates, so nothing is left running. A pool
passed by the caller is never closed, shut down or terminated: that is the caller's job.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import wait as mp_wait
from typing import Any, Callable

import torch

from .utils import normalize_dim
from ..validation import check_non_negative_int, check_positive_int

__all__ = ["map_chunks"]

# Seconds a terminated worker gets to exit before it is killed.
_TERMINATE_GRACE_S = 5.0
# Poll period when waiting on a ``multiprocessing.Pool`` (which never reports dead workers itself).
_POLL_S = 0.05
# Seconds to wait for a ``multiprocessing.Pool`` to reap a worker that ended.
_REAP_S = 5.0


class _MapTimeout(Exception):
    """Internal: the deadline passed while a chunk was still running (not a TimeoutError from fn)."""


def map_chunks(
    td: Any,
    fn: Callable[[Any], Any],
    dim: int = 0,
    num_workers: int | None = None,
    chunksize: int | None = None,
    num_chunks: int | None = None,
    pool: Any = None,
    mp_start_method: str | None = None,
    *,
    out: Any = None,
    generator: torch.Generator | None = None,
    max_tasks_per_child: int | None = None,
    worker_threads: int = 1,
    timeout: float | None = None,
    index_with_generator: bool = False,
    pbar: bool = False,
) -> Any:
    """Run ``fn`` on chunks of ``td`` along batch dim ``dim`` in worker processes.

    Args:
        td: the collection to split (it must have at least ``dim + 1`` batch dims).
        fn: ``fn(chunk) -> TensorDict | Tensor | None``; picklable (module-level).
        dim: the batch dim to split along (negative values count from the last batch dim).
        num_workers: processes of the pool ``map`` creates; default: the CPUs this process may
            use, capped at the number of chunks. Ignored when ``pool`` is given.
        chunksize: elements per chunk; ``0`` unbinds ``td`` along ``dim`` and stacks the
            results (``torch.stack``) instead of concatenating them. Exclusive with ``num_chunks``.
        num_chunks: number of chunks (at most the size of ``dim``); default: one per worker.
        pool: a ``concurrent.futures.ProcessPoolExecutor`` or a ``multiprocessing.Pool`` to run
            on (its start method should be ``spawn``/``forkserver``); it is left open.
        mp_start_method: start method of the pool ``map`` creates (default ``"spawn"``).
        out: a collection to write the result into (same shape as the result). If it is in
            shared memory or memory-mapped, the workers write their chunk of it directly.
        generator: seeds the workers: worker ``i`` calls ``torch.manual_seed(base + i)`` with
            ``base`` drawn from ``generator`` (from the global RNG when ``None``).
        max_tasks_per_child: replace a worker after that many chunks (own pool only).
        worker_threads: ``torch.set_num_threads`` in each worker (own pool only).
        timeout: seconds to wait for all chunks; on expiry the own pool is torn down and
            :class:`TimeoutError` is raised. ``None`` waits as long as the workers live.
        index_with_generator, pbar: accepted for tensordict compatibility; no effect.

    Returns:
        ``torch.cat`` (``torch.stack`` for ``chunksize=0``) of the non-``None`` results along
        ``dim``; ``out`` when given; ``None`` when ``fn`` returned ``None`` for every chunk.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict({"x": torch.arange(6.0)}, batch_size=[6])
        >>> td.map(TensorDict.clone, num_workers=2)["x"].tolist()
        [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    """
    del index_with_generator, pbar
    dim = normalize_dim(dim, td.batch_dims)
    if chunksize is not None and num_chunks is not None:
        raise ValueError(
            f"map: pass chunksize or num_chunks, not both (got chunksize={chunksize}, num_chunks={num_chunks})."
        )
    check_non_negative_int("map", "chunksize", chunksize, allow_none=True)
    check_positive_int("map", "num_chunks", num_chunks, allow_none=True)
    if num_workers is not None and num_workers <= 0:
        raise ValueError(f"map: num_workers must be positive, got {num_workers}.")
    if timeout is not None and timeout <= 0:
        raise ValueError(f"map: timeout must be positive seconds or None, got {timeout}.")

    # Registers torch's reducers on multiprocessing's ForkingPickler (shared-memory handles).
    import torch.multiprocessing  # noqa: F401
    from multiprocessing.reduction import ForkingPickler

    try:
        ForkingPickler.dumps(fn)
    except (pickle.PicklingError, AttributeError, TypeError) as err:
        raise TypeError(
            f"map: fn {fn!r} cannot be pickled, so it cannot reach the worker processes; use a function "
            f"defined at module level (not a lambda or a nested function) or a picklable callable object. "
            f"Pickling failed with: {err}"
        ) from err

    if pool is not None and not isinstance(pool, Executor) and not hasattr(pool, "apply_async"):
        raise TypeError(
            f"map: pool must be a concurrent.futures Executor or a multiprocessing Pool, got {type(pool).__name__}."
        )
    write_in_workers = out is not None and _is_shared_or_memmap(out)
    if out is not None:
        _check_out(out, td, dim)

    if pool is not None:
        split_workers = _pool_size(pool)
    else:
        split_workers = num_workers if num_workers is not None else _available_cpus()
    stacked = chunksize == 0
    chunks = _split(td, dim, chunksize, num_chunks, split_workers)
    if not chunks:  # chunksize=0 over an empty dim: nothing to call fn on
        return out

    _share_leaves(td)
    task_fn, tasks = fn, chunks
    if write_in_workers:
        task_fn = _WriteInto(fn)
        tasks = list(zip(chunks, _split(out, dim, chunksize, num_chunks, split_workers)))

    deadline = None if timeout is None else time.monotonic() + timeout
    if pool is None:
        results = _run_own_pool(
            task_fn,
            tasks,
            min(split_workers, len(tasks)),
            mp_start_method,
            generator,
            max_tasks_per_child,
            worker_threads,
            deadline,
            timeout,
        )
    elif isinstance(pool, Executor):
        results = _run_executor(pool, task_fn, tasks, deadline, timeout, own=False)
    else:
        results = _run_mp_pool(pool, task_fn, tasks, deadline, timeout)

    if write_in_workers:
        return out
    results = [r for r in results if r is not None]
    if not results:
        return out
    result = torch.stack(results, dim) if stacked else torch.cat(results, dim)
    if out is not None:
        out.update_(result)
        return out
    return result


# --------------------------------------------------------------------------- splitting
def _split(td: Any, dim: int, chunksize: int | None, num_chunks: int | None, num_workers: int) -> list:
    length = td.batch_size[dim]
    if chunksize == 0:
        return list(td.unbind(dim))
    if length == 0:
        return [td]
    if chunksize is not None:
        chunks = td.split(chunksize, dim)
    else:
        chunks = td.chunk(min(num_chunks if num_chunks is not None else num_workers, length), dim)
    for chunk in chunks:  # new structures (split keeps the lock): fn may add keys to its chunk
        chunk._set_lock(False)
    return list(chunks)


def _available_cpus() -> int:
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def _pool_size(pool: Any) -> int:
    for attr in ("_max_workers", "_processes"):
        size = getattr(pool, attr, None)
        if isinstance(size, int) and size > 0:
            return size
    return _available_cpus()


def _share_leaves(td: Any) -> None:
    """Move the CPU leaves of ``td`` to shared memory in place (what pickling would do, done once)."""
    from ..memmap import MemoryMappedTensor

    for leaf in td.values(True, True):
        if (
            isinstance(leaf, torch.Tensor)
            and leaf.device.type == "cpu"
            and not isinstance(leaf, MemoryMappedTensor)
            and not leaf.is_shared()
        ):
            leaf.share_memory_()


def _is_shared_or_memmap(td: Any) -> bool:
    return td.is_shared() or td.is_memmap()


def _check_out(out: Any, td: Any, dim: int) -> None:
    if out.batch_dims <= dim or out.batch_size[dim] != td.batch_size[dim]:
        raise ValueError(
            f"map: out has batch size {list(out.batch_size)}, its dim {dim} must match the input's {list(td.batch_size)}."
        )


class _WriteInto:
    """Worker-side wrapper: ``fn(chunk)`` written in place into the matching chunk of ``out``."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn

    def __call__(self, pair: tuple) -> None:
        chunk, out_chunk = pair
        result = self.fn(chunk)
        if result is not None:
            out_chunk.update_(result)
        return None


# --------------------------------------------------------------------------- workers
def _worker_init(base_seed: int, counter: Any, num_threads: int) -> None:
    with counter.get_lock():
        worker_id = counter.value
        counter.value += 1
    seed = base_seed + worker_id
    torch.manual_seed(seed)
    import random

    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % 2**32)
    torch.set_num_threads(num_threads)


def _run_own_pool(
    fn, tasks, workers, start_method, generator, max_tasks_per_child, worker_threads, deadline, timeout
) -> list:
    import torch.multiprocessing as mp

    ctx = mp.get_context(start_method or "spawn")
    base_seed = int(torch.randint(0, 2**62, (), generator=generator))
    counter = ctx.Value("q", 0)
    kwargs = {"max_tasks_per_child": max_tasks_per_child} if max_tasks_per_child is not None else {}
    executor = ProcessPoolExecutor(
        max_workers=max(workers, 1),
        mp_context=ctx,
        initializer=_worker_init,
        initargs=(base_seed, counter, worker_threads),
        **kwargs,
    )
    ok = False
    try:
        results = _run_executor(executor, fn, tasks, deadline, timeout, own=True)
        ok = True
        return results
    finally:
        if ok:
            executor.shutdown(wait=True)
        else:
            _tear_down(executor)


def _tear_down(executor: Executor) -> None:
    """Terminate, then kill, every worker of an executor ``map`` owns, and join them all."""
    procs = list((getattr(executor, "_processes", None) or {}).values())
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    end = time.monotonic() + _TERMINATE_GRACE_S
    for proc in procs:
        proc.join(max(end - time.monotonic(), 0.0))
        if proc.is_alive():
            proc.kill()
            proc.join()
    executor.shutdown(wait=True, cancel_futures=True)


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def _run_executor(executor: Executor, fn, tasks, deadline, timeout, *, own: bool) -> list:
    try:
        futures = [executor.submit(fn, task) for task in tasks]
    except BrokenProcessPool as err:
        raise BrokenProcessPool(
            f"map: the process pool is broken (a worker died earlier) and cannot take chunks: {err}"
        ) from err
    procs = list((getattr(executor, "_processes", None) or {}).values())
    results = []
    index = 0
    try:
        for index, future in enumerate(futures):
            try:
                results.append(future.result(timeout=_remaining(deadline)))
            except TimeoutError:
                if future.done():  # fn itself raised TimeoutError
                    raise
                raise _MapTimeout() from None
            except SystemExit as exit_:  # sys.exit() in fn: must not end the parent
                raise RuntimeError(f"map: fn called sys.exit({exit_.code!r}) in a worker process.") from exit_
    except BaseException as err:
        for future in futures:
            future.cancel()
        if own:
            _tear_down(executor)
        _raise_for(err, index, len(tasks), [p.exitcode for p in procs], timeout)
    return results


def _run_mp_pool(pool: Any, fn, tasks, deadline, timeout) -> list:
    """Run on a ``multiprocessing.Pool``, which replaces dead workers silently (their task never
    finishes): watch the workers while waiting so that a death surfaces as an exception.

    A watched worker that ends is a death (with ``maxtasksperchild``, only with a nonzero exit code).
    So is a new worker beyond the ones the pool was short of when the call began: it replaced a
    worker that started and died between two looks. The pool may be short because it is still
    replacing a worker that died before this call (it drops the dead one, then starts the new one).
    """
    size = _pool_size(pool)
    workers = {id(p): p for p in list(getattr(pool, "_pool", ())) if not _ended(p)}
    expected = max(size - len(workers), 0)  # replacements due to deaths before this call
    recycles = getattr(pool, "_maxtasksperchild", None) is not None
    pending = [pool.apply_async(fn, (task,)) for task in tasks]
    results = []
    replaced = False
    for index, async_result in enumerate(pending):
        while not async_result.ready():
            async_result.wait(_POLL_S)
            if async_result.ready():
                break
            for proc in list(getattr(pool, "_pool", ())):
                if id(proc) not in workers:
                    workers[id(proc)] = proc
                    if expected:
                        expected -= 1
                    elif not recycles:
                        replaced = True
            ended = [p for p in workers.values() if _ended(p)]
            codes = _exit_codes(pool, ended)
            for proc, code in zip(ended, codes):
                if recycles and code == 0:  # recycled after maxtasksperchild tasks: not a death
                    del workers[id(proc)]
            codes = [c for c in codes if c != 0 or not recycles]
            if codes or replaced:
                _raise_for(BrokenProcessPool("worker died"), index, len(tasks), codes, timeout)
            if deadline is not None and time.monotonic() > deadline:
                _raise_for(_MapTimeout(), index, len(tasks), [], timeout)
        try:
            results.append(async_result.get())
        except BaseException as err:
            _raise_for(err, index, len(tasks), [], timeout)
    return results


def _ended(proc: Any) -> bool:
    """Whether a pool worker has ended, without reading its exit status (see :func:`_exit_codes`)."""
    try:
        return bool(mp_wait([proc.sentinel], 0))
    except (ValueError, OSError):  # its sentinel is closed: it ended and was cleaned up
        return True


def _exit_codes(pool: Any, procs: list) -> list:
    """Exit codes of ended pool workers, read once the pool's handler thread has reaped them.

    A forkserver child's status can be read only once: had this thread read it while the handler
    did, one of them would get 255 instead of the real code. The wait is bounded (a terminated
    pool reaps nothing).
    """
    end = time.monotonic() + _REAP_S
    while any(p in getattr(pool, "_pool", ()) for p in procs) and time.monotonic() < end:
        time.sleep(_POLL_S / 5)
    return [p.exitcode for p in procs]


def _raise_for(err: BaseException, index: int, n_chunks: int, exitcodes: list, timeout: float | None):
    where = f"chunk {index} of {n_chunks}"
    if isinstance(err, BrokenProcessPool):
        codes = [c for c in exitcodes if c not in (None, 0)]
        raise BrokenProcessPool(
            f"map: a worker process died (exit codes {codes}) while {where} was pending or running; "
            f"fn must return normally (no os._exit / sys.exit, no crash of the interpreter), and fn and the chunks "
            f"must unpickle in a fresh interpreter (fn's module importable there; see the worker's stderr)."
        ) from err
    if isinstance(err, _MapTimeout):
        raise TimeoutError(f"map: {where} did not finish within timeout={timeout} s.") from None
    if isinstance(err, Exception) and sys.version_info >= (3, 11):  # add_note is new in 3.11
        err.add_note(f"(raised by map's fn in a worker process, on {where})")
    raise err
