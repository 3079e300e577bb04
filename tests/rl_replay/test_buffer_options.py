"""ReplayBuffer options and item access that follow TorchRL 0.14: delayed construction, part
factories, stats, dim_extend, in-place writes, state dicts that hold the items, pytrees in tensor
storages, LazyStackStorage and the TensorDictMaxValueWriter's error on plain data."""

from __future__ import annotations

import functools
import json
import pickle

import pytest
import torch
from tdict import LazyStackedTensorDict, NonTensorStack, TensorDict

from rl_replay import (
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    SamplerWithoutReplacement,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
    TensorStorage,
    tree_iter,
)


def test_delayed_init_builds_on_first_use():
    rb = ReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 10), sampler=RandomSampler, delayed_init=True, batch_size=2
    )
    assert not rb.initialized
    assert rb.stats() == {
        "size": 0,
        "write_count": 0,
        "prefetch_queue_size": 0,
        "initialized": False,
    }  # a factory advertises no capacity
    copy = pickle.loads(pickle.dumps(rb))  # what a worker process receives: nothing built yet
    assert not copy.initialized
    copy.extend(torch.arange(3))
    assert copy.initialized and len(copy) == 3 and isinstance(copy.storage, LazyTensorStorage)
    made = []
    factory_rb = ReplayBuffer(storage=ListStorage(4), transform_factory=lambda: made.append(1) or (lambda x: x + 1))
    assert not factory_rb.initialized and made == []  # transform_factory delays construction by default
    factory_rb.extend([torch.tensor(1)])
    assert made == [1] and factory_rb[0].item() == 2
    with pytest.raises(TypeError, match="storage must be a Storage"):
        ReplayBuffer(storage=lambda: "not a storage")


def test_stats_and_write_count():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
    rb.extend(torch.arange(15))
    stats = rb.stats()
    assert (stats["size"], stats["write_count"], stats["capacity"], stats["utilization"]) == (10, 15, 10, 1.0)
    assert json.loads(json.dumps(stats)) == stats
    rb.empty(empty_write_count=False)
    assert rb.stats()["size"] == 0 and rb.write_count == 15
    rb.empty()
    assert rb.write_count == 0


def test_errors_name_the_problem():
    rb = ReplayBuffer(storage=ListStorage(4))
    with pytest.raises(RuntimeError, match="Cannot sample from an empty storage"):
        rb.sample(2)
    with pytest.raises(RuntimeError, match="batch_size not specified"):
        rb.sample()
    with pytest.raises(RuntimeError, match="Cannot iterate over the replay buffer"):
        next(iter(rb))
    with pytest.raises(ValueError, match="drop_last=True"):
        ReplayBuffer(storage=ListStorage(4), sampler=SamplerWithoutReplacement(drop_last=True))
    with pytest.raises(ValueError, match="Cannot share prefetched replay buffers"):
        ReplayBuffer(storage=ListStorage(4), batch_size=2, prefetch=1, shared=True)
    with pytest.warns(UserWarning, match=r"Using `add\(\)` with a TensorDict that has batch_size"):
        rb.add(TensorDict(batch_size=[1]))
    writer_rb = ReplayBuffer(storage=ListStorage(4), writer=TensorDictMaxValueWriter())
    for error in (RuntimeError, TypeError):  # TorchRL raises a RuntimeError; it is a TypeError too
        with pytest.raises(error, match="expects data to be a tensor collection"):
            writer_rb.add(torch.ones(2))


def test_shared_buffers_share_transform_state():
    class Unshareable:
        requires_shared_write_state = True

        def __call__(self, data):
            return data

    rb = ReplayBuffer(storage=ListStorage(4), shared=True)
    with pytest.raises(RuntimeError, match="write state"):
        rb.append_transform(Unshareable())
    plain = ReplayBuffer(storage=ListStorage(4))
    plain.append_transform(Unshareable())
    with pytest.raises(RuntimeError, match="write state"):
        plain.share()


