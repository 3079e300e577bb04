"""GymEnv / GymWrapper and the space <-> spec mapping, checked against gymnasium itself."""

from __future__ import annotations

import sys
from typing import ClassVar

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from rl_envs import GymEnv, GymWrapper, StepCounter, TransformedEnv
from rl_envs.libs._gym_spaces import make_codec, space_to_spec
from rl_envs.libs.gymnasium import default_info_dict_reader
from tdict.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)


# ---------------------------------------------------------------------------------------------- toy envs
class ToyEnv(gym.Env):
    """Deterministic counter: action a in {1, 2, 3} (Discrete(3, start=1)) adds a; terminates at max_count.

    Observation [count] * 3 (float32); reward = a; info has count, vec and flag; render() is a frame
    filled with count. ``reuse_buffer`` returns the same array every time (written in place).
    """

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode=None, max_count=10, reuse_buffer=False, obs_dtype=np.float32):
        self.render_mode = render_mode
        self.max_count, self.reuse_buffer, self.obs_dtype = max_count, reuse_buffer, obs_dtype
        self.observation_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = spaces.Discrete(3, start=1)
        self._buf = np.zeros(3, np.float32)
        self.count = 0

    def _obs(self):
        if self.reuse_buffer:
            self._buf[:] = self.count
            return self._buf
        return np.full(3, self.count, self.obs_dtype)

    def _info(self):
        return {"count": self.count, "vec": np.full(2, self.count, np.float64), "flag": self.count >= self.max_count}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = int(self.np_random.integers(0, 3))
        return self._obs(), self._info()

    def step(self, action):
        assert self.action_space.contains(action), action
        self.count += int(action)
        return self._obs(), float(action), self.count >= self.max_count, False, self._info()

    def render(self):
        return np.full((4, 5, 3), self.count % 256, np.uint8)


class DictTupleEnv(gym.Env):
    """Dict observation (with a nested Dict and a "state" entry) and a Tuple action."""

    def __init__(self):
        self.observation_space = spaces.Dict(
            state=spaces.Box(-10, 10, (2,), np.float64),
            nested=spaces.Dict(flag=spaces.MultiBinary(2), choice=spaces.Discrete(4)),
        )
        self.action_space = spaces.Tuple((spaces.Discrete(2), spaces.Box(-1, 1, (2,), np.float32)))

    def _obs(self, a0=0, a1=(0.0, 0.0)):
        return {
            "state": np.array([a0, float(np.sum(a1))]),
            "nested": {"flag": np.array([a0, 1 - a0], np.int8), "choice": a0 + 2},
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        a0, a1 = action
        return self._obs(int(a0), a1), float(np.sum(a1)), False, False, {}


for _id, _cls in [("RLEnvsToy-v0", ToyEnv), ("RLEnvsDictTuple-v0", DictTupleEnv)]:
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_cls)


def index_actions(actions: torch.Tensor, categorical: bool) -> np.ndarray:
    return (actions if categorical else actions.argmax(-1)).numpy()


def manual_loop(env, seed, actions, start=0):
    """Reference: step gymnasium with the given actions, resetting (unseeded) after each done."""
    obs, _ = env.reset(seed=seed)
    rows = []
    for a in actions:
        nxt, r, term, trunc, _ = env.step(a + start)
        rows.append((np.array(obs), np.array(nxt), r, term, trunc))
        obs = env.reset()[0] if term or trunc else nxt
    obs0, obs1, rew, term, trunc = (np.stack([row[i] for row in rows]) for i in range(5))
    return obs0, obs1, rew, term, trunc


def assert_matches(rollout, ref, obs_key="observation"):
    obs0, obs1, rew, term, trunc = ref
    torch.testing.assert_close(rollout[obs_key], torch.as_tensor(obs0))
    torch.testing.assert_close(rollout["next", obs_key], torch.as_tensor(obs1))
    torch.testing.assert_close(rollout["next", "reward"], torch.as_tensor(rew, dtype=torch.float32))
    assert rollout["next", "terminated"].tolist() == term.tolist()
    assert rollout["next", "truncated"].tolist() == trunc.tolist()
    assert rollout["next", "done"].tolist() == (term | trunc).tolist()


