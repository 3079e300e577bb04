"""step_mdp and MDPShift: the one time shift of the data contract."""
from __future__ import annotations

import pytest
import torch
from tdict import TensorDict

from rl_envs import PendulumEnv, step_mdp
from rl_envs.mdp import MDPShift


def _step_td():
    return TensorDict(
        obs=torch.zeros(2, 3), action=torch.ones(2, 1), hidden=torch.full((2, 4), 7.0),
        done=torch.zeros(2, dtype=torch.bool), terminated=torch.zeros(2, dtype=torch.bool),
        next=TensorDict(obs=torch.ones(2, 3), reward=torch.tensor([1.0, 2.0]),
                        done=torch.tensor([False, True]), terminated=torch.tensor([False, True]), batch_size=[2]),
        batch_size=[2],
    )


def test_default_moves_next_to_root():
    td = _step_td()
    out = step_mdp(td)
    assert sorted(out.keys()) == ["done", "hidden", "obs", "terminated"]
    assert torch.equal(out["obs"], torch.ones(2, 3))
    assert out["done"].tolist() == [False, True]  # the new root's done flags come from "next"
    assert torch.equal(out["hidden"], td["hidden"])
    assert out.batch_size == torch.Size([2])
    assert "next" in td.keys()  # the input is not modified


def test_keep_other_false():
    out = step_mdp(_step_td(), keep_other=False)
    assert sorted(out.keys()) == ["done", "obs", "terminated"]


@pytest.mark.parametrize("exclude_reward", [True, False])
@pytest.mark.parametrize("exclude_done", [True, False])
@pytest.mark.parametrize("exclude_action", [True, False])
def test_exclude_flags(exclude_reward, exclude_done, exclude_action):
    td = _step_td()
    out = step_mdp(td, exclude_reward=exclude_reward, exclude_done=exclude_done, exclude_action=exclude_action)
    keys = set(out.keys())
    assert ("reward" in keys) is (not exclude_reward)
    assert ("done" in keys) is (not exclude_done) and ("terminated" in keys) is (not exclude_done)
    assert ("action" in keys) is (not exclude_action)
    if not exclude_reward:
        assert out["reward"].tolist() == [1.0, 2.0]
    if not exclude_done:
        assert out["done"].tolist() == [False, True]  # never the root's stale flag
    if not exclude_action:
        assert torch.equal(out["action"], torch.ones(2, 1))


@pytest.mark.parametrize("exclude_done", [True, False])
def test_exclude_flags_explicit_done_keys(exclude_done):
    # the done keys spelled explicitly as a list
    out = step_mdp(_step_td(), exclude_done=exclude_done, done_keys=["done", "terminated", "truncated"])
    assert ("done" in out.keys()) is (not exclude_done) and ("terminated" in out.keys()) is (not exclude_done)


def test_nested_keys():
    td = TensorDict(
        agents=TensorDict(obs=torch.zeros(2, 3, 4), action=torch.ones(2, 3), batch_size=[2, 3]),
        state=torch.zeros(2),
        next=TensorDict(
            agents=TensorDict(obs=torch.ones(2, 3, 4), reward=torch.ones(2, 3), done=torch.ones(2, 3, dtype=torch.bool),
                              batch_size=[2, 3]),
            state=torch.ones(2),
            batch_size=[2],
        ),
        batch_size=[2],
    )
    out = step_mdp(td, action_keys=[("agents", "action")], reward_keys=[("agents", "reward")],
                   done_keys=[("agents", "done")])
    assert sorted(out.keys(True, True), key=str) == sorted([("agents", "done"), ("agents", "obs"), "state"], key=str)
    assert torch.equal(out["agents", "obs"], torch.ones(2, 3, 4))
    assert torch.equal(out["state"], torch.ones(2))
    # writing into the new root's sub-TensorDict never reaches the recorded step
    out["agents", "obs"] = torch.full((2, 3, 4), 5.0)
    assert torch.equal(td["next", "agents", "obs"], torch.ones(2, 3, 4))
    out_keep_action = step_mdp(td, exclude_action=False, action_keys=[("agents", "action")],
                               reward_keys=[("agents", "reward")], done_keys=[("agents", "done")])
    assert torch.equal(out_keep_action["agents", "action"], torch.ones(2, 3))


def test_next_tensordict_written_in_place():
    td = _step_td()
    dest = TensorDict(obs=torch.full((2, 3), -1.0), batch_size=[2])
    out = step_mdp(td, next_tensordict=dest)
    assert out is dest
    assert torch.equal(dest["obs"], torch.ones(2, 3))
    assert dest["done"].tolist() == [False, True]


def test_missing_next_raises():
    with pytest.raises(KeyError, match="'next'"):
        step_mdp(TensorDict(obs=torch.zeros(2), batch_size=[]))


def test_mdpshift_matches_step_mdp_on_env_data():
    env = PendulumEnv(batch_size=[3], seed=0)
    td = env.rand_step(env.reset())
    shift = MDPShift(env.action_keys, env.reward_keys, env.done_keys)
    a, b = shift(td), step_mdp(td, reward_keys=env.reward_keys, done_keys=env.done_keys, action_keys=env.action_keys)
    assert sorted(a.keys(True, True), key=str) == sorted(b.keys(True, True), key=str)
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key])
    assert torch.equal(a["th"], td["next", "th"])


def test_step_mdp_chains_with_env_step():
    env = PendulumEnv(seed=1)
    td = env.reset()
    th = [td["th"].item()]
    for _ in range(3):
        td = env.rand_step(td)
        th.append(td["next", "th"].item())
        td = step_mdp(td)
        assert td["th"].item() == th[-1]
