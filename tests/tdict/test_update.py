"""update / update_ / update_at_ / load_state_dict: merging semantics (tensordict 0.14) and
all-or-nothing writes (every entry checked before the first one is written)."""

from __future__ import annotations

import pytest
import torch

from tdict import TensorDict, lazy_stack, tensorclass


def _td() -> TensorDict:
    return TensorDict({"a": torch.zeros(2), "b": torch.zeros(2), "n": {"c": torch.zeros(2)}}, [2])


def _state(td) -> dict:
    return {k: v.tolist() for k, v in td.items(True, True)}


UNTOUCHED = {"a": [0.0, 0.0], "b": [0.0, 0.0], ("n", "c"): [0.0, 0.0]}


# --------------------------------------------------------------------------- merging


def test_one_element_tuple_key_merges_like_the_plain_key():
    for value in ({"a": torch.tensor(5.0)}, TensorDict({"a": torch.tensor(5.0)})):
        td = TensorDict({"k": {"a": torch.zeros(()), "b": torch.ones(())}})
        td.update({("k",): value})
        # tensordict 0.14: {'k': {'a': 5., 'b': 1.}} (tdict replaced k, losing b)
        assert _state(td) == {("k", "a"): 5.0, ("k", "b"): 1.0}


def test_nested_tuple_keys_create_and_merge_sub_collections():
    td = TensorDict({"n": {"c": torch.zeros(2)}}, [2])
    td.update({("n", "d"): torch.ones(2), ("x", "y"): torch.ones(2), ("x", "z"): torch.full((2,), 2.0)})
    assert _state(td) == {
        ("n", "c"): [0.0, 0.0],
        ("n", "d"): [1.0, 1.0],
        ("x", "y"): [1.0, 1.0],
        ("x", "z"): [2.0, 2.0],
    }
    assert td["x"].batch_size == torch.Size([2])


def test_update_clone_with_nested_dicts():
    td = TensorDict({"n": {"a": torch.zeros(2)}}, [2])
    src = {"n": {"b": torch.ones(2)}, "c": torch.ones(2), "m": {"d": torch.ones(2)}}
    td.update(src, clone=True)  # tdict raised AttributeError: 'dict' object has no attribute 'clone'
    assert _state(td) == {("n", "a"): [0.0, 0.0], ("n", "b"): [1.0, 1.0], "c": [1.0, 1.0], ("m", "d"): [1.0, 1.0]}
    assert td["n", "b"].data_ptr() != src["n"]["b"].data_ptr()
    assert td["m", "d"].data_ptr() != src["m"]["d"].data_ptr()
    assert td["c"].data_ptr() != src["c"].data_ptr()


@pytest.mark.parametrize("keys", [["c"], [("c",)], [("c", "d")]])
def test_update__keys_to_update_selects_sub_collections(keys):
    td = TensorDict({"a": torch.zeros(2), "b": torch.zeros(2), "c": {"d": torch.zeros(2)}}, [2])
    other = TensorDict({"a": torch.ones(2), "b": torch.ones(2), "c": {"d": torch.ones(2)}}, [2])
    td.update_(other, keys_to_update=keys)
    # tensordict 0.14: only c.d is written, for each spelling (tdict wrote nothing for "c" / ("c",))
    assert _state(td) == {"a": [0.0, 0.0], "b": [0.0, 0.0], ("c", "d"): [1.0, 1.0]}


def test_update_keys_to_update_selects_sub_collections():
    td = TensorDict({"a": torch.zeros(2), "c": {"d": torch.zeros(2)}}, [2])
    td.update({"a": torch.ones(2), "c": {"d": torch.ones(2), "e": torch.ones(2)}}, keys_to_update=[("c", "e")])
    assert _state(td) == {"a": [0.0, 0.0], ("c", "d"): [0.0, 0.0], ("c", "e"): [1.0, 1.0]}


@tensorclass
class _Inner:
    x: torch.Tensor
    y: torch.Tensor = None


@tensorclass
class _Outer:
    inner: _Inner
    z: torch.Tensor


def _outer() -> _Outer:
    return _Outer(inner=_Inner(x=torch.zeros(2), y=torch.zeros(2), batch_size=[2]), z=torch.zeros(2), batch_size=[2])


