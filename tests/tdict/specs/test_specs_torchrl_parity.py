"""TorchRL 0.14 spec features: the Unbounded family, bool Bounded, Composite shape/names/locks, indexing,
index_select, conversions, Choice, StackedComposite edits. Expected values observed on TorchRL 0.14.1
(``torchrl.data``) unless a comment says otherwise."""

# torch.stack / torch.index_select take specs through __torch_function__, which torch's stubs do not know
# pyright: reportArgumentType=false

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from tdict import NonTensorData
from tdict.specs import (
    Binary,
    Bounded,
    BoundedContinuous,
    BoundedDiscrete,
    Categorical,
    Choice,
    Composite,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    StackedComposite,
    Unbounded,
    UnboundedContinuous,
    UnboundedDiscrete,
)

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)


# ---- the Bounded family ---------------------------------------------------------------------------
def test_bounded_family_equal_and_stack():
    d = BoundedDiscrete(0, 4, shape=(2,))
    assert d.dtype == torch.int64 and d.domain == "discrete" and d.low.tolist() == [0, 0]
    assert d == Bounded(0, 4, shape=(2,), dtype=torch.int64) and Bounded(0, 4, shape=(2,), dtype=torch.int64) == d
    c = BoundedContinuous(-1.0, 1.0, shape=(3,))
    assert c.dtype == torch.float32 and c.domain == "continuous" and c == Bounded(-1.0, 1.0, shape=(3,))
    assert d != Bounded(0, 5, shape=(2,), dtype=torch.int64) and c != Bounded(-1.0, 2.0, shape=(3,))
    assert c != Unbounded(shape=(3,)) and d != Categorical(5, shape=(2,))
    s = torch.stack([d, Bounded(0, 4, shape=(2,), dtype=torch.int64)], 0)
    assert isinstance(s, Bounded) and s.shape == (2, 2)
    x = d.rand((50,))
    assert x.dtype == torch.int64 and d.is_in(x) and bool(((x >= 0) & (x <= 4)).all())


# ---- the Unbounded family -------------------------------------------------------------------------
def test_unbounded_family_equal_and_stack():
    d = UnboundedDiscrete(shape=(2,))
    assert d.dtype == torch.int64 and d.domain == "discrete" and d.device == torch.device("cpu")
    assert d == Unbounded(shape=(2,), dtype=torch.int64) and Unbounded(shape=(2,), dtype=torch.int64) == d
    assert UnboundedContinuous(shape=(2,)) == Unbounded(shape=(2,)) and UnboundedContinuous().domain == "continuous"
    assert d != Unbounded(shape=(2,)) and d != UnboundedDiscrete(shape=(3,))
    s = torch.stack([d, Unbounded(shape=(2,), dtype=torch.int64)], 0)
    assert isinstance(s, UnboundedDiscrete) and s.shape == (2, 2)
    x = d.rand((50,))
    assert x.dtype == torch.int64 and d.is_in(x) and bool(((x >= -100) & (x < 100)).all())
    assert d.space.high.tolist() == [torch.iinfo(torch.int64).max] * 2
    assert Unbounded(shape=(2,), dtype=torch.int8).space.high.tolist() == [127, 127]
    with pytest.raises(NotImplementedError):
        d.cardinality()


def test_unbounded_equals_bounded_spanning_the_dtype():
    info = torch.finfo(torch.float32)
    assert Unbounded(shape=(2,)) == Bounded(info.min, info.max, shape=(2,))
    assert Unbounded(shape=(2,)) != Bounded(0.0, 1.0, shape=(2,))


def test_stack_errors_follow_torchrl():
    with pytest.raises(RuntimeError, match="more than one type of specs"):
        torch.stack([Bounded(-1.0, 1.0, shape=(2,)), Unbounded(shape=(2,))])
    with pytest.raises(RuntimeError, match="Dtypes differ"):
        torch.stack([Bounded(-1.0, 1.0, shape=(2,)), Bounded(-1.0, 1.0, shape=(2,), dtype=torch.float64)])
    with pytest.raises(RuntimeError, match="Ndims differ"):
        torch.stack([Bounded(-1.0, 1.0, shape=(2,)), Bounded(-1.0, 1.0, shape=(2, 3))])


