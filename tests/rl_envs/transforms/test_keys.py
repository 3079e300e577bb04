"""ExcludeTransform, SelectTransform, RenameTransform, CatTensors: values, specs, inverse path."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict

from rl_envs import (
    CatTensors,
    Compose,
    ExcludeTransform,
    PendulumEnv,
    RenameTransform,
    SelectTransform,
    StepCounter,
    TransformedEnv,
)


def _const_policy(batch_size, value=0.3, key="action"):
    return lambda td: td.set(key, torch.full((*batch_size, 1), value))


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_exclude_env(batch_size, specs_truthful):
    policy = _const_policy(batch_size)
    ref = PendulumEnv(batch_size=batch_size, seed=0).rollout(4, policy)
    env = TransformedEnv(
        PendulumEnv(batch_size=batch_size, seed=0), ExcludeTransform("observation", ("next", "nothing"))
    )
    assert "observation" not in env.observation_spec.keys()
    rollout = env.rollout(4, policy)
    assert "observation" not in rollout.keys() and "observation" not in rollout["next"].keys()
    torch.testing.assert_close(rollout["next", "th"], ref["next", "th"])
    specs_truthful(env, rollout)


def test_exclude_inverse_and_plain_td(counting_env):
    # inverse: an entry the caller writes never reaches the inner env
    seen = []

    class Spy(counting_env):
        def _step(self, td):
            seen.append(sorted(td.keys()))
            return super()._step(td)

    env = TransformedEnv(Spy(), ExcludeTransform("hidden", inverse=True))
    td = env.reset()
    td["action"] = torch.tensor(1)
    td["hidden"] = torch.zeros(2)
    out = env.step(td)
    assert "hidden" not in seen[0] and "hidden" in out.keys()
    assert out["next", "observation"].tolist() == [1.0, 1.0, 1.0]
    # forward on a replay-buffer-like sample
    sample = PendulumEnv(batch_size=[2]).rollout(3)
    out = ExcludeTransform("observation", ("next", "observation"))(sample.clone())
    assert set(out.keys(True, True)) == set(sample.keys(True, True)) - {"observation", ("next", "observation")}
    torch.testing.assert_close(out["next", "reward"], sample["next", "reward"])


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_select_env(batch_size, specs_truthful):
    policy = _const_policy(batch_size)
    ref = PendulumEnv(batch_size=batch_size, seed=0).rollout(4, policy)
    env = TransformedEnv(PendulumEnv(batch_size=batch_size, seed=0), SelectTransform("th", "thdot"))
    assert sorted(env.observation_spec.keys()) == ["th", "thdot"]
    rollout = env.rollout(4, policy)
    assert sorted(rollout["next"].keys()) == ["done", "reward", "terminated", "th", "thdot", "truncated"]
    torch.testing.assert_close(rollout["next", "thdot"], ref["next", "thdot"])
    torch.testing.assert_close(rollout["next", "reward"], ref["next", "reward"])
    specs_truthful(env, rollout)


def test_select_compose_and_plain_td(specs_truthful):
    env = TransformedEnv(
        PendulumEnv(batch_size=[3], seed=0),
        Compose(StepCounter(max_steps=2), SelectTransform("th", "thdot", "step_count")),
    )
    rollout = env.rollout(5, _const_policy((3,)))
    assert rollout.batch_size == torch.Size([3, 2])
    assert rollout["next", "step_count"][0].tolist() == [1, 2]
    assert "observation" not in rollout.keys()
    specs_truthful(env, rollout)
    td = TensorDict(
        a=torch.ones(4), b=torch.zeros(4), reward=torch.ones(4), done=torch.zeros(4, dtype=torch.bool), batch_size=[4]
    )
    assert sorted(SelectTransform("a")(td).keys()) == ["a", "done", "reward"]
    assert sorted(SelectTransform("a", keep_rewards=False, keep_dones=False)(td).keys()) == ["a"]


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_rename_env_and_inverse(batch_size, specs_truthful):
    ref = PendulumEnv(batch_size=batch_size, seed=0).rollout(4, _const_policy(batch_size))
    env = TransformedEnv(
        PendulumEnv(batch_size=batch_size, seed=0),
        RenameTransform(["observation"], ["obs"], in_keys_inv=["action"], out_keys_inv=["torque"]),
    )
    assert "obs" in env.observation_spec.keys() and "observation" not in env.observation_spec.keys()
    assert env.action_keys == ["torque"]
    rollout = env.rollout(4, _const_policy(batch_size, key="torque"))
    assert "action" not in rollout.keys() and "torque" in rollout.keys()
    torch.testing.assert_close(rollout["next", "obs"], ref["next", "observation"])
    torch.testing.assert_close(rollout["obs"], ref["observation"])
    specs_truthful(env, rollout)


def test_rename_copy_compose_plain_td_and_errors(specs_truthful):
    env = TransformedEnv(
        PendulumEnv(seed=0),
        Compose(StepCounter(max_steps=10), RenameTransform(["th", "step_count"], ["angle", "t"], create_copy=True)),
    )
    rollout = env.rollout(3, _const_policy(()))
    torch.testing.assert_close(rollout["next", "angle"], rollout["next", "th"])
    assert rollout["next", "t"].tolist() == [1, 2, 3]
    specs_truthful(env, rollout)
    td = TensorDict(a=torch.arange(3.0), next=TensorDict(a=torch.ones(3), batch_size=[3]), batch_size=[3])
    out = RenameTransform(["a", ("next", "a")], ["b", ("next", "b")])(td)
    assert sorted(out.keys(True, True), key=str) == [("next", "b"), "b"]
    assert out["b"].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(KeyError, match="'missing'"):
        RenameTransform(["missing"], ["x"])(TensorDict(a=torch.ones(1)))
    with pytest.raises(ValueError, match="both renamed"):
        RenameTransform(["a", "b"], ["b", "c"])


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_cat_tensors_env(batch_size, specs_truthful):
    ref = PendulumEnv(batch_size=batch_size, seed=0).rollout(4, _const_policy(batch_size))
    env = TransformedEnv(
        PendulumEnv(batch_size=batch_size, seed=0), CatTensors(["thdot", "observation"], "vec", del_keys=False)
    )
    assert env.observation_spec["vec"].shape == torch.Size([*batch_size, 4])
    rollout = env.rollout(4, _const_policy(batch_size))
    # sorted key order: observation then thdot (a per-step scalar gets a trailing dim)
    expected = torch.cat([ref["next", "observation"], ref["next", "thdot"].unsqueeze(-1)], -1)
    torch.testing.assert_close(rollout["next", "vec"], expected)
    specs_truthful(env, rollout)


def test_cat_tensors_del_keys_compose_unsorted_and_plain_td(specs_truthful):
    env = TransformedEnv(
        PendulumEnv(batch_size=[2], seed=0), Compose(StepCounter(max_steps=10), CatTensors(["observation"], "obs_vec"))
    )
    rollout = env.rollout(3, _const_policy((2,)))
    assert "observation" not in rollout.keys() and rollout["obs_vec"].shape == torch.Size([2, 3, 3])
    assert "observation" not in env.observation_spec.keys()
    specs_truthful(env, rollout)
    sample = PendulumEnv(batch_size=[2]).rollout(3)
    out = CatTensors([("next", "thdot"), ("next", "th")], ("next", "state"), sort=False, del_keys=False)(sample.clone())
    torch.testing.assert_close(out["next", "state"], torch.stack([sample["next", "thdot"], sample["next", "th"]], -1))
    with pytest.raises(ValueError, match="negative"):
        CatTensors(["a"], dim=0)
    with pytest.raises(KeyError, match="nope"):
        CatTensors(["nope", "observation"], "x")(sample.clone())
