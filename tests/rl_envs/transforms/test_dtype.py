"""DoubleToFloat, DTypeCastTransform and DeviceCastTransform: values, specs, inverse path."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict
from tdict.specs import Bounded, Composite, Unbounded

from rl_envs import (
    Compose,
    DeviceCastTransform,
    DoubleToFloat,
    DTypeCastTransform,
    EnvBase,
    PendulumEnv,
    StepCounter,
    TransformedEnv,
)


class Float64Env(EnvBase):
    """obs <- clamp(obs + gain * action), reward = -|obs|²; everything float64; asserts float64 actions."""

    def __init__(self, batch_size=()):
        super().__init__(batch_size=batch_size)
        b = self.batch_size
        self.observation_spec = Composite(obs=Bounded(-10.0, 10.0, shape=(*b, 2), dtype=torch.float64), shape=b)
        self.action_spec = Bounded(-1.0, 1.0, shape=(*b, 1), dtype=torch.float64)
        self.reward_spec = Unbounded(shape=b, dtype=torch.float64)
        self.state_spec = Composite(gain=Unbounded(shape=b, dtype=torch.float64), shape=b)

    def _reset(self, tensordict=None, **kwargs):
        b = self.batch_size
        return TensorDict(
            obs=torch.zeros(*b, 2, dtype=torch.float64), gain=torch.full(b, 0.5, dtype=torch.float64), batch_size=b
        )

    def _step(self, tensordict):
        action = tensordict["action"]
        if action.dtype != torch.float64 or tensordict["gain"].dtype != torch.float64:
            raise TypeError(f"Float64Env wants float64 inputs, got {action.dtype} / {tensordict['gain'].dtype}")
        obs = (tensordict["obs"] + tensordict["gain"].unsqueeze(-1) * action).clamp(-10, 10)
        done = torch.zeros(self.batch_size, dtype=torch.bool)
        return TensorDict(
            obs=obs, reward=-(obs**2).sum(-1), done=done, terminated=done.clone(), batch_size=self.batch_size
        )

    def _set_seed(self, seed):
        pass


def _reference(batch_size, actions):
    """Float64Env's trajectory in float64 for a list of float64 actions."""
    obs = torch.zeros(*batch_size, 2, dtype=torch.float64)
    out_obs, rewards = [], []
    for a in actions:
        obs = (obs + 0.5 * a).clamp(-10, 10)
        out_obs.append(obs)
        rewards.append(-(obs**2).sum(-1))
    nb = len(batch_size)
    return torch.stack(out_obs, nb), torch.stack(rewards, nb)


def _policy(batch_size, values, dtype=torch.float32):
    it = iter(values)

    def policy(td):
        return td.set("action", torch.full((*batch_size, 1), next(it), dtype=dtype))

    return policy


ACTIONS = [0.5, -1.0, 0.25, 1.0]


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_double_to_float_env(batch_size, specs_truthful):
    env = TransformedEnv(Float64Env(batch_size), DoubleToFloat())
    assert env.observation_spec["obs"].dtype == torch.float32
    assert env.action_spec.dtype == torch.float32
    assert env.reward_spec.dtype == torch.float32
    assert env.state_spec["gain"].dtype == torch.float32
    assert isinstance(env.observation_spec["obs"], Bounded)
    rollout = env.rollout(4, _policy(batch_size, ACTIONS))
    t = env.transform
    assert t.in_keys == ["obs", "reward"] and t.in_keys_inv == ["action", "gain"]
    for key in ["obs", "action", "gain", ("next", "obs"), ("next", "reward")]:
        assert rollout[key].dtype == torch.float32, key
    ref_obs, ref_reward = _reference(batch_size, [torch.tensor(a, dtype=torch.float64) for a in ACTIONS])
    torch.testing.assert_close(rollout["next", "obs"], ref_obs.float())
    torch.testing.assert_close(rollout["next", "reward"], ref_reward.float())
    assert rollout.batch_size == torch.Size([*batch_size, 4])
    specs_truthful(env, rollout)


def test_double_to_float_inverse_reaches_env_as_float64():
    env = TransformedEnv(Float64Env(), DoubleToFloat())
    td = env.reset()
    td["action"] = torch.tensor([0.5])  # float32 from the caller
    out = env.step(td)
    assert out["action"].dtype == torch.float32  # the caller's td is not changed
    assert out["next", "obs"].tolist() == [0.25, 0.25]
    # without the inverse the env refuses float32 actions
    env2 = TransformedEnv(Float64Env(), DoubleToFloat(in_keys=["obs", "reward"]))
    assert env2.action_spec.dtype == torch.float64
    td = env2.reset()
    assert td["gain"].dtype == torch.float64
    td["action"] = torch.tensor([0.5], dtype=torch.float64)
    assert env2.step(td)["next", "obs"].dtype == torch.float32


def test_double_to_float_inv_on_plain_td():
    td = TensorDict(action=torch.ones(4, 1), other=torch.ones(4, dtype=torch.int64), batch_size=[4])
    out = DoubleToFloat().inv(td)
    assert out["action"].dtype == torch.float64 and out["other"].dtype == torch.int64
    assert td["action"].dtype == torch.float32  # inv works on a copy
    out = DoubleToFloat(in_keys=["obs"], in_keys_inv=["action"], out_keys_inv=["action32"]).inv(
        TensorDict(action32=torch.ones(2))
    )
    assert out["action"].dtype == torch.float64


