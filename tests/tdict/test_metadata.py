"""MetaData: a non-tensor leaf about the whole batch; batch ops keep it one object, stacking the
very same object gives one MetaData (behaviour checked against tensordict 0.14.3; the documented
differences are marked)."""

from __future__ import annotations

import pickle

import pytest
import torch

from tdict import (
    MetaData,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    from_consolidated,
    is_non_tensor,
    lazy_stack,
    load,
    load_memmap,
)
from tdict.tensorclass import MetaData as MetaDataFromTensorclass


def _td() -> TensorDict:
    td = TensorDict(a=torch.zeros(4, 3), batch_size=[4, 3])
    td.set(("data", "non_tensor"), NonTensorData("a string!"))
    td.set(("data", "metadata"), MetaData[str]("a metadata!"))
    return td


def test_a_non_tensor_leaf():
    m = MetaData(3)
    assert is_non_tensor(m) and m.data == 3 and m.batch_size == torch.Size([])
    assert isinstance(m, NonTensorData)  # a subclass here, a sibling class in tensordict
    assert MetaDataFromTensorclass is MetaData
    assert (
        repr(MetaData({"a": 1}, batch_size=[2])) == "MetaData(data={'a': 1}, batch_size=torch.Size([2]), device=None)"
    )
    td = TensorDict(a=torch.zeros(4), batch_size=[4])
    td["m"] = MetaData("info")
    assert td["m"] == "info" and type(td.get("m")) is MetaData and td.get("m").batch_size == torch.Size([4])


def test_typed():
    cls = MetaData[int]
    assert MetaData[int] is cls and issubclass(cls, MetaData) and cls.__name__ == "MetaData[int]"
    d = cls(0, batch_size=(3,))
    assert isinstance(d, MetaData) and isinstance(d, MetaData[int]) and d.data == 0
    assert repr(MetaData[str]("q")) == "MetaData[str](data=q, batch_size=torch.Size([]), device=None)"
    with pytest.raises(TypeError, match="Expected data of type int, got str"):
        MetaData[int]("a string")
    with pytest.raises(TypeError, match="Cannot specify type for MetaData\\[int\\]"):
        MetaData[int][str]
    with pytest.raises(TypeError, match="MetaData\\[T\\]: T must be a class"):
        MetaData[list[int]]
    assert MetaData[(int, str)]("x").data == "x"
    with pytest.raises(TypeError, match="Expected data of type int"):
        d.update_(NonTensorData("no"))
    assert d.data == 0  # checked before the write


def test_batch_ops_keep_one_metadata():
    td = _td()
    ops = [
        lambda t: t[0],
        lambda t: t[1:3],
        lambda t: t[torch.tensor([0, 1, 1])],
        lambda t: t[torch.ones(4, 3, dtype=torch.bool)],
        lambda t: t.reshape(-1),
        lambda t: t.unsqueeze(0),
        lambda t: t.unsqueeze(0).squeeze(0),
        lambda t: t.permute(1, 0),
        lambda t: t.expand(2, 4, 3),
        lambda t: t.unbind(0)[1],
        lambda t: t.split(2, 0)[1],
        lambda t: t.clone(),
        lambda t: t.apply(lambda x: x + 1),
        lambda t: t.to(torch.float64),
        lambda t: torch.stack([t, t], 0),
        lambda t: torch.stack([t, t.clone()], 0),  # a str is not copied by clone: the same object
        lambda t: torch.cat([t, t], 0),
        lambda t: lazy_stack([t, t]),
        lambda t: pickle.loads(pickle.dumps(t)),
    ]
    for op in ops:
        out = op(td)
        meta = out.get(("data", "metadata"))
        assert type(meta) is MetaData[str], op
        assert meta.batch_size == out.batch_size and out["data", "metadata"] == "a metadata!"


def test_stacking_uses_identity():
    a, b, c = MetaData({"x": 1}), MetaData({"x": 1}), MetaData({"x": 2})
    same = torch.stack([a, a])
    assert type(same) is MetaData and same.batch_size == torch.Size([2]) and same.data is a.data
    equal = torch.stack([a, b])  # equal but not the same object: a stack (tensordict too)
    assert type(equal) is NonTensorStack and equal.tolist() == [{"x": 1}, {"x": 1}]
    assert type(torch.stack([a, c])) is NonTensorStack
    # NonTensorData stacks into a stack (tensordict 0.14's default)
    assert type(torch.stack([NonTensorData(1), NonTensorData(1)])) is NonTensorStack
    assert torch.stack([MetaData(1), MetaData(1)], 0).batch_size == torch.Size([2])  # small ints are one object
    td0, td1 = TensorDict(foo=MetaData("a string")), TensorDict(foo=MetaData("another string"))
    assert type(torch.stack([td0, td0]).get("foo")) is MetaData
    assert type(torch.stack([td0, td1]).get("foo")) is NonTensorStack
    out = MetaData(None, batch_size=[2])
    assert torch.stack([a, a], out=out) is out and out.data is a.data