# ---------------------------------------------------------------------------------------------- spaces
def test_box_specs_keep_dtype_and_bounds():
    spec = space_to_spec(spaces.Box(-1.0, 2.0, (3,), np.float32))
    assert isinstance(spec, Bounded) and spec.dtype == torch.float32 and spec.shape == (3,)
    assert spec.low.tolist() == [-1.0] * 3 and spec.high.tolist() == [2.0] * 3
    spec = space_to_spec(spaces.Box(-np.inf, np.inf, (2, 2), np.float64))
    assert isinstance(spec, Unbounded) and spec.dtype == torch.float64 and spec.shape == (2, 2)
    # the full uint8 range is no bound (as in TorchRL); a narrower int range is
    assert isinstance(space_to_spec(spaces.Box(0, 255, (4, 4, 3), np.uint8)), Unbounded)
    spec = space_to_spec(spaces.Box(0, 9, (2,), np.int64))
    assert isinstance(spec, Bounded) and spec.dtype == torch.int64 and spec.high.tolist() == [9, 9]
    # partly infinite bounds stay Bounded (CartPole), a 0-d Box keeps its shape
    cart = space_to_spec(gym.make("CartPole-v1").observation_space)
    assert isinstance(cart, Bounded) and torch.isinf(cart.high).tolist() == [False, True, False, True]
    assert space_to_spec(spaces.Box(-1, 1, ())).shape == ()


def test_discrete_specs_and_start():
    assert space_to_spec(spaces.Discrete(4)) == OneHot(4, dtype=torch.int64)
    assert space_to_spec(spaces.Discrete(4, start=2), categorical_action_encoding=True) == Categorical(4)
    one_hot = make_codec(spaces.Discrete(4, start=2))
    cat = make_codec(spaces.Discrete(4, start=2), categorical_action_encoding=True)
    for value in [2, 3, 5]:
        assert one_hot.read(value).tolist() == torch.nn.functional.one_hot(torch.tensor(value - 2), 4).tolist()
        assert cat.read(value).item() == value - 2
        assert one_hot.write(one_hot.read(value)) == value and cat.write(cat.read(value)) == value
    # vector env values carry the batch dim
    vcat = make_codec(spaces.Discrete(3, start=1), categorical_action_encoding=True, batch_size=torch.Size([2]))
    assert vcat.read(np.array([1, 3])).tolist() == [0, 2] and vcat.write(torch.tensor([0, 2])).tolist() == [1, 3]


def test_multi_discrete_and_binary_specs():
    md = spaces.MultiDiscrete([2, 3], start=[1, -1], seed=0)
    assert space_to_spec(md) == MultiOneHot([2, 3], dtype=torch.int64)
    assert space_to_spec(md, categorical_action_encoding=True) == MultiCategorical([2, 3])
    assert isinstance(space_to_spec(spaces.MultiDiscrete([[2, 3], [4, 5]])), MultiCategorical)
    mb = spaces.MultiBinary(3, seed=0)
    assert space_to_spec(mb) == Binary(3, dtype=torch.int8)
    for space in (md, mb):
        for cat in (False, True):
            codec = make_codec(space, categorical_action_encoding=cat)
            for _ in range(5):
                value = space.sample()
                tensor = codec.read(value)
                assert codec.spec.is_in(tensor)
                back = codec.write(tensor)
                assert space.contains(back) and back.tolist() == value.tolist()


