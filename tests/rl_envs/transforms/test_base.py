"""Transform, Compose, TransformedEnv and StepCounter: the transform machinery itself."""

import pytest
import torch
from tdict import TensorDict
from tdict.specs import Bounded, Composite, Unbounded

from rl_envs import Compose, PendulumEnv, StepCounter, Transform, TransformedEnv


class AddOne(Transform):
    """obs -> obs + 1 (forward) and action -> action - 1 (inverse), with a spec change."""

    invertible = True

    def _apply_transform(self, value):
        return value + 1

    def _inv_apply_transform(self, value):
        return value - 1

    def transform_observation_spec(self, spec):
        for key in self.in_keys:
            if key in spec.keys():
                spec[self.out_keys[self.in_keys.index(key)]] = Unbounded(shape=spec[key].shape)
        return spec


def test_key_mapping_forward_on_plain_tensordict():
    t = AddOne(in_keys=["a", "b"], out_keys=["a2", "b2"])
    td = TensorDict(a=torch.zeros(3), b=torch.ones(3), batch_size=[3])
    out = t(td)
    assert out is td
    assert out["a2"].tolist() == [1.0] * 3 and out["b2"].tolist() == [2.0] * 3
    assert out["a"].tolist() == [0.0] * 3  # inputs kept when outputs differ


def test_missing_in_key_names_it():
    with pytest.raises(KeyError, match="'missing'.*'a'"):
        AddOne(in_keys=["missing"])(TensorDict(a=torch.zeros(())))


def test_mismatched_key_lists():
    with pytest.raises(ValueError, match="differ in length"):
        AddOne(in_keys=["a", "b"], out_keys=["c"])(TensorDict(a=torch.zeros(()), b=torch.zeros(())))


def test_inverse_on_a_copy():
    t = AddOne(in_keys_inv=["action"], out_keys_inv=["action_out"])
    td = TensorDict(action_out=torch.full((2,), 5.0), batch_size=[2])
    inv = t.inv(td)
    assert inv["action"].tolist() == [4.0, 4.0]
    assert "action" not in td.keys()  # the caller's TensorDict is untouched


def test_transformed_env_observation_and_spec():
    base = PendulumEnv(seed=0)
    env = TransformedEnv(PendulumEnv(seed=0), AddOne(in_keys=["observation"], out_keys=["obs_plus"]))
    ref, out = (
        base.rollout(4, lambda td: td.set("action", torch.zeros(1))),
        env.rollout(4, lambda td: td.set("action", torch.zeros(1))),
    )
    torch.testing.assert_close(out["next", "obs_plus"], ref["next", "observation"] + 1)
    torch.testing.assert_close(out["obs_plus"], ref["observation"] + 1)  # reset output is transformed too
    assert "obs_plus" in env.observation_spec.keys()
    assert "obs_plus" not in base.observation_spec.keys()  # the base env's specs are not touched


def test_inverse_path_reaches_the_base_env(recording_pendulum):
    inner = recording_pendulum(seed=0)
    env = TransformedEnv(inner, AddOne(in_keys_inv=["action"]))
    td = env.reset()
    td["action"] = torch.full((1,), 0.5)
    env.step(td)
    assert inner.actions[-1].tolist() == [-0.5]
    assert td["action"].tolist() == [0.5]  # the recorded action is the caller's


def test_compose_order_and_reverse_inverse():
    log = []

    class Tag(Transform):
        def __init__(self, name):
            super().__init__(in_keys=["x"], in_keys_inv=["a"])
            self.name = name

        def _apply_transform(self, value):
            log.append(("fwd", self.name))
            return value

        def _inv_apply_transform(self, value):
            log.append(("inv", self.name))
            return value

    c = Compose(Tag("first"), Tag("second"))
    c(TensorDict(x=torch.zeros(())))
    c.inv(TensorDict(a=torch.zeros(())))
    assert log == [("fwd", "first"), ("fwd", "second"), ("inv", "second"), ("inv", "first")]
    assert len(c) == 2 and c[0].name == "first"


def test_compose_rejects_non_transforms():
    with pytest.raises(TypeError, match="Transform"):
        Compose(torch.nn.Linear(1, 1))


def test_append_and_insert_refresh_specs():
    env = TransformedEnv(PendulumEnv())
    assert "step_count" not in env.observation_spec.keys()
    env.append_transform(StepCounter())
    assert "step_count" in env.observation_spec.keys()
    env.insert_transform(0, AddOne(in_keys=["th"], out_keys=["th1"]))
    assert "th1" in env.observation_spec.keys()
    rollout = env.rollout(3)
    assert set(rollout["next"].keys()) >= {"th1", "step_count"}


def test_transform_belongs_to_one_container():
    t = StepCounter()
    TransformedEnv(PendulumEnv(), t)
    with pytest.raises(RuntimeError, match="clone"):
        TransformedEnv(PendulumEnv(), t)
    TransformedEnv(PendulumEnv(), t.clone())  # a clone is free


def test_parent_sees_the_preceding_transforms():
    first, second = StepCounter(), AddOne(in_keys=["th"], out_keys=["th1"])
    env = TransformedEnv(PendulumEnv(), Compose(first, second))
    assert "step_count" in second.parent.observation_spec.keys()
    assert "th1" not in second.parent.observation_spec.keys()
    assert "step_count" not in first.parent.observation_spec.keys()
    assert StepCounter().parent is None
    assert env.transform[1] is second


