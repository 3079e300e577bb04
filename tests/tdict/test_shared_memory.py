"""``share_memory_`` / ``is_shared`` and passing shared TensorDicts to spawn children.

Child targets live in ``_tdict_mp_children`` (importable by name in a fresh interpreter; this
folder is put on ``sys.path``, which spawn children inherit). One spawn child per test.
"""

from __future__ import annotations

import os
import pickle
import sys

import pytest
import torch
import torch.multiprocessing as mp
from multiprocessing.reduction import ForkingPickler

from tdict import TensorDict

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.append(_HERE)
import _tdict_mp_children as children  # noqa: E402

_SPAWN = mp.get_context("spawn")


def _make_td() -> TensorDict:
    return TensorDict(
        {
            "a": torch.zeros(4, 2, 3),
            "nested": {"b": torch.arange(8).reshape(4, 2), "deeper": {"c": torch.zeros(4, 2, 2, 2)}},
        },
        batch_size=[4, 2],
    )


def _leaves_equal(a: TensorDict, b: TensorDict) -> None:
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key, value in b.items(True, True):
        assert torch.equal(a.get(key), value), key


def _run_child(target, *args) -> None:
    proc = _SPAWN.Process(target=target, args=args)
    proc.start()
    proc.join(60)
    if proc.is_alive():
        proc.kill()
        proc.join()
        pytest.fail("spawn child did not finish within 60 s")
    assert proc.exitcode == 0, f"child exited with code {proc.exitcode}"


# --------------------------------------------------------------------------- in-process
def test_is_shared_false_before_true_after():
    td = _make_td()
    assert not td.is_shared()
    assert not td["nested"].is_shared()
    assert td.share_memory_() is td
    assert td.is_shared()
    assert td["nested"].is_shared() and td["nested", "deeper"].is_shared()
    assert all(leaf.is_shared() for leaf in td.values(True, True))


def test_share_memory_locks_recursively():
    td = _make_td().share_memory_()
    assert td.is_locked and td["nested"].is_locked and td["nested", "deeper"].is_locked
    with pytest.raises(RuntimeError, match="locked"):
        td["new"] = torch.zeros(4, 2)
    with pytest.raises(RuntimeError, match="locked"):
        td["nested", "new"] = torch.zeros(4, 2)
    with pytest.raises(RuntimeError, match="locked"):
        del td["a"]
    # in-place writes to existing keys stay allowed and stay in shared memory
    td.set_("a", torch.ones(4, 2, 3))
    td[0] = 5
    td += 1
    assert td.is_shared()
    assert torch.equal(td["a"][0], torch.full((2, 3), 6.0))
    assert torch.equal(td["a"][1:], torch.full((3, 2, 3), 2.0))
    # unlocking and adding a private (unshared) leaf: the collection is no longer all shared
    td.unlock_()
    td["private"] = torch.zeros(4, 2)
    assert not td.is_shared()


def test_share_memory_moves_storage_in_place():
    base = torch.zeros(8, 3)
    td = TensorDict({"v": base[::2]}, batch_size=[4]).share_memory_()
    assert base.is_shared()  # the whole storage moved, the other views follow it
    td["v"].fill_(1.0)
    assert base[::2].eq(1).all() and base[1::2].eq(0).all()


def test_multiprocessing_pickling_shares_memory():
    """torch's reducers (what queues and spawn use) pass handles: the copy aliases the original."""
    td = _make_td().share_memory_()
    td.names = ["rows", "cols"]
    twin = ForkingPickler.loads(ForkingPickler.dumps(td))
    assert twin.batch_size == td.batch_size and twin.names == td.names and twin.is_locked
    assert twin.is_shared()
    twin["nested", "deeper", "c"].add_(2.5)
    twin[3] = -1
    assert torch.equal(td["nested", "deeper", "c"][:3], torch.full((3, 2, 2, 2), 2.5))
    assert td["a"][3].eq(-1).all() and td["nested", "b"][3].eq(-1).all()


def test_plain_pickle_copies():
    td = _make_td().share_memory_()
    copy = pickle.loads(pickle.dumps(td))
    assert copy.batch_size == td.batch_size
    _leaves_equal(copy, td)
    copy["a"].fill_(9.0)
    assert td["a"].eq(0).all()


# --------------------------------------------------------------------------- spawn children
def test_spawn_child_writes_are_seen_by_parent():
    td = _make_td().share_memory_()
    expected = td.clone()
    children.write_shared(expected)  # the same writes, done here on a private copy
    _run_child(children.write_shared, td)
    _leaves_equal(td, expected)
    assert td["a"][0, 0, 0] == 42.0 and td["nested", "b"][1].eq(-1).all() and td["nested", "b"][3, 1] == 0


def test_td_sent_through_queue_arrives_shared_not_copied():
    td = _make_td().share_memory_()
    inbox, outbox = _SPAWN.Queue(), _SPAWN.Queue()
    proc = _SPAWN.Process(target=children.receive_and_report, args=(inbox, outbox))
    proc.start()
    try:
        inbox.put(td)
        child_saw_shared = outbox.get(timeout=60)
    finally:
        proc.join(60)
        if proc.is_alive():
            proc.kill()
            proc.join()
    assert proc.exitcode == 0
    assert child_saw_shared
    # the child's writes landed in the parent's memory: nothing was copied on the way
    assert td["a"].eq(3.0).all()
    assert td["nested", "b"].eq(4).all()