def test_dict_and_tuple_specs_nested():
    space = spaces.Dict(
        state=spaces.Box(-1, 1, (2,)),
        inner=spaces.Dict(d=spaces.Discrete(3), t=spaces.Tuple((spaces.MultiBinary(2), spaces.Box(0, 1, (1,))))),
        seed=0,
    )
    spec = space_to_spec(space, categorical_action_encoding=True)
    assert isinstance(spec, Composite)
    assert spec.keys(True, True) == ["observation", ("inner", "d"), ("inner", "t", "0"), ("inner", "t", "1")]
    assert isinstance(spec["inner", "t", "0"], Binary) and isinstance(spec["inner", "d"], Categorical)
    codec = make_codec(space, categorical_action_encoding=True)
    value = space.sample()
    td = codec.read(value)
    assert spec.is_in(td)
    assert td["inner", "t", "0"].tolist() == value["inner"]["t"][0].tolist()
    back = codec.write(td)
    assert back["state"].tolist() == value["state"].tolist()
    assert (
        back["inner"]["d"] == value["inner"]["d"] and back["inner"]["t"][1].tolist() == value["inner"]["t"][1].tolist()
    )
    # a top-level "observation" entry keeps "state" as it is
    assert space_to_spec(spaces.Dict(state=spaces.Discrete(2), observation=spaces.Discrete(2))).keys() == [
        "state",
        "observation",
    ]


def test_unsupported_space_names_it():
    with pytest.raises(NotImplementedError, match="Text"):
        space_to_spec(spaces.Text(5))


# ---------------------------------------------------------------------------------------------- single envs
@pytest.mark.parametrize("categorical", [False, True])
def test_cartpole_rollout_matches_gymnasium(categorical):
    env = GymEnv("CartPole-v1", categorical_action_encoding=categorical, max_episode_steps=12)
    assert env.action_spec == (Categorical(2) if categorical else OneHot(2, dtype=torch.int64))
    env.set_seed(3)
    rollout = env.rollout(40, break_when_any_done=False)
    assert rollout.batch_size == (40,)
    assert rollout["next", "reward"].shape == (40,) and rollout["next", "done"].shape == (40,)
    assert rollout["action"].shape == ((40,) if categorical else (40, 2))
    actions = index_actions(rollout["action"], categorical)
    assert_matches(rollout, manual_loop(gym.make("CartPole-v1", max_episode_steps=12), 3, actions))
    assert env.full_observation_spec.is_in(rollout["next"].select("observation"))
    assert env.full_action_spec.is_in(rollout.select("action"))
    assert rollout["next", "done"].any()  # the comparison went through at least one reset


def test_pendulum_rollout_matches_and_truncation_is_kept_apart():
    env = GymEnv("Pendulum-v1", max_episode_steps=7)
    env.set_seed(0)
    rollout = env.rollout(20)
    assert rollout.batch_size == (7,)  # stops at TimeLimit's truncation
    assert rollout["next", "truncated"].tolist() == [False] * 6 + [True]
    assert not rollout["next", "terminated"].any()
    assert rollout["next", "done"].tolist() == rollout["next", "truncated"].tolist()
    ref = manual_loop(gym.make("Pendulum-v1", max_episode_steps=7), 0, rollout["action"].numpy())
    assert_matches(rollout, ref)
    assert rollout["observation"].dtype == torch.float32 and rollout["action"].dtype == torch.float32


def test_seeding_reproducible_and_action_space_seeded():
    env = GymEnv("Pendulum-v1")
    assert env.set_seed(5) == GymEnv("Pendulum-v1").set_seed(5) == 6  # one stream: the next env's seed is 6
    # a vector env has num_envs streams: gymnasium seeds sub-env i with seed + i, the next env gets seed + 3
    vec = GymEnv("Pendulum-v1", num_envs=3)
    assert vec.set_seed(5) == 8
    first = [GymEnv("Pendulum-v1").reset(seed=5 + i)["observation"] for i in range(3)]
    torch.testing.assert_close(vec.reset()["observation"], torch.stack(first))
    first = env.reset()["observation"]
    env.set_seed(5)
    assert torch.equal(env.reset()["observation"], first)
    assert not torch.equal(env.reset()["observation"], first)  # only the first reset uses the seed
    env.set_seed(7)
    a = env._env.action_space.sample()
    env.set_seed(7)
    assert np.array_equal(env._env.action_space.sample(), a)
    # reset(seed=...) reaches gymnasium directly
    ref = gym.make("Pendulum-v1").reset(seed=11)[0]
    assert env.reset(seed=11)["observation"].tolist() == ref.tolist()


