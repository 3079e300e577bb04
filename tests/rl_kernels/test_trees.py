"""rl_kernels.SumTree / MinTree (torch and Triton paths) against plain references written here.

References: the leaves are kept in a plain tensor updated in a Python loop (so the last occurrence of
a repeated index wins); a prefix search is ``searchsorted(cumsum(leaves), mass)``; a minimum is
``leaves.min()``. Priorities are multiples of 1/4 below 8, so every sum is exact in float32 and
float64 and the tree's answers must match the references exactly, boundaries included.
Without a GPU the Triton kernels run in Triton's interpreter (tests/rl_kernels/conftest.py), so
those cases stay small.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rl_kernels
from rl_kernels.trees import MinTree, SumTree, _search, tree_layout, tree_search, tree_write_


def _backend_or_skip(backend: str) -> None:
    if backend == "triton":
        pytest.importorskip("triton")


# ------------------------------------------------------------------------------------ references
def apply_updates(leaves: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> None:
    """The reference write: one index at a time, in order (the last occurrence wins)."""
    for i, v in zip(index.tolist(), values.tolist()):
        leaves[i] = v


def ref_search(leaves: torch.Tensor, mass: torch.Tensor, right: bool = False) -> torch.Tensor:
    return torch.searchsorted(leaves.cumsum(0), mass.to(leaves.dtype), right=right)


def check_internal_nodes(nodes: torch.Tensor, capacity: int, arity: int, reduce: str) -> None:
    """Every internal node equals the reduction of its children (exact for the test's values)."""
    top, depth, _ = tree_layout(capacity, arity)
    bounds, off, size = [], 1, top
    for _ in range(depth):
        bounds.append((off, size))
        off, size = off + size, size * arity
    op = {"sum": lambda x: x.sum(-1), "min": lambda x: x.amin(-1)}[reduce]
    for (p_off, p_size), (c_off, c_size) in zip(bounds[:-1], bounds[1:]):
        children = nodes[c_off : c_off + c_size].view(p_size, arity)
        assert torch.equal(nodes[p_off : p_off + p_size], op(children))
    assert nodes[0].item() == op(nodes[1 : 1 + top]).item()


def random_priorities(n: int, gen: torch.Generator, zero_share: float = 0.3) -> torch.Tensor:
    """Multiples of 1/4 in [0, 8), about ``zero_share`` of them zero."""
    values = torch.randint(1, 32, (n,), generator=gen).double() / 4
    return torch.where(torch.rand(n, generator=gen) < zero_share, torch.zeros(()), values)


# ------------------------------------------------------------------------------------ layout
def test_layout_matches_the_documented_formula():
    for capacity in (1, 2, 3, 16, 17, 100, 1000, 1_000_000):
        for arity in (2, 3, 16, 32):
            top, depth, num = tree_layout(capacity, arity)
            assert arity ** (depth - 1) < capacity <= arity**depth or (depth == 1 and capacity <= arity)
            assert 1 <= top <= arity and top * arity ** (depth - 1) >= capacity
            assert num == 1 + sum(top * arity**i for i in range(depth))


def test_public_names_resolve():
    assert rl_kernels.SumTree is SumTree and rl_kernels.MinTree is MinTree


# ------------------------------------------------------------------------------------ properties
# on a GPU each new tree shape compiles its kernels (about a second each): fewer examples there
_SETTINGS = {
    "torch": settings(max_examples=40),
    "triton": settings(max_examples=6 if torch.cuda.is_available() else 12),
}


def _tree_case(backend: str, device: torch.device):
    @_SETTINGS[backend]
    @given(
        capacity=st.integers(1, 70),
        arity=st.sampled_from([2, 3, 4, 5, 16, 32]),
        dtype=st.sampled_from([torch.float64, torch.float32]),
        seed=st.integers(0, 2**31 - 1),
        rounds=st.integers(1, 3),
    )
    def case(capacity, arity, dtype, seed, rounds):
        gen = torch.Generator().manual_seed(seed)
        sums = SumTree(capacity, device, dtype=dtype, arity=arity, backend=backend)
        mins = MinTree(capacity, device, dtype=dtype, arity=arity, backend=backend)
        leaves = torch.zeros(capacity, dtype=dtype)
        min_leaves = torch.full((capacity,), math.inf, dtype=dtype)
        for _ in range(rounds):
            n = int(torch.randint(1, 2 * capacity + 3, (), generator=gen))
            index = torch.randint(0, capacity, (n,), generator=gen)  # duplicates when n > 1, often
            values = random_priorities(n, gen).to(dtype)
            sums.update(index, values)
            mins.update(index, values)
            apply_updates(leaves, index, values)
            apply_updates(min_leaves, index, values)
            assert torch.equal(sums.leaves.cpu(), leaves)
            assert torch.equal(mins.leaves.cpu(), min_leaves)
            assert sums.total().item() == leaves.sum().item()
            assert mins.min().item() == min_leaves.min().item()
            check_internal_nodes(sums.nodes.cpu(), capacity, arity, "sum")
            check_internal_nodes(mins.nodes.cpu(), capacity, arity, "min")
        cumsum = leaves.cumsum(0)
        total = cumsum[-1].item()
        # every boundary exactly, just before and after it, zero, past the total, random masses
        mass = torch.cat(
            [
                cumsum,
                cumsum - 0.125,
                cumsum + 0.125,
                torch.tensor([0.0, total, total + 0.25, 2 * total + 1], dtype=dtype),
                torch.rand(16, generator=gen, dtype=dtype) * total,
            ]
        )
        assert torch.equal(sums.scan_lower_bound(mass).cpu(), ref_search(leaves, mass))
        assert torch.equal(
            tree_search(sums.nodes, mass, capacity=capacity, arity=arity, right=True, backend=backend).cpu(),
            ref_search(leaves, mass, right=True),
        )
        if total > 0:
            drawn = sums.sample(64, generator=torch.Generator(device).manual_seed(seed)).cpu()
            assert drawn.shape == (64,) and drawn.dtype == torch.int64
            assert bool((leaves[drawn] > 0).all()), "a zero-priority leaf was sampled"
            again = sums.sample(64, generator=torch.Generator(device).manual_seed(seed)).cpu()
            assert torch.equal(drawn, again)
            # the same masses through the reference search
            g = torch.Generator(device).manual_seed(seed)
            masses = (torch.rand(64, dtype=dtype, generator=g, device=device) * sums.total()).cpu()
            assert torch.equal(drawn, ref_search(leaves, masses, right=True))
        else:
            with pytest.raises(RuntimeError, match="total"):
                sums.sample(4)

    return case


def test_properties_torch():
    _tree_case("torch", torch.device("cpu"))()


def test_properties_triton(device):
    _backend_or_skip("triton")
    _tree_case("triton", device)()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_sampling_steps_over_zero_leaves_when_the_mass_slips_past_a_boundary(backend, device):
    """Sampling mode: masses outside [0, total) (what rounding could produce) still land on positive leaves."""
    _backend_or_skip(backend)
    dev = device if backend == "triton" else torch.device("cpu")
    gen = torch.Generator().manual_seed(7)
    capacity, arity = 40, 4
    tree = SumTree(capacity, dev, arity=arity, backend=backend)
    values = torch.zeros(capacity, dtype=torch.float64)
    positive = torch.tensor([3, 4, 17, 29, 30])
    values[positive] = torch.randint(1, 9, (5,), generator=gen).double()
    tree.update(torch.arange(capacity), values)
    total = tree.total().item()
    mass = torch.tensor([-1.0, -1e-300, total, total * (1 + 1e-15), 10 * total, math.nan], dtype=torch.float64)
    top, depth, _ = tree_layout(capacity, arity)
    got = _search(tree.nodes, mass.to(dev), tree.backend, top, depth, arity, capacity, True, True, capacity - 1)
    assert got.cpu().tolist() == [3, 3, 30, 30, 30, 3]


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_random_float_priorities_agree_with_the_reference_up_to_rounding(backend, device):
    _backend_or_skip(backend)
    dev = device if backend == "triton" else torch.device("cpu")
    gen = torch.Generator().manual_seed(3)
    capacity = 300
    tree = SumTree(capacity, dev, arity=8, backend=backend)
    leaves = torch.zeros(capacity, dtype=torch.float64)
    index = torch.randint(0, capacity, (500,), generator=gen)
    values = torch.rand(500, generator=gen, dtype=torch.float64) ** 3
    tree.update(index, values)
    apply_updates(leaves, index, values)
    assert torch.equal(tree.leaves.cpu(), leaves)
    assert tree.total().item() == pytest.approx(leaves.sum().item(), rel=1e-12)
    mass = torch.rand(200, generator=gen, dtype=torch.float64) * leaves.sum()
    got = tree.scan_lower_bound(mass).cpu()
    cumsum = leaves.cumsum(0)
    # the found leaf's prefix range holds the mass, up to rounding
    upper = cumsum[got]
    lower = torch.where(got > 0, cumsum[(got - 1).clamp(min=0)], torch.zeros(()))
    assert bool((lower <= mass + 1e-12).all() and (mass <= upper + 1e-12).all())
    assert (got != ref_search(leaves, mass)).sum().item() <= 1


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_large_update_batches_take_the_per_level_path(backend, device, monkeypatch):
    """More indices than the single-program kernel takes: the multi-launch path (stamps, leaves, levels)."""
    _backend_or_skip(backend)
    if backend == "triton":
        from rl_kernels import _trees_triton

        monkeypatch.setattr(_trees_triton, "_FUSED_MAX", 100)
    dev = device if backend == "triton" else torch.device("cpu")
    gen = torch.Generator().manual_seed(11)
    capacity, n = 1500, 1200
    sums = SumTree(capacity, dev, arity=16, backend=backend)
    mins = MinTree(capacity, dev, arity=16, backend=backend)
    leaves = torch.zeros(capacity, dtype=torch.float64)
    for _ in range(2):
        index = torch.randint(0, capacity, (n,), generator=gen)
        values = random_priorities(n, gen)
        sums.update(index, values)
        mins.update(index, values)
        apply_updates(leaves, index, values)
    assert torch.equal(sums.leaves.cpu(), leaves)
    check_internal_nodes(sums.nodes.cpu(), capacity, 16, "sum")
    check_internal_nodes(mins.nodes.cpu(), capacity, 16, "min")
    mass = torch.cat([leaves.cumsum(0)[::7], torch.rand(64, generator=gen, dtype=torch.float64) * leaves.sum()])
    assert torch.equal(sums.scan_lower_bound(mass).cpu(), ref_search(leaves, mass))


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_functional_write_and_search_on_a_bare_node_tensor(backend, device):
    _backend_or_skip(backend)
    dev = device if backend == "triton" else torch.device("cpu")
    gen = torch.Generator().manual_seed(5)
    capacity, arity = 50, 3
    nodes = torch.full((tree_layout(capacity, arity)[2],), math.inf, dtype=torch.float64, device=dev)
    index = torch.randperm(capacity, generator=gen)[:20]
    values = random_priorities(20, gen)
    tree_write_(nodes, index, values, capacity=capacity, arity=arity, reduce="min", backend=backend)
    leaves = torch.full((capacity,), math.inf, dtype=torch.float64)
    leaves[index] = values
    check_internal_nodes(nodes.cpu(), capacity, arity, "min")
    maxes = torch.full_like(nodes, -math.inf)
    tree_write_(maxes, index, values, capacity=capacity, arity=arity, reduce="max", backend=backend)
    assert maxes[0].item() == values.max().item()
    sums = torch.zeros_like(nodes)
    tree_write_(sums, index, values, capacity=capacity, arity=arity, backend=backend)
    mass = torch.rand(2, 3, generator=gen, dtype=torch.float64) * sums[0].item()
    got = tree_search(sums, mass, capacity=capacity, arity=arity, limit=capacity - 1, backend=backend)
    want = ref_search(torch.where(leaves.isinf(), 0.0, leaves), mass.reshape(-1)).clamp(max=capacity - 1)
    assert got.shape == (2, 3) and torch.equal(got.cpu().reshape(-1), want)


# ------------------------------------------------------------------------------------ errors
def test_bad_arguments_raise_naming_the_argument_and_change_nothing():
    tree = SumTree(4, backend="torch")
    tree.update(torch.tensor([1]), torch.tensor([2.0]))
    before = tree.nodes.clone()
    with pytest.raises(IndexError, match=r"indices must lie in \[0, 4\), got values in \[0, 4\]"):
        tree.update(torch.tensor([0, 4]), torch.tensor([1.0, 1.0]))
    with pytest.raises(IndexError, match="indices"):
        tree.update(torch.tensor([-1]), 1.0)
    with pytest.raises(ValueError, match=r"priorities must be finite and >= 0, got \[-1.0\]"):
        tree.update(torch.tensor([0, 2]), torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="priorities must be finite"):
        tree.update(torch.tensor([0]), torch.tensor([math.nan]))
    with pytest.raises(ValueError, match=r"one value per index \(2 indices\), got shape \[3\]"):
        tree.update(torch.tensor([0, 1]), torch.ones(3))
    with pytest.raises(TypeError, match="indices must be an integer tensor, got dtype torch.float32"):
        tree.update(torch.tensor([0.0]), 1.0)
    assert torch.equal(tree.nodes, before)
    with pytest.raises(ValueError, match="priorities must be not NaN"):
        MinTree(3, backend="torch").update(torch.tensor([0]), torch.tensor([math.nan]))
    MinTree(3, backend="torch").update(torch.tensor([0]), torch.tensor([-5.0]))  # negative minimums are fine
    with pytest.raises(ValueError, match="capacity must be an int >= 1, got 0"):
        SumTree(0)
    with pytest.raises(ValueError, match="arity must be an int >= 2, got 1"):
        SumTree(4, arity=1)
    with pytest.raises(ValueError, match="backend must be one of"):
        SumTree(4, backend="cuda")
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
        MinTree(4, dtype=torch.int64)
    with pytest.raises(RuntimeError, match=r"total\(\) is 0.0: every priority is zero"):
        SumTree(4, backend="torch").sample(2)
    with pytest.raises(ValueError, match="n must be an int >= 0"):
        tree.sample(-1)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        tree.sample(2, generator=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"nodes must be a contiguous tensor of 15 entries"):
        tree_search(torch.zeros(14, dtype=torch.float64), torch.zeros(1), capacity=5, arity=2)
    with pytest.raises(ValueError, match="reduce must be one of"):
        tree_write_(torch.zeros(15), torch.tensor([0]), torch.ones(1), capacity=5, arity=2, reduce="prod")


def test_unchecked_update_and_empty_inputs():
    tree = SumTree(5, backend="torch")
    tree.update(torch.tensor([], dtype=torch.int64), torch.tensor([]))
    tree.update([0, 3, 0], 2.0, validate=False)  # a scalar for every index, lists accepted
    assert tree.leaves.tolist() == [2.0, 0.0, 0.0, 2.0, 0.0]
    assert tree.sample(0).shape == (0,)
    assert tree.scan_lower_bound(torch.zeros(0)).shape == (0,)
    assert "backend='torch'" in repr(tree) and len(tree) == 5


# ------------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gpu_million_leaves_against_the_reference(dtype):
    pytest.importorskip("triton")
    gen = torch.Generator(device="cuda").manual_seed(0)
    capacity = 1_000_000
    tree = SumTree(capacity, "cuda", dtype=dtype, backend="triton")
    mins = MinTree(capacity, "cuda", dtype=dtype, backend="triton")
    leaves = torch.zeros(capacity, dtype=dtype, device="cuda")
    min_leaves = torch.full((capacity,), math.inf, dtype=dtype, device="cuda")
    for n in (256, 4096, 200_000):
        index = torch.randint(0, capacity, (n,), device="cuda", generator=gen)
        values = (torch.randint(0, 32, (n,), device="cuda", generator=gen) / 4).to(dtype)
        tree.update(index, values)
        mins.update(index, values)
        # reference last-wins: the last position of each index
        last = torch.full((capacity,), -1, dtype=torch.int64, device="cuda")
        last.scatter_reduce_(0, index, torch.arange(n, device="cuda"), reduce="amax")
        hit = last >= 0
        leaves[hit] = values[last[hit]]
        min_leaves[hit] = values[last[hit]]
        assert torch.equal(tree.leaves, leaves) and torch.equal(mins.leaves, min_leaves)
        assert tree.total().item() == leaves.double().sum().item()
        assert mins.min().item() == min_leaves.min().item()
    cumsum = leaves.double().cumsum(0).to(dtype)
    mass = torch.cat([cumsum[::997], torch.rand(4096, device="cuda", generator=gen, dtype=dtype) * tree.total()])
    assert torch.equal(tree.scan_lower_bound(mass), torch.searchsorted(cumsum, mass))
    drawn = tree.sample(1_000_000, generator=gen)
    assert bool((leaves[drawn] > 0).all())


@pytest.mark.gpu
def test_gpu_sample_frequencies_follow_the_priorities():
    pytest.importorskip("triton")
    gen = torch.Generator(device="cuda").manual_seed(1)
    tree = SumTree(100_000, "cuda", backend="triton")
    index = torch.tensor([5, 70_000, 99_999], device="cuda")
    tree.update(index, torch.tensor([1.0, 2.0, 5.0], device="cuda"))
    drawn = tree.sample(800_000, generator=gen)
    freq = torch.stack([(drawn == i).double().mean() for i in index]).cpu()
    assert torch.allclose(freq, torch.tensor([1 / 8, 2 / 8, 5 / 8], dtype=torch.float64), atol=3e-3)