@pytest.mark.parametrize(
    "source",
    [
        lambda: _Outer(inner=_Inner(x=torch.ones(2), batch_size=[2]), z=torch.ones(2), batch_size=[2]),
        lambda: TensorDict({"inner": {"x": torch.ones(2)}, "z": torch.ones(2)}, [2]),
        lambda: {"inner": {"x": torch.ones(2)}, "z": torch.ones(2)},
    ],
)
def test_tensorclass_update_merges_into_a_nested_tensorclass(source):
    out = _outer()
    out.update(source())
    # tensordict 0.14: ('_Inner', x [1., 1.], y [0., 0.] kept, z [1., 1.])
    assert type(out.inner) is _Inner
    assert out.inner.x.tolist() == [1.0, 1.0] and out.inner.y.tolist() == [0.0, 0.0] and out.z.tolist() == [1.0, 1.0]
    td = TensorDict({"inner": _Inner(x=torch.zeros(2), y=torch.zeros(2), batch_size=[2])}, [2])
    td.update(TensorDict({"inner": {"x": torch.ones(2)}}, [2]))
    assert (
        type(td.get("inner")) is _Inner
        and td["inner"].x.tolist() == [1.0, 1.0]
        and td["inner"].y.tolist() == [0.0, 0.0]
    )


# --------------------------------------------------------------------------- R4: nothing half-written


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda td: td.update({"a": torch.ones(2), "z": torch.ones(3)}), RuntimeError, r"'z'.*\[3\].*\[2\]"),
        (
            lambda td: td.update({"a": torch.ones(2), "n": {"c": torch.ones(2), "d": torch.ones(5)}}),
            RuntimeError,
            r"\('n', 'd'\).*\[5\].*\[2\]",
        ),
        (
            lambda td: td.update(TensorDict({"a": torch.ones(2), "n": {"c": torch.ones(2)}, "bad": torch.ones(7)}, [])),
            RuntimeError,
            r"'bad'.*\[7\]",
        ),
        (
            lambda td: td.update({"a": torch.ones(2), "b": torch.ones(3)}, inplace=True),
            RuntimeError,
            r"'b'.*\[3\].*\[2\]",
        ),
        (
            lambda td: td.update({"a": torch.ones(2), ("b", "x"): torch.ones(2)}),
            KeyError,
            r"\('b', 'x'\).*'b' holds a leaf",
        ),
        (lambda td: td.lock_().update({"z": torch.ones(2), "a": torch.ones(2)}), RuntimeError, r"locked.*'z'"),
        (lambda td: td.update_({"a": torch.ones(2), "zz": torch.ones(2)}), KeyError, r"'zz'.*with keys"),
        (
            lambda td: td.update_({"a": torch.ones(2), "b": torch.ones(3)}),
            RuntimeError,
            r"update_: key 'b'.*\[3\].*\[2\]",
        ),
        (
            lambda td: td.update_(TensorDict({"a": torch.ones(2), "n": {"c": torch.ones(2, 3)}}, [2])),
            RuntimeError,
            r"\('n', 'c'\).*\[2, 3\].*\[2\]",
        ),
        (lambda td: td.update_({"a": torch.ones(2), "n": torch.ones(2)}), TypeError, r"'n' holds a TensorDict"),
        (lambda td: td.update_at_({"a": torch.tensor(1.0), "b": torch.ones(3)}, 0), RuntimeError, r"'b'.*\[3\].*\[\]"),
        (
            lambda td: td.update_at_(TensorDict({"a": torch.tensor(1.0), "n": {"c": torch.ones(3)}}), 0),
            RuntimeError,
            r"\('n', 'c'\).*\[3\]",
        ),
        (lambda td: td.update_at_({"a": torch.tensor(1.0), "zz": torch.tensor(1.0)}, 0), KeyError, r"'zz'"),
    ],
)
def test_a_bad_entry_leaves_everything_unwritten(call, error, match):
    td = _td()
    with pytest.raises(error, match=match):
        call(td)
    assert _state(td) == UNTOUCHED
    assert sorted(map(str, td.keys(True))) == ["('n', 'c')", "a", "b", "n"]


