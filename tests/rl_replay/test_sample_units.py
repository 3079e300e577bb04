"""Trajectory boundaries (find_start_stop_traj) and sample units (Transition, Sequence); the
expected indices and masks are TorchRL 0.14's on the same storages."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict

from rl_replay import (
    LazyTensorStorage,
    ReplayBuffer,
    SampleUnit,
    Sequence,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    Transition,
    find_start_stop_traj,
)


# ------------------------------------------------------------------------------------ boundaries
def test_boundaries_of_a_full_ring_with_a_cursor():
    end = torch.zeros(10, dtype=torch.bool)
    end[2] = end[7] = True
    for cursor in (4, torch.tensor([2, 3, 4]), range(2, 5)):
        start, stop, lengths = find_start_stop_traj(end=end, at_capacity=True, cursor=cursor)
        assert start.squeeze(-1).tolist() == [8, 3, 5]
        assert stop.squeeze(-1).tolist() == [2, 4, 7]
        assert lengths.tolist() == [5, 2, 3]
    ids = torch.tensor([5, 5, 5, 0, 0, 1, 1, 1, 5, 5])  # the same trajectories as ids (wrapping at the edge)
    start, stop, lengths = find_start_stop_traj(trajectory=ids, at_capacity=True)
    assert (start.squeeze(-1).tolist(), stop.squeeze(-1).tolist(), lengths.tolist()) == (
        [8, 3, 5],
        [2, 4, 7],
        [5, 2, 3],
    )


def test_boundaries_of_a_partial_storage_and_of_columns():
    end = torch.zeros(6, dtype=torch.bool)
    end[2] = True
    start, stop, lengths = find_start_stop_traj(end=end, at_capacity=False)
    assert (start.squeeze(-1).tolist(), stop.squeeze(-1).tolist(), lengths.tolist()) == ([0, 3], [2, 5], [3, 3])
    assert not end[5]  # the input is not modified
    ids = torch.tensor([[0, 3], [0, 3], [1, 3], [1, 4], [1, 4]])  # [time, env]
    start, stop, lengths = find_start_stop_traj(trajectory=ids, at_capacity=False)
    assert start.tolist() == [[0, 0], [2, 0], [0, 1], [3, 1]]
    assert stop.tolist() == [[1, 0], [4, 0], [2, 1], [4, 1]]
    assert lengths.tolist() == [2, 3, 3, 2]
    start, stop, lengths = find_start_stop_traj(end=torch.zeros(4, dtype=torch.bool), at_capacity=True)
    assert (start.tolist(), stop.tolist(), lengths.tolist()) == ([[0]], [[3]], [4])


def test_boundaries_bad_input():
    with pytest.raises(TypeError, match="Exactly one"):
        find_start_stop_traj(at_capacity=True)
    with pytest.raises(RuntimeError, match="empty"):
        find_start_stop_traj(end=torch.zeros(0, dtype=torch.bool), at_capacity=True)
    with pytest.raises(RuntimeError, match="cursor must not be an empty"):
        find_start_stop_traj(end=torch.zeros(3, dtype=torch.bool), at_capacity=True, cursor=range(0))


# ------------------------------------------------------------------------------------ units
def _episodes(capacity: int = 10, done_at=(5, 9)) -> TensorDictReplayBuffer:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), batch_size=4)
    done = torch.zeros(capacity, 1, dtype=torch.bool)
    done[list(done_at)] = True
    rb.extend(TensorDict({"obs": torch.arange(capacity, dtype=torch.float32), ("next", "done"): done}, [capacity]))
    return rb


def test_transition_is_the_default():
    samples = []
    for unit in (None, Transition()):
        rb = ReplayBuffer(storage=LazyTensorStorage(20), batch_size=4, generator=torch.Generator().manual_seed(0))
        rb.extend(torch.arange(20))
        samples.append(rb.sample(return_info=True))
    assert torch.equal(samples[0][0], samples[1][0]) and samples[0][1].keys() == samples[1][1].keys()
    with pytest.raises(TypeError, match="sample_unit"):
        ReplayBuffer(storage=LazyTensorStorage(4), sample_unit=object())


@pytest.mark.parametrize(
    "kwargs,anchor,index,valid",
    [
        ({"length": 4}, 1, [1, 2, 3, 4], [True] * 4),
        ({"length": 4}, 4, [4, 5, 5, 5], [True, True, False, False]),  # pad at the episode end
        ({"length": 4, "episode_boundary": "stop"}, 4, [2, 3, 4, 5], [True] * 4),  # moved back
        ({"length": 4, "episode_boundary": "include_reset"}, 4, [4, 5, 6, 7], [True] * 4),
        ({"length": 2, "burn_in": 2}, 6, [6, 6, 6, 7], [False, False, True, True]),  # burn-in clamps
        ({"length": 2, "bootstrap": 1, "episode_boundary": "stop"}, 4, [3, 4, 5], [True] * 3),
        ({"length": 3, "dilation": 2}, 0, [0, 2, 4], [True] * 3),
    ],
)
def test_sequence_windows(kwargs, anchor, index, valid):
    rb = _episodes()
    out, info = Sequence(**kwargs).expand(torch.tensor([anchor]), {}, rb.storage)
    assert out.tolist() == index and info["validity_mask"].tolist() == valid
    assert info["anchor_index"].tolist() == [anchor] * len(index)
    assert info["step_in_sequence"].tolist() == list(range(len(index)))


def test_sequence_never_crosses_the_write_seam():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
    rb.extend(TensorDict({"obs": torch.arange(14.0), ("next", "done"): torch.zeros(14, 1, dtype=torch.bool)}, [14]))
    unit = Sequence(length=4, episode_boundary="include_reset")
    index, info = unit.expand(torch.tensor([8]), {}, rb.storage)  # obs 8, 9 then 10, 11 at slots 0, 1
    assert index.tolist() == [8, 9, 0, 1] and info["validity_mask"].all()
    index, info = unit.expand(torch.tensor([2]), {}, rb.storage)  # slot 3 holds the newest record
    assert index.tolist() == [2, 3, 3, 3] and info["validity_mask"].tolist() == [True, True, False, False]


def test_sequence_on_a_time_by_env_storage():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(16, ndim=2), dim_extend=0)
    done = torch.zeros(8, 2, 1, dtype=torch.bool)
    done[4, 0] = done[6, 1] = True
    done[7] = True
    rb.extend(TensorDict({"obs": torch.arange(16).reshape(8, 2), ("next", "done"): done}, [8, 2]))
    unit = Sequence(length=2, burn_in=1, bootstrap=1, dilation=2)
    (time, env), info = unit.expand((torch.tensor([2, 2]), torch.tensor([0, 1])), {}, rb.storage)
    assert time.tolist() == [0, 2, 4, 4, 0, 2, 4, 6] and env.tolist() == [0] * 4 + [1] * 4
    assert info["validity_mask"].tolist() == [True, True, True, False] + [True] * 4
    assert info["learning_mask"].tolist() == [False, True, True, False] * 2


def test_sampling_through_a_sequence_unit():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(30), batch_size=2, sample_unit=Sequence(length=3, burn_in=2, bootstrap=1)
    )
    rb.extend(TensorDict({"obs": torch.arange(30.0), ("next", "done"): torch.zeros(30, 1, dtype=torch.bool)}, [30]))
    sample, info = rb.sample(return_info=True)
    assert sample.batch_size == torch.Size([12]) and int(sample["learning_mask"].sum()) == 6
    assert sample["sequence_id"].tolist() == [0] * 6 + [1] * 6
    assert torch.equal(sample["index"], info["index"])


def test_priorities_go_to_the_anchors():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=LazyTensorStorage(20), batch_size=2, sample_unit=Sequence(length=4)
    )
    done = torch.zeros(20, 1, dtype=torch.bool)
    done[[9, 19]] = True
    rb.extend(TensorDict({"obs": torch.arange(20.0), ("next", "done"): done}, [20]))
    rb.update_priority(torch.arange(20), torch.ones(20))
    index, info = Sequence(length=4).expand(torch.tensor([7, 7]), {}, rb.storage)
    data = rb.storage.get(index)
    data.update({"index": index, "anchor_index": info["anchor_index"], "validity_mask": info["validity_mask"]})
    data.set("td_error", torch.tensor([1.0, 2.0, 3.0, 50.0, 4.0, 5.0, 6.0, 60.0]))  # the padded ones are ignored
    anchors, reduced = rb._anchor_reduced_priority(data, data["td_error"])
    assert anchors.tolist() == [7] and reduced.tolist() == [6.0]
    rb.update_tensordict_priority(data)
    drawn = rb.sample(2000, return_info=True)[1]["anchor_index"]
    assert (drawn == 7).float().mean() > 0.15  # slot 7 has priority 6, the 19 others 1


def test_a_custom_unit_and_bad_sequences():
    class Twice(SampleUnit):
        def expand(self, index, info, storage):
            return index.repeat_interleave(2), {**info, "copy": torch.arange(2 * index.numel()) % 2}

    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4, sample_unit=Twice())
    rb.extend(torch.arange(10.0))
    sample, info = rb.sample(return_info=True)
    assert sample.shape == (8,) and torch.equal(sample[0::2], sample[1::2]) and info["copy"].tolist() == [0, 1] * 4
    for bad in ({"length": 0}, {"length": 2, "episode_boundary": "teleport"}, {"length": 2, "dilation": 0}):
        with pytest.raises(ValueError):
            Sequence(**bad)
    tensors = ReplayBuffer(storage=LazyTensorStorage(10))
    tensors.extend(torch.arange(5))
    with pytest.raises(TypeError, match="TensorDict"):
        Sequence(length=2).expand(torch.tensor([0]), {}, tensors.storage)
