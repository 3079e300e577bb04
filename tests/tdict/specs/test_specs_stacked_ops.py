"""Shape ops, conversion and attributes of Stacked / StackedComposite, checked against the members."""

import numpy as np
import pytest
import torch

from tdict.specs import Bounded, Categorical, Composite, OneHot, Stacked, StackedComposite, Unbounded


def ragged():
    return torch.stack([Bounded(-1.0, 1.0, shape=(3,)), Bounded(0.0, 2.0, shape=(4,))], 0)


def test_attributes_follow_torchrl():
    spec = ragged()
    assert isinstance(spec, Stacked)
    assert spec.shape == torch.Size([2, -1]) and spec.ndim == 2 and len(spec) == 2
    assert spec.dtype == torch.float32 and spec.device == torch.device("cpu") and spec.stack_dim == 0
    assert spec.cpu().device == torch.device("cpu") and all(s.device == torch.device("cpu") for s in spec.cpu().specs)
    mid = torch.stack([Unbounded(shape=(2, 3)), Unbounded(shape=(2, 5))], 1)
    assert mid.shape == torch.Size([2, 2, -1])


def test_expand_matches_members():
    spec = ragged()
    out = spec.expand(5, 2, -1)
    assert isinstance(out, Stacked) and out.shape == torch.Size([5, 2, -1]) and out.dim == 1
    for m, s in zip(out.specs, spec.specs):
        assert m == s.expand(5, *s.shape)
    x = out.rand()
    assert [v.shape for v in x] == [torch.Size([5, 3]), torch.Size([5, 4])]
    assert out.is_in(x)
    with pytest.raises(ValueError, match="stack dim 0 has 2 members"):
        spec.expand(3, -1)
    single = torch.stack([Categorical(3, shape=(1,)), Categorical(4, shape=(1,))], 0)
    assert single.expand(2, 4).specs[1] == Categorical(4, shape=(4,))
    one = Stacked([Categorical(3)], 0)
    grown = one.expand(4)
    assert grown == Categorical(3, shape=(4,))  # identical members collapse to a dense spec


def test_unsqueeze_squeeze_roundtrip():
    spec = ragged()
    front, back = spec.unsqueeze(0), spec.unsqueeze(-1)
    assert front.shape == torch.Size([1, 2, -1]) and front.dim == 1
    assert back.shape == torch.Size([2, -1, 1]) and back.dim == 0
    assert [s.shape for s in back.specs] == [torch.Size([3, 1]), torch.Size([4, 1])]
    assert front.squeeze(0) == spec and back.squeeze(-1) == spec and back.unsqueeze(0).squeeze() == spec
    assert torch.stack([Unbounded(shape=(3,))], 0).shape == torch.Size([1, 3])
    lone = Stacked([Unbounded(shape=(3,))], 0)
    assert lone.squeeze(0) == Unbounded(shape=(3,))
    with pytest.raises(IndexError):
        spec.unsqueeze(4)


def test_reshape_member_dims_only():
    spec = torch.stack([Unbounded(shape=(2, 3)), Unbounded(shape=(2, 5))], 0)
    out = spec.reshape(2, -1)
    assert out.shape == torch.Size([2, -1])
    assert [s.shape for s in out.specs] == [torch.Size([6]), torch.Size([10])]
    assert spec.reshape(2, 2, -1) == spec
    with pytest.raises(ValueError, match="across its stack dim 0"):
        spec.reshape(-1)
    with pytest.raises(ValueError, match="across its stack dim"):
        spec.reshape(4, -1)


def test_same_shape_stack_values_match_tensor_ops():
    spec = torch.stack([Categorical(2, shape=(3,)), Categorical(5, shape=(3,))], 1)
    assert isinstance(spec, Stacked) and spec.shape == torch.Size([3, 2])
    x = spec.rand((4,))
    assert x.shape == torch.Size([4, 3, 2]) and spec.is_in(x)
    assert (x[..., 0] < 2).all() and (x[..., 1] < 5).all()
    # unbind along a non-stack dim: stacks of the members' slices
    parts = spec.unbind(0)
    assert len(parts) == 3 and all(p.shape == torch.Size([2]) and p.specs[1] == Categorical(5) for p in parts)
    # indexing: the stack dim selects members, other dims index them
    assert spec[:, 1] == Categorical(5, shape=(3,))
    assert spec[0, 1] == Categorical(5)
    assert spec[1:].shape == torch.Size([2, 2]) and spec[1:].specs[0] == Categorical(2, shape=(2,))
    assert spec[:, [1, 0]].specs == (Categorical(5, shape=(3,)), Categorical(2, shape=(3,)))
    with pytest.raises(IndexError):
        ragged()[:, 0]
    # cardinality: differs across the members, so undefined
    with pytest.raises(NotImplementedError, match="cardinalities differ"):
        spec.cardinality()
    with pytest.raises(NotImplementedError):
        torch.stack([Unbounded(shape=(3,)), Unbounded(shape=(4,))], 0).cardinality()


def test_cardinality_and_enumerate_with_common_cardinality():
    spec = torch.stack([OneHot(3, mask=torch.tensor([True, True, False])), OneHot(3)], 0)
    assert isinstance(spec, (Stacked, OneHot))
    mixed = Stacked([Categorical(3), Categorical(3, dtype=torch.int32)], 0)
    assert mixed.cardinality() == 3
    en = mixed.enumerate()
    assert en.shape == torch.Size([3, 2]) and en[:, 0].tolist() == [0, 1, 2]


