"""UnsqueezeTransform, SqueezeTransform, FlattenObservation, PermuteTransform: values, specs, inverse path."""
from __future__ import annotations

import pytest
import torch
from tdict import TensorDict

from rl_envs import (
    Compose,
    FlattenObservation,
    PendulumEnv,
    PermuteTransform,
    SqueezeTransform,
    StepCounter,
    TransformedEnv,
    UnsqueezeTransform,
)


def assert_specs_truthful(env, rollout):
    """Every rollout value lies in its spec, and fake_tensordict() matches a real step (keys, shapes, dtypes)."""
    nb = len(env.batch_size)
    steps = [rollout[(slice(None),) * nb + (t,)] for t in range(rollout.batch_size[nb])]
    fake = env.fake_tensordict()
    real = steps[0]
    fake_keys, real_keys = set(fake.keys(True, True)), set(real.keys(True, True))
    # an env may also write its state entries in its step output (CountingEnv's "count")
    real_keys -= {("next", *((k,) if isinstance(k, str) else k)) for k in env.full_state_spec.keys(True, True)} - fake_keys
    assert fake_keys == real_keys, (fake_keys ^ real_keys)
    for key in fake_keys:
        assert fake[key].shape == real[key].shape, (key, fake[key].shape, real[key].shape)
        assert fake[key].dtype == real[key].dtype, (key, fake[key].dtype, real[key].dtype)
    root_specs = (env.full_observation_spec, env.full_done_spec, env.full_action_spec, env.full_state_spec)
    next_specs = (env.full_observation_spec, env.full_done_spec, env.full_reward_spec)
    for step in steps:
        for where, specs in (((), root_specs), (("next",), next_specs)):
            for spec in specs:
                for key, leaf in spec.items(True, True):
                    full = where + ((key,) if isinstance(key, str) else key)
                    value = step.get(full, None)
                    if value is not None:
                        assert leaf.is_in(value), (full, leaf, value)


def _policy(batch_size, shape=(1,), value=0.3, key="action"):
    return lambda td: td.set(key, torch.full((*batch_size, *shape), value))


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_unsqueeze_env_and_inverse(batch_size):
    ref = PendulumEnv(batch_size=batch_size, seed=0).rollout(4, _policy(batch_size))
    env = TransformedEnv(PendulumEnv(batch_size=batch_size, seed=0),
                         UnsqueezeTransform(-1, in_keys=["observation", "th"], out_keys=["observation", "th_u"], in_keys_inv=["action"]))
    assert env.observation_spec["observation"].shape == torch.Size([*batch_size, 3, 1])
    assert env.action_spec.shape == torch.Size([*batch_size, 1, 1])
    # the caller gives [*b, 1, 1] actions; the env receives [*b, 1]
    rollout = env.rollout(4, _policy(batch_size, (1, 1)))
    torch.testing.assert_close(rollout["next", "observation"], ref["next", "observation"].unsqueeze(-1))
    torch.testing.assert_close(rollout["next", "th_u"], ref["next", "th"].unsqueeze(-1))
    assert rollout["action"].shape == torch.Size([*batch_size, 4, 1, 1])
    assert_specs_truthful(env, rollout)


def test_squeeze_compose_inverse_and_plain_td():
    env = TransformedEnv(PendulumEnv(batch_size=[3], seed=0), Compose(
        UnsqueezeTransform(-2, in_keys=["observation"]), StepCounter(max_steps=10),
        SqueezeTransform(-1, in_keys_inv=["action"])))
    assert env.observation_spec["observation"].shape == torch.Size([3, 1, 3])
    assert env.action_spec.shape == torch.Size([3])
    rollout = env.rollout(3, lambda td: td.set("action", torch.full((3,), 0.3)))
    ref = PendulumEnv(batch_size=[3], seed=0).rollout(3, _policy((3,)))
    torch.testing.assert_close(rollout["next", "observation"], ref["next", "observation"].unsqueeze(-2))
    assert_specs_truthful(env, rollout)
    sample = TensorDict(x=torch.rand(2, 5, 4, 1), batch_size=[2, 5])
    out = SqueezeTransform(-1, in_keys=["x"], out_keys=["y"])(sample.clone())
    torch.testing.assert_close(out["y"], sample["x"][..., 0])
    with pytest.raises(ValueError, match="size is not 1"):
        SqueezeTransform(-2, in_keys=["x"])(sample.clone())
    with pytest.raises(ValueError, match="negative"):
        UnsqueezeTransform(0, in_keys=["x"])


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_flatten_env(counting_env, batch_size):
    env = TransformedEnv(counting_env(batch_size=batch_size, pixels=True, size=4), FlattenObservation(-3, -1))
    assert env.observation_spec["pixels"].shape == torch.Size([*batch_size, 48])
    rollout = env.rollout(3, lambda td: td.set("action", torch.ones(batch_size, dtype=torch.int64)))
    assert rollout["next", "pixels"].shape == torch.Size([*batch_size, 3, 48])
    expected = torch.arange(1, 4, dtype=torch.uint8).expand(*batch_size, 3)
    assert torch.equal(rollout["next", "pixels"], expected.unsqueeze(-1).expand(*batch_size, 3, 48))
    assert_specs_truthful(env, rollout)


