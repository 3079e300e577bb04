"""``with td.flatten_keys() as f:``, ``unflatten_keys`` and ``view``: what the block writes comes back."""

from __future__ import annotations

import pytest
import torch

from tdict import TensorDict


def test_flatten_keys_block_writes_new_and_changed_entries_back():
    td = TensorDict({"a": {"b": torch.zeros(2)}, "c": torch.zeros(2)}, [2])
    with td.flatten_keys() as flat:
        assert sorted(flat.keys()) == ["a.b", "c"]
        flat["x.y"] = torch.ones(2)
        flat["a.b"] = torch.full((2,), 3.0)
    # tensordict 0.14: {'a': {'b': [3., 3.]}, 'c': [0., 0.], 'x': {'y': [1., 1.]}}
    assert set(td.keys(True, True)) == {("a", "b"), ("x", "y"), "c"}
    assert td["a", "b"].tolist() == [3.0, 3.0]
    assert td["x", "y"].tolist() == [1.0, 1.0]
    assert td["c"].tolist() == [0.0, 0.0]


def test_flatten_keys_separator_and_unflatten_keys_block():
    td = TensorDict({"a": {"b": torch.zeros(2)}}, [2])
    with td.flatten_keys("/") as flat:
        flat["p/q"] = torch.ones(2)
    assert td["p", "q"].tolist() == [1.0, 1.0]
    flat_td = TensorDict({"a.b": torch.zeros(2)}, [2])
    with flat_td.unflatten_keys() as nested:
        nested["c", "d"] = torch.ones(2)
    assert sorted(flat_td.keys()) == ["a.b", "c.d"]  # tensordict 0.14: ['a.b', 'c.d']
    assert flat_td["c.d"].tolist() == [1.0, 1.0]


def test_view_block_writes_new_entries_back_in_the_source_shape():
    td = TensorDict({"a": torch.zeros(2, 3)}, [2, 3])
    with td.view(-1) as flat:
        assert flat.batch_size == torch.Size([6])
        flat["b"] = torch.arange(6.0)
        flat["a"] += 1  # views: in place reaches td either way
    assert td["b"].shape == torch.Size([2, 3])
    assert td["b"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert td["a"].tolist() == [[1.0] * 3] * 2


def test_a_failing_block_writes_nothing_back():
    td = TensorDict({"a": torch.zeros(2)}, [2])
    with pytest.raises(ValueError, match="boom"):
        with td.flatten_keys() as flat:
            flat["new"] = torch.ones(2)
            raise ValueError("boom")
    assert list(td.keys()) == ["a"]


def test_locked_source_gets_changed_values_in_place():
    td = TensorDict({"a": {"b": torch.zeros(2)}}, [2]).lock_()
    leaf = td["a", "b"]
    with td.flatten_keys() as flat:
        assert not flat.is_locked
        flat["a.b"] = torch.full((2,), 5.0)
    assert td.is_locked
    assert td["a", "b"] is leaf and leaf.tolist() == [5.0, 5.0]


def test_results_are_freed_without_a_gc_pass():
    import gc
    import weakref

    td = TensorDict({"a": torch.zeros(2, 3), "n": {"b": torch.zeros(2, 3)}}, [2, 3])
    gc.disable()
    try:
        for op in (lambda: td.view(-1), lambda: td.flatten_keys(), lambda: td.flatten_keys().unflatten_keys()):
            ref = weakref.ref(op())
            assert ref() is None  # no reference cycle through the write-back
    finally:
        gc.enable()
