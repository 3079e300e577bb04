"""Batch dim names follow their dims through ops, and sub-collections carry their parent's names
(expected values: tensordict 0.14 on the same calls)."""

from __future__ import annotations

import pytest
import torch

from tdict import TensorDict, lazy_stack


def _td() -> TensorDict:
    return TensorDict(
        {"a": torch.arange(24.0).view(2, 3, 4), "n": {"b": torch.ones(2, 3, 4, 1)}}, [2, 3, 4], names=["x", "y", "z"]
    )


@pytest.mark.parametrize(
    "op, names",
    [
        (lambda t: t.bool().all(1), ["x", "z"]),
        (lambda t: t.bool().all(-1), ["x", "y"]),
        (lambda t: t.bool().any(0), ["y", "z"]),
        (lambda t: t.sum(1), ["x", "z"]),
        (lambda t: t.sum(1, keepdim=True), ["x", "y", "z"]),
        (lambda t: t.mean(dim=0), ["y", "z"]),
        (lambda t: t.max(1).values, ["x", "z"]),
        (lambda t: t.expand(5, 2, 3, 4), [None, "x", "y", "z"]),
        (lambda t: t.flatten(1, 2), ["x", None]),
        (lambda t: t.flatten(), [None]),
        (lambda t: t.gather(1, torch.zeros(2, 2, 4, dtype=torch.long)), ["x", "y", "z"]),
        (lambda t: t.split(1, 1)[0], ["x", "y", "z"]),
        (lambda t: t.split([1, 2], 1)[1], ["x", "y", "z"]),
        (lambda t: t.chunk(2, 1)[0], ["x", "y", "z"]),
        (lambda t: t.tensor_split(2, 2)[1], ["x", "y", "z"]),
        (lambda t: t[0], ["y", "z"]),
        (lambda t: t[:, 1:], ["x", "y", "z"]),
        (lambda t: t[torch.tensor([0, 1])], ["x", "y", "z"]),
        (lambda t: t[:, torch.tensor([0, 1])], ["x", "y", "z"]),
        (lambda t: t[torch.tensor([True, False])], [None, "y", "z"]),  # a mask makes a new dim (tensordict)
        (lambda t: t[torch.ones(2, 3, dtype=torch.bool)], [None, "z"]),
        (lambda t: t[None], [None, "x", "y", "z"]),
        (lambda t: t[..., 0], ["x", "y"]),
        (lambda t: t[0, :, 1], ["y"]),
        (lambda t: t[:, 0], ["x", "z"]),
        (lambda t: t[[0, 1]], ["x", "y", "z"]),
        (lambda t: t[0, :, torch.tensor([0, 1])], ["y", "z"]),
    ],
)
def test_ops_keep_the_names_of_the_dims_they_keep(op, names):
    result = op(_td())
    assert result.names == names
    assert result["n"].names == names  # and so does every sub-collection


def test_indices_torch_moves_to_the_front_or_broadcasts_into_new_dims_are_unnamed():
    td = _td()
    # two separated index tensors: their block goes first (torch's rule) and is unnamed
    assert td[torch.tensor([0, 1]), :, torch.tensor([0, 1])].names == [None, "y"]
    # a 2-d index tensor makes two new dims (tensordict 0.14 gives ['x', 'x', 'y', 'z'], a duplicate)
    assert td[torch.tensor([[0, 1]])].names == [None, None, "y", "z"]


