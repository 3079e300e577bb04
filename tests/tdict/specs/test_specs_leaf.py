"""Bounded, Unbounded and NonTensor specs: generation, validation, conversion, shape ops."""

import numpy as np
import pytest
import torch

from tdict import NonTensorData
from tdict.specs import Bounded, NonTensor, Unbounded


class TestBounded:
    def test_rand_float_in_bounds_and_shape(self):
        spec = Bounded(torch.tensor([-1.0, 0.0, 5.0]), torch.tensor([1.0, 0.5, 6.0]), shape=(3,))
        x = spec.rand((1000,))
        assert x.shape == (1000, 3) and x.dtype == torch.float32
        assert (x >= spec.low).all() and (x <= spec.high).all()
        assert spec.is_in(x)
        # uniform: the mean of each column is near the middle
        torch.testing.assert_close(x.mean(0), (spec.low + spec.high) / 2, atol=0.1, rtol=0)

    def test_rand_int_covers_inclusive_range(self):
        spec = Bounded(0, 4, shape=(), dtype=torch.int64)
        x = spec.rand((2000,))
        assert x.dtype == torch.int64 and x.shape == (2000,)
        assert set(x.unique().tolist()) == {0, 1, 2, 3, 4}
        assert spec.cardinality() == 5

    def test_scalar_bounds_broadcast(self):
        spec = Bounded(-2.0, 2.0, shape=(2, 3))
        assert spec.low.shape == (2, 3) and (spec.low == -2).all() and (spec.high == 2).all()
        assert spec.ndim == 2 and spec.device == torch.device("cpu")  # leaves default to torch's device

    def test_shape_inferred_from_bounds(self):
        assert Bounded(torch.zeros(4), torch.ones(4)).shape == (4,)

    def test_infinite_bounds(self):
        spec = Bounded(torch.tensor([0.0, -float("inf")]), torch.tensor([float("inf"), 1.0]))
        x = spec.rand((500,))
        assert spec.is_in(x) and torch.isfinite(x).all()

    def test_bad_bounds(self):
        with pytest.raises(ValueError, match="low must be <= high"):
            Bounded(1.0, 0.0, shape=())
        with pytest.raises(ValueError, match="broadcast"):
            Bounded(torch.zeros(3), 1.0, shape=(2,))

    def test_zero_one(self):
        spec = Bounded(-1.0, 1.0, shape=(2,))
        assert spec.zero((3,)).tolist() == [[0.0, 0.0]] * 3
        assert spec.zeros().shape == (2,)
        assert spec.one().tolist() == [1.0, 1.0] and spec.ones((1,)).shape == (1, 2)

    def test_is_in_checks_dtype_shape_and_bounds(self):
        spec = Bounded(-1.0, 1.0, shape=(2,))
        assert spec.is_in(torch.tensor([0.0, 1.0]))
        assert spec.is_in(torch.zeros(5, 2))  # leading dims allowed
        assert not spec.is_in(torch.zeros(3))
        assert not spec.is_in(torch.zeros(2, dtype=torch.float64))
        assert not spec.is_in(torch.tensor([0.0, 1.5]))
        assert not spec.is_in(torch.tensor([0.0, float("nan")]))
        assert not spec.is_in(np.zeros(2))

    def test_assert_is_in_names_bound_and_value(self):
        spec = Bounded(-1.0, 1.0, shape=(2,))
        with pytest.raises(AssertionError, match=r"high bound violated: value \[3.0\] > high \[1.0\]"):
            spec.assert_is_in(torch.tensor([0.0, 3.0]))
        with pytest.raises(AssertionError, match=r"low bound violated: value \[-4.0\] < low \[-1.0\]"):
            spec.assert_is_in(torch.tensor([-4.0, 0.0]))
        with pytest.raises(AssertionError, match="shape"):
            spec.assert_is_in(torch.zeros(3))

    def test_project(self):
        spec = Bounded(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 2.0]))
        assert spec.project(torch.tensor([[-5.0, 5.0], [0.5, 1.0]])).tolist() == [[-1.0, 2.0], [0.5, 1.0]]
        ispec = Bounded(0, 3, shape=(), dtype=torch.int32)
        out = ispec.project(torch.tensor([-2.0, 1.4, 9.0]))
        assert out.dtype == torch.int32 and out.tolist() == [0, 1, 3]
        inside = torch.tensor([0.2, 1.0])
        assert spec.project(inside) is inside

    def test_encode_to_numpy(self):
        spec = Bounded(0.0, 1.0, shape=(2,))
        x = spec.encode(np.array([0.25, 0.5]))
        assert x.dtype == torch.float32 and x.tolist() == [0.25, 0.5]
        assert spec.encode([0.5, 1.0]).tolist() == [0.5, 1.0]
        ispec = Bounded(0, 5, shape=(), dtype=torch.int64)
        assert ispec.encode(3).dtype == torch.int64
        np.testing.assert_array_equal(spec.to_numpy(x), np.array([0.25, 0.5], dtype=np.float32))
        assert spec.to_numpy(torch.tensor([2.0, 0.0])).tolist() == [2.0, 0.0]  # unchecked by default, as TorchRL
        with pytest.raises(AssertionError):
            spec.to_numpy(torch.tensor([2.0, 0.0]), safe=True)

    def test_shape_ops(self):
        spec = Bounded(torch.arange(3.0), torch.arange(3.0) + 1, shape=(3,))
        e = spec.expand(4, 3)
        assert e.shape == (4, 3) and e.low.shape == (4, 3) and (e.low[2] == spec.low).all()
        assert spec.expand((2, -1)).shape == (2, 3)
        with pytest.raises(ValueError):
            spec.expand(4, 2)
        u = spec.unsqueeze(0)
        assert u.shape == (1, 3) and u.squeeze().shape == (3,) and u.squeeze(0) == spec
        assert spec.unsqueeze(-1).shape == (3, 1)
        r = e.reshape(2, 6)
        assert r.shape == (2, 6) and r.low.shape == (2, 6)
        parts = spec.unbind(0)
        assert len(parts) == 3 and parts[1].shape == () and parts[1].low.item() == 1.0
        sub = e[1:3]
        assert sub.shape == (2, 3) and sub.low.shape == (2, 3)
        assert e[0] == spec

    def test_clone_to_eq(self):
        spec = Bounded(-1.0, 1.0, shape=(2,))
        c = spec.clone()
        assert c == spec and c.low is not spec.low
        assert spec != Bounded(-1.0, 2.0, shape=(2,))
        assert spec != Bounded(-1.0, 1.0, shape=(3,))
        assert spec != Unbounded(shape=(2,))
        m = spec.to("cpu")
        assert m.device == torch.device("cpu") and m.low.device.type == "cpu"
        assert spec.to("cpu").rand().device.type == "cpu"
        with pytest.raises(NotImplementedError):
            spec.cardinality()


