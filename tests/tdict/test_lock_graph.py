"""Locked graphs: a collection that a locked collection holds cannot be unlocked on its own."""

from __future__ import annotations

import gc

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tdict import TensorDict, lazy_stack, tensorclass

HELD = "Cannot unlock a tensordict that is part of a locked graph"


def nested() -> TensorDict:
    return TensorDict({("a", "b", "c"): torch.zeros(2), "x": torch.ones(2)}, [2])


def flags(*tds: TensorDict) -> list[bool]:
    return [td.is_locked for td in tds]


def test_a_child_of_a_locked_root_stays_locked():
    root = nested().lock_()
    a, b = root["a"], root["a", "b"]
    for child in (a, b):
        with pytest.raises(RuntimeError, match=f"{HELD}: this collection is held locked by a TensorDict"):
            child.unlock_()
    with pytest.raises(RuntimeError, match=HELD):
        a.is_locked = False
    assert flags(root, a, b) == [True, True, True]  # the refusal changed nothing
    root.unlock_()
    assert flags(root, a, b) == [False, False, False]
    # an unlocked root no longer holds them: each locks and unlocks on its own
    b.lock_()
    b.unlock_()
    a.lock_()
    with pytest.raises(RuntimeError, match=HELD):
        b.unlock_()  # a holds it now
    a.unlock_()


def test_a_collected_root_holds_nothing():
    root = nested().lock_()
    a = root["a"]
    del root
    gc.collect()
    a.unlock_()
    assert not a.is_locked and not a["b"].is_locked


def test_two_locked_roots_sharing_a_child_hold_each_other():
    first = nested().lock_()
    shared = first["a"]
    second = TensorDict({"a": shared}, []).lock_()
    for root in (first, second):
        with pytest.raises(RuntimeError, match=f"{HELD}: a collection under it is held locked"):
            root.unlock_()
    assert flags(first, second, shared) == [True, True, True]
    # grouped under one root, the whole graph unlocks at once
    group = TensorDict({"first": first, "second": second}, []).lock_()
    group.unlock_()
    assert flags(group, first, second, shared, shared["b"]) == [False] * 5


def test_unlock_block_restores_the_graph():
    root = nested().lock_()
    a = root["a"]
    with root.unlock_():
        assert flags(root, a) == [False, False]
        a.unlock_()  # nothing holds it inside the block
        root["new"] = torch.zeros(2)
    assert flags(root, a) == [True, True]
    with pytest.raises(RuntimeError, match=HELD):
        a.unlock_()


def test_lazy_stack_members_and_their_children_are_held():
    first = TensorDict({("a", "b"): torch.zeros(())}, [])
    stack = lazy_stack([first, first.clone()]).lock_()
    for held in (first, first["a"], stack["a"]):
        with pytest.raises(RuntimeError, match=HELD):
            held.unlock_()
    stack.unlock_()
    assert flags(stack, first, first["a"]) == [False, False, False]


def test_a_tensorclass_child_is_held():
    @tensorclass
    class Pair:
        left: torch.Tensor
        right: torch.Tensor

    pair = Pair(left=torch.zeros(3), right=torch.ones(3), batch_size=[3])
    root = TensorDict({"pair": pair}, [3]).lock_()
    with pytest.raises(RuntimeError, match=HELD):
        root["pair"].unlock_()
    root.unlock_()
    assert not root["pair"].is_locked


def test_non_tensor_leaves_lock_with_their_root():
    root = TensorDict({"text": "hello", "nested": {"tag": "x"}}, []).lock_()
    assert root.get("text").is_locked
    root.unlock_()
    assert not root.get("text").is_locked
    assert not root.get(("nested", "tag")).is_locked


@st.composite
def trees(draw, depth=3):
    """A nested dict of tensors (batch size [2]) with up to ``depth`` levels of sub-dicts."""
    keys = draw(st.lists(st.sampled_from("abcd"), min_size=1, max_size=3, unique=True))
    out = {}
    for key in keys:
        if depth > 0 and draw(st.booleans()):
            out[key] = draw(trees(depth=depth - 1))
        else:
            out[key] = torch.zeros(2)
    return out


@settings(max_examples=40, deadline=None)
@given(trees())
def test_every_sub_collection_is_held_until_its_root_unlocks(tree):
    root = TensorDict(tree, [2]).lock_()
    subs = [value for _, value in root.items(include_nested=True) if isinstance(value, TensorDict)]
    for sub in subs:
        with pytest.raises(RuntimeError, match=HELD):
            sub.unlock_()
    assert all(flags(root, *subs))
    root.unlock_()
    assert not any(flags(root, *subs))
    for sub in subs:  # released: each may now be locked and unlocked by itself
        sub.lock_().unlock_()
