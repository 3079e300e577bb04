"""``spec.to(dtype)`` / ``spec.to(device)``: expected values observed on TorchRL 0.14.1 (``torchrl.data``).

Deliberate differences from TorchRL, tested here: a mask and MultiCategorical's ``nvec`` keep their
dtypes (TorchRL drops Categorical's mask, casts ``nvec`` and a MultiCategorical mask, which then
breaks the spec), infinite float bounds cast to an integer dtype saturate at its range (TorchRL gives
the dtype's minimum for both). A bool cast makes every nonzero bound True, as TorchRL's.
"""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from tdict.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    Unbounded,
    stack_specs,
)

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)
DTYPES = [torch.float64, torch.float16, torch.int32, torch.uint8]


def _leaves():
    return {
        "bounded": Bounded(-0.5, 1.5, shape=(2,)),
        "bounded_i": Bounded(0, 5, shape=(2,), dtype=torch.int64),
        "unbounded": Unbounded((2,)),
        "unbounded_i": Unbounded((2,), dtype=torch.int32),
        "categorical": Categorical(4, shape=(2,)),
        "onehot": OneHot(3),
        "binary": Binary(3),
        "multicat": MultiCategorical([2, 3]),
        "multionehot": MultiOneHot([2, 3]),
    }


@pytest.mark.parametrize("name", list(_leaves()))
@pytest.mark.parametrize("dtype", DTYPES)
def test_leaf_dtype_cast(name, dtype):
    spec = _leaves()[name]
    out = spec.to(dtype)
    assert type(out) is type(spec)
    assert out.dtype == dtype and out.shape == spec.shape and out.device == spec.device
    assert (out is spec) == (dtype == spec.dtype)
    assert spec == _leaves()[name]  # the original is untouched
    for lead in [(), (3,)]:
        x = out.rand(lead)
        assert x.dtype == dtype and x.shape == torch.Size(lead) + spec.shape
        assert out.is_in(x)
        assert out.zero(lead).dtype == dtype
    if dtype != spec.dtype:
        assert out != spec
    assert out.to(spec.dtype) == spec or name == "bounded"  # float bounds -> int truncate


@pytest.mark.parametrize("name", list(_leaves()))
def test_same_dtype_device_and_none_return_self(name):
    spec = _leaves()[name]
    assert spec.to(spec.dtype) is spec
    assert spec.to(None) is spec
    cpu = spec.to("cpu")
    assert cpu.device == torch.device("cpu") and cpu.dtype == spec.dtype
    assert cpu.to(torch.device("cpu")) is cpu and cpu.to("cpu") is cpu


def test_bounded_bounds_follow_the_dtype():
    spec = Bounded(-0.5, 1.5, shape=(2,))
    f64 = spec.to(torch.float64)
    assert f64.low.dtype == torch.float64 and f64.low.tolist() == [-0.5, -0.5] and f64.high.tolist() == [1.5, 1.5]
    assert f64.space.low.dtype == torch.float64
    i32 = spec.to(torch.int32)  # truncation toward zero, as TorchRL
    assert i32.low.dtype == torch.int32 and i32.low.tolist() == [0, 0] and i32.high.tolist() == [1, 1]
    assert spec.to(torch.uint8).low.tolist() == [0, 0]
    assert spec.to(torch.float16).high.dtype == torch.float16
    back = Bounded(0, 5, shape=(2,), dtype=torch.int64).to(torch.float64)
    assert back.low.tolist() == [0.0, 0.0] and back.high.tolist() == [5.0, 5.0]
    assert Bounded(0, 300, shape=(), dtype=torch.int64).to(torch.uint8).high.item() == 255
    inf = Bounded(-float("inf"), float("inf"), shape=(2,))
    assert inf.to(torch.int32).low.tolist() == [-(2**31)] * 2 and inf.to(torch.int32).high.tolist() == [2**31 - 1] * 2
    assert inf.to(torch.float64).high.tolist() == [float("inf")] * 2
    as_bool = Bounded(-0.5, 1.5, shape=(2,)).to(torch.bool)  # TorchRL 0.14.1: low == high == [True, True]
    assert (
        as_bool.dtype == torch.bool and as_bool.low.tolist() == [True, True] and as_bool.high.tolist() == [True, True]
    )
    assert as_bool.rand().tolist() == [True, True]


