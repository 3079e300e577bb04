"""One buffer, several processes: a shared LazyTensorStorage and a shared writer cursor
(rl_replay.shared.make_shared), child failures surfacing in the parent (BufferProcess)."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time

import pytest
import torch
from rl_replay import (
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
)
from rl_replay.shared import BufferProcess, make_shared
from tdict import TensorDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # children import the targets by name
import _replay_mp_children as children

# children fork from a server that has torch imported once (a spawn per child costs seconds)
CTX = "forkserver"
multiprocessing.get_context(CTX).set_forkserver_preload(["torch", "tdict", "rl_replay", "_replay_mp_children"])


def _shared(cap: int = 100, cls=ReplayBuffer) -> ReplayBuffer:
    return make_shared(
        cls(storage=LazyTensorStorage(cap), generator=torch.Generator().manual_seed(0)), children.rows(0, 1)
    )


def _reference(cap: int, batches: list) -> ReplayBuffer:
    rb = ReplayBuffer(storage=LazyTensorStorage(cap))
    for start, n in batches:
        rb.extend(children.rows(start, n))
    return rb


def _assert_same_storage(rb: ReplayBuffer, ref: ReplayBuffer) -> None:
    assert len(rb) == len(ref)
    assert rb.writer.state_dict() == ref.writer.state_dict()
    n = len(ref)
    got, want = rb.storage.get(torch.arange(n)), ref.storage.get(torch.arange(n))
    assert torch.equal(got["id"], want["id"]) and torch.equal(got["obs"], want["obs"])


def test_child_writes_parent_sees_items_and_cursor():
    rb = _shared(100)
    with BufferProcess(children.extend_rows, rb, 0, 30, context=CTX) as p:
        p.join(timeout=60)
    _assert_same_storage(rb, _reference(100, [(0, 30)]))
    sample = rb.sample(64)
    assert bool((sample["id"] < 30).all()) and torch.equal(sample["obs"][:, 1], 2 * sample["id"].float())
    # the parent writes next: it continues at the shared cursor; then a child wraps around
    rb.extend(children.rows(30, 10))
    assert rb.writer.state_dict() == {"_cursor": 40, "_write_count": 40}
    with BufferProcess(children.extend_rows, rb, 40, 85, context=CTX) as p:
        p.join(timeout=60)
    _assert_same_storage(rb, _reference(100, [(0, 30), (30, 10), (40, 85)]))
    assert rb.writer.state_dict() == {"_cursor": 25, "_write_count": 125}


def test_tensordict_buffer_shared_writes_index():
    rb = _shared(50, TensorDictReplayBuffer)
    assert "index" in rb.storage._storage.keys()  # noqa: SIM118  # make_shared allocated the writer's "index" entry too
    with BufferProcess(children.extend_rows, rb, 0, 20, context=CTX) as p:
        p.join(timeout=60)
    sample = rb.sample(16)
    assert torch.equal(sample["index"], sample["id"])  # stored position == id (no wrap yet)


def test_writer_in_child_sampler_in_parent_concurrently():
    rb = _shared(1000)
    seen = []
    with BufferProcess(children.extend_rows, rb, 0, 600, 20, 0.02, context=CTX) as p:  # ~0.6 s of writes
        deadline = time.monotonic() + 60
        while p.alive and time.monotonic() < deadline:
            if len(rb):
                batch = rb.sample(32)
                n = len(rb)  # read after sampling: the child keeps writing, and the length only grows
                # rows written before len grew are complete: every entry matches the row's id
                assert bool((batch["id"] < n).all())
                assert torch.equal(
                    batch["obs"], torch.stack([batch["id"], 2 * batch["id"], 3 * batch["id"]], -1).float()
                )
                seen.append(n)
            time.sleep(0.002)
        p.join(timeout=60)
    assert seen == sorted(seen) and len(set(seen)) > 1  # the parent watched the buffer grow
    _assert_same_storage(rb, _reference(1000, [(0, 600)]))


def test_child_exception_surfaces_in_parent():
    rb = _shared(100)
    with (
        BufferProcess(children.extend_then_fail, rb, 0, 5, context=CTX) as p,
        pytest.raises(ChildProcessError, match="exit code 1.*ValueError: writer failed after 5 items"),
    ):
        p.join(timeout=60)
    assert not p.alive
    assert len(rb) == 5  # what it wrote before failing is there


def test_killed_child_surfaces_in_parent():
    rb = _shared(100)
    with (
        BufferProcess(children.die_hard, rb, context=CTX) as p,
        pytest.raises(ChildProcessError, match="killed by signal 9"),
    ):
        p.join(timeout=60)
    assert not p.alive


def test_hanging_child_is_killed_after_timeout():
    rb = _shared(100)
    start = time.monotonic()
    with BufferProcess(children.hang, rb, context=CTX) as p:
        with pytest.raises(TimeoutError, match="did not finish within 1"):
            p.join(timeout=1)
        assert not p.alive
    assert time.monotonic() - start < 30


def test_with_block_leaves_no_process_behind():
    rb = _shared(100)
    with BufferProcess(children.hang, rb, context=CTX) as p:
        pid = p.process.pid
        assert p.alive
    assert not p.alive
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert [c for c in multiprocessing.active_children() if c.pid == pid] == []


def test_make_shared_errors_and_after_extend():
    with pytest.raises(TypeError, match="ListStorage"):
        make_shared(ReplayBuffer(storage=ListStorage(10)))
    with pytest.raises(ValueError, match="not allocated"):
        make_shared(ReplayBuffer(storage=LazyTensorStorage(10)))
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(TensorDict(x=torch.ones(3), batch_size=[3]))
    make_shared(rb)  # already allocated: no example needed
    assert rb.storage._storage["x"].is_shared() and rb.storage._len_t.is_shared() and rb.writer._state.is_shared()
    assert len(rb) == 3