def test_encode_to_numpy_roundtrip():
    spec = ragged()
    vals = [np.array([0.5, -0.5, 0.0]), np.array([1.0, 1.5, 0.5, 0.0])]
    enc = spec.encode(vals)
    assert isinstance(enc, list) and enc[0].dtype == torch.float32 and spec.is_in(enc)
    back = spec.to_numpy(enc)
    assert all(np.allclose(b, v) for b, v in zip(back, vals))
    cat = torch.stack([Categorical(2, shape=(3,)), Categorical(5, shape=(3,))], 1)
    x = cat.rand((4,))
    arr = cat.to_numpy(x)
    assert isinstance(arr, np.ndarray) and arr.shape == (4, 3, 2) and (arr == x.numpy()).all()
    assert torch.equal(cat.encode(arr[0]), x[0])
    oh = torch.stack([OneHot(3), OneHot(4)], 0)
    idx = oh.to_numpy(oh.encode([1, 3]))
    assert idx.tolist() == [1, 3]
    with pytest.raises(AssertionError, match="member 1"):
        spec.to_numpy([torch.zeros(3), torch.full((4,), 5.0)], safe=True)


def test_index_member_wise():
    oh = torch.stack([OneHot(3), OneHot(4)], 0)
    action = oh.encode([2, 1])
    out = oh.index(action, [torch.arange(3) * 10, torch.arange(4) * 100])
    assert torch.equal(out, torch.tensor([20, 100]))
    cat = torch.stack([Categorical(2), Categorical(4)], 0)
    values = torch.arange(8.0).reshape(2, 4)
    assert cat.index(torch.tensor([1, 3]), values).tolist() == [1.0, 7.0]


def test_zeros_ones_aliases():
    spec = torch.stack([Categorical(2, shape=(3,)), Categorical(5, shape=(3,))], 0)
    assert torch.equal(spec.zeros((2,)), torch.zeros(2, 2, 3, dtype=torch.int64))
    assert torch.equal(spec.ones(), torch.ones(2, 3, dtype=torch.int64))


def het():
    a = Composite(obs=Bounded(0.0, 1.0, shape=(3,)), action=Categorical(2))
    b = Composite(obs=Bounded(0.0, 1.0, shape=(5,)), action=Categorical(2), extra=Unbounded(shape=()))
    return torch.stack([a, b], 0)


def test_stacked_composite_shape_ops():
    spec = het()
    assert isinstance(spec, StackedComposite) and spec.shape == torch.Size([2]) and spec.dtype is None
    assert (
        torch.stack([Composite(a=Unbounded(shape=(2,))), Composite(a=Unbounded(shape=(3,)))], 0).dtype == torch.float32
    )
    ex = spec.expand(4, 2)
    td = ex.rand()
    assert td.batch_size == torch.Size([4, 2]) and ex.is_in(td)
    assert td[:, 1]["obs"].shape == torch.Size([4, 5])
    un = spec.unsqueeze(-1)
    assert un.shape == torch.Size([2, 1]) and un.rand().batch_size == torch.Size([2, 1])
    assert un.squeeze() == spec and spec.unsqueeze(0).squeeze(0) == spec
    assert spec.unsqueeze(0).dim == 1
    grown = torch.stack(
        [Composite(a=Unbounded(shape=(4, 2)), shape=(4,)), Composite(a=Unbounded(shape=(4, 3)), shape=(4,))], 0
    )
    assert grown.reshape(2, 2, 2).shape == torch.Size([2, 2, 2])
    assert grown.reshape(2, 2, 2).specs[1]["a"].shape == torch.Size([2, 2, 3])
    with pytest.raises(ValueError, match="across its stack dim"):
        grown.reshape(8)
    parts = grown.unbind(1)
    assert len(parts) == 4 and parts[0].specs[1]["a"].shape == torch.Size([3])
    assert grown[:, 0].shape == torch.Size([2]) and grown[1] is grown.specs[1]


def test_stacked_composite_encode_to_numpy_cardinality():
    spec = het()
    td = spec.rand()
    arrays = spec.to_numpy(td)
    assert np.array_equal(arrays["action"], td["action"].numpy())
    assert [a.shape for a in arrays["obs"]] == [(3,), (5,)]
    assert arrays["extra"][0] is None and np.allclose(arrays["extra"][1], td[1]["extra"].numpy())
    enc = spec.encode([{"obs": np.zeros(3), "action": 1}, {"obs": np.ones(5), "action": 0, "extra": 2.0}])
    assert spec.is_in(enc) and enc[1]["extra"].item() == 2.0 and enc["action"].tolist() == [1, 0]
    same = torch.stack(
        [Composite(a=Categorical(3), b=OneHot(2)), Composite(a=Categorical(3, dtype=torch.int32), b=OneHot(2))], 0
    )
    assert same.cardinality() == 6
    with pytest.raises(NotImplementedError):
        spec.cardinality()
    with pytest.raises(NotImplementedError):
        spec.index(torch.zeros(2), torch.zeros(2))
    assert spec.cpu().device == torch.device("cpu")


def test_nested_keys_through_a_stacked_composite():
    spec = Composite(agents=het())
    assert spec["agents", "action"].shape == torch.Size([2])
    assert ("agents", "obs") in spec and ("agents", "extra") not in spec
    assert spec.keys(True, True) == [("agents", "obs"), ("agents", "action")]
    assert spec.is_in(spec.rand())