# ---- leaf specs -----------------------------------------------------------------------------------
def test_bounded_bool():
    spec = Bounded(0, 1, shape=(1000,), dtype=torch.bool)
    x = spec.rand()
    assert x.dtype == torch.bool and bool(x.any()) and bool((~x).any()) and spec.is_in(x)
    ones = Bounded(-1, 1, shape=(3,), dtype=torch.bool)  # TorchRL: every nonzero bound is True
    assert ones.low.tolist() == [True] * 3 and ones.high.tolist() == [True] * 3
    assert ones.rand().tolist() == [True] * 3 and not ones.is_in(torch.zeros(3, dtype=torch.bool))
    assert ones.expand(2, 3).rand().shape == (2, 3) and ones.clone() == ones


def test_leaf_device_defaults_to_torch_default():
    assert Bounded(0.0, 1.0, shape=()).device == torch.device("cpu")
    assert Categorical(3).device == torch.device("cpu") and MultiCategorical([2]).device == torch.device("cpu")
    assert NonTensor(shape=(2,)).device is None  # as TorchRL: non-tensor data may live nowhere
    assert Composite(a=Unbounded()).device is None


def test_memoize_type_check_clear_device():
    spec = Bounded(0.0, 1.0, shape=(2,))
    spec.memoize_encode(True)
    spec.erase_memoize_cache()
    assert spec.encode(np.array([0.5, 0.25])).tolist() == [0.5, 0.25]
    with pytest.raises(TypeError, match="mode must be a bool"):
        spec.memoize_encode("yes")
    spec.type_check(torch.zeros(2))
    with pytest.raises(TypeError, match=r"value.dtype=torch.int64 but Bounded.dtype=torch.float32"):
        spec.type_check(torch.zeros(2, dtype=torch.int64))
    assert spec.clear_device_() is spec and spec.device == torch.device("cpu")
    assert spec.contains(spec.sample()) and spec.sample((3,)).shape == (3, 2)