def test_cat_and_expand():
    cat = torch.cat([MetaData(1, batch_size=[2]), MetaData(1, batch_size=[3])])
    assert type(cat) is MetaData and cat.batch_size == torch.Size([5])
    mixed = torch.cat([MetaData([1], batch_size=[2]), MetaData([2], batch_size=[3])])
    assert type(mixed) is NonTensorStack and mixed.tolist() == [[1], [1], [2], [2], [2]]  # tensordict keeps [1]
    with pytest.raises(RuntimeError, match="batch size"):
        torch.cat([MetaData(1, batch_size=[2, 1]), MetaData(1, batch_size=[3, 2])])
    d = MetaData(0, batch_size=(1,)).expand((2, 3))
    assert type(d) is MetaData and d.shape == (2, 3) and d.tolist() == [[0] * 3] * 2
    nested = TensorDict(foo=MetaData(0, batch_size=(3,)), batch_size=(3,)).expand((2, 3)).get("foo")
    assert type(nested) is MetaData and nested.batch_size == torch.Size([2, 3])


def test_equality_and_writes():
    m = MetaData[str]("a")
    assert bool(m == MetaData[str]("a")) and not bool(m == MetaData[str]("b")) and bool(m != MetaData("b"))
    assert (m == "a").dtype == torch.bool  # tensordict returns a plain False for a raw payload
    td = _td()
    assert (td == td.clone()).all()
    td[0] = td[1]
    assert type(td.get(("data", "metadata"))) is MetaData[str]
    td.set(("data", "metadata"), MetaData[str]("zz"))
    assert td["data", "metadata"] == "zz"


def test_auto_batch_size_ignores_a_scalar_one():
    td = TensorDict(data=torch.zeros(16, 10), meta=MetaData(slice(-1)))
    td.auto_batch_size_(2)
    assert td.batch_size == torch.Size([16, 10]) and td.get("meta").batch_size == torch.Size([16, 10])


def test_pickle_keeps_the_type():
    x = MetaData[int](3, batch_size=[2])
    back = pickle.loads(pickle.dumps(x))
    assert type(back) is MetaData[int] and back.data == 3 and back.batch_size == torch.Size([2])
    assert type(pickle.loads(pickle.dumps(MetaData("p")))) is MetaData


def test_memmap_save_and_consolidate_round_trips(tmp_path):
    td = _td()
    td.set("lr", MetaData[(int, float)](0.1))
    td.set("plain", MetaData([1, "a"]))
    td.memmap(tmp_path / "m")
    for loaded in (load_memmap(tmp_path / "m"), TensorDict.load_memmap(tmp_path / "m")):
        assert type(loaded.get(("data", "metadata"))) is MetaData[str]
        assert loaded["data", "metadata"] == "a metadata!"
        assert type(loaded.get(("data", "non_tensor"))) is NonTensorData
        assert type(loaded.get("lr")) is MetaData[(int, float)] and loaded["lr"] == 0.1
        assert type(loaded.get("plain")) is MetaData and loaded["plain"] == [1, "a"]
    td.save(tmp_path / "s")
    assert type(load(tmp_path / "s").get(("data", "metadata"))) is MetaData[str]
    consolidated = td.consolidate()
    assert type(consolidated.get(("data", "metadata"))) is MetaData[str]
    assert type(pickle.loads(pickle.dumps(consolidated)).get("lr")) is MetaData[(int, float)]
    td.consolidate(filename=tmp_path / "c.bin")
    from_file = from_consolidated(tmp_path / "c.bin")
    assert type(from_file.get(("data", "metadata"))) is MetaData[str] and from_file["data", "metadata"] == "a metadata!"


def test_a_local_type_cannot_be_saved(tmp_path):
    class Local(int):
        pass

    td = TensorDict(m=MetaData[Local](Local(1)))
    with pytest.raises(TypeError, match="'m'"):
        td.memmap(tmp_path / "m")
    assert [p.name for p in (tmp_path / "m").iterdir()] == [".tdict.lock"]  # nothing written
