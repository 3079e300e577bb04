"""Composite: dict API, nested keys, generation as TensorDicts, validation and shape ops."""

import numpy as np
import pytest
import torch

from tdict import TensorDict
from tdict.specs import Bounded, Categorical, Composite, NonTensor, OneHot, Unbounded


def make(shape=(4,)):
    return Composite(
        obs=Unbounded(shape=shape + (3,)),
        action=Categorical(2, shape=shape),
        next=Composite(
            reward=Bounded(-1.0, 1.0, shape=shape), done=Unbounded(shape=shape, dtype=torch.bool), shape=shape
        ),
        shape=shape,
    )


def test_rand_zero_one_batch_sizes_and_nesting():
    spec = make()
    td = spec.rand()
    assert isinstance(td, TensorDict) and td.batch_size == (4,)
    assert td["obs"].shape == (4, 3) and td["action"].dtype == torch.int64
    assert isinstance(td.get("next"), TensorDict) and td.get("next").batch_size == (4,)
    td2 = spec.rand((2, 5))
    assert td2.batch_size == (2, 5, 4) and td2["next", "reward"].shape == (2, 5, 4)
    assert spec.is_in(td) and spec.is_in(td2)
    z = spec.zero((3,))
    assert z.batch_size == (3, 4) and z["obs"].abs().sum() == 0 and not z["next", "done"].any()
    assert spec.zeros().batch_size == (4,)
    o = spec.one()
    assert (o["obs"] == 1).all() and o["next", "done"].all()


def test_dict_api_nested_keys():
    spec = make()
    assert spec["next", "reward"] == Bounded(-1.0, 1.0, shape=(4,))
    assert spec[("next",)] is spec["next"]
    assert ("next", "reward") in spec and "missing" not in spec and ("obs", "x") not in spec
    assert spec.keys() == ["obs", "action", "next"]
    assert spec.keys(include_nested=True) == ["obs", "action", "next", ("next", "reward"), ("next", "done")]
    assert spec.keys(True, True) == ["obs", "action", ("next", "reward"), ("next", "done")]
    assert [k for k, _ in spec.items()] == spec.keys() and len(spec.values(True, True)) == 4
    spec["next", "extra", "deep"] = Unbounded(shape=(4, 2))
    assert isinstance(spec["next", "extra"], Composite) and spec["next", "extra"].shape == (4,)
    assert spec.rand()["next", "extra", "deep"].shape == (4, 2)
    del spec["next", "extra"]
    assert ("next", "extra") not in spec
    spec["sub"] = {"a": Unbounded(shape=(4,))}
    assert isinstance(spec["sub"], Composite) and spec.rand()["sub", "a"].shape == (4,)
    assert len(spec) == 4 and list(spec) == ["obs", "action", "next", "sub"]
    assert spec.pop("sub") is not None and "sub" not in spec
    with pytest.raises(KeyError, match="missing"):
        spec["missing"]
    with pytest.raises(KeyError):
        del spec["missing"]


def test_set_validates_shape_and_type():
    spec = Composite(shape=(4,))
    with pytest.raises(ValueError, match="'bad'.*does not start with the Composite shape"):
        spec["bad"] = Unbounded(shape=(3,))
    with pytest.raises(TypeError, match="'x'"):
        spec["x"] = torch.zeros(4)
    spec.set("ok", Unbounded(shape=(4, 2)))
    assert "bad" not in spec and spec["ok"].shape == (4, 2)


def test_lock_unlock_empty():
    spec = make()
    spec.lock_()
    assert spec.is_locked and spec["next"].is_locked
    with pytest.raises(RuntimeError, match="locked"):
        spec["x"] = Unbounded(shape=(4,))
    with pytest.raises(RuntimeError, match="locked"):
        del spec["next", "reward"]
    spec.unlock_()
    spec["x"] = Unbounded(shape=(4,))
    e = spec.empty()
    assert len(e) == 0 and e.shape == (4,) and e.is_empty() and not spec.is_empty()
    assert e.rand().batch_size == (4,)


def test_is_in_and_assert_names_key():
    spec = make()
    td = spec.rand()
    td["next", "reward"] = torch.full((4,), 3.0)
    assert not spec.is_in(td)
    with pytest.raises(AssertionError, match=r"key \('next', 'reward'\): high bound violated"):
        spec.assert_is_in(td)
    td2 = spec.rand().exclude("obs")
    with pytest.raises(AssertionError, match="key 'obs': key is missing"):
        spec.assert_is_in(td2)


def test_project_encode_to_numpy():
    spec = make()
    td = spec.rand()
    td["next", "reward"] = torch.tensor([3.0, -3.0, 0.5, 0.0])
    td["action"] = torch.tensor([5, 0, 1, -1])
    out = spec.project(td)
    assert out["next", "reward"].tolist() == [1.0, -1.0, 0.5, 0.0] and out["action"].tolist() == [1, 0, 1, 0]
    assert spec.is_in(out) and out is td  # projected in place, as TorchRL
    enc = spec.encode({"obs": np.zeros((4, 3)), "action": [0, 1, 1, 0], "next": {"reward": np.ones(4)}})
    assert enc.batch_size == (4,) and enc["obs"].dtype == torch.float32 and enc["next", "reward"].tolist() == [1.0] * 4
    with pytest.raises(KeyError, match="nope"):
        spec.encode({"nope": 1})
    arrays = spec.to_numpy(spec.zero())
    assert arrays["obs"].shape == (4, 3) and arrays["next"]["reward"].dtype == np.float32