def test_frame_skip_sums_rewards_and_stops_at_done():
    env = GymEnv("Pendulum-v1", frame_skip=3)
    env.set_seed(1)
    rollout = env.rollout(4)
    ref_env = gym.make("Pendulum-v1")
    obs, _ = ref_env.reset(seed=1)
    for t in range(4):
        total = 0.0
        for _ in range(3):
            obs, r, *_ = ref_env.step(rollout["action"][t].numpy())
            total += r
        assert rollout["next", "reward"][t].item() == pytest.approx(total, rel=1e-6)
        assert rollout["next", "observation"][t].tolist() == obs.tolist()
    # the skip stops at done: the toy env terminates at count 10 (actions 3, 3, 3 from count 0..2)
    toy = GymEnv("RLEnvsToy-v0", frame_skip=4, categorical_action_encoding=True)
    td = toy.reset(seed=0)
    count0 = int(td["observation"][0])
    td["action"] = torch.tensor(2)  # index 2 = action 3
    out = toy.step(td)["next"]
    n_steps = -(-(10 - count0) // 3)  # ceil: steps until count >= 10
    expected = min(n_steps, 4) * 3.0
    assert out["reward"].item() == expected and out["terminated"].item() == (n_steps <= 4)


def test_discrete_start_and_reward_of_the_action_sent():
    env = GymEnv("RLEnvsToy-v0", categorical_action_encoding=True)
    td = env.reset(seed=0)
    for index in [0, 1, 2]:
        td["action"] = torch.tensor(index)
        out = env.step(td)["next"]
        assert out["reward"].item() == index + 1  # gymnasium received index + start
        td = out.exclude("reward")


def test_info_dict_reader_with_spec_and_inferred():
    env = GymEnv("RLEnvsToy-v0", categorical_action_encoding=True)
    reader = default_info_dict_reader(
        ["count", "vec"], spec=[Unbounded((), dtype=torch.int64), Unbounded((2,), dtype=torch.float64)]
    )
    assert env.set_info_dict_reader(reader) is env
    assert env.observation_spec["vec"] == Unbounded((2,), dtype=torch.float64)
    env.set_seed(0)
    rollout = env.rollout(10)
    counts = rollout["next", "observation"][:, 0].long()
    assert rollout["next", "count"].tolist() == counts.tolist()
    assert rollout["count"][0].item() == int(rollout["observation"][0, 0])  # reset info read too
    torch.testing.assert_close(rollout["next", "vec"], counts.double().unsqueeze(-1).expand(-1, 2))
    assert env.full_observation_spec.is_in(rollout["next"].select(*env.observation_keys))
    # keys=None: every non-private key, specs inferred from one step
    env2 = GymEnv("RLEnvsToy-v0").set_info_dict_reader()
    spec = env2.observation_spec
    assert sorted(spec.keys()) == ["count", "flag", "observation", "vec"]
    assert spec["flag"].dtype == torch.bool and spec["vec"].shape == (2,) and spec["count"].dtype == torch.int64
    td = env2.rand_step(env2.reset())
    assert td["next", "flag"].dtype == torch.bool and td["next", "vec"].shape == (2,)


def test_buffer_reusing_env_gets_copies():
    env = GymWrapper(ToyEnv(reuse_buffer=True), categorical_action_encoding=True)
    env.set_seed(0)
    rollout = env.rollout(6)
    counts = rollout["next", "observation"][:, 0]
    assert (counts[1:] > counts[:-1]).all()  # every step kept its own observation
    assert torch.equal(rollout["observation"][1:], rollout["next", "observation"][:-1])
    fresh = GymWrapper(ToyEnv(), categorical_action_encoding=True)
    fresh.rollout(4)
    assert fresh._obs_dict == fresh._obs_dict_fast and env._obs_dict == env._obs_dict_safe


def test_off_spec_dtype_is_cast_to_the_space_dtype():
    env = GymWrapper(ToyEnv(obs_dtype=np.float64), categorical_action_encoding=True)
    rollout = env.rollout(5)
    assert rollout["next", "observation"].dtype == torch.float32
    assert env.full_observation_spec.is_in(rollout["next"].select("observation"))


def test_discrete_observation_frozen_lake():
    env = GymEnv("FrozenLake-v1", is_slippery=True, categorical_action_encoding=True)
    assert env.observation_spec["observation"] == Categorical(16)
    env.set_seed(4)
    rollout = env.rollout(30, break_when_any_done=False)
    obs0, obs1, rew, term, _ = manual_loop(gym.make("FrozenLake-v1", is_slippery=True), 4, rollout["action"].numpy())
    assert rollout["observation"].tolist() == obs0.tolist() and rollout["next", "observation"].tolist() == obs1.tolist()
    assert (
        rollout["next", "reward"].tolist() == rew.tolist() and rollout["next", "terminated"].tolist() == term.tolist()
    )
    one_hot = GymEnv("FrozenLake-v1").reset(seed=4)["observation"]
    assert one_hot.shape == (16,) and one_hot.argmax().item() == obs0[0]


def test_dict_observation_and_tuple_action():
    env = GymEnv("RLEnvsDictTuple-v0", categorical_action_encoding=True)
    assert env.observation_keys == ["observation", ("nested", "flag"), ("nested", "choice")]
    assert env.action_keys == ["0", "1"]
    rollout = env.rollout(5)
    a0, a1 = rollout["0"], rollout["1"]
    nxt = rollout["next"]
    torch.testing.assert_close(nxt["observation"], torch.stack([a0.double(), a1.double().sum(-1)], -1))
    assert nxt["nested", "choice"].tolist() == (a0 + 2).tolist()
    assert nxt["nested", "flag"].tolist() == torch.stack([a0, 1 - a0], -1).tolist()
    torch.testing.assert_close(nxt["reward"], a1.sum(-1))
    assert env.full_observation_spec.is_in(nxt.select(*env.observation_keys))


@pytest.mark.parametrize("pixels_only", [False, True])
def test_from_pixels(pixels_only):
    env = GymEnv("RLEnvsToy-v0", from_pixels=True, pixels_only=pixels_only)
    keys = ["pixels"] if pixels_only else ["observation", "pixels"]
    assert sorted(env.observation_keys) == keys
    env.set_seed(0)
    rollout = env.rollout(3)
    pixels = rollout["next", "pixels"]
    assert pixels.dtype == torch.uint8 and pixels.shape == (3, 4, 5, 3)
    assert env.observation_spec["pixels"].shape == (4, 5, 3)
    if not pixels_only:
        assert (pixels == rollout["next", "observation"][:, 0].to(torch.uint8).reshape(3, 1, 1, 1)).all()
    vec = GymEnv("RLEnvsToy-v0", num_envs=2, from_pixels=True, pixels_only=pixels_only)
    assert vec.rollout(3)["next", "pixels"].shape == (2, 3, 4, 5, 3)
    with pytest.raises(ValueError, match="render_mode"):
        GymWrapper(gym.make("RLEnvsToy-v0"), from_pixels=True)


def test_bad_action_names_the_key():
    env = GymEnv("Pendulum-v1")
    td = env.reset()
    td["action"] = torch.zeros(2)
    with pytest.raises(ValueError, match="'action'.*shape \\[1\\]"):
        env.step(td)
    td["action"] = torch.zeros(1, dtype=torch.float64)
    with pytest.raises(ValueError, match="'action'.*float32"):
        env.step(td)
    with pytest.raises(ValueError, match="frame_skip"):
        GymEnv("Pendulum-v1", frame_skip=0)
    with pytest.raises(TypeError, match="unexpected arguments"):
        env.reset(bogus=1)


def test_missing_gymnasium_raises_install_hint(monkeypatch):
    from rl_envs.libs import gymnasium as gym_lib

    monkeypatch.setitem(sys.modules, "gymnasium", None)
    with pytest.raises(ImportError, match=r"pip install rl-envs\[gymnasium\]"):
        gym_lib._gymnasium()


@pytest.mark.parametrize(
    "make",
    [
        lambda: GymEnv("Pendulum-v1"),
        lambda: GymEnv("CartPole-v1", num_envs=3, vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}),
        lambda: GymEnv("RLEnvsDictTuple-v0"),
        lambda: GymEnv("RLEnvsToy-v0", from_pixels=True),
        lambda: GymEnv("RLEnvsToy-v0", num_envs=2).set_info_dict_reader(),
        lambda: GymEnv("FrozenLake-v1"),
    ],
    ids=["pendulum", "vector", "dict-tuple", "pixels", "info", "discrete-obs"],
)
def test_check_env_specs(make):
    from rl_envs import check_env_specs

    check_env_specs(make(), seed=0)


