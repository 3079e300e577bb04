"""Indexed views of batched envs, the sub-envs' attributes reached through them, update_kwargs and the
ParallelEnv options around them (serial_for_single, num_threads)."""

from __future__ import annotations

import gc
import os
import sys

import pytest
import torch
from rl_envs import PendulumEnv, check_env_specs
from rl_envs.batched import ParallelEnv, SerialEnv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # spawned workers import the factories by name
import _batched_children as children


def _fork_parallel(*args, **kwargs):
    return ParallelEnv(*args, mp_start_method="fork", **kwargs)


BATCHED = [SerialEnv, _fork_parallel]
IDS = ["serial", "parallel"]
INDEXES = [(2, [2]), (-1, [3]), (slice(1, 3), [1, 2]), ([0, 3], [0, 3]), (torch.tensor([1, 3]), [1, 3])]


def _action(n: int, value: float) -> torch.Tensor:
    return torch.full((n, 1), value)


@pytest.mark.parametrize("make", BATCHED, ids=IDS)
@pytest.mark.parametrize("item, selected", INDEXES)
def test_view_steps_only_its_workers_and_matches_the_sub_envs(make, item, selected):
    env = make(4, children.CountingPendulum)
    try:
        env.set_seed(7)
        first = env.reset()
        view = env[item]
        assert type(view) is type(env) and view.num_workers == len(selected)
        assert view.batch_size == torch.Size([len(selected)]) and not view.is_closed
        out = view.step(view.reset().set("action", _action(len(selected), 0.5)))
        assert list(env.steps) == [1 if i in selected else 0 for i in range(4)]
        assert list(view.steps) == [1] * len(selected)
        # the same values as each selected sub-env alone: worker i was seeded 7 + i and reset twice
        for row, i in enumerate(selected):
            ref = PendulumEnv()
            ref.set_seed(7 + i)
            ref_first = ref.reset()
            assert torch.equal(first["observation"][i], ref_first["observation"])
            ref_td = ref.reset().set("action", torch.full((1,), 0.5))
            assert torch.equal(out["next", "observation"][row], ref.step(ref_td)["next", "observation"])
        env.rand_step(first)  # the parent still runs all its workers
        assert list(env.steps) == [2 if i in selected else 1 for i in range(4)]
    finally:
        env.close()


@pytest.mark.parametrize("make", BATCHED, ids=IDS)
def test_view_of_a_view_and_partial_reset(make):
    env = make(4, children.CountingPendulum)
    try:
        env.reset()
        inner = env[1:][1:]  # workers 2 and 3
        assert inner.num_workers == 2
        inner.step(inner.reset().set("action", _action(2, 0.0)))
        assert list(env.steps) == [0, 0, 1, 1]
        check_env_specs(env[0:2])
        before = env.reset()["th"].clone()
        view = env[[1, 3]]
        after = view.reset(view.reset().exclude("th").set("_reset", torch.tensor([True, False])))
        now = env._buffer["th"]  # the parent's buffer holds what its workers last wrote
        assert now[0] == before[0] and now[2] == before[2]  # workers outside the view untouched
        assert now[3] == after["th"][1]
    finally:
        env.close()


@pytest.mark.parametrize("make", BATCHED, ids=IDS)
def test_view_close_semantics(make):
    env = make(3, children.CountingPendulum)
    env.reset()
    view = env[1:]
    view.close()
    assert view.is_closed and not env.is_closed
    env.rand_step(env.reset())
    with pytest.raises(RuntimeError, match="closed indexed env"):
        view.reset()
    view = env[:2]
    env.close()
    assert view.is_closed
    with pytest.raises(RuntimeError, match="parent environment has been closed"):
        view.reset()
    env.reset()  # the parent restarts; a view taken before still refuses (its workers are gone)
    with pytest.raises(RuntimeError, match="parent environment has been closed"):
        view.reset()
    fresh = env[:2]
    fresh.rand_step(fresh.reset())
    env.close()


@pytest.mark.parametrize("make", BATCHED, ids=IDS)
def test_view_keeps_its_parent_alive(make):
    env = make(2, children.CountingPendulum)
    env.reset()
    env = env[:1]
    gc.collect()
    assert env.num_workers == 1
    env.rand_step(env.reset())
    assert list(env.steps) == [1]
    env._parent.close()


