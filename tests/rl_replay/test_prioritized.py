"""PrioritizedSampler and prioritized buffers: frequencies, weights, updates, multi-dim storages, state, threads."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tdict import TensorDict

from rl_replay import (
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
)

EPS = 1e-8
CHI2_999 = {7: 24.322, 9: 27.877, 11: 31.264}  # chi-square 0.999 quantiles by degrees of freedom


def _chi2(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs
    return float(((counts - expected) ** 2 / expected).sum())


def _buffer(n, alpha, beta, seed=0, **kw):
    rb = PrioritizedReplayBuffer(
        alpha=alpha, beta=beta, storage=LazyTensorStorage(n), generator=torch.Generator().manual_seed(seed), **kw
    )
    rb.extend(torch.arange(n))
    return rb


def test_frequencies_match_priority_power_alpha():
    p = torch.tensor([0.5, 1.0, 2.0, 3.0, 0.1, 4.0, 1.5, 2.5])
    alpha = 0.7
    rb = _buffer(8, alpha, 1.0)
    rb.update_priority(torch.arange(8), p)
    idx = torch.cat([rb.sample(1000, return_info=True)[1]["index"] for _ in range(20)])
    counts = np.bincount(idx.numpy(), minlength=8)
    q = (p.double().numpy() + EPS) ** alpha
    assert _chi2(counts, q / q.sum()) < CHI2_999[7]
    # and clearly not uniform
    assert _chi2(counts, np.full(8, 1 / 8)) > 10 * CHI2_999[7]


def test_importance_weights_follow_formula():
    p = torch.tensor([0.2, 1.0, 3.0, 0.7, 5.0])
    alpha, beta = 0.6, 0.4
    rb = _buffer(5, alpha, beta)
    rb.update_priority(torch.arange(5), p)
    _, info = rb.sample(200, return_info=True)
    q = (p.double() + EPS) ** alpha
    P = q / q.sum()
    w = (5 * P) ** (-beta)
    expected = (w / w.max())[info["index"]]
    assert info["priority_weight"].dtype == torch.float32
    torch.testing.assert_close(info["priority_weight"].double(), expected, rtol=1e-6, atol=0)


def test_new_items_get_max_priority_and_update_changes_distribution():
    rb = _buffer(10, 1.0, 1.0)
    assert torch.allclose(rb.sampler._sum_tree[:10], torch.full((10,), 1.0 + EPS, dtype=torch.float64))
    rb.update_priority(torch.tensor([3]), torch.tensor([50.0]))
    idx = rb.sample(2000, return_info=True)[1]["index"]
    share = (idx == 3).double().mean().item()
    assert abs(share - 50 / 59) < 0.03
    rb.extend(torch.tensor([10, 11]))  # overwrite items 0 and 1: they get the max priority seen (50)
    assert rb.sampler._priority[:2].tolist() == [50.0, 50.0]
    rb.update_priority(torch.tensor([3, 0, 1]), torch.tensor([1.0, -1.0, 1.0]))  # |p|: -1 counts as 1
    idx = rb.sample(4000, return_info=True)[1]["index"]
    counts = np.bincount(idx.numpy(), minlength=10)
    assert _chi2(counts, np.full(10, 0.1)) < CHI2_999[9]


def test_update_priority_duplicates_last_wins_and_negative_index_skipped():
    rb = _buffer(6, 1.0, 1.0)
    rb.update_priority(torch.tensor([2, 2, 2, -1, 4]), torch.tensor([5.0, 6.0, 7.0, 100.0, 2.0]))
    assert rb.sampler._priority.tolist() == [1.0, 1.0, 7.0, 1.0, 2.0, 1.0]
    assert rb.sampler.default_priority == 7.0


def test_bad_priorities_raise_before_any_change():
    rb = _buffer(6, 1.0, 1.0)
    before = (rb.sampler._sum_tree._nodes.clone(), rb.sampler._min_tree._nodes.clone(), rb.sampler._priority.clone())
    with pytest.raises(ValueError, match="finite"):
        rb.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="one value per index"):
        rb.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(IndexError, match=r"\[0, 6\)"):
        rb.update_priority(torch.tensor([0, 6]), torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="integers"):
        rb.update_priority(torch.tensor([0.5]), torch.tensor([1.0]))
    after = (rb.sampler._sum_tree._nodes, rb.sampler._min_tree._nodes, rb.sampler._priority)
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert rb.sampler.default_priority == 1.0
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedSampler(10, alpha=-1.0, beta=0.5)
    with pytest.raises(ValueError, match="reduction"):
        PrioritizedSampler(10, alpha=1.0, beta=0.5, reduction="sum")
    with pytest.raises(RuntimeError, match="empty"):
        PrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=LazyTensorStorage(4)).sample(2)


@settings(max_examples=30)
@given(
    st.integers(1, 40),
    st.floats(0.0, 1.5),
    st.lists(st.tuples(st.integers(0, 39), st.floats(-10.0, 10.0, allow_nan=False)), min_size=1, max_size=60),
)
def test_trees_equal_recomputation_from_stored_priorities(n, alpha, updates):
    sampler = PrioritizedSampler(n, alpha=alpha, beta=0.5)
    storage = LazyTensorStorage(n)
    storage.set(torch.arange(n), torch.zeros(n))
    sampler.register_storage(storage)
    sampler.extend(torch.arange(n))
    index = torch.tensor([i % n for i, _ in updates])
    values = torch.tensor([v for _, v in updates], dtype=torch.float64)
    sampler.update_priority(index, values)
    ref = np.ones(n)
    for i, v in zip(index.tolist(), values.tolist()):
        ref[i] = abs(v)
    np.testing.assert_array_equal(sampler._priority.numpy(), ref)
    q = (ref + EPS) ** alpha
    np.testing.assert_allclose(sampler._sum_tree[:].numpy(), q, rtol=1e-15)
    assert sampler._sum_tree.sum().item() == pytest.approx(q.sum(), rel=1e-12)
    assert sampler._min_tree.min().item() == pytest.approx(q.min(), rel=1e-15)
    # sampled indices are valid and weights match the formula
    sampler._rng = torch.Generator().manual_seed(0)
    idx, info = sampler.sample(storage, 64)
    assert int(idx.min()) >= 0 and int(idx.max()) < n
    np.testing.assert_allclose(info["priority_weight"].numpy(), (q[idx.numpy()] / q.min()) ** -0.5, rtol=1e-5)


def test_ndim2_storage():
    storage = LazyTensorStorage(12, ndim=2)  # 3 rows (time) x 4 envs
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=storage, batch_size=3000, generator=torch.Generator().manual_seed(0), dim_extend=0
    )
    data = TensorDict(
        obs=torch.arange(12.0).reshape(3, 4), td_error=torch.arange(1.0, 13.0).reshape(3, 4), batch_size=[3, 4]
    )
    rb.extend(data)
    assert rb.sampler._priority.tolist() == list(range(1, 13))
    sample, info = rb.sample(return_info=True)
    assert isinstance(info["index"], tuple) and sample["index"].shape == (3000, 2)
    flat = sample["index"][:, 0] * 4 + sample["index"][:, 1]
    assert torch.equal(sample["obs"], flat.float())
    counts = np.bincount(flat.numpy(), minlength=12)
    assert _chi2(counts, np.arange(1, 13) / 78) < CHI2_999[11]
    # priorities come back through the [B, 2] index
    sample.set("td_error", torch.full((3000,), 0.5))
    rb.update_tensordict_priority(sample)
    hit = torch.unique(flat)
    assert torch.all(rb.sampler._priority[hit] == 0.5)
    # the tuple index of a plain update works too
    rb.update_priority(info["index"], torch.full((3000,), 2.0))
    assert torch.all(rb.sampler._priority[hit] == 2.0)


def test_tensordict_buffer_extend_priorities_and_reduction():
    rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=LazyTensorStorage(6), reduction="mean")
    rb.extend(
        TensorDict(obs=torch.zeros(3), td_error=torch.tensor([[1.0, 3.0], [2.0, 2.0], [0.0, 8.0]]), batch_size=[3])
    )
    assert rb.sampler._priority[:3].tolist() == [2.0, 2.0, 4.0]
    # items without a priority entry get the max seen (a storage holds one set of keys: another buffer)
    plain = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=LazyTensorStorage(6))
    plain.extend(TensorDict(obs=torch.zeros(2), batch_size=[2]))
    plain.update_priority(torch.tensor([0]), torch.tensor([4.0]))
    plain.extend(TensorDict(obs=torch.zeros(2), batch_size=[2]))
    assert plain.sampler._priority[2:4].tolist() == [4.0, 4.0]
    with pytest.raises(ValueError, match="td_error"):
        rb.extend(TensorDict(obs=torch.zeros(2), td_error=torch.tensor([1.0, float("inf")]), batch_size=[2]))
    assert len(rb) == 3  # nothing written by the failed extend
    sample = rb.sample(8)
    sample.set("td_error", torch.ones(8, 3) * torch.tensor([1.0, 2.0, 6.0]))
    rb.update_tensordict_priority(sample)
    assert torch.all(rb.sampler._priority[sample["index"]] == 3.0)


def test_state_dict_roundtrip_gives_identical_samples():
    def make():
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=0.7,
            beta=0.5,
            storage=LazyTensorStorage(100),
            batch_size=16,
            generator=torch.Generator().manual_seed(3),
        )
        rb.extend(
            TensorDict(
                obs=torch.arange(100.0),
                td_error=torch.rand(100, generator=torch.Generator().manual_seed(1)),
                batch_size=[100],
            )
        )
        return rb

    rb = make()
    for _ in range(5):
        s = rb.sample()
        s.set("td_error", s["obs"] / 10)
        rb.update_tensordict_priority(s)
    state = rb.state_dict()
    other = make()
    other.load_state_dict(state)
    for _ in range(5):
        a, b = rb.sample(), other.sample()
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["priority_weight"], b["priority_weight"])
        a.set("td_error", a["obs"] / 7)
        rb.update_tensordict_priority(a)
        other.update_tensordict_priority(a)


def test_max_priority_within_buffer():
    sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0, max_priority_within_buffer=True)
    rb = ReplayBuffer(storage=LazyTensorStorage(4), sampler=sampler)
    sampler.register_storage(rb.storage)
    rb.extend(torch.zeros(4))
    rb.update_priority(torch.arange(4), torch.tensor([9.0, 2.0, 3.0, 1.0]))
    rb.extend(torch.zeros(1))  # overwrites item 0 (priority 9): new item gets the max of the rest
    assert sampler._priority.tolist() == [3.0, 2.0, 3.0, 1.0]
    sampler._empty()
    assert sampler.default_priority == 1.0


def test_list_storage_and_reset():
    rb = PrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=ListStorage(5), generator=torch.Generator().manual_seed(0)
    )
    rb.extend(["a", "b", "c"])
    rb.update_priority(torch.tensor([1]), 1e6)
    assert rb.sample(5) == ["b"] * 5
    rb.empty()
    assert float(rb.sampler._sum_tree.sum()) == 0.0 and rb.sampler.default_priority == 1.0


def test_async_writer_and_learner_keep_trees_consistent():
    capacity = 2000
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.6,
        beta=0.4,
        storage=LazyTensorStorage(capacity),
        batch_size=64,
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(TensorDict(obs=torch.zeros(64), td_error=torch.rand(64), batch_size=[64]))
    stop = threading.Event()
    errors: list = []
    bad: list = []

    def writer():
        g = torch.Generator().manual_seed(1)
        k = 0
        while not stop.is_set():
            n = int(torch.randint(1, 50, (1,), generator=g))
            rb.extend(
                TensorDict(obs=torch.full((n,), float(k)), td_error=torch.rand(n, generator=g) * 5, batch_size=[n])
            )
            k += 1

    def learner():
        g = torch.Generator().manual_seed(2)
        while not stop.is_set():
            with rb._lock:  # the length at sample time, read atomically with the sample
                s, info = rb.sample(return_info=True)
                length = len(rb)
            idx = info["index"]
            if int(idx.min()) < 0 or int(idx.max()) >= length:
                bad.append((idx, length))
            s.set("td_error", torch.rand(64, generator=g))
            rb.update_tensordict_priority(s)

    def run(f):
        try:
            f()
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(f,)) for f in (writer, learner)]
    for t in threads:
        t.start()
    time.sleep(2.0)
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors and not bad
    sampler = rb.sampler
    n = len(rb)
    raw = sampler._priority.numpy()
    q = (raw[:n] + EPS) ** 0.6
    np.testing.assert_allclose(sampler._sum_tree[:n].numpy(), q, rtol=1e-14)  # torch vs numpy pow: last ulp
    assert np.all(sampler._sum_tree[n:].numpy() == 0) and np.all(np.isinf(sampler._min_tree[n:].numpy()))
    for tree, reduce in ((sampler._sum_tree, np.sum), (sampler._min_tree, np.min)):
        for parent, child in zip(tree._levels[:-1], tree._levels[1:]):
            np.testing.assert_allclose(parent.numpy(), reduce(child.view(-1, tree.arity).numpy(), axis=1), rtol=1e-12)
    assert sampler._sum_tree.sum().item() == pytest.approx(q.sum(), rel=1e-12)
    assert sampler._min_tree.min().item() == pytest.approx(q.min(), rel=1e-14)


def test_update_priority_inputs_are_not_modified_and_abs_is_stored():
    """float64 priorities skip the copy: the caller's tensor must stay as given; negatives are stored as |p|."""
    sampler = PrioritizedSampler(8, alpha=0.5, beta=1.0)
    sampler.extend(torch.arange(8))
    given = torch.tensor([-2.0, 3.0, -0.5, 1.0], dtype=torch.float64)
    index = torch.tensor([1, 3, 5, 3])  # index 3 twice: the last value (1.0) wins
    before = (given.clone(), index.clone())
    sampler.update_priority(index, given)
    assert torch.equal(given, before[0]) and torch.equal(index, before[1])
    expected = np.ones(8)
    expected[[1, 3, 5]] = [2.0, 1.0, 0.5]
    np.testing.assert_array_equal(sampler._priority.numpy(), expected)
    np.testing.assert_allclose(sampler._sum_tree[:].numpy(), (expected + EPS) ** 0.5, rtol=1e-15)
    assert sampler.default_priority == 3.0  # the largest |priority| seen, before last-wins
    sampler.update_priority(torch.tensor([0, 2]), torch.tensor([-4.0, 0.25]))  # float32 input
    assert sampler._priority[0].item() == 4.0 and sampler.default_priority == 4.0
    with pytest.raises(ValueError, match="finite"):
        sampler.update_priority(torch.tensor([6]), torch.tensor([-math.inf], dtype=torch.float64))
    assert sampler._priority[6].item() == 1.0