def test_flatten_positive_dims_compose_and_plain_td(counting_env):
    env = TransformedEnv(counting_env(batch_size=[2], pixels=True, size=4),
                         Compose(StepCounter(max_steps=5), FlattenObservation(0, 1, allow_positive_dim=True)))
    assert env.observation_spec["pixels"].shape == torch.Size([2, 16, 3])
    rollout = env.rollout(2)
    assert rollout["pixels"].shape == torch.Size([2, 2, 16, 3])
    assert_specs_truthful(env, rollout)
    x = torch.rand(2, 5, 3, 4, 6)
    out = FlattenObservation(-2, -1, in_keys=["x"])(TensorDict(x=x, batch_size=[2, 5]))
    torch.testing.assert_close(out["x"], x.reshape(2, 5, 3, 24))
    with pytest.raises(ValueError, match="negative"):
        FlattenObservation(0, 1)


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_permute_env(counting_env, batch_size):
    env = TransformedEnv(counting_env(batch_size=batch_size, pixels=True, size=4), PermuteTransform([-1, -3, -2], in_keys=["pixels"]))
    assert env.observation_spec["pixels"].shape == torch.Size([*batch_size, 3, 4, 4])
    rollout = env.rollout(3)
    assert rollout["pixels"].shape == torch.Size([*batch_size, 3, 3, 4, 4])
    ref = counting_env(batch_size=batch_size, pixels=True, size=4).rollout(3, lambda td: td.set("action", rollout["action"][..., 0]))
    assert torch.equal(rollout["next", "pixels"][..., 0, :, :, :], ref["next", "pixels"][..., 0, :, :, :].permute(*range(len(batch_size)), -1, -3, -2))
    assert_specs_truthful(env, rollout)


def test_permute_inverse_compose_and_plain_td():
    # the caller's action is [*b, 1, 2] (a transposed [2, 1] action): a user env reading [*b, 2, 1]
    x = torch.rand(2, 5, 4, 6, 3)
    t = PermuteTransform([-1, -3, -2], in_keys=["x"], in_keys_inv=["a"])
    out = t(TensorDict(x=x, batch_size=[2, 5]))
    torch.testing.assert_close(out["x"], x.permute(0, 1, 4, 2, 3))
    back = t.inv(TensorDict(a=out["x"], batch_size=[2, 5]))
    torch.testing.assert_close(back["a"], x)
    env = TransformedEnv(PendulumEnv(batch_size=[3], seed=0), Compose(
        UnsqueezeTransform(-1, in_keys=["observation"], in_keys_inv=["action"]),
        PermuteTransform([-1, -2], in_keys=["observation"], in_keys_inv=["action"])))
    assert env.observation_spec["observation"].shape == torch.Size([3, 1, 3])
    assert env.action_spec.shape == torch.Size([3, 1, 1])
    rollout = env.rollout(3, _policy((3,), (1, 1)))
    ref = PendulumEnv(batch_size=[3], seed=0).rollout(3, _policy((3,)))
    torch.testing.assert_close(rollout["next", "observation"], ref["next", "observation"].unsqueeze(-2))
    assert_specs_truthful(env, rollout)
    with pytest.raises(ValueError, match="permutation"):
        PermuteTransform([0, 1])
