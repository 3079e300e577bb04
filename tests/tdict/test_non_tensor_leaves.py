"""Non-tensor data is not a leaf (tensordict 0.14): ``keys(True, True)`` and the ops built on it
(``==`` with a number, ``all``, ``zero_``, ``apply``) see tensors only; ``keys()`` / ``keys(True)``,
``in``, ``flatten_keys``, ``is_empty`` and ``is_leaf_nontensor`` still see the non-tensor entries."""

from __future__ import annotations

import pytest
import torch

from tdict import NonTensorData, TensorDict, default_is_leaf, is_leaf_nontensor, lazy_stack, tensorclass


def _td() -> TensorDict:
    return TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2, 1), "t": "yo"}, "s": "hello"}, [2])


@tensorclass
class _Labelled:
    x: torch.Tensor
    label: str


def test_keys_leaves_only_lists_tensors_only():
    td = _td()
    # tensordict 0.14 (order aside: tdict lists a node before what is inside it)
    assert list(td.keys(True, True)) == ["a", ("n", "b")]
    assert len(td.keys(True, True)) == 2
    assert list(td.keys(False, True)) == ["a"]
    assert list(td.keys(True, True, sort=True)) == ["a", ("n", "b")]
    assert set(td.keys(True)) == {"a", "n", ("n", "b"), ("n", "t"), "s"}
    assert list(td.keys()) == ["a", "n", "s"]
    assert [type(v).__name__ for v in td.values(True, True)] == ["Tensor", "Tensor"]
    assert [k for k, _ in td.items(True, True)] == ["a", ("n", "b")]
    assert list(td.keys(True, True, is_leaf=is_leaf_nontensor)) == ["a", ("n", "b"), ("n", "t"), "s"]
    assert not default_is_leaf(NonTensorData) and is_leaf_nontensor(NonTensorData)
    # ``in`` checks presence, as in tensordict
    assert "s" in td.keys(True, True) and ("n", "t") in td.keys(True, True)


def test_lazy_stacks_and_tensorclasses_follow_the_same_rule():
    td = _td()
    stack = lazy_stack([td[0], td[1]])
    assert list(stack.keys(True, True)) == ["a", ("n", "b")]
    assert set(stack.keys(True)) == {"a", "n", ("n", "b"), ("n", "t"), "s"}
    obj = _Labelled(x=torch.zeros(2), label="cam", batch_size=[2])
    assert list(obj.keys(True, True)) == ["x"]
    assert list(TensorDict({"o": obj}, [2]).keys(True, True)) == [("o", "x")]


def test_comparison_with_a_number_looks_at_the_tensors():
    td = _td() * 0
    # tensordict 0.14: True (tdict compared "hello" with 0 and answered False)
    assert (td == 0).all()
    assert (td != 1).all()
    assert list((td == 0).keys(True, True)) == ["a", ("n", "b")]
    assert (td == 0)["s"] == "hello"  # carried through untouched
    assert (lazy_stack([td[0], td[1]]) == 0).all()
    assert (_Labelled(x=torch.zeros(2), label="cam", batch_size=[2]) == 0).all()
    stacked = TensorDict({"a": torch.zeros(2), "s": torch.stack([NonTensorData("x"), NonTensorData("y")])}, [2])
    assert (stacked == 0).all()


def test_comparison_with_a_collection_compares_payloads():
    td = _td()
    same, other = _td(), _td()
    other["s"] = "bye"
    assert (td == same).all() and not (td == other).all()
    assert (td == other)["s"].tolist() == [False, False]
    assert (td != other)["s"].tolist() == [True, True]
    assert (td == td.to_dict()).all()  # tdict raised AttributeError


def test_comparison_with_a_dict():
    td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2)}}, [2])
    eq = td == {"a": torch.zeros(2), "n": {"b": torch.tensor([1.0, 0.0])}}
    assert eq.batch_size == torch.Size([2])
    assert eq["a"].tolist() == [True, True] and eq["n", "b"].tolist() == [True, False]
    assert (td == {"a": 0, "n": {"b": 1}}).all()  # numbers broadcast, as in tensordict
    assert (td != {"a": torch.ones(2), "n": {"b": torch.ones(2)}})["a"].tolist() == [True, True]
    with pytest.raises(KeyError, match=r"\('n', 'b'\)"):
        td == {"a": torch.zeros(2), "n": {}}  # noqa: B015


@pytest.mark.parametrize("other", ["z", None, [1, 2], object()])
def test_comparison_with_anything_else_is_false(other):
    td = _td()
    # tensordict 0.14: ``not td == "z"`` and ``td != "z"`` (tdict raised AttributeError)
    assert (td == other) is False and (td != other) is True
    assert (lazy_stack([td[0], td[1]]) == other) is False
    obj = _Labelled(x=torch.zeros(2), label="cam", batch_size=[2])
    assert (obj == other) is False and (obj != other) is True


def test_apply_zero_and_is_empty_with_non_tensor_entries():
    td = _td()
    seen = []
    out = td.apply(lambda x: seen.append(type(x).__name__) or x + 1)
    assert seen == ["Tensor", "Tensor"] and out["s"] == "hello" and out["n", "t"] == "yo"
    td.zero_()
    assert td["s"] == "hello" and td["n", "b"].tolist() == [[0.0], [0.0]]
    only_text = TensorDict({"s": "x", "e": {}})
    assert not only_text.is_empty()  # tensordict 0.14: False
    assert list(only_text.filter_empty_().keys()) == ["s"]
    assert list(_td().flatten_keys().keys()) == ["a", "n.b", "n.t", "s"]
    assert [k for k, _ in _td().non_tensor_items(True)] == [("n", "t"), "s"]
    assert TensorDict({"n": {"m": {"s": "x"}}, "a": {"b": torch.zeros(())}}).depth == 2
