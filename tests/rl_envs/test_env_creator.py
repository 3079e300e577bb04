"""EnvCreator: a picklable factory with lazily computed metadata; RandomPolicy."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
import torch
from tdict import TensorDict
from tdict.specs import Bounded, Categorical, Composite

from rl_envs import EnvCreator, PendulumEnv, RandomPolicy, StepCounter, TransformedEnv
from rl_envs.env_creator import EnvMetaData


def make_pendulum(batch_size=(), max_steps=10):
    """A module-level factory (pickles by reference)."""
    return TransformedEnv(PendulumEnv(batch_size=batch_size), StepCounter(max_steps=max_steps))


class CountingFactory:
    """Counts how many envs it built (to check that metadata is computed once)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, **kwargs):
        self.calls += 1
        return PendulumEnv(**kwargs)


# ----------------------------------------------------------------------------- EnvCreator
def test_call_returns_new_env_with_kwargs_override():
    creator = EnvCreator(make_pendulum, {"batch_size": [3], "max_steps": 4})
    a, b = creator(), creator()
    assert a is not b and a.batch_size == torch.Size([3])
    assert a.rollout(10).batch_size == torch.Size([3, 4])
    c = creator(max_steps=2)  # call kwargs win over create_env_kwargs, for this env only
    assert c.rollout(10).batch_size == torch.Size([3, 2])
    assert creator.create_env_kwargs == {"batch_size": [3], "max_steps": 4}


def test_meta_data_lazy_and_computed_once():
    factory = CountingFactory()
    creator = EnvCreator(factory, {"batch_size": [2]})
    assert factory.calls == 0  # nothing is built at construction
    meta = creator.meta_data
    assert factory.calls == 1
    assert creator.meta_data is meta and factory.calls == 1
    assert isinstance(meta, EnvMetaData)
    assert meta.batch_size == torch.Size([2]) and meta.device is None and meta.batch_locked is False
    assert creator.batch_size == torch.Size([2])
    env = PendulumEnv(batch_size=[2])
    assert meta.full_action_spec["action"].shape == env.full_action_spec["action"].shape
    assert sorted(meta.specs) == sorted(
        ["full_action_spec", "full_state_spec", "full_observation_spec", "full_reward_spec", "full_done_spec"]
    )
    assert set(meta.tensordict.keys(True, True)) == set(env.fake_tensordict().keys(True, True))
    assert meta.output_spec["full_observation_spec", "observation"].shape == torch.Size([2, 3])


def test_init_and_make_variant():
    factory = CountingFactory()
    creator = EnvCreator(factory, {"batch_size": [2]})
    assert creator.init_() is creator and factory.calls == 1
    variant = creator.make_variant(batch_size=[5])
    assert variant.create_env_kwargs == {"batch_size": [5]}
    assert variant.meta_data.batch_size == torch.Size([5])
    assert creator.meta_data.batch_size == torch.Size([2])


def test_pickle_module_function_keeps_meta_data():
    creator = EnvCreator(make_pendulum, {"batch_size": [2]})
    creator.init_()
    clone = pickle.loads(pickle.dumps(creator))
    assert clone.create_env_fn is make_pendulum
    assert clone._meta_data is not None and clone.meta_data.batch_size == torch.Size([2])
    assert clone().rollout(3).batch_size == torch.Size([2, 3])


def test_pickle_lambda_with_cloudpickle():
    pytest.importorskip("cloudpickle")
    scale = 3
    creator = EnvCreator(lambda **kw: PendulumEnv(batch_size=[scale], **kw), {"g": 5.0})
    clone = pickle.loads(pickle.dumps(creator))
    env = clone()
    assert env.batch_size == torch.Size([3]) and env._params["g"] == 5.0


