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


def _policy(batch_size, shape=(1,), value=0.3, key="action"):
    return lambda td: td.set(key, torch.full((*batch_size, *shape), value))


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_unsqueeze_env_and_inverse(batch_size, specs_truthful):
    ref = PendulumEnv(batch_size=batch_size, seed=0).rollout(4, _policy(batch_size))
    env = TransformedEnv(
        PendulumEnv(batch_size=batch_size, seed=0),
        UnsqueezeTransform(-1, in_keys=["observation", "th"], out_keys=["observation", "th_u"], in_keys_inv=["action"]),
    )
    assert env.observation_spec["observation"].shape == torch.Size([*batch_size, 3, 1])
    assert env.action_spec.shape == torch.Size([*batch_size, 1, 1])
    # the caller gives [*b, 1, 1] actions; the env receives [*b, 1]
    rollout = env.rollout(4, _policy(batch_size, (1, 1)))
    torch.testing.assert_close(rollout["next", "observation"], ref["next", "observation"].unsqueeze(-1))
    torch.testing.assert_close(rollout["next", "th_u"], ref["next", "th"].unsqueeze(-1))
    assert rollout["action"].shape == torch.Size([*batch_size, 4, 1, 1])
    specs_truthful(env, rollout)


def test_squeeze_compose_inverse_and_plain_td(specs_truthful):
    env = TransformedEnv(
        PendulumEnv(batch_size=[3], seed=0),
        Compose(
            UnsqueezeTransform(-2, in_keys=["observation"]),
            StepCounter(max_steps=10),
            SqueezeTransform(-1, in_keys_inv=["action"]),
        ),
    )
    assert env.observation_spec["observation"].shape == torch.Size([3, 1, 3])
    assert env.action_spec.shape == torch.Size([3])
    rollout = env.rollout(3, lambda td: td.set("action", torch.full((3,), 0.3)))
    ref = PendulumEnv(batch_size=[3], seed=0).rollout(3, _policy((3,)))
    torch.testing.assert_close(rollout["next", "observation"], ref["next", "observation"].unsqueeze(-2))
    specs_truthful(env, rollout)
    sample = TensorDict(x=torch.rand(2, 5, 4, 1), batch_size=[2, 5])
    out = SqueezeTransform(-1, in_keys=["x"], out_keys=["y"])(sample.clone())
    torch.testing.assert_close(out["y"], sample["x"][..., 0])
    # dim -2 has size 4: left as it is, as torch.squeeze(-2) does
    torch.testing.assert_close(SqueezeTransform(-2, in_keys=["x"])(sample.clone())["x"], sample["x"])
    with pytest.raises(ValueError, match="negative"):
        UnsqueezeTransform(0, in_keys=["x"])


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_flatten_env(counting_env, batch_size, specs_truthful):
    env = TransformedEnv(counting_env(batch_size=batch_size, pixels=True, size=4), FlattenObservation(-3, -1))
    assert env.observation_spec["pixels"].shape == torch.Size([*batch_size, 48])
    rollout = env.rollout(3, lambda td: td.set("action", torch.ones(batch_size, dtype=torch.int64)))
    assert rollout["next", "pixels"].shape == torch.Size([*batch_size, 3, 48])
    expected = torch.arange(1, 4, dtype=torch.uint8).expand(*batch_size, 3)
    assert torch.equal(rollout["next", "pixels"], expected.unsqueeze(-1).expand(*batch_size, 3, 48))
    specs_truthful(env, rollout)


def test_flatten_positive_dims_compose_and_plain_td(counting_env, specs_truthful):
    env = TransformedEnv(
        counting_env(batch_size=[2], pixels=True, size=4),
        Compose(StepCounter(max_steps=5), FlattenObservation(0, 1, allow_positive_dim=True)),
    )
    assert env.observation_spec["pixels"].shape == torch.Size([2, 16, 3])
    rollout = env.rollout(2)
    assert rollout["pixels"].shape == torch.Size([2, 2, 16, 3])
    specs_truthful(env, rollout)
    x = torch.rand(2, 5, 3, 4, 6)
    out = FlattenObservation(-2, -1, in_keys=["x"])(TensorDict(x=x, batch_size=[2, 5]))
    torch.testing.assert_close(out["x"], x.reshape(2, 5, 3, 24))
    with pytest.raises(ValueError, match="negative"):
        FlattenObservation(0, 1)


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_permute_env(counting_env, batch_size, specs_truthful):
    env = TransformedEnv(
        counting_env(batch_size=batch_size, pixels=True, size=4), PermuteTransform([-1, -3, -2], in_keys=["pixels"])
    )
    assert env.observation_spec["pixels"].shape == torch.Size([*batch_size, 3, 4, 4])
    rollout = env.rollout(3)
    assert rollout["pixels"].shape == torch.Size([*batch_size, 3, 3, 4, 4])
    ref = counting_env(batch_size=batch_size, pixels=True, size=4).rollout(
        3, lambda td: td.set("action", rollout["action"][..., 0])
    )
    assert torch.equal(
        rollout["next", "pixels"][..., 0, :, :, :],
        ref["next", "pixels"][..., 0, :, :, :].permute(*range(len(batch_size)), -1, -3, -2),
    )
    specs_truthful(env, rollout)