def test_a_bad_member_leaves_every_member_of_a_lazy_stack_unwritten():
    stack = lazy_stack([TensorDict({"a": torch.zeros(1)}), TensorDict({"a": torch.zeros(2)})])
    with pytest.raises(RuntimeError, match=r"update_: key 'a'.*\[3\].*\[2\]"):
        stack.update_(lazy_stack([TensorDict({"a": torch.ones(1)}), TensorDict({"a": torch.ones(3)})]))
    assert [m["a"].tolist() for m in stack.tensordicts] == [[0.0], [0.0, 0.0]]
    with pytest.raises(RuntimeError, match="'z'"):
        stack.update({"b": torch.ones(2), "z": torch.ones(3)})
    assert [sorted(m.keys()) for m in stack.tensordicts] == [["a"], ["a"]]


# --------------------------------------------------------------------------- load_state_dict


def test_load_state_dict_writes_into_a_lazy_stacks_members():
    stack = lazy_stack([TensorDict({"a": torch.zeros(2), "n": {"b": torch.zeros(2)}}) for _ in range(2)])
    leaves = [m["a"] for m in stack.tensordicts]
    source = lazy_stack(
        [TensorDict({"a": torch.full((2,), float(i + 1)), "n": {"b": torch.full((2,), 10.0 * i)}}) for i in range(2)]
    )
    for flatten in (False, True):
        stack.load_state_dict(source.state_dict(flatten=flatten))
        # tensordict 0.14: [[1., 1.], [2., 2.]] (tdict left the zeros)
        assert stack["a"].tolist() == [[1.0, 1.0], [2.0, 2.0]]
        assert stack["n", "b"].tolist() == [[0.0, 0.0], [10.0, 10.0]]
        assert all(m["a"] is leaf for m, leaf in zip(stack.tensordicts, leaves))  # copied in place


def test_update_takes_entries_as_keywords():
    td = TensorDict({"a": torch.zeros(3)}, [3])
    assert td.update() is td and td.update_() is td  # nothing to write
    td.update(b=torch.ones(3))
    assert sorted(td.keys()) == ["a", "b"] and td["b"].tolist() == [1.0] * 3
    td.update({"a": torch.full((3,), 2.0), "b": torch.full((3,), 3.0)}, a=torch.full((3,), 7.0))
    assert td["a"].tolist() == [7.0] * 3 and td["b"].tolist() == [3.0] * 3  # the keywords win
    other = TensorDict({"a": torch.full((3,), 5.0)}, [3])
    td.update(other, b=torch.zeros(3))
    assert td["a"].tolist() == [5.0] * 3 and td["b"].tolist() == [0.0] * 3
    before = td["a"]
    td.update_(a=torch.full((3,), 4.0))
    assert td["a"] is before and before.tolist() == [4.0] * 3  # in place
    stack = lazy_stack([TensorDict({"x": torch.zeros(())}), TensorDict({"x": torch.zeros(())})])
    stack.update(y=torch.arange(2.0))
    assert stack["y"].tolist() == [0.0, 1.0]
    with pytest.raises(RuntimeError, match="batch dimension mismatch"):
        td.update(a=torch.zeros(3), c=torch.zeros(4))
    assert "c" not in td.keys() and td["a"].tolist() == [4.0] * 3  # nothing written


def test_apply_writes_into_out():
    td = TensorDict({"a": torch.zeros(3), "b": {"c": torch.ones(3)}}, [3])
    dest = td.clone()
    a_before = dest["a"]
    assert td.apply(lambda x: x + 1, out=dest) is dest
    assert dest["a"] is a_before and dest["a"].tolist() == [1.0] * 3  # written in place
    assert dest["b", "c"].tolist() == [2.0] * 3 and td["a"].tolist() == [0.0] * 3
    fresh = TensorDict({}, [3])
    td.apply(lambda x: x * 3, out=fresh)
    assert set(fresh.keys(True, True)) == {"a", ("b", "c")} and fresh["b", "c"].tolist() == [3.0] * 3
    with pytest.raises(ValueError, match="inplace=True or out=, not both"):
        td.apply(lambda x: x, inplace=True, out=dest)


def test_update_in_place_names_a_missing_key():
    td = TensorDict({"a": torch.zeros(3)}, [3])
    with pytest.raises(KeyError, match=r"update_: key 'b' was not found in TensorDict with keys \['a'\]"):
        td.update_(b=torch.ones(3))
    assert list(td.keys()) == ["a"]
