"""``td.map``: chunks in worker processes, results concatenated; failures surface, nothing leaks.

Workers need importable functions: they live in ``_tdict_mp_children`` (this folder is put on
``sys.path``, which children inherit). Most tests share one long-lived pool, or use the
``forkserver`` start method with torch preloaded, so that each test does not pay a fresh
``import torch``; one test covers the default (``spawn``) path end to end.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import pytest
import torch
import torch.multiprocessing as mp

from tdict import TensorDict

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.append(_HERE)
import _tdict_mp_children as children  # noqa: E402

# Failure tests pass this timeout so that a regression in death detection fails them (as a
# TimeoutError) instead of hanging the test run.
_GUARD_S = 60.0

_FORKSERVER = mp.get_context("forkserver")
_FORKSERVER.set_forkserver_preload(["torch", "tdict", "_tdict_mp_children"])


# --------------------------------------------------------------------------- helpers
def _make_td(shape=(6, 4)) -> TensorDict:
    n = shape[0]
    return TensorDict(
        {
            "x": torch.arange(float(torch.Size(shape).numel())).reshape(shape),
            "idx": torch.arange(n).reshape(n, *(1,) * (len(shape) - 1)).expand(shape).clone(),
            "n": {"z": torch.randn(*shape, 3), "deep": {"m": torch.randint(0, 9, (*shape, 2, 2))}},
        },
        batch_size=shape,
    )


def _assert_same(actual, expected) -> None:
    assert actual.batch_size == expected.batch_size
    assert set(actual.keys(True, True)) == set(expected.keys(True, True))
    for key, value in expected.items(True, True):
        got = actual.get(key)
        assert got.shape == value.shape, key
        assert got.dtype == value.dtype, key
        assert torch.equal(got, value), key


def _live_descendants() -> set[int]:
    """Pids of this process's running (non-zombie) descendants, from /proc."""
    children_of: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        children_of.setdefault(int(fields[1]), []).append((int(entry), fields[0]))
    out, todo = set(), [os.getpid()]
    while todo:
        for pid, state in children_of.get(todo.pop(), []):
            if state not in ("Z", "X"):
                out.add(pid)
                todo.append(pid)
    return out


def _assert_no_new_processes(before: set[int], wait_s: float = 5.0) -> None:
    end = time.monotonic() + wait_s
    while True:
        extra = _live_descendants() - before
        if not extra or time.monotonic() > end:
            break
        time.sleep(0.05)
    assert not extra, f"worker processes left running: {sorted(extra)}"


@pytest.fixture(scope="module", autouse=True)
def _helpers_running():
    """Start the forkserver and the resource tracker up front: they outlive single tests by
    design (one per test process), so they must already be in every "before" snapshot."""
    from multiprocessing import forkserver, resource_tracker

    forkserver.ensure_running()
    resource_tracker.ensure_running()


@pytest.fixture(scope="module")
def pool():
    executor = ProcessPoolExecutor(2, mp_context=_FORKSERVER)
    yield executor
    executor.shutdown(wait=True, cancel_futures=True)


# --------------------------------------------------------------------------- results match fn(td)
@pytest.mark.parametrize(
    "dim, split",
    [
        (0, {}),
        (0, {"num_chunks": 3}),
        (0, {"chunksize": 4}),  # uneven: 4 + 2
        (1, {}),
        (1, {"chunksize": 1}),
        (-1, {"num_chunks": 10}),  # more chunks than elements: capped
    ],
)
def test_map_matches_in_process(pool, dim, split):
    td = _make_td()
    expected = children.add_y(td)
    result = td.map(children.add_y, dim=dim, pool=pool, **split)
    _assert_same(result, expected)


def test_map_three_batch_dims_and_apply(pool):
    td = _make_td((3, 2, 5))
    _assert_same(td.map(children.leaves_plus_one, dim=2, pool=pool, num_chunks=2), children.leaves_plus_one(td))
    _assert_same(td.map(children.leaves_plus_one, dim=1, pool=pool), children.leaves_plus_one(td))


def test_map_chunksize_zero_unbinds_and_stacks(pool):
    td = _make_td((3, 4))
    result = td.map(children.add_y, dim=1, chunksize=0, pool=pool)
    _assert_same(result, children.add_y(td))


def test_map_none_results(pool):
    td = _make_td()
    assert td.map(children.return_none, pool=pool, num_chunks=3) is None
    # chunks whose fn returned None are left out of the concatenation (tensordict semantics)
    result = td.map(children.none_on_first, pool=pool, num_chunks=3)
    _assert_same(result, td[2:])


def test_map_empty_dim(pool):
    td = _make_td((0, 4))
    _assert_same(td.map(children.add_y, pool=pool), children.add_y(td))
    assert td.map(children.add_y, chunksize=0, pool=pool) is None  # no element, no call


def test_map_tensor_results(pool):
    td = _make_td()
    result = td.map(children.x_plus_one, dim=1, pool=pool, chunksize=3)
    assert torch.equal(result, td["x"] + 1)


def test_map_input_goes_through_shared_memory(pool):
    td = _make_td()
    assert not td.is_shared()
    expected = td["x"] + 1
    assert td.map(children.add_one_inplace, dim=1, pool=pool) is None
    # the chunks the workers wrote into are views of the parent's (now shared) storage
    assert td.is_shared()
    assert torch.equal(td["x"], expected)


def test_map_writes_into_shared_out(pool):
    td = _make_td()
    out = children.add_y(td).zero_().share_memory_()
    returned = td.map(children.add_y, pool=pool, num_chunks=3, out=out)
    assert returned is out
    _assert_same(out, children.add_y(td))


