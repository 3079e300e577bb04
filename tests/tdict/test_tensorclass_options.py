"""Tensor-class options (nocast, autocast, frozen, shadow, tensor_only), as in tensordict 0.14.

Expected values were observed with the real tensordict 0.14.3.
"""
# Fields are set with values of other types than annotated on purpose (that is what casting is about).
# pyright: reportArgumentType=false, reportAssignmentType=false, reportAttributeAccessIssue=false

from __future__ import annotations

import dataclasses
from collections import UserDict
from types import MappingProxyType
from typing import Any, Optional

import numpy as np
import pytest
import torch

from tdict import NonTensorData, TensorClass, TensorDict, tensorclass
from tdict.tensorclass import is_tensorclass

OPTIONS = ["autocast", "frozen", "nocast", "shadow", "tensor_only"]


# ---------------------------------------------------------------- the accepted forms
def test_class_getitem_forms():
    base = TensorClass["nocast"]
    assert isinstance(base, type) and issubclass(base, TensorClass) and base.__name__ == "TensorClass_nocast"
    assert base._nocast and not base._autocast and not TensorClass._nocast
    assert TensorClass[("nocast",)] is base  # a tuple of one: same options, same base
    both = TensorClass["nocast", "frozen"]
    assert both.__name__ == "TensorClass_nocast_frozen" and both._nocast and both._frozen

    class Foo(TensorClass["nocast", "frozen"]):
        x: int

    foo = Foo(x=1)
    assert type(foo) is Foo and isinstance(foo, TensorClass) and is_tensorclass(Foo)
    assert Foo._nocast and Foo._frozen and not Foo._autocast and not Foo._shadow and not Foo._tensor_only
    assert foo.x == 1 and type(foo.x) is int and foo.is_locked
    assert [f.name for f in dataclasses.fields(Foo)] == ["x"]


@pytest.mark.parametrize("option", OPTIONS)
def test_each_option_three_ways(option):
    class ByItem(TensorClass[option]):
        x: torch.Tensor

    class ByKeyword(TensorClass, **{option: True}):
        x: torch.Tensor

    @tensorclass(**{option: True})
    class ByDecorator:
        x: torch.Tensor

    for cls in (ByItem, ByKeyword, ByDecorator):
        assert {o: getattr(cls, "_" + o) for o in OPTIONS} == {o: o == option for o in OPTIONS}
        obj = cls(x=torch.zeros(2), batch_size=[2])
        assert type(obj) is cls and torch.equal(obj.x, torch.zeros(2))


def test_options_are_inherited():
    class Base(TensorClass["autocast"]):
        x: int

    class Sub(Base, shadow=True):  # autocast inherited, shadow added
        y: float

    assert Sub._autocast and Sub._shadow and not Base._shadow
    s = Sub(x=torch.ones(()), y=2)
    assert (s.x, s.y) == (1, 2.0) and type(s.x) is int and type(s.y) is float

    class Plain(TensorClass):
        x: int

    assert not Plain._nocast and not Plain._autocast


def test_bad_options():
    with pytest.raises(TypeError, match=r"bogus.*'autocast', 'frozen', 'nocast', 'shadow', 'tensor_only'"):
        TensorClass["bogus"]
    with pytest.raises(TypeError, match=r"\[\['nocast'\]\]"):
        TensorClass[["nocast"]]  # type: ignore[index]
    with pytest.raises(TypeError, match="autocast is exclusive with nocast"):
        TensorClass["nocast", "autocast"]
    with pytest.raises(TypeError, match="tensor_only and autocast or nocast are exclusive"):
        TensorClass["tensor_only", "nocast"]
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['bogus'\]"):

        class Bad(TensorClass, bogus=True):  # type: ignore[call-arg]
            x: int

    with pytest.raises(TypeError, match="bogus"):
        tensorclass(bogus=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="autocast is exclusive with nocast"):
        tensorclass(autocast=True, nocast=True)
    with pytest.raises(TypeError, match="tensor_only and autocast or nocast"):
        tensorclass(tensor_only=True, autocast=True)
    with pytest.raises(TypeError, match=r"'frozen' expects a bool, got int"):
        tensorclass(frozen=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="autocast is exclusive with nocast"):

        class Both(TensorClass["nocast"], autocast=True):
            x: int