def test_transform_attribute_is_the_single_transform_given_until_the_chain_grows():
    """TorchRL: ``TransformedEnv(env, t).transform is t``; a Compose given, or a grown chain, is a Compose."""
    counter = StepCounter(max_steps=3)
    env = TransformedEnv(PendulumEnv(), counter)
    assert env.transform is counter and counter.parent is not None
    assert env.rollout(5)["next", "step_count"].tolist() == [1, 2, 3]
    added = AddOne(in_keys=["th"], out_keys=["th1"])
    env.append_transform(added)
    assert isinstance(env.transform, Compose) and list(env.transform) == [counter, added]
    given = Compose(StepCounter())
    assert TransformedEnv(PendulumEnv(), given).transform is given
    assert isinstance(TransformedEnv(PendulumEnv()).transform, Compose)


def test_attribute_forwarding_and_spec_setters():
    env = TransformedEnv(PendulumEnv(), StepCounter())
    assert env.gen_params is not None and callable(env.gen_params)  # a PendulumEnv method
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        env.nope
    with pytest.raises(AttributeError, match="base env"):
        env.observation_spec = Composite()


# ---------------------------------------------------------------------- StepCounter
def test_step_counter_truncates_single_env():
    env = TransformedEnv(PendulumEnv(seed=0), StepCounter(max_steps=4))
    rollout = env.rollout(10)
    assert rollout.batch_size == torch.Size([4])
    assert rollout["step_count"].tolist() == [0, 1, 2, 3]
    assert rollout["next", "step_count"].tolist() == [1, 2, 3, 4]
    assert rollout["next", "truncated"].tolist() == [False, False, False, True]
    assert rollout["next", "done"].tolist() == [False, False, False, True]
    assert not rollout["next", "terminated"].any()


def test_step_counter_batched_with_partial_resets():
    env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), StepCounter(max_steps=3))
    td = env.reset()
    td["step_count"] = torch.tensor([0, 1])  # the second sub-env is one step ahead
    rollout = env.rollout(6, break_when_any_done=False, auto_reset=False, tensordict=td)
    assert rollout["next", "step_count"].tolist() == [[1, 2, 3, 1, 2, 3], [2, 3, 1, 2, 3, 1]]
    assert rollout["next", "truncated"].tolist() == [
        [False, False, True, False, False, True],
        [False, True, False, False, True, False],
    ]


def test_step_counter_spec_and_values():
    env = TransformedEnv(PendulumEnv(batch_size=[3]), Compose(StepCounter(max_steps=5)))
    spec = env.observation_spec["step_count"]
    assert isinstance(spec, Bounded) and spec.dtype == torch.int64 and spec.shape == torch.Size([3])
    rollout = env.rollout(5)
    assert env.full_done_spec["truncated"].is_in(rollout["next", "truncated"][:, 0])
    assert spec.is_in(rollout["next", "step_count"][:, -1])
    fake = env.fake_tensordict()
    assert fake["step_count"].shape == torch.Size([3]) and fake["next", "truncated"].dtype == torch.bool


def test_step_counter_adds_truncated_when_missing():
    from tdict.specs import Categorical

    base = PendulumEnv()
    base.done_spec = Composite(done=Categorical(2, dtype=torch.bool), shape=())
    assert "truncated" not in base.done_keys
    env = TransformedEnv(base, StepCounter(max_steps=2))
    assert "truncated" in env.done_keys
    with pytest.raises(ValueError, match="max_steps"):
        StepCounter(max_steps=0)


def test_quick_example_from_the_issue(capsys):
    from torch import nn
    from tdict.nn import TensorDictModule

    env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=200))
    policy = TensorDictModule(
        nn.Sequential(nn.LazyLinear(64), nn.Tanh(), nn.Linear(64, 1), nn.Tanh()),
        in_keys=["observation"],
        out_keys=["action"],
    )
    rollout = env.rollout(max_steps=32, policy=policy)
    print(rollout.batch_size)
    print(rollout["next", "reward"].shape)
    assert capsys.readouterr().out == "torch.Size([32])\ntorch.Size([32])\n"


def test_reset_fills_missing_done_flags_with_the_leading_batch_of_a_stateless_env():
    class NoFlags(PendulumEnv):
        def _reset(self, tensordict=None, **kwargs):
            return super()._reset(tensordict, **kwargs).exclude("done", "terminated", "truncated")

    env = NoFlags()
    out = env.reset(env.gen_params(batch_size=[3]))
    for key in ("done", "terminated", "truncated"):
        assert out[key].shape == torch.Size([3]) and not out[key].any()


def test_step_count_and_init_keys_list_what_is_written():
    from rl_envs import InitTracker

    env = TransformedEnv(PendulumEnv(), Compose(StepCounter(step_count_key="n"), InitTracker()))
    counter, tracker = env.transform
    assert counter.step_count_keys == ["n"] and tracker.init_keys == ["is_init"]
    rollout = env.rollout(3)
    assert all(key in rollout.keys() for key in (*counter.step_count_keys, *tracker.init_keys))
    assert rollout["is_init"].tolist() == [True, False, False] and rollout["next", "n"].tolist() == [1, 2, 3]
