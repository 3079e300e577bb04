"""rl-replay's trees hand batched writes and prefix searches to rl-kernels' Triton kernels on CUDA.

On a CPU-only machine the kernel path is forced with the internal switch ``rl_replay.trees._FORCE_KERNELS``
and runs under Triton's interpreter; results, errors and checkpoints must be those of the torch path.
The fallback (rl-kernels not importable) must leave the torch path as it was.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import pytest
import torch

if not torch.cuda.is_available():  # before any kernel module is imported (triton.jit reads it then)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import rl_replay.trees as replay_trees  # noqa: E402
from rl_replay import LazyTensorStorage, MinTree, PrioritizedSampler, ReplayBuffer, SumTree  # noqa: E402

pytest.importorskip("triton")
kernel_trees = pytest.importorskip("rl_kernels.trees")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def calls(monkeypatch):
    """Forces the kernel path and counts the calls that reach rl-kernels."""
    monkeypatch.setattr(replay_trees, "_FORCE_KERNELS", True)
    monkeypatch.setattr(replay_trees, "_KERNELS", [])
    counts = {"write": 0, "search": 0}
    write, search = kernel_trees.tree_write_, kernel_trees.tree_search

    def counted_write(*args, **kwargs):
        counts["write"] += 1
        return write(*args, **kwargs)

    def counted_search(*args, **kwargs):
        counts["search"] += 1
        return search(*args, **kwargs)

    monkeypatch.setattr(kernel_trees, "tree_write_", counted_write)
    monkeypatch.setattr(kernel_trees, "tree_search", counted_search)
    return counts


def _torch_path(fn):
    """Runs ``fn`` with the kernel path switched off (the reference)."""
    force, cache = replay_trees._FORCE_KERNELS, list(replay_trees._KERNELS)
    replay_trees._FORCE_KERNELS = False
    replay_trees._KERNELS.clear()
    replay_trees._KERNELS.append(None)
    try:
        return fn()
    finally:
        replay_trees._FORCE_KERNELS = force
        replay_trees._KERNELS[:] = cache


def _buffer(n, seed, **kw):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(n, device=DEVICE),
        sampler=PrioritizedSampler(n, device=DEVICE, **kw),
        generator=torch.Generator(device=DEVICE).manual_seed(seed),
    )
    rb.extend(torch.arange(float(n), device=DEVICE))
    return rb


def _run_buffer(seed, **kw):
    """A short prioritized-replay session: its trees, samples and weights."""
    gen = torch.Generator().manual_seed(seed)
    n = 90
    rb = _buffer(n, seed, **kw)
    out = []
    for _ in range(3):
        index = torch.randint(0, n, (40,), generator=gen).to(DEVICE)  # duplicates: the last wins
        priority = (torch.randint(0, 24, (40,), generator=gen) / 4).to(DEVICE)
        rb.update_priority(index, priority)
        data, info = rb.sample(64, return_info=True)
        out.append((data.clone(), info["priority_weight"].clone()))
    sampler: Any = rb.sampler
    return sampler._sum_tree._nodes.clone(), sampler._min_tree._nodes.clone(), out, sampler.state_dict()


def test_sampler_takes_the_kernel_path_and_matches_the_torch_path_exactly(calls):
    # alpha = 1, eps = 0: the tree values are the (dyadic) priorities, every sum is exact
    kw = {"alpha": 1.0, "beta": 0.5, "eps": 0.0, "max_priority_within_buffer": True}
    got = _run_buffer(0, **kw)
    assert calls["write"] > 0 and calls["search"] == 3
    want = _torch_path(lambda: _run_buffer(0, **kw))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    for (data, weight), (data_ref, weight_ref) in zip(got[2], want[2]):
        assert torch.equal(data, data_ref)
        assert torch.allclose(weight, weight_ref, rtol=1e-6)
    # same checkpoint format: the kernel path's state restores into a torch-path sampler, and back
    assert got[3].keys() == want[3].keys()
    for key in ("sum_tree", "min_tree", "max_tree", "priority"):
        assert torch.equal(got[3][key], want[3][key])


def test_default_parameters_agree_up_to_rounding(calls):
    kw = {"alpha": 0.6, "beta": 0.4}
    got = _run_buffer(1, **kw)
    want = _torch_path(lambda: _run_buffer(1, **kw))
    assert torch.allclose(got[0], want[0], rtol=1e-12) and torch.allclose(got[1], want[1], rtol=1e-12)
    same = sum(int((a[0] == b[0]).sum()) for a, b in zip(got[2], want[2]))
    assert same >= 0.99 * 3 * 64
    assert calls["search"] == 3


def test_tree_api_on_the_kernel_path(calls):
    gen = torch.Generator().manual_seed(2)
    capacity, arity = 77, 4
    trees = SumTree(capacity, device=DEVICE, arity=arity), MinTree(capacity, device=DEVICE, arity=arity)
    refs = _torch_path(
        lambda: (SumTree(capacity, device=DEVICE, arity=arity), MinTree(capacity, device=DEVICE, arity=arity))
    )
    for _ in range(3):
        index = torch.randint(0, capacity, (50,), generator=gen).to(DEVICE)
        values = (torch.randint(0, 16, (50,), generator=gen) / 4).to(DEVICE)
        for tree in trees:
            tree.update(index, values)
        _torch_path(lambda: [ref.update(index, values) for ref in refs])
    assert calls["write"] == 6
    for tree, ref in zip(trees, refs):
        assert torch.equal(tree._nodes, ref._nodes)
        assert torch.equal(tree.query(3, 60), ref.query(3, 60))
    cumsum = refs[0][:].cumsum(0)
    mass = torch.cat([cumsum, cumsum - 0.125, torch.tensor([0.0, cumsum[-1].item() + 1.0], device=DEVICE)])
    for side in ("left", "right"):
        got = trees[0].find_prefix(mass, side=side)
        assert torch.equal(got, _torch_path(lambda: refs[0].find_prefix(mass, side=side)))
        assert torch.equal(got, torch.searchsorted(cumsum, mass, side=side))
    assert torch.equal(trees[0].scan_lower_bound(mass[:5]), torch.searchsorted(cumsum, mass[:5]))
    # errors are raised before the kernels, as on the torch path
    before = trees[0]._nodes.clone()
    with pytest.raises(IndexError, match=r"index must lie in \[0, 77\)"):
        trees[0].update(torch.tensor([0, 77], device=DEVICE), 1.0)
    with pytest.raises(ValueError, match="side must be 'right' or 'left'"):
        trees[0].find_prefix(mass, side="middle")
    assert torch.equal(trees[0]._nodes, before)


def test_bad_priorities_raise_the_same_errors(calls):
    rb = _buffer(8, 0, alpha=0.7, beta=0.5)
    before = rb.sampler.state_dict()
    with pytest.raises(ValueError, match="priority must be finite"):
        rb.update_priority(torch.tensor([1, 2], device=DEVICE), torch.tensor([1.0, math.inf], device=DEVICE))
    with pytest.raises(IndexError, match="index must lie in"):
        rb.update_priority(torch.tensor([8], device=DEVICE), 1.0)
    assert torch.equal(rb.sampler.state_dict()["sum_tree"], before["sum_tree"])


def test_fallback_when_rl_kernels_is_missing(monkeypatch):
    monkeypatch.setattr(replay_trees, "_FORCE_KERNELS", True)
    monkeypatch.setattr(replay_trees, "_KERNELS", [])
    monkeypatch.setitem(sys.modules, "rl_kernels", None)  # import rl_kernels now raises ImportError
    monkeypatch.setitem(sys.modules, "rl_kernels.trees", None)

    def fail(*args, **kwargs):
        raise AssertionError("rl_kernels was called")

    monkeypatch.setattr(kernel_trees, "tree_write_", fail)
    monkeypatch.setattr(kernel_trees, "tree_search", fail)
    assert replay_trees._kernels(torch.device(DEVICE)) is None
    kw = {"alpha": 1.0, "beta": 0.5, "eps": 0.0}
    got = _run_buffer(3, **kw)
    want = _torch_path(lambda: _run_buffer(3, **kw))
    assert torch.equal(got[0], want[0])
    assert all(torch.equal(a[0], b[0]) for a, b in zip(got[2], want[2]))


def test_cpu_trees_stay_on_the_torch_path_without_the_switch(monkeypatch):
    monkeypatch.setattr(replay_trees, "_KERNELS", [])
    assert replay_trees._kernels(torch.device("cpu")) is None
    assert replay_trees._KERNELS == []  # rl-kernels is not even looked up for CPU trees