# ---------------------------------------------------------------- nocast
@pytest.mark.parametrize(
    ("value", "default_type", "nocast_type"),
    [
        (1, torch.Tensor, int),
        (1.5, torch.Tensor, float),
        (True, torch.Tensor, bool),
        (np.array([1, 2]), torch.Tensor, np.ndarray),
        ("s", str, str),
        ([1, 2], torch.Tensor, torch.Tensor),  # lists are still cast
    ],
)
def test_nocast(value, default_type, nocast_type):
    @tensorclass
    class Cast:
        a: Any

    @tensorclass(nocast=True)
    class NoCast:
        a: Any

    assert type(Cast(value).a) is default_type
    kept = NoCast(value)
    assert type(kept.a) is nocast_type
    if nocast_type is not torch.Tensor:
        assert type(kept._tensordict.get("a")) is NonTensorData


def test_nocast_set_and_batch():
    class Foo(TensorClass["nocast"]):
        x: int
        y: Any = None

    foo = Foo(x=1, batch_size=[3])
    assert foo.get("x") == 1 and foo._tensordict.get("x").batch_size == torch.Size([3])
    foo.x = 2.0
    assert foo.x == 2.0 and type(foo.x) is float
    foo.set("y", 7)
    assert foo.y == 7 and type(foo.y) is int
    foo.x = torch.ones(3)  # tensors stay tensors
    assert type(foo.x) is torch.Tensor
    assert foo[0].x.shape == torch.Size([]) and foo[1:].y == 7


# ---------------------------------------------------------------- autocast
class Inner(TensorClass):
    a: torch.Tensor


class AutoAll(TensorClass["autocast"]):
    t: torch.Tensor = None
    i: int = None
    f: float = None
    s: str = None
    n: np.ndarray = None
    b: bool = None
    a: Any = None
    o: Optional[int] = None
    td: TensorDict = None
    tc: Inner = None


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("t", 1, torch.tensor(1)),
        ("t", 1.5, torch.tensor(1.5)),
        ("t", np.array([1, 2]), torch.tensor([1, 2])),
        ("t", [1, 2], torch.tensor([1, 2])),
        ("t", True, torch.tensor(True)),
        ("i", 1.7, 1),
        ("i", torch.ones(()), 1),
        ("i", "3", 3),
        ("f", 1, 1.0),
        ("s", 1, "1"),
        ("b", 1, True),
        ("a", 1, torch.tensor(1)),
        ("a", 1.5, torch.tensor(1.5)),
        ("a", "s", "s"),
        ("a", [1, 2], [1, 2]),  # kept as a list (no annotation to cast to)
        ("a", {"x": 1}, {"x": 1}),
        ("o", 1, torch.tensor(1)),  # Optional[...] is not a class: no casting
        ("o", "s", "s"),
    ],
)
def test_autocast_values(field, value, expected):
    got = getattr(AutoAll(**{field: value}), field)
    assert type(got) is type(expected)
    if isinstance(expected, torch.Tensor):
        assert got.dtype == expected.dtype and torch.equal(got, expected)
    else:
        assert got == expected


def test_autocast_arrays_and_collections():
    n = AutoAll(n=[1, 2]).n
    assert type(n) is np.ndarray and n.tolist() == [1, 2]
    td = AutoAll(td={"x": torch.zeros(2)}).td
    assert type(td) is TensorDict and td.batch_size == torch.Size([]) and td["x"].shape == torch.Size([2])
    tc = AutoAll(tc={"a": torch.zeros(2)}).tc
    assert type(tc) is Inner and tc.a.shape == torch.Size([2])
    inner = Inner(a=torch.zeros(1))
    assert AutoAll(tc=inner).tc is inner
    assert type(AutoAll(tc=5).tc) is Inner and AutoAll(tc=5).tc.a.tolist() == 5  # the class called on the value
    assert type(AutoAll(i=1)._tensordict.get("i")) is NonTensorData


def test_autocast_on_set_and_errors():
    obj = AutoAll(i=1)
    obj.i = 2.5
    assert obj.i == 2 and type(obj.i) is int
    obj.set("i", 3.5)
    assert obj.i == 3
    with pytest.raises(TypeError, match=r"AutoAll\.t.*str.*Tensor"):
        obj.t = "str"
    with pytest.raises(ValueError, match=r"AutoAll\.i.*'x'.*int"):
        obj.i = "x"
    with pytest.raises(TypeError, match=r"AutoAll\.i.*\[1\].*int"):
        obj.i = [1]
    assert obj.i == 3 and obj.t is None  # unchanged


