"""check_env_specs: passes on truthful envs, names the key and the mismatch on lying ones."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict
from tdict.specs import Bounded, Categorical, Composite, Unbounded

from rl_envs import EnvBase, PendulumEnv, StepCounter, TransformedEnv, check_env_specs


class FaultyEnv(EnvBase):
    """A small env whose ``_step`` can break one promise of its specs.

    Observation ``obs`` is Bounded(0, 10) with 2 features; ``fault`` selects the lie:
    ``None`` (truthful), ``"missing"`` (never writes ``aux``, which the spec declares), ``"extra"``
    (writes an undeclared ``bonus``), ``"shape"`` (``obs`` with 3 features), ``"dtype"`` (``obs`` as float64),
    ``"bounds"`` (``obs`` jumps to 50), ``"reward"`` (reward outside its Bounded(-1, 1) spec).
    """

    def __init__(self, batch_size=(), fault=None):
        super().__init__(batch_size=batch_size)
        shape = self.batch_size
        obs = {"obs": Bounded(0.0, 10.0, shape=(*shape, 2))}
        if fault == "missing":
            obs["aux"] = Unbounded(shape=shape)
        self.observation_spec = Composite(obs, shape=shape)
        self.action_spec = Bounded(0.0, 1.0, shape=(*shape, 1))
        self.reward_spec = Bounded(-1.0, 1.0, shape=shape)
        self.fault = fault

    def _obs(self, value):
        obs = value.expand(*self.batch_size, 2).clone()
        if self.fault == "shape":
            obs = value.expand(*self.batch_size, 3).clone()
        if self.fault == "dtype":
            obs = obs.double()
        return obs

    def _reset(self, tensordict=None, **kwargs):
        out = TensorDict(obs=self._obs(torch.zeros(*self.batch_size, 1)), batch_size=self.batch_size)
        if self.fault == "missing":
            pass  # "aux" never written
        return out

    def _step(self, tensordict):
        value = tensordict["obs"][..., :1].float() + tensordict["action"]
        if self.fault == "bounds":
            value = value + 50.0
        obs = self._obs(value)
        reward = torch.full(self.batch_size, 5.0 if self.fault == "reward" else 0.5)
        done = torch.zeros(self.batch_size, dtype=torch.bool)
        out = TensorDict(obs=obs, reward=reward, done=done, terminated=done.clone(), batch_size=self.batch_size)
        if self.fault == "extra":
            out["bonus"] = torch.zeros(self.batch_size)
        return out

    def _set_seed(self, seed):
        pass


# ----------------------------------------------------------------------------- truthful envs pass
@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
def test_passes_on_truthful_env(batch):
    check_env_specs(FaultyEnv(batch_size=batch))


@pytest.mark.parametrize(
    "kwargs", [{}, {"batch_size": [3]}, {"pixels": True, "size": 4}, {"one_hot": True, "n_actions": 3}]
)
def test_passes_on_counting_env(counting_env, kwargs):
    check_env_specs(counting_env(max_count=2, **kwargs))  # terminates within the 3 steps: auto-reset inside


def test_passes_on_transformed_env():
    check_env_specs(TransformedEnv(PendulumEnv(batch_size=[2]), StepCounter(max_steps=2)), seed=0)


def test_passes_with_lazy_stack_and_break(counting_env):
    check_env_specs(counting_env(batch_size=[2], max_count=2), return_contiguous=False)
    check_env_specs(counting_env(batch_size=[2], max_count=2), break_when_any_done=True)


def test_passes_on_stateless_params():
    env = PendulumEnv()
    params = env.gen_params(batch_size=[4], max_speed=1000.0)
    check_env_specs(env, tensordict=params, seed=1)
    assert "th" not in params.keys()  # the caller's tensordict is not modified


def test_seed_restores_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_env_specs(FaultyEnv(batch_size=[2]), seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_pendulum_passes_over_seeds():
    # th is not wrapped (as in gymnasium): with 64 pendulums some cross +-pi within 3 steps; its spec must allow it
    for seed in range(3):
        check_env_specs(PendulumEnv(batch_size=[64]), seed=seed)


# ----------------------------------------------------------------------------- lies are named
def test_missing_key_named():
    with pytest.raises(AssertionError, match=r"specs declare but the rollout lacks: \['aux', \('next', 'aux'\)\]"):
        check_env_specs(FaultyEnv(fault="missing"))


def test_extra_key_named():
    with pytest.raises(AssertionError, match=r"rollout holds but no spec declares: \[\('next', 'bonus'\)\]"):
        check_env_specs(FaultyEnv(fault="extra"))


def test_wrong_shape_named():
    with pytest.raises(AssertionError, match=r"key 'obs': expected shape \[2, 3, 2\].*got \[2, 3, 3\]"):
        check_env_specs(FaultyEnv(batch_size=[2], fault="shape"))


def test_wrong_dtype_named():
    with pytest.raises(AssertionError, match=r"key 'obs': expected dtype torch.float32, got torch.float64"):
        check_env_specs(FaultyEnv(fault="dtype"))
    # check_dtype=False skips the dtype compare; the values are still checked against the spec
    with pytest.raises(AssertionError, match="dtype"):
        check_env_specs(FaultyEnv(fault="dtype"), check_dtype=False)


def test_out_of_bounds_named_with_bounds():
    with pytest.raises(
        AssertionError,
        match=r"key (\('next', 'obs'\)|'obs') is outside its observation spec .*low=0\.0, high=10\.0.*high bound violated",
    ):
        check_env_specs(FaultyEnv(batch_size=[2], fault="bounds"))


def test_reward_out_of_spec_named():
    with pytest.raises(
        AssertionError, match=r"key \('next', 'reward'\) is outside its reward spec .*low=-1\.0, high=1\.0"
    ):
        check_env_specs(FaultyEnv(fault="reward"))


def test_done_spec_checked(counting_env):
    env = counting_env(batch_size=[2], max_count=2)
    # a done spec that says the flag is uint8 while the env writes bool
    flag = Categorical(2, shape=(2,), dtype=torch.uint8)
    env.full_done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=[2])
    with pytest.raises(
        AssertionError, match=r"key '(done|terminated|truncated)': expected dtype torch.uint8, got torch.bool"
    ):
        check_env_specs(env)
