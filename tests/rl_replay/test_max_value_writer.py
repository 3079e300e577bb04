"""TensorDictMaxValueWriter: keeps the highest-ranked items; checked against a one-at-a-time heap reference."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_replay import (
    LazyTensorStorage,
    ReplayBuffer,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
)
from tdict import TensorDict


class HeapReference:
    """TorchRL 0.14's algorithm, item by item: fill free slots, then replace the lowest (a min-heap
    of (rank, slot)) when a new rank is strictly higher."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.heap, self.cursor = capacity, [], 0
        self.slots: dict[int, int] = {}  # slot -> item id

    def insert(self, rank: float, item: int) -> int:
        if len(self.heap) < self.capacity:
            slot = self.cursor
            self.cursor = (self.cursor + 1) % self.capacity
            heapq.heappush(self.heap, (rank, slot))
        elif rank > self.heap[0][0]:
            slot = heapq.heappop(self.heap)[1]
            heapq.heappush(self.heap, (rank, slot))
        else:
            return -1
        self.slots[slot] = item
        return slot

    def stored_ranks(self) -> list:
        return sorted(r for r, _ in self.heap)


def _batch(ids: list, ranks: list) -> TensorDict:
    return TensorDict(
        {"id": torch.tensor(ids, dtype=torch.int64), "next": {"reward": torch.tensor(ranks, dtype=torch.float64)}},
        batch_size=[len(ids)],
    )


def _run(capacity: int, batches: list) -> tuple:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), writer=TensorDictMaxValueWriter())
    ref = HeapReference(capacity)
    next_id, rank_of, returned = 0, {}, []
    for ranks in batches:
        ids = list(range(next_id, next_id + len(ranks)))
        next_id += len(ranks)
        rank_of.update(zip(ids, ranks))
        data = _batch(ids, ranks)
        index = rb.extend(data)
        for r, i in zip(ranks, ids):
            ref.insert(r, i)
        kept = {ref.slots[s] for _, s in ref.heap}  # stored once the whole batch is in
        returned.append((ids, index, data["index"], [i in kept for i in ids]))
    return rb, ref, rank_of, returned


def _check_consistency(rb, rank_of, returned) -> None:
    n = len(rb)
    stored = rb.storage.get(torch.arange(n))
    assert stored["index"].tolist() == list(range(n))  # every stored row knows its slot
    for i, r in zip(stored["id"].tolist(), stored["next", "reward"].tolist()):
        assert rank_of[i] == r
    ids_in_storage = set(stored["id"].tolist())
    assert len(ids_in_storage) == n
    last_ids, last_index, last_entry, _ = returned[-1]
    assert torch.equal(last_index, last_entry)
    for i, slot in zip(last_ids, last_index.tolist()):
        # an item of the last batch has a slot iff it is stored there
        assert (slot >= 0) == (i in ids_in_storage)
        if slot >= 0:
            assert stored["id"][slot].item() == i


_distinct_batches = st.integers(1, 12).flatmap(
    lambda cap: st.tuples(st.just(cap), st.lists(st.integers(1, 2 * cap + 3), min_size=1, max_size=6))
)


@settings(max_examples=80)
@given(case=_distinct_batches, seed=st.integers(0, 10_000))
def test_distinct_ranks_match_reference(case, seed):
    capacity, sizes = case
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(sum(sizes)).astype(float).tolist()  # distinct: the kept set is unique
    batches, start = [], 0
    for s in sizes:
        batches.append(ranks[start : start + s])
        start += s
    rb, ref, rank_of, returned = _run(capacity, batches)
    assert len(rb) == min(capacity, sum(sizes))
    assert sorted(rb.storage.get(torch.arange(len(rb)))["next", "reward"].tolist()) == ref.stored_ranks()
    stored_ids = set(rb.storage.get(torch.arange(len(rb)))["id"].tolist())
    assert stored_ids == {ref.slots[s] for _, s in ref.heap}
    # with distinct ranks, which items of a batch are kept matches the reference exactly
    for ids, index, _, ref_kept in returned:
        assert [s >= 0 for s in index.tolist()] == ref_kept
    _check_consistency(rb, rank_of, returned)


