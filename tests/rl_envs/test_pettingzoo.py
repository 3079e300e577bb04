"""PettingZooEnv / PettingZooWrapper, checked against stepping the PettingZoo envs directly."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

pettingzoo = pytest.importorskip("pettingzoo")
mpe2 = pytest.importorskip("mpe2")
from gymnasium import spaces
from mpe2 import simple_spread_v3
from rl_envs import check_env_specs, step_mdp
from rl_envs.libs.pettingzoo import (
    MarlGroupMapType,
    PettingZooEnv,
    PettingZooWrapper,
    _default_group_map,
    check_marl_grouping,
)
from tdict.specs import Bounded, Categorical, OneHot, Unbounded


# ---------------------------------------------------------------------------------------------- toy env
class DyingParallelEnv(pettingzoo.ParallelEnv):
    """Two agents ``a_0``, ``a_1``; obs = [t, agent index]; reward = action; info score = 10 * t.

    ``a_1`` terminates at t == ``die_at`` and leaves; everyone left is truncated at t == ``max_t``.
    """

    metadata = {"name": "dying_v0"}  # noqa: RUF012

    def __init__(self, die_at=2, max_t=4, odd_obs=False):
        self.possible_agents = ["a_0", "a_1"]
        self.die_at, self.max_t, self.odd_obs = die_at, max_t, odd_obs

    def observation_space(self, agent):
        if self.odd_obs and agent == "a_1":
            return spaces.Box(-np.inf, np.inf, (3,), np.float32)
        return spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def _obs(self, agent):
        return np.array([self.t, self.possible_agents.index(agent)], np.float32)

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {"score": 0.0, "name": "x"} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.t += 1
        obs = {a: self._obs(a) for a in self.agents}
        rewards = {a: float(actions[a]) for a in self.agents}
        terms = {a: a == "a_1" and self.t >= self.die_at for a in self.agents}
        truncs = {a: self.t >= self.max_t for a in self.agents}
        infos = {a: {"score": 10.0 * self.t} for a in self.agents}
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, infos


def _actions_policy(actions):
    """Writes ``actions[t][group]`` at step t."""
    step = {"t": 0}

    def policy(td):
        for group, value in actions[step["t"]].items():
            td.set((group, "action"), value.clone())
        step["t"] += 1
        return td

    return policy


# ---------------------------------------------------------------------------------------------- grouping
def test_default_group_map():
    names = ["adversary_0", "agent_0", "agent_1", "alice", "my_team_3", "x_y"]
    assert _default_group_map(names) == {
        "adversary": ["adversary_0"],
        "agent": ["agent_0", "agent_1"],
        "alice": ["alice"],
        "my_team": ["my_team_3"],
        "x_y": ["x_y"],
    }
    assert MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(names[:2]) == {"agents": names[:2]}
    assert MarlGroupMapType.ONE_GROUP_PER_AGENT.get_group_map(names[:2]) == {n: [n] for n in names[:2]}


@pytest.mark.parametrize(
    ("group_map", "match"),
    [
        ({"g": ["a"]}, r"agents \['b'\] are in no group"),
        ({"g": ["a", "b"], "h": ["b"]}, "'b' is in two groups"),
        ({"g": ["a", "b", "c"]}, "'c' is not an agent"),
        ({"done": ["a", "b"]}, "'done' is reserved"),
        ({"g": []}, r"group_map\['g'\]: expected a non-empty list"),
    ],
)
def test_check_marl_grouping_errors(group_map, match):
    with pytest.raises(ValueError, match=match):
        check_marl_grouping(group_map, ["a", "b"])


# ---------------------------------------------------------------------------------------------- simple_spread
@pytest.mark.parametrize("categorical", [True, False])
def test_parallel_specs_match_spaces(categorical):
    env = PettingZooEnv("simple_spread_v3", parallel=True, N=3, max_cycles=5, categorical_actions=categorical)
    ref = simple_spread_v3.parallel_env(N=3, max_cycles=5)
    obs_space, act_space = ref.observation_space("agent_0"), ref.action_space("agent_0")
    obs = env.full_observation_spec["agent", "observation"]
    assert isinstance(obs, Unbounded) and obs.shape == (3, *obs_space.shape) and obs.dtype == torch.float32
    action = env.full_action_spec["agent", "action"]
    if categorical:
        assert isinstance(action, Categorical) and action.shape == (3,) and action.n == act_space.n
    else:
        assert isinstance(action, OneHot) and action.shape == (3, act_space.n)
    assert env.full_reward_spec["agent", "reward"].shape == (3,)
    for key in ("done", "terminated", "truncated"):
        assert env.full_done_spec["agent", key].shape == (3,)
        assert env.full_done_spec[key].shape == ()
    assert set(env.done_keys) == {
        "done",
        "terminated",
        "truncated",
        ("agent", "done"),
        ("agent", "terminated"),
        ("agent", "truncated"),
    }
    assert env.batch_size == torch.Size([])


def test_parallel_rollout_equals_pettingzoo():
    steps, seed = 6, 3
    gen = torch.Generator().manual_seed(0)
    actions = [{"agent": torch.randint(0, 5, (3,), generator=gen)} for _ in range(steps)]
    env = PettingZooEnv("simple_spread_v3", parallel=True, N=3, max_cycles=steps, return_state=True)
    env.set_seed(seed)
    rollout = env.rollout(steps + 5, _actions_policy(actions))
    assert rollout.batch_size == torch.Size([steps])  # truncated after max_cycles, on any agent done

    ref = simple_spread_v3.parallel_env(N=3, max_cycles=steps)
    obs, _ = ref.reset(seed=seed)
    names = ["agent_0", "agent_1", "agent_2"]
    for t in range(steps):
        expected = torch.as_tensor(np.stack([obs[a] for a in names]))
        torch.testing.assert_close(rollout["agent", "observation"][t], expected)
        torch.testing.assert_close(rollout["state"][t], torch.as_tensor(ref.state()))
        obs, rewards, terms, truncs, _ = ref.step({a: int(actions[t]["agent"][i]) for i, a in enumerate(names)})
        torch.testing.assert_close(
            rollout["next", "agent", "observation"][t], torch.as_tensor(np.stack([obs[a] for a in names]))
        )
        torch.testing.assert_close(
            rollout["next", "agent", "reward"][t], torch.tensor([rewards[a] for a in names], dtype=torch.float32)
        )
        assert rollout["next", "agent", "truncated"][t].tolist() == [truncs[a] for a in names]
        assert rollout["next", "agent", "terminated"][t].tolist() == [terms[a] for a in names]
        assert bool(rollout["next", "done"][t]) == any(truncs.values())
    assert rollout["next", "agent", "done"][-1].all() and not rollout["next", "agent", "done"][:-1].any()


def test_aec_rollout_equals_pettingzoo():
    cycles, seed, n = 2, 5, 2
    steps = cycles * n
    gen = torch.Generator().manual_seed(1)
    actions = [{"agent": torch.randint(0, 5, (n,), generator=gen)} for _ in range(steps)]
    env = PettingZooEnv("simple_spread_v3", parallel=False, N=n, max_cycles=cycles, use_mask=True)
    env.set_seed(seed)
    rollout = env.rollout(steps + 3, _actions_policy(actions))
    assert rollout.batch_size == torch.Size([steps])

    ref = simple_spread_v3.env(N=n, max_cycles=cycles)
    ref.reset(seed=seed)
    names = ["agent_0", "agent_1"]
    for t in range(steps):
        acting = ref.agent_selection
        assert rollout["agent", "mask"][t].tolist() == [a == acting for a in names]
        torch.testing.assert_close(
            rollout["agent", "observation"][t], torch.as_tensor(np.stack([ref.observe(a) for a in names]))
        )
        ref.step(int(actions[t]["agent"][names.index(acting)]))  # the other agent's action is ignored
        torch.testing.assert_close(
            rollout["next", "agent", "observation"][t], torch.as_tensor(np.stack([ref.observe(a) for a in names]))
        )
        torch.testing.assert_close(
            rollout["next", "agent", "reward"][t], torch.tensor([ref.rewards[a] for a in names], dtype=torch.float32)
        )
        assert rollout["next", "agent", "truncated"][t].tolist() == [ref.truncations[a] for a in names]
        # AEC default: the root is done when all agents are
        assert bool(rollout["next", "done"][t]) == all(ref.truncations[a] or ref.terminations[a] for a in names)
    assert rollout["next", "done"][-1] and not rollout["next", "done"][:-1].any()


def test_seeding_reproduces_and_differs():
    env = PettingZooEnv("simple_spread_v3", parallel=True, N=2, max_cycles=3)
    env.set_seed(7)
    first = env.reset()["agent", "observation"].clone()
    env.set_seed(7)
    assert torch.equal(env.reset()["agent", "observation"], first)
    assert not torch.equal(env.reset()["agent", "observation"], first)  # unseeded resets continue the RNG
    seeded = PettingZooEnv("simple_spread_v3", parallel=True, N=2, max_cycles=3, seed=7)
    assert torch.equal(seeded.reset()["agent", "observation"], first)


@pytest.mark.parametrize(
    ("group_map", "expected"),
    [
        (MarlGroupMapType.ALL_IN_ONE_GROUP, {"agents": [0, 1, 2]}),
        (MarlGroupMapType.ONE_GROUP_PER_AGENT, {"agent_0": [0], "agent_1": [1], "agent_2": [2]}),
        ({"first": ["agent_2"], "rest": ["agent_0", "agent_1"]}, {"first": [2], "rest": [0, 1]}),
    ],
)
def test_group_maps_give_the_same_data(group_map, expected):
    default = PettingZooEnv("simple_spread_v3", parallel=True, N=3, max_cycles=3, seed=1)
    grouped = PettingZooEnv("simple_spread_v3", parallel=True, N=3, max_cycles=3, seed=1, group_map=group_map)
    assert set(grouped.group_map) == set(expected)
    actions = torch.tensor([[1, 2, 3], [4, 0, 1], [2, 2, 2]])
    ref = default.rollout(3, _actions_policy([{"agent": a} for a in actions]))
    out = grouped.rollout(3, _actions_policy([{g: a[idx] for g, idx in expected.items()} for a in actions]))
    for group, idx in expected.items():
        assert grouped.full_observation_spec[group, "observation"].shape == (len(idx), 18)
        torch.testing.assert_close(out[group, "observation"], ref["agent", "observation"][:, idx])
        torch.testing.assert_close(out["next", group, "reward"], ref["next", "agent", "reward"][:, idx])
    check_env_specs(grouped)


def test_one_hot_actions_equal_categorical():
    idx = torch.tensor([[0, 4], [3, 1], [2, 2]])
    cat = PettingZooEnv("simple_spread_v3", parallel=True, N=2, max_cycles=3, seed=2)
    hot = PettingZooEnv("simple_spread_v3", parallel=True, N=2, max_cycles=3, seed=2, categorical_actions=False)
    a = cat.rollout(3, _actions_policy([{"agent": i} for i in idx]))
    b = hot.rollout(3, _actions_policy([{"agent": torch.nn.functional.one_hot(i, 5)} for i in idx]))
    assert b["agent", "action"].shape == (3, 2, 5)
    torch.testing.assert_close(a["next", "agent", "observation"], b["next", "agent", "observation"])
    torch.testing.assert_close(a["next", "agent", "reward"], b["next", "agent", "reward"])


@pytest.mark.parametrize("parallel", [True, False])
def test_check_env_specs_simple_spread(parallel):
    env = PettingZooEnv(
        "simple_spread_v3",
        parallel=parallel,
        N=2,
        max_cycles=2,
        use_mask=True,
        return_state=True,
        categorical_actions=parallel,
    )
    check_env_specs(env, seed=0)
    mask = env.rollout(4)["agent", "mask"]
    if parallel:
        assert mask.all()
    else:
        assert mask.sum(-1).eq(1).all()  # exactly one agent acts


# ---------------------------------------------------------------------------------------------- classic game
def test_tictactoe_action_masks_and_values(specs_truthful):
    pytest.importorskip("pettingzoo.classic.tictactoe_v3")
    from pettingzoo.classic import tictactoe_v3

    env = PettingZooEnv("tictactoe_v3", parallel=False, use_mask=True, seed=0)
    assert env.group_map == {"player": ["player_1", "player_2"]}
    board = env.full_observation_spec["player", "observation", "observation"]
    assert isinstance(board, Bounded) and board.shape == (2, 3, 3, 2) and board.dtype == torch.int8
    assert env.full_observation_spec["player", "action_mask"].shape == (2, 9)

    def first_legal(td):  # the first legal cell for each player (the mask is all True for the waiting one)
        return td.set(("player", "action"), td["player", "action_mask"].int().argmax(-1))

    rollout = env.rollout(20, first_legal)
    ref = tictactoe_v3.env()
    ref.reset(seed=0)
    names = ["player_1", "player_2"]
    for t in range(rollout.batch_size[0]):
        acting = ref.agent_selection
        row = names.index(acting)
        assert rollout["player", "mask"][t].tolist() == [a == acting for a in names]
        legal = torch.as_tensor(ref.observe(acting)["action_mask"]).bool()
        assert torch.equal(rollout["player", "action_mask"][t, row], legal)
        assert rollout["player", "action_mask"][t, 1 - row].all()
        assert torch.equal(
            rollout["player", "observation", "observation"][t, row], torch.as_tensor(ref.observe(acting)["observation"])
        )
        ref.step(int(legal.int().argmax()))
        torch.testing.assert_close(
            rollout["next", "player", "reward"][t], torch.tensor([float(ref.rewards[a]) for a in names])
        )
        assert rollout["next", "player", "terminated"][t].tolist() == [ref.terminations[a] for a in names]
    # first-legal play: player_1 fills the left column and wins at its 4th move
    assert rollout.batch_size[0] == 7 and rollout["next", "done"][-1]
    assert rollout["next", "player", "reward"][-1].tolist() == [1.0, -1.0]
    specs_truthful(env, rollout, check_action=False)  # the action mask moved on since the early steps

    # random actions drawn from the spec follow the mask: no illegal-move penalty ever ends the game early
    torch.manual_seed(0)
    for _ in range(3):
        r = env.rollout(20)
        for t in range(r.batch_size[0]):
            row = int(r["player", "mask"][t].int().argmax())
            assert r["player", "action_mask"][t, row, r["player", "action"][t, row]]


# ---------------------------------------------------------------------------------------------- dead agents
@pytest.mark.parametrize("done_on_any", [False, True])
def test_dead_agent_keeps_last_obs_and_is_masked(done_on_any):
    env = PettingZooWrapper(DyingParallelEnv(die_at=2, max_t=4), use_mask=True, done_on_any=done_on_any)
    assert env.group_map == {"a": ["a_0", "a_1"]}
    assert env.full_observation_spec["a", "info", "score"].shape == (2,)  # the string info entry is skipped
    td, steps = env.reset(), []
    for _ in range(4):  # stepped by hand: a rollout would stop (or reset) at the first root done
        td.set(("a", "action"), torch.tensor([1, 2]))
        steps.append(env.step(td).clone())
        td = step_mdp(td, reward_keys=env.reward_keys, action_keys=env.action_keys, done_keys=env.done_keys)
    rollout = torch.stack(steps, 0)
    assert rollout["next", "a", "done"].tolist() == [[False, False], [False, True], [False, True], [True, True]]
    assert rollout["next", "a", "terminated"][:, 1].tolist() == [False, True, True, True]
    # a_1 left at t=2: its observation stays [2, 1], its reward is 0, its mask is False
    assert rollout["next", "a", "observation"][:, 1].tolist() == [[1, 1], [2, 1], [2, 1], [2, 1]]
    assert rollout["next", "a", "observation"][:, 0, 0].tolist() == [1, 2, 3, 4]
    assert rollout["next", "a", "reward"].tolist() == [[1, 2], [1, 2], [1, 0], [1, 0]]
    assert rollout["next", "a", "mask"].tolist() == [[True, True], [True, False], [True, False], [False, False]]
    assert rollout["next", "a", "info", "score"].tolist() == [[10, 10], [20, 20], [30, 0], [40, 0]]
    assert rollout["next", "a", "truncated"].tolist() == [[False, False], [False, False], [False, False], [True, False]]
    root = [False, True, True, True] if done_on_any else [False, False, False, True]
    assert rollout["next", "done"].tolist() == root


def test_dead_agent_ends_episode_with_done_on_any():
    env = PettingZooWrapper(DyingParallelEnv(die_at=2, max_t=4))
    assert env.done_on_any  # the parallel default
    assert env.rollout(10).batch_size == torch.Size([2])
    check_env_specs(env)


# ---------------------------------------------------------------------------------------------- errors
def test_errors_name_the_argument():
    with pytest.raises(TypeError, match="env must be a pettingzoo AECEnv or ParallelEnv"):
        PettingZooWrapper(object())
    with pytest.raises(ValueError, match="different observation spaces"):
        PettingZooWrapper(DyingParallelEnv(odd_obs=True))
    PettingZooWrapper(DyingParallelEnv(odd_obs=True), group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT)
    with pytest.raises(ValueError, match="agents \\['a_1'\\] are in no group"):
        PettingZooWrapper(DyingParallelEnv(), group_map={"g": ["a_0"]})
    with pytest.raises(TypeError, match="group_map must be a dict"):
        PettingZooWrapper(DyingParallelEnv(), group_map=["a_0", "a_1"])
    with pytest.raises(TypeError, match="done_on_any must be a bool"):
        PettingZooWrapper(DyingParallelEnv(), done_on_any="any")
    with pytest.raises(TypeError, match="seed must be an int"):
        PettingZooWrapper(DyingParallelEnv(), seed=1.5)
    with pytest.raises(TypeError, match="use_mask must be a bool"):
        PettingZooWrapper(DyingParallelEnv(), use_mask=1)
    with pytest.raises(ValueError, match="unknown task 'nope_v0'"):
        PettingZooEnv("nope_v0", parallel=True)
    with pytest.raises(TypeError, match="parallel must be a bool"):
        PettingZooEnv("simple_spread_v3", parallel="yes")
    env = PettingZooEnv("simple_spread_v3", parallel=True, N=2, max_cycles=3)
    td = env.reset()
    td.set(("agent", "action"), torch.zeros(2))
    with pytest.raises(ValueError, match=r"action \('agent', 'action'\): expected shape \[2\] and dtype torch.int64"):
        env.step(td)


def test_import_is_lazy():
    code = "import sys, rl_envs, rl_envs.libs.pettingzoo; assert 'pettingzoo' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