def test_map_fn_returning_its_modified_chunk(pool):
    """The pattern of tensordict's docs, on a shared (hence locked) input."""
    td = _make_td().share_memory_()
    result = td.map(children.set_y_on_chunk, dim=1, pool=pool)
    assert torch.equal(result["y"], td["x"] + 1)
    assert "y" not in td.keys()  # the input's structure is untouched
    _assert_same(result.exclude("y"), td)


def test_map_leaves_caller_pool_open(pool):
    td = _make_td()
    td.map(children.x_plus_one, pool=pool)
    assert pool.submit(abs, -3).result(timeout=30) == 3


# --------------------------------------------------------------------------- own pools
def test_map_default_spawn_pool():
    """The default path: map creates a spawn pool, uses it, and shuts it down."""
    td = _make_td()
    before = _live_descendants()
    result = td.map(children.add_y, num_workers=2)
    _assert_same(result, children.add_y(td))
    _assert_no_new_processes(before)


def test_map_forkserver_pool_uses_several_workers():
    td = _make_td((8,))
    before = _live_descendants()
    pids = td.map(children.worker_pid, num_workers=2, chunksize=1, mp_start_method="forkserver")
    assert pids.shape == (8,)
    assert len(set(pids.tolist()) & before) == 0
    _assert_no_new_processes(before)


def test_map_generator_seeds_workers():
    td = _make_td((4,))
    draws = [
        td.map(
            children.draw_random,
            num_workers=1,
            mp_start_method="forkserver",
            generator=torch.Generator().manual_seed(seed),
        )
        for seed in (1, 1, 2)
    ]
    assert torch.equal(draws[0], draws[1])
    assert not torch.equal(draws[0], draws[2])


# --------------------------------------------------------------------------- failures
def test_map_worker_death_raises_and_leaves_nothing_running():
    td = _make_td()
    td["idx_max"] = torch.full(td.batch_size, 5)
    before = _live_descendants()
    start = time.monotonic()
    # (exit codes reported through the forkserver are not reliable: don't match them here)
    with pytest.raises(BrokenProcessPool, match=r"worker process died .* chunk \d of 3"):
        td.map(children.exit_on_last, num_workers=2, num_chunks=3, mp_start_method="forkserver", timeout=_GUARD_S)
    assert time.monotonic() - start < 30
    _assert_no_new_processes(before)


def test_map_worker_death_default_spawn_pool():
    td = _make_td()
    before = _live_descendants()
    start = time.monotonic()
    with pytest.raises(BrokenProcessPool, match=r"worker process died \(exit codes \[3\]\)"):
        td.map(children.exit_always, num_workers=1, timeout=_GUARD_S)
    assert time.monotonic() - start < 60
    _assert_no_new_processes(before)


def test_map_fn_exception_keeps_type_and_names_chunk(pool):
    td = _make_td()
    with pytest.raises(ValueError, match="boom") as info:
        td.map(children.raise_value_error, pool=pool, num_chunks=2, timeout=_GUARD_S)
    assert any("chunk 0 of 2" in note for note in getattr(info.value, "__notes__", []))
    # an exception in fn does not break a caller's pool
    assert pool.submit(abs, -1).result(timeout=30) == 1


def test_map_fn_exception_own_pool_cleans_up():
    td = _make_td()
    before = _live_descendants()
    with pytest.raises(ValueError, match="boom"):
        td.map(children.raise_value_error, num_workers=2, mp_start_method="forkserver", timeout=_GUARD_S)
    _assert_no_new_processes(before)


def test_map_sys_exit_in_fn_does_not_exit_parent(pool):
    with pytest.raises(RuntimeError, match=r"sys.exit\(7\)"):
        _make_td().map(children.call_sys_exit, pool=pool, num_chunks=1, timeout=_GUARD_S)


def test_map_timeout_stops_workers():
    td = _make_td()
    before = _live_descendants()
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="timeout=0.5"):
        td.map(children.sleep_long, num_workers=2, mp_start_method="forkserver", timeout=0.5)
    assert time.monotonic() - start < 20
    _assert_no_new_processes(before)


def test_map_multiprocessing_pool_death_detected():
    td = _make_td()
    mp_pool = _FORKSERVER.Pool(1)
    try:
        _assert_same(td.map(children.add_y, pool=mp_pool, num_chunks=2, timeout=_GUARD_S), children.add_y(td))
        start = time.monotonic()
        with pytest.raises(BrokenProcessPool, match="exit codes \\[3\\]"):
            td.map(children.exit_always, pool=mp_pool, timeout=_GUARD_S)
        assert time.monotonic() - start < 20
        # the pool replaced its dead worker: it is still usable, and that replacement is no death
        _assert_same(td.map(children.add_y, pool=mp_pool, timeout=_GUARD_S), children.add_y(td))
    finally:
        mp_pool.terminate()
        mp_pool.join()


# --------------------------------------------------------------------------- argument errors (no pool started)
def test_map_rejects_unpicklable_fn_before_starting_workers():
    td = _make_td()
    before = _live_descendants()
    with pytest.raises(TypeError, match="cannot be pickled"):
        td.map(lambda t: t, num_workers=2)
    assert _live_descendants() - before == set()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"chunksize": 2, "num_chunks": 2}, ValueError, "not both"),
        ({"chunksize": -1}, ValueError, "chunksize"),
        ({"num_chunks": 0}, ValueError, "num_chunks"),
        ({"num_workers": 0}, ValueError, "num_workers"),
        ({"dim": 2}, IndexError, "dim"),
        ({"pool": object()}, TypeError, "pool"),
    ],
)
def test_map_argument_errors(kwargs, error, match):
    td = _make_td()
    with pytest.raises(error, match=match):
        td.map(children.add_y, **kwargs)
    assert not td.is_shared()  # rejected before anything was moved to shared memory