def test_torchrl_style_keywords():
    env = GymEnv(env_name="Pendulum-v1")
    assert env.env_name == "Pendulum-v1" and env.batch_size == ()
    wrapped = GymWrapper(env=gym.make("CartPole-v1"), categorical_action_encoding=True)
    assert wrapped.action_spec == Categorical(2) and wrapped.info_dict_reader == []


def test_stepcounter_on_gym_env():
    env = TransformedEnv(GymEnv("Pendulum-v1"), StepCounter(max_steps=5))
    rollout = env.rollout(10)
    assert rollout["next", "step_count"].tolist() == [1, 2, 3, 4, 5]
    assert rollout["next", "truncated"][-1] and not rollout["next", "terminated"].any()


# ---------------------------------------------------------------------------------------------- vector envs
def vector_reference(n, seed, actions, max_steps):
    """Per-sub-env manual loops on single gymnasium envs (sub-env i seeded with seed + i)."""
    refs = [manual_loop(gym.make("CartPole-v1", max_episode_steps=max_steps), seed + i, actions[i]) for i in range(n)]
    return tuple(np.stack([ref[k] for ref in refs]) for k in range(5))


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
@pytest.mark.parametrize("wrapped", [False, True])
def test_vector_env_autoreset_modes_match_single_envs(mode, wrapped):
    n, steps, max_steps = 3, 60, 15
    torch.manual_seed(0)  # the rollout's random actions
    if wrapped:
        venv = gym.make_vec(
            "CartPole-v1",
            num_envs=n,
            vectorization_mode="sync",
            max_episode_steps=max_steps,
            vector_kwargs={"autoreset_mode": mode},
        )
        env = GymWrapper(venv)
    else:
        env = GymEnv("CartPole-v1", num_envs=n, max_episode_steps=max_steps, vector_kwargs={"autoreset_mode": mode})
    assert env.batch_size == (n,) and env.autoreset_mode == mode
    assert env.action_spec.shape == (n, 2) and env.observation_spec["observation"].shape == (n, 4)
    env.set_seed(10)
    rollout = env.rollout(steps, break_when_any_done=False)
    assert rollout.batch_size == (n, steps)
    actions = index_actions(rollout["action"], False)
    ref = vector_reference(n, 10, actions, max_steps)
    assert_matches(rollout, ref)
    assert rollout["next", "truncated"].any() and rollout["next", "terminated"].any()
    # done sub-envs restart from a reset observation, never from a gymnasium "reset step"
    done = rollout["next", "done"][:, :-1]
    assert (rollout["observation"][:, 1:][done].abs() <= 0.05).all()


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_vector_env_break_when_all_done_and_explicit_partial_reset(mode):
    env = GymEnv(
        "CartPole-v1",
        num_envs=2,
        max_episode_steps=5,
        vector_kwargs={"autoreset_mode": mode},
        categorical_action_encoding=True,
    )
    rollout = env.rollout(20, break_when_all_done=True)
    assert rollout["next", "done"].any(-1).all()
    # a reset of a sub-env that is running (not done) resets only that one
    td = env.reset()
    td = env.step(env.rand_action(td))
    root = td["next"].exclude("reward")
    before = root["observation"].clone()
    root["_reset"] = torch.tensor([False, True])
    out = env.reset(root)
    assert torch.equal(out["observation"][0], before[0]) and not torch.equal(out["observation"][1], before[1])
    assert (out["observation"][1].abs() <= 0.05).all()