def test_double_to_float_explicit_keys(specs_truthful):
    env = TransformedEnv(Float64Env(), DoubleToFloat(in_keys=["obs"]))
    assert env.reward_spec.dtype == torch.float64
    assert env.action_spec.dtype == torch.float64
    rollout = env.rollout(3, _policy((), ACTIONS, torch.float64))
    assert rollout["next", "obs"].dtype == torch.float32
    assert rollout["next", "reward"].dtype == torch.float64
    specs_truthful(env, rollout)


def test_double_to_float_compose_and_replay_sample(specs_truthful):
    env = TransformedEnv(Float64Env((3,)), Compose(DoubleToFloat(), StepCounter(max_steps=3)))
    rollout = env.rollout(5, _policy((3,), ACTIONS))
    assert rollout.batch_size == torch.Size([3, 3])
    assert rollout["next", "step_count"][0].tolist() == [1, 2, 3]
    assert rollout["next", "obs"].dtype == torch.float32
    specs_truthful(env, rollout)
    # a stacked float64 rollout of the base env, transformed as a replay-buffer sample
    base = Float64Env((3,))
    sample = base.rollout(4, _policy((3,), ACTIONS, torch.float64))
    ref = sample.clone()
    out = DoubleToFloat()(sample)
    for key, value in ref.items(True, True):
        expected = value.float() if value.dtype == torch.float64 else value
        assert out[key].dtype == expected.dtype, key
        torch.testing.assert_close(out[key], expected)


def test_dtype_cast_float32_to_float64_pendulum(specs_truthful):
    base = PendulumEnv(batch_size=[3], seed=0)
    ref = PendulumEnv(batch_size=[3], seed=0).rollout(4, lambda td: td.set("action", torch.full((3, 1), 0.3)))
    env = TransformedEnv(base, DTypeCastTransform(torch.float32, torch.float64))
    assert env.action_spec.dtype == torch.float64
    assert env.state_spec["params", "g"].dtype == torch.float64
    rollout = env.rollout(4, lambda td: td.set("action", torch.full((3, 1), 0.3, dtype=torch.float64)))
    for key in ["observation", "th", ("params", "g"), ("next", "reward"), ("next", "thdot")]:
        assert rollout[key].dtype == torch.float64, key
        torch.testing.assert_close(rollout[key], ref[key].double())
    specs_truthful(env, rollout)


def test_dtype_cast_errors():
    with pytest.raises(TypeError, match="dtype_in"):
        DTypeCastTransform("float", torch.float32)
    with pytest.raises(ValueError, match="out_keys"):
        DTypeCastTransform(torch.float64, torch.float32, out_keys=["x"])
    env = TransformedEnv(PendulumEnv(), DTypeCastTransform(torch.float64, torch.float32, in_keys=["observation"]))
    with pytest.raises(TypeError, match="observation"):
        env.observation_spec


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_device_cast_env(batch_size, specs_truthful):
    policy = lambda td: td.set("action", torch.full((*batch_size, 1), -0.4))  # noqa: E731
    ref = PendulumEnv(batch_size=batch_size, seed=1).rollout(3, policy)
    env = TransformedEnv(PendulumEnv(batch_size=batch_size, seed=1), DeviceCastTransform("cpu"))
    rollout = env.rollout(3, policy)
    torch.testing.assert_close(rollout["next", "observation"], ref["next", "observation"])
    assert rollout["observation"].device.type == "cpu"
    assert env.transform._target_orig() == torch.device("cpu")
    specs_truthful(env, rollout)


def test_device_cast_keys_compose_and_plain_td(specs_truthful):
    env = TransformedEnv(
        PendulumEnv(batch_size=[3], seed=0),
        Compose(
            StepCounter(max_steps=100), DeviceCastTransform("cpu", in_keys=["observation"], in_keys_inv=["action"])
        ),
    )
    policy = lambda td: td.set("action", torch.full((3, 1), 0.1))  # noqa: E731
    rollout = env.rollout(3, policy)
    ref = PendulumEnv(batch_size=[3], seed=0).rollout(3, policy)
    torch.testing.assert_close(rollout["next", "observation"], ref["next", "observation"])
    specs_truthful(env, rollout)
    # a plain TensorDict: only the selected keys move
    td = TensorDict(obs=torch.ones(4, 2), other=torch.ones(4), batch_size=[4])
    out = DeviceCastTransform("meta", "cpu", in_keys=["obs"], out_keys=["obs_meta"])(td)
    assert out["obs_meta"].device.type == "meta" and out["other"].device.type == "cpu"
    whole = DeviceCastTransform("meta")(TensorDict(obs=torch.ones(4, 2), batch_size=[4]))
    assert whole["obs"].device.type == "meta"
    spec = TransformedEnv(PendulumEnv(), DeviceCastTransform("cpu", in_keys=["observation"])).observation_spec
    assert spec["observation"].device == torch.device("cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_device_cast_cuda_round_trip():
    env = TransformedEnv(PendulumEnv(batch_size=[3], seed=0), DeviceCastTransform("cuda"))
    policy = lambda td: td.set("action", torch.full((3, 1), 0.1, device="cuda"))  # noqa: E731
    rollout = env.rollout(3, policy)
    assert rollout["next", "observation"].device.type == "cuda"
    ref = PendulumEnv(batch_size=[3], seed=0).rollout(3, lambda td: td.set("action", torch.full((3, 1), 0.1)))
    torch.testing.assert_close(rollout["next", "observation"].cpu(), ref["next", "observation"])
    assert env.action_spec.device.type == "cuda"
