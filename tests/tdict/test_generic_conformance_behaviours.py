"""Behaviours added for tensordict's test_generic.py: update(update_batch_size=), consolidate(return_early=),
expand_as(collection), names kept by repeat, chunk of nested tensors, top-level non-tensor pad,
from_any of ragged lists, from_dict_instance, lazy-stack member writes, from_module(use_state_dict=),
permute's dim count."""

import pytest
import torch
from torch import nn

from tdict import NonTensorData, NonTensorStack, TensorDict, lazy_stack, pad, tensorclass
from tdict.base import TensorDictFuture


# ---------------------------------------------------------------- update(update_batch_size=True)
def test_update_refuses_a_clashing_batch_size_unless_asked():
    td0, td1 = TensorDict(batch_size=(3,)), TensorDict(batch_size=(4,))
    with pytest.raises(RuntimeError, match="update_batch_size=True"):
        td0.update(td1)
    assert td0.batch_size == (3,)
    assert td0.update(td1, update_batch_size=True) is td0
    assert td0.batch_size == (4,)


def test_update_batch_size_replaces_entries_and_keeps_sub_tensordicts():
    td = TensorDict(a=torch.zeros(3, 2), n=TensorDict(x=torch.zeros(3, 5), batch_size=(3, 5)), batch_size=(3,))
    sub = td["n"]
    src = TensorDict(a=torch.ones(4), n=TensorDict(x=torch.ones(4, 6), batch_size=(4, 6)), batch_size=(4,))
    td.update(src, update_batch_size=True)
    assert td.batch_size == (4,)
    assert td["a"].tolist() == [1.0] * 4
    assert td["n"] is sub and sub.batch_size == (4, 6)
    assert (sub["x"] == 1).all() and sub["x"].shape == (4, 6)
    assert src["n", "x"].shape == (4, 6)  # the source is unchanged


def test_update_batch_size_of_a_nested_collection():
    t = torch.arange(24).view(2, 3, 4)
    t1 = torch.arange(16).view(2, 2, 4)
    td0 = TensorDict(a=t, b=TensorDict(c=t, batch_size=(2, 3)), e=TensorDict(f=t, batch_size=(2, 3)), batch_size=(2,))
    b = td0["b"]
    td1 = TensorDict(a=t, b=TensorDict(c=t1, batch_size=(2, 2)), e=TensorDict(f=t, batch_size=(2, 3)), batch_size=(2,))
    td0.update(td1, update_batch_size=True)
    assert td0.batch_size == (2,)
    assert td0["b"] is b and b.batch_size == (2, 2)
    assert torch.equal(td0["b", "c"], t1)
    assert td0["e"].batch_size == (2, 3)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"inplace": True}, "inplace=True"), ({"keys_to_update": ["a"]}, "keys_to_update")],
)
def test_update_batch_size_bad_options(kwargs, match):
    td0 = TensorDict(a=torch.zeros(3), batch_size=(3,))
    td1 = TensorDict(a=torch.ones(4), batch_size=(4,))
    with pytest.raises(RuntimeError, match=match):
        td0.update(td1, update_batch_size=True, **kwargs)
    assert td0.batch_size == (3,) and (td0["a"] == 0).all()


def test_update_batch_size_locked_and_missing_keys():
    td1 = TensorDict(batch_size=(4,))
    locked = TensorDict(batch_size=(3,), lock=True)
    with pytest.raises(RuntimeError, match="locked"):
        locked.update(td1, update_batch_size=True)
    stack = lazy_stack([locked, locked]).lock_()
    with pytest.raises(RuntimeError, match="locked"):
        stack.update(lazy_stack([td1, td1]).lock_(), update_batch_size=True)
    td0 = TensorDict(a=torch.zeros(3), b=torch.zeros(3), batch_size=(3,))
    with pytest.raises(RuntimeError, match=r"keys \['b'\] are not in the source"):
        td0.update(TensorDict(a=torch.ones(4), batch_size=(4,)), update_batch_size=True)
    assert td0.batch_size == (3,) and set(td0.keys()) == {"a", "b"}


# ---------------------------------------------------------------- consolidate(return_early=True)
def test_consolidate_return_early_gives_a_future():
    td = TensorDict(a=torch.arange(3.0), s="text", batch_size=[3])
    future = td.consolidate(return_early=True)
    assert isinstance(future, TensorDictFuture)
    out = future.result()
    assert future.done()
    assert out.is_consolidated()
    assert out["a"].tolist() == [0.0, 1.0, 2.0]
    assert out["s"] == "text"


@pytest.mark.parametrize("name", ["use_buffer", "non_blocking"])
def test_consolidate_return_early_refuses(name):
    with pytest.raises(NotImplementedError, match=name):
        TensorDict(a=torch.zeros(2)).consolidate(return_early=True, **{name: True})


