"""ConsumingSampler / ReplayBuffer(consume_after_n_samples=...): items leave after n samples and
their slots are written first (the slot orders are TorchRL 0.14's on the same writes)."""

from __future__ import annotations

import pytest
import torch

from rl_replay import (
    ConsumingSampler,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorStorage,
)


def test_items_are_consumed_after_n_samples():
    rb = ReplayBuffer(storage=ListStorage(5), batch_size=3, consume_after_n_samples=1)
    rb.extend([torch.tensor(i) for i in range(5)])
    first, info = rb.sample(return_info=True)
    assert len(first) == 3 and len(rb) == 2 and sorted(first.tolist()) == sorted(info["index"].tolist())
    second = rb.sample()
    assert sorted(first.tolist() + second.tolist()) == [0, 1, 2, 3, 4] and len(rb) == 0
    with pytest.raises(RuntimeError, match="Cannot sample from an empty storage"):
        rb.sample()
    twice = ReplayBuffer(storage=ListStorage(4), batch_size=4, consume_after_n_samples=2)
    twice.extend([torch.tensor(i) for i in range(4)])
    assert sorted(twice.sample().tolist()) == [0, 1, 2, 3] and len(twice) == 4
    assert sorted(twice.sample().tolist()) == [0, 1, 2, 3] and len(twice) == 0


def test_iteration_drains_the_buffer():
    rb = ReplayBuffer(storage=ListStorage(5), batch_size=2, sampler=ConsumingSampler())
    rb.extend([torch.tensor(i) for i in range(5)])
    seen = [x for batch in rb for x in batch.tolist()]
    assert sorted(seen) == [0, 1, 2, 3, 4] and len(rb) == 0


def _consume(rb: ReplayBuffer, slots: list[int]) -> None:
    """Marks ``slots`` consumed, in this order (as sampling them would)."""
    index = torch.tensor(slots)
    rb.sampler._sample_count[index] = 1
    rb.sampler._live_mask[index] = False
    rb.sampler._append_free_indices(index)


@pytest.mark.parametrize(
    "cursor,n,expected,cursor_after",
    [
        (99, 4, [10, 20, 30, 40], 99),  # consumed slots first, the cursor stays
        (99, 8, [10, 20, 30, 40, 99, 0, 1, 2], 3),  # then the cursor, wrapping
        (0, 15, [10, 20, 30, 40, *range(10), 11], 12),  # the cursor skips the slots just reused
    ],
)
def test_writes_reuse_consumed_slots_first(cursor, n, expected, cursor_after):
    rb = ReplayBuffer(storage=LazyTensorStorage(100), consume_after_n_samples=1)
    rb.extend(torch.arange(100))
    rb.writer._cursor = cursor
    _consume(rb, [10, 20, 30, 40])
    index = rb.extend(torch.arange(1000, 1000 + n))
    assert index.tolist() == expected and rb.writer._cursor == cursor_after
    assert rb.storage.get(index).tolist() == list(range(1000, 1000 + n)) and len(rb) == 100


def test_prefilled_storage_and_state_round_trip():
    rb = ReplayBuffer(storage=TensorStorage(torch.arange(5)), batch_size=3, consume_after_n_samples=1)
    assert len(rb) == 5
    rb.sample()
    assert len(rb) == 2
    copy = ReplayBuffer(storage=LazyTensorStorage(5), batch_size=3, consume_after_n_samples=1)
    copy.load_state_dict(rb.state_dict())
    assert len(copy) == 2
    assert sorted(copy.extend(torch.arange(3)).tolist()) == sorted(rb.sampler._free_indices.tolist())


def test_bad_setups_raise():
    with pytest.raises(ValueError, match="Prefetching is not supported"):
        ReplayBuffer(storage=ListStorage(10), batch_size=2, consume_after_n_samples=1, prefetch=1)
    with pytest.raises(ValueError, match="only supports the default RandomSampler"):
        ReplayBuffer(storage=ListStorage(10), sampler=SamplerWithoutReplacement(), consume_after_n_samples=1)
    with pytest.raises(ValueError, match="1-dimensional storages"):
        ReplayBuffer(storage=LazyTensorStorage(10, ndim=2), sampler=ConsumingSampler())
    with pytest.raises(ValueError, match="conflicts"):
        ReplayBuffer(storage=ListStorage(10), sampler=ConsumingSampler(2), consume_after_n_samples=1)
    with pytest.raises(TypeError, match="positive integer"):
        ReplayBuffer(storage=ListStorage(10), consume_after_n_samples=1.5)