@settings(max_examples=60)
@given(
    capacity=st.integers(1, 8),
    batches=st.lists(st.lists(st.integers(0, 4).map(float), min_size=1, max_size=10), min_size=1, max_size=5),
)
def test_tied_ranks_keep_same_multiset(capacity, batches):
    rb, ref, rank_of, returned = _run(capacity, batches)
    assert sorted(rb.storage.get(torch.arange(len(rb)))["next", "reward"].tolist()) == ref.stored_ranks()
    _check_consistency(rb, rank_of, returned)


def test_tie_rules():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(3), writer=TensorDictMaxValueWriter())
    rb.extend(_batch([0, 1, 2], [1.0, 1.0, 5.0]))
    # equal rank never replaces a stored item; the lowest slot among equal stored ranks goes first
    assert rb.extend(_batch([3], [1.0])).tolist() == [-1]
    assert rb.extend(_batch([4, 5], [2.0, 2.0])).tolist() == [0, 1]
    assert rb.extend(_batch([6, 7, 8], [3.0, 3.0, 2.5])).tolist() == [0, 1, -1]
    assert sorted(rb.storage.get(torch.arange(3))["id"].tolist()) == [2, 6, 7]
    # among new equal ranks the earlier one wins
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(2), writer=TensorDictMaxValueWriter())
    assert rb.extend(_batch([0, 1], [5.0, 1.0])).tolist() == [0, 1]
    assert rb.extend(_batch([2, 3], [3.0, 3.0])).tolist() == [1, -1]


@pytest.mark.parametrize("reduction", ["sum", "max", "min", "mean", "median"])
def test_reductions(reduction):
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(9, 5, generator=g)
    ref = {
        "sum": np.sum,
        "max": np.max,
        "min": np.min,
        "mean": np.mean,
        "median": lambda x, axis: np.sort(x, axis=axis)[:, (x.shape[1] - 1) // 2],
    }[reduction](rewards.numpy(), axis=1)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(4), writer=TensorDictMaxValueWriter(rank_key="r", reduction=reduction)
    )
    data = TensorDict(r=rewards, id=torch.arange(9), batch_size=[9])
    rb.extend(data)
    kept = sorted(rb.storage.get(torch.arange(4))["id"].tolist())
    assert kept == sorted(np.argsort(-ref, kind="stable")[:4].tolist())
    assert torch.allclose(
        rb.writer._ranks[:4].sort().values, torch.tensor(np.sort(ref)[-4:], dtype=torch.float64), atol=1e-6
    )


def test_trajectory_items_rank_by_summed_reward():
    # items are whole trajectories [B, T]: the rank is the sum over time
    rewards = torch.tensor([[1.0, 1.0, 1.0], [5.0, 0.0, 0.0], [0.0, 0.0, 0.5], [2.0, 2.0, 2.0]])
    data = TensorDict({"obs": torch.zeros(4, 3, 2), "next": {"reward": rewards}}, batch_size=[4, 3])
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(2), writer=TensorDictMaxValueWriter())
    assert rb.extend(data).tolist() == [-1, 0, -1, 1]
    assert rb.storage.get(torch.arange(2))["next", "reward"].sum(-1).tolist() == [5.0, 6.0]
    assert data["index"][:, 0].tolist() == [-1, 0, -1, 1]
    assert rb.sample(3).shape == torch.Size([3, 3])


def test_add_and_get_insert_index():
    w = TensorDictMaxValueWriter(rank_key="score")
    rb = ReplayBuffer(storage=LazyTensorStorage(2), writer=w)
    assert rb.add(TensorDict(score=torch.tensor(1.0), batch_size=[])) == 0
    assert rb.add(TensorDict(score=torch.tensor(3.0), batch_size=[])) == 1
    assert rb.add(TensorDict(score=torch.tensor(0.5), batch_size=[])) is None
    assert rb.add(TensorDict(score=torch.tensor(2.0), batch_size=[])) == 0
    assert rb.storage.get(torch.arange(2))["score"].tolist() == [2.0, 3.0]
    assert w._write_count == 3
    # get_insert_index reserves the slot (as in TorchRL) but writes nothing
    assert w.get_insert_index(TensorDict(score=torch.tensor([4.0, 1.0]), batch_size=[])) == 0  # rank: sum = 5
    assert w.get_insert_index(TensorDict(score=torch.tensor(1.0), batch_size=[])) is None
    assert w._ranks.tolist() == [5.0, 3.0]


