"""Non-tensor data and lazy-stack locking: LinkedList write-through, logical ops on payloads,
``new_*(empty_lazy=True)``, index writes that add non-tensor keys, batch-size inference over
non-tensor stacks, UnbatchedTensor returned by vmap, and lazy stacks' derived lock state."""

import copy
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tdict import LazyStackedTensorDict, LinkedList, NonTensorData, NonTensorStack, TensorDict, UnbatchedTensor
from tdict.errors import LOCKED

_words = st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=6)


# ---------------------------------------------------------------------------- LinkedList
def test_getitem_of_a_stack_is_a_linked_list():
    td = TensorDict(a=["foo", "bar"], batch_size=[2])
    lst = td["a"]
    assert type(lst) is LinkedList and lst == ["foo", "bar"] and not (lst != ["foo", "bar"])
    assert repr(lst) == str(lst) == "LinkedList(['foo', 'bar'])"
    assert lst._td() is td.get("a")


def test_linked_list_writes_items_and_slices_back():
    td = TensorDict(a=NonTensorStack("a", "b", "c"), batch_size=[3])
    lst = td["a"]
    lst[0] = "x"
    assert td["a"] == ["x", "b", "c"] and td[0]["a"] == "x"
    lst[1:] = ["y", "z"]
    assert td.get("a").tolist() == ["x", "y", "z"] and td.get("a").batch_size == torch.Size([3])
    nested = TensorDict(a=NonTensorStack.from_list([["a", "b"], ["c", "d"]]), batch_size=[2])
    nested["a"][1] = ["p", "q"]
    assert nested["a"] == [["a", "b"], ["p", "q"]] and nested.get("a").batch_size == torch.Size([2, 2])


@pytest.mark.parametrize(
    "op",
    [
        lambda x: x.append("n"),
        lambda x: x.extend(["n"]),
        lambda x: x.insert(0, "n"),
        lambda x: x.pop(),
        lambda x: x.remove("a"),
        lambda x: x.clear(),
        lambda x: x.__delitem__(0),
        lambda x: x.__iadd__(["n"]),
    ],
)
def test_linked_list_unlinks_when_its_length_changes(op):
    td = TensorDict(a=["a", "b"], batch_size=[2])
    lst = td["a"]
    op(lst)
    assert lst._td() is None
    lst_len = len(lst)
    if lst_len:
        lst[0] = "changed"
    assert td["a"] == ["a", "b"]  # the stack is untouched


def test_linked_list_copies_and_pickles_as_a_list():
    td = TensorDict(a=["a", "b"], batch_size=[2])
    for out in (pickle.loads(pickle.dumps(td["a"])), copy.copy(td["a"]), copy.deepcopy(td["a"])):
        assert type(out) is list and out == ["a", "b"]
    again = TensorDict(b=td["a"], batch_size=[2])  # a LinkedList set back is a stack again
    assert type(again.get("b")) is NonTensorStack and again["b"] == ["a", "b"]


@settings(max_examples=30, deadline=None)
@given(words=_words, data=st.data())
def test_linked_list_item_write_matches_a_list(words, data):
    td = TensorDict(a=NonTensorStack(*words), batch_size=[len(words)])
    i = data.draw(st.integers(0, len(words) - 1))
    expected = list(words)
    expected[i] = "new"
    lst = td["a"]
    lst[i] = "new"
    assert lst == expected and td["a"] == expected and td.get("a").batch_size == torch.Size([len(words)])


def test_nontensor_stack_contiguous_is_itself():
    stack = NonTensorStack("a", "b")
    assert stack.contiguous() is stack and stack.contiguous(canonical=True) is stack


# ---------------------------------------------------------------------------- logical ops
def test_logical_ops_compare_payloads():
    td = TensorDict(
        {
            "x": torch.tensor([True, False]),
            "nested": {"flag": NonTensorData(True), "n": NonTensorData(3)},
            "s": NonTensorStack(True, False),
        },
        [2],
    )
    xor, or_, and_ = td ^ td, td | td, td & td
    assert xor["x"].tolist() == [False, False] and or_["x"].tolist() == [True, False]
    assert xor.get(("nested", "flag")).tolist() == [False, False]
    assert or_.get(("nested", "flag")).tolist() == [True, True]
    assert and_.get(("nested", "n")).tolist() == [True, True]  # 3 & 3 == 3: true
    assert xor.get("s").tolist() == [False, False] and or_.get("s").tolist() == [True, False]
    assert or_.get("s").shape == torch.Size([2]) and or_.get("s").dtype == torch.bool


