"""ClipTransform, SignTransform, UnaryTransform: values, specs, inverse path."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict
from tdict.specs import Bounded, Unbounded

from rl_envs import ClipTransform, Compose, PendulumEnv, SignTransform, StepCounter, TransformedEnv, UnaryTransform


def _policy(batch_size, value):
    return lambda td: td.set("action", torch.full((*batch_size, 1), value))


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_clip_env_and_inverse(batch_size, specs_truthful):
    # the inverse clips the caller's action 1.5 to 0.5 before the env sees it
    ref = PendulumEnv(batch_size=batch_size, seed=0).rollout(4, _policy(batch_size, 0.5))
    env = TransformedEnv(
        PendulumEnv(batch_size=batch_size, seed=0),
        ClipTransform(in_keys=["observation", "reward"], in_keys_inv=["action"], low=-0.5, high=0.5),
    )
    spec = env.observation_spec["observation"]
    assert isinstance(spec, Bounded) and spec.high.max().item() == 0.5
    assert isinstance(env.reward_spec, Bounded)
    assert env.action_spec.high.max().item() == 2.0  # the caller may give any action the env accepts
    rollout = env.rollout(4, _policy(batch_size, 1.5))
    assert rollout["action"].max().item() == 1.5
    torch.testing.assert_close(rollout["next", "observation"], ref["next", "observation"].clamp(-0.5, 0.5))
    torch.testing.assert_close(rollout["next", "reward"], ref["next", "reward"].clamp(-0.5, 0.5))
    specs_truthful(env, rollout)
    td = env.reset()
    td["action"] = torch.full((*batch_size, 1), 1.5)
    inner = env.transform.inv(td)
    assert inner["action"].max().item() == 0.5 and td["action"].max().item() == 1.5


def test_clip_compose_and_plain_td(specs_truthful):
    env = TransformedEnv(
        PendulumEnv(batch_size=[3], seed=0),
        Compose(StepCounter(max_steps=10), ClipTransform(in_keys=["thdot"], out_keys=["thdot_c"], high=0.0)),
    )
    rollout = env.rollout(3, _policy((3,), 1.0))
    torch.testing.assert_close(rollout["next", "thdot_c"], rollout["next", "thdot"].clamp(max=0.0))
    specs_truthful(env, rollout)
    sample = PendulumEnv(batch_size=[2]).rollout(5)
    out = ClipTransform(in_keys=[("next", "reward")], low=-1.0)(sample.clone())
    torch.testing.assert_close(out["next", "reward"], sample["next", "reward"].clamp(min=-1.0))
    with pytest.raises(ValueError, match="at least one"):
        ClipTransform(in_keys=["x"])


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_sign_env_compose_and_plain_td(batch_size, specs_truthful):
    ref = PendulumEnv(batch_size=batch_size, seed=0).rollout(4, _policy(batch_size, 0.2))
    env = TransformedEnv(
        PendulumEnv(batch_size=batch_size, seed=0),
        Compose(
            StepCounter(max_steps=10), SignTransform(in_keys=["reward", "observation"], out_keys=["reward", "obs_sign"])
        ),
    )
    assert isinstance(env.reward_spec, Bounded) and env.reward_spec.low.min().item() == -1
    rollout = env.rollout(4, _policy(batch_size, 0.2))
    torch.testing.assert_close(rollout["next", "reward"], torch.sign(ref["next", "reward"]))
    torch.testing.assert_close(rollout["next", "obs_sign"], torch.sign(ref["next", "observation"]))
    specs_truthful(env, rollout)
    out = SignTransform(in_keys=["x"])(TensorDict(x=torch.tensor([[-3.0, 0.0, 2.0]]), batch_size=[1]))
    assert out["x"].tolist() == [[-1.0, 0.0, 1.0]]
    inv = SignTransform(in_keys_inv=["a"]).inv(TensorDict(a=torch.tensor([-0.2, 0.7])))
    assert inv["a"].tolist() == [-1.0, 1.0]


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_unary_env_and_inverse(batch_size, specs_truthful):
    ref = PendulumEnv(batch_size=batch_size, seed=0).rollout(4, _policy(batch_size, 0.6))
    # the caller speaks in "half torque" units: the inverse doubles it
    env = TransformedEnv(
        PendulumEnv(batch_size=batch_size, seed=0),
        UnaryTransform(
            in_keys=["observation"],
            out_keys=["obs_norm"],
            in_keys_inv=["action"],
            out_keys_inv=["half_action"],
            fn=lambda x: x.norm(dim=-1),
            inv_fn=lambda a: a * 2,
        ),
    )
    assert env.observation_spec["obs_norm"].shape == torch.Size(batch_size)
    assert isinstance(env.observation_spec["obs_norm"], Unbounded)
    assert env.action_keys == ["half_action"]
    rollout = env.rollout(4, lambda td: td.set("half_action", torch.full((*batch_size, 1), 0.3)))
    torch.testing.assert_close(rollout["next", "obs_norm"], ref["next", "observation"].norm(dim=-1))
    torch.testing.assert_close(rollout["next", "observation"], ref["next", "observation"])
    specs_truthful(env, rollout)


def test_unary_compose_plain_td_and_errors(specs_truthful):
    env = TransformedEnv(
        PendulumEnv(batch_size=[3], seed=0),
        Compose(
            StepCounter(max_steps=10),
            UnaryTransform(in_keys=["step_count"], out_keys=["t_float"], fn=lambda x: x.float() / 10),
        ),
    )
    assert env.observation_spec["t_float"].dtype == torch.float32
    rollout = env.rollout(3, _policy((3,), 0.0))
    torch.testing.assert_close(rollout["next", "t_float"], rollout["next", "step_count"].float() / 10)
    specs_truthful(env, rollout)
    sample = PendulumEnv(batch_size=[2]).rollout(4)
    out = UnaryTransform(in_keys=[("next", "th")], out_keys=[("next", "cos")], fn=torch.cos)(sample.clone())
    torch.testing.assert_close(out["next", "cos"], torch.cos(sample["next", "th"]))
    with pytest.raises(ValueError, match="inv_fn"):
        UnaryTransform(in_keys=["a"], out_keys=["b"], in_keys_inv=["c"], fn=torch.cos)
    with pytest.raises(KeyError, match="nope"):
        UnaryTransform(in_keys=["nope"], out_keys=["b"], fn=torch.cos)(TensorDict(a=torch.ones(1)))


def test_unary_inverse_keys_set_later_without_inv_fn_are_refused_clearly():
    transform = UnaryTransform(in_keys=["observation"], out_keys=["obs_norm"], fn=lambda x: x.norm(dim=-1))
    env = TransformedEnv(PendulumEnv(seed=0), transform)
    td = env.reset()
    td.set("action", torch.zeros(1))
    transform.in_keys_inv = ["action"]
    with pytest.raises(ValueError, match=r"in_keys_inv=\['action'\] are set but there is no inv_fn"):
        env.step(td)