def test_sub_collections_carry_the_parents_names():
    sub = TensorDict({"b": torch.ones(2, 3)}, [2, 3])
    td = TensorDict({"n": sub}, [2], names=["x"])
    assert td["n"].names == ["x", None] and sub.names == [None, None]  # the caller's object is left alone
    td["m"] = TensorDict({"c": torch.ones(2)}, [2])
    assert td["m"].names == ["x"]
    td["d"] = {"e": torch.ones(2)}
    assert td["d"].names == ["x"]
    td["p", "q"] = torch.ones(2)
    assert td["p"].names == ["x"]
    td.rename_(x="w")
    assert [td[k].names[0] for k in ("n", "m", "d", "p")] == ["w"] * 4
    plain = TensorDict({"n": {"b": torch.ones(2, 3)}}, [2])
    plain.names = ["x"]
    assert plain["n"].names == ["x"]
    plain.names = None
    assert plain["n"].names == [None]
    with pytest.raises(RuntimeError, match=r"Key 'n'.*named 'p'.*named 'x'"):
        TensorDict({}, [2], names=["x"])["n"] = TensorDict({"b": torch.ones(2, 3)}, [2, 3], names=["p", "q"])
    nested = TensorDict({"n": TensorDict({"b": torch.ones(2, 3)}, [2, 3])}, [2], names=["x"])
    assert nested[0]["n"].names == [None] and nested.clone()["n"].names == ["x", None]


def test_stack_of_differently_named_collections_is_unnamed():
    a = TensorDict({"a": torch.zeros(2)}, [2], names=["x"])
    b = TensorDict({"a": torch.zeros(2)}, [2], names=["y"])
    assert torch.stack([a, b]).names == [None, None]  # tdict kept the first one's: [None, 'x']
    assert torch.stack([a, TensorDict({"a": torch.zeros(2)}, [2])]).names == [None, None]
    assert torch.stack([a, a.clone()], 1).names == ["x", None]


def test_lazy_stack_members_keep_names_through_update():
    members = [TensorDict({"a": torch.zeros(3)}, [3], names=["t"]) for _ in range(2)]
    stack = lazy_stack(members)
    assert stack.names == [None, "t"]
    stack.update({"n": {"b": torch.ones(2, 3)}})
    assert [m["n"].names for m in stack.tensordicts] == [["t"], ["t"]]


def test_batch_size_changes_keep_the_names_of_the_leading_dims():
    td = TensorDict(batch_size=[3, 4, 1], names=["a", "b", "c"])
    td.batch_size = [3, 4, 1, 1]
    assert td.names == ["a", "b", "c", None]
    td.batch_size = [3]
    assert td.names == ["a"]
    td.batch_size = []
    assert td.names == []
    td.batch_size = [3, 4]
    assert td.names == [None, None]


def test_unflatten_leaves_the_split_dims_unnamed_and_keeps_the_others():
    td = TensorDict(batch_size=[3, 4, 1, 6], names=["a", "b", "c", "d"])
    assert td.flatten(1, 2).unflatten(1, (4, 1)).names == ["a", None, None, "d"]
    assert td.flatten(0, 2).unflatten(0, (3, 4, 1)).names == [None, None, None, "d"]


def test_a_named_child_names_an_unnamed_parent():
    parent = TensorDict({}, [3])
    child = TensorDict({}, [3, 4], names=["a", "b"])
    parent["x"] = child
    assert parent.names == ["a"] and parent["x"].names == ["a", "b"]
    unnamed = TensorDict({}, [3])
    unnamed["x"] = TensorDict({}, [3, 4])
    assert unnamed.names == [None]
    locked = TensorDict({}, [3]).lock_()
    with pytest.raises(RuntimeError, match="locked"):
        locked["x"] = child
    assert locked.names == [None]  # a refused write leaves the names as they were
    assert TensorDict({"x": child}, [3]).names == ["a"]  # the constructor and update adopt them too
    updated = TensorDict({}, [3])
    updated.update({"x": child})
    assert updated.names == ["a"]


def test_refine_names_with_an_ellipsis_anywhere():
    td = TensorDict(batch_size=[3, 4, 5, 6])
    assert td.refine_names(..., "d").names == [None, None, None, "d"]
    assert td.refine_names("a", ..., "d").names == ["a", None, None, "d"]
    assert td.refine_names("a", "b", ...).names == ["a", "b", None, "d"]
    with pytest.raises(RuntimeError, match="cannot coerce"):
        td.refine_names(..., "e")
    with pytest.raises(ValueError, match="does not fit"):
        td.refine_names("a", "b", "c", "d", "e", ...)