@pytest.mark.parametrize("make", BATCHED, ids=IDS)
def test_bad_indexes(make):
    env = make(4, children.CountingPendulum)
    try:
        env.reset()
        for mask in (torch.ones(4, dtype=torch.bool), [True, False, True, False]):
            with pytest.raises((NotImplementedError, TypeError)):
                env[mask]
        with pytest.raises(NotImplementedError, match="Boolean masks"):
            env[torch.ones(4, dtype=torch.bool)]
        with pytest.raises(NotImplementedError, match="not evenly spaced"):
            env[[0, 1, 3]]
        with pytest.raises(NotImplementedError, match="not evenly spaced"):
            env[[3, 1]]
        with pytest.raises(IndexError, match=r"indices \[4\] out of range for 4 workers"):
            env[4]
        with pytest.raises(IndexError, match="selects no worker"):
            env[2:2]
        with pytest.raises(TypeError, match="expected an int, a slice or a sequence of ints"):
            env["a"]
        with pytest.raises(NotImplementedError, match="snapshot writeback"):
            env[0] = PendulumEnv()
        env.rand_step(env.reset())
    finally:
        env.close()


@pytest.mark.parametrize("make", BATCHED, ids=IDS)
def test_sub_env_attributes_and_methods(make):
    env = make(3, children.CountingPendulum)
    with pytest.raises(AttributeError):
        env.steps  # noqa: B018  (the sub-envs run only once started)
    try:
        root = env.reset()
        env.rand_step(root)
        assert list(env.steps) == [1, 1, 1] and len(env.steps) == 3 and env.steps[2] == 1
        assert env.scaled(5) == [5, 5, 5]
        assert list(env.nested.value) == [42, 42, 42]
        assert env.nested.get(plus=1) == [43, 43, 43]
        assert env[1:].scaled(2) == [2, 2]
        with pytest.raises(AttributeError):
            env.no_such_attribute  # noqa: B018
        with pytest.raises(AttributeError):
            env._steps_private  # noqa: B018  (private names are never forwarded)
        with pytest.raises((RuntimeError, ValueError), match="explode was called"):
            env.explode()
        env.rand_step(root)  # a failing call leaves the env running
        assert list(env.steps) == [2, 2, 2]
    finally:
        env.close()


def test_parallel_attribute_that_does_not_pickle_is_reported():
    env = _fork_parallel(2, children.CountingPendulum)
    try:
        env.reset()
        with pytest.raises(RuntimeError, match="worker 0 failed on"):
            list(env.unpicklable)
        assert list(env.steps) == [0, 0]
    finally:
        env.close()


@pytest.mark.parametrize("make", BATCHED, ids=IDS)
def test_update_kwargs(make):
    env = make(2, children.make_pendulum, [{"g": 9.0}, {"g": 9.5}])
    env.update_kwargs({"max_torque": 1.0})  # merged into each worker's arguments
    assert env.create_env_kwargs == [{"g": 9.0, "max_torque": 1.0}, {"g": 9.5, "max_torque": 1.0}]
    assert env.action_spec.high.reshape(2).tolist() == [1.0, 1.0]
    env.update_kwargs([{"g": 3.0}, {"g": 4.0}])
    env.reset()
    assert [float(p["params", "g"]) for p in env.gen_params()] == [3.0, 4.0]
    with pytest.raises(RuntimeError, match="close the env first"):
        env.update_kwargs({"g": 1.0})
    env.close()
    with pytest.raises(RuntimeError, match=r"len\(kwargs\) and num_workers mismatch"):
        env.update_kwargs([{"g": 1.0}])
    with pytest.raises(ValueError, match="batch size"):
        env.update_kwargs({"batch_size": [2]})
    assert env.create_env_kwargs == [{"g": 3.0, "max_torque": 1.0}, {"g": 4.0, "max_torque": 1.0}]


def test_single_task():
    assert SerialEnv(2, PendulumEnv)._single_task
    assert SerialEnv(2, [PendulumEnv, PendulumEnv])._single_task
    assert not SerialEnv(2, PendulumEnv, [{"g": 1.0}, {"g": 2.0}])._single_task


def test_parallel_num_threads_applies_when_workers_start():
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    env = _fork_parallel(1, children.make_pendulum, num_threads=target)
    try:
        assert torch.get_num_threads() == before
        env.reset()
        assert torch.get_num_threads() == target
    finally:
        env.close()
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="num_threads"):
        ParallelEnv(1, PendulumEnv, num_threads=0)
    assert ParallelEnv(1, PendulumEnv)._mp_start_method is None


def test_in_process_parallel_env_forwards_and_indexes():
    env = ParallelEnv(1, children.CountingPendulum, serial_for_single=True)
    try:
        env.rand_step(env.reset())
        assert type(env) is ParallelEnv and env._workers == []
        assert list(env.steps) == [1] and env.scaled(3) == [3]
        with pytest.raises(RuntimeError, match="explode was called"):  # reported as a worker's would be
            env.explode()
        view = env[0]
        view.rand_step(view.reset())
        assert list(env.steps) == [2]
    finally:
        env.close()
