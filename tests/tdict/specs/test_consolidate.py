"""consolidate_spec: the members of a stack of Composites get the same keys (TorchRL's torchrl.data.utils)."""

import pytest
import torch

from tdict.specs import Bounded, Categorical, Composite, OneHot, StackedComposite, Unbounded, consolidate_spec


def _agents():
    a = Composite(camera=Bounded(0, 200, shape=(7, 7, 3)), lidar=Bounded(0, 5, shape=(8,)), t0=Unbounded(shape=(1,)))
    b = Composite(
        camera=Bounded(0, 200, shape=(7, 7, 3)), lidar=Bounded(0, 5, shape=(8,)), t1=Bounded(0, 3, shape=(1, 2))
    )
    c = Composite(camera=Bounded(0, 200, shape=(7, 7, 3)), t2=Unbounded(shape=(1, 2, 3)))
    return a, b, c


def test_exclusive_keys_get_zero_size_specs():
    spec = consolidate_spec(torch.stack(list(_agents()), 0))
    assert isinstance(spec, StackedComposite) and spec.shape == (3,)
    for member in spec.specs:
        assert sorted(member.keys()) == ["camera", "lidar", "t0", "t1", "t2"]
    a, b, c = spec.specs
    # a key some members hold with equal shapes: a zero-size leaf of the same class and rank
    assert type(c["lidar"]) is Bounded and c["lidar"].shape == (0,)
    assert a["t1"].shape == (0, 0) and type(a["t1"]) is Bounded
    assert b["t2"].shape == (0, 0, 0) and c["t0"].shape == (0,)
    # the held entries are untouched
    assert a["lidar"].shape == (8,) and c["t2"].shape == (1, 2, 3)
    td = spec.zero()
    assert td.batch_size == (3,) and sorted(td.tensordicts[2].keys()) == ["camera", "lidar", "t0", "t1", "t2"]
    assert td.tensordicts[2]["lidar"].shape == (0,) and td.tensordicts[0]["lidar"].shape == (8,)
    assert spec.is_in(td)


def test_dims_that_differ_become_zero():
    a = Composite(x=Unbounded(shape=(3, 4)))
    b = Composite(x=Unbounded(shape=(3, 4)), y=Unbounded(shape=(2, 5)))
    c = Composite(x=Unbounded(shape=(3, 4)), y=Unbounded(shape=(2, 6)))
    spec = consolidate_spec(torch.stack([a, b, c], 0))
    assert spec.specs[0]["y"].shape == (2, 0)  # dim 0 agrees, dim 1 differs


def test_nested_composites_and_batch_dims():
    a = Composite(agent=Composite(obs=Unbounded(shape=(2, 3)), shape=(2,)), shape=(2,))
    b = Composite(agent=Composite(obs=Unbounded(shape=(2, 3)), extra=Unbounded(shape=(2, 4)), shape=(2,)), shape=(2,))
    spec = consolidate_spec(torch.stack([a, b], 0))
    assert spec.specs[0]["agent", "extra"].shape == (2, 0)  # the member's batch dim stays
    outer = Composite(group=torch.stack([a, b], 0), shape=())
    out = consolidate_spec(outer)
    assert out["group"].specs[0]["agent", "extra"].shape == (2, 0)
    assert "extra" not in outer["group"].specs[0]["agent"].keys()  # the input is not modified
    assert "extra" not in consolidate_spec(outer, recurse_through_entries=False)["group"].specs[0]["agent"].keys()


def test_exclusive_composite_gets_empty_composite_and_onehot_falls_back():
    a = Composite(obs=Unbounded(shape=(2,)), sub=Composite(z=Unbounded(shape=(1,))), act=OneHot(4))
    b = Composite(obs=Unbounded(shape=(2,)))
    spec = consolidate_spec(torch.stack([a, b], 0))
    filler = spec.specs[1]["sub"]
    assert isinstance(filler, Composite) and filler.is_empty() and filler.shape == ()
    act = spec.specs[1]["act"]
    assert act.shape == (0,) and act.dtype == OneHot(4).dtype


def test_plain_specs_are_returned_as_copies():
    leaf = Categorical(3)
    out = consolidate_spec(leaf)
    assert out == leaf and out is not leaf
    comp = Composite(x=Unbounded(shape=(2,)))
    assert consolidate_spec(comp) == comp


def test_same_key_with_different_classes_raises():
    a = Composite(obs=Unbounded(shape=(2,)), k=Unbounded(shape=(1,)))
    b = Composite(obs=Unbounded(shape=(2,)), k=Bounded(0, 1, shape=(1,)))
    c = Composite(obs=Unbounded(shape=(2,)))
    with pytest.raises((ValueError, RuntimeError)):
        consolidate_spec(torch.stack([a, b, c], 0))


def test_composite_set_through_a_stacked_composite_sets_every_member():
    stacked = torch.stack([Composite(a=Unbounded(shape=(3,))), Composite(a=Unbounded(shape=(2,)))], 0)
    spec = Composite(group=stacked)
    spec["group", "flag"] = Categorical(2, shape=(2, 1), dtype=torch.bool)
    assert [m["flag"].shape for m in spec["group"].specs] == [torch.Size([1]), torch.Size([1])]
    assert spec["group", "flag"].shape == (2, 1) and spec["group", "flag"].dtype == torch.bool
    assert ("group", "flag") in spec.keys(True, True)
    spec.lock_()
    with pytest.raises(RuntimeError, match="locked"):
        spec["group", "other"] = Categorical(2, shape=(2, 1))
