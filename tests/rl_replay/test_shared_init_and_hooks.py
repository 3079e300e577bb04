"""Storage sharing before the first write (``shared_init``), the shared mutation revision, save/load
hooks of checkpoints, and lazy stacks of differently shaped members written to tensor storages."""

from __future__ import annotations

import multiprocessing
import os
import sys

import pytest
import torch
from rl_replay import LazyMemmapStorage, LazyTensorStorage, ListStorage, ReplayBuffer, TensorDictReplayBuffer
from tdict import LazyStackedTensorDict, TensorDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # children import the targets by name
import _replay_mp_children as children

CTX = "forkserver"
multiprocessing.get_context(CTX).set_forkserver_preload(["torch", "tdict", "rl_replay", "_replay_mp_children"])


def _run(target, *args) -> None:
    ctx = multiprocessing.get_context(CTX)
    procs = [ctx.Process(target=target, args=a) for a in args]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0


# ------------------------------------------------------------------ shared_init
@pytest.mark.parametrize("make", [LazyTensorStorage, LazyMemmapStorage])
def test_shared_init_first_write_in_children(make):
    storage = make(100, shared_init=True)
    rb = ReplayBuffer(storage=storage, batch_size=2).share(True)
    _run(children.extend_worker_id, *[(rb, i) for i in range(4)])
    assert len(storage) == 8
    values = sorted(storage.get(slice(0, 8))["x"].tolist())
    assert values == [0, 0, 1, 1, 2, 2, 3, 3]  # every worker's items, none overwritten
    assert rb.sample(5)["x"].shape == (5,)


def test_shared_init_memmap_given_scratch_dir(tmp_path):
    storage = LazyMemmapStorage(10, scratch_dir=tmp_path / "rb", shared_init=True)
    rb = ReplayBuffer(storage=storage).share(True)
    _run(children.extend_worker_id, (rb, 7))
    assert storage.get(slice(0, 2))["x"].tolist() == [7, 7]
    rb.extend(TensorDict({"x": torch.tensor([1, 2])}, batch_size=[2]))  # the parent's first write maps the files
    assert storage.get(slice(0, 4))["x"].tolist() == [7, 7, 1, 2]


def test_shared_init_single_process_tensor_items():
    storage = LazyTensorStorage(6, shared_init=True)
    storage.set(torch.arange(3), torch.arange(3.0))
    assert storage.get(torch.arange(3)).tolist() == [0.0, 1.0, 2.0]
    assert len(storage) == 3


def test_shared_init_non_cpu_device_warns_and_uses_cpu():
    storage = LazyTensorStorage(8, device="meta", shared_init=True)
    rb = ReplayBuffer(storage=storage, batch_size=2)
    with pytest.warns(UserWarning, match="cannot be honored"):
        rb.extend(TensorDict({"x": torch.arange(4.0)}, batch_size=[4]))
    assert storage.device == torch.device("cpu")
    assert rb.sample()["x"].device.type == "cpu"
    assert storage.get(torch.arange(4))["x"].tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_shared_init_must_be_bool(bad):
    with pytest.raises(TypeError, match="shared_init"):
        LazyTensorStorage(4, shared_init=bad)


def test_shared_init_refuses_compilable():
    with pytest.raises(ValueError, match="shared_init"):
        LazyMemmapStorage(4, shared_init=True, compilable=True)


# ------------------------------------------------------------------ mutation revision across processes
def test_mutation_revision_and_last_cursor_shared():
    storage = LazyTensorStorage(8)
    rb = TensorDictReplayBuffer(storage=storage).share(True)
    rb.extend(TensorDict({"x": torch.arange(2)}, batch_size=[2]))
    assert (storage._mutation_revision, storage._last_cursor_index) == (1, 1)
    out = multiprocessing.get_context(CTX).Queue()
    _run(children.extend_and_report_revision, (rb, out))
    assert out.get(timeout=10) == (2, 3)
    assert (storage._mutation_revision, storage._last_cursor_index) == (2, 3)


def test_mutation_revision_local_until_shared():
    storage = LazyTensorStorage(4)
    assert storage._mutation_revision == 0 and storage._last_cursor_index is None
    storage._last_cursor_index = 2
    storage._mutation_revision += 3
    storage.share_memory_()
    assert (storage._mutation_revision, storage._last_cursor_index) == (3, 2)
    storage._last_cursor_index = None
    assert storage._last_cursor_index is None


# ------------------------------------------------------------------ save / load hooks
class _Shift:
    shift = None
    is_full = None

    def __init__(self, delta: int) -> None:
        self.delta = delta
        self.calls = 0

    def __call__(self, data):
        self.calls += 1
        return data + self.delta


def test_save_hook_sees_shift_and_fullness_and_load_hook_inverts(tmp_path):
    rb = ReplayBuffer(storage=LazyMemmapStorage(10))
    save = _Shift(100)
    rb.register_save_hook(save)
    rb.extend(torch.arange(5))
    rb.dumps(tmp_path / "ck")
    assert (save.shift, save.is_full, save.calls) == (5, False, 1)
    assert rb.storage.get(torch.arange(5)).tolist() == [0, 1, 2, 3, 4]  # the buffer itself is unchanged

    plain = ReplayBuffer(storage=LazyMemmapStorage(10))
    plain.loads(tmp_path / "ck")
    assert plain.storage.get(torch.arange(5)).tolist() == [100, 101, 102, 103, 104]  # what the hook saved

    restored = ReplayBuffer(storage=LazyMemmapStorage(10))
    restored.register_load_hook(_Shift(-100))
    restored.loads(tmp_path / "ck")
    assert restored.storage.get(torch.arange(5)).tolist() == [0, 1, 2, 3, 4]