# ---------------------------------------------------------------- shape ops
def test_expand_as_a_collection_expands_leaf_by_leaf():
    td0 = TensorDict({"a": torch.ones(3, 1, 4), "b": {"c": torch.ones(3, 2, 1, 4)}}, batch_size=[3])
    td1 = TensorDict({"a": torch.zeros(2, 3, 5, 4), "b": {"c": torch.zeros(2, 3, 2, 6, 4)}}, batch_size=[2, 3])
    out = td0.expand_as(td1)
    assert out.batch_size == (2, 3) and out["b"].batch_size == (2, 3)
    assert out["a"].shape == (2, 3, 5, 4)
    assert out["b", "c"].shape == (2, 3, 2, 6, 4)
    assert (out == 1).all()
    assert td0.expand_as(torch.zeros(2, 3)).batch_size == (2, 3)  # a tensor: its shape


def test_repeat_keeps_names():
    td = TensorDict(a=torch.zeros(1, 2, 3), batch_size=(1, 2, 3), names=[None, "time", "other"])
    out = td.repeat(1, 1, 2)
    assert out.batch_size == (1, 2, 6)
    assert out.names == [None, "time", "other"]


def test_chunk_of_a_nested_tensor_along_dim0():
    nt = torch.nested.as_nested_tensor([torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6, 7])], layout=torch.jagged)
    parts = TensorDict(x=nt, batch_size=[2]).chunk(2)
    assert len(parts) == 2
    assert [t.tolist() for t in parts[0]["x"].unbind()] == [[1, 2, 3]]
    assert [t.tolist() for t in parts[1]["x"].unbind()] == [[4, 5, 6, 7]]


def test_permute_checks_the_dim_count_first():
    td = TensorDict(a=torch.zeros(4, 5, 6), batch_size=(4, 5, 6))
    with pytest.raises(RuntimeError, match="4 dims"):
        td.permute(3, 2, 1, 0)
    with pytest.raises(RuntimeError, match="2 dims"):
        lazy_stack(list(td.unbind(1)), 1).permute(2, 1)
    with pytest.raises(IndexError):
        td.permute(2, 3, 0)


# ---------------------------------------------------------------- non-tensor data
def test_pad_a_top_level_non_tensor_stack():
    stack = NonTensorStack("a", "b")
    padded = pad(stack, [1, 1])
    assert isinstance(padded, NonTensorStack) and padded.tolist() == [None, "a", "b", None]
    assert stack.tolist() == ["a", "b"]
    assert pad(stack, [0, 1], inplace=True) is stack
    assert stack.tolist() == ["a", "b", None] and stack.batch_size == (3,)
    assert pad(NonTensorData("a", batch_size=[2]), [0, 1]).tolist() == ["a", "a", None]
    with pytest.raises(RuntimeError, match="cannot preserve the identity"):
        pad(NonTensorData("a", batch_size=[2]), [0, 1], inplace=True)
    with pytest.raises(ValueError, match="pad_size"):
        pad(stack, [0, 1, 1])


def test_from_any_of_a_ragged_list():
    data = torch.zeros(3, 4, 5).tolist()
    assert isinstance(TensorDict.from_any(data), torch.Tensor)
    data[0][1].extend([0.0, 2.0])
    out = TensorDict.from_any(data)
    assert isinstance(out, NonTensorStack)
    assert out.batch_size == (3, 4)  # the rectangular leading dims
    assert len(out.tolist()[0][1]) == 7 and len(out.tolist()[0][0]) == 5
    ragged = TensorDict.from_any([[1, 2], [3]])
    assert ragged.batch_size == (2,) and ragged.tolist() == [[1, 2], [3]]


def test_from_dict_instance_rebuilds_tensor_classes():
    @tensorclass(autocast=True)
    class Point:
        x: torch.Tensor = None  # type: ignore[assignment]
        y: int = None  # type: ignore[assignment]
        z: "Point" = None  # type: ignore[assignment]

    td = TensorDict({"a": torch.randn(()), "b": Point(x=torch.zeros(()), y=1, z=Point(y=2))})
    out = td.from_dict_instance(td.to_dict(), auto_batch_size=True)
    assert isinstance(out["a"], torch.Tensor)
    assert isinstance(out["b"], Point) and isinstance(out["b"].z, Point)
    assert out["b"].y == 1 and isinstance(out["b"].y, int)
    assert out["b"].z.y == 2
    with pytest.raises(TypeError, match="input_dict"):
        td.from_dict_instance([1, 2])


# ---------------------------------------------------------------- lazy stacks, modules
def test_lazy_stack_member_write_adds_the_member_keys():
    stack = lazy_stack([TensorDict({}, []) for _ in range(3)], 0)
    for i in range(3):
        stack[i] = TensorDict(a=torch.full((2,), float(i)), b=torch.ones(1))
    assert stack.get("a").tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    assert (stack.get("b") == 1).all()


def test_from_module_use_state_dict_reads_the_state_dict_values():
    net = nn.Linear(3, 2)

    def adder(module, *args, **kwargs):
        for p in module.parameters(recurse=False):
            p.data += 1

    def remover(module, *args, **kwargs):
        for p in module.parameters(recurse=False):
            p.data = p.data - 1

    net.register_state_dict_pre_hook(adder)
    net._register_state_dict_hook(remover)
    plain = TensorDict.from_module(net).clone()
    via_sd = TensorDict.from_module(net, use_state_dict=True)
    torch.testing.assert_close(via_sd["weight"], plain["weight"] + 1)
    assert not via_sd["weight"].requires_grad  # detached, as state_dict() gives them
