"""The EnvBase contract: specs, reset, step, step_and_maybe_reset, rollout, seeding, and bad input."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from tdict import LazyStackedTensorDict, TensorDict
from tdict.nn import TensorDictModule
from tdict.specs import Bounded, Categorical, Composite, Unbounded

from rl_envs import EnvBase, PendulumEnv, StepCounter, TransformedEnv, step_mdp


# ----------------------------------------------------------------------------- custom envs used below
class MinimalEnv(EnvBase):
    """Declares only an observation and an action spec: reward and done specs are the defaults.

    ``reward_shape``/``drop`` let tests make its ``_step`` misbehave.
    """

    def __init__(self, batch_size=(), reward_shape=None, drop=None, reset_done=True):
        super().__init__(batch_size=batch_size)
        shape = self.batch_size
        self.observation_spec = Composite(obs=Unbounded(shape=(*shape, 2)), shape=shape)
        self.action_spec = Bounded(-1.0, 1.0, shape=(*shape, 1))
        self.reward_shape = shape if reward_shape is None else torch.Size(reward_shape)
        self.drop, self.reset_done = drop, reset_done

    def _reset(self, tensordict=None, **kwargs):
        out = TensorDict(obs=torch.zeros(*self.batch_size, 2), batch_size=self.batch_size)
        if self.reset_done:
            out["done"] = torch.zeros(self.batch_size, dtype=torch.bool)
            out["terminated"] = torch.zeros(self.batch_size, dtype=torch.bool)
        return out

    def _step(self, tensordict):
        obs = tensordict["obs"] + tensordict["action"]
        flag = torch.zeros(self.batch_size, dtype=torch.bool)
        out = {"obs": obs, "reward": torch.ones(self.reward_shape), "done": flag, "terminated": flag.clone()}
        if self.drop is not None:
            out.pop(self.drop)
        return TensorDict(out, batch_size=self.batch_size)

    def _set_seed(self, seed):
        pass


class TwoActionEnv(EnvBase):
    """A custom env with a Composite action spec (two actions) and a position it integrates."""

    def __init__(self, batch_size=(2,)):
        super().__init__(batch_size=batch_size)
        shape = self.batch_size
        self.observation_spec = Composite(pos=Unbounded(shape=(*shape, 2)), shape=shape)
        self.full_action_spec = Composite(
            throttle=Bounded(0.0, 1.0, shape=shape), steer=Categorical(3, shape=shape), shape=shape
        )
        self.reward_spec = Unbounded(shape=shape)
        self.done_spec = Categorical(2, shape=shape, dtype=torch.bool)

    def _reset(self, tensordict=None, **kwargs):
        return TensorDict(pos=torch.zeros(*self.batch_size, 2), batch_size=self.batch_size)

    def _step(self, tensordict):
        throttle, steer = tensordict["throttle"], tensordict["steer"]
        delta = torch.stack([throttle, (steer - 1).to(torch.float32)], -1)
        pos = tensordict["pos"] + delta
        done = pos[..., 0] > 2.5
        return TensorDict(pos=pos, reward=throttle, done=done, terminated=done.clone(), batch_size=self.batch_size)

    def _set_seed(self, seed):
        pass


def _const_policy(values):
    values = torch.as_tensor(values)

    def policy(td):
        td.set("action", values.clone())
        return td

    return policy


# ----------------------------------------------------------------------------- specs
def test_default_specs_filled():
    env = MinimalEnv(batch_size=[3])
    assert isinstance(env.reward_spec, Unbounded) and env.reward_spec.shape == torch.Size([3])
    assert env.reward_spec.dtype == torch.float32
    assert sorted(env.full_done_spec.keys()) == ["done", "terminated"]
    for key in ("done", "terminated"):
        assert env.full_done_spec[key].dtype == torch.bool and env.full_done_spec[key].shape == torch.Size([3])
    assert env.reward_keys == ["reward"] and sorted(env.done_keys) == ["done", "terminated"]
    # the single-env default has the [] batch shape (no trailing dim)
    assert MinimalEnv().reward_spec.shape == torch.Size([])


def test_reset_fills_missing_done_flags():
    td = MinimalEnv(batch_size=[2], reset_done=False).reset()
    assert td["done"].tolist() == [False, False] and td["terminated"].dtype == torch.bool


def test_leaf_action_spec_is_wrapped():
    env = MinimalEnv(batch_size=[4])
    assert isinstance(env.full_action_spec, Composite)
    assert env.full_action_spec.shape == torch.Size([4])
    assert list(env.full_action_spec.keys()) == ["action"]
    assert isinstance(env.action_spec, Bounded) and env.action_spec.shape == torch.Size([4, 1])
    assert env.action_keys == ["action"] and env.action_key == "action"
    assert env.input_spec["full_action_spec", "action"].shape == torch.Size([4, 1])
    assert sorted(env.output_spec.keys()) == ["full_done_spec", "full_observation_spec", "full_reward_spec"]


def test_spec_setter_shape_errors():
    env = MinimalEnv(batch_size=[3])
    with pytest.raises(ValueError, match=r"full_observation_spec.*shape \[\].*batch_size is \[3\]"):
        env.observation_spec = Composite(obs=Unbounded(shape=(3, 2)))
    with pytest.raises(ValueError, match=r"shape \[2\] does not match the env's batch_size \[3\]"):
        env.observation_spec = Composite(obs=Unbounded(shape=(2, 2)), shape=[2])
    with pytest.raises(ValueError, match=r"must start with the env's batch_size \[3\]"):
        env.action_spec = Bounded(-1.0, 1.0, shape=(1,))
    with pytest.raises(TypeError, match="must be a Composite"):
        env.full_observation_spec = Unbounded(shape=(3, 2))


def test_specs_locked_after_first_use():
    env = MinimalEnv(batch_size=[3])
    env.reset()
    with pytest.raises(RuntimeError, match="locked"):
        env.observation_spec["extra"] = Unbounded(shape=(3,))
    # assigning a new spec is the way to change it, and the env follows
    env.observation_spec = Composite(obs=Unbounded(shape=(3, 2)), extra=Unbounded(shape=(3,)), shape=[3])
    assert sorted(env.observation_keys) == ["extra", "obs"]


def test_done_spec_completed_with_terminated():
    env = MinimalEnv(batch_size=[2])
    env.full_done_spec = Composite(done=Categorical(2, shape=(2,), dtype=torch.bool), shape=[2])
    assert sorted(env.full_done_spec.keys()) == ["done", "terminated"]


def test_fake_tensordict_keys_and_shapes():
    env = PendulumEnv(batch_size=[5])
    fake = env.fake_tensordict()
    assert fake.batch_size == torch.Size([5])
    root = {k for k in fake.keys(True, True) if not (isinstance(k, tuple) and k[0] == "next")}
    nxt = {k[1:] if len(k) > 2 else k[1] for k in fake.keys(True, True) if isinstance(k, tuple) and k[0] == "next"}
    params = {("params", k) for k in ("max_speed", "max_torque", "dt", "g", "m", "l")}
    assert root == {"th", "thdot", "observation", "action", "done", "terminated", "truncated"} | params
    assert nxt == {"th", "thdot", "observation", "reward", "done", "terminated", "truncated"}
    assert fake["action"].shape == torch.Size([5, 1]) and fake["observation"].shape == torch.Size([5, 3])
    assert fake["next", "reward"].shape == torch.Size([5]) and fake["next", "done"].dtype == torch.bool
    assert not fake["observation"].any()
    # what a step really writes has the same keys
    real = env.rand_step(env.reset())
    assert set(real.keys(True, True)) == set(fake.keys(True, True))


# ----------------------------------------------------------------------------- reset / step
def test_reset_and_step_values_counting(counting_env):
    env = counting_env(batch_size=[2], max_count=3)
    td = env.reset()
    assert td["count"].tolist() == [0, 0] and td["done"].tolist() == [False, False]
    td["action"] = torch.tensor([1, 0])
    out = env.step(td)
    assert out is td  # step writes "next" into its input
    assert td["next", "count"].tolist() == [1, 0]
    assert td["next", "reward"].tolist() == [1.0, 0.0]
    assert td["next", "reward"].shape == torch.Size([2])
    assert td["count"].tolist() == [0, 0]  # the root is s_t


def test_reset_with_partial_mask(counting_env):
    env = counting_env(batch_size=[3], max_count=10)
    td = env.reset()
    for _ in range(2):
        td["action"] = torch.tensor([1, 1, 1])
        td = env.step(td)
        from rl_envs import step_mdp

        td = step_mdp(td)
    td["_reset"] = torch.tensor([False, True, False])
    out = env.reset(td)
    assert out is td
    assert td["count"].tolist() == [2, 0, 2]
    assert td["observation"][:, 0].tolist() == [2.0, 0.0, 2.0]
    assert "_reset" not in td.keys()


def test_rand_action_and_rand_step():
    env = PendulumEnv(batch_size=[4], seed=0)
    td = env.rand_action()
    assert td["action"].shape == torch.Size([4, 1]) and env.action_spec.is_in(td["action"])
    td = env.rand_step(env.reset())
    assert td["next", "observation"].shape == torch.Size([4, 3])
    assert env.action_spec.is_in(td["action"])
    # a composite action spec: every action is sampled
    env2 = TwoActionEnv()
    td = env2.rand_action()
    assert sorted(td.keys()) == ["steer", "throttle"]
    assert env2.full_action_spec.is_in(td)


# ----------------------------------------------------------------------------- step_and_maybe_reset
def test_step_and_maybe_reset_partial(counting_env):
    env = counting_env(batch_size=[3], max_count=3)
    td = env.reset()
    resets = env.reset_count
    actions = torch.tensor([1, 0, 2])  # sub-env 2 hits max_count on the second step, the others never do
    counts = torch.zeros(3, dtype=torch.int64)
    for step in range(2):
        td["action"] = actions.clone()
        stepped, td = env.step_and_maybe_reset(td)
        counts = counts + actions
        assert stepped["next", "count"].tolist() == counts.tolist()  # the record keeps the terminal state
        assert "next" not in td.keys() and "action" not in td.keys() and "reward" not in td.keys()
    assert stepped["next", "done"].tolist() == [False, False, True]
    assert env.reset_count == resets + 1
    # only the done sub-env restarted; the others keep their state
    assert td["count"].tolist() == [2, 0, 0]
    assert td["observation"][:, 0].tolist() == [2.0, 0.0, 0.0]
    assert td["done"].tolist() == [False, False, False]


def test_step_and_maybe_reset_no_done_no_reset(counting_env):
    env = counting_env(batch_size=[2], max_count=100)
    td = env.reset()
    resets = env.reset_count
    td["action"] = torch.tensor([1, 1])
    _, nxt = env.step_and_maybe_reset(td)
    assert env.reset_count == resets and nxt["count"].tolist() == [1, 1]


def test_step_and_maybe_reset_with_step_counter():
    env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), StepCounter(max_steps=2))
    td = env.reset()
    env.rand_action(td)
    _, td = env.step_and_maybe_reset(td)
    assert td["step_count"].tolist() == [1, 1]
    env.rand_action(td)
    stepped, td = env.step_and_maybe_reset(td)
    assert stepped["next", "truncated"].tolist() == [True, True]
    assert td["step_count"].tolist() == [0, 0] and td["done"].tolist() == [False, False]


# ----------------------------------------------------------------------------- rollout
def test_rollout_max_steps_and_time_dim(counting_env):
    env = counting_env(batch_size=[2], max_count=100)
    r = env.rollout(7, _const_policy([1, 2]))
    assert r.batch_size == torch.Size([2, 7])
    assert r.names == [None, "time"]
    assert r["count"].tolist() == [list(range(7)), list(range(0, 14, 2))]
    assert r["next", "count"].tolist() == [list(range(1, 8)), list(range(2, 16, 2))]
    assert r["next", "reward"].shape == torch.Size([2, 7])
    # time is the last batch dim, so the root at t+1 equals "next" at t
    assert torch.equal(r["observation"][:, 1:], r["next", "observation"][:, :-1])
    single = counting_env(max_count=100).rollout(4, _const_policy(1))
    assert single.batch_size == torch.Size([4]) and single.names == ["time"]


@pytest.mark.parametrize("max_steps", [-1, 0, 2.5, True])
def test_rollout_bad_max_steps_names_the_argument(counting_env, max_steps):
    env = counting_env(max_count=100)
    with pytest.raises(ValueError, match=rf"rollout: max_steps must be an int >= 1, got {max_steps!r}"):
        env.rollout(max_steps)


def test_rollout_time_dim_named_for_every_layout(counting_env):
    env = counting_env(batch_size=[2], max_count=100)
    lazy = env.rollout(3, _const_policy([1, 2]), return_contiguous=False)
    assert lazy.batch_size == torch.Size([2, 3]) and lazy.names == [None, "time"]
    kept = env.rollout(3, _const_policy([1, 2]), break_when_any_done=False)
    assert kept.names == [None, "time"]


def test_quick_example_from_issue():
    torch.manual_seed(0)
    env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=200))
    policy = TensorDictModule(
        nn.Sequential(nn.LazyLinear(64), nn.Tanh(), nn.Linear(64, 1), nn.Tanh()),
        in_keys=["observation"],
        out_keys=["action"],
    )
    rollout = env.rollout(max_steps=32, policy=policy)
    assert rollout.batch_size == torch.Size([32])
    assert rollout["next", "reward"].shape == torch.Size([32])


def test_rollout_policy_none_is_random_within_spec():
    env = PendulumEnv(batch_size=[3], seed=0)
    r = env.rollout(5)
    assert r.batch_size == torch.Size([3, 5])
    assert env.action_spec.is_in(r["action"].transpose(0, 1))
    assert r["action"].std() > 0


class _CountPolicy(nn.Module):
    """A plain nn.Module: reads the observation, returns an action (always 1)."""

    def forward(self, observation):
        return torch.ones(observation.shape[:-1], dtype=torch.int64)


def test_rollout_plain_module_policy(counting_env):
    env = counting_env(batch_size=[2], max_count=100)
    r = env.rollout(3, _CountPolicy())
    assert r["action"].tolist() == [[1, 1, 1], [1, 1, 1]]
    assert r["next", "count"].tolist() == [[1, 2, 3], [1, 2, 3]]


def test_rollout_plain_module_with_ambiguous_inputs_raises():
    env = PendulumEnv()
    with pytest.raises(TypeError, match="TensorDictModule"):
        env.rollout(3, nn.Sequential(nn.Linear(3, 1)))


def test_rollout_plain_module_keyword_inputs():
    class ObsPolicy(nn.Module):
        def forward(self, observation):
            return torch.zeros(*observation.shape[:-1], 1)

    env = PendulumEnv(seed=0)
    r = env.rollout(3, ObsPolicy())
    assert r["action"].abs().sum() == 0


def test_rollout_tensordict_module_policy(counting_env):
    class Two(nn.Module):
        def forward(self, observation):
            return torch.full(observation.shape[:-1], 2, dtype=torch.int64)

    env = counting_env(batch_size=[2], max_count=100)
    r = env.rollout(3, TensorDictModule(Two(), in_keys=["observation"], out_keys=["action"]))
    assert r["next", "count"].tolist() == [[2, 4, 6], [2, 4, 6]]


def test_rollout_callable_returning_new_td(counting_env):
    env = counting_env(max_count=100)
    r = env.rollout(3, lambda td: TensorDict(action=torch.tensor(1)))
    assert r["next", "count"].tolist() == [1, 2, 3]


def test_rollout_callback(counting_env):
    env = counting_env(max_count=100)
    seen = []
    env.rollout(4, _const_policy(1), callback=lambda e, td: seen.append((e, td["count"].item())))
    # called after each step but the last, with the env and the next root
    assert [s[0] for s in seen] == [env] * 3
    assert [s[1] for s in seen] == [1, 2, 3]


def test_rollout_break_when_any_done(counting_env):
    env = counting_env(batch_size=[2], max_count=4)
    r = env.rollout(10, _const_policy([1, 2]))
    # sub-env 1 is done after 2 steps
    assert r.batch_size == torch.Size([2, 2])
    assert r["next", "done"][:, -1].tolist() == [False, True]


def test_rollout_break_when_all_done(counting_env):
    env = counting_env(batch_size=[2], max_count=4)
    r = env.rollout(10, _const_policy([1, 2]), break_when_all_done=True)
    assert r.batch_size == torch.Size([2, 4])
    assert r["next", "count"].tolist() == [[1, 2, 3, 4], [2, 4, 4, 4]]  # finished sub-env repeats its last step
    assert r["count"][1].tolist() == [0, 2, 2, 2]
    assert r["next", "done"].tolist() == [[False, False, False, True], [False, True, True, True]]
    with pytest.raises(TypeError, match="cannot both be True"):
        env.rollout(3, break_when_any_done=True, break_when_all_done=True)


def test_rollout_no_break_auto_resets(counting_env):
    env = counting_env(batch_size=[2], max_count=4)
    r = env.rollout(6, _const_policy([1, 2]), break_when_any_done=False)
    assert r.batch_size == torch.Size([2, 6])
    # reference: a loop that resets a sub-env to 0 after it reaches max_count
    expected = [[], []]
    for i, a in enumerate([1, 2]):
        c = 0
        for _ in range(6):
            c += a
            expected[i].append(c)
            if c >= 4:
                c = 0
    assert r["next", "count"].tolist() == expected
    assert r["count"][1].tolist() == [0, 2, 0, 2, 0, 2]


def test_rollout_auto_reset_false(counting_env):
    env = counting_env(batch_size=[2], max_count=100)
    start = env.reset()
    start["count"] = torch.tensor([5, 7])
    start["observation"] = start["count"].float().unsqueeze(-1).expand(2, 3).clone()
    resets = env.reset_count
    r = env.rollout(3, _const_policy([1, 1]), auto_reset=False, tensordict=start)
    assert env.reset_count == resets
    assert r["next", "count"].tolist() == [[6, 7, 8], [8, 9, 10]]
    with pytest.raises(RuntimeError, match="auto_reset=False"):
        env.rollout(3, auto_reset=False)


def test_rollout_stateless_params():
    env = PendulumEnv(seed=0)
    params = env.gen_params(batch_size=[3], g=0.0, max_speed=100.0)
    r = env.rollout(4, lambda td: td.set("action", torch.zeros(*td.batch_size, 1)), tensordict=params)
    assert r.batch_size == torch.Size([3, 4])
    # with g = 0 and no torque, the velocity stays constant and the angle grows linearly
    thdot = r["thdot"][:, 0]
    assert torch.allclose(r["next", "thdot"], thdot.unsqueeze(-1).expand(3, 4))
    assert torch.allclose(r["next", "th"][:, -1], r["th"][:, 0] + 4 * 0.05 * thdot, atol=1e-5)


def test_rollout_lazy_stack(counting_env):
    env = counting_env(batch_size=[2], max_count=100)
    r = env.rollout(3, _const_policy([1, 2]), return_contiguous=False)
    assert isinstance(r, LazyStackedTensorDict)
    assert r.batch_size == torch.Size([2, 3])
    assert r["next", "count"].tolist() == [[1, 2, 3], [2, 4, 6]]


def test_rollout_set_truncated(counting_env):
    env = counting_env(batch_size=[2], max_count=100)
    r = env.rollout(3, _const_policy([1, 1]), set_truncated=True)
    assert r["next", "truncated"].tolist() == [[False, False, True]] * 2
    assert r["next", "done"].tolist() == [[False, False, True]] * 2
    assert r["next", "terminated"].tolist() == [[False, False, False]] * 2


def test_rollout_set_truncated_without_truncated_key():
    env = MinimalEnv()
    with pytest.raises(RuntimeError, match="truncated"):
        env.rollout(3, set_truncated=True)


def test_rollout_out(counting_env):
    env = counting_env(batch_size=[2], max_count=100)
    out = env.rollout(3, _const_policy([1, 1])).zero_()
    storage = out["next", "count"]
    r = env.rollout(3, _const_policy([1, 2]), out=out)
    assert r is out
    assert out["next", "count"].tolist() == [[1, 2, 3], [2, 4, 6]]
    assert out["next", "count"].data_ptr() == storage.data_ptr()  # written in place


def test_rollout_step_counter_truncates():
    env = TransformedEnv(PendulumEnv(seed=0), StepCounter(max_steps=5))
    r = env.rollout(100)
    assert r.batch_size == torch.Size([5])
    assert r["next", "step_count"].tolist() == [1, 2, 3, 4, 5]
    assert r["next", "truncated"].tolist() == [False] * 4 + [True]


def test_rollout_custom_composite_action_env():
    env = TwoActionEnv(batch_size=[2])
    r = env.rollout(20)
    assert r["throttle"].shape == r["steer"].shape == r["next", "reward"].shape
    assert torch.equal(r["next", "reward"], r["throttle"])
    expected_pos = torch.stack([r["throttle"], (r["steer"] - 1).float()], -1).cumsum(1)
    assert torch.allclose(r["next", "pos"], expected_pos)


# ----------------------------------------------------------------------------- seeding
def test_set_seed_return_and_reproducibility():
    env = PendulumEnv(batch_size=[2])
    assert env.set_seed(3) == 4  # one random stream: the next env's seed is seed + 1 (tdict.seeding)
    assert env.set_seed(-5) == -4  # any int
    assert env.set_seed(3, static_seed=True) == 3
    assert env.set_seed(None) is None
    for bad in (1.5, True, "3"):
        with pytest.raises(TypeError, match=r"PendulumEnv.set_seed: seed must be an int or None, got"):
            env.set_seed(bad)

    def run(seed):
        e = PendulumEnv(batch_size=[2])
        e.set_seed(seed)
        torch.manual_seed(seed)
        return e.rollout(5)

    a, b, c = run(1), run(1), run(2)
    assert torch.equal(a["observation"], b["observation"]) and torch.equal(a["action"], b["action"])
    assert not torch.equal(a["observation"], c["observation"])


# ----------------------------------------------------------------------------- bad input
def test_wrong_action_shape():
    env = PendulumEnv(batch_size=[4])
    td = env.reset()
    td["action"] = torch.zeros(4, 2)
    with pytest.raises(ValueError, match=r"'action'.*expected shape \[4, 1\].*float32.*got shape \[4, 2\]"):
        env.step(td)
    assert "next" not in td.keys()


def test_wrong_action_dtype(counting_env):
    env = counting_env(batch_size=[2])
    td = env.reset()
    td["action"] = torch.ones(2, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"'action'.*dtype torch.int64.*got shape \[2\] and dtype torch.float32"):
        env.step(td)
    assert "next" not in td.keys()
    assert td["count"].tolist() == [0, 0]


def test_out_of_spec_action_with_validation():
    env = PendulumEnv()
    env.validate_actions = True
    td = env.reset()
    before = td.clone()
    td["action"] = torch.tensor([3.0])
    with pytest.raises(ValueError, match=r"'action'.*high.*3\.0.*2\.0"):
        env.step(td)
    assert "next" not in td.keys()
    assert torch.equal(td["th"], before["th"])
    # without the flag, out-of-spec actions pass (the env clips the torque)
    env.validate_actions = False
    env.step(td)
    assert "next" in td.keys()


def test_out_of_spec_discrete_action_with_validation(counting_env):
    env = counting_env(batch_size=[2], n_actions=2)
    env.validate_actions = True
    td = env.reset()
    td["action"] = torch.tensor([0, 5])
    with pytest.raises(ValueError, match=r"'action'.*\[5\].*0\.\.1"):
        env.step(td)
    assert "next" not in td.keys()


def test_missing_action_key():
    env = PendulumEnv()
    td = env.reset()
    with pytest.raises(KeyError, match=r"'action'.*observation"):
        env.step(td)
    assert "next" not in td.keys()


@pytest.mark.parametrize(("batch", "reward_shape"), [((), (1,)), ((3,), (3, 1)), ((2, 3), (2, 3, 1))])
def test_user_env_reward_of_wrong_shape(batch, reward_shape):
    env = MinimalEnv(batch_size=batch, reward_shape=reward_shape)
    td = env.rand_action(env.reset())
    expected = list(batch)
    with pytest.raises(
        ValueError, match=rf"'reward'.*expected shape {re_list(expected)}.*got shape {re_list(reward_shape)}"
    ):
        env.step(td)
    assert "next" not in td.keys()
    with pytest.raises(ValueError, match="'reward'"):
        env.rollout(3)


def re_list(shape):
    return r"\[" + ", ".join(str(s) for s in shape) + r"\]"


class _DoneOnly(MinimalEnv):
    """Writes the done flags it is told to keep (``flags``), each True from the second step on."""

    def __init__(self, flags, **kwargs):
        super().__init__(**kwargs)
        self.flags, self.steps = flags, 0

    def _step(self, tensordict):
        self.steps += 1
        flag = torch.full(self.batch_size, self.steps >= 2)
        out = TensorDict(obs=tensordict["obs"] + 1, reward=torch.ones(self.batch_size), batch_size=self.batch_size)
        for name in self.flags:
            out[name] = flag if name != "truncated" else ~flag
        return out


def test_user_env_done_only_completes_terminated():
    env = _DoneOnly(["done"], batch_size=[3])
    rollout = env.rollout(4, env.rand_action, break_when_any_done=False)
    assert rollout["next", "terminated"].tolist() == [[False, True, True, True]] * 3
    assert torch.equal(rollout["next", "terminated"], rollout["next", "done"])


def test_user_env_terminated_only_completes_done_with_truncated():
    env = _DoneOnly(["terminated", "truncated"], batch_size=[2])
    env.full_done_spec = Composite(
        {k: Categorical(2, shape=(2,), dtype=torch.bool) for k in ("done", "terminated", "truncated")}, shape=[2]
    )
    td = env.rand_step(env.reset())
    assert td["next", "done"].tolist() == [True, True]  # step 1: terminated False, truncated True
    td = env.rand_step(td["next"].exclude("done"))
    assert td["next", "done"].tolist() == [True, True] and td["next", "terminated"].tolist() == [True, True]


def test_user_env_done_and_truncated_without_terminated_is_refused():
    env = _DoneOnly(["done", "truncated"], batch_size=[2])
    env.full_done_spec = Composite(
        {k: Categorical(2, shape=(2,), dtype=torch.bool) for k in ("done", "terminated", "truncated")}, shape=[2]
    )
    with pytest.raises(RuntimeError, match=r"'terminated' is missing.*'truncated'"):
        env.rand_step(env.reset())


def test_user_env_missing_done_and_terminated():
    env = _DoneOnly([], batch_size=[3])
    td = env.rand_action(env.reset())
    with pytest.raises(KeyError, match=r"did not write 'done'.*\[3\].*bool.*'obs'"):
        env.step(td)
    assert "next" not in td.keys()


def test_done_after_reset_is_refused_unless_allowed():
    class Ended(MinimalEnv):
        def _reset(self, tensordict=None, **kwargs):
            out = super()._reset(tensordict, **kwargs)
            out["done"] = torch.ones(self.batch_size, dtype=torch.bool)
            return out

    with pytest.raises(RuntimeError, match=r"Ended.reset returned 'done' True.*allow_done_after_reset"):
        Ended(batch_size=[2]).reset()
    env = Ended(batch_size=[2])
    env.allow_done_after_reset = True
    assert env.reset()["done"].all()


def test_torchrl_style_class_level_specs():
    class Declared(EnvBase):
        def __new__(cls, *args, batch_size=(2,), **kwargs):
            cls._output_spec = Composite(
                full_observation_spec=Composite(obs=Unbounded(shape=(*batch_size, 3)), shape=batch_size),
                full_reward_spec=Composite(reward=Unbounded(shape=(*batch_size, 1)), shape=batch_size),
                full_done_spec=Composite(
                    done=Categorical(2, shape=(*batch_size, 1), dtype=torch.bool), shape=batch_size
                ),
                shape=batch_size,
            )
            cls._input_spec = Composite(
                full_action_spec=Composite(action=Unbounded(shape=(*batch_size, 1)), shape=batch_size),
                full_state_spec=Composite(shape=batch_size),
                shape=batch_size,
            )
            return super().__new__(cls, *args, **kwargs)

        def __init__(self, batch_size=(2,)):
            super().__init__(allow_done_after_reset=False)

        def _reset(self, tensordict=None, **kwargs):
            return TensorDict(obs=torch.zeros(*self.batch_size, 3), batch_size=self.batch_size)

        def _step(self, tensordict):
            shape = (*self.batch_size, 1)
            return TensorDict(
                obs=torch.ones(*self.batch_size, 3),
                reward=torch.ones(shape),
                done=torch.ones(shape, dtype=torch.bool),
                batch_size=self.batch_size,
            )

        def _set_seed(self, seed):
            pass

    env = Declared(batch_size=(4,))
    assert env.batch_size == (4,)
    assert env.observation_spec["obs"].shape == (4, 3)
    assert env.reward_spec.shape == (4, 1)
    assert sorted(env.done_keys) == ["done", "terminated"]
    assert "_output_spec" not in vars(Declared) and "_input_spec" not in vars(Declared)
    td = env.rand_step(env.reset())
    assert td["next", "terminated"].shape == (4, 1) and td["next", "terminated"].all()


def test_user_env_missing_reward_key():
    env = MinimalEnv(drop="reward")
    with pytest.raises(KeyError, match="'reward'"):
        env.rand_step(env.reset())


def test_step_batch_mismatch_locked_env(counting_env):
    env = counting_env(batch_size=[2])
    td = TensorDict(action=torch.zeros(3, dtype=torch.int64), count=torch.zeros(3, dtype=torch.int64), batch_size=[3])
    with pytest.raises(
        RuntimeError, match=r"reset: Expected a tensordict with shape==env.batch_size, got batch_size \[3\]"
    ):
        env.reset(td)
    td = TensorDict(action=torch.zeros(2, 3, dtype=torch.int64), batch_size=[2, 3])
    with pytest.raises(RuntimeError, match=r"step: .*got batch_size \[2, 3\] for an env of batch_size \[2\]"):
        env.step(td)


# ----------------------------------------------------------------------------- nested keys
class AgentsEnv(EnvBase):
    """A custom multi-agent env: 3 agents per sub-env under ``"agents"``, each done once its count reaches 2."""

    def __init__(self):
        super().__init__(batch_size=[2])
        agents = (2, 3)
        self.observation_spec = Composite(agents=Composite(obs=Unbounded(shape=(2, 3, 1)), shape=agents), shape=[2])
        self.full_action_spec = Composite(
            agents=Composite(action=Categorical(2, shape=agents), shape=agents), shape=[2]
        )
        self.full_reward_spec = Composite(agents=Composite(reward=Unbounded(shape=agents), shape=agents), shape=[2])
        flag = Categorical(2, shape=agents, dtype=torch.bool)
        self.full_done_spec = Composite(agents=Composite(done=flag, terminated=flag.clone(), shape=agents), shape=[2])

    def _reset(self, tensordict=None, **kwargs):
        flag = torch.zeros(2, 3, dtype=torch.bool)
        agents = TensorDict(obs=torch.zeros(2, 3, 1), done=flag, terminated=flag.clone(), batch_size=[2, 3])
        return TensorDict(agents=agents, batch_size=[2])

    def _step(self, tensordict):
        action = tensordict["agents", "action"]
        obs = tensordict["agents", "obs"] + action.unsqueeze(-1)
        done = obs.squeeze(-1) >= 2
        agents = TensorDict(obs=obs, reward=action.float(), done=done, terminated=done.clone(), batch_size=[2, 3])
        return TensorDict(agents=agents, batch_size=[2])

    def _set_seed(self, seed):
        pass


def test_nested_env_keys_and_partial_reset():
    env = AgentsEnv()
    assert env.action_keys == [("agents", "action")]
    assert env.reset_keys == [("agents", "_reset")]
    assert sorted(env.done_keys) == [("agents", "done"), ("agents", "terminated")]
    td = env.reset()
    actions = torch.tensor([[1, 0, 1], [0, 1, 1]])
    for _ in range(2):
        td["agents", "action"] = actions.clone()
        stepped, td = env.step_and_maybe_reset(td)
    assert stepped["next", "agents", "obs"].squeeze(-1).tolist() == [[2.0, 0.0, 2.0], [0.0, 2.0, 2.0]]
    # the done agents restarted (agent-level mask), the others kept their state
    assert td["agents", "obs"].squeeze(-1).tolist() == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    td["agents", "action"] = actions.clone()
    stepped, td = env.step_and_maybe_reset(td)
    assert td["agents", "obs"].squeeze(-1).tolist() == [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]
    r = env.rollout(5, break_when_any_done=False)
    assert r.batch_size == torch.Size([2, 5]) and r["next", "agents", "reward"].shape == torch.Size([2, 5, 3])


def test_step_counter_partial_reset_keeps_other_counts(counting_env):
    env = TransformedEnv(counting_env(batch_size=[2], max_count=3), StepCounter())
    td = env.reset()
    counts = []
    for _ in range(3):
        td["action"] = torch.tensor([1, 2])
        _, td = env.step_and_maybe_reset(td)
        counts.append(td["step_count"].tolist())
    # sub-env 1 terminates on its 2nd step (count 4 >= 3) and restarts; sub-env 0 on its 3rd
    assert counts == [[1, 1], [2, 0], [0, 1]]


def test_step_keeps_the_policys_next_entries_the_env_does_not_produce():
    """A recurrent policy writes its next hidden state under "next" before the step (TorchRL keeps it)."""
    env = PendulumEnv(batch_size=[3])
    td = env.reset()
    td["action"] = torch.zeros(3, 1)
    hidden = torch.randn(3, 4)
    td["next"] = TensorDict(hidden=hidden, observation=torch.full((3, 3), 9.0), batch_size=[3])
    out = env.step(td)["next"]
    assert torch.equal(out["hidden"], hidden)
    assert not torch.equal(out["observation"], torch.full((3, 3), 9.0))  # the env's own entries win
    # through a transform too: the entry is there before the transforms run
    tenv = TransformedEnv(PendulumEnv(batch_size=[3]), StepCounter(5))
    td = tenv.reset()
    td["action"] = torch.zeros(3, 1)
    td["next"] = TensorDict(hidden=hidden, batch_size=[3])
    out = tenv.step(td)["next"]
    assert torch.equal(out["hidden"], hidden) and torch.equal(
        out["step_count"], torch.ones(3, dtype=out["step_count"].dtype)
    )


def test_chained_rollout_resets_done_start(counting_env):
    # a rollout that continues (auto_reset=False) from a finished episode starts with a reset
    env = counting_env(batch_size=[2], max_count=2)
    first = env.rollout(2, lambda td: td.set("action", torch.ones(2, dtype=torch.int64)), break_when_any_done=False)
    assert first["next", "done"][:, -1].all()
    start = step_mdp(first[:, -1])
    second = env.rollout(
        2,
        lambda td: td.set("action", torch.ones(2, dtype=torch.int64)),
        auto_reset=False,
        tensordict=start,
        break_when_any_done=False,
    )
    assert second["count"][:, 0].tolist() == [0, 0]  # reset first: counting starts again from 0
    assert second["next", "count"].tolist() == [[1, 2], [1, 2]]


def test_maybe_reset_resets_only_done_sub_envs(counting_env):
    env = counting_env(batch_size=[3], max_count=9)
    td = env.reset()
    td["count"] = torch.tensor([4, 5, 6])
    td["done"] = torch.tensor([False, True, False])
    out = env.maybe_reset(td)
    assert out is td
    assert td["count"].tolist() == [4, 0, 6]
    assert not td["done"].any()


def test_done_keys_groups_follow_reset_keys(counting_env):
    env = counting_env(batch_size=[2])
    assert env.reset_keys == ["_reset"]
    assert [sorted(group) for group in env.done_keys_groups] == [["done", "terminated", "truncated"]]


def test_leaf_observation_spec_is_wrapped(counting_env):
    env = counting_env(batch_size=[2])
    env.observation_spec = Unbounded(shape=(2, 4))
    assert list(env.observation_spec.keys()) == ["observation"]
    assert env.observation_spec["observation"].shape == (2, 4)


def test_unbatched_input_and_output_specs(counting_env):
    env = counting_env(batch_size=[4, 2])
    assert env.output_spec_unbatched.shape == ()
    assert env.output_spec_unbatched["full_observation_spec", "observation"].shape == (3,)
    assert env.input_spec_unbatched["full_action_spec", "action"].shape == ()


def test_check_env_specs_method(counting_env):
    env = counting_env(batch_size=[2])
    assert env.check_env_specs() is None


def test_rollout_replays_actions(counting_env):
    env = counting_env(max_count=100)
    rollout = env.rollout(50, actions=[1, 0, 1, 1], break_when_any_done=False)
    assert rollout.batch_size == (4,)  # a sized iterable caps max_steps
    assert rollout["action"].dtype == torch.int64  # cast to the spec's dtype
    assert rollout["next", "count"].tolist() == [1, 1, 2, 3]
    with pytest.raises(ValueError, match=r"actions ran out after 2 steps \(max_steps=5\)"):
        env.rollout(5, actions=iter([1, 1]), break_when_any_done=False)
    with pytest.raises(ValueError, match="both a policy and actions"):
        env.rollout(3, policy=lambda td: td, actions=[1])


def test_batch_locked_is_read_only_and_set_through_new(counting_env):
    env = counting_env()
    assert env.batch_locked
    with pytest.raises(RuntimeError, match="batch_locked is a read-only property"):
        env.batch_locked = False

    class Unlocked(MinimalEnv):
        def __new__(cls, *args, **kwargs):
            return super().__new__(cls, *args, _batch_locked=False, **kwargs)

    assert not Unlocked().batch_locked
    assert MinimalEnv().batch_locked


def test_append_transform_wraps_a_plain_env(counting_env):
    env = counting_env(batch_size=[2])
    transformed = env.append_transform(StepCounter(max_steps=3))
    assert isinstance(transformed, TransformedEnv) and transformed.base_env is env
    rollout = transformed.rollout(5, break_when_any_done=False)
    assert rollout["next", "step_count"][0].tolist() == [1, 2, 3, 1, 2]
    assert transformed.append_transform(StepCounter(max_steps=9, step_count_key="other")) is transformed
    with pytest.raises(TypeError, match="append_transform takes a Transform, got function"):
        env.append_transform(lambda td: td)


def test_unbatched_spec_assignment_expands_to_the_batch(counting_env):
    env = counting_env(batch_size=[4, 2])
    env.observation_spec_unbatched = Composite(obs=Unbounded(shape=(3,)))
    assert env.observation_spec["obs"].shape == (4, 2, 3)
    env.action_spec_unbatched = Bounded(-1.0, 1.0, shape=(2,))
    assert env.action_spec.shape == (4, 2, 2)
    assert torch.equal(env.action_spec.high, torch.ones(4, 2, 2))
    env.reward_spec_unbatched = Unbounded(shape=())
    assert env.reward_spec.shape == (4, 2)
    assert env.action_spec_unbatched.shape == (2,)


def test_close_raise_if_closed():
    from rl_envs import SerialEnv

    env = SerialEnv(2, PendulumEnv)
    env.close()  # idempotent by default, also before the sub-envs start
    with pytest.raises(RuntimeError, match="already closed"):
        env.close(raise_if_closed=True)
    env.reset()
    env.close(raise_if_closed=True)
    TransformedEnv(PendulumEnv(), StepCounter()).close(raise_if_closed=True)  # nothing to close: no error


def test_add_truncated_keys_declares_a_false_flag(counting_env):
    env = MinimalEnv(batch_size=[2])
    assert "truncated" not in env.done_keys
    assert env.add_truncated_keys() is env
    assert sorted(env.done_keys) == ["done", "terminated", "truncated"]
    td = env.rand_step(env.reset())
    assert td["next", "truncated"].tolist() == [False, False]  # not written by _step: False
    rollout = env.rollout(3, set_truncated=True, break_when_any_done=False)
    assert rollout["next", "truncated"][:, -1].all() and rollout["next", "done"][:, -1].all()


def test_env_step_mdp_keeps_the_action(counting_env):
    env = counting_env(batch_size=[2])
    td = env.rand_step(env.reset())
    nxt = env.step_mdp(td)
    assert "action" in nxt.keys() and "reward" not in nxt.keys()
    assert torch.equal(nxt["count"], td["next", "count"])


def test_rollout_storing_device(counting_env):
    env = counting_env(batch_size=[2])
    rollout = env.rollout(3, storing_device="meta", break_when_any_done=False)
    assert rollout.device == torch.device("meta")
    assert rollout["next", "count"].device.type == "meta" and rollout.batch_size == (2, 3)


# ----------------------------------------------------------------------------- spec locking (TorchRL's spec_locked)
def test_specs_locked_after_construction_and_through_pickle():
    import inspect
    import pickle

    env = MinimalEnv(batch_size=[2])
    for _ in range(2):
        assert env.is_spec_locked and env.output_spec.is_locked and env.input_spec.is_locked
        with pytest.raises(RuntimeError, match="locked"):
            env.input_spec["full_action_spec", "extra"] = Unbounded(shape=(2, 1))
        with pytest.raises(RuntimeError, match="locked"):
            env.observation_spec["extra"] = Unbounded(shape=(2, 3))
        env = pickle.loads(pickle.dumps(env))
    # assigning a whole spec stays allowed, and the env then reads the new keys
    env.observation_spec = Composite(obs=Unbounded(shape=(2, 2)), extra=Unbounded(shape=(2, 3)), shape=[2])
    assert sorted(env.observation_keys) == ["extra", "obs"]
    # the keyword is taken before the subclass's __init__ (which does not accept it), and signatures stay the class's
    assert "reward_shape" in inspect.signature(MinimalEnv).parameters


def test_unlocked_specs_accept_in_place_edits_and_are_read_again():
    env = MinimalEnv(spec_locked=False)
    assert not env.is_spec_locked and not env.output_spec.is_locked
    td = env.rollout(2, lambda td: td.set("action", torch.zeros(1)))
    assert td["next", "obs"].shape == (2, 2)
    env.observation_spec["note"] = Unbounded(shape=(3,))  # in place: the keys are read again on the next step
    assert "note" in env.observation_keys
    env.set_spec_lock_(True)
    with pytest.raises(RuntimeError, match="locked"):
        env.observation_spec["other"] = Unbounded(shape=(1,))


def test_batch_unlocked_env_refuses_other_trailing_dims():
    class Stateless(MinimalEnv):
        def __new__(cls, *args, **kwargs):
            return super().__new__(cls, *args, _batch_locked=False, **kwargs)

    env = Stateless(batch_size=[2])
    assert not env.batch_locked
    env._check_batch_size("step", TensorDict(batch_size=[3, 2]))  # leading dims are allowed
    with pytest.raises(RuntimeError, match=r"reset: .*shape ending in env.batch_size \[2\].*got batch_size \[\]"):
        env.reset(TensorDict())
    with pytest.raises(
        RuntimeError,
        match=r"step: Expected a tensordict with shape ending in env.batch_size \[2\].*got batch_size \[4\]",
    ):
        env.step(TensorDict(obs=torch.zeros(4, 2), action=torch.zeros(4, 1), batch_size=[4]))


# ----------------------------------------------------------------------------- auto_specs_
def test_auto_specs_reads_the_specs_off_a_reset_and_a_step():
    reference = MinimalEnv(batch_size=[3])
    env = MinimalEnv(batch_size=[3])
    env.full_observation_spec = Composite(shape=[3])
    env.full_action_spec = Composite(action=Unbounded(shape=(3, 7)), shape=[3])  # wrong: replaced
    out = env.auto_specs_(lambda td: td.set("action", torch.full((3, 1), 0.5)), observation_key="obs")
    assert out is env
    assert env.full_observation_spec["obs"].shape == reference.full_observation_spec["obs"].shape == (3, 2)
    assert env.full_action_spec["action"].shape == (3, 1) and env.full_action_spec["action"].dtype == torch.float32
    assert env.full_reward_spec["reward"].shape == (3,)
    assert sorted(env.full_done_spec.keys()) == ["done", "terminated"]
    assert env.full_done_spec["done"].dtype == torch.bool and env.full_done_spec["done"].shape == (3,)
    assert env.full_state_spec.is_empty()  # everything the reset wrote, the step writes again
    env.check_env_specs()
    rollout = env.rollout(3, lambda td: td.set("action", torch.zeros(3, 1)))
    assert rollout["next", "obs"].shape == (3, 3, 2)


def test_auto_specs_refuses_unnamed_outputs_and_changes_nothing():
    env = MinimalEnv()
    before = env.full_observation_spec.clone()
    with pytest.raises(RuntimeError, match=r"the step wrote \['obs'\], which are in none of"):
        env.auto_specs_(lambda td: td.set("action", torch.zeros(1)))
    assert env.full_observation_spec == before
    with pytest.raises(TypeError, match="observation_key must be a key or a list of keys"):
        env.auto_specs_(lambda td: td.set("action", torch.zeros(1)), observation_key=3)


def test_rollout_auto_cast_to_device_runs_the_policy_where_its_parameters_are():
    from rl_envs.rollout import _device_casting_policy

    policy = TensorDictModule(nn.Linear(2, 1), in_keys=["obs"], out_keys=["action"])
    torch.manual_seed(0)
    plain = MinimalEnv().rollout(3, policy)
    torch.manual_seed(0)
    cast = MinimalEnv().rollout(3, policy, auto_cast_to_device=True)
    assert (plain == cast).all()
    # the policy and the env on one device (or a device-less env or policy): the policy runs as given
    env = MinimalEnv()
    assert _device_casting_policy(env, policy) is policy
    env.device = "cpu"
    assert _device_casting_policy(env, policy) is policy
    seen = []

    class Recorder(nn.Module):  # a module on "meta": the step's data goes there, its output comes back
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1, device="meta"))

        def forward(self, td):
            seen.append(td["obs"].device)
            return td.empty().set("action", torch.zeros(1, device="meta"))

    wrapped = _device_casting_policy(env, Recorder())
    with pytest.raises(NotImplementedError):  # meta tensors hold no data to bring back
        wrapped(env.reset())
    assert seen == [torch.device("meta")]
