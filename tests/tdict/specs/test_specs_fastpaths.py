"""rand() fast paths stay inside the spec; Composite fixes (empty batches, cardinality); index()."""

import pytest
import torch

from tdict.specs import Bounded, Categorical, Composite, OneHot, Unbounded


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_scalar_box_rand_within_bounds(dtype):
    spec = Bounded(-2.0, 3.0, shape=(1000,), dtype=dtype)
    assert spec._uniform == (-2.0, 3.0)
    x = spec.rand((10,))
    assert x.dtype == dtype and x.shape == torch.Size([10, 1000]) and spec.is_in(x)
    assert x.min() >= -2.0 and x.max() < 3.0
    # uniform on [low, high): mean and spread of U(-2, 3)
    assert abs(x.double().mean().item() - 0.5) < 0.1 and abs(x.double().std().item() - 5 / 12**0.5) < 0.1


def test_per_element_and_int_boxes_rand_within_bounds():
    low, high = torch.tensor([0.0, -5.0, 10.0]), torch.tensor([1.0, -4.0, 10.5])
    spec = Bounded(low, high)
    assert spec._uniform is None
    x = spec.rand((2000,))
    assert ((x >= low) & (x <= high)).all()
    ispec = Bounded(-1, 2, shape=(4000,), dtype=torch.int64)
    assert ispec._randint == (-1, 3)
    y = ispec.rand()
    assert y.dtype == torch.int64 and sorted(y.unique().tolist()) == [-1, 0, 1, 2]
    full = Bounded(0, torch.iinfo(torch.int8).max, shape=(3,), dtype=torch.int8)
    assert full._randint is None and full.is_in(full.rand((50,)))
    assert Bounded(1.5, 1.5, shape=(2,)).rand().tolist() == [1.5, 1.5]
    # shape ops keep the fast path consistent with the bounds
    assert Bounded(-1.0, 1.0, shape=(3,)).expand(4, 3)._uniform == (-1.0, 1.0)


def test_unbounded_sampler_precomputed():
    assert Unbounded(shape=(3,)).rand().dtype == torch.float32
    b = Unbounded(shape=(50,), dtype=torch.bool).rand()
    assert b.dtype == torch.bool
    u = Unbounded(shape=(500,), dtype=torch.uint8).rand()
    assert u.dtype == torch.uint8 and u.max() < 100
    i = Unbounded(shape=(500,), dtype=torch.int32).rand()
    assert i.min() >= -100 and i.max() < 100
    assert Unbounded(shape=(2,), dtype=torch.int64).to("cpu").rand().dtype == torch.int64


def test_rand_with_an_empty_batch():
    assert Categorical(3).rand(0).shape == torch.Size([0])
    assert Bounded(0.0, 1.0, shape=(2,)).rand(0).shape == torch.Size([0, 2])
    spec = Composite(a=Unbounded(shape=(2,)), b=Categorical(4))
    assert spec.rand(0).batch_size == torch.Size([0]) and spec.zero(0)["a"].shape == torch.Size([0, 2])
    assert spec.rand().batch_size == torch.Size([])


def test_composite_cardinality_and_index():
    assert Composite(a=Categorical(3), b=OneHot(4)).cardinality() == 12
    assert Composite(a=Categorical(3), sub=Composite(b=Categorical(2))).cardinality() == 6
    assert Composite().cardinality() == 0
    with pytest.raises(NotImplementedError):
        Composite(a=Categorical(3)).index(torch.tensor(0), torch.zeros(3))


def test_leaf_index():
    values = torch.arange(12.0).reshape(3, 4)
    cat = Categorical(4, shape=(3,))
    assert cat.index(torch.tensor([0, 3, 1]), values).tolist() == [0.0, 7.0, 9.0]
    assert Categorical(4).index(torch.tensor(2), values).tolist() == [2.0, 6.0, 10.0]  # broadcast over rows
    oh = OneHot(4, shape=(3, 4))
    assert oh.index(oh.encode(torch.tensor([0, 3, 1])), values).tolist() == [0.0, 7.0, 9.0]
    with pytest.raises(NotImplementedError):
        Bounded(0.0, 1.0, shape=()).index(torch.tensor(0), values)
    with pytest.raises(ValueError, match="must be a tensor"):
        cat.index(1, values)