def test_masks_and_nvec_keep_their_dtype():
    cat = Categorical(3, mask=torch.tensor([True, False, True])).to(torch.float64)
    assert cat.mask is not None  # TorchRL drops it
    assert cat.mask.dtype == torch.bool and cat.mask.tolist() == [True, False, True]
    assert set(cat.rand((50,)).tolist()) <= {0.0, 2.0}
    onehot = OneHot(3, mask=torch.tensor([True, False, True])).to(torch.float64)
    assert onehot.mask is not None and onehot.mask.dtype == torch.bool and onehot.is_in(onehot.rand((10,)))
    mc = MultiCategorical([2, 3], mask=torch.tensor([True, True, False, True, True])).to(torch.float64)
    assert mc.nvec.dtype == torch.int64 and mc.nvec.tolist() == [2, 3]
    assert mc.mask is not None and mc.mask.dtype == torch.bool and mc.is_in(mc.rand((10,)))
    assert MultiOneHot([2, 3]).to(torch.float64).nvec == [2, 3]
    assert Binary(3).to(torch.float64).n == 3 and Categorical(4).to(torch.int32).n == 4


def test_unbounded_sampler_follows_the_dtype():
    spec = Unbounded((100,))
    assert spec.to(torch.int64).rand().dtype == torch.int64
    assert spec.to(torch.bool).rand().dtype == torch.bool
    ints = Unbounded((2,), dtype=torch.int32).to(torch.float64).rand((200,))
    assert ints.dtype == torch.float64 and not torch.equal(ints, ints.round())  # normal draws, not integers


def test_non_tensor_has_no_dtype():
    spec = NonTensor(shape=(2,), example_data="a")
    out = spec.to(torch.float64)
    assert out.dtype is None and out == spec
    assert spec.to("cpu").device == torch.device("cpu")


def test_composite_recursion():
    spec = Composite(
        a=Unbounded(2), b=Composite(c=Categorical(3), d=NonTensor(example_data=1)), nothing=None, device="cpu"
    )
    spec.lock_()
    out = spec.to(torch.float64)
    assert out is not spec and out.device == torch.device("cpu") and out["b"].device == torch.device("cpu")
    assert out["a"].dtype == torch.float64 and out["b", "c"].dtype == torch.float64
    assert out["b", "d"].dtype is None and out["nothing"] is None
    assert not out.is_locked  # a new Composite, as TorchRL's
    assert spec["a"].dtype == torch.float32  # untouched
    td = out.rand((4,))
    assert td["a"].dtype == torch.float64 and td["b", "c"].dtype == torch.float64
    assert spec.to("cpu") is spec and spec.to(torch.device("cpu")) is spec and spec.to(None) is spec
    free = Composite(a=Unbounded(2))
    moved = free.to("cpu")
    assert moved is not free and moved.device == torch.device("cpu") and moved["a"].device == torch.device("cpu")
    assert free.to(torch.float16).device is None


def test_stacked_specs_cast():
    stacked = stack_specs([Unbounded(2), Unbounded(3)], 0)  # what torch.stack calls
    out = stacked.to(torch.float64)
    assert out.dtype == torch.float64 and [s.dtype for s in out.specs] == [torch.float64] * 2
    assert stacked.to(None) is stacked
    comp = stack_specs([Composite(a=Unbounded(2)), Composite(a=Unbounded(3))], 0)
    cast = comp.to(torch.float64)
    assert cast.dtype == torch.float64 and cast.device is None and cast[0]["a"].dtype == torch.float64
    assert comp.to("cpu").device == torch.device("cpu")


@pytest.mark.parametrize(
    "spec", [Unbounded(2), Categorical(3), NonTensor(), Bounded(0.0, 1.0, shape=(2,))], ids=lambda s: type(s).__name__
)
@pytest.mark.parametrize("bad", [3.5, [1], True])
def test_bad_dest_is_refused(spec, bad):
    with pytest.raises(TypeError, match=r"\.to: dest must be a torch.dtype or a device"):
        spec.to(bad)


def test_bad_dest_composite_value_error():
    with pytest.raises(ValueError, match=r"Composite.to: dest must be a torch.dtype or a device"):
        Composite(a=Unbounded(1)).to(3.5)


@st.composite
def _casts(draw):
    spec = draw(st.sampled_from(list(_leaves().values())))
    return spec, draw(st.sampled_from([torch.float32, torch.float64, torch.int64, torch.int16]))


@SETTINGS
@given(_casts(), st.lists(st.integers(1, 3), max_size=2).map(tuple), st.integers(0, 2**31 - 1))
def test_cast_then_shape_ops(case, lead, seed):
    """A cast spec keeps working through the shape ops and keeps its dtype there."""
    spec, dtype = case
    torch.manual_seed(seed)
    out = spec.to(dtype).expand(*lead, *spec.shape)
    assert out.dtype == dtype and out.shape == torch.Size(lead) + spec.shape
    x = out.rand()
    assert x.dtype == dtype and out.is_in(x)
    assert out.clone() == out and out.clone().dtype == dtype