# ---------------------------------------------------------------------------- new_* / index writes
def test_new_empty_with_empty_lazy_gives_placeholder_stacks():
    td = TensorDict(a=NonTensorStack("a", "b").unsqueeze(-1), batch_size=[2])
    with pytest.raises(RuntimeError, match="empty_lazy=True"):
        td.new_empty(4)
    for n in (4, 1):
        out = td.new_empty((n,), empty_lazy=True).get("a")
        assert type(out) is NonTensorStack and out.batch_size == torch.Size([n, 1])
        assert out.tolist() == [["a"]] * n
    nested = TensorDict(a=TensorDict(b=NonTensorStack("a", "b", "c").unsqueeze(-1), batch_size=[3]), batch_size=[3])
    zeros = nested.to_lazystack().new_zeros((4,), empty_lazy=True)
    zeros[torch.tensor([True, True, False, True])] = nested.to_lazystack()
    assert zeros.get(("a", "b")).tolist() == [["a"], ["b"], ["a"], ["c"]]


def test_index_write_adds_missing_non_tensor_keys():
    data = TensorDict({}, [1, 10])
    data[0, 0] = TensorDict({"a": 0, "b": "first"}, [])
    assert data.get("b").tolist() == [["first"] * 10] and data["a"].shape == (1, 10)
    data[0, 1] = TensorDict({"a": 0, "b": "second"}, [])
    assert data.get("b").tolist() == [["first", "second"] + ["first"] * 8]
    d = TensorDict({}, [4])
    d[1:3] = TensorDict({"s": NonTensorStack("x", "y")}, [2])
    assert d.get("s").batch_size == torch.Size([4]) and d["s"][1:3] == ["x", "y"]


def test_auto_batch_size_counts_batched_non_tensor_entries():
    td = TensorDict.from_dict({"query": ["s1", "s2", "s3", "s4"]}, auto_batch_size=True, batch_dims=1)
    assert td.batch_size == torch.Size([4]) and td["query"] == ["s1", "s2", "s3", "s4"]
    td = TensorDict({"a": torch.zeros(4, 3), "q": ["x"] * 4, "s": "one"}).auto_batch_size_()
    assert td.batch_size == torch.Size([4]) and td.get("s").batch_size == torch.Size([4])
    td = TensorDict({"a": torch.zeros(4, 3), "q": ["x"] * 5}).auto_batch_size_()
    assert td.batch_size == torch.Size([])


# ---------------------------------------------------------------------------- vmap
@pytest.mark.parametrize("out_dims,expected", [(0, [4, 3]), (1, [3, 4]), (-1, [3, 4])])
def test_vmap_returns_an_unbatched_tensor_whole(out_dims, expected):
    data = torch.randn(7, 11)
    td = TensorDict(a=torch.randn(4, 3, 5), u=UnbatchedTensor(data), batch_size=[4, 3])
    out = torch.vmap(lambda x: x["u"], out_dims=out_dims)(td)
    assert type(out) is UnbatchedTensor and out.data_ptr() == data.data_ptr()
    assert out.shape == (7, 11) and out.batch_size == torch.Size(expected)


# ---------------------------------------------------------------------------- lazy-stack locks
def test_lazy_stack_lock_state_follows_its_members():
    td0 = TensorDict({("a", "b"): 1.0}, [])
    td1 = td0.clone()
    stack = LazyStackedTensorDict.lazy_stack([td0, td1])
    assert stack._is_locked is None and not stack.is_locked
    td0.lock_()
    assert not stack.is_locked
    td1.lock_()
    assert stack.is_locked and stack._is_locked is None  # locked through its members only
    td0.unlock_()  # allowed: the stack did not lock it
    assert not stack.is_locked
    td1.unlock_()
    stack.lock_()
    assert stack._is_locked is True and td0.is_locked and td1.is_locked
    with pytest.raises(RuntimeError):
        td1.unlock_()
    stack.unlock_()
    assert stack._is_locked is None and not td0.is_locked
    parent = TensorDict({"s": stack}, [])
    parent.lock_()
    assert stack._is_locked is True
    parent.unlock_()
    assert stack._is_locked is None and not stack.is_locked


def test_lazy_stack_lock_context_manager_restores_unlocked():
    stack = LazyStackedTensorDict.lazy_stack([TensorDict(a=torch.zeros(2), batch_size=[2]) for _ in range(2)])
    with stack.lock_():
        assert stack.is_locked
    assert not stack.is_locked and not stack.tensordicts[0].is_locked


def test_locked_lazy_stack_refuses_new_members():
    td0 = TensorDict({("a", "b"): 1.0}, [])
    stack = LazyStackedTensorDict.lazy_stack([td0, td0.clone()]).lock_()
    with pytest.raises(RuntimeError, match=LOCKED):
        stack.insert(0, td0.clone())
    with pytest.raises(RuntimeError, match=LOCKED):
        stack.append(td0.clone())
    assert stack.batch_size == torch.Size([2])
    stack.unlock_()
    stack.insert(0, td0.clone())
    stack.append(td0.clone())
    assert stack.batch_size == torch.Size([4]) and len(stack.tensordicts) == 4