def test_encode_shape_mismatch():
    assert Unbounded(shape=(2, 1)).encode([1.0, 2.0]).shape == (2, 1)
    with pytest.raises(RuntimeError, match="Shape mismatch"):
        Unbounded(shape=(2,)).encode([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(RuntimeError, match="Shape mismatch"):
        Binary(3).encode(np.zeros((2, 3)))
    assert Binary(3).expand(2, 3).encode(np.zeros((2, 3))).shape == (2, 3)
    spec = Composite(a=Unbounded(1), b=Unbounded(2))
    with pytest.raises(RuntimeError, match="key 'b' raised a RuntimeError"):
        spec.encode({"a": 0, "b": 0})


def test_to_numpy_unchecked_by_default():
    spec = Bounded(0.0, 1.0, shape=(2,))
    assert spec.to_numpy(torch.tensor([2.0, 0.5])).tolist() == [2.0, 0.5]
    with pytest.raises(AssertionError):
        spec.to_numpy(torch.tensor([2.0, 0.5]), safe=True)


def test_discrete_conversions():
    moh = MultiOneHot([2, 3])
    assert moh.to_categorical(torch.tensor([0, 1, 0, 0, 1], dtype=torch.bool)).tolist() == [1, 2]
    assert moh.to_categorical_spec() == MultiCategorical([2, 3]) and moh.to_one_hot_spec() is moh
    mc = MultiCategorical([2, 3])
    assert mc.to_one_hot(torch.tensor([1, 0])).tolist() == [False, True, True, False, False]
    assert mc.to_one_hot_spec() == moh and mc.to_categorical_spec() is mc
    x = moh.rand((4,))
    assert mc.is_in(moh.to_categorical(x)) and moh.is_in(mc.to_one_hot(moh.to_categorical(x)))
    assert Categorical(3).to_one_hot_spec() == OneHot(3) and OneHot(3).to_categorical_spec() == Categorical(3)
    with pytest.raises(RuntimeError, match="is invalid for input of size 10"):
        moh.encode(np.array([[1, 2], [0, 0]]))


def test_multicategorical_from_one_int():
    spec = MultiCategorical(5)
    assert spec.shape == () and spec.rand((3,)).shape == (3,) and spec.cardinality() == 5
    x = spec.rand((100,))
    assert spec.is_in(x) and not spec.is_in(torch.full((3,), 5))
    assert spec.to_one_hot(torch.tensor(2)).tolist() == [False, False, True, False, False]
    with pytest.raises(ValueError, match="single int nvec takes no mask"):
        spec.update_mask(torch.ones(5, dtype=torch.bool))


def test_negative_dims_count_over_the_whole_shape():
    spec = OneHot(3, shape=(2, 3))
    assert spec.unbind(-2)[0].shape == (3,) and spec.unsqueeze(-2).shape == (2, 1, 3)
    for bad in (lambda: spec.unbind(-1), lambda: spec.unsqueeze(-1), lambda: spec.squeeze(-1)):
        with pytest.raises(ValueError, match="event dim"):
            bad()
    assert Bounded(0.0, 1.0, shape=(4, 2)).unbind(-1)[0].shape == (4,)  # ours: TorchRL refuses -1 on Bounded


def test_nontensor_cardinality_message():
    with pytest.raises(NotImplementedError, match="Cannot enumerate a NonTensor spec."):
        NonTensor(shape=(3,)).cardinality()


# ---- indexing and index_select ----------------------------------------------------------------------
def test_indexing_like_torchrl():
    u = Unbounded(shape=(5, 3))
    assert u[[0, 1], None].shape == (2, 1, 3) and u[..., 0].shape == (5,) and u[10:1:-1].shape == (3, 3)
    assert u[[[0, 1], [0, 1]]].shape == (2, 2, 3) and u[range(2)].shape == (2, 3)
    assert u[np.array([[1, 2]])].shape == (1, 2, 3) and u[1, ...].shape == (3,)
    assert OneHot(4, shape=(5, 3, 4))[..., 0].shape == (5, 4)
    with pytest.raises(IndexError):
        OneHot(4, shape=(3, 4))[torch.tensor([10, 2])]
    with pytest.raises(IndexError):
        OneHot(4, shape=(3, 4))[0, 1]
    with pytest.raises(IndexError):
        u[1, ..., 2, ...]
    c = Composite(k=UnboundedDiscrete(shape=(5, 3, 4)), shape=(5, 3))
    assert c[..., 0]["k"].shape == (5, 4) and c[None]["k"].shape == (1, 5, 3, 4)
    with pytest.raises(IndexError):
        c[range(10)]


@st.composite
def _indices(draw):
    batch = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    list_len = draw(st.integers(1, 3))  # list indices broadcast together: one length per index
    parts = []
    for size in batch[: draw(st.integers(0, len(batch)))]:
        kind = draw(st.sampled_from(["int", "slice", "list", "none", "neg"]))
        if kind == "int":
            parts.append(draw(st.integers(-size, size - 1)))
        elif kind == "slice":
            parts.append(slice(draw(st.integers(0, size)), None))
        elif kind == "list":
            parts.append(draw(st.lists(st.integers(0, size - 1), min_size=list_len, max_size=list_len)))
        elif kind == "neg":
            parts.append(slice(None, None, -1))
        else:
            parts.append(None)
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), Ellipsis)
    return batch, tuple(parts)


def _reference_shape(batch: tuple, index: tuple) -> torch.Size:
    """The shape torch gives for ``index`` on a tensor of shape ``batch`` (negative steps via flip)."""
    t = torch.empty(batch)
    out = []
    for p in index:
        if isinstance(p, list):
            p = torch.tensor(p)
        out.append(p)
    if any(isinstance(p, slice) and p.step == -1 for p in out):  # torch has no negative steps
        out = [slice(None) if isinstance(p, slice) and p.step == -1 else p for p in out]
    return t[tuple(out)].shape


