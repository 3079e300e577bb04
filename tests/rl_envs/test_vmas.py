"""VmasEnv / VmasWrapper, checked against stepping the vmas envs directly with the same seed and actions."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

vmas = pytest.importorskip("vmas")
from rl_envs import check_env_specs
from rl_envs.libs._marl import (
    MarlGroupMapType,
    follows_prefix_convention,
    group_by_prefix,
    resolve_group_map,
)
from rl_envs.libs.vmas import VmasEnv, VmasWrapper, vmas_default_group_map
from tdict import TensorDict
from tdict.specs import Bounded, Categorical, OneHot, Unbounded

N = 3  # sub-envs in most tests


def _vmas_actions(env, td):
    """The per-agent action list (vmas order) a wrapper step sends, built by hand from a TensorDict."""
    out = [None] * env.n_agents
    for group, agents in env.group_map.items():
        action = td[group, "action"]
        if not env.continuous_actions and not env.categorical_actions:
            action = action.argmax(-1)
        for j, agent in enumerate(agents):
            out[env.agent_names.index(agent)] = action[:, j].clone()
    return out


def _random_actions(env, steps, seed=0):
    torch.manual_seed(seed)
    return [env.full_action_spec.rand() for _ in range(steps)]


def _replay_policy(actions):
    step = {"t": 0}

    def policy(td):
        td.update(actions[step["t"]].clone())
        step["t"] += 1
        return td

    return policy


# ---------------------------------------------------------------------------------------------- grouping
def test_default_group_map_follows_torchrl():
    assert vmas_default_group_map(["agent_0", "agent_1"]) == {"agents": ["agent_0", "agent_1"]}
    assert vmas_default_group_map(["adversary_0", "agent_0", "agent_1"]) == {
        "adversary": ["adversary_0"],
        "agents": ["agent_0", "agent_1"],
    }
    assert vmas_default_group_map(["eve_0", "bob_0", "alice_0"]) == {
        "eve": ["eve_0"],
        "bob": ["bob_0"],
        "alice": ["alice_0"],
    }
    # one name off the convention: everyone in "agents"
    assert vmas_default_group_map(["leader", "follower_0"]) == {"agents": ["leader", "follower_0"]}
    # "agent" is not renamed onto an existing "agents" group
    assert vmas_default_group_map(["agent_0", "agents_0"]) == {"agent": ["agent_0"], "agents": ["agents_0"]}
    # the generic helpers shared with PettingZoo
    assert group_by_prefix(["a_0", "a_1", "solo"]) == {"a": ["a_0", "a_1"], "solo": ["solo"]}
    assert follows_prefix_convention(["a_0", "b_12"]) and not follows_prefix_convention(["a_0", "b"])
    with pytest.raises(TypeError, match="MyEnv: group_map must be"):
        resolve_group_map(["a_0"], ["a_0"], group_by_prefix, "MyEnv")


def test_pettingzoo_names_still_importable():
    from rl_envs.libs import _marl, pettingzoo

    assert pettingzoo.MarlGroupMapType is _marl.MarlGroupMapType
    assert pettingzoo.check_marl_grouping is _marl.check_marl_grouping
    assert pettingzoo._default_group_map(["x_0", "x_1", "y"]) == {"x": ["x_0", "x_1"], "y": ["y"]}


@pytest.mark.parametrize(
    ("group_map", "expected"),
    [
        (None, {"adversary": ["adversary_0"], "agents": ["agent_0", "agent_1"]}),
        (MarlGroupMapType.ALL_IN_ONE_GROUP, None),  # heterogeneous observation sizes: an error
        (
            MarlGroupMapType.ONE_GROUP_PER_AGENT,
            {"adversary_0": ["adversary_0"], "agent_0": ["agent_0"], "agent_1": ["agent_1"]},
        ),
        (
            {"good": ["agent_1", "agent_0"], "bad": ["adversary_0"]},
            {"good": ["agent_1", "agent_0"], "bad": ["adversary_0"]},
        ),
    ],
)
def test_group_map_options(group_map, expected):
    if expected is None:
        with pytest.raises(ValueError, match="different observation spaces"):
            VmasEnv("simple_adversary", N, group_map=group_map, seed=0)
        return
    env = VmasEnv("simple_adversary", N, group_map=group_map, seed=0)
    assert env.group_map == expected
    td = env.rand_step(env.reset())
    raw = env.env.get_from_scenario(
        get_observations=True, get_rewards=True, get_infos=False, get_dones=False, dict_agent_names=True
    )
    for group, agents in expected.items():
        assert td["next", group].batch_size == (N, len(agents))
        for j, agent in enumerate(agents):  # each row holds its agent's data, in the group's order
            torch.testing.assert_close(td["next", group, "observation"][:, j], raw[0][agent])
            torch.testing.assert_close(td["next", group, "reward"][:, j], raw[1][agent])


# ---------------------------------------------------------------------------------------------- specs
@pytest.mark.parametrize("scenario", ["balance", "navigation", "simple_spread"])
@pytest.mark.parametrize(("continuous", "categorical"), [(True, True), (False, True), (False, False)])
def test_specs_match_vmas_spaces(scenario, continuous, categorical):
    env = VmasEnv(scenario, N, continuous_actions=continuous, categorical_actions=categorical, seed=0)
    raw = env.env
    n = raw.n_agents
    assert env.batch_size == (N,) and env.group_map == {"agents": [a.name for a in raw.agents]}
    obs = env.full_observation_spec["agents", "observation"]
    assert isinstance(obs, Unbounded) and obs.shape == (N, n, *raw.observation_space[0].shape)
    action = env.full_action_spec["agents", "action"]
    space = raw.action_space[0]
    if continuous:
        assert isinstance(action, Bounded) and action.shape == (N, n, *space.shape)
        torch.testing.assert_close(action.space.low[0, 0], torch.as_tensor(space.low))
        torch.testing.assert_close(action.space.high[0, 0], torch.as_tensor(space.high))
    elif categorical:
        assert isinstance(action, Categorical) and action.shape == (N, n) and action.n == space.n
    else:
        assert isinstance(action, OneHot) and action.shape == (N, n, space.n)
    assert env.full_reward_spec["agents", "reward"].shape == (N, n)
    for flag in ("done", "terminated", "truncated"):
        assert env.full_done_spec[flag].shape == (N,)
        assert env.full_done_spec["agents", flag].shape == (N, n)
        assert env.full_done_spec[flag].dtype is torch.bool
    info = raw.scenario.info(raw.agents[0])
    if info:
        assert sorted(env.full_observation_spec["agents", "info"].keys()) == sorted(info)
    else:
        assert "info" not in env.full_observation_spec["agents"]
    check_env_specs(env)


# ---------------------------------------------------------------------------------------------- values
@pytest.mark.parametrize("scenario", ["balance", "navigation", "simple_spread"])
@pytest.mark.parametrize(("continuous", "categorical"), [(True, True), (False, True), (False, False)])
def test_rollout_equals_stepping_vmas(scenario, continuous, categorical):
    steps, seed = 5, 7
    env = VmasEnv(scenario, N, continuous_actions=continuous, categorical_actions=categorical, seed=seed)
    actions = _random_actions(env, steps)
    rollout = env.rollout(steps, _replay_policy(actions), break_when_any_done=False)
    assert rollout.batch_size == (N, steps)

    raw = vmas.make_env(scenario, num_envs=N, continuous_actions=continuous, seed=seed, terminated_truncated=True)
    obs = raw.reset()
    names = [a.name for a in raw.agents]
    for t in range(steps):
        # the root of step t holds the observation the action was taken on
        torch.testing.assert_close(rollout["agents", "observation"][:, t], torch.stack(obs, 1))
        obs, rew, term, trunc, info = raw.step(_vmas_actions(env, actions[t]))
        nxt = rollout["next"][:, t]
        torch.testing.assert_close(nxt["agents", "observation"], torch.stack(obs, 1))
        torch.testing.assert_close(nxt["agents", "reward"], torch.stack(rew, 1))
        assert torch.equal(nxt["terminated"], term) and torch.equal(nxt["truncated"], trunc)
        assert torch.equal(nxt["done"], term | trunc)
        assert torch.equal(nxt["agents", "done"], (term | trunc).unsqueeze(-1).expand(N, len(names)))
        for key in info[0]:
            torch.testing.assert_close(nxt["agents", "info", key], torch.stack([i[key] for i in info], 1).float())


def test_one_hot_and_categorical_actions_give_the_same_rollout():
    cat = VmasEnv("navigation", N, continuous_actions=False, categorical_actions=True, seed=3, n_agents=2)
    actions = _random_actions(cat, 4)
    a = cat.rollout(4, _replay_policy(actions), break_when_any_done=False)
    hot = VmasEnv("navigation", N, continuous_actions=False, categorical_actions=False, seed=3, n_agents=2)
    one_hot = [
        TensorDict({("agents", "action"): torch.nn.functional.one_hot(x["agents", "action"], 9)}, [N]) for x in actions
    ]
    b = hot.rollout(4, _replay_policy(one_hot), break_when_any_done=False)
    assert torch.equal(b["agents", "action"].argmax(-1), a["agents", "action"])
    torch.testing.assert_close(a["next", "agents", "observation"], b["next", "agents", "observation"])
    torch.testing.assert_close(a["next", "agents", "reward"], b["next", "agents", "reward"])


def test_seeding_reproduces_resets():
    env = VmasEnv("navigation", N, seed=0, n_agents=2)
    assert env.set_seed(11) == 12  # one random state (vmas's): the next env's seed is seed + 1
    first = env.reset()["agents", "observation"]
    second = env.reset()["agents", "observation"]
    assert not torch.equal(first, second)  # resets draw fresh positions
    env.set_seed(11)
    torch.testing.assert_close(env.reset()["agents", "observation"], first)
    env.set_seed(None)  # leaves vmas's random state alone (vmas itself would seed 0): the sequence goes on
    torch.testing.assert_close(env.reset()["agents", "observation"], second)


# ---------------------------------------------------------------------------------------------- resets, max_steps
def test_max_steps_truncates_and_rollout_resets():
    env = VmasEnv("navigation", 2, max_steps=3, seed=0, n_agents=2)
    rollout = env.rollout(7, break_when_any_done=False)
    expected = [False, False, True, False, False, True, False]  # the counter restarts with each reset
    assert rollout["next", "truncated"].tolist() == [expected, expected]
    assert rollout["next", "done"].tolist() == [expected, expected]
    assert not rollout["next", "terminated"].any()
    assert torch.equal(
        rollout["next", "agents", "truncated"], rollout["next", "truncated"].unsqueeze(-1).expand(2, 7, 2)
    )
    # break_when_any_done stops at the first truncation
    assert env.rollout(7).batch_size == (2, 3)


def test_partial_reset_resets_only_flagged_envs():
    seed, n_envs = 5, 4
    env = VmasEnv("navigation", n_envs, max_steps=4, seed=seed, n_agents=2)
    actions = _random_actions(env, 2)
    td = env.reset()
    for a in actions:
        td.update(a)
        td = env.step(td)["next"].clone()
    before = td["agents", "observation"].clone()
    mask = torch.tensor([True, False, True, False])
    td["_reset"] = mask
    out = env.reset(td)
    assert "_reset" not in out
    assert torch.equal(out["agents", "observation"][~mask], before[~mask])

    # reference: the same calls on vmas directly
    raw = vmas.make_env("navigation", num_envs=n_envs, seed=seed, max_steps=4, terminated_truncated=True, n_agents=2)
    raw.reset()
    for a in actions:
        raw.step(_vmas_actions(env, a))
    for i in (0, 2):
        raw.reset_at(i)
    ref = torch.stack(raw.get_from_scenario(True, False, False, False, dict_agent_names=False)[0], 1)
    torch.testing.assert_close(out["agents", "observation"], ref)
    assert not torch.equal(out["agents", "observation"][mask], before[mask])

    # the step counters restarted only in envs 0 and 2: 2 more steps truncate envs 1 and 3 (4 steps), not 0 and 2
    for a in actions:
        out.update(a)
        out = env.step(out)["next"].clone()
    assert out["truncated"].tolist() == [False, True, False, True]


def test_group_reset_mask_and_its_errors():
    env = VmasEnv("navigation", N, seed=0, n_agents=2)
    td = env.rand_step(env.reset())["next"].clone()
    before = td["agents", "observation"].clone()
    td["agents", "_reset"] = torch.tensor([[False, False], [True, True], [False, False]])
    out = env.reset(td)
    assert torch.equal(out["agents", "observation"][[0, 2]], before[[0, 2]])
    assert not torch.equal(out["agents", "observation"][1], before[1])

    td["agents", "_reset"] = torch.tensor([[False, True], [False, False], [False, False]])
    with pytest.raises(ValueError, match=r"\('agents', '_reset'\) flags only some agents of sub-envs \[0\]"):
        env.reset(td)
    td = env.reset()
    td["_reset"] = torch.ones(N, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"'_reset' must have shape \[3\], got \[3, 2\]"):
        env.reset(td)
    td["_reset"] = torch.ones(N, 1, dtype=torch.bool)  # TorchRL's [N, 1] layout is read too
    assert not env.reset(td)["done"].any()


# ---------------------------------------------------------------------------------------------- wrapper
def test_wrapper_of_a_combined_done_dict_spaces_env():
    """terminated_truncated=False and dict_spaces=True (make_env's defaults are left to the user)."""
    raw = vmas.make_env("balance", num_envs=N, seed=2, max_steps=2, dict_spaces=True)
    env = VmasWrapper(raw)
    assert env.max_steps == 2 and env.continuous_actions
    actions = _random_actions(env, 3)
    rollout = env.rollout(3, _replay_policy(actions), break_when_any_done=False)
    ref_env = VmasEnv("balance", N, seed=2, max_steps=2)
    ref = ref_env.rollout(3, _replay_policy(actions), break_when_any_done=False)
    for key in [
        ("next", "agents", "observation"),
        ("next", "agents", "reward"),
        ("next", "truncated"),
        ("next", "terminated"),
        ("next", "agents", "info", "pos_rew"),
    ]:
        torch.testing.assert_close(rollout[key], ref[key])
    assert rollout["next", "truncated"][:, 1].all()
    check_env_specs(env)


def test_errors_name_the_argument():
    raw = vmas.make_env("balance", num_envs=2, seed=0)
    with pytest.raises(TypeError, match="env must be a vmas Environment"):
        VmasWrapper(object())
    with pytest.raises(ValueError, match="device 'meta' differs from the vmas env's device 'cpu'"):
        VmasWrapper(raw, device="meta")
    with pytest.raises(TypeError, match="categorical_actions must be a bool"):
        VmasWrapper(raw, categorical_actions=1)
    with pytest.raises(ValueError, match=r"group_map: agents \['agent_2'\] are in no group"):
        VmasWrapper(raw, group_map={"a": ["agent_0", "agent_1"]})
    with pytest.raises(ValueError, match="group name 'done' is reserved"):
        VmasWrapper(raw, group_map={"done": ["agent_0", "agent_1", "agent_2"]})
    with pytest.raises(ValueError, match="unknown scenario 'no_such_scenario'"):
        VmasEnv("no_such_scenario", 2)
    with pytest.raises(TypeError, match="scenario must be a scenario name or a vmas BaseScenario"):
        VmasEnv(3, 2)
    with pytest.raises(ValueError, match="num_envs must be a positive int, got 0"):
        VmasEnv("balance", 0)
    with pytest.raises(ValueError, match="max_steps must be a positive int or None, got 0"):
        VmasEnv("balance", 2, max_steps=0)
    with pytest.raises(TypeError, match="seed must be an int or None, got 'x'"):
        VmasEnv("balance", 2, seed="x")
    with pytest.raises(TypeError, match="continuous_actions must be a bool"):
        VmasEnv("balance", 2, continuous_actions="yes")
    with pytest.raises(TypeError, match=r"\['terminated_truncated'\] are set by VmasEnv"):
        VmasEnv("balance", 2, terminated_truncated=False)
    env = VmasEnv("balance", 2, seed=0)
    td = env.reset()
    td["agents", "action"] = torch.zeros(2, 3, 5)
    with pytest.raises(ValueError, match=r"action \('agents', 'action'\): expected shape \[2, 3, 2\]"):
        env.step(td)


def test_scenario_instance_and_repr():
    from vmas.scenarios.navigation import Scenario

    env = VmasEnv(Scenario(), 2, seed=0, n_agents=2)
    assert env.scenario_name == "navigation" and env.group_map == {"agents": ["agent_0", "agent_1"]}
    assert repr(env) == "VmasEnv(scenario=navigation, num_envs=2, groups={'agents': 2}, device=cpu)"
    assert "navigation" in env.available_envs and "simple_spread" in env.available_envs


def test_import_does_not_load_vmas():
    code = (
        "import sys, rl_envs, rl_envs.libs.vmas, rl_envs.libs.pettingzoo, rl_envs.libs._marl\n"
        "assert 'vmas' not in sys.modules, 'vmas was imported'\n"
        "assert 'pettingzoo' not in sys.modules, 'pettingzoo was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_step_counter_truncates_the_agents_group_too():
    from rl_envs import StepCounter, TransformedEnv

    env = TransformedEnv(VmasEnv("navigation", num_envs=2, n_agents=3, seed=0), StepCounter(5))
    rollout = env.rollout(5)
    assert rollout["next", "truncated"][:, -1].all() and not rollout["next", "truncated"][:, :-1].any()
    # per-agent flags follow the root's at the limit (per-agent GAE reads them), and not before
    assert rollout["next", "agents", "truncated"][:, -1].all() and rollout["next", "agents", "done"][:, -1].all()
    assert not rollout["next", "agents", "truncated"][:, :-1].any()
    # the flags set at the limit, by TorchRL's names
    assert env.transform.all_done_keys == ["done", ("agents", "done")]
    assert env.transform.all_truncated_keys == ["truncated", ("agents", "truncated")]
