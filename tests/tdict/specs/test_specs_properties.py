"""Property tests: rand lands in the spec, project lands in the spec, encode/to_numpy round-trip, masks."""

import numpy as np
import torch
from hypothesis import given, settings, strategies as st

from tdict.specs import Binary, Bounded, Categorical, Composite, MultiCategorical, MultiOneHot, OneHot, Unbounded

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)
shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)
lead = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)
seeds = st.integers(0, 2**31 - 1)


@st.composite
def leaf_specs(draw):
    shape = draw(shapes)
    kind = draw(
        st.sampled_from(["bounded_f", "bounded_i", "unbounded", "cat", "onehot", "binary", "multicat", "multioh"])
    )
    g = torch.Generator().manual_seed(draw(seeds))
    if kind == "bounded_f":
        low = torch.randn(shape, generator=g) * 3
        return Bounded(low, low + torch.rand(shape, generator=g) * 5, shape=shape)
    if kind == "bounded_i":
        low = draw(st.integers(-10, 10))
        return Bounded(
            low,
            low + draw(st.integers(0, 6)),
            shape=shape,
            dtype=draw(st.sampled_from([torch.int64, torch.int32, torch.uint8 if low >= 0 else torch.int16])),
        )
    if kind == "unbounded":
        return Unbounded(shape=shape, dtype=draw(st.sampled_from([torch.float32, torch.float64, torch.int64])))
    n = draw(st.integers(1, 5))
    if kind == "cat":
        return Categorical(n, shape=shape)
    if kind == "onehot":
        return OneHot(n, shape=shape + (n,))
    if kind == "binary":
        return Binary(n, shape=shape + (n,))
    nvec = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    if kind == "multicat":
        return MultiCategorical(nvec, shape=shape + (len(nvec),))
    return MultiOneHot(nvec, shape=shape + (sum(nvec),))


@SETTINGS
@given(leaf_specs(), lead, seeds)
def test_rand_is_in(spec, lead_shape, seed):
    torch.manual_seed(seed)
    x = spec.rand(lead_shape)
    assert x.shape == torch.Size(lead_shape) + spec.shape
    assert spec.is_in(x), (spec, x)
    assert spec.project(x) is x


@SETTINGS
@given(leaf_specs(), seeds)
def test_project_lands_inside(spec, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn((2,) + spec.shape, generator=g) * 20).to(torch.float32)
    if (
        spec.dtype is not None
        and not spec.dtype.is_floating_point
        and not isinstance(spec, (OneHot, MultiOneHot, Binary))
    ):
        x = x.round().to(torch.int64)
    if spec.dtype is torch.uint8:
        x = x.clamp(0, 255)
    out = spec.project(x)
    assert spec.is_in(out), (spec, x, out)


@SETTINGS
@given(leaf_specs(), seeds)
def test_encode_to_numpy_round_trip(spec, seed):
    torch.manual_seed(seed)
    x = spec.rand()
    arr = spec.to_numpy(x)
    assert isinstance(arr, np.ndarray)
    assert torch.equal(spec.encode(arr), x)


@SETTINGS
@given(st.integers(2, 6), shapes, seeds, st.booleans())
def test_masked_rand_never_samples_masked(n, shape, seed, one_hot):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape + (n,), generator=g) < 0.5
    mask[..., int(torch.randint(n, (), generator=g))] = True  # at least one allowed action per row
    torch.manual_seed(seed)
    spec = OneHot(n, shape=shape + (n,), mask=mask) if one_hot else Categorical(n, shape=shape, mask=mask)
    x = spec.rand((200,))
    assert spec.is_in(x)
    idx = x.long().argmax(-1) if one_hot else x
    picked = mask.expand((200,) + mask.shape).gather(-1, idx.unsqueeze(-1))
    assert picked.all()
    # every allowed action is eventually drawn (200 draws, <= 6 actions)
    counts = torch.nn.functional.one_hot(idx, n).sum(0).bool()
    assert torch.equal(counts, mask)


@SETTINGS
@given(st.lists(leaf_specs(), min_size=1, max_size=4), st.integers(0, 2), lead)
def test_composite_rand_zero_batch(leaves, batch, lead_shape):
    batch_shape = (2,) * batch
    spec = Composite(shape=batch_shape)
    for i, leaf in enumerate(leaves):
        spec[f"k{i}"] = leaf.expand(batch_shape + leaf.shape)
    spec["nested", "x"] = leaves[0].expand(batch_shape + leaves[0].shape)
    td = spec.rand(lead_shape)
    assert td.batch_size == torch.Size(lead_shape + batch_shape)
    assert td.get("nested").batch_size == td.batch_size
    assert spec.is_in(td)
    z = spec.zero(lead_shape)
    assert z.batch_size == td.batch_size and all(torch.equal(v, torch.zeros_like(v)) for v in z.values(True, True))


@SETTINGS
@given(st.integers(2, 6), shapes, seeds, st.sampled_from(["cat", "onehot", "multioh"]))
def test_masked_project_lands_on_allowed_action(n, shape, seed, kind):
    g = torch.Generator().manual_seed(seed)
    if kind == "multioh":
        nvec = [n, 2]
        mask = torch.rand(shape + (n + 2,), generator=g) < 0.5
        mask[..., 0] = True
        mask[..., n] = True
        spec = MultiOneHot(nvec, shape=shape + (n + 2,), mask=mask)
        x = torch.randn((3,) + spec.shape, generator=g)
    else:
        mask = torch.rand(shape + (n,), generator=g) < 0.5
        mask[..., int(torch.randint(n, (), generator=g))] = True
        if kind == "cat":
            spec = Categorical(n, shape=shape, mask=mask)
            x = torch.randint(-3, n + 3, (3,) + spec.shape, generator=g)
        else:
            spec = OneHot(n, shape=shape + (n,), mask=mask)
            x = torch.randn((3,) + spec.shape, generator=g)
    assert spec.is_in(spec.project(x))


@SETTINGS
@given(st.lists(st.integers(2, 4), min_size=1, max_size=3), shapes, seeds)
def test_multicategorical_masked_rand_and_project(nvec, shape, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape + (sum(nvec),), generator=g) < 0.5
    starts = torch.tensor([0] + nvec[:-1]).cumsum(0)
    mask[..., starts] = True  # action 0 of every element stays allowed
    torch.manual_seed(seed)
    spec = MultiCategorical(nvec, shape=shape + (len(nvec),), mask=mask)
    x = spec.rand((50,))
    assert spec.is_in(x)
    allowed = mask.expand((50,) + mask.shape).gather(-1, x + starts)
    assert allowed.all()
    assert spec.is_in(spec.project(torch.randint(-2, 6, (3,) + spec.shape, generator=g)))
