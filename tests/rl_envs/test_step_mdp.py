"""step_mdp and MDPShift: the one time shift of the data contract."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict

from rl_envs import PendulumEnv, step_mdp
from rl_envs.mdp import MDPShift


def _step_td():
    return TensorDict(
        obs=torch.zeros(2, 3),
        action=torch.ones(2, 1),
        hidden=torch.full((2, 4), 7.0),
        done=torch.zeros(2, dtype=torch.bool),
        terminated=torch.zeros(2, dtype=torch.bool),
        next=TensorDict(
            obs=torch.ones(2, 3),
            reward=torch.tensor([1.0, 2.0]),
            done=torch.tensor([False, True]),
            terminated=torch.tensor([False, True]),
            batch_size=[2],
        ),
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
    # TorchRL 0.14.1's step_mdp on this input: done_keys defaults to "done" alone, so exclude_done
    # drops "done" and "terminated" comes from "next" (the expected keys were read off torchrl)
    td = _step_td()
    out = step_mdp(td, exclude_reward=exclude_reward, exclude_done=exclude_done, exclude_action=exclude_action)
    expected = {"hidden", "obs", "terminated"}
    expected |= set() if exclude_reward else {"reward"}
    expected |= set() if exclude_done else {"done"}
    expected |= set() if exclude_action else {"action"}
    assert set(out.keys()) == expected
    assert out["terminated"].tolist() == [False, True]  # never the root's stale flag
    if not exclude_reward:
        assert out["reward"].tolist() == [1.0, 2.0]
    if not exclude_done:
        assert out["done"].tolist() == [False, True]
    if not exclude_action:
        assert torch.equal(out["action"], torch.ones(2, 1))


@pytest.mark.parametrize("exclude_done", [True, False])
def test_exclude_flags_explicit_done_keys(exclude_done):
    # the done keys spelled explicitly as a list
    out = step_mdp(_step_td(), exclude_done=exclude_done, done_keys=["done", "terminated", "truncated"])
    assert ("done" in out.keys()) is (not exclude_done) and ("terminated" in out.keys()) is (not exclude_done)
    assert sorted(out.keys()) == (["hidden", "obs"] if exclude_done else ["done", "hidden", "obs", "terminated"])


def test_nested_keys():
    td = TensorDict(
        agents=TensorDict(obs=torch.zeros(2, 3, 4), action=torch.ones(2, 3), batch_size=[2, 3]),
        state=torch.zeros(2),
        next=TensorDict(
            agents=TensorDict(
                obs=torch.ones(2, 3, 4),
                reward=torch.ones(2, 3),
                done=torch.ones(2, 3, dtype=torch.bool),
                batch_size=[2, 3],
            ),
            state=torch.ones(2),
            batch_size=[2],
        ),
        batch_size=[2],
    )
    out = step_mdp(
        td, action_keys=[("agents", "action")], reward_keys=[("agents", "reward")], done_keys=[("agents", "done")]
    )
    assert sorted(out.keys(True, True), key=str) == sorted([("agents", "done"), ("agents", "obs"), "state"], key=str)
    assert torch.equal(out["agents", "obs"], torch.ones(2, 3, 4))
    assert torch.equal(out["state"], torch.ones(2))
    # writing into the new root's sub-TensorDict never reaches the recorded step
    out["agents", "obs"] = torch.full((2, 3, 4), 5.0)
    assert torch.equal(td["next", "agents", "obs"], torch.ones(2, 3, 4))
    out_keep_action = step_mdp(
        td,
        exclude_action=False,
        action_keys=[("agents", "action")],
        reward_keys=[("agents", "reward")],
        done_keys=[("agents", "done")],
    )
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


# ---------------------------------------------------------------------------------------------
# TorchRL 0.14.1 parity: the expected outputs below were produced by torchrl.envs.utils.step_mdp
# on the same inputs (bench env) and are written here literally.


def _leaves(td) -> dict:
    return {k: td.get(k).tolist() for k in sorted(td.keys(True, True), key=str)}


def _agents_step():
    return TensorDict(
        agents=TensorDict(obs=torch.zeros(2), action=torch.ones(2), batch_size=[2]),
        state=torch.zeros(()),
        done=torch.tensor(False),
        next=TensorDict(
            agents=TensorDict(
                obs=torch.ones(2), reward=torch.ones(2), done=torch.tensor([True, False]), batch_size=[2]
            ),
            state=torch.ones(()),
            done=torch.tensor(False),
            reward=torch.tensor(3.0),
        ),
    )


def test_nested_action_kept_with_default_action_key():
    # only "action" is excluded by default: the agents' own action stays, and so does their reward
    out = step_mdp(_agents_step())
    assert _leaves(out) == {
        ("agents", "action"): [1.0, 1.0],
        ("agents", "done"): [True, False],
        ("agents", "obs"): [1.0, 1.0],
        ("agents", "reward"): [1.0, 1.0],
        "done": False,
        "state": 1.0,
    }
    assert out["agents"].batch_size == torch.Size([2])


_NESTED = dict(
    action_keys=[("agents", "action")], reward_keys=[("agents", "reward")], done_keys=[("agents", "done"), "done"]
)


@pytest.mark.parametrize("keep_other", [True, False])
def test_nested_action_kept_when_not_excluded(keep_other):
    out = step_mdp(_agents_step(), keep_other=keep_other, exclude_action=False, **_NESTED)
    assert _leaves(out) == {
        ("agents", "action"): [1.0, 1.0],
        ("agents", "done"): [True, False],
        ("agents", "obs"): [1.0, 1.0],
        "done": False,
        "reward": 3.0,
        "state": 1.0,
    }
    assert out["agents"].batch_size == torch.Size([2])


def test_keep_other_false_keeps_a_kept_action():
    td = TensorDict(
        obs=torch.zeros(()),
        action=torch.ones(()),
        hidden=torch.tensor(7.0),
        done=torch.tensor(False),
        next=TensorDict(obs=torch.ones(()), reward=torch.tensor(2.0), done=torch.tensor(True)),
    )
    assert _leaves(step_mdp(td, keep_other=False, exclude_action=False)) == {"action": 1.0, "done": True, "obs": 1.0}
    assert _leaves(step_mdp(td, keep_other=False)) == {"done": True, "obs": 1.0}


def test_nested_exclude_done_drops_root_and_group_flags():
    out = step_mdp(_agents_step(), exclude_done=True, **_NESTED)
    assert _leaves(out) == {("agents", "obs"): [1.0, 1.0], "reward": 3.0, "state": 1.0}


def test_no_empty_sub_tensordicts_left_behind():
    td = TensorDict(
        obs=torch.zeros(()),
        agents=TensorDict(action=torch.ones(2), batch_size=[2]),
        next=TensorDict(
            obs=torch.ones(()), done=torch.tensor(False), agents=TensorDict(reward=torch.ones(2), batch_size=[2])
        ),
    )
    keys = dict(action_keys=[("agents", "action")], reward_keys=[("agents", "reward")])
    out = step_mdp(td, **keys)
    assert sorted(out.keys()) == ["done", "obs"]  # "agents" held only the action and the reward
    out = step_mdp(td, exclude_action=False, **keys)
    assert _leaves(out) == {("agents", "action"): [1.0, 1.0], "done": False, "obs": 1.0}
    # the env's cached shift (flat keys) drops an empty group as well
    td = TensorDict(
        obs=torch.zeros(()), empty=TensorDict(), next=TensorDict(obs=torch.ones(()), done=torch.tensor(False))
    )
    assert sorted(MDPShift(done_keys=["done"])(td).keys()) == ["done", "obs"]


def _heterogeneous_stack():
    from tdict import lazy_stack

    steps = [
        TensorDict(
            obs=torch.zeros(n),
            action=torch.ones(()),
            next=TensorDict(obs=torch.full((n,), float(n)), reward=torch.tensor(1.0), done=torch.tensor(False)),
        )
        for n in (2, 3)
    ]
    return lazy_stack(steps, 0)


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({}, [{"done": False, "obs": [2.0, 2.0]}, {"done": False, "obs": [3.0, 3.0, 3.0]}]),
        (
            {"exclude_done": True, "exclude_reward": False},
            [{"obs": [2.0, 2.0], "reward": 1.0}, {"obs": [3.0, 3.0, 3.0], "reward": 1.0}],
        ),
        (
            {"keep_other": False, "exclude_action": False},
            [{"action": 1.0, "done": False, "obs": [2.0, 2.0]}, {"action": 1.0, "done": False, "obs": [3.0, 3.0, 3.0]}],
        ),
    ],
)
def test_lazy_stack_of_mixed_shapes(kwargs, expected):
    from tdict import LazyStackedTensorDict

    td = _heterogeneous_stack()
    out = step_mdp(td, **kwargs)
    assert isinstance(out, LazyStackedTensorDict) and out.stack_dim == 0 and out.batch_size == torch.Size([2])
    assert [_leaves(m) for m in out.tensordicts] == expected
    assert td.tensordicts[0]["obs"].tolist() == [0.0, 0.0]  # the input is not modified


def test_inputs_never_modified():
    td = _agents_step()
    before = _leaves(td)
    out = step_mdp(td, exclude_action=False, **_NESTED)
    out["agents", "obs"] += 10  # in place on the new root's tensor: a view of "next" (as TorchRL)
    out.set(("agents", "extra"), torch.zeros(2))
    assert ("agents", "extra") not in td.keys(True) and ("next", "agents", "extra") not in td.keys(True)
    assert sorted(_leaves(td), key=str) == sorted(before, key=str)


def test_make_composite_from_td_describes_every_entry():
    from tdict import NonTensorData
    from tdict.specs import NonTensor

    from rl_envs.utils import make_composite_from_td

    data = TensorDict(
        obs=torch.randn(5, 3),
        action=torch.zeros(5, 2, dtype=torch.int32),
        next=TensorDict(reward=torch.randn(5), batch_size=[5]),
        batch_size=[5],
    )
    data["label"] = NonTensorData("a string!", batch_size=[5])
    spec = make_composite_from_td(data)
    assert spec.shape == (5,)
    assert spec["obs"].shape == (5, 3) and spec["obs"].dtype == torch.float32
    assert spec["action"].dtype == torch.int32
    assert spec["next", "reward"].shape == (5,)
    assert isinstance(spec["label"], NonTensor) and spec["label"].example_data == "a string!"
    zero = spec.zero()
    assert (zero["obs"] == 0).all() and zero["action"].shape == (5, 2)
    scalar = TensorDict(reward=torch.tensor(1.0))
    assert make_composite_from_td(scalar)["reward"].shape == (1,)  # TorchRL's default
    assert make_composite_from_td(scalar, unsqueeze_null_shapes=False)["reward"].shape == ()
    with pytest.raises(ValueError, match="dynamic_shape=True is not supported"):
        make_composite_from_td(data, dynamic_shape=True)


def test_step_mdp_of_a_heterogeneous_lazy_stack_copies_member_by_member():
    from tdict import lazy_stack

    members = [
        TensorDict({"obs": torch.full((k,), float(k)), "next": {"obs": torch.full((k,), 10.0 + k)}}, []) for k in (2, 3)
    ]
    td = lazy_stack(members, 0)
    out = step_mdp(td)
    assert [m["obs"].tolist() for m in out.tensordicts] == [[12.0, 12.0], [13.0, 13.0, 13.0]]
    # a heterogeneous group nested in a plain root (agents of different shapes): copied member by member
    agents = lazy_stack([TensorDict({"obs": torch.zeros(k)}, []) for k in (2, 3)], 0)
    next_agents = lazy_stack([TensorDict({"obs": torch.ones(k)}, []) for k in (2, 3)], 0)
    root = TensorDict({"agents": agents, "next": TensorDict({"agents": next_agents}, [])}, [])
    out = step_mdp(root, reward_keys=[("agents", "reward")])  # a nested excluded key: the general path
    assert [m["obs"].tolist() for m in out["agents"].tensordicts] == [[1.0, 1.0], [1.0, 1.0, 1.0]]
