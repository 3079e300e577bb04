"""Env behaviours TorchRL's collector tests rely on: action casts, specs set before __init__, heterogeneous
actions, a root reset prevailing over nested ones, TransformedEnv.add_truncated_keys, EnvMetaData paths."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict
from tdict.specs import Bounded, Categorical, Composite, OneHot, Unbounded

from rl_envs import EnvBase, EnvCreator, InitTracker, PendulumEnv, TransformedEnv


class OneHotEnv(EnvBase):
    """A bool one-hot action (TorchRL's OneHot default) that moves a 3-vector observation; records its inputs."""

    def __init__(self, batch_size=()):
        super().__init__(batch_size=batch_size)
        shape = self.batch_size
        self.observation_spec = Composite(obs=Unbounded(shape=(*shape, 3)), shape=shape)
        self.action_spec = OneHot(3, shape=(*shape, 3), dtype=torch.bool)
        self.seen = []

    def _reset(self, tensordict=None, **kwargs):
        return TensorDict(obs=torch.zeros(*self.batch_size, 3), batch_size=self.batch_size)

    def _step(self, tensordict):
        action = tensordict["action"]
        self.seen.append(action)
        flag = torch.zeros(self.batch_size, dtype=torch.bool)
        return TensorDict(
            obs=tensordict["obs"] + action.float(),
            reward=torch.zeros(self.batch_size),
            done=flag,
            terminated=flag.clone(),
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


class Int8Env(OneHotEnv):
    def __init__(self):
        super().__init__()
        self.action_spec = Categorical(100, shape=(1,), dtype=torch.int8)

    def _step(self, tensordict):
        self.seen.append(tensordict["action"])
        flag = torch.zeros((), dtype=torch.bool)
        return TensorDict(obs=tensordict["obs"], reward=torch.zeros(()), done=flag, terminated=flag.clone())


def test_integer_one_hot_action_is_cast_to_the_bool_spec():
    env = OneHotEnv(batch_size=(2,))
    td = env.reset()
    td["action"] = torch.tensor([[0, 1, 0], [0, 0, 1]])  # int64 one-hot, as torch.nn.functional.one_hot gives
    out = env.step(td)
    assert out["action"].dtype == torch.bool  # the recorded action follows the spec
    assert env.seen[-1].dtype == torch.bool
    assert out["next", "obs"].tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]


def test_integer_action_cast_keeps_every_value_or_raises():
    env = Int8Env()
    td = env.reset()
    td["action"] = torch.tensor([7], dtype=torch.int32)
    assert env.step(td)["action"].dtype == torch.int8 and env.seen[-1].tolist() == [7]
    td = env.reset()
    td["action"] = torch.tensor([300], dtype=torch.int32)  # does not fit an int8
    with pytest.raises(
        ValueError, match=r"action 'action': dtype torch.int32 cannot be cast to the spec dtype torch.int8"
    ):
        env.step(td)
    assert len(env.seen) == 1 and "next" not in td.keys()  # refused before the env stepped
    bool_env = OneHotEnv()
    td = bool_env.reset()
    td["action"] = torch.tensor([0, 2, 0])  # 2 is no bool
    with pytest.raises(ValueError, match="cannot be cast"):
        bool_env.step(td)


def test_float_action_for_an_integer_spec_still_raises():
    env = Int8Env()
    td = env.reset()
    td["action"] = torch.ones(1)
    with pytest.raises(ValueError, match=r"action 'action': expected shape \[1\] and dtype torch.int8"):
        env.step(td)
    td["action"] = torch.ones(2, dtype=torch.int64)  # a wrong shape is never cast
    with pytest.raises(ValueError, match=r"expected shape \[1\]"):
        env.step(td)


class SpecsFirstEnv(EnvBase):
    """Sets its specs before calling EnvBase.__init__ (TorchRL's mock envs do)."""

    def __init__(self):
        self.action_spec = Composite(action=Unbounded((1,)))
        self.reward_spec = Composite(reward=Unbounded((1,)))
        self.done_spec = Composite(done=Categorical(2, shape=(1,), dtype=torch.bool))
        self.observation_spec = Composite(observation=Unbounded((3,)))
        self.counter = 0
        super().__init__()

    def _reset(self, tensordict=None, **kwargs):
        return self.full_observation_spec.zero().update(self.full_done_spec.zero())

    def _step(self, tensordict):
        self.counter += 1
        out = self.full_observation_spec.zero().update(self.full_done_spec.zero())
        return out.update(self.full_reward_spec.zero())

    def _set_seed(self, seed):
        pass


def test_specs_assigned_before_init_are_adopted():
    env = SpecsFirstEnv()
    assert env.counter == 0 and env.batch_size == torch.Size([])
    assert env.action_spec.shape == (1,) and env.observation_spec["observation"].shape == (3,)
    assert sorted(env.full_done_spec.keys()) == ["done", "terminated"]  # completed as any done spec is
    data = env.rollout(3)
    assert data.batch_size == (3,) and data["next", "observation"].shape == (3, 3) and env.counter == 3


class HeteroActionEnv(EnvBase):
    """Two agents whose actions have different sizes (a stacked, heterogeneous action spec)."""

    def __init__(self):
        super().__init__()
        actions = torch.stack(
            [Composite(action=Bounded(-1, 1, shape=(3,))), Composite(action=Bounded(-1, 1, shape=(2,)))], 0
        )
        self.full_action_spec = Composite(agents=actions)
        self.observation_spec = Composite(obs=Unbounded(shape=(1,)))
        self.seen = []

    def _reset(self, tensordict=None, **kwargs):
        return TensorDict(obs=torch.zeros(1))

    def _step(self, tensordict):
        agents = tensordict["agents"]
        self.seen.append([m["action"].shape for m in agents.tensordicts])
        flag = torch.zeros((), dtype=torch.bool)
        return TensorDict(obs=tensordict["obs"] + 1, reward=torch.zeros(()), done=flag, terminated=flag.clone())

    def _set_seed(self, seed):
        pass


def test_heterogeneous_actions_reach_the_env():
    env = HeteroActionEnv()
    td = env.reset()
    td.set("agents", env.full_action_spec.rand()["agents"])  # a lazy stack of two members
    out = env.step(td)
    assert env.seen == [[torch.Size([3]), torch.Size([2])]]
    assert out["next", "obs"].tolist() == [1.0]


class NestedCountEnv(EnvBase):
    """A root counter and a nested one; ``_reset`` zeroes both where the root ``"_reset"`` is set."""

    def __init__(self):
        super().__init__(batch_size=(2,))
        self.observation_spec = Composite(
            obs=Unbounded(shape=(2, 1)), nested=Composite(obs=Unbounded(shape=(2, 1)), shape=(2,)), shape=(2,)
        )
        self.action_spec = Unbounded(shape=(2, 1))
        self.reward_spec = Unbounded(shape=(2, 1))
        done = Categorical(2, shape=(2, 1), dtype=torch.bool)
        self.full_done_spec = Composite(
            done=done,
            terminated=done.clone(),
            nested=Composite(done=done.clone(), terminated=done.clone(), shape=(2,)),
            shape=(2,),
        )
        self.count = torch.zeros(2, 1)
        self.nested_count = torch.zeros(2, 1)

    def _reset(self, tensordict=None, **kwargs):
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            self.count.zero_()
            self.nested_count.zero_()
        else:
            self.count[mask.reshape(2)] = 0
            self.nested_count[mask.reshape(2)] = 0
        flag = torch.zeros(2, 1, dtype=torch.bool)
        return TensorDict(
            obs=self.count.clone(),
            nested=TensorDict(obs=self.nested_count.clone(), done=flag, terminated=flag.clone(), batch_size=[2]),
            done=flag.clone(),
            terminated=flag.clone(),
            batch_size=[2],
        )

    def _step(self, tensordict):
        self.count += 1
        self.nested_count += 1
        flag = torch.zeros(2, 1, dtype=torch.bool)
        return TensorDict(
            obs=self.count.clone(),
            nested=TensorDict(obs=self.nested_count.clone(), done=flag, terminated=flag.clone(), batch_size=[2]),
            reward=torch.zeros(2, 1),
            done=flag.clone(),
            terminated=flag.clone(),
            batch_size=[2],
        )

    def _set_seed(self, seed):
        pass


def test_root_reset_prevails_over_nested_masks():
    env = NestedCountEnv()
    td = env.reset()
    for _ in range(2):
        td = env.step(env.rand_action(td))["next"].exclude("reward")
    td["_reset"] = torch.tensor([[True], [False]])
    td["nested", "_reset"] = torch.tensor([[False], [False]])  # the root's mask wins for env 0
    out = env.reset(td)
    assert out["obs"].flatten().tolist() == [0.0, 2.0]
    assert out["nested", "obs"].flatten().tolist() == [0.0, 2.0]


def test_nested_only_mask_still_resets_only_its_subtree():
    env = NestedCountEnv()
    td = env.reset()
    td = env.step(env.rand_action(td))["next"].exclude("reward")
    td["nested", "_reset"] = torch.tensor([[False], [True]])
    out = env.reset(td)
    # env 1 resets (its sub-tree asked, and the root follows), env 0 keeps its values
    assert out["obs"].flatten().tolist() == [1.0, 0.0] and out["nested", "obs"].flatten().tolist() == [1.0, 0.0]


def test_transformed_env_add_truncated_keys_declares_them_on_the_base():
    env = TransformedEnv(PendulumEnv(), InitTracker())
    assert env.add_truncated_keys() is env
    assert "truncated" in env.full_done_spec.keys() and "truncated" in env.base_env.full_done_spec.keys()
    data = env.rollout(3)
    assert data["next", "truncated"].tolist() == [False, False, False]
    assert data["is_init"].tolist() == [True, False, False]


def test_env_creator_meta_data_specs_take_torchrl_paths():
    creator = EnvCreator(PendulumEnv)
    specs = creator.meta_data.specs
    env = PendulumEnv()
    assert specs["input_spec", "full_action_spec"] == env.full_action_spec
    assert specs["input_spec", "full_action_spec", "action"].shape == env.action_spec.shape
    assert specs["output_spec"]["full_observation_spec"] == env.full_observation_spec
    assert specs["full_reward_spec"] == env.full_reward_spec
    assert sorted(specs) == sorted(
        ["full_action_spec", "full_state_spec", "full_observation_spec", "full_reward_spec", "full_done_spec"]
    )
    with pytest.raises(KeyError):
        specs["input_spec", "nope"]


def test_rand_action_draws_heterogeneous_actions_member_by_member():
    env = HeteroActionEnv()
    td = env.reset()
    td.set("agents", TensorDict(note=torch.zeros(2), batch_size=[2]))  # an entry the action must not erase
    td = env.rand_action(td)
    agents = td.get("agents")
    assert [m["action"].shape for m in agents.tensordicts] == [torch.Size([3]), torch.Size([2])]
    assert all(((m["action"] >= -1) & (m["action"] <= 1)).all() for m in agents.tensordicts)
    assert agents.get("note").tolist() == [0.0, 0.0]
    env.step(td)
    assert env.seen == [[torch.Size([3]), torch.Size([2])]]
