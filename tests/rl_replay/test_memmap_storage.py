"""LazyMemmapStorage: values on disk equal what was written, bad writes change nothing, scratch-dir
rules (existsok, temporary-dir cleanup), and a writer and a sampler in two spawn processes."""

from __future__ import annotations

import gc
import os
import shutil
import pickle
import queue
import sys
import time

import pytest
import torch
import torch.multiprocessing as mp
from rl_replay import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ReplayBuffer,
    RoundRobinWriter,
)
from tdict import MemoryMappedTensor, TensorDict

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.append(_HERE)
import _memmap_mp_children as children


def _transitions(start: int, n: int) -> TensorDict:
    return children.item_values(torch.arange(start, start + n))


def _assert_td_equal(a: TensorDict, b: TensorDict) -> None:
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key, value in b.items(True, True):
        got = a.get(key)
        assert got.dtype == value.dtype, key
        assert torch.equal(got, value), key


# ------------------------------------------------------------------------------------ values
def test_values_and_files_after_wrap_around():
    storage = LazyMemmapStorage(10)
    rb = ReplayBuffer(storage=storage)
    rb.extend(_transitions(0, 7))
    rb.extend(_transitions(7, 6))  # 13 items in 10 slots: 10, 11, 12 overwrite slots 0..2
    assert len(rb) == 10 and rb.writer._cursor == 3
    expected_ids = torch.tensor([10, 11, 12, 3, 4, 5, 6, 7, 8, 9])
    _assert_td_equal(storage.get(torch.arange(10)), children.item_values(expected_ids))
    _assert_td_equal(storage.get(4), children.item_values(torch.tensor([4]))[0])
    leaf = storage._storage["next", "observation"]
    assert isinstance(leaf, MemoryMappedTensor) and leaf.filename.startswith(storage.scratch_dir)
    # the files hold the values: a fresh mapping of the directory reads them back
    reopened = TensorDict.load_memmap(storage.scratch_dir)
    _assert_td_equal(reopened, children.item_values(expected_ids))


def test_sampled_values_match_a_reference_storage():
    gen = torch.Generator().manual_seed(0)
    rb_m = ReplayBuffer(storage=LazyMemmapStorage(50), batch_size=32, generator=gen)
    rb_r = ReplayBuffer(storage=LazyTensorStorage(50), batch_size=32, generator=torch.Generator().manual_seed(0))
    for start in range(0, 120, 17):
        rb_m.extend(_transitions(start, 17))
        rb_r.extend(_transitions(start, 17))
    for _ in range(5):
        _assert_td_equal(rb_m.sample(), rb_r.sample())


def test_tensor_data_and_dtypes():
    s = LazyMemmapStorage(6)
    x = torch.arange(12, dtype=torch.int16).view(4, 3)
    s.set(torch.arange(4), x)
    out = s.get(torch.tensor([3, 0]))
    assert out.dtype == torch.int16 and torch.equal(out, x[[3, 0]])
    s.set(5, torch.tensor([7, 8, 9], dtype=torch.int16))
    assert len(s) == 6 and s.get(5).tolist() == [7, 8, 9]
    td = TensorDict(
        b=torch.tensor([True, False, True]),
        h=torch.tensor([1.5, -2.0, 0.25], dtype=torch.float16),
        u=torch.tensor([[1, 2], [3, 4], [255, 0]], dtype=torch.uint8),
        batch_size=[3],
    )
    t = LazyMemmapStorage(3)
    t.set(torch.arange(3), td)
    _assert_td_equal(t.get(torch.arange(3)), td)


def test_ndim2_rows_of_envs():
    s = LazyMemmapStorage(12, ndim=2)
    rb = ReplayBuffer(storage=s, batch_size=8, generator=torch.Generator().manual_seed(1), dim_extend=0)
    data = TensorDict(obs=torch.arange(24.0).view(4, 3, 2), batch_size=[4, 3])
    rb.extend(data[:2])
    assert s.shape == torch.Size([4, 3]) and len(rb) == 6
    rb.extend(data[2:])
    assert len(rb) == 12
    batch, info = rb.sample(return_info=True)
    rows, cols = info["index"]
    assert torch.equal(batch["obs"], data["obs"][rows, cols])