@SETTINGS
@given(_indices(), st.sampled_from(["unbounded", "onehot", "composite"]))
def test_indexing_matches_torch_over_batch_dims(case, kind):
    batch, index = case
    backwards = sum(isinstance(p, slice) and p.step == -1 for p in index)
    if backwards and backwards + sum(isinstance(p, list) for p in index) > 1:
        with pytest.raises(IndexError, match="negative step"):  # it would become a second tensor index
            Unbounded(shape=batch)[index]
        return
    if kind == "unbounded":
        spec, extra = Unbounded(shape=batch + (2,), dtype=torch.int64), (2,)
    elif kind == "onehot":
        spec, extra = OneHot(3, shape=batch + (3,)), (3,)
    else:
        spec, extra = Composite(a=Unbounded(shape=batch + (2,)), shape=batch), ()
    if kind == "unbounded":  # the (2,) dim is a batch dim too: `...` covers it
        ref = _reference_shape(batch + (2,), index)
        assert spec[index].shape == ref
        return
    out = spec[index]
    assert out.shape == _reference_shape(batch, index) + extra
    if kind == "composite":
        assert out["a"].shape == out.shape + (2,)


def test_index_select():
    assert torch.index_select(Bounded(0.0, 1.0, shape=(5, 4)), 1, torch.tensor([1, 3])).shape == (5, 2)
    mask = torch.tensor([[True, False, True], [False, True, True], [True, True, False]])
    cat = torch.index_select(Categorical(3, shape=(3,), mask=mask), 0, torch.tensor([2, 0]))
    assert torch.equal(cat.mask, mask[[2, 0]])  # pyright: ignore[reportAttributeAccessIssue]
    c = torch.index_select(
        Composite(obs=Bounded(0.0, 1.0, shape=(5, 3)), act=OneHot(4, shape=(5, 4)), shape=(5,)), 0, torch.tensor([0, 4])
    )
    assert c.shape == (2,) and c["act"].shape == (2, 4)
    assert torch.index_select(Categorical(4, shape=(5,)), 0, torch.tensor([], dtype=torch.long)).shape == (0,)
    with pytest.raises(IndexError, match="out of bounds"):
        torch.index_select(Unbounded(shape=(5, 4)), 0, torch.tensor([10]))
    with pytest.raises(ValueError, match="Cannot index_select along the last dimension"):
        torch.index_select(OneHot(3, shape=(5, 3)), -1, torch.tensor([0]))
    with pytest.raises(NotImplementedError, match="index_select is not supported"):
        torch.index_select(torch.stack([Categorical(2), Categorical(3)]), 0, torch.tensor([0]))


# ---- Composite --------------------------------------------------------------------------------------
def test_composite_shape_setter():
    spec = Composite(a=Unbounded(shape=(3, 2)), b=Composite(shape=(3,)), shape=(3,))
    spec.shape = ()
    assert spec.shape == () and spec["b"].shape == (3,)  # a nested Composite that fits keeps its shape
    spec["b"].shape = ()
    spec.shape = (3,)
    assert spec.shape == (3,) and spec["b"].shape == (3,)  # ... and follows when it does not
    with pytest.raises(ValueError, match="key 'a' has shape"):
        spec.shape = (4,)
    assert spec.shape == (3,) and spec["b"].shape == (3,)  # nothing changed
    spec.lock_()
    with pytest.raises(RuntimeError, match="locked"):
        spec.shape = ()


