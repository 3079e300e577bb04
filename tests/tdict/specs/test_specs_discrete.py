"""Categorical, OneHot, Binary, MultiCategorical and MultiOneHot specs."""

import numpy as np
import pytest
import torch

from tdict.specs import Binary, Categorical, MultiCategorical, MultiOneHot, OneHot


class TestCategorical:
    def test_rand_zero_is_in(self):
        spec = Categorical(4, shape=(2,))
        x = spec.rand((500,))
        assert x.shape == (500, 2) and x.dtype == torch.int64
        assert set(x.unique().tolist()) == {0, 1, 2, 3} and spec.is_in(x)
        assert spec.zero().tolist() == [0, 0] and spec.one((1,)).tolist() == [[1, 1]]
        assert not spec.is_in(torch.tensor([0, 4]))
        assert not spec.is_in(torch.tensor([0, -1]))
        assert not spec.is_in(torch.tensor([0.0, 1.0]))
        with pytest.raises(AssertionError, match=r"value \[4\] outside the categories 0..3"):
            spec.assert_is_in(torch.tensor([0, 4]))

    def test_mask_respected(self):
        spec = Categorical(5, mask=torch.tensor([False, True, False, True, False]))
        x = spec.rand((2000,))
        assert set(x.unique().tolist()) == {1, 3}
        assert spec.is_in(torch.tensor(1)) and not spec.is_in(torch.tensor(0))
        with pytest.raises(AssertionError, match="masked action"):
            spec.assert_is_in(torch.tensor(2))
        spec.update_mask(torch.tensor([True, False, False, False, False]))
        assert (spec.rand((50,)) == 0).all()
        spec.update_mask(None)
        assert spec.mask is None and len(spec.rand((500,)).unique()) == 5

    def test_batched_mask(self):
        mask = torch.tensor([[True, False, False], [False, False, True]])
        spec = Categorical(3, shape=(2,), mask=mask)
        x = spec.rand((100,))
        assert x.shape == (100, 2) and (x[:, 0] == 0).all() and (x[:, 1] == 2).all()
        with pytest.raises(ValueError, match="does not broadcast"):
            spec.update_mask(torch.ones(4, dtype=torch.bool))
        with pytest.raises(TypeError, match="bool"):
            spec.update_mask(torch.ones(3))
        assert spec[1].mask.tolist() == [False, False, True]

    def test_project_encode_to_numpy(self):
        spec = Categorical(3)
        assert spec.project(torch.tensor([-1, 1, 7])).tolist() == [0, 1, 2]
        assert spec.project(torch.tensor([1.6])).tolist() == [2]
        x = spec.encode(np.int64(2))
        assert x.dtype == torch.int64 and x.item() == 2
        assert spec.to_numpy(x) == 2

    def test_one_hot_round_trip(self):
        spec = Categorical(3, shape=(2,), mask=torch.tensor([True, True, False]))
        oh_spec = spec.to_one_hot_spec()
        assert isinstance(oh_spec, OneHot) and oh_spec.shape == (2, 3) and oh_spec.n == 3
        assert oh_spec.mask.tolist() == [[True, True, False]] * 2
        x = spec.rand((10,))
        oh = spec.to_one_hot(x)
        assert oh.shape == (10, 2, 3) and oh_spec.is_in(oh)
        assert torch.equal(oh_spec.to_categorical(oh), x)
        assert oh_spec.to_categorical_spec() == spec

    def test_enumerate_cardinality(self):
        assert Categorical(3).enumerate().tolist() == [0, 1, 2]
        e = Categorical(3, shape=(2,)).enumerate()
        assert e.tolist() == [[0, 0], [1, 1], [2, 2]] and Categorical(3, shape=(2,)).cardinality() == 3

    def test_shape_ops_eq(self):
        spec = Categorical(3, shape=(), mask=torch.tensor([True, False, True]))
        e = spec.expand(4, 2)
        assert e.shape == (4, 2) and e.mask.shape == (4, 2, 3)
        assert e.reshape(8).mask.shape == (8, 3)
        assert e.unbind(1)[0].shape == (4,) and e.unsqueeze(0).shape == (1, 4, 2)
        assert e[0, 1] == spec and e.clone() == e
        assert spec != Categorical(3) and Categorical(3) != Categorical(4)