def test_dim_extend_writes_env_by_time_rollouts_as_time_rows():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(12, ndim=2))
    assert rb.dim_extend == 1
    rollout = TensorDict(obs=torch.arange(6).reshape(2, 3), batch_size=[2, 3])  # [env, time]
    rb.extend(rollout)
    assert rb.storage.shape == torch.Size([6, 2]) and rb.writer._cursor == 3  # rows are time steps
    assert rb.storage._storage["obs"][:3].tolist() == [[0, 3], [1, 4], [2, 5]]
    assert rb[:]["obs"].tolist() == [[0, 1, 2], [3, 4, 5]]  # read back as written
    rb[0, 1:2] = TensorDict(obs=torch.tensor([9]), batch_size=[1])  # env 0, time 1
    assert rb[:]["obs"].tolist() == [[0, 9, 2], [3, 4, 5]]
    flat = TensorDictReplayBuffer(storage=LazyTensorStorage(12, ndim=2), dim_extend=0)
    flat.extend(rollout)
    assert flat.storage.shape == torch.Size([4, 3])  # rows of 3 items, as the data comes


def test_in_place_writes_and_new_entries():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
    rb.extend(TensorDict(obs=torch.arange(4), batch_size=[4]))
    revision = rb.storage._mutation_revision
    rb[0] = TensorDict(obs=torch.tensor(10), batch_size=[])  # a partial write ("index" is kept)
    rb.set_at_("obs", torch.tensor([11]), torch.tensor([1]))
    rb.set_("obs", rb["obs"] + 100)
    assert rb["obs"].tolist() == [110, 111, 102, 103] and rb["index"].tolist() == [0, 1, 2, 3]
    rb.update_(TensorDict(obs=torch.arange(4) + 30, batch_size=[4]))
    assert rb.storage._mutation_revision == revision + 4
    data = rb.read_all_in_order()
    data["value_target"] = data["obs"] + 1
    rb.write_all(data)  # a new entry is added to the storage
    assert rb[:]["value_target"].tolist() == [31, 32, 33, 34] and rb.storage._storage["value_target"][4:].sum() == 0
    with pytest.raises(TypeError, match="cannot add entries"):
        memmap = TensorDictReplayBuffer(storage=LazyMemmapStorage(4))
        memmap.extend(TensorDict(obs=torch.arange(2), batch_size=[2]))
        memmap[0:1] = TensorDict(new=torch.ones(1), batch_size=[1])


def test_write_transforms():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.append_transform(lambda x: x + 1, invert=True)  # on the way in
    rb.append_transform(lambda x: x * 10)  # on the way out
    rb.extend(torch.arange(3))
    assert rb.storage.get(torch.arange(3)).tolist() == [1, 2, 3] and rb[:].tolist() == [10, 20, 30]
    rb[0:1] = torch.tensor([0])
    assert rb[0:1].tolist() == [10]


def test_state_dict_holds_the_items():
    source = ReplayBuffer(storage=LazyTensorStorage(5), batch_size=2, generator=torch.Generator().manual_seed(0))
    source.extend(torch.arange(5) * 2)
    state = source.state_dict()
    assert set(state) == {"_storage", "_sampler", "_writer", "_batch_size", "_rng"}
    assert state["_storage"]["_storage"].tolist() == [0, 2, 4, 6, 8]
    target = ReplayBuffer(storage=LazyTensorStorage(5))
    target.load_state_dict(state)
    state["_storage"]["_storage"].zero_()  # the loaded items are copies
    assert target[:].tolist() == [0, 2, 4, 6, 8] and target.batch_size == 2
    assert torch.equal(target.sample(), source.sample())  # the generator state came along
    items = ListStorage(4)
    items.set([0, 1], [torch.ones(2), "text"])
    restored = ListStorage(4)
    restored.load_state_dict(items.state_dict())
    assert restored.get(1) == "text" and restored.get(0).tolist() == [1.0, 1.0]