def test_composite_set_rules():
    spec = Composite(shape=(2,))
    spec["c"] = Composite(d=Unbounded(shape=(2,)))  # fewer dims, a prefix of (2,): promoted
    assert spec["c"].shape == (2,)
    spec["n"] = NonTensor(shape=())
    assert spec["n"].shape == (2,)
    for key in ("shape", "device", "dtype", "space"):
        with pytest.raises(AttributeError, match="cannot be set"):
            spec[key] = Unbounded(shape=(2,))
    with pytest.raises(ValueError, match="does not start with"):
        spec["x"] = Unbounded(shape=(3,))
    with pytest.raises(TypeError, match="keys are strings"):
        spec[0] = Unbounded(shape=(2,))
    with pytest.raises(TypeError, match="pass shape or batch_size"):
        Composite(shape=(2,), batch_size=(2,))
    assert spec.keys() == ["c", "n"]


def test_composite_clear_device_and_type_check():
    spec = Composite(a=Unbounded(), b=Composite(c=Categorical(2)), device="cpu").clear_device_()
    assert spec.device is None and spec["b"].device is None and spec["a"].device == torch.device("cpu")
    spec.type_check(spec.rand())
    spec.type_check(torch.zeros(()), "a")
    with pytest.raises(TypeError, match="key 'a'"):
        spec.type_check(torch.zeros((), dtype=torch.int64), "a")


def test_composite_names():
    spec = Composite(obs=Unbounded(shape=(4, 2, 3)), shape=(4, 2), names=["batch", "time"])
    assert spec.names == ["batch", "time"] and spec.rand().names == ["batch", "time"]
    assert spec.zero((5,)).names == [None, "batch", "time"]  # ours: TorchRL raises ValueError here
    assert spec[0].names == ["time"] and spec.unsqueeze(1).names == ["batch", None, "time"]
    assert spec.expand(5, 4, 2).names == [None, "batch", "time"] and spec.clone().names == spec.names
    assert spec.to(torch.float64).names == spec.names and [p.names for p in spec.unbind(0)][0] == ["time"]
    assert spec == Composite(obs=Unbounded(shape=(4, 2, 3)), shape=(4, 2))  # names do not count
    nested = Composite(outer=Composite(inner=Unbounded(shape=(4, 3)), shape=(4, 3)), shape=(4,), names=["b"])
    assert nested["outer"].names == ["b", None]
    assert Composite(shape=(3, 4, 5)).refine_names("a", ..., "c").names == ["a", None, "c"]
    with pytest.raises(RuntimeError, match="cannot coerce"):
        Composite(shape=(2,), names=["a"]).refine_names("b")
    with pytest.raises(ValueError, match="Expected 2 names, but got 3 names"):
        spec.names = ["a", "b", "c"]
    spec.names = None
    assert spec.names == [None, None]


def test_composite_is_empty_and_keys_contains():
    spec = Composite(a=Composite(), b=None)
    # recurse=True: "no leaves", as TorchRL documents it (its code answers False here)
    assert not spec.is_empty() and spec.is_empty(recurse=True) and Composite().is_empty()
    nested = Composite(a=Composite(b=Composite(c=Unbounded())))
    keys = nested.keys(True)
    assert ("a",) in nested.keys() and ("a", ("b", ("c",))) in keys and ("a", "b", "c") in keys
    assert "z" not in keys and ("a", "z") not in keys


def test_composite_lock_graph():
    level3 = Composite()
    level2 = Composite(level3=level3)
    level1 = Composite(level2=level2)
    level0 = Composite(level1=level1).lock_()
    assert level3.locked and level3.is_locked
    with pytest.raises(RuntimeError, match="Cannot modify a locked Composite."):
        level2["x"] = None
    with pytest.raises(RuntimeError, match="part of a locked graph"):
        level3.unlock_()
    assert level3.locked  # nothing changed
    other = Composite(level2=level2).lock_()
    with pytest.raises(RuntimeError, match="part of a locked graph"):
        level0.unlock_()
    assert level0.locked and level1.locked
    other.unlock_(recurse=False)
    level0.unlock_()
    assert not level3.locked
    flat = Composite(a=Composite())
    flat.lock_(recurse=False)
    assert flat.locked and not flat["a"].locked


