"""tensorclass / TensorClass: dataclass-like containers backed by a TensorDict."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import pickle
from typing import Any, ClassVar

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tdict import (
    NonTensorData,
    TensorClass,
    LazyStackedTensorDict,
    TensorDict,
    from_dataclass,
    is_leaf_nontensor,
    is_tensor_collection,
    lazy_stack,
    tensorclass,
)
from tdict.tensorclass import is_tensorclass


@tensorclass
class Data:
    obs: torch.Tensor
    label: str | None = None


class Pair(TensorClass):
    x: torch.Tensor
    sub: Data | None = None
    meta: TensorDict | None = None


@tensorclass
class WithInit:
    a: torch.Tensor

    def __init__(self, value: float):
        self.a = torch.full(self.batch_size, value)


def make(n: int = 3, label: str = "x", fill: float = 0.0) -> Data:
    return Data(obs=torch.full((n, 2), fill), label=label, batch_size=[n])


# ---------------------------------------------------------------- construction and fields
def test_construction_and_access():
    d = make()
    assert d.obs.shape == torch.Size([3, 2])
    assert d.label == "x"
    assert d.batch_size == torch.Size([3]) and d.shape == torch.Size([3]) and d.device is None
    assert type(d._tensordict) is TensorDict
    assert type(d._tensordict.get("label")) is NonTensorData
    positional = Data(torch.zeros(2), "p", batch_size=[2])
    assert positional.label == "p"
    assert Data(obs=torch.zeros(2), batch_size=[2]).label is None
    assert is_tensorclass(d) and is_tensorclass(Data) and is_tensor_collection(d)
    assert dataclasses.is_dataclass(Data) and [f.name for f in dataclasses.fields(Data)] == ["obs", "label"]
    assert Data.label is None  # class access gives the default


def test_device_and_names():
    d = Data(obs=torch.zeros(2, 3), batch_size=[2, 3], device="cpu", names=["env", "time"])
    assert d.device == torch.device("cpu")
    assert d.names == ["env", "time"]


def test_validation_errors():
    d = make()
    with pytest.raises(RuntimeError, match=r"Data\.obs.*\[3\].*\[4\]"):
        d.obs = torch.zeros(4)
    with pytest.raises(RuntimeError, match=r"Data\.obs"):
        Data(obs=torch.zeros(4, 2), batch_size=[3])
    with pytest.raises(AttributeError, match=r"'Data'.*'foo'"):
        d.foo
    with pytest.raises(AttributeError, match=r"'foo'.*Data"):
        d.foo = 1
    with pytest.raises(AttributeError, match=r"Data.*'bar'"):
        Data(obs=torch.zeros(3), bar=1, batch_size=[3])
    with pytest.raises(TypeError, match=r"missing.*'obs'"):
        Data(batch_size=[3])
    with pytest.raises(TypeError, match="multiple values"):
        Data(torch.zeros(3), obs=torch.zeros(3), batch_size=[3])
    assert d.obs.shape == torch.Size([3, 2])  # nothing half-written


def test_assignment():
    d = make()
    d.obs = torch.ones(3, 5)
    assert d.obs.shape == torch.Size([3, 5])
    d.label = "y"
    assert d.label == "y"
    d.label = None
    assert d.label is None and "label" not in d._tensordict.keys()
    d["label"] = "z"
    assert d["label"] == "z" and d.get("label") == "z"
    d.batch_size = [3]
    assert d.batch_size == torch.Size([3])


def test_subclass_style_and_user_init():
    assert Pair.__mro__[1] is TensorClass and type(Pair) is type
    p = Pair(x=torch.zeros(3), batch_size=[3])
    assert p.sub is None and p.meta is None
    w = WithInit(2.0, batch_size=[4])
    assert w.a.tolist() == [2.0] * 4


# ---------------------------------------------------------------- container behaviour
def test_indexing():
    d = Data(obs=torch.arange(8.0).view(4, 2), label="x", batch_size=[4])
    assert type(d[0]) is Data and d[0].obs.tolist() == [0.0, 1.0] and d[0].label == "x"
    assert d[1:3].batch_size == torch.Size([2]) and d[1:3].obs[0].tolist() == [2.0, 3.0]
    assert d[torch.tensor([3, 0])].obs[:, 0].tolist() == [6.0, 0.0]
    assert d[torch.tensor([True, False, True, False])].batch_size == torch.Size([2])
    assert [e.obs[0].item() for e in d] == [0.0, 2.0, 4.0, 6.0]
    assert len(d) == 4
    d[0] = Data(obs=torch.full((2,), -1.0), batch_size=[])
    assert d.obs[0].tolist() == [-1.0, -1.0]


def test_shape_ops():
    d = Data(obs=torch.zeros(2, 3, 4), label="x", batch_size=[2, 3])
    assert type(d.reshape(6)) is Data and d.reshape(6).batch_size == torch.Size([6])
    assert d.reshape(6).obs.shape == torch.Size([6, 4]) and d.reshape(6).label == "x"
    assert d.permute(1, 0).obs.shape == torch.Size([3, 2, 4])
    assert d.unsqueeze(0).batch_size == torch.Size([1, 2, 3])
    assert d.flatten().batch_size == torch.Size([6])
    parts = d.unbind(1)
    assert len(parts) == 3 and all(type(p) is Data and p.batch_size == torch.Size([2]) for p in parts)
    assert [p.batch_size[0] for p in d.split(1, 0)] == [1, 1]
    assert torch.unbind(d, 0)[0].batch_size == torch.Size([3])


def test_stack_and_cat():
    a, b = make(label="x"), make(label="y", fill=1.0)
    s = torch.stack([a, b])
    assert type(s) is Data and s.batch_size == torch.Size([2, 3])
    assert s.obs[:, 0, 0].tolist() == [0.0, 1.0]
    assert s.label == [["x"] * 3, ["y"] * 3]
    assert s[0].label == "x" and s[1].label == "y"
    s1 = torch.stack([a, b], 1)
    assert s1.batch_size == torch.Size([3, 2]) and s1[:, 1].label == "y"
    c = torch.cat([a, b])
    assert type(c) is Data and c.batch_size == torch.Size([6]) and c.obs[:, 0].tolist() == [0.0] * 3 + [1.0] * 3
    out = torch.stack([a, b]).clone()
    res = torch.stack([b, a], out=out)
    assert res is out and out.obs[:, 0, 0].tolist() == [1.0, 0.0]


def test_apply_to_clone_copy():
    d = make()
    inc = d.apply(lambda x: x + 1)
    assert type(inc) is Data and inc.obs.sum().item() == 6.0 and inc.label == "x"
    assert d.obs.sum().item() == 0.0
    d.apply_(lambda x: x + 2)
    assert d.obs.sum().item() == 12.0
    assert (d + 1).obs[0, 0].item() == 3.0 and type(d * 2) is Data
    d64 = d.to(torch.float64)
    assert type(d64) is Data and d64.obs.dtype == torch.float64 and d64.label == "x"
    assert d.to("cpu").device == torch.device("cpu")
    cl = d.clone()
    cl.obs += 1
    assert d.obs[0, 0].item() == 2.0 and cl.label == "x"
    cp = d.copy()
    assert cp.obs is d.obs
    assert copy.deepcopy(d).obs is not d.obs
    assert d.zero_() is d and d.obs.sum().item() == 0.0


def test_equality():
    a, b = make(label="x"), make(label="y")
    eq = a == b
    assert type(eq) is Data
    assert eq.obs.all() and eq.label.tolist() == [False] * 3
    assert (a == a.clone()).all()
    assert not (a == b).all()
    assert (a != b).label.all()


def test_from_to_tensordict():
    td = TensorDict({"obs": torch.ones(2, 1), "label": "t"}, batch_size=[2])
    d = Data.from_tensordict(td)
    assert d.label == "t" and d.obs is td["obs"]
    plain = d.to_tensordict()
    assert type(plain) is TensorDict and plain["label"] == "t" and plain["obs"] is not d.obs
    with pytest.raises(KeyError, match="not fields"):
        Data.from_tensordict(TensorDict({"other": torch.zeros(2)}, [2]))


def test_nested_tensorclass_and_tensordict():
    inner = make()
    p = Pair(x=torch.zeros(3), sub=inner, meta=TensorDict({"m": torch.ones(3)}, [3]), batch_size=[3])
    assert type(p.sub) is Data and p.sub.label == "x"
    assert type(p[0].sub) is Data and p[0].sub.obs.shape == torch.Size([2])
    assert p[1:].meta.batch_size == torch.Size([2])
    stacked = torch.stack([p, p])
    assert type(stacked.sub) is Data and stacked.sub.obs.shape == torch.Size([2, 3, 2])
    plain = p.to_tensordict()
    assert type(plain["sub"]) is TensorDict and plain["sub", "label"] == "x"
    assert type(p.apply(lambda v: v + 1).sub) is Data
    with pytest.raises(RuntimeError, match=r"Pair\.sub"):
        p.sub = make(n=4)


def test_inside_tensordict():
    d = make(n=4)
    td = TensorDict({"d": d, "r": torch.zeros(4)}, batch_size=[4])
    assert td["d"] is d
    assert type(td[0]["d"]) is Data and td[0]["d"].obs.shape == torch.Size([2])
    assert td[1:3]["d"].batch_size == torch.Size([2])
    assert td[torch.tensor([0, 3])]["d"].label == "x"
    assert set(td.keys(True, True)) == {("d", "obs"), "r"}  # tensordict 0.14: non-tensor fields are no leaves
    assert set(td.keys(True, True, is_leaf_nontensor)) == {("d", "obs"), ("d", "label"), "r"}
    assert td["d", "obs"].shape == torch.Size([4, 2])
    assert td["d", "label"] == "x" and type(td.get(("d", "label"))) is NonTensorData
    td["d", "obs"] = torch.ones(4, 2)
    assert d.obs.sum().item() == 8.0
    ts = torch.stack([td, td.clone()])
    assert type(ts["d"]) is Data and ts["d"].batch_size == torch.Size([2, 4])
    assert type(td.apply(lambda v: v * 2)["d"]) is Data and td.apply(lambda v: v * 2)["d"].obs[0, 0].item() == 2.0
    assert type(td.clone()["d"]) is Data and td.clone()["d"].obs is not d.obs
    assert type(td.reshape(2, 2)["d"]) is Data and td.reshape(2, 2)["d"].batch_size == torch.Size([2, 2])
    assert [type(t["d"]) for t in td.unbind(0)] == [Data] * 4
    assert type(td.to(torch.float64)["d"]) is Data
    td.lock_()
    assert d.is_locked
    td.unlock_()
    assert type(torch.cat([td, td])["d"]) is Data


def test_indexed_write_through_tensordict():
    store = TensorDict({"d": make(n=5, label="init"), "r": torch.zeros(5)}, [5])
    batch = torch.stack(
        [
            TensorDict({"d": Data(obs=torch.ones(2), label=f"L{i}", batch_size=[]), "r": torch.ones(())}, [])
            for i in range(2)
        ]
    )
    store[torch.tensor([1, 3])] = batch
    assert store["d"].label == ["init", "L0", "init", "L1", "init"]
    assert store["d"].obs[:, 0].tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]
    assert store["r"].tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]


def test_subclassing_and_reserved_names():
    class More(Data):
        extra: torch.Tensor | None = None

    m = More(obs=torch.zeros(2), extra=torch.ones(2), batch_size=[2])
    assert More._tc_fields == ("obs", "label", "extra")
    assert type(m[0]) is More and m[0].extra.item() == 1.0

    class Stats(TensorClass):
        sum: torch.Tensor  # math method names may be shadowed by fields

    assert Stats(sum=torch.ones(2), batch_size=[2]).sum.tolist() == [1.0, 1.0]
    with pytest.raises(AttributeError, match="batch_size"):

        class Bad(TensorClass):
            batch_size: torch.Tensor


def test_pytree_and_vmap():
    from torch.utils._pytree import tree_map

    d = Data(obs=torch.ones(3, 2), label="x", batch_size=[3])
    doubled = tree_map(lambda t: t * 2, d)
    assert type(doubled) is Data and doubled.obs.sum().item() == 12.0 and doubled.label == "x"
    assert torch.vmap(lambda e: e.obs.sum())(d).tolist() == [2.0, 2.0, 2.0]


def test_repr():
    text = repr(make(n=2))
    assert text.startswith("Data(\n    obs=Tensor(shape=torch.Size([2, 2])")
    assert "label=NonTensorData(data=x" in text and "batch_size=torch.Size([2])" in text
    assert "label=None" in repr(Data(obs=torch.zeros(1), batch_size=[1]))


def test_pickle():
    d = make()
    back = pickle.loads(pickle.dumps(d))
    assert type(back) is Data and back.label == "x" and torch.equal(back.obs, d.obs)


@pytest.mark.skipif(
    importlib.util.find_spec("tdict.persistence") is None, reason="tdict.persistence (memmap) is not available yet"
)
def test_memmap_roundtrip(tmp_path):
    d = Data(obs=torch.arange(6.0).view(3, 2), label="x", batch_size=[3])
    assert d.memmap_(tmp_path / "a") is d
    loaded = Data.load_memmap(tmp_path / "a")
    assert type(loaded) is Data and loaded.obs.tolist() == d.obs.tolist() and loaded.label == "x"
    copy_ = make().memmap(tmp_path / "b")
    assert type(copy_) is Data


def test_save_writes_the_folder_and_refuses_no_prefix(tmp_path):
    d = Data(obs=torch.arange(6.0).view(3, 2), label="x", batch_size=[3])
    assert d.save(tmp_path / "s") is d and not d.is_memmap()
    assert Data.load_memmap(tmp_path / "s").obs.tolist() == d.obs.tolist()
    with pytest.raises(TypeError, match="save needs a prefix"):
        d.save(None)  # an anonymous copy would be written and lost


@given(
    st.lists(st.tuples(st.text(max_size=5), st.floats(-10, 10, allow_nan=False)), min_size=1, max_size=6),
    st.integers(0, 2),
)
def test_property_stack_index_roundtrip(items, n_extra):
    # stacking instances then indexing gives each instance's fields back
    batch = [n_extra] if n_extra else []
    elems = [Data(obs=torch.full(batch + [2], v), label=lab, batch_size=batch) for lab, v in items]
    s = torch.stack(elems)
    assert s.batch_size == torch.Size([len(items)] + batch)
    for i, (lab, v) in enumerate(items):
        assert s[i].label == lab
        assert torch.equal(s[i].obs, elems[i].obs)
    assert [e.label for e in s.unbind(0)] == [lab for lab, _ in items]
    back = torch.cat([s[i : i + 1] for i in range(len(items))])
    assert torch.equal(back.obs, s.obs)


# ---------------------------------------------------------------- options (details in test_tensorclass_options.py)
def test_decorator_options_are_applied_or_refused():
    @tensorclass(nocast=True)
    class Raw:
        n: int

    assert Raw(n=2).n == 2 and type(Raw(n=2).n) is int and Raw._nocast
    with pytest.raises(TypeError, match="unexpected keyword argument 'nocats'"):
        tensorclass(nocats=True)  # pyright: ignore[reportCallIssue]  (a typo, once silently ignored)
    with pytest.raises(TypeError, match="decorates a class, got int"):
        tensorclass(3)  # type: ignore[arg-type]
    assert Data._nocast is False and Data._frozen is False  # the plain decorator: every option off


def test_own_setattr_sees_constructor_values():
    # as in tensordict: a class's own __setattr__ also runs for the constructor's field values
    seen = []

    class Logged(TensorClass, nocast=True):
        a: int
        b: int = 0

        def __setattr__(self, name, value):
            seen.append(name)
            super().__setattr__(name, value + 1 if name == "b" else value)

    obj = Logged(a=1, b=1)
    assert seen == ["a", "b"] and (obj.a, obj.b) == (1, 2)
    obj.a = 5
    assert seen == ["a", "b", "a"] and obj.a == 5


def test_delete_field():
    # tdict: a deleted field reads None, like an unset one (tensordict 0.14 raises a KeyError on that read)
    d = make()
    del d.label
    assert d.label is None and "label" not in d._tensordict.keys()
    assert Data(obs=torch.zeros(1), label="y", batch_size=[1]).label == "y"


def test_memmap_of_a_tensorclass_defined_inside_a_function(tmp_path):
    """Saving never pickles: loading finds the class by its path, here in the live local definitions."""
    from tdict import MemmapLoadError

    def define():
        @tensorclass
        class Local:
            obs: torch.Tensor
            text: str

        return Local

    local = define()
    data = local(obs=torch.arange(6.0).reshape(3, 2), text="hello", batch_size=[3])
    TensorDict(inner=data, batch_size=[3]).memmap(tmp_path / "nested")
    data.memmap(tmp_path / "root")
    root = TensorDict.load_memmap(tmp_path / "root")
    nested = TensorDict.load_memmap(tmp_path / "nested")["inner"]
    for loaded in (root, nested):
        assert type(loaded) is local and loaded.text == "hello"
        torch.testing.assert_close(loaded.obs, data.obs)
    redefined = define()  # the latest definition of that path is the one loading finds
    assert type(TensorDict.load_memmap(tmp_path / "root")) is redefined
    from tdict.tensorclass import _LOCAL_CLASSES

    del _LOCAL_CLASSES[f"{redefined.__module__}:{redefined.__qualname__}"]  # as if never defined in this process
    with pytest.raises(MemmapLoadError, match=r"defined inside a function, and no live class of that name"):
        TensorDict.load_memmap(tmp_path / "root")


# ---------------------------------------------------------------- TensorDict's constructors and keywords on a class


class _Pair(TensorClass):
    foo: Any
    bar: Any


class _PairChild(_Pair):
    pass


def test_constructors_return_the_class():
    out = _Pair.from_list([{"foo": 1, "bar": 2.0}, {"foo": 3, "bar": 4.0}])
    assert type(out) is _Pair and out.batch_size == (2,)
    assert out.foo.tolist() == [1, 3] and out.bar.tolist() == [2.0, 4.0]
    assert type(_PairChild.from_list([{"foo": 1, "bar": 2}])) is _PairChild
    keys = _Pair.fromkeys(["foo", "bar"], 0)
    assert type(keys) is _Pair and keys.foo.item() == 0 and keys.batch_size == ()
    pair = _Pair(foo=torch.arange(3.0), bar=torch.ones(3), batch_size=[3])
    stacked = _Pair.stack([pair, pair])
    assert type(stacked) is _Pair and stacked.batch_size == (2, 3)
    assert torch.equal(stacked.foo, torch.stack([pair.foo, pair.foo]))
    assert type(_Pair.cat([pair, pair])) is _Pair and _Pair.cat([pair, pair]).batch_size == (6,)
    lazy = _Pair.lazy_stack([pair, pair])
    assert type(lazy) is _Pair and type(lazy._tensordict).__name__ == "LazyStackedTensorDict"
    assert type(_Pair.maybe_dense_stack([pair, pair])) is _Pair
    back = _Pair.from_dict(pair.to_dict(), auto_batch_size=True)
    assert type(back) is _Pair and back.batch_size == (3,) and torch.equal(back.foo, pair.foo)


def test_from_list_checks_the_batch_size():
    with pytest.raises(ValueError, match=r"batch_size \[3\] does not start with the length of the list \(2\)"):
        TensorDict.from_list([{"a": 1}, {"a": 2}], batch_size=[3])
    lazy = TensorDict.from_list([{"a": torch.zeros(2)}, {"a": torch.zeros(3)}])
    assert type(lazy).__name__ == "LazyStackedTensorDict"  # shapes differ: stacked lazily
    with pytest.raises(ValueError, match="non-empty list"):
        TensorDict.from_list([])


def test_update_takes_fields_as_keywords():
    pair = _Pair(foo=torch.zeros(3), bar=torch.zeros(3), batch_size=[3])
    assert pair.update() is pair and pair.update_() is pair
    pair.update(foo=torch.ones(3))
    pair.update_(bar=torch.full((3,), 2.0))
    assert pair.foo.tolist() == [1.0] * 3 and pair.bar.tolist() == [2.0] * 3
    other = _Pair(foo=torch.full((3,), 5.0), bar=torch.full((3,), 7.0), batch_size=[3])
    pair.update(other, bar=torch.full((3,), 9.0))  # the keywords win over the source
    assert pair.foo.tolist() == [5.0] * 3 and pair.bar.tolist() == [9.0] * 3


def test_select_as_tensordict():
    pair = _Pair(foo=torch.zeros(2), bar="label", batch_size=[2])
    kept = pair.select("foo")
    assert type(kept) is _Pair and kept.bar is None
    plain = pair.select("foo", as_tensordict=True)
    assert type(plain) is TensorDict and list(plain.keys()) == ["foo"]
    assert type(TensorDict({"a": 1}).select("a", as_tensordict=True)) is TensorDict


def test_property_setters_classvars_and_the_device():
    @tensorclass
    class WithProperty:
        a: torch.Tensor
        _c: Any = None
        scale: ClassVar[float] = 0.5

        @property
        def c(self):
            return self._c

        @c.setter
        def c(self, value):
            self._c = value

    data = WithProperty(a=torch.ones(()))
    data.c = "1"
    assert data.c == "1" and data._tensordict["_c"] == "1"
    assert WithProperty.__expected_keys__ == {"a", "_c"}  # a ClassVar is not a field
    with pytest.raises(RuntimeError, match="device cannot be set using tensorclass.device = device"):
        data.device = torch.device("cpu")
    with pytest.raises(AttributeError, match="it is not a field"):
        data.other = 1


def test_from_dataclass_options():
    @dataclasses.dataclass
    class Record:
        a: int = 0
        b: Any = 0

    autocast = from_dataclass(Record, autocast=True)
    nocast = from_dataclass(Record, nocast=True)
    plain = from_dataclass(Record)
    assert autocast._autocast and nocast._nocast and not plain._nocast
    assert from_dataclass(Record, nocast=True) is nocast  # built once per options
    assert isinstance(nocast(a=0, b=0).a, int) and isinstance(plain(a=0, b=0).a, torch.Tensor)
    frozen = from_dataclass(Record(a=1, b=2), frozen=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.a = torch.tensor(3)
    with pytest.raises(TypeError, match="autocast is exclusive with nocast"):
        from_dataclass(Record, autocast=True, nocast=True)

    @dataclasses.dataclass
    class Mutable:
        x: torch.Tensor

    same = from_dataclass(Mutable, inplace=True)
    assert same is Mutable and is_tensorclass(Mutable)
    assert Mutable(x=torch.zeros(2), batch_size=[2]).batch_size == (2,)


def test_lazy_stacks_of_one_class_keep_the_class():
    @tensorclass
    class Node:
        x: torch.Tensor
        tag: str
        child: Any = None

    def node(width):
        leaf = Node(x=torch.ones(3, width), tag="leaf", batch_size=[3])
        return Node(x=torch.zeros(3, width), tag="root", child=leaf, batch_size=[3])

    stacked = lazy_stack([node(4), node(5)])
    assert type(stacked) is Node and type(stacked._tensordict) is LazyStackedTensorDict
    assert type(stacked.child) is Node and type(stacked.child._tensordict) is LazyStackedTensorDict
    assert stacked[1].x.shape == (3, 5) and stacked[0].child.x.shape == (3, 4)
    assert stacked[1].tag == "root" and stacked[0].child.tag == "leaf"
    dense = _Pair(foo=torch.zeros(1, 2), bar=torch.ones(1, 2), batch_size=[1, 2])
    lazy = dense.to_lazystack(1)
    assert type(lazy) is _Pair and type(lazy._tensordict) is LazyStackedTensorDict
    assert torch.equal(lazy.foo, dense.foo)


def test_collection_attributes_come_back_as_the_class():
    @tensorclass
    class Model:
        w: torch.Tensor
        name: str
        b: torch.Tensor | None = None

    m = Model(w=torch.randn(3, requires_grad=True), name="m", b=torch.randn(2))
    (m + 1).sum().w.backward()
    assert type(m.grad) is Model and m.grad.w.tolist() == [1.0] * 3 and m.grad.b is None
    assert type(m.data) is Model and not m.data.w.requires_grad


def test_indexed_writes_reach_through_nested_tensor_classes():
    @tensorclass
    class Inner:
        x: torch.Tensor
        tag: str

    td = TensorDict({"a": torch.zeros(4, 3), "inner": Inner(x=torch.zeros(4, 3), tag="s", batch_size=[4, 3])}, [4, 3])
    part = td[:2].clone().apply(lambda v: v + 1)
    td[:2] = part  # the value holds the tensor class too
    assert td["inner"].x[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0]
    td[2:] = part.to_dict()  # a plain dict: the nested class arrives as a TensorDict
    assert td["inner"].x.sum().item() == 12.0 and td["a"].sum().item() == 12.0
    assert type(td["inner"]) is Inner


def test_reflected_logic_ops_keep_the_class():
    @tensorclass
    class Mask:
        x: torch.Tensor

    m = Mask(x=torch.tensor([True, False]), batch_size=[2])
    assert type(True ^ m) is Mask and (True ^ m).x.tolist() == [False, True]
    assert (False | m).x.tolist() == [True, False] and (True & m).x.tolist() == [True, False]
    with pytest.raises(TypeError, match="no implementation found for stacking tensors with tensor collections"):
        torch.stack([m, torch.zeros(2)])


def test_a_nested_field_with_fewer_batch_dims_takes_the_instances():
    @tensorclass(autocast=True)
    class Tree:
        x: torch.Tensor
        child: Any = None

    tree = Tree(x=torch.zeros(10), child=Tree(x=torch.ones(10), batch_size=[]), batch_size=[10])
    assert type(tree.child) is Tree and tree.child.batch_size == (10,)
    leaf = Tree(x=torch.ones(10, 2), batch_size=[])
    tree.child = leaf
    assert tree.child.batch_size == (10,) and leaf.batch_size == (10,)  # given ours in place
    with pytest.raises(RuntimeError, match="batch dimension mismatch"):
        tree.child = Tree(x=torch.ones(3), batch_size=[])