class AutoNested(TensorClass["autocast"]):
    tensor: torch.Tensor
    non_tensor: str
    td: TensorDict
    tc: Optional[AutoNested] = None
    self_ref: AutoNested = None


def test_autocast_nested_dicts():
    obj = AutoNested(
        tensor=torch.zeros(()),
        non_tensor="x",
        td={"a": 0.0},
        self_ref={"tensor": torch.zeros(()), "non_tensor": "y", "td": {"b": 0.0}},
        tc={"tensor": 0},
    )
    assert type(obj.td) is TensorDict and type(obj.non_tensor) is str
    assert type(obj.self_ref) is AutoNested and type(obj.self_ref.td) is TensorDict
    assert obj.self_ref.non_tensor == "y"
    assert type(obj.tc) is dict  # Optional[...] is not cast


def test_autocast_local_classes():
    class LocalInner(TensorClass):
        a: torch.Tensor

    @tensorclass(autocast=True)
    class Local:
        inner: LocalInner  # a string annotation (future import) naming a local class
        me: Local = None

    obj = Local(inner={"a": torch.ones(1)}, me={"inner": {"a": torch.zeros(1)}})
    assert type(obj.inner) is LocalInner and type(obj.me) is Local and type(obj.me.inner) is LocalInner


# ---------------------------------------------------------------- frozen
class Frozen(TensorClass["frozen"]):
    x: torch.Tensor
    s: str = "a"


def test_frozen():
    f = Frozen(x=torch.zeros(3), batch_size=[3])
    assert f.is_locked and Frozen._frozen
    for name, value in (("x", torch.ones(3)), ("s", "b"), ("batch_size", [3]), ("other", 1)):
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{name}'"):
            setattr(f, name, value)
    with pytest.raises(RuntimeError, match="locked"):
        f.set("x", torch.ones(3))
    f[0] = Frozen(x=torch.ones(()), batch_size=[])  # in-place writes are allowed, as in tensordict
    assert f.x.tolist() == [1.0, 0.0, 0.0] and f.s == "a"
    assert f.clone().is_locked is False and type(f.clone()) is Frozen
    assert f[0].is_locked is False


def test_frozen_hierarchy():
    class Sub(Frozen):
        y: str = "0"

    assert Sub._frozen and Sub(x=torch.zeros(3), batch_size=[3]).is_locked

    @tensorclass(frozen=True)
    class DecFrozen:
        x: torch.Tensor

    assert DecFrozen(x=torch.zeros(1), batch_size=[1]).is_locked
    with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):

        @tensorclass
        class DecSub(DecFrozen):
            y: str = "0"

    class NotFrozen(TensorClass):
        x: int

    with pytest.raises(TypeError, match="cannot inherit frozen dataclass from a non-frozen one"):

        class FrozenSub(NotFrozen, frozen=True):
            y: int


def test_frozen_with_user_init():
    @tensorclass(frozen=True)
    class Built:
        a: torch.Tensor

        def __init__(self, value: float):
            self._tensordict.set("a", torch.full(self.batch_size, value))

    b = Built(2.0, batch_size=[2])
    assert b.is_locked and b.a.tolist() == [2.0, 2.0]


# ---------------------------------------------------------------- shadow
def test_no_shadow():
    for name in ("batch_size", "names", "device", "get", "to"):
        with pytest.raises(AttributeError, match=f"'{name}'.*shadow=True"):
            tensorclass(type("MyClass", (), {"__annotations__": {"x": str, name: Any}}))
    tensorclass(type("WithData", (), {"__annotations__": {"data": Any}}))  # allowed, as in tensordict


