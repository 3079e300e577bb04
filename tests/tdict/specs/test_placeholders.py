"""Composite placeholder entries (``Composite(obs=None)``): expected values observed on TorchRL 0.14.1."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from tdict import TensorDict
from tdict.specs import Bounded, Categorical, Composite, OneHot, Unbounded, stack_specs

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True)


def _spec(shape=(2,), device: str | None = "cpu"):
    return Composite(obs=None, act=Unbounded((*shape, 3)), shape=shape, device=device)


def test_keys_items_contains_and_getitem():
    spec = Composite(obs=None, act=Unbounded(3))
    assert spec.keys() == ["obs", "act"]
    assert spec.keys(True, True) == ["obs", "act"]  # a placeholder counts as a leaf
    assert [v is None for v in spec.values()] == [True, False]
    assert len(spec) == 2
    assert "obs" in spec and "obs" in spec.keys()
    assert spec["obs"] is None and spec.get("obs") is None
    assert spec.get("missing", 5) == 5
    with pytest.raises(KeyError):
        spec["missing"]
    assert not spec.is_empty() and not Composite(a=None).is_empty()


def test_nested_placeholders_from_tuple_keys():
    spec = Composite({("a", "b"): None, ("a", "c"): None})
    assert spec.keys(True, True) == [("a", "b"), ("a", "c")]
    assert isinstance(spec["a"], Composite) and spec["a", "b"] is None
    assert ("a", "b") in spec.keys(True)
    td = spec.rand()  # the branch is an empty sub-TensorDict, as TorchRL writes it
    assert list(td.keys(True)) == ["a"] and td["a"].batch_size == torch.Size([])
    assert list(spec.zero().keys(True)) == ["a"]


def test_setitem_none_and_nested_none():
    spec = _spec()
    spec["x"] = None
    spec["n", "y"] = None
    assert spec["x"] is None and spec["n", "y"] is None
    assert spec["n"].shape == torch.Size([2])  # the intermediate Composite takes the batch shape
    assert set(spec.keys(True, True)) == {"obs", "act", "x", ("n", "y")}
    # a placeholder is exempt from the shape and device checks
    assert Composite(a=None, shape=(4,), device="cpu")["a"] is None


@pytest.mark.parametrize("lead", [(), (3,)])
def test_rand_zero_one_skip_placeholders(lead):
    spec = _spec()
    for name in ("rand", "zero", "one"):
        td = getattr(spec, name)(lead)
        assert list(td.keys()) == ["act"]
        assert td.batch_size == torch.Size((*lead, 2))
        assert td["act"].shape == torch.Size((*lead, 2, 3))
    assert (spec.zero()["act"] == 0).all() and (spec.one()["act"] == 1).all()


def test_is_in_project_to_numpy_ignore_placeholders():
    spec = _spec()
    td = spec.rand()
    assert spec.is_in(td)
    spec.assert_is_in(td)
    # a value under the placeholder key is accepted whatever it is
    other = TensorDict(act=torch.zeros(2, 3), obs=torch.zeros(2, 7, dtype=torch.int64), batch_size=[2])
    assert spec.is_in(other)
    out = spec.project(TensorDict(act=torch.zeros(2, 3), batch_size=[2]))
    assert list(out.keys()) == ["act"]
    assert list(spec.to_numpy(td).keys()) == ["act"]


def test_encode_placeholder_refused():
    spec = Composite(obs=None, act=Unbounded(3))
    out = spec.encode({"act": [1.0, 2.0, 3.0]})
    assert out["act"].tolist() == [1.0, 2.0, 3.0] and list(out.keys()) == ["act"]
    with pytest.raises(RuntimeError, match="'obs' holds a placeholder"):
        spec.encode({"obs": [1.0]})
    with pytest.raises(RuntimeError, match="value of key 'act' is None"):
        spec.encode({"act": None})
    with pytest.raises(KeyError, match="The Composite instance with keys .* has no key .zz."):  # TorchRL wording
        spec.encode({"zz": [1.0]})


def test_equality():
    assert Composite(obs=None, act=Unbounded(3)) == Composite(obs=None, act=Unbounded(3))
    assert Composite(a=None, b=Unbounded(1)) == Composite(b=Unbounded(1), a=None)
    assert Composite(obs=None, act=Unbounded(3)) != Composite(obs=Unbounded(3), act=Unbounded(3))
    assert Composite(obs=Unbounded(3), act=Unbounded(3)) != Composite(obs=None, act=Unbounded(3))
    assert not (Composite(a=None) != Composite(a=None))


def test_clone_to_and_repr_keep_placeholders():
    spec = _spec()
    clone = spec.clone()
    assert clone == spec and clone["obs"] is None and clone is not spec
    assert spec.to(torch.float64)["obs"] is None and spec.to(torch.float64).device == torch.device("cpu")
    assert spec.to("cpu") is spec  # already there
    moved = _spec(device=None).to("cpu")
    assert moved["obs"] is None and moved.device == torch.device("cpu")
    assert "obs: None" in repr(Composite(obs=None))


def test_shape_ops_keep_placeholders():
    spec = _spec()
    assert spec[0].shape == torch.Size([]) and spec[0]["obs"] is None and spec[0]["act"].shape == torch.Size([3])
    assert spec[:1].shape == torch.Size([1]) and spec[:1]["obs"] is None
    assert spec[torch.tensor([0, 1, 1])].shape == torch.Size([3])
    expanded = spec.expand(3, 2)
    assert expanded.shape == torch.Size([3, 2]) and expanded["obs"] is None
    assert expanded["act"].shape == torch.Size([3, 2, 3])
    assert spec.unsqueeze(0).shape == torch.Size([1, 2]) and spec.unsqueeze(0)["obs"] is None
    # TorchRL raises AttributeError on these; the placeholder is kept instead
    assert spec.unsqueeze(0).squeeze(0)["obs"] is None
    assert spec.reshape(2, 1)["obs"] is None
    parts = spec.unbind(0)
    assert len(parts) == 2 and all(p["obs"] is None for p in parts)


def test_update_select_exclude_pop_del():
    spec = Composite(obs=Unbounded(3))
    spec.update(Composite(obs=None))
    assert spec["obs"] is None
    spec.update({"obs": Unbounded(4)})
    assert spec["obs"].shape == torch.Size([4])
    base = Composite(obs=None, act=Unbounded(3))
    assert base.select("obs").keys() == ["obs"] and base.select("obs")["obs"] is None
    assert base.exclude("obs").keys() == ["act"]
    assert base.pop("obs") is None and base.keys() == ["act"]
    other = Composite(obs=None, act=Unbounded(3))
    del other["obs"]
    assert other.keys() == ["act"]
    nested = Composite(a=Composite(b=None, c=Unbounded(1)))
    nested.update(Composite(a=Composite(b=Unbounded(2))))
    assert nested["a", "b"].shape == torch.Size([2]) and "c" in nested["a"]


def test_cardinality_and_enumerate_leave_placeholders_out():
    spec = Composite(a=None, b=Categorical(3))
    assert spec.cardinality() == 3
    assert Composite(a=None).cardinality() == 0
    td = spec.enumerate()
    assert list(td.keys()) == ["b"] and td["b"].tolist() == [0, 1, 2]


def test_stack_keeps_placeholders():
    a, b = _spec(), _spec()
    stacked = stack_specs([a, b], 0)  # what torch.stack calls
    assert type(stacked) is Composite and stacked.shape == torch.Size([2, 2]) and stacked["obs"] is None
    het = stack_specs([Composite(obs=None, act=OneHot(3)), Composite(obs=None, act=OneHot(4))], 0)
    # (TorchRL raises TypeError on het["obs"]; the stacked placeholder is None here)
    assert het["obs"] is None and het.dtype is torch.bool
    assert list(het.rand().keys()) == ["act"]


def test_set_non_spec_names_key():
    with pytest.raises(TypeError, match="key 'a' must be a spec .* or None, got int"):
        Composite(a=3)


@SETTINGS
@given(
    st.lists(st.booleans(), min_size=1, max_size=4),
    st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple),
    st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple),
)
def test_placeholders_never_generated(placeholder, shape, lead):
    """Whatever the mix, generation and checks skip the None entries and keep the others."""
    entries = {
        f"k{i}": None if hole else Bounded(-1.0, 1.0, shape=(*shape, i + 1)) for i, hole in enumerate(placeholder)
    }
    spec = Composite(entries, shape=shape)
    kept = [k for k, hole in zip(entries, placeholder) if not hole]
    assert spec.keys() == list(entries)
    td = spec.rand(lead)
    assert sorted(td.keys()) == kept and td.batch_size == torch.Size(lead + shape)
    assert spec.is_in(td) and spec.expand(*lead, *shape).is_in(td)
    assert sorted(spec.zero(lead).keys()) == kept
    assert spec.clone() == spec and spec.to(torch.float64).keys() == list(entries)