def test_vector_info_reader_same_step_reads_final_info():
    venv = gym.make_vec(
        "RLEnvsToy-v0", num_envs=2, vectorization_mode="sync", vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}
    )
    env = GymWrapper(venv, categorical_action_encoding=True)
    env.set_info_dict_reader(default_info_dict_reader(["count"], spec=[Unbounded((), dtype=torch.int64)]))
    env.set_seed(0)
    rollout = env.rollout(12, break_when_any_done=False)
    # the info of a finishing step is the final one (count >= 10), and matches the final observation
    assert rollout["next", "count"].tolist() == rollout["next", "observation"][..., 0].long().tolist()
    assert (rollout["next", "count"][rollout["next", "done"]] >= 10).all()


def test_vector_env_without_reset_mask_support_fails_clearly():
    env = GymWrapper(
        gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="vector_entry_point", max_episode_steps=3)
    )
    assert env.autoreset_mode == AutoresetMode.NEXT_STEP
    assert env.rollout(10, break_when_any_done=False).batch_size == (2, 10)  # full resets work
    td = env.reset()
    td["_reset"] = torch.tensor([True, False])
    with pytest.raises(RuntimeError, match="reset_mask"):
        env.reset(td)


# ---------------------------------------------------------------------------------------------- mujoco
@pytest.mark.mujoco
def test_half_cheetah_matches_gymnasium():
    pytest.importorskip("mujoco")
    env = GymEnv("HalfCheetah-v5")
    env.set_seed(2)
    rollout = env.rollout(15)
    assert rollout["observation"].dtype == torch.float64 and rollout["observation"].shape == (15, 17)
    assert isinstance(env.action_spec, Bounded) and env.action_spec.shape == (6,)
    ref = manual_loop(gym.make("HalfCheetah-v5"), 2, rollout["action"].numpy())
    assert_matches(rollout, ref)