def test_locked_composite_pickles_and_copies_with_its_lock_graph():
    import copy
    import pickle

    spec = Composite(a=Composite(b=Unbounded(shape=(2,)))).lock_()
    for clone in (pickle.loads(pickle.dumps(spec)), copy.deepcopy(spec)):
        assert clone.locked and clone["a"].locked and clone["a", "b"].shape == (2,)
        with pytest.raises(RuntimeError, match="part of a locked graph"):
            clone["a"].unlock_()  # still locked by its (copied) parent
        clone.unlock_()
        assert not clone["a"].locked
        clone["a", "c"] = Unbounded()
    assert "c" not in spec["a"].keys()  # the original is untouched


# ---- Choice -----------------------------------------------------------------------------------------
def test_choice():
    spec = Choice([Bounded(0.0, 2.5, shape=()), Bounded(10.0, 12.0, shape=())])
    torch.manual_seed(0)
    draws = [spec.rand() for _ in range(20)]
    assert all(spec.is_in(x) for x in draws) and {bool(x > 5) for x in draws} == {True, False}
    assert spec.is_in(torch.tensor(11.0)) and not spec.is_in(torch.tensor(9.0))
    assert spec.cardinality() == float("inf") and Choice([Categorical(10), Categorical(20)]).cardinality() == 30
    stacked = torch.stack([spec, spec], 0)
    assert isinstance(stacked, Choice) and stacked.shape == (2,) and stacked.rand().shape == (2,)
    words = Choice([NonTensorData("a"), NonTensorData("b")])
    assert words.rand().data in ("a", "b") and words.is_in(NonTensorData("b"))
    assert not words.is_in(NonTensorData("c")) and words.cardinality() == 2 and words.expand(3).shape == (3,)
    with pytest.raises(TypeError, match="must be a list"):
        Choice("abc")
    with pytest.raises(TypeError, match="must be either a TensorSpec, NonTensorData, or NonTensorStack"):
        Choice(["abc"])
    with pytest.raises(TypeError, match="must be the same type"):
        Choice([Bounded(0, 1, (1,)), Categorical(10, (1,))])
    with pytest.raises(ValueError, match="must have the same shape"):
        Choice([Categorical(10, (1,)), Categorical(10, (2,))])
    with pytest.raises(ValueError, match="must have the same dtype"):
        Choice([Categorical(10, (2,)), Categorical(10, (2,), dtype=torch.int32)])


# ---- StackedComposite edits -----------------------------------------------------------------------
def _hetero() -> StackedComposite:
    a = Composite(obs=Unbounded(shape=(3,)))
    b = Composite(obs=Unbounded(shape=(5,)), extra=Unbounded())
    out = torch.stack([a, b], 0)
    assert isinstance(out, StackedComposite)
    return out


def test_stacked_composite_set_del_update():
    spec = _hetero()
    spec["new"] = torch.stack([Unbounded(shape=(1,)), Unbounded(shape=(2,))], 0)
    assert spec["new"].shape == (2, -1) and spec[1]["new"].shape == (2,)
    spec["other", "key"] = spec["new"]
    assert isinstance(spec["other"], StackedComposite) and spec["other", "key"] == spec["new"]
    del spec["extra"]
    assert "extra" not in spec[1].keys()
    with pytest.raises(KeyError, match="none of the 2 members"):
        del spec["nothing"]
    with pytest.raises(ValueError, match="entries along the stack dim"):  # ours: TorchRL does not check
        spec["bad"] = Unbounded(shape=(3,))
    assert "bad" not in spec[0].keys()  # nothing written
    other = _hetero()
    other["obs"] = torch.stack([Unbounded(shape=(3, 1)), Unbounded(shape=(5, 1))], 0)
    spec.update(other)
    assert spec[0]["obs"].shape == (3, 1)
    spec.type_check(spec.rand())
    with pytest.raises(TypeError):
        spec.type_check(torch.zeros(2, 1, dtype=torch.int64), "new")
    assert spec[..., 1] is spec.specs[1] and spec[0, ...] is spec.specs[0]
