"""Envs carry their generators in ``state_dict`` and say whether a saved step can be continued.

A collector resuming a run restores the env's ``state_dict`` and, when the env is ``resumable``,
continues from the step TensorDict it saved: the restored env must then produce exactly what the
original produces (resets drawn from the same generator stream, steps computed the same way).
"""

import pytest
import torch
from rl_envs import CartPoleEnv, Compose, PendulumEnv, StepCounter, TransformedEnv
from rl_envs.transforms import CatFrames, NoopResetEnv, RandomTruncationTransform


@pytest.mark.parametrize(
    "make",
    [lambda: PendulumEnv(batch_size=[3], seed=4), lambda: CartPoleEnv(batch_size=[3], seed=4)],
    ids=["pendulum", "cartpole"],
)
def test_state_dict_restores_the_reset_stream(make):
    env = make()
    env.reset()
    state = {
        k: v.clone() if isinstance(v, torch.Tensor) else {n: s.clone() for n, s in v.items()}
        for k, v in env.state_dict().items()
    }
    expected = [env.reset() for _ in range(3)]
    other = make()
    other.set_seed(123)  # a different stream, replaced by the loaded one
    other.load_state_dict(state)
    for want in expected:
        got = other.reset()
        assert (got == want).all()


def test_generator_states_are_checked_before_anything_is_set():
    env = PendulumEnv(seed=0)
    before = env._rng.get_state().clone()
    with pytest.raises(ValueError, match=r"generator states must be named \['_rng'\], got \['rng'\]"):
        env.load_state_dict({"_extra_state": {"rng": before}})
    with pytest.raises(ValueError, match=r"\['_rng'\] must be uint8 tensors"):
        env.load_state_dict({"_extra_state": {"_rng": before[:10]}})
    assert torch.equal(env._rng.get_state(), before)


def test_transforms_with_generators_carry_them():
    chain = Compose(StepCounter(), RandomTruncationTransform(min_horizon=2, max_horizon=5))
    env = TransformedEnv(PendulumEnv(seed=0), chain)
    keys = set(env.state_dict())
    assert "transform.transforms.1._extra_state" in keys and "base_env._extra_state" in keys
    assert set(NoopResetEnv(noops=3).state_dict()) == {"_extra_state"}


def test_resumable_follows_the_base_env_and_the_transforms():
    assert PendulumEnv().resumable and CartPoleEnv().resumable
    assert TransformedEnv(PendulumEnv(), StepCounter(10)).resumable
    # CatFrames keeps the frames of the running episode outside the tensordict: not resumable
    cat = TransformedEnv(PendulumEnv(), CatFrames(N=2, dim=-1, in_keys=["observation"]))
    assert not cat.resumable
    # RandomTruncationTransform keeps each episode's horizon outside the tensordict
    chain = Compose(StepCounter(), RandomTruncationTransform(min_horizon=2, max_horizon=5))
    assert not TransformedEnv(PendulumEnv(), chain).resumable


def test_a_restored_pendulum_steps_bit_for_bit_like_the_original():
    # the parameters of a restored step are new tensors: the env recognises its own values and keeps
    # the same arithmetic (an identity-only check took another kernel path, 1 ulp apart)
    env = TransformedEnv(PendulumEnv(batch_size=[8], seed=0), StepCounter(200))
    td = env.reset()
    for _ in range(5):
        _, td = env.step_and_maybe_reset(td.set("action", torch.rand(8, 1) * 4 - 2))
    copied = td.clone()  # every tensor a new object, same values
    action = torch.linspace(-2, 2, 8).unsqueeze(-1)
    a, _ = env.step_and_maybe_reset(td.set("action", action))
    b, _ = env.step_and_maybe_reset(copied.set("action", action.clone()))
    assert torch.equal(a["next", "thdot"], b["next", "thdot"]) and torch.equal(a["next", "th"], b["next", "th"])
    # other parameters still take the general formula
    custom = env.base_env.gen_params(batch_size=[8], g=9.81)
    custom_td = env.reset(custom)
    out, _ = env.step_and_maybe_reset(custom_td.set("action", action))
    assert not torch.equal(out["next", "thdot"], a["next", "thdot"])
