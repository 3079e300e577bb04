"""SumTree / MinTree against numpy references: random update sequences, range queries, prefix search."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_replay.trees import MinTree, SumTree


@st.composite
def tree_case(draw):
    capacity = draw(st.integers(1, 300))
    arity = draw(st.sampled_from([2, 3, 5, 32]))
    n_updates = draw(st.integers(1, 6))
    updates = []
    for _ in range(n_updates):
        k = draw(st.integers(0, 2 * capacity))
        index = draw(st.lists(st.integers(0, capacity - 1), min_size=k, max_size=k))
        # small integers: every partial sum is exact in float64, so comparisons can be exact
        values = draw(st.lists(st.integers(0, 9), min_size=k, max_size=k))
        updates.append((index, values))
    return capacity, arity, updates


def _reference(capacity, updates, fill):
    ref = np.full(capacity, fill, dtype=np.float64)
    for index, values in updates:
        for i, v in zip(index, values):  # last write wins
            ref[i] = v
    return ref


def _check_internal(tree, reduce):
    """Every internal node is the reduction of its children."""
    levels = tree._levels
    for parent, child in zip(levels[:-1], levels[1:]):
        expected = reduce(child.view(-1, tree.arity).numpy(), axis=1)
        np.testing.assert_array_equal(parent.numpy(), expected)
    assert float(tree._root[0]) == reduce(levels[0].numpy())


@settings(max_examples=60)
@given(tree_case())
def test_sum_tree_matches_numpy(case):
    capacity, arity, updates = case
    tree = SumTree(capacity, arity=arity)
    for index, values in updates:
        tree.update(torch.tensor(index, dtype=torch.long), torch.tensor(values, dtype=torch.float64))
    ref = _reference(capacity, updates, 0.0)
    np.testing.assert_array_equal(tree[:].numpy(), ref)
    assert tree.sum().item() == ref.sum()
    _check_internal(tree, np.sum)
    rng = np.random.default_rng(capacity)
    for _ in range(10):
        a, b = sorted(rng.integers(0, capacity + 1, size=2).tolist())
        assert tree.query(a, b).item() == ref[a:b].sum()
    # prefix search: every boundary (each cumsum value), midpoints, 0, negatives and past-the-end
    cs = np.cumsum(ref)
    queries = np.concatenate([cs, cs - 0.5, [0.0, -1.0, cs[-1], cs[-1] + 1.0, 1e9]])
    for side in ("right", "left"):
        got = tree.find_prefix(torch.tensor(queries), side=side).numpy()
        np.testing.assert_array_equal(got, np.searchsorted(cs, queries, side=side))


@settings(max_examples=60)
@given(tree_case())
def test_min_tree_matches_numpy(case):
    capacity, arity, updates = case
    tree = MinTree(capacity, arity=arity)
    for index, values in updates:
        tree.update(torch.tensor(index, dtype=torch.long), torch.tensor(values, dtype=torch.float64))
    ref = _reference(capacity, updates, math.inf)
    np.testing.assert_array_equal(tree[:].numpy(), ref)
    assert tree.min().item() == ref.min()
    _check_internal(tree, np.min)
    rng = np.random.default_rng(capacity)
    for _ in range(10):
        a, b = sorted(rng.integers(0, capacity + 1, size=2).tolist())
        assert tree.query(a, b).item() == (ref[a:b].min() if b > a else math.inf)


@pytest.mark.parametrize("capacity,arity", [(1_000_000, 32), (50_000, 2), (70_000, 32)])
def test_large_trees_float_values(capacity, arity):
    """Float priorities at scale: totals close to numpy, prefix search lands where the cumsum crosses."""
    g = torch.Generator().manual_seed(0)
    tree, mtree = SumTree(capacity, arity=arity), MinTree(capacity, arity=arity)
    values = torch.rand(capacity, dtype=torch.float64, generator=g)
    index = torch.arange(capacity)
    tree.update(index, values)
    mtree.update(index, values)
    new_index = torch.randint(0, capacity, (40_000,), generator=g)  # many duplicates: last wins
    new_values = torch.rand(40_000, dtype=torch.float64, generator=g)
    tree.update(new_index, new_values)
    mtree.update(new_index, new_values)
    ref = values.numpy().copy()
    for i, v in zip(new_index.tolist(), new_values.tolist()):
        ref[i] = v
    np.testing.assert_array_equal(tree[:].numpy(), ref)
    assert tree.sum().item() == pytest.approx(ref.sum(), rel=1e-12)
    assert mtree.min().item() == ref.min()
    cs = np.cumsum(ref)
    q = np.random.default_rng(0).uniform(0, cs[-1], size=4096)
    got = tree.find_prefix(torch.tensor(q)).numpy()
    expected = np.searchsorted(cs, q, side="right")
    # float rounding may move a query sitting within 1e-9 of a boundary by one leaf
    off = got != expected
    assert off.mean() < 1e-3
    assert np.all(np.abs(cs[np.minimum(got[off], capacity - 1)] - q[off]) < 1e-6 * cs[-1])


def test_duplicates_last_write_wins_with_many_indices():
    tree = SumTree(10)
    index = torch.tensor([3] * 50_000 + [4])
    values = torch.arange(50_001, dtype=torch.float64)
    tree.update(index, values)
    assert tree[3].item() == 49_999.0 and tree[4].item() == 50_000.0 and tree.sum().item() == 99_999.0


def test_scalar_value_broadcasts_and_setitem():
    tree = MinTree(6, arity=2)
    tree[torch.tensor([1, 2])] = 4.0
    tree.update([5], [1.5])
    assert tree[:].tolist() == [math.inf, 4.0, 4.0, math.inf, math.inf, 1.5]
    assert tree.min().item() == 1.5 and tree.query(0, 3).item() == 4.0


def test_bad_input_raises_before_writing():
    tree = SumTree(8)
    tree.update(torch.arange(8), torch.ones(8))
    before = tree._nodes.clone()
    with pytest.raises(IndexError, match=r"\[0, 8\)"):
        tree.update(torch.tensor([1, 8]), torch.tensor([5.0, 5.0]))
    with pytest.raises(IndexError):
        tree.update(torch.tensor([-1]), torch.tensor([5.0]))
    with pytest.raises(ValueError, match="one value per index"):
        tree.update(torch.tensor([1, 2]), torch.tensor([5.0, 5.0, 5.0]))
    with pytest.raises(TypeError, match="integer"):
        tree.update(torch.tensor([1.0]), torch.tensor([5.0]))
    with pytest.raises(IndexError):
        tree.query(3, 9)
    assert torch.equal(tree._nodes, before)
    with pytest.raises(ValueError, match="capacity"):
        SumTree(0)
    with pytest.raises(ValueError, match="arity"):
        SumTree(4, arity=1)


def test_state_dict_roundtrip_and_share_memory():
    g = torch.Generator().manual_seed(1)
    tree = SumTree(1000, arity=4)
    tree.update(torch.randint(0, 1000, (500,), generator=g), torch.rand(500, dtype=torch.float64, generator=g))
    other = SumTree(1000, arity=4).share_memory_()
    other.load_state_dict(tree.state_dict())
    assert other.is_shared() and torch.equal(other._nodes, tree._nodes)
    q = torch.rand(64, dtype=torch.float64, generator=g) * tree.sum()
    assert torch.equal(other.find_prefix(q), tree.find_prefix(q))
    with pytest.raises(ValueError, match="capacity"):
        SumTree(999, arity=4).load_state_dict(tree.state_dict())


def test_find_prefix_is_batched_level_by_level():
    """One descent for all values: the number of levels, not the number of values, sets the op count."""
    tree = SumTree(1_000_000)
    assert len(tree._levels) == 4  # 32-ary: root + 4 levels for a million leaves
    binary = SumTree(1000, arity=2)
    assert len(binary._levels) == 10
    values = torch.zeros(3, 4, dtype=torch.float64)
    assert binary.find_prefix(values).shape == (3, 4)


@pytest.mark.parametrize("capacity,arity", [(1_000_000, 32), (3000, 4), (40, 3)])
def test_descend_with_scratch_buffers_matches_numpy_searchsorted(capacity, arity):
    """The sampler's path (scratch tensors, clamped result) equals numpy's searchsorted on the cumsum."""
    g = torch.Generator().manual_seed(capacity)
    tree = SumTree(capacity, arity=arity)
    leaves = torch.rand(capacity, dtype=torch.float64, generator=g)
    leaves[torch.randint(capacity, (capacity // 4,), generator=g)] = 0.0  # zero leaves are never found (right)
    tree.update(torch.arange(capacity), leaves)
    cs = np.cumsum(leaves.numpy())
    bufs = tree._descend_buffers(257)
    for _ in range(3):  # the buffers are reused: results must not alias them
        values = torch.rand(257, dtype=torch.float64, generator=g) * cs[-1]
        values[:3] = torch.tensor([0.0, float(cs[-1]), float(cs[-1]) * 2])
        out = tree._descend(values, True, capacity - 1, bufs)
        expected = np.minimum(np.searchsorted(cs, values.numpy(), side="right"), capacity - 1)
        # the tree sums blocks before adding them up: values within rounding of a boundary may differ
        v = values.numpy()
        near = np.searchsorted(cs, v * (1 - 1e-12), side="right") != np.searchsorted(cs, v * (1 + 1e-12), side="right")
        assert np.array_equal(out.numpy()[~near], expected[~near])
        assert torch.equal(out, tree.find_prefix(values).clamp_(max=capacity - 1))
        assert not any(out.data_ptr() == b.data_ptr() for b in bufs.values() if isinstance(b, torch.Tensor))
    other = tree._descend(values[:5], True, capacity - 1, bufs)  # another batch size: no buffers used
    assert torch.equal(other, tree.find_prefix(values[:5]).clamp_(max=capacity - 1))