class TestOneHot:
    def test_rand_is_in(self):
        spec = OneHot(4)
        x = spec.rand((300,))
        assert x.shape == (300, 4) and x.dtype == torch.bool
        assert (x.sum(-1) == 1).all() and spec.is_in(x)
        assert x.any(0).all()  # every action is drawn
        assert not spec.is_in(torch.tensor([True, True, False, False]))
        assert not spec.is_in(torch.zeros(4, dtype=torch.bool))
        with pytest.raises(AssertionError, match="one-hot"):
            spec.assert_is_in(torch.zeros(4, dtype=torch.bool))
        with pytest.raises(ValueError, match="n=4"):
            OneHot(4, shape=(3,))

    def test_mask(self):
        spec = OneHot(4, mask=torch.tensor([True, False, False, True]))
        x = spec.rand((1000,))
        assert not x[:, 1:3].any() and x[:, 0].any() and x[:, 3].any()
        assert not spec.is_in(torch.tensor([False, True, False, False]))

    def test_project_encode_to_numpy(self):
        spec = OneHot(3, dtype=torch.int64)
        assert spec.project(torch.tensor([[0.1, 0.7, 0.2]])).tolist() == [[0, 1, 0]]
        x = spec.encode(np.array([2, 0]))
        assert x.tolist() == [[0, 0, 1], [1, 0, 0]] and x.dtype == torch.int64
        assert spec.to_numpy(x).tolist() == [2, 0]
        with pytest.raises(ValueError, match="outside"):
            spec.encode(3)

    def test_shape_ops_keep_event_dim(self):
        spec = OneHot(3, shape=(2, 3))
        assert spec.expand(5, 2, 3).shape == (5, 2, 3)
        with pytest.raises(ValueError):
            spec.expand(2, 4)
        assert spec.unbind(0)[0].shape == (3,)
        with pytest.raises(ValueError, match="event dim"):
            spec.unbind(1)  # the one-hot dim cannot be unbound
        with pytest.raises(ValueError, match="event dim"):
            spec.unbind(-1)  # negative dims count over the whole shape, as in TorchRL
        assert spec.unbind(-2)[0].shape == (3,)
        assert spec.reshape(1, 2, 3).shape == (1, 2, 3)
        assert spec[0].shape == (3,) and spec.unsqueeze(-2).shape == (2, 1, 3)  # TorchRL 0.14.1: (2, 1, 3)
        with pytest.raises(ValueError, match="event dim"):
            spec.unsqueeze(-1)
        assert spec.enumerate().shape == (3, 2, 3) and spec.cardinality() == 3
        # an event dim of size one: a 1 after it is the same shape as a 1 before it (TorchRL's nested mock envs)
        single = Binary(1, shape=(2, 1))
        assert single.unsqueeze(-1).shape == (2, 1, 1) and single.unsqueeze(-1) == single.unsqueeze(-2)
        assert single.unsqueeze(-1).expand(2, 4, 1).rand().shape == (2, 4, 1)


class TestBinary:
    def test_all(self):
        spec = Binary(3)
        x = spec.rand((200,))
        assert x.shape == (200, 3) and x.dtype == torch.int8 and spec.is_in(x)
        assert set(x.unique().tolist()) == {0, 1}
        assert not spec.is_in(torch.tensor([0, 2, 1], dtype=torch.int8))
        assert spec.project(torch.tensor([0.2, 0.9, 0.6])).tolist() == [0, 1, 1]
        assert spec.cardinality() == 8 and spec.enumerate().shape == (8, 3)
        assert {tuple(r) for r in spec.enumerate().tolist()} == {
            (a, b, c) for a in (0, 1) for b in (0, 1) for c in (0, 1)
        }
        assert spec.encode(np.array([1, 0, 1])).dtype == torch.int8
        assert Binary(shape=(2, 4)).n == 4 and Binary(shape=(2, 4)).expand(3, 2, 4).shape == (3, 2, 4)


