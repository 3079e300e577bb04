"""Slot generations (RoundRobinWriter(track_generations=True)) and conditional updates
(ReplayBuffer.update_if_present); the expected stamps are TorchRL 0.14's on the same writes."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict

from rl_replay import (
    ConditionalUpdateResult,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)


def _tracking(size: int = 4) -> ReplayBuffer:
    return ReplayBuffer(storage=LazyTensorStorage(size), writer=RoundRobinWriter(track_generations=True))


def test_tracking_is_opt_in():
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    index = rb.extend(torch.arange(4))
    assert rb.writer.tracks_generations is False
    assert rb.writer.generations_of(index).tolist() == [-1] * 4
    assert rb.storage._slot_generations is None
    assert "index_generation" not in rb.sample(2, return_info=True)[1]
    assert TensorDictMaxValueWriter().generations_of(torch.arange(3)).tolist() == [-1, -1, -1]


def test_stamps_count_writes_per_slot():
    rb = _tracking(4)
    rb.extend(torch.arange(4))
    assert rb.writer.generations_of(torch.arange(4)).tolist() == [0, 0, 0, 0]
    rb.extend(torch.arange(3))
    assert rb.writer.generations_of(torch.arange(4)).tolist() == [1, 1, 1, 0]
    other = _tracking(4)
    other.extend(torch.arange(10))  # longer than the storage: slots 0, 1 written 3 times, 2, 3 twice
    assert other.writer.generations_of(torch.arange(4)).tolist() == [2, 2, 1, 1]
    assert other.write_count == 10
    single = _tracking(3)
    for i in range(4):
        single.add(torch.tensor(i))
    assert single.writer.generations_of(torch.arange(3)).tolist() == [1, 0, 0]


def test_unwritten_and_out_of_range_slots_have_no_stamp():
    rb = _tracking(4)
    rb.extend(torch.arange(2))
    assert rb.writer.generations_of(torch.tensor([0, 1, 2, 3, -1, 100])).tolist() == [0, 0, -1, -1, -1, -1]


def test_empty_advances_written_stamps_only():
    rb = _tracking(4)
    index = rb.extend(torch.arange(2))
    before = rb.writer.generations_of(index)
    rb.empty()
    assert rb.writer.generations_of(torch.arange(4)).tolist() == [1, 1, -1, -1]
    rb.extend(torch.arange(2))
    assert bool((rb.writer.generations_of(index) > before).all())


def test_stamps_live_on_the_storage():
    storage = LazyTensorStorage(4)
    a = ReplayBuffer(storage=storage, writer=RoundRobinWriter(track_generations=True))
    b = ReplayBuffer(storage=storage)  # not tracking, but it must advance the shared stamps
    index = a.extend(torch.arange(4))
    stamps = a.writer.generations_of(index)
    b.extend(torch.arange(2))
    assert (a.writer.generations_of(index) != stamps).tolist() == [True, True, False, False]


def test_sample_reports_stamps_and_write_at_advances_them():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), writer=TensorDictRoundRobinWriter(track_generations=True))
    rb.extend(TensorDict(a=torch.arange(8), batch_size=[8]))
    sample, info = rb.sample(4, return_info=True)
    assert torch.equal(info["index_generation"], rb.writer.generations_of(info["index"]))
    assert torch.equal(sample["index_generation"], info["index_generation"])
    rb.writer.write_at(torch.tensor([0, 1]), TensorDict(a=torch.tensor([10, 11]), batch_size=[2]))
    assert rb.writer.generations_of(torch.arange(3)).tolist() == [1, 1, 0]
    assert rb[:2]["a"].tolist() == [10, 11] and rb.writer._cursor == 0


def test_state_dict_round_trip_and_old_states():
    rb = _tracking(4)
    rb.extend(torch.arange(5))
    state = rb.state_dict()
    assert state["_writer"]["_generation"].tolist() == [1, 0, 0, 0]
    other = _tracking(4)
    other.load_state_dict(state)
    assert torch.equal(other.writer.generations_of(torch.arange(4)), rb.writer.generations_of(torch.arange(4)))
    del state["_writer"]["_generation"], state["_writer"]["_write_count"]
    legacy = _tracking(4)
    legacy.load_state_dict(state)  # a state without stamps nor write count still loads
    assert legacy.writer._cursor == 1
    writer = RoundRobinWriter(track_generations=True)
    writer.load_state_dict({"cursor": 2, "write_count": 9})  # the keys of earlier versions
    assert writer.state_dict() == {"_cursor": 2, "_write_count": 9}


def _records(size: int = 10) -> tuple[TensorDictReplayBuffer, torch.Tensor, torch.Tensor]:
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(size), writer=TensorDictRoundRobinWriter(track_generations=True), batch_size=4
    )
    data = TensorDict(
        obs=torch.arange(size, dtype=torch.float32).unsqueeze(-1).expand(size, 3).clone(),
        version=torch.full((size,), 5),
        batch_size=[size],
    )
    index = rb.extend(data)
    return rb, index, rb.writer.generations_of(index)


def test_update_if_present_skips_reused_slots():
    rb, index, generation = _records()
    rb.extend(TensorDict(obs=torch.full((4, 3), -1.0), version=torch.zeros(4, dtype=torch.int64), batch_size=[4]))
    result = rb.update_if_present(index=index, generation=generation, patch={"obs": torch.full((10, 3), 42.0)})
    assert isinstance(result, ConditionalUpdateResult)
    assert result.updated.tolist() == [False] * 4 + [True] * 6
    assert (result.updated_count, result.stale_count, result.version_rejected) == (6, 4, None)
    assert rb[:]["obs"][:, 0].tolist() == [-1.0] * 4 + [42.0] * 6
    again = rb.update_if_present(index=index, generation=generation, patch={"obs": torch.zeros(10, 3)})
    assert again.updated_count == 6  # an update does not consume the handle


def test_update_if_present_versions():
    rb, index, generation = _records()
    versions = torch.tensor([6] * 5 + [4] * 5)
    result = rb.update_if_present(
        index=index,
        generation=generation,
        patch={"obs": torch.full((10, 3), 42.0)},
        version_key="version",
        version=versions,
        require_newer=True,
    )
    assert result.updated.tolist() == [True] * 5 + [False] * 5
    assert result.version_rejected.tolist() == [False] * 5 + [True] * 5
    assert rb[:]["version"].tolist() == [6] * 5 + [5] * 5
    # two handles on one slot: only the highest version is applied, whatever the order
    dup = rb.update_if_present(
        index=index[[7, 7]],
        generation=generation[[7, 7]],
        patch={"obs": torch.tensor([[1.0] * 3, [2.0] * 3])},
        version_key=("version",),
        version=torch.tensor([7, 8]),
    )
    assert dup.updated.tolist() == [False, True] and dup.version_rejected.tolist() == [True, False]
    assert rb[:]["obs"][7].tolist() == [2.0] * 3 and rb[:]["version"][7].item() == 8


def test_update_if_present_checks_everything_first():
    rb, index, generation = _records()
    before = rb[:].clone()
    bad = [
        (KeyError, {"patch": {"nope": torch.zeros(10)}}),
        (ValueError, {"patch": {"obs": torch.zeros(10, 3), "version": torch.zeros(10, 5, dtype=torch.int64)}}),
        (ValueError, {"patch": {"obs": torch.zeros(10, 3, dtype=torch.int64)}}),
        (ValueError, {"patch": {"obs": torch.zeros(10, 3)}, "version_key": "version"}),
        (
            ValueError,
            {"patch": {"version": torch.zeros(10, dtype=torch.int64)}, "version_key": "version", "version": 6},
        ),
        (ValueError, {"patch": {"obs": torch.zeros(10, 3)}, "version_key": "a.b", "version": 6}),
    ]
    for error, kwargs in bad:
        with pytest.raises(error):
            rb.update_if_present(index=index, generation=generation, **kwargs)
    assert (rb[:] == before).all()
    untracked = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
    untracked.extend(TensorDict(obs=torch.zeros(2), batch_size=[2]))
    with pytest.raises(RuntimeError, match="Conditional updates need a writer"):
        untracked.update_if_present(index=torch.arange(2), generation=torch.zeros(2), patch={})
    with pytest.raises(RuntimeError, match="Conditional updates need a tensor storage"):
        ReplayBuffer(storage=ListStorage(4), writer=RoundRobinWriter(track_generations=True)).update_if_present(
            index=torch.arange(2), generation=torch.zeros(2), patch={}
        )