# ------------------------------------------------------------------------------------ bad writes
@pytest.mark.parametrize(
    "bad",
    [
        lambda: _transitions(0, 4).exclude(("next", "reward")),  # missing key
        lambda: _transitions(0, 4).set("extra", torch.zeros(4)),  # unexpected key
        lambda: _transitions(0, 4).set("observation", torch.zeros(4, 16)),  # wrong feature shape
        lambda: _transitions(0, 1).expand(4).clone().set("action", torch.zeros(4, 1)),  # broadcastable, still wrong
        lambda: torch.zeros(4, 3),  # a tensor into a TensorDict storage
    ],
)
def test_bad_extend_raises_before_writing(bad):
    rb = ReplayBuffer(storage=LazyMemmapStorage(10))
    rb.extend(_transitions(0, 8))
    before = rb.storage.get(torch.arange(10)).clone()
    with pytest.raises((KeyError, ValueError, TypeError)) as err:
        rb.extend(bad())
    assert "LazyMemmapStorage.set" in str(err.value)
    assert len(rb) == 8 and rb.writer._cursor == 8 and rb.writer._write_count == 8
    _assert_td_equal(rb.storage.get(torch.arange(10)), before)


def test_missing_key_error_names_the_key():
    rb = ReplayBuffer(storage=LazyMemmapStorage(10))
    rb.extend(_transitions(0, 2))
    with pytest.raises(KeyError, match=r"missing \[\('next', 'done'\)\]"):
        rb.extend(_transitions(2, 2).exclude(("next", "done")))


def test_wrong_tensor_shape_raises():
    s = LazyMemmapStorage(10)
    s.set(torch.arange(2), torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"expected \[2, 3\]"):
        s.set(torch.arange(2, 4), torch.zeros(3))  # would broadcast silently without the check
    assert len(s) == 2


# ------------------------------------------------------------------------------------ scratch dir
def test_existsok_refuses_a_non_empty_dir(tmp_path):
    (tmp_path / "old.bin").write_bytes(b"x")
    refused = LazyMemmapStorage(10, scratch_dir=tmp_path)  # checked at the first write, as TorchRL
    with pytest.raises(FileExistsError, match="existsok=True"):
        refused.set(torch.arange(2), torch.ones(2, 2))
    with pytest.raises(RuntimeError, match="existsok=True"):  # (TorchRL raises a RuntimeError)
        refused.set(torch.arange(2), torch.ones(2, 2))
    assert len(refused) == 0 and sorted(os.listdir(tmp_path)) == ["old.bin"]
    s = LazyMemmapStorage(10, scratch_dir=tmp_path, existsok=True)
    s.set(torch.arange(2), torch.ones(2, 2))
    assert s.get(1).tolist() == [1.0, 1.0]


def test_existsok_overwrites_a_previous_storage(tmp_path):
    first = LazyMemmapStorage(4, scratch_dir=tmp_path / "s")
    first.set(torch.arange(4), TensorDict(a=torch.ones(4), batch_size=[4]))
    with pytest.raises(FileExistsError):
        LazyMemmapStorage(4, scratch_dir=tmp_path / "s").set(
            torch.arange(1), TensorDict(b=torch.ones(1), batch_size=[1])
        )
    second = LazyMemmapStorage(4, scratch_dir=tmp_path / "s", existsok=True)
    second.set(torch.arange(2), TensorDict(b=torch.full((2,), 5), batch_size=[2]))
    assert TensorDict.load_memmap(tmp_path / "s")["b"].tolist() == [5, 5, 0, 0]


def test_empty_or_new_dir_is_fine_and_kept_unless_asked(tmp_path):
    s = LazyMemmapStorage(4, scratch_dir=tmp_path / "new" / "dir")
    s.set(torch.arange(1), torch.ones(1))
    path = s.scratch_dir
    assert s._auto_cleanup is False
    del s
    gc.collect()
    assert os.path.isdir(path) and os.listdir(path)  # a user directory outlives the storage
    again = LazyMemmapStorage(4, scratch_dir=path, existsok=True)
    assert again.cleanup() and not os.path.exists(path)  # ... unless cleanup() is called
    assert not again.cleanup()


def test_auto_cleanup_of_a_user_dir(tmp_path):
    s = LazyMemmapStorage(4, scratch_dir=tmp_path / "d", auto_cleanup=True)
    s.set(torch.arange(2), torch.ones(2))
    path = s.scratch_dir
    del s
    gc.collect()
    assert not os.path.exists(path)
    kept = LazyMemmapStorage(4, auto_cleanup=False)  # a temporary directory kept on request
    kept.set(torch.arange(1), torch.ones(1))
    path = kept.scratch_dir
    del kept
    gc.collect()
    assert os.path.isdir(path)
    shutil.rmtree(path)