def test_from_pixels_on_a_real_classic_control_env_matches_gymnasium_render():
    pytest.importorskip("pygame")
    import gymnasium

    env = GymEnv("Pendulum-v1", from_pixels=True)
    env.set_seed(3)
    reference = gymnasium.make("Pendulum-v1", render_mode="rgb_array")
    reference.reset(seed=3)
    rollout = env.rollout(4, lambda td: td.set("action", torch.full((1,), 0.5)))
    frames = [reference.render()]
    for _ in range(3):
        reference.step(np.array([0.5], dtype=np.float32))
        frames.append(reference.render())
    assert rollout["pixels"].shape == torch.Size([4, 500, 500, 3]) and rollout["pixels"].dtype == torch.uint8
    assert torch.equal(rollout["pixels"], torch.from_numpy(np.stack(frames)))
    assert env.observation_spec["pixels"].is_in(rollout["next", "pixels"][-1])


def test_custom_info_reader_without_reset_infers_its_spec_from_a_step():
    from rl_envs.libs.gymnasium import BaseInfoDictReader

    class CountReader(BaseInfoDictReader):  # no reset() of its own: the base class's no-op
        def __init__(self) -> None:
            self._spec = None

        def __call__(self, info_dict, tensordict):
            if "count" in info_dict:
                tensordict.set("count_info", torch.as_tensor(info_dict["count"]))
                self._spec = Composite(count_info=Unbounded((), dtype=torch.int64))
            return tensordict

        @property
        def info_spec(self):
            return self._spec

    env = GymEnv("RLEnvsToy-v0").set_info_dict_reader(CountReader())
    assert env.observation_spec["count_info"] == Unbounded((), dtype=torch.int64)
    env.set_seed(0)
    rollout = env.rollout(4)
    assert rollout["next", "count_info"].tolist() == rollout["next", "observation"][:, 0].long().tolist()


def test_gym_backend_is_gymnasium():
    import gymnasium

    from rl_envs import gym_backend

    assert gym_backend() is gymnasium
    assert gym_backend("spaces") is gymnasium.spaces
