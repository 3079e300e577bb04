"""Tensor-class behaviours matched to tensordict's: hashing, loading another class's save, a lazy
stack's ragged fields, state-dict key checks, deleting a ``tensor_only`` field, and index writes
into unset fields."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from tdict import LazyStackedTensorDict, TensorClass, TensorDict, tensorclass


@tensorclass
class Saved:
    x: torch.Tensor
    label: str


@tensorclass
class Other:
    y: torch.Tensor


@tensorclass
class Ragged:
    X: torch.Tensor
    y: torch.Tensor


class Node(TensorClass):
    x: torch.Tensor
    z: str
    child: Any = None


@tensorclass
class Box:
    X: Any


class OnlyTensors(TensorClass["tensor_only"]):
    a: torch.Tensor
    c: torch.Tensor | None = None


def test_mutable_instances_are_unhashable_frozen_ones_hash():
    @tensorclass(autocast=True)
    class Mutable:
        y: torch.Tensor

    @tensorclass(frozen=True)
    class Frozen:
        y: torch.Tensor

    class Sub(TensorClass):
        y: torch.Tensor

    for obj in (Mutable(y=1), Sub(y=torch.ones(()))):
        with pytest.raises(TypeError, match="unhashable"):
            hash(obj)
    frozen = Frozen(y=torch.ones(()))
    assert {frozen: 1}[frozen] == 1 and frozen.is_locked


def test_own_hash_is_kept():
    @tensorclass
    class Hashed:
        y: torch.Tensor

        def __hash__(self) -> int:
            return 7

    assert hash(Hashed(y=torch.zeros(()))) == 7


def test_load_memmap_gives_the_saved_class(tmp_path):
    Saved(x=torch.arange(3.0), label="a", batch_size=[3]).memmap_(tmp_path / "tc")
    loaded = Other.load_memmap(tmp_path / "tc")
    assert type(loaded) is Saved
    assert loaded.x.tolist() == [0.0, 1.0, 2.0] and loaded.label == "a"
    TensorDict(y=torch.ones(2), batch_size=[2]).memmap_(tmp_path / "td")
    wrapped = Other.load_memmap(tmp_path / "td")  # a plain TensorDict is wrapped by the class asked for
    assert type(wrapped) is Other and wrapped.y.tolist() == [1.0, 1.0]


def test_ragged_lazy_stack_fields():
    stack = LazyStackedTensorDict(
        TensorDict(X=torch.ones(3), y=torch.zeros(())), TensorDict(X=torch.full((2,), 2.0), y=torch.ones(()))
    )
    obj = Ragged.from_tensordict(stack)
    as_list = obj.get("X", as_list=True)
    assert [t.tolist() for t in as_list] == [[1.0, 1.0, 1.0], [2.0, 2.0]]
    padded = obj.get("X", as_padded_tensor=True)
    assert padded.tolist() == [[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]
    assert obj.get("X", as_nested_tensor=True).is_nested
    assert obj.y.tolist() == [0.0, 1.0]
    with pytest.raises(KeyError, match="other"):
        Ragged.from_tensordict(LazyStackedTensorDict(TensorDict(X=torch.ones(1), other=torch.ones(1))))


def _node() -> Node:
    return Node(x=torch.zeros(3), z="a", child=Node(x=torch.ones(3), z="b"))


def test_state_dict_key_that_is_no_field_raises_before_loading():
    tc = _node()
    sd = tc.state_dict()
    sd["x"] = torch.full((3,), 5.0)
    sd["a"] = None
    with pytest.raises(KeyError, match="Key 'a' wasn't expected in the state-dict"):
        tc.load_state_dict(sd)
    assert tc.x.tolist() == [0.0, 0.0, 0.0]  # nothing was loaded
    del sd["a"]
    sd["child.w"] = torch.zeros(3)
    with pytest.raises(KeyError, match="'child.w'.*not a field of Node"):
        tc.load_state_dict(sd)
    del sd["child.w"]
    sd._metadata[""]["_non_tensor"]["a"] = None
    with pytest.raises(KeyError, match="Key 'a' wasn't expected"):
        tc.load_state_dict(sd)
    del sd._metadata[""]["_non_tensor"]["a"]
    tc.load_state_dict(sd)
    assert tc.x.tolist() == [5.0, 5.0, 5.0] and tc.child.z == "b"
    nested = tc.state_dict(flatten=False)
    nested["child"]["a"] = None
    with pytest.raises(KeyError, match="'child.a'"):
        tc.load_state_dict(nested)


def test_state_dict_below_a_plain_tensordict_is_left_to_the_loader():
    @tensorclass
    class Holder:
        td: TensorDict

    holder = Holder(td=TensorDict(a=torch.zeros(2)))
    sd = holder.state_dict()
    sd["td.a"] = torch.ones(2)
    holder.load_state_dict(sd)
    assert holder.td["a"].tolist() == [1.0, 1.0]


def test_deleted_tensor_only_field_is_gone_until_set():
    x = OnlyTensors(torch.tensor(1))
    assert x.c is None
    x.c = 3
    assert isinstance(x.c, torch.Tensor) and x.c.item() == 3
    del x.c
    assert not hasattr(x, "c")
    with pytest.raises(AttributeError, match="'c'"):
        _ = x.c
    x.c = 4
    assert x.c.item() == 4
    del x.c
    x.set("c", torch.tensor(5))
    assert x.c.item() == 5


def test_deleting_a_frozen_tensor_only_field_raises():
    class FrozenOnly(TensorClass["tensor_only", "frozen"]):
        a: torch.Tensor

    x = FrozenOnly(torch.tensor(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        del x.a
    assert x.a.item() == 1


def test_index_write_allocates_unset_fields():
    dest = Box(Box(Box(X=None, batch_size=[4]), batch_size=[4]), batch_size=[4])
    value = Box(Box(Box(X=torch.tensor([1.0, 2.0]), batch_size=[]), batch_size=[]), batch_size=[])
    dest[1] = value
    assert dest.X.X.X.shape == torch.Size([4, 2])
    assert dest.X.X.X.tolist() == [[0.0, 0.0], [1.0, 2.0], [0.0, 0.0], [0.0, 0.0]]
    dest[2:] = Box(Box(Box(X=torch.full((2, 2), 3.0), batch_size=[2]), batch_size=[2]), batch_size=[2])
    assert dest.X.X.X[2:].tolist() == [[3.0, 3.0], [3.0, 3.0]]


def test_index_write_allocates_a_collection_field():
    dest = Box(X=None, batch_size=[3])
    dest[0] = Box(X=TensorDict(a=torch.ones(2, 5), batch_size=[2]), batch_size=[])
    assert dest.X.batch_size == torch.Size([3, 2])
    assert dest.X["a"].shape == torch.Size([3, 2, 5])
    assert dest.X["a"][0].sum().item() == 10.0 and dest.X["a"][1:].sum().item() == 0.0


def test_failed_index_write_leaves_the_fields_unset():
    @tensorclass
    class Two:
        X: Any
        Y: Any

    dest = Two(X=None, Y=torch.zeros(3, 2), batch_size=[3])
    with pytest.raises(RuntimeError):  # Y's shape does not fit: X is not left allocated
        dest[0] = Two(X=torch.ones(4), Y=torch.ones(5), batch_size=[])
    assert dest.X is None and dest.Y.sum().item() == 0.0


def test_index_write_of_a_foreign_key_still_raises():
    dest = Box(X=TensorDict(a=torch.zeros(3), batch_size=[3]), batch_size=[3])
    with pytest.raises(KeyError, match="absent"):
        dest[0] = Box(X=TensorDict(b=torch.ones(()), batch_size=[]), batch_size=[])
    assert list(dest.X.keys()) == ["a"]


def test_dict_field_is_one_value(tmp_path):
    @tensorclass
    class WithDict:
        a: torch.Tensor
        c: dict = dataclasses.field(default_factory=dict)

    obj = WithDict(a=torch.arange(3), c={"k": 1}, batch_size=[3])
    assert obj.c == {"k": 1} and type(obj.c) is dict
    assert obj[0].c is obj[1].c is obj.c  # not split along the batch
    assert WithDict(a=torch.arange(2), batch_size=[2]).c == {}
    obj.c = {"other": [1, 2]}
    assert obj[2].c == {"other": [1, 2]}
    assert torch.stack([obj, obj]).batch_size == torch.Size([2, 3])
    obj.memmap_(tmp_path)
    assert WithDict.load_memmap(tmp_path).c == {"other": [1, 2]}


def test_dict_field_of_an_autocast_class_becomes_the_annotated_collection():
    @tensorclass(autocast=True)
    class Cast:
        td: TensorDict

    assert isinstance(Cast(td={"x": torch.zeros(2)}).td, TensorDict)