def test_given_tensor_storage_is_full_and_checked():
    storage = TensorStorage(TensorDict(obs=torch.zeros(4, 2), batch_size=[4]))
    assert len(storage) == 4
    with pytest.raises(ValueError, match="Expected storage to be non-null"):
        TensorStorage(None)
    with pytest.raises(ValueError, match="The max-size and the storage shape mismatch"):
        TensorStorage(torch.zeros(3), max_size=4)


@pytest.mark.parametrize("make", [lambda: LazyTensorStorage(10), lambda: LazyMemmapStorage(10)])
def test_pytrees_in_tensor_storages(make, tmp_path):
    rb = ReplayBuffer(storage=make(), batch_size=4)
    tree = {"a": torch.arange(5), "b": {"c": [torch.zeros(5, 3), (torch.ones(5, 2),)]}, 30: torch.zeros(5, 2)}
    rb.extend(tree)
    rb.add({"a": torch.tensor(5), "b": {"c": [torch.zeros(3), (torch.ones(2),)]}, 30: torch.zeros(2)})
    sample = rb.sample()
    assert sample["b"]["c"][1][0].shape == (4, 2) and sample[30].shape == (4, 2)
    assert rb[:]["a"].tolist() == [0, 1, 2, 3, 4, 5]
    assert [leaf.shape[0] for leaf in tree_iter(rb[:])] == [6, 6, 6, 6]
    with pytest.raises(TypeError, match="pytrees are not supported by state_dict"):
        rb.storage.state_dict()
    rb.dumps(tmp_path / "ckpt")
    other = ReplayBuffer(storage=make(), batch_size=4)
    other.loads(tmp_path / "ckpt")
    assert other[:]["b"]["c"][1][0].shape == (6, 2) and other[:]["a"].tolist() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="structure differs"):
        rb.extend({"a": torch.arange(2)})


def test_lists_of_items_are_stacked():
    rb = ReplayBuffer(storage=LazyTensorStorage(100))
    rb.extend([TensorDict({"a": torch.randn(2, 3)}, [2])])
    assert len(rb) == 1 and rb[:].shape == torch.Size([1, 2])
    trees = ReplayBuffer(storage=LazyTensorStorage(100))
    trees.extend([(torch.full((2,), i), {"a": torch.full((3,), i)}) for i in range(4)])
    assert trees[:][1]["a"][:, 0].tolist() == [0, 1, 2, 3]
    with pytest.raises(RuntimeError, match="Stacking the elements of the list resulted in an error"):
        ReplayBuffer(storage=LazyTensorStorage(10)).extend([torch.zeros(4), torch.zeros(1)])


def test_lazy_stack_storage():
    rb = ReplayBuffer(storage=LazyStackStorage(), batch_size=3)  # unbounded
    rb.add(TensorDict(a=torch.zeros(10), c="short"))
    rb.add(TensorDict(a=torch.ones(11), c="long"))
    sample = rb.sample()
    assert isinstance(sample, LazyStackedTensorDict) and sample.batch_size == torch.Size([3])
    assert {len(x) for x in sample.get("a", as_list=True)} <= {10, 11}
    assert set(sample.get("c").tolist()) <= {"short", "long"}
    rb.extend(TensorDict(a=torch.ones(2, 4), c=NonTensorStack("x", "y"), batch_size=[2]))
    assert len(rb) == 4 and rb[3]["c"] == "y"


def test_existsok_is_checked_at_the_first_write(tmp_path):
    first = ReplayBuffer(storage=LazyMemmapStorage(10, scratch_dir=tmp_path))
    first.extend(TensorDict(a=torch.randn(3), batch_size=[3]))
    second = ReplayBuffer(storage=LazyMemmapStorage(10, scratch_dir=tmp_path))  # constructing is fine
    with pytest.raises(RuntimeError, match="existsok"):
        second.extend(TensorDict(a=torch.randn(3), batch_size=[3]))
    assert len(second) == 0


def test_round_robin_writer_cursor_can_be_set():
    writer = RoundRobinWriter()
    writer._cursor, writer._write_count = 3, 23
    assert writer.state_dict() == {"_cursor": 3, "_write_count": 23}