def test_temporary_dir_removed_on_gc_not_by_copies():
    s = LazyMemmapStorage(4)
    s.set(torch.arange(2), torch.ones(2, 3))
    path = s.scratch_dir
    assert os.path.isdir(path) and os.listdir(path)
    copy = pickle.loads(pickle.dumps(s))  # what a child process receives
    assert torch.equal(copy.get(torch.arange(2)), torch.ones(2, 3))
    del copy
    gc.collect()
    assert os.path.isdir(path)  # a copy does not own the directory
    del s
    gc.collect()
    assert not os.path.exists(path)


def test_cleanup_removes_now():
    s = LazyMemmapStorage(4)
    s.set(torch.arange(2), torch.ones(2))
    assert s.cleanup() and not os.path.exists(s.scratch_dir) and len(s) == 0
    assert not s.cleanup()


# ------------------------------------------------------------------------------------ processes
_SPAWN = mp.get_context("spawn")


def _supervise(procs, results, expected, timeout=60.0):
    """Collects one result per child; a child error or a hang fails the test; no child is left."""
    got = {}
    try:
        deadline = time.monotonic() + timeout
        while len(got) < expected:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"children did not report within {timeout} s (got {sorted(got)})")
            try:
                who, status, payload = results.get(timeout=min(left, 1.0))
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    pytest.fail(f"a child died with exit code {dead[0].exitcode} before reporting")
                continue
            if status != "ok":
                pytest.fail(f"{who} child failed:\n{payload}")
            got[who] = payload
        for p in procs:
            p.join(30)
        return got
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(10)
        assert not any(p.is_alive() for p in procs)


def test_writer_and_sampler_in_two_processes():
    total, chunk = 600, 40
    rb = ReplayBuffer(storage=LazyMemmapStorage(1000), batch_size=64)
    rb.share_memory_()  # the item count and the writer's cursor; the items are files already
    results = _SPAWN.Queue()
    procs = [
        _SPAWN.Process(target=children.writer, args=(rb, total, chunk, results)),
        _SPAWN.Process(target=children.sampler, args=(rb, total, results, 45.0)),
    ]
    for p in procs:
        p.start()
    got = _supervise(procs, results, 2)
    assert got["writer"] == total
    draws, seen_len = got["sampler"]
    assert seen_len == total and draws >= 20
    assert all(p.exitcode == 0 for p in procs)
    # the parent never wrote: it sees the child's items, count and cursor
    assert len(rb) == total and rb.writer._cursor == total and rb.writer._write_count == total
    _assert_td_equal(rb.storage.get(torch.arange(total)), _transitions(0, total))
    rb.extend(_transitions(total, 5))  # and continues from the shared cursor
    assert rb.writer._cursor == total + 5
    assert torch.equal(rb.storage.get(torch.arange(total, total + 5))["id"], torch.arange(total, total + 5))


def test_child_failure_surfaces():
    rb = ReplayBuffer(storage=LazyMemmapStorage(10))
    rb.extend(_transitions(0, 2))
    rb.share_memory_()
    fork = mp.get_context("fork")  # fast start; the spawn path is exercised by the test above
    results = fork.Queue()
    proc = fork.Process(target=children.fail_now, args=(rb, results))
    proc.start()
    with pytest.raises(pytest.fail.Exception, match="exit code 1"):
        _supervise([proc], results, 1, timeout=60.0)
    assert not proc.is_alive() and len(rb) == 2


def test_writer_cursor_is_shared_without_a_buffer():
    storage = LazyMemmapStorage(8)
    writer = RoundRobinWriter()
    writer.register_storage(storage)
    storage.share_memory_()
    writer.share_memory_()
    assert storage._len_t.is_shared() and writer._state.is_shared()


def test_add_as_first_write():
    rb = ReplayBuffer(storage=LazyMemmapStorage(4))
    item = _transitions(5, 1)[0]
    assert rb.add(item) == 0
    assert len(rb) == 1
    _assert_td_equal(rb.storage.get(0), item)


def test_checkpoint_round_trip_into_a_new_scratch_dir(tmp_path):
    rb = ReplayBuffer(storage=LazyMemmapStorage(20), generator=torch.Generator().manual_seed(0))
    rb.extend(_transitions(0, 25))
    rb.dumps(tmp_path / "ckpt")
    restored = ReplayBuffer(
        storage=LazyMemmapStorage(20, scratch_dir=tmp_path / "scratch"), generator=torch.Generator()
    )
    restored.loads(tmp_path / "ckpt")
    assert len(restored) == 20 and restored.writer._cursor == 5
    _assert_td_equal(restored.sample(8), rb.sample(8))
    assert os.listdir(tmp_path / "scratch")
    _assert_td_equal(TensorDict.load_memmap(tmp_path / "scratch"), rb.storage.get(torch.arange(20)))