def test_shadow_values():
    @tensorclass(shadow=True)
    class MyClass:
        batch_size: Any
        names: Any
        device: Any

    class MyClsSubcls(MyClass): ...

    class MyClassSbcls(TensorClass, shadow=True):
        batch_size: Any
        names: Any
        device: Any

    class MyClassIdx(TensorClass["shadow"]):
        batch_size: Any
        names: Any
        device: Any

    for cls in (MyClass, MyClsSubcls, MyClassSbcls, MyClassIdx):
        c = cls(batch_size=0, names=0, device=0)
        assert c.batch_size == 0 and c.names == 0 and c.device == 0
        assert c._tensordict.batch_size == torch.Size([])
        c.batch_size = 1
        assert c.batch_size == 1
    assert MyClass(1, 2, 3).names == 2
    with pytest.raises(TypeError, match=r"missing.*'batch_size'"):
        MyClass(names=0, device=0)
    assert repr(MyClass(batch_size=0, names=0, device=0)) == (
        "MyClass(\n"
        "    batch_size=Tensor(shape=torch.Size([]), device=cpu, dtype=torch.int64, is_shared=False),\n"
        "    names=Tensor(shape=torch.Size([]), device=cpu, dtype=torch.int64, is_shared=False),\n"
        "    device=Tensor(shape=torch.Size([]), device=cpu, dtype=torch.int64, is_shared=False),\n"
        "    shape=torch.Size([]),\n"
        "    is_shared=False)"
    )


def test_shadow_method_name():
    class G(TensorClass["shadow"]):
        get: torch.Tensor
        x: torch.Tensor
        batch_size: torch.Tensor = None

    g = G(get=torch.ones(2), x=torch.zeros(2))
    assert torch.equal(g.get, torch.ones(2)) and g.batch_size is None
    assert G._shadow and not G._frozen


# ---------------------------------------------------------------- tensor_only
class TensorOnly(TensorClass["tensor_only"]):
    x: torch.Tensor
    y: Optional[torch.Tensor] = None
    td: TensorDict = None


def test_tensor_only():
    assert TensorOnly._tensor_only and not TensorOnly._nocast
    assert torch.equal(TensorOnly(x=1).x, torch.tensor(1))
    assert torch.equal(TensorOnly(x=[1, 2]).x, torch.tensor([1, 2]))
    assert TensorOnly(x=1).y is None
    td = TensorOnly(x=1, td={"a": 1}).td
    assert type(td) is TensorDict and td["a"].item() == 1
    stored = TensorOnly(x="s").x  # the stored entry comes back as it is
    assert type(stored) is NonTensorData and stored.data == "s"
    t = TensorOnly(x=1)
    t.y = torch.ones(())
    t.y = None
    assert t.y is None
    with pytest.raises(AttributeError, match="foo"):
        t.foo  # noqa: B018
    assert torch.stack([TensorOnly(x=torch.ones(2), batch_size=[2])] * 2).x.shape == torch.Size([2, 2])


@pytest.mark.parametrize("annotation", [Any, str, int, "torch.Tensor | str"])
def test_tensor_only_wrong_annotation(annotation):
    with pytest.raises(TypeError, match="tensor_only requires types to be Tensor, Tensor-subtrypes or None.*'x'"):
        type("Bad", (TensorClass["tensor_only"],), {"__annotations__": {"x": annotation}, "__module__": __name__})
    with pytest.raises(TypeError, match="tensor_only requires types"):
        tensorclass(tensor_only=True)(type("Bad", (), {"__annotations__": {"x": annotation}, "__module__": __name__}))


def test_tensor_only_accepted_annotations():
    class Ok(TensorClass["tensor_only"]):
        a: torch.Tensor
        b: TensorOnly
        c: TensorDict
        d: torch.Tensor | None = None
        e: Optional[TensorDict] = None

    assert Ok._tensor_only and Ok._tc_fields == ("a", "b", "c", "d", "e")
    assert Ok._tc_mapping_fields == {"c", "e"}
    ok = Ok(a=1, b=TensorOnly(x=2), c=UserDict({"n": UserDict({"t": torch.ones(())})}), e=MappingProxyType({}))
    assert type(ok.c) is TensorDict and ok.c["n", "t"].item() == 1.0 and type(ok.e) is TensorDict
    ok.c = UserDict({"t": torch.zeros(())})
    assert type(ok.c) is TensorDict and ok.c["t"].item() == 0.0


def test_tensor_only_non_tensor_mapping_stays_non_tensor():
    class NonTensorMapping(TensorClass["tensor_only"]):
        data: NonTensorData

    value = UserDict({"metadata": "value"})
    stored = NonTensorMapping(data=value).data
    assert type(stored) is NonTensorData and stored.data is value