def test_bad_input_changes_nothing():
    w = TensorDictMaxValueWriter(rank_key="score")
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4), writer=w)
    rb.extend(TensorDict(score=torch.arange(3.0), batch_size=[3]))
    state = w.state_dict()
    with pytest.raises(KeyError, match="rank_key 'score'"):
        rb.extend(TensorDict(other=torch.ones(2), batch_size=[2]))
    with pytest.raises(ValueError, match="NaN"):
        rb.extend(TensorDict(score=torch.tensor([1.0, float("nan")]), batch_size=[2]))
    with pytest.raises(TypeError, match="expects data to be a tensor collection"):
        w.extend(torch.ones(3))
    with pytest.raises(ValueError, match="empty batch_size"):
        w.extend(TensorDict(score=torch.tensor(1.0), batch_size=[]))
    assert len(rb) == 3
    new_state = w.state_dict()
    assert torch.equal(new_state.pop("ranks"), state.pop("ranks")) and new_state == state
    with pytest.raises(ValueError, match="ndim=1"):
        ReplayBuffer(storage=LazyTensorStorage(4, ndim=2), writer=TensorDictMaxValueWriter())
    with pytest.raises(ValueError, match="reduction"):
        TensorDictMaxValueWriter(reduction="prod")


def test_state_dict_dumps_loads_and_empty(tmp_path):
    w = TensorDictMaxValueWriter(rank_key=("a", "b"))
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(5), writer=w)
    rb.extend(TensorDict({"a": {"b": torch.tensor([3.0, 1.0, 4.0, 1.5, 9.0, 2.0, 6.0])}}, batch_size=[7]))
    state = w.state_dict()
    assert state["size"] == 5 and state["write_count"] == 5 and state["rank_key"] == ["a", "b"]
    assert sorted(state["ranks"].tolist()) == [2.0, 3.0, 4.0, 6.0, 9.0]
    w.dumps(tmp_path / "w")
    w2 = TensorDictMaxValueWriter()
    ReplayBuffer(storage=LazyTensorStorage(5), writer=w2)
    w2.loads(tmp_path / "w")
    assert w2._rank_key == ("a", "b")
    s2 = w2.state_dict()
    assert torch.equal(s2.pop("ranks"), state.pop("ranks")) and s2 == state
    rb.empty()
    assert len(rb) == 0 and w._size == 0
    assert rb.extend(TensorDict({"a": {"b": torch.tensor([1.0])}}, batch_size=[1])).tolist() == [0]


def test_vectorised_extend_is_fast():
    # 100k stored items, batches of 20k: a per-item Python loop would take about a second per call
    import time

    cap = 100_000
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(cap), writer=TensorDictMaxValueWriter(rank_key="r"))
    g = torch.Generator().manual_seed(0)
    first = torch.rand(cap, generator=g)
    rb.extend(TensorDict(r=first, batch_size=[cap]))
    batches = [TensorDict(r=torch.rand(20_000, generator=g) + 0.5, batch_size=[20_000]) for _ in range(3)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.perf_counter()
        for b in batches:
            rb.extend(b)
        per_call = (time.perf_counter() - start) / len(batches)
    finally:
        torch.set_num_threads(threads)
    assert per_call < 0.25, per_call
    everything = torch.cat([first.double(), *(b["r"].double() for b in batches)])
    assert torch.equal(rb.writer._ranks.sort().values, everything.sort().values[-cap:])


def test_not_stored_items_leave_priorities_alone():
    import importlib.util

    if importlib.util.find_spec("rl_replay.samplers.prioritized") is None:
        pytest.skip("rl_replay.samplers.prioritized not written yet")
    from rl_replay import PrioritizedSampler

    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(4),
        sampler=PrioritizedSampler(4, 1.0, 0.5),
        writer=TensorDictMaxValueWriter(rank_key="r"),
    )
    rb.extend(TensorDict(r=torch.arange(4.0), batch_size=[4]))
    rb.update_priority(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 0.5]))
    # -5 is not stored (index -1): slot 3's priority must not change; 9 replaces slot 0 (rank 0)
    assert rb.extend(TensorDict(r=torch.tensor([-5.0, 9.0]), batch_size=[2])).tolist() == [-1, 0]
    leaves = rb.sampler._sum_tree[torch.arange(4)].double()
    assert torch.allclose(leaves, torch.tensor([3.0, 2.0, 3.0, 0.5], dtype=torch.float64), atol=1e-6)  # eps added