def test_permute_inverse_compose_and_plain_td(specs_truthful):
    # the caller's action is [*b, 1, 2] (a transposed [2, 1] action): a user env reading [*b, 2, 1]
    x = torch.rand(2, 5, 4, 6, 3)
    t = PermuteTransform([-1, -3, -2], in_keys=["x"], in_keys_inv=["a"])
    out = t(TensorDict(x=x, batch_size=[2, 5]))
    torch.testing.assert_close(out["x"], x.permute(0, 1, 4, 2, 3))
    back = t.inv(TensorDict(a=out["x"], batch_size=[2, 5]))
    torch.testing.assert_close(back["a"], x)
    env = TransformedEnv(
        PendulumEnv(batch_size=[3], seed=0),
        Compose(
            UnsqueezeTransform(-1, in_keys=["observation"], in_keys_inv=["action"]),
            PermuteTransform([-1, -2], in_keys=["observation"], in_keys_inv=["action"]),
        ),
    )
    assert env.observation_spec["observation"].shape == torch.Size([3, 1, 3])
    assert env.action_spec.shape == torch.Size([3, 1, 1])
    rollout = env.rollout(3, _policy((3,), (1, 1)))
    ref = PendulumEnv(batch_size=[3], seed=0).rollout(3, _policy((3,)))
    torch.testing.assert_close(rollout["next", "observation"], ref["next", "observation"].unsqueeze(-2))
    specs_truthful(env, rollout)
    with pytest.raises(ValueError, match="permutation"):
        PermuteTransform([0, 1])


def test_unsqueeze_and_squeeze_with_positive_dims_count_from_the_tensor_start():
    from tdict.specs import Bounded

    t = UnsqueezeTransform(1, in_keys=["obs"], allow_positive_dim=True)
    assert t(TensorDict(obs=torch.zeros(3, 16)))["obs"].shape == (3, 1, 16)
    assert t(TensorDict(obs=torch.zeros(2, 3), batch_size=[2]))["obs"].shape == (2, 1, 3)
    with pytest.raises(RuntimeError, match="batch dimension mismatch"):  # dim 1 is a batch dim here
        t(TensorDict(obs=torch.zeros(2, 4, 3), batch_size=[2, 4]))
    # a leaf spec is mapped as it is (TorchRL's call), a Composite key by key
    assert t.transform_observation_spec(Bounded(-1.0, 1.0, shape=(3, 16))).shape == (3, 1, 16)
    squeeze = SqueezeTransform(1, in_keys=["obs"], allow_positive_dim=True)
    torch.testing.assert_close(
        squeeze(TensorDict(obs=torch.arange(6.0).reshape(3, 1, 2)))["obs"], torch.arange(6.0).reshape(3, 2)
    )
    with pytest.raises(ValueError, match="must be a negative"):
        UnsqueezeTransform(1, in_keys=["obs"])


def test_squeeze_leaves_a_dim_that_is_not_single_as_torch_does():
    t = SqueezeTransform(-2, in_keys=["obs"])
    value = torch.arange(6.0).reshape(2, 3)
    out = t(TensorDict(obs=value.clone()))["obs"]
    assert torch.equal(out, value.squeeze(-2)) and out.shape == (2, 3)
    assert t(TensorDict(obs=torch.zeros(4, 1, 3)))["obs"].shape == (4, 3)
    with pytest.raises(ValueError, match="cannot squeeze dim -2"):  # the inverse of an unsqueeze still checks
        UnsqueezeTransform(-2, in_keys_inv=["action"]).inv(TensorDict(action=torch.zeros(2, 3)))
