"""tdict._core.constructors and tdict._core.combining: from_dict / fromkeys / from_* conversions, pytrees, make_tensordict,
merge_tensordicts, maybe_dense_stack / dense_stack_tds, assert_allclose_td, unravel_key_list."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest
import torch

import tdict
from tdict import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    assert_allclose_td,
    assert_close,
    default_is_leaf,
    dense_stack_tds,
    from_any,
    from_dataclass,
    from_dict,
    from_namedtuple,
    from_pytree,
    from_struct_array,
    from_tuple,
    fromkeys,
    is_tensorclass,
    lazy_stack,
    make_tensordict,
    maybe_dense_stack,
    merge_tensordicts,
    unravel_key_list,
)

Point = collections.namedtuple("Point", ["pos", "vel"])


@dataclasses.dataclass
class Sample:
    obs: torch.Tensor
    label: str = "s"
    extra: list = dataclasses.field(default_factory=lambda: [1, 2])


# ---------------------------------------------------------------------------- from_dict / fromkeys
def test_from_dict_infers_and_converts_containers():
    td = from_dict(
        {"a": torch.zeros(3, 4), "t": (torch.zeros(3, 4), torch.ones(3)), "p": Point(torch.zeros(3), torch.ones(3))}
    )
    assert td.batch_size == torch.Size([3]) and td["t"].batch_size == torch.Size([3])
    assert sorted(td["t"].keys()) == ["0", "1"] and torch.equal(td["p", "vel"], torch.ones(3))
    scalar = from_dict({"a": torch.zeros(3, 4), "t": (torch.zeros(3, 4), 1)})  # the scalar caps the tuple's batch size
    assert scalar.batch_size == torch.Size([]) and scalar["t"].batch_size == torch.Size([])
    assert from_dict({"a": torch.zeros(3, 4)}, batch_dims=1).batch_size == torch.Size([3])
    assert from_dict({"a": torch.zeros(3, 4)}, auto_batch_size=False).batch_size == torch.Size([])
    named = from_dict({"a": torch.zeros(3, 4)}, batch_size=[3, 4], names=["x", "y"])
    assert named.names == ["x", "y"]


def test_from_dict_lists_and_errors():
    td = from_dict({"n": [1, 2, 3], "s": ["a", "b"]}, auto_batch_size=False)
    assert (
        torch.equal(td["n"], torch.tensor([1, 2, 3]))
        and isinstance(td.get("s"), NonTensorStack)
        and td["s"] == ["a", "b"]
    )
    existing = TensorDict(a=torch.zeros(2))
    assert from_dict(existing) is existing
    with pytest.raises(ValueError, match="batch_size or batch_dims"):
        from_dict({"a": torch.zeros(3)}, batch_size=[3], batch_dims=1)
    with pytest.raises(TypeError, match="mapping"):
        from_dict([1, 2])


def test_fromkeys():
    value = torch.zeros(2)
    td = fromkeys(["a", ("b", "c")], value)
    assert td.batch_size == torch.Size([]) and td["a"] is value and td["b", "c"] is value
    assert TensorDict.fromkeys(["x"])["x"].item() == 0
    with pytest.raises(TypeError, match="element 1"):
        fromkeys(["a", 3])


# ---------------------------------------------------------------------------- namedtuple / tuple / dataclass / struct array
def test_from_namedtuple_recursive():
    nt = Point(torch.zeros(3, 2), Point(torch.ones(3), "fast"))
    td = from_namedtuple(nt, auto_batch_size=True)
    assert td.batch_size == torch.Size([3]) and torch.equal(td["vel", "pos"], torch.ones(3))
    assert td["vel", "vel"] == "fast" and TensorDict.from_namedtuple(nt)["pos"].shape == torch.Size([3, 2])
    values, indices = torch.tensor([[1.0, 5.0], [3.0, 2.0]]).max(0)
    mx = from_namedtuple(torch.tensor([[1.0, 5.0], [3.0, 2.0]]).max(0))
    assert torch.equal(mx["values"], values) and torch.equal(mx["indices"], indices)
    with pytest.raises(TypeError, match="namedtuple"):
        from_namedtuple((1, 2))


def test_from_tuple():
    td = from_tuple((torch.zeros(3), (torch.ones(3, 2), "s"), {"k": torch.ones(3)}), auto_batch_size=True)
    assert sorted(td.keys(True), key=str) == [("1", "0"), ("1", "1"), ("2", "k"), "0", "1", "2"]
    assert td.batch_size == torch.Size([3]) and td["1", "1"] == "s" and td["2"].batch_size == torch.Size([3])
    assert td["1"].batch_size == torch.Size([3, 2])
    assert TensorDict.from_tuple([torch.zeros(2)], batch_size=[2]).batch_size == torch.Size([2])
    with pytest.raises(TypeError, match="batch_size or auto_batch_size"):
        from_tuple((torch.zeros(3),), auto_batch_size=True, batch_size=[3])
    with pytest.raises(TypeError, match="tuple or a list"):
        from_tuple(3)


def test_td_from_dataclass():
    td = TensorDict.from_dataclass(Sample(torch.zeros(3, 2), extra=[[1], [2], [3]]), auto_batch_size=True)
    assert type(td) is TensorDict and td.batch_size == torch.Size([3])
    assert td["label"] == "s" and torch.equal(td["extra"], torch.tensor([[1], [2], [3]]))
    assert TensorDict.from_dataclass(Sample(torch.zeros(3, 2)), auto_batch_size=True).batch_size == torch.Size([])
    nested = TensorDict.from_dataclass(Sample(Sample(torch.zeros(3))))
    assert torch.equal(nested["obs", "obs"], torch.zeros(3))
    with pytest.raises(TypeError, match="dataclass instance"):
        TensorDict.from_dataclass(Sample)


def test_from_dataclass_makes_tensorclasses():
    cls = from_dataclass(Sample)
    assert is_tensorclass(cls) and cls.__name__ == "Sample_tc" and from_dataclass(Sample) is cls
    inst = cls(obs=torch.zeros(2), batch_size=[2])
    assert inst.label == "s" and inst.extra.tolist() == [1, 2]
    obj = from_dataclass(Sample(torch.ones(4, 3), label="x", extra=[1, 2, 3, 4]), auto_batch_size=True)
    assert (
        type(obj) is cls
        and obj.batch_size == torch.Size([4])
        and obj.label == "x"
        and torch.equal(obj.obs, torch.ones(4, 3))
    )
    via_td = TensorDict.from_dataclass(Sample(torch.ones(2)), as_tensorclass=True)
    assert type(via_td) is cls
    with pytest.raises(TypeError, match="dataclass"):
        from_dataclass(5)
    with pytest.raises(TypeError, match="dest_cls"):
        from_dataclass(Sample, dest_cls=dict)


def test_from_struct_array():
    arr = np.zeros(3, dtype=[("a", np.float64), ("b", np.int64, (2,))])  # 24-byte records: torch views them
    arr["b"] = [[1, 2], [3, 4], [5, 6]]
    td = from_struct_array(arr)
    assert (
        td.batch_size == torch.Size([3])
        and td["a"].dtype == torch.float64
        and td["b"].tolist() == [[1, 2], [3, 4], [5, 6]]
    )
    td["b"][0, 0] = 9
    assert arr["b"][0, 0] == 9  # a view of the array's memory (as tensordict)
    arr["a"] += 1
    assert td["a"].tolist() == [1.0, 1.0, 1.0]
    assert from_any(arr)["b"].shape == torch.Size([3, 2])
    packed = np.zeros(3, dtype=[("a", np.float32), ("b", np.int64)])  # 12-byte records: int64 copied
    copied = from_struct_array(packed)
    copied["b"][0] = 5
    assert packed["b"][0] == 0 and copied["b"].tolist() == [5, 0, 0]
    with pytest.raises(TypeError, match="structured"):
        from_struct_array(np.zeros(3))


def test_struct_array_round_trip_with_strings_and_nesting():
    inner = np.dtype([("x", np.float64), ("tag", "U4")])
    arr = np.zeros(2, dtype=[("name", "U10"), ("age", np.int32), ("pos", inner)])
    arr["name"], arr["age"] = ["Rex", "Fido"], [9, 3]
    arr["pos"]["x"], arr["pos"]["tag"] = [0.5, 1.5], ["a", "bc"]
    td = TensorDict.from_struct_array(arr)
    assert td["name"] == ["Rex", "Fido"] and td[1]["name"] == "Fido"
    assert td["pos", "tag"] == ["a", "bc"] and td["pos", "x"].tolist() == [0.5, 1.5]
    back = td.to_struct_array()
    assert back.shape == (2,) and back.dtype.names == ("name", "age", "pos")
    assert (back == arr).all()
    scalar = np.array(("Rex", 9, (0.0, "z")), dtype=arr.dtype)
    td0 = TensorDict.from_struct_array(scalar)
    assert td0.batch_size == () and td0["name"] == "Rex" and (td0.to_struct_array() == scalar).all()


def test_from_any_dispatch():
    td = TensorDict(a=torch.zeros(2))
    assert from_any(td) is td and TensorDict.from_any(td) is td
    tensor = torch.zeros(2)
    assert from_any(tensor) is tensor and from_any(3) == 3
    assert torch.equal(from_any([1, 2]), torch.tensor([1, 2])) and isinstance(from_any(["a", "b"]), NonTensorStack)
    assert from_any({"a": torch.zeros(3)}).batch_size == torch.Size([])
    assert from_any({"a": torch.zeros(3)}, auto_batch_size=True).batch_size == torch.Size([3])
    assert from_any(Point(torch.zeros(2), torch.zeros(2)), auto_batch_size=True).batch_size == torch.Size([2])
    assert sorted(from_any((1, 2)).keys()) == ["0", "1"]
    assert type(from_any(Sample(torch.zeros(2)))) is TensorDict


# ---------------------------------------------------------------------------- pytrees
def test_pytree_round_trip():
    class Key:
        pass

    key = Key()
    tree = (
        [torch.zeros(3), torch.ones(2)],
        {"t": torch.ones(2), key: torch.zeros(1), "l": [1, 2], 5: "five"},
        Point(torch.zeros(2), 3.0),
    )
    td = TensorDict.from_pytree(tree)
    assert isinstance(td, TensorDict) and td["_pytree_type"] is tuple
    back = td.to_pytree()
    assert type(back) is tuple and type(back[0]) is list and type(back[2]) is Point
    assert torch.equal(back[0][1], torch.ones(2)) and back[1][5] == "five" and key in back[1]
    assert list(back[1]) == ["t", key, "l", 5]  # insertion order kept
    assert torch.equal(back[2].vel, torch.tensor(3.0)) and [int(v) for v in back[1]["l"]] == [1, 2]
    flat_in, _ = torch.utils._pytree.tree_flatten([tree[0], tree[2]])
    flat_out, _ = torch.utils._pytree.tree_flatten([back[0], back[2]])
    assert all(torch.equal(torch.as_tensor(a), b) for a, b in zip(flat_in, flat_out))


def test_from_pytree_batch_size_and_edge_cases():
    assert from_pytree({"a": torch.zeros(3, 2), "b": [torch.zeros(3)]}, auto_batch_size=True).batch_size == torch.Size(
        [3]
    )
    assert from_pytree({"a": torch.zeros(3, 2)}, auto_batch_size=True, batch_dims=1).batch_size == torch.Size([3])
    td = from_pytree({"a": torch.zeros(3, 2), "b": [torch.zeros(3)]}, batch_size=[3])
    assert td.batch_size == torch.Size([3]) and td["b"].batch_size == torch.Size([3])
    assert from_pytree([]).to_pytree() == []
    collide = from_pytree({"_pytree_type": torch.zeros(1)}).to_pytree()
    assert list(collide) == ["_pytree_type"]
    t = torch.zeros(2)
    assert from_pytree(t) is t and torch.equal(from_pytree(3), torch.tensor(3))


# ---------------------------------------------------------------------------- make_tensordict / merge
def test_make_tensordict():
    assert make_tensordict(a=torch.zeros(3, 4), b=torch.zeros(3)).batch_size == torch.Size([3])
    td = make_tensordict({"a": torch.zeros(3), "b": {"c": torch.zeros(3, 4)}})
    assert td.batch_size == torch.Size([3]) and td["b"].batch_size == torch.Size([3, 4])
    assert make_tensordict(a=torch.zeros(3, 4), batch_size=[3]).batch_size == torch.Size([3])
    assert make_tensordict(a=torch.zeros(3, 4), auto_batch_size=False).batch_size == torch.Size([])
    source = TensorDict({"a": torch.zeros(3), "b": {"c": torch.zeros(3, 4)}}, [])
    assert make_tensordict(source).batch_size == torch.Size([3]) and source["b"].batch_size == torch.Size([])
    with pytest.raises(TypeError, match="batch_size or auto_batch_size"):
        make_tensordict(a=torch.zeros(3), batch_size=[3], auto_batch_size=True)


def test_merge_tensordicts():
    td0 = TensorDict({"a": {"b0": 0}, "common": 0})
    td1 = TensorDict({"a": {"b1": 1}, "common": 1})
    td2 = TensorDict({"a": {"b2": 2}, "f": 2, "common": 2})
    out = merge_tensordicts(td0, td1, td2, callback_exist=lambda *v: torch.stack(v))
    assert out["common"].tolist() == [0, 1, 2] and out["f"].item() == 2
    assert sorted(out["a"].keys()) == ["b0", "b1", "b2"] and "b1" not in td0["a"].keys()
    assert merge_tensordicts(TensorDict(c=0), TensorDict(c=1))["c"].item() == 0
    partial = merge_tensordicts(
        TensorDict(c=0), TensorDict(c=1, d=2), TensorDict(d=3), callback_exist=lambda *v: sum(v)
    )
    assert partial["c"].item() == 0 and partial["d"].item() == 2  # not in every collection: first one wins
    by_key = merge_tensordicts(TensorDict(c=0, d=0), TensorDict(c=1, d=1), callback_exist={"c": lambda *v: sum(v)})
    assert by_key["c"].item() == 1 and by_key["d"].item() == 0
    assert merge_tensordicts(TensorDict(s="x"), TensorDict(s="y"))["s"] == "x"
    with pytest.raises(ValueError, match="at least 2"):
        merge_tensordicts(td0)
    with pytest.raises(TypeError, match="item 1"):
        merge_tensordicts(td0, {"a": 1})


# ---------------------------------------------------------------------------- stacking
def test_maybe_dense_stack():
    a, b, c = TensorDict(x=torch.zeros(3)), TensorDict(y=torch.zeros(3)), TensorDict(x=torch.ones(4))
    dense = maybe_dense_stack([a, a.clone()])
    assert type(dense) is TensorDict and dense.batch_size == torch.Size([2]) and dense["x"].shape == torch.Size([2, 3])
    assert isinstance(maybe_dense_stack([a, b]), LazyStackedTensorDict)
    assert isinstance(maybe_dense_stack([a, c]), LazyStackedTensorDict)
    outer = maybe_dense_stack([TensorDict(n=a, t=torch.zeros(2)), TensorDict(n=c, t=torch.ones(2))], dim=-1)
    assert type(outer) is TensorDict and isinstance(outer.get("n"), LazyStackedTensorDict)
    assert torch.equal(outer["t"], torch.stack([torch.zeros(2), torch.ones(2)]))
    assert torch.equal(maybe_dense_stack([torch.zeros(2), torch.ones(2)], 1), torch.tensor([[0.0, 1.0], [0.0, 1.0]]))
    strings = maybe_dense_stack([TensorDict(s="a"), TensorDict(s="b")])
    assert type(strings) is TensorDict and strings["s"] == ["a", "b"]
    with pytest.raises(ValueError, match="non-empty"):
        maybe_dense_stack([])
    with pytest.raises(RuntimeError, match=r"item 1 has batch size \[3\]"):
        maybe_dense_stack([TensorDict(x=torch.zeros(2), batch_size=[2]), TensorDict(x=torch.zeros(3), batch_size=[3])])
    with pytest.raises(TypeError, match="item 1"):
        maybe_dense_stack([a, 1])


def test_dense_stack_tds_keeps_keys_of_some_members_of_nested_lazy_stacks():
    def inner(scale):
        return lazy_stack(
            [
                TensorDict({"x": torch.zeros(1) + scale}),
                TensorDict({"x": torch.ones(1) * scale, "y": torch.full((1,), 10.0 * scale)}),
            ]
        )

    stacked = lazy_stack([TensorDict({"n": inner(1.0)}, [2]), TensorDict({"n": inner(2.0)}, [2])])
    dense = dense_stack_tds(stacked)
    # tensordict 0.14: a TensorDict [2, 2] whose "n" is a lazy stack along dim 1 with y held by member 1
    assert type(dense) is TensorDict and dense.batch_size == torch.Size([2, 2])
    n = dense.get("n")
    assert type(n) is LazyStackedTensorDict and n.stack_dim == 1 and n.batch_size == torch.Size([2, 2])
    assert [sorted(m.keys()) for m in n.tensordicts] == [["x"], ["x", "y"]]
    assert n.tensordicts[1]["y"].tolist() == [[10.0], [20.0]]
    assert n["x"].tolist() == [[[1.0], [1.0]], [[2.0], [2.0]]]


def test_dense_stack_tds():
    a, b = TensorDict(x=torch.zeros(3)), TensorDict(x=torch.zeros(3), y=torch.zeros(1))
    inner = [lazy_stack([a, b]), lazy_stack([a.clone(), b.clone()])]
    stacked = lazy_stack([TensorDict(lazy=inner[0]), TensorDict(lazy=inner[1])])
    dense = dense_stack_tds(stacked)
    assert type(dense) is TensorDict and dense.batch_size == torch.Size([2])
    assert dense.get("lazy").batch_size == torch.Size([2, 2]) and dense["lazy", "x"].shape == torch.Size([2, 2, 3])
    assert type(dense_stack_tds([a, a], dim=0)) is TensorDict
    assert dense_stack_tds(a) is a
    with pytest.raises(ValueError, match="pass dim"):
        dense_stack_tds([a, a])


def test_tensorclass_maybe_dense_stack():
    cls = from_dataclass(Sample)
    items = [cls(obs=torch.zeros(2), batch_size=[2]), cls(obs=torch.ones(2), batch_size=[2])]
    out = maybe_dense_stack(items)
    assert type(out) is cls and out.batch_size == torch.Size([2, 2]) and torch.equal(out.obs[1], torch.ones(2))


# ---------------------------------------------------------------------------- assert_allclose_td / keys / leaves
def test_assert_allclose_td():
    td = TensorDict({"a": torch.ones(2), "s": "x", "n": {"b": torch.tensor(1.0)}})
    assert assert_allclose_td(td, td.clone()) and assert_close is assert_allclose_td
    assert assert_allclose_td(td, td.clone().apply(lambda x: x + 1e-9))
    shifted = td.clone()
    shifted["n", "b"] += 1
    with pytest.raises(AssertionError, match=r"key \('n', 'b'\)"):
        assert_allclose_td(td, shifted)
    with pytest.raises(AssertionError, match=r"only in actual \['s'\]"):
        assert_allclose_td(td, td.exclude("s"))
    assert assert_allclose_td(td, td.exclude("s"), intersection=True)
    other = td.clone()
    other["s"] = "y"
    with pytest.raises(AssertionError, match="non-tensor data differ"):
        assert_allclose_td(td, other, msg="ctx")
    with pytest.raises(AssertionError, match="x"):
        assert_allclose_td(td, td.clone().apply(lambda x: x + 1), rtol=0.0, atol=0.5, msg="x")
    assert assert_allclose_td(td, td.clone().apply(lambda x: x + 0.1), rtol=0.0, atol=0.5)
    s = lazy_stack([TensorDict(x=torch.zeros(2)), TensorDict(x=torch.zeros(3))])
    assert assert_allclose_td(s, s.clone())
    with pytest.raises(TypeError, match="expected"):
        assert_allclose_td(td, {"a": 1})


def test_unravel_key_list_and_default_is_leaf():
    assert unravel_key_list(["a", ("b",), ("c", ("d", "e"))]) == ["a", "b", ("c", "d", "e")]
    with pytest.raises(TypeError, match="element 1"):
        unravel_key_list(["a", 1])
    with pytest.raises(TypeError, match="string"):
        unravel_key_list("ab")
    # tensordict 0.14: non-tensor data is not a leaf under default_is_leaf, it is under is_leaf_nontensor
    assert default_is_leaf(torch.Tensor) and not default_is_leaf(TensorDict) and not default_is_leaf(NonTensorData)
    assert (
        tdict.is_leaf_nontensor(torch.Tensor)
        and not tdict.is_leaf_nontensor(TensorDict)
        and tdict.is_leaf_nontensor(NonTensorData)
    )


def test_exports():
    for name in (
        "from_dict",
        "fromkeys",
        "from_pytree",
        "from_any",
        "make_tensordict",
        "merge_tensordicts",
        "assert_close",
    ):
        assert name in tdict.__all__ and hasattr(tdict, name)
    for name in ("fromkeys", "from_pytree", "from_namedtuple", "from_tuple", "from_dataclass", "from_any", "from_dict"):
        assert callable(getattr(TensorDict, name))