def test_save_hook_full_ring(tmp_path):
    storage = LazyTensorStorage(4)
    rb = ReplayBuffer(storage=storage)
    save = _Shift(0)
    storage.register_save_hook(save)
    rb.extend(torch.arange(6))
    storage.dumps(tmp_path / "st")
    assert (save.shift, save.is_full) == (2, True)


def test_save_hook_list_storage(tmp_path):
    rb = ReplayBuffer(storage=ListStorage(4))
    rb.register_save_hook(lambda items: [x * 2 for x in items])  # a ListStorage's hooks get the list
    rb.extend([torch.tensor(1), torch.tensor(2)])
    rb.dumps(tmp_path / "ck")
    other = ReplayBuffer(storage=ListStorage(4))
    other.loads(tmp_path / "ck")
    assert [int(x) for x in other.storage.get([0, 1])] == [2, 4]
    halved = ReplayBuffer(storage=ListStorage(4))
    halved.register_load_hook(lambda items: [x // 2 for x in items])
    halved.loads(tmp_path / "ck")
    assert [int(x) for x in halved.storage.get([0, 1])] == [1, 2]


@pytest.mark.parametrize("method", ["register_save_hook", "register_load_hook"])
def test_hooks_must_be_callable(method):
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    with pytest.raises(TypeError, match="hook must be callable"):
        getattr(rb, method)(3)


# ------------------------------------------------------------------ lazy stacks of different shapes
@pytest.mark.parametrize("make", [LazyTensorStorage, LazyMemmapStorage])
def test_ragged_lazy_stack_stored_per_member(make):
    a1, a2 = torch.rand(5, 4, 8), torch.rand(5, 3, 8)
    stack = LazyStackedTensorDict(TensorDict(a=a1, batch_size=[5]), TensorDict(a=a2, batch_size=[5]), stack_dim=1)
    rb = ReplayBuffer(storage=make(6), batch_size=2)
    rb.extend(stack)
    assert len(rb) == 5
    got = rb.storage.get(torch.tensor([4, 0]))
    assert isinstance(got, LazyStackedTensorDict) and got.batch_size == (2, 2)
    assert torch.equal(got.tensordicts[0]["a"], a1[[4, 0]])
    assert torch.equal(got.tensordicts[1]["a"], a2[[4, 0]])
    assert rb.sample(3).batch_size == (3, 2)
    # a later write must have the same per-member shapes
    bad = LazyStackedTensorDict(
        TensorDict(a=torch.rand(1, 3, 8), batch_size=[1]),
        TensorDict(a=torch.rand(1, 3, 8), batch_size=[1]),
        stack_dim=1,
    )
    with pytest.raises(ValueError, match="key 'a' has shape"):
        rb.extend(bad)
    assert len(rb) == 5 and torch.equal(rb.storage.get(torch.tensor([0])).tensordicts[0]["a"], a1[:1])


def test_ragged_lazy_stack_refuses_update_at():
    stack = LazyStackedTensorDict(
        TensorDict(a=torch.rand(2, 4), batch_size=[2]), TensorDict(a=torch.rand(2, 3), batch_size=[2]), stack_dim=1
    )
    storage = LazyTensorStorage(4)
    storage.set(torch.arange(2), stack)
    with pytest.raises(TypeError, match="differently shaped"):
        storage.update_at(torch.arange(2), stack)


# ------------------------------------------------------------------ insert_transform index checks
def test_insert_transform_index_range():
    def add(k):
        return lambda x: x + k

    rb = ReplayBuffer(storage=LazyTensorStorage(4), transform=add(1), batch_size=2)
    rb.insert_transform(0, lambda x: x * 10)
    rb.insert_transform(-2, lambda x: x - 1)  # -n is the front
    rb.extend(torch.ones(4))
    assert rb.sample().tolist() == [1.0, 1.0]  # ((1 - 1) * 10) + 1
    for bad in (4, -4, 10):
        with pytest.raises(ValueError, match=f"index {bad} is out of range"):
            rb.insert_transform(bad, add(0))
    with pytest.raises(TypeError, match="index must be an int"):
        rb.insert_transform(1.0, add(0))  # pyright: ignore[reportArgumentType]
    assert len(rb._transforms) == 3


# ------------------------------------------------------------------ compiled writes
def test_compilable_storage_set_compiles_fullgraph():
    storage = LazyTensorStorage(100, compilable=True)
    data = torch.arange(25).unsqueeze(-1)
    storage.set(torch.arange(25), data)

    @torch.compile(fullgraph=True)
    def write(cursor, value):
        storage.set(cursor, value)

    write(torch.arange(25, 50), data)
    write(torch.arange(50, 75), data)
    assert len(storage) == 75 and storage._mutation_revision == 3
    assert torch.equal(storage[:75], data.repeat(3, 1))
    write(torch.arange(10), data[:10])  # a lower write leaves the length alone
    assert len(storage) == 75
