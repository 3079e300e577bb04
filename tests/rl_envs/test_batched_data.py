"""What batched envs carry: use_buffers=False (TensorDicts through the pipes), non-tensor entries
(strings, counters) in both modes, partial resets of them, and partial steps (the "_step" mask)."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from rl_envs import PendulumEnv
from rl_envs.batched import ParallelEnv, SerialEnv
from tdict import TensorDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # spawned workers import the factories by name
import _batched_children as children


def _fork_parallel(*args, **kwargs):
    return ParallelEnv(*args, mp_start_method="fork", **kwargs)


BATCHED = [SerialEnv, _fork_parallel]
IDS = ["serial", "parallel"]
STARTS = [{"start": 0}, {"start": 10}, {"start": 20}]


def _table_policy(actions: torch.Tensor):
    calls = iter(range(actions.shape[1]))
    return lambda td: td.set("action", actions[:, next(calls)])


@pytest.mark.parametrize("make", BATCHED, ids=IDS)
def test_unbuffered_rollout_equals_buffered(make):
    actions = torch.rand(3, 6, 1, generator=torch.Generator().manual_seed(0)) * 4 - 2
    rollouts = []
    for use_buffers in (True, False):
        env = make(3, PendulumEnv, use_buffers=use_buffers)
        try:
            env.set_seed(3)
            rollouts.append(env.rollout(6, _table_policy(actions)))
        finally:
            env.close()
    assert rollouts[0].batch_size == rollouts[1].batch_size == torch.Size([3, 6])
    assert (rollouts[0] == rollouts[1]).all()


@pytest.mark.parametrize("make", BATCHED, ids=IDS)
@pytest.mark.parametrize("use_buffers", [True, False])
def test_non_tensor_entries_and_partial_resets(make, use_buffers):
    env = make(3, children.NoteEnv, STARTS, use_buffers=use_buffers)
    try:
        td = env.reset()
        assert td.get("note").tolist() == [0, 10, 20]
        for _ in range(2):
            td["action"] = torch.zeros(3, 1)
            td = env.step_mdp(env.step(td))
        assert td.get("note").tolist() == [2, 12, 22]
        assert td["tensor"][:, 0].tolist() == [2.0, 12.0, 22.0]
        # partial reset with the state given: the reset workers restart, the other keeps its note
        partial = td.select("note").set("_reset", torch.tensor([True, False, True]))
        assert env.reset(partial).get("note").tolist() == [0, 12, 20]
        # partial reset with the mask alone: the others report the note they hold
        only_mask = TensorDict({"_reset": torch.tensor([False, True, False])}, [3])
        assert env.reset(only_mask).get("note").tolist() == [0, 10, 20]
        rollout = env.rollout(3)
        assert rollout.get(("next", "note")).tolist() == [[1, 2, 3], [11, 12, 13], [21, 22, 23]]
    finally:
        env.close()


@pytest.mark.parametrize("make", BATCHED, ids=IDS)
@pytest.mark.parametrize("use_buffers", [True, False])
def test_partial_steps(make, use_buffers):
    env = make(4, children.CountingPendulum, use_buffers=use_buffers)
    try:
        env.set_seed(0)
        td = env.reset()
        td["action"] = torch.ones(4, 1)
        td["_step"] = torch.tensor([False, True, False, True])
        out = env.step(td)
        assert list(env.steps) == [0, 1, 0, 1]
        # the workers that did not step carry their observation over, with no reward
        assert torch.equal(out["next", "observation"][[0, 2]], td["observation"][[0, 2]])
        assert not torch.equal(out["next", "observation"][[1, 3]], td["observation"][[1, 3]])
        assert out["next", "reward"][[0, 2]].eq(0).all()
        ref = SerialEnv(4, children.CountingPendulum)
        ref.set_seed(0)
        full = ref.step(ref.reset().set("action", torch.ones(4, 1)))
        assert torch.equal(out["next", "observation"][[1, 3]], full["next", "observation"][[1, 3]])
        ref.close()
        td["_step"] = torch.zeros(4, dtype=torch.bool)  # nobody steps
        out = env.step(td)
        assert list(env.steps) == [0, 1, 0, 1] and torch.equal(out["next", "observation"], td["observation"])
    finally:
        env.close()


@pytest.mark.parametrize("make", BATCHED, ids=IDS)
def test_unbuffered_view(make):
    env = make(4, children.CountingPendulum, use_buffers=False)
    try:
        env.reset()
        view = env[[1, 3]]
        assert view._use_buffers is False
        view.rand_step(view.reset())
        assert list(env.steps) == [0, 1, 0, 1]
    finally:
        env.close()
