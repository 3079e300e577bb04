"""NonTensorData / NonTensorStack: Python objects carried through TensorDict operations."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tdict import NonTensorData, NonTensorStack, TensorDict, is_leaf_nontensor, is_non_tensor


def _td(text: str, n: int = 3, fill: float = 0.0) -> TensorDict:
    return TensorDict({"s": text, "x": torch.full((n, 2), fill)}, batch_size=[n])


@pytest.fixture
def stacked() -> TensorDict:
    return torch.stack([_td("hello"), _td("world", fill=1.0)])


# ---------------------------------------------------------------- NonTensorData in a TensorDict
def test_string_is_wrapped_and_payload_returned():
    td = _td("hello")
    leaf = td.get("s")
    assert type(leaf) is NonTensorData
    assert leaf.data == "hello" and leaf.batch_size == torch.Size([3])
    assert td["s"] == "hello"
    assert td.get_non_tensor("s") == "hello"
    assert is_non_tensor(leaf) and not is_non_tensor("hello") and not is_non_tensor(td)
    # tensordict 0.14: leaves_only lists tensors only, though ``in`` still finds the string
    assert ("s" in td.keys(True, True)) and list(td.keys(True, True)) == ["x"] and len(td.keys(True, True)) == 1
    assert list(td.keys(True, True, is_leaf_nontensor)) == ["s", "x"]


def test_arbitrary_payloads():
    marker = object()
    td = TensorDict({"d": {"nested": ["u", "v"]}, "o": marker, "pair": ("u", "v")}, batch_size=[2])
    # plain dicts become sub-TensorDicts; a list is a stack of its items (tensordict's list_to_stack);
    # other objects are kept as payloads
    assert td["d", "nested"] == ["u", "v"]
    assert td[0]["d", "nested"] == "u" and td[1]["d", "nested"] == "v"
    assert td["o"] is marker
    assert td[1]["o"] is marker
    assert td[1]["pair"] == ("u", "v")


def test_lists_stack_along_the_batch():
    td = TensorDict({"text": [["a", "b"], ["c", "d"]], "frames": [torch.zeros(3), torch.ones(3)]}, [2])
    assert td.get("text").batch_size == (2, 2) and td[1]["text"] == ["c", "d"]
    assert torch.equal(td["frames"], torch.stack([torch.zeros(3), torch.ones(3)]))
    assert TensorDict({"ragged": [["a"], ["b", "c"]]}, [2])[1]["ragged"] == ["b", "c"]
    assert TensorDict({"words": ["a", "b", "c"]}, [])["words"] == ["a", "b", "c"]  # a stack under no batch
    with pytest.raises(RuntimeError, match="batch dimension mismatch"):
        TensorDict({"words": ["a", "b", "c"]}, [2])


def test_index_keeps_payload_and_batch_size():
    td = _td("hello", n=4)
    assert td[0]["s"] == "hello"
    assert td[0].get("s").batch_size == torch.Size([])
    assert td[1:3].get("s").batch_size == torch.Size([2])
    assert td[torch.tensor([0, 3, 3])].get("s").batch_size == torch.Size([3])
    assert td[torch.tensor([True, False, True, False])].get("s").batch_size == torch.Size([2])
    assert td[[0, 1]]["s"] == "hello"
    with pytest.raises(IndexError):
        td.get("s")[4]


def test_shape_ops_follow_batch_size():
    td = TensorDict({"s": "a", "x": torch.zeros(2, 3)}, batch_size=[2, 3])
    for out, shape in [
        (td.reshape(6), [6]),
        (td.view(3, 2), [3, 2]),
        (td.unsqueeze(0), [1, 2, 3]),
        (td.permute(1, 0), [3, 2]),
        (td.flatten(), [6]),
        (td.expand(4, 2, 3), [4, 2, 3]),
        (td[:, None], [2, 1, 3]),
    ]:
        assert out.get("s").batch_size == torch.Size(shape)
        assert out["s"] == "a"


def test_unbind_split_chunk():
    leaf = NonTensorData("a", batch_size=[4, 2])
    parts = leaf.unbind(1)
    assert len(parts) == 2 and all(type(p) is NonTensorData and p.batch_size == torch.Size([4]) for p in parts)
    assert [p.batch_size[0] for p in leaf.split([1, 3])] == [1, 3]
    assert [p.batch_size[0] for p in leaf.chunk(2)] == [2, 2]
    td = _td("hello", n=4)
    assert [t["s"] for t in td.unbind(0)] == ["hello"] * 4
    assert [t.get("s").batch_size for t in td.split(3)] == [torch.Size([3]), torch.Size([1])]


def test_clone_copy_to():
    payload = {"k": [1, 2]}
    leaf = NonTensorData(payload, batch_size=[2])
    cloned = leaf.clone()
    assert cloned.data == payload and cloned.data is not payload
    assert leaf.clone(recurse=False).data is payload
    assert leaf.copy().data is payload
    moved = leaf.to("cpu")
    assert moved.device == torch.device("cpu") and moved.data is payload
    assert leaf.to(torch.float64) is leaf
    td = _td("hello")
    assert td.clone()["s"] == "hello" and td.to("cpu")["s"] == "hello"
    assert td.to(torch.float64)["s"] == "hello"
    assert copy.deepcopy(td)["s"] == "hello"


def test_masked_fill_empty_lock_is_empty():
    td = _td("hello")
    out = td.masked_fill(torch.tensor([True, False, True]), 1.0)
    assert out["s"] == "hello" and out["x"][:, 0].tolist() == [1.0, 0.0, 1.0]
    leaf = td.get("s")
    assert leaf.is_empty() is False
    assert leaf.empty().data == "hello"
    td.lock_()
    assert leaf.is_locked
    td.unlock_()
    assert not leaf.is_locked


def test_tolist_and_repr():
    assert NonTensorData("a").tolist() == "a"
    assert NonTensorData("a", batch_size=[2, 1]).tolist() == [["a"], ["a"]]
    assert repr(NonTensorData("a", batch_size=[2])) == "NonTensorData(data=a, batch_size=torch.Size([2]), device=None)"


def test_equality():
    a = NonTensorData("a", batch_size=[3])
    assert (a == NonTensorData("a", batch_size=[3])).tolist() == [True] * 3
    assert (a == NonTensorData("b", batch_size=[3])).tolist() == [False] * 3
    assert (a != NonTensorData("b", batch_size=[3])).all()
    assert (a == "a").shape == torch.Size([3])
    # payloads whose == is elementwise are reduced
    assert (NonTensorData(torch.ones(2)) == NonTensorData(torch.ones(2))).item()


def test_pickle_roundtrip():
    leaf = pickle.loads(pickle.dumps(NonTensorData("a", batch_size=[2])))
    assert leaf.data == "a" and leaf.batch_size == torch.Size([2])
    stack = NonTensorStack.from_list([["a", "b"], ["c", "d"]])
    assert pickle.loads(pickle.dumps(stack)).tolist() == [["a", "b"], ["c", "d"]]


# ---------------------------------------------------------------- stacking
def test_stack_different_payloads(stacked):
    leaf = stacked.get("s")
    assert type(leaf) is NonTensorStack
    assert leaf.batch_size == torch.Size([2, 3])
    assert stacked["s"] == [["hello"] * 3, ["world"] * 3]
    assert stacked[0]["s"] == "hello" and stacked[1]["s"] == "world"
    assert type(stacked[0].get("s")) is NonTensorData
    assert stacked[:, 0]["s"] == ["hello", "world"]
    assert stacked[0:1]["s"] == [["hello"] * 3]
    assert stacked[torch.tensor([1, 0])]["s"] == [["world"] * 3, ["hello"] * 3]
    assert stacked[torch.tensor([1, 0])][0]["s"] == "world"
    assert stacked.get_non_tensor("s") == [["hello"] * 3, ["world"] * 3]


def test_stack_identical_payloads_gives_stack():
    # tensordict 0.14: stacking never collapses identical payloads; elements come back as they were
    a = NonTensorData("a", batch_size=[3])
    out = torch.stack([a, NonTensorData("a", batch_size=[3])])
    assert type(out) is NonTensorStack and out.batch_size == torch.Size([2, 3])
    assert out.tolist() == [["a"] * 3] * 2
    assert out.data == "a"  # unique payload is still reachable
    assert type(out[0]) is NonTensorData and out[0].batch_size == torch.Size([3])
    stacked = torch.stack([_td("same"), _td("same")])
    assert stacked["s"] == [["same"] * 3] * 2
    assert [t["s"] for t in stacked] == ["same", "same"]


def test_stack_along_inner_dim():
    a, b = NonTensorData("a", batch_size=[3]), NonTensorData("b", batch_size=[3])
    out = torch.stack([a, b], 1)
    assert out.batch_size == torch.Size([3, 2])
    assert out.tolist() == [["a", "b"]] * 3
    assert type(out[0]) is NonTensorStack and out[0].tolist() == ["a", "b"]
    assert [p.tolist() for p in out.unbind(1)] == [["a"] * 3, ["b"] * 3]
    assert type(out.unbind(1)[0]) is NonTensorData


def test_stack_mismatched_batch_raises():
    with pytest.raises(RuntimeError, match="batch size"):
        torch.stack([NonTensorData("a", batch_size=[2]), NonTensorData("b", batch_size=[3])])


def test_unbind_iterate_stacked(stacked):
    assert [t["s"] for t in stacked.unbind(0)] == ["hello", "world"]
    assert [t["s"] for t in stacked] == ["hello", "world"]
    assert [t["s"] for t in stacked.unbind(1)] == [["hello", "world"]] * 3
    assert [t["x"][0, 0].item() for t in stacked] == [0.0, 1.0]


def test_shape_ops_on_stack(stacked):
    assert stacked.reshape(-1)["s"] == ["hello"] * 3 + ["world"] * 3
    assert stacked.permute(1, 0)["s"] == [["hello", "world"]] * 3
    assert stacked.transpose(0, 1)[2]["s"] == ["hello", "world"]
    assert stacked.unsqueeze(1)["s"] == [[["hello"] * 3], [["world"] * 3]]
    assert stacked.unsqueeze(1).squeeze(1)["s"] == stacked["s"]
    assert stacked.flip(0)["s"] == [["world"] * 3, ["hello"] * 3]
    assert stacked.expand(4, 2, 3)[3, 1]["s"] == "world"
    # an integer index that picks one stacked element gives it back, whatever the stack dim
    assert stacked.permute(1, 0)[:, 0]["s"] == "hello"
    assert torch.stack([_td("a"), _td("b")], 1)[:, 1]["s"] == "b"
    assert stacked.clone()["s"] == stacked["s"]
    assert stacked.to("cpu")["s"] == stacked["s"]
    assert stacked.masked_fill(torch.ones(2, 3, dtype=torch.bool), 0)["s"] == stacked["s"]
    assert [t["s"] for t in stacked.split([1, 1], 0)] == [[["hello"] * 3], [["world"] * 3]]
    assert stacked.chunk(3, 1)[0]["s"] == [["hello"], ["world"]]


def test_cat():
    td = torch.cat([_td("hello"), _td("world")])
    assert td["s"] == ["hello"] * 3 + ["world"] * 3
    same = torch.cat([_td("hello"), _td("hello", n=2)])
    assert type(same.get("s")) is NonTensorData and same.get("s").batch_size == torch.Size([5])
    stacked = torch.stack([_td("a"), _td("b")])
    both = torch.cat([stacked, stacked], 1)
    assert both["s"] == [["a"] * 6, ["b"] * 6]
    assert both[1, 5]["s"] == "b"


def test_nested_stacks(stacked):
    twice = torch.stack([stacked, stacked.flip(0)], 1)
    assert twice.batch_size == torch.Size([2, 2, 3])
    assert twice["s"] == [[["hello"] * 3, ["world"] * 3], [["world"] * 3, ["hello"] * 3]]
    assert twice[0, 1]["s"] == "world"
    assert twice[1][0]["s"] == "world"
    mixed = torch.stack([stacked.get("s"), NonTensorData("z", batch_size=[2, 3])])
    assert mixed.tolist()[2 - 1] == [["z"] * 3] * 2


def test_from_list_and_indexing():
    s = NonTensorStack.from_list([["a", "b"], ["c", "d"]])
    assert s.batch_size == torch.Size([2, 2])
    assert s.tolist() == [["a", "b"], ["c", "d"]]
    assert s[1, 0].data == "c"
    assert s[:, 1].tolist() == ["b", "d"]
    assert type(s[0]) is NonTensorStack and s[0].tolist() == ["a", "b"]
    assert s[torch.tensor([[True, False], [False, True]])].tolist() == ["a", "d"]
    assert [e.tolist() for e in s] == [["a", "b"], ["c", "d"]]
    assert s.reshape(4).tolist() == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match="rectangular"):
        NonTensorStack.from_list([["a", "b"], ["c"]])
    with pytest.raises(AttributeError, match="non-unique"):
        s.data


def test_stack_equality_and_repr():
    s = NonTensorStack.from_list(["a", "b", "a"])
    assert (s == "a").tolist() == [True, False, True]
    assert (s == NonTensorStack.from_list(["a", "c", "a"])).tolist() == [True, False, True]
    assert (s == NonTensorData("b", batch_size=[3])).tolist() == [False, True, False]
    assert (
        repr(NonTensorStack.from_list(["a", "b"]))
        == "NonTensorStack(\n    ['a', 'b'],\n    batch_size=torch.Size([2]),\n    device=None)"
    )


def test_stack_table_stays_compact():
    # sub-stacks share their parent's payload table; stacking them must not grow it
    big = NonTensorStack.from_list([str(i) for i in range(100)])
    picks = [big[torch.tensor([i, i + 1])] for i in range(10)]
    out = torch.stack(picks)
    assert len(out._table) <= 20
    assert out.tolist() == [[str(i), str(i + 1)] for i in range(10)]


def test_constructor_and_out():
    s = NonTensorStack(NonTensorData("a"), NonTensorData("b"), stack_dim=0)
    assert s.tolist() == ["a", "b"]
    out = NonTensorStack.from_list(["x", "y"])
    res = torch.stack([NonTensorData("c"), NonTensorData("d")], out=out)
    assert res is out and out.tolist() == ["c", "d"]


def test_set_and_indexed_writes():
    td = _td("hello", n=4)
    td.set_("s", "new")
    assert td["s"] == "new" and type(td.get("s")) is NonTensorData
    td[0] = TensorDict({"s": "world", "x": torch.ones(2)}, [])
    assert td["s"] == ["world", "new", "new", "new"] and td["x"][0].tolist() == [1.0, 1.0]
    batch = torch.stack([_td("p", n=1), _td("q", n=1)]).squeeze(1)
    td[torch.tensor([3, 1])] = batch
    assert td["s"] == ["world", "q", "new", "p"]
    td.lock_()
    td[2:4] = batch  # in-place writes are allowed on a locked TensorDict
    assert td["s"] == ["world", "q", "p", "q"]
    td.set_("s", "all")
    assert td["s"] == ["all"] * 4
    # writing the payload an entry already holds keeps the compact NonTensorData
    same = _td("same", n=3)
    same[1] = TensorDict({"s": "same", "x": torch.zeros(2)}, [])
    assert type(same.get("s")) is NonTensorData
    with pytest.raises(RuntimeError, match="'s'"):
        same[0:2] = TensorDict({"s": NonTensorData("z", batch_size=[3]), "x": torch.zeros(2, 2)}, [2])
    assert same["s"] == "same"


@given(st.lists(st.lists(st.text(max_size=4), min_size=1, max_size=4), min_size=1, max_size=5), st.integers(1, 3))
def test_property_stack_unbind_roundtrip(words, n):
    # rows of random strings, each string in a TensorDict of batch [n]; stack, then read back
    width = len(words[0])
    rows = [(row * width)[:width] for row in words]
    tds = [
        torch.stack([TensorDict({"s": w, "i": torch.full((n,), float(j))}, [n]) for j, w in enumerate(row)])
        for row in rows
    ]
    full = torch.stack(tds)
    assert full.batch_size == torch.Size([len(rows), width, n])
    assert full["s"] == [[[w] * n for w in row] for row in rows]
    for r, row_td in enumerate(full.unbind(0)):
        for c, cell in enumerate(row_td.unbind(0)):
            assert cell["s"] == rows[r][c]
            assert type(cell.get("s")) is NonTensorData
    flat = full.reshape(-1)
    assert flat["s"] == [w for row in rows for w in row for _ in range(n)]
    perm = torch.randperm(flat.batch_size[0])
    assert flat[perm]["s"] == [flat["s"][i] for i in perm.tolist()]


def test_batchless_non_tensor_is_broadcast_over_the_batch_and_left_alone():
    """tensordict 0.14: a NonTensorData without batch dims set into a batched TensorDict takes its
    batch size (the caller's object keeps its own); one with other batch dims is refused."""
    td = TensorDict(a=torch.zeros(3, 4), batch_size=[3])
    label = NonTensorData("hello")
    td["label"] = label
    td.set(("nested", "label"), NonTensorData(7))
    assert td.get("label").batch_size == torch.Size([3]) and label.batch_size == torch.Size([])
    assert td["label"] == "hello" and td[1]["label"] == "hello" and td["nested", "label"] == 7
    with pytest.raises(
        RuntimeError, match=r"Key 'bad': batch dimension mismatch, nested collection of batch size \[2\]"
    ):
        td["bad"] = NonTensorData("x", batch_size=[2])
    assert "bad" not in td.keys()


def test_non_tensor_stack_of_plain_objects():
    stack = NonTensorStack("a", {"b": 1}, NonTensorData("c"))
    assert stack.batch_size == (3,)
    assert stack.tolist() == ["a", {"b": 1}, "c"]
    assert stack[1].data == {"b": 1}


def test_where_chooses_non_tensor_payloads_element_by_element():
    cond = torch.tensor([True, False])
    mine = NonTensorStack(NonTensorData(["a"]), NonTensorData(["a"]), batch_size=(2,))
    theirs = NonTensorStack(NonTensorData(["b"]), NonTensorData(["b"]), batch_size=(2,))
    out = NonTensorStack(NonTensorData(["none"]), NonTensorData(["none"]), batch_size=(2,))
    result = mine.where(cond, theirs, out=out, pad=0)
    assert result is out and out.tolist() == [["a"], ["b"]]  # list payloads stay whole
    td = TensorDict({"s": ["x", "y"], "n": torch.zeros(2)}, [2])
    other = TensorDict({"s": ["p", "q"], "n": torch.ones(2)}, [2])
    picked = td.where(cond, other)
    assert picked["s"] == ["x", "q"] and picked["n"].tolist() == [0.0, 1.0]
    padded = td.where(cond, TensorDict({"n": torch.ones(2)}, [2]), pad=0)
    assert padded["s"] == ["x", 0]
    with pytest.raises(KeyError, match="'s' of one operand was not found"):
        td.where(cond, TensorDict({"n": torch.ones(2)}, [2]))
    grid = TensorDict({"s": [["a", "b"], ["c", "d"]]}, [2, 2])
    assert grid.where(torch.tensor([True, False]), TensorDict({}, [2, 2]), pad=0)["s"] == [["a", "b"], [0, 0]]


def test_apply_hands_non_tensor_payloads_of_the_others_to_fn():
    left, right = TensorDict({"a": 0, "b": 0}), TensorDict({"a": 1, "b": 1})
    funcs = TensorDict({"a": lambda x, y: x - y, "b": lambda x, y: x + y})
    out = left.apply(lambda x, y, f: f(x, y), right, funcs)
    assert out["a"].item() == -1 and out["b"].item() == 1