class TestUnbounded:
    def test_rand_zero(self):
        spec = Unbounded(shape=(2, 3))
        assert spec.rand().shape == (2, 3) and spec.rand((4,)).shape == (4, 2, 3)
        assert spec.dtype == torch.float32
        assert spec.zero().abs().sum() == 0
        ispec = Unbounded(shape=(5,), dtype=torch.int64)
        x = ispec.rand((10,))
        assert x.dtype == torch.int64 and ispec.is_in(x)
        assert Unbounded(shape=(), dtype=torch.bool).rand((3,)).dtype == torch.bool

    def test_is_in_project_encode(self):
        spec = Unbounded(shape=(2,))
        assert spec.is_in(torch.tensor([1e9, -1e9]))
        assert not spec.is_in(torch.zeros(2, dtype=torch.int32))
        with pytest.raises(AssertionError, match="dtype"):
            spec.assert_is_in(torch.zeros(2, dtype=torch.int32))
        assert spec.project(torch.tensor([1, 2])).dtype == torch.float32
        x = spec.encode(np.array([1.0, 2.0]))
        assert x.dtype == torch.float32 and spec.to_numpy(x).tolist() == [1.0, 2.0]

    def test_shape_ops(self):
        spec = Unbounded(shape=(3,))
        assert spec.expand(2, 3).shape == (2, 3)
        assert spec.expand(2, 3)[0] == spec
        assert [s.shape for s in spec.expand(2, 3).unbind(1)] == [torch.Size([2])] * 3
        assert spec.reshape(3, 1).shape == (3, 1)
        with pytest.raises(IndexError):
            spec.unbind(1)


class TestNonTensor:
    def test_rand_and_is_in(self):
        spec = NonTensor(shape=(2,), example_data="hello")
        x = spec.rand((3,))
        assert isinstance(x, NonTensorData) and x.batch_size == (3, 2) and x.data == "hello"
        assert spec.is_in(x) and spec.zero().batch_size == (2,)
        assert not spec.is_in("hello")
        assert not spec.is_in(NonTensorData("a", batch_size=[3]))
        with pytest.raises(AssertionError, match="non-tensor"):
            spec.assert_is_in(torch.zeros(2))

    def test_encode_to_numpy_eq(self):
        spec = NonTensor(example_data=1)
        x = spec.encode("text")
        assert spec.is_in(x) and spec.to_numpy(x) == "text"
        assert spec == NonTensor(example_data=1) and spec != NonTensor(example_data=2)
        assert spec.expand(4).shape == (4,)


def test_tensor_and_mask_indices():
    spec = Bounded(torch.arange(4.0)[:, None].expand(4, 3), 10.0, shape=(4, 3))
    assert spec[torch.tensor([True, False, True, False])].low[:, 0].tolist() == [0.0, 2.0]
    assert spec[torch.tensor([3, 1])].low[:, 0].tolist() == [3.0, 1.0]
    assert spec[None].shape == (1, 4, 3)
    assert spec[..., 0].shape == (4,) and spec[..., 0].low.tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(IndexError):
        spec[0, 0, 0]


def test_bounded_space_is_a_named_box():
    from tdict.specs import ContinuousBox

    spec = Bounded(torch.tensor([-1.0, -2.0]), torch.tensor([1.0, 3.0]), shape=(2,))
    box = spec.space
    assert isinstance(box, ContinuousBox)
    assert torch.equal(box.low, spec.low) and torch.equal(box.high, spec.high)
    low, high = box  # still a (low, high) pair
    assert torch.equal(high, torch.tensor([1.0, 3.0]))