def test_project_writes_into_its_input_as_torchrl():
    from tdict import TensorDict, lazy_stack

    spec = Composite(a=Bounded(-1.0, 1.0, shape=(2,)), n=Composite(b=Categorical(3, shape=(2,))))
    td = TensorDict(a=torch.tensor([-3.0, 0.5]), n=TensorDict(b=torch.tensor([5, 1])), extra=torch.ones(1))
    a, nested = td["a"], td["n"]
    out = spec.project(td)
    # TorchRL 0.14.1: `spec.project(td); assert spec.is_in(td)` (its test_specs.py relies on it)
    assert out is td and td["n"] is nested and spec.is_in(td)
    assert td["a"].tolist() == [-1.0, 0.5] and td["n", "b"].tolist() == [2, 1] and td["extra"].tolist() == [1.0]
    assert a.tolist() == [-3.0, 0.5]  # the tensor itself is replaced, not written into
    members = [TensorDict(a=torch.tensor([-3.0, 0.5]), n=TensorDict(b=torch.tensor([5, 1]))) for _ in range(2)]
    stacked = Composite(
        a=Bounded(-1.0, 1.0, shape=(2, 2)), n=Composite(b=Categorical(3, shape=(2, 2)), shape=(2,)), shape=(2,)
    )
    lazy = lazy_stack(members, 0)
    assert stacked.project(lazy) is lazy
    assert [m["a"].tolist() for m in members] == [[-1.0, 0.5]] * 2 and [m["n", "b"].tolist() for m in members] == [
        [2, 1]
    ] * 2
    inside = TensorDict(a=torch.tensor([0.0, 0.5]), n=TensorDict(b=torch.tensor([0, 1])))
    a_in = inside["a"]
    assert spec.project(inside)["a"] is a_in  # values inside their specs are left as they are


def test_shape_ops():
    spec = make()
    e = spec.expand(2, 4)
    assert e.shape == (2, 4) and e["obs"].shape == (2, 4, 3) and e["next", "reward"].shape == (2, 4)
    assert e.rand().batch_size == (2, 4)
    with pytest.raises(ValueError, match="cannot expand"):
        spec.expand(2, 5)
    sub = e[0]
    assert sub == spec
    sl = e[:, 1:3]
    assert sl.shape == (2, 2) and sl["obs"].shape == (2, 2, 3)
    parts = spec.unbind(0)
    assert len(parts) == 4 and parts[0].shape == () and parts[0]["obs"].shape == (3,)
    assert parts[0].rand().batch_size == ()
    assert spec.unsqueeze(0).shape == (1, 4) and spec.unsqueeze(0).squeeze(0) == spec
    assert e.reshape(8)["obs"].shape == (8, 3)


def test_clone_to_eq_update_select_exclude():
    spec = make()
    c = spec.clone()
    assert c == spec and c["obs"] is not spec["obs"]
    c["next", "reward"] = Bounded(0.0, 1.0, shape=(4,))
    assert c != spec
    assert spec.to("cpu").device == torch.device("cpu") and spec.to("cpu")["next", "reward"].device == torch.device(
        "cpu"
    )
    s = spec.select("obs", ("next", "reward"))
    assert s.keys(True, True) == ["obs", ("next", "reward")]
    with pytest.raises(KeyError):
        spec.select("nope")
    assert spec.select("nope", strict=False).keys() == []
    x = spec.exclude("obs", ("next", "done"))
    assert x.keys(True, True) == ["action", ("next", "reward")]
    assert ("next", "done") in spec  # exclude leaves the original untouched
    u = spec.clone().update({"obs": Unbounded(shape=(4, 7)), "next": {"extra": Unbounded(shape=(4,))}})
    assert u["obs"].shape == (4, 7) and ("next", "reward") in u and ("next", "extra") in u


def test_device_and_non_tensor():
    spec = Composite(text=NonTensor(example_data="hi"), a=OneHot(3), device="cpu")
    assert spec["a"].device == torch.device("cpu")
    td = spec.rand((2,))
    assert td.batch_size == (2,) and td["text"] == "hi" and td.device == torch.device("cpu")
    assert spec.is_in(td)


def test_composite_enumerate_is_the_cartesian_product():
    import itertools

    from tdict.specs import Categorical, Composite, OneHot

    spec = Composite(a=Categorical(2), n={"b": OneHot(3)})
    td = spec.enumerate()
    assert td.batch_size == torch.Size([spec.cardinality()]) == torch.Size([6])
    expected = list(itertools.product(range(2), range(3)))
    got = list(zip(td["a"].tolist(), td["n", "b"].long().argmax(-1).tolist()))
    assert got == expected
    assert all(spec.is_in(td[i]) for i in range(6))
    batched = Composite(a=Categorical(2, shape=(4,)), shape=(4,)).enumerate()
    assert batched.batch_size == torch.Size([2, 4]) and batched["a"].tolist() == [[0] * 4, [1] * 4]
    with pytest.raises(ValueError, match="no leaves"):
        Composite().enumerate()