def test_pickle_lambda_without_cloudpickle_errors(monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # makes `import cloudpickle` fail
    creator = EnvCreator(lambda: PendulumEnv())
    with pytest.raises(pickle.PicklingError, match="cloudpickle"):
        pickle.dumps(creator)
    # a module-level function still pickles without it
    assert pickle.loads(pickle.dumps(EnvCreator(make_pendulum)))().batch_size == torch.Size([])


def test_lambda_creator_in_another_process():
    pytest.importorskip("cloudpickle")
    payload = pickle.dumps(EnvCreator(lambda: PendulumEnv(batch_size=[4], seed=0)))
    code = (
        "import pickle, sys; creator = pickle.loads(sys.stdin.buffer.read()); "
        "print(tuple(creator().rollout(5).batch_size))"
    )
    out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().strip() == "(4, 5)"


def test_bad_arguments():
    with pytest.raises(TypeError, match="callable"):
        EnvCreator(42)
    with pytest.raises(TypeError, match="dict"):
        EnvCreator(make_pendulum, [("batch_size", [2])])


def test_wrapping_a_creator_merges_kwargs():
    inner = EnvCreator(make_pendulum, {"batch_size": [2], "max_steps": 3})
    outer = EnvCreator(inner, {"max_steps": 1})
    assert outer.create_env_fn is make_pendulum
    assert outer().rollout(5).batch_size == torch.Size([2, 1])


# ----------------------------------------------------------------------------- RandomPolicy
def test_random_policy_leaf_spec_takes_td_batch():
    spec = Bounded(-2.0, 2.0, shape=(4, 1))
    policy = RandomPolicy(spec)
    td = policy(TensorDict(batch_size=[4]))
    assert td["action"].shape == torch.Size([4, 1]) and spec.is_in(td["action"])
    td = policy(TensorDict(batch_size=[3, 4]))  # a bigger leading batch (batch-unlocked envs)
    assert td["action"].shape == torch.Size([3, 4, 1])
    # a spec without batch dims gets the tensordict's batch
    td = RandomPolicy(Bounded(0.0, 1.0, shape=(2,)), action_key="u")(TensorDict(batch_size=[5]))
    assert td["u"].shape == torch.Size([5, 2])


def test_random_policy_composite_writes_every_leaf():
    spec = Composite(
        throttle=Bounded(0.0, 1.0, shape=(3,)),
        arm=Composite(joint=Categorical(4, shape=(3, 2)), shape=(3,)),
        shape=(3,),
    )
    policy = RandomPolicy(spec)
    td = policy(TensorDict(batch_size=[3]))
    assert sorted(map(str, td.keys(True, True))) == sorted(["throttle", str(("arm", "joint"))])
    assert spec.is_in(td)
    td = policy(TensorDict(batch_size=[2, 3]))
    assert td["arm", "joint"].shape == torch.Size([2, 3, 2])
    with pytest.raises(ValueError, match=r"batch_size \[4\].*\[3\]"):
        policy(TensorDict(batch_size=[4]))


def test_random_policy_in_rollout_stays_in_spec():
    torch.manual_seed(0)
    env = PendulumEnv(batch_size=[8], seed=0)
    r = env.rollout(20, RandomPolicy(env.action_spec))
    assert r["action"].shape == torch.Size([8, 20, 1])
    assert env.action_spec.is_in(r["action"].transpose(0, 1))
    # uniform on [-2, 2]: mean near 0, spread near 4 / sqrt(12)
    assert abs(r["action"].mean().item()) < 0.3 and abs(r["action"].std().item() - 4 / 12**0.5) < 0.2


def test_random_policy_rejects_non_spec():
    with pytest.raises(TypeError, match="rand"):
        RandomPolicy(torch.zeros(3))


def test_keyword_arguments_go_to_the_factory():
    creator = EnvCreator(make_pendulum, {"batch_size": [2], "max_steps": 5}, max_steps=3)
    assert creator.create_env_kwargs == {"batch_size": [2], "max_steps": 3}  # the keyword wins
    assert creator().rollout(10).batch_size == torch.Size([2, 3])
    assert EnvCreator(make_pendulum, max_steps=2)().rollout(10).batch_size == torch.Size([2])


def _traj_env(max_steps=4):
    from rl_envs import Compose, TrajCounter

    return TransformedEnv(PendulumEnv(), Compose(StepCounter(max_steps=max_steps), TrajCounter()))


@pytest.mark.parametrize("start", ["serial", "spawn"])
def test_envs_of_a_creator_and_its_variants_share_traj_ids(start):
    from rl_envs import ParallelEnv, SerialEnv

    c0 = EnvCreator(_traj_env)
    c1 = c0.make_variant(max_steps=5)
    a, b = c0(), c1()  # each factory call builds its own TrajCounter; the creator lends the first one's counter
    first = [m for m in a.modules() if type(m).__name__ == "TrajCounter"][0]
    second = [m for m in b.modules() if type(m).__name__ == "TrajCounter"][0]
    assert first._traj_count is second._traj_count
    env = SerialEnv(2, [c0, c1]) if start == "serial" else ParallelEnv(2, [c0, c1], mp_start_method="spawn")
    try:
        r = env.rollout(12, break_when_any_done=False)
    finally:
        env.close()
    ids0, ids1 = set(r[0]["traj_count"].tolist()), set(r[1]["traj_count"].tolist())
    # 12 steps: episodes of 4 steps (3 episodes) and of 5 steps (3 episodes), six distinct ids in all
    assert not ids0 & ids1
    assert len(ids0) == 3 and len(ids1) == 3 and ids0 | ids1 == set(range(6))


def test_plain_pickle_drops_the_shared_counters():
    creator = EnvCreator(_traj_env)
    creator()
    assert len(creator._traj_counters) == 1
    assert pickle.loads(pickle.dumps(creator))._traj_counters == []


def test_closure_holding_a_traj_counter_reaches_spawned_workers():
    from rl_envs import Compose, ParallelEnv, TrajCounter

    shared = TrajCounter()

    def make_env(max_steps=4):  # a closure: pickled by value, with the counter it holds
        return TransformedEnv(PendulumEnv(), Compose(StepCounter(max_steps=max_steps), shared.clone()))

    env = ParallelEnv(
        2, [EnvCreator(make_env, max_steps=4), EnvCreator(make_env, max_steps=5)], mp_start_method="spawn"
    )
    try:
        r = env.rollout(12, break_when_any_done=False)
    finally:
        env.close()
    ids0, ids1 = set(r[0]["traj_count"].tolist()), set(r[1]["traj_count"].tolist())
    assert not ids0 & ids1 and ids0 | ids1 == set(range(6))
    assert int(shared._traj_count.value) == 6  # the workers counted on the parent's counter