class TestMultiCategorical:
    def test_all(self):
        spec = MultiCategorical([2, 5])
        x = spec.rand((1000,))
        assert x.shape == (1000, 2) and spec.is_in(x)
        assert set(x[:, 0].unique().tolist()) == {0, 1} and set(x[:, 1].unique().tolist()) == set(range(5))
        with pytest.raises(AssertionError, match="nvec"):
            spec.assert_is_in(torch.tensor([2, 0]))
        assert spec.project(torch.tensor([3, -1])).tolist() == [1, 0]
        assert spec.cardinality() == 10
        e = spec.enumerate()
        assert e.shape == (10, 2) and spec.is_in(e) and len({tuple(r) for r in e.tolist()}) == 10
        b = spec.expand(3, 2)
        assert b.nvec.shape == (3, 2) and b[1] == spec and b.enumerate().shape == (10, 3, 2)
        assert spec.to_numpy(spec.encode(np.array([1, 4]))).tolist() == [1, 4]


class TestMultiOneHot:
    def test_all(self):
        spec = MultiOneHot([2, 3])
        x = spec.rand((100,))
        assert x.shape == (100, 5) and spec.is_in(x)
        assert (x[:, :2].sum(-1) == 1).all() and (x[:, 2:].sum(-1) == 1).all()
        with pytest.raises(AssertionError, match="block 1"):
            spec.assert_is_in(torch.tensor([True, False, True, True, False]))
        with pytest.raises(RuntimeError, match="is invalid for input of size 10"):  # TorchRL: one value per call
            spec.encode(np.array([[1, 2], [0, 0]]))
        enc = spec.expand(2, 5).encode(np.array([[1, 2], [0, 0]]))
        assert enc.tolist() == [[False, True, False, False, True], [True, False, True, False, False]]
        assert spec.to_numpy(enc).tolist() == [[1, 2], [0, 0]]
        assert spec.project(torch.tensor([0.4, 0.6, 0.1, 0.8, 0.0])).tolist() == [False, True, False, True, False]
        assert spec.cardinality() == 6 and spec.enumerate().shape == (6, 5) and spec.is_in(spec.enumerate())

    def test_mask(self):
        spec = MultiOneHot([2, 3], mask=torch.tensor([True, False, False, True, True]))
        x = spec.rand((500,))
        assert x[:, 0].all() and not x[:, 2].any() and x[:, 3].any() and x[:, 4].any()


def test_masked_project_picks_allowed_action():
    spec = Categorical(5, mask=torch.tensor([True, False, False, True, False]))
    assert spec.project(torch.tensor([1, 2, 4, 9])).tolist() == [0, 3, 3, 3]
    oh = OneHot(3, mask=torch.tensor([True, False, True]))
    assert oh.project(torch.tensor([0.1, 0.9, 0.3])).tolist() == [False, False, True]


def test_multicategorical_mask():
    mask = torch.tensor([False, True, True, False, True])  # element 0: only 1; element 1: 0 or 2
    spec = MultiCategorical([2, 3], mask=mask)
    x = spec.rand((500,))
    assert (x[:, 0] == 1).all() and set(x[:, 1].unique().tolist()) == {0, 2} and spec.is_in(x)
    with pytest.raises(AssertionError, match="masked action"):
        spec.assert_is_in(torch.tensor([0, 0]))
    assert not spec.is_in(torch.tensor([1, 1]))
    assert spec.project(torch.tensor([0, 1])).tolist() == [1, 0]
    b = spec.expand(4, 2)
    assert b.mask.shape == (4, 5) and b.rand().shape == (4, 2) and b.is_in(b.rand((3,)))
    spec.update_mask(None)
    assert spec.is_in(torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="does not broadcast"):
        spec.update_mask(torch.ones(4, dtype=torch.bool))
