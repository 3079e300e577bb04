"""SerialEnv over plain GymEnvs steps them as one batch (EnvBase._fuse_serial, batched/_fused.py):
the data must be what the generic path (one TensorDict per sub-env and step) gives, value for value."""

from __future__ import annotations

import pytest
import torch
from rl_envs import GymEnv, RewardScaling, TransformedEnv
from rl_envs.batched import SerialEnv
from rl_envs.libs._gym_fused import GymFusedSteps
from tdict import TensorDict
from tdict.nn import TensorDictModule, TensorDictModuleBase

gym = pytest.importorskip("gymnasium")

N = 4


def _serial(env_id: str = "CartPole-v1", fused: bool = True, **kwargs) -> SerialEnv:
    env = SerialEnv(N, lambda: GymEnv(env_id, **kwargs))
    env.set_seed(0)
    env.start()
    if not fused:
        env.__dict__["_fused"] = None  # the generic runners: the reference
    return env


def _assert_same(a: TensorDict, b: TensorDict) -> None:
    assert a.batch_size == b.batch_size and a.names == b.names
    assert sorted(map(str, a.keys(True, True))) == sorted(map(str, b.keys(True, True)))
    for key in a.keys(True, True):
        x, y = a.get(key), b.get(key)
        assert x.dtype == y.dtype and x.shape == y.shape, key
        assert torch.equal(x, y), key


class _Sampler(torch.nn.Module):
    """A stochastic policy that also writes its logits (an extra root entry to record)."""

    def __init__(self, obs_dim: int, n: int) -> None:
        super().__init__()
        self.net = torch.nn.Linear(obs_dim, n)
        self.n = n

    def forward(self, observation):
        logits = self.net(observation)
        index = torch.distributions.Categorical(logits=logits).sample()
        return torch.nn.functional.one_hot(index, self.n), logits


def _policy() -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(_Sampler(4, 2), in_keys=["observation"], out_keys=["action", "logits"])


def test_fuses_plain_gym_envs_only():
    assert isinstance(_serial()._fused, GymFusedSteps)
    assert _serial(frame_skip=2)._fused is None
    info = SerialEnv(2, lambda: GymEnv("CartPole-v1").set_info_dict_reader())
    info.start()
    assert info._fused is None

    class Custom(GymEnv):
        def _step(self, tensordict):
            return super()._step(tensordict)

    custom = SerialEnv(2, lambda: Custom("CartPole-v1"))
    custom.start()
    assert custom._fused is None


@pytest.mark.parametrize("break_when_any_done", [False, True])
@pytest.mark.parametrize("source", ["policy", "actions"])
def test_rollout_equals_generic(break_when_any_done, source):
    torch.manual_seed(3)
    actions = [torch.nn.functional.one_hot(torch.randint(0, 2, (N,)), 2) for _ in range(80)]
    results = []
    for fused in (True, False):
        env = _serial(fused=fused)
        kwargs = {"policy": _policy()} if source == "policy" else {"actions": actions}
        torch.manual_seed(1)
        results.append(env.rollout(80, break_when_any_done=break_when_any_done, **kwargs))
    _assert_same(*results)
    fused_out = results[0]
    assert fused_out.names == [None, "time"]
    if not break_when_any_done:
        # episodes ended and were reset along the way: the contract's reset rows
        ended = fused_out["next", "done"][:, :-1]
        assert ended.any()
        assert not fused_out["done"].any()
        assert not torch.equal(fused_out["observation"][:, 1:][ended], fused_out["next", "observation"][:, :-1][ended])
        same = ~ended
        assert torch.equal(fused_out["observation"][:, 1:][same], fused_out["next", "observation"][:, :-1][same])


def test_random_rollout_replays_through_generic_path():
    """Random actions are drawn for every step at once; replayed through the generic runners, they give the same data."""
    env = _serial()
    torch.manual_seed(5)
    fused_out = env.rollout(60, break_when_any_done=False)
    action = fused_out["action"]
    assert action.shape == (N, 60, 2) and torch.equal(action.sum(-1), torch.ones(N, 60, dtype=action.dtype))
    torch.manual_seed(5)
    assert torch.equal(_serial().rollout(60, break_when_any_done=False)["action"], action)  # seeded: reproducible
    generic = _serial(fused=False).rollout(60, break_when_any_done=False, actions=list(action.unbind(1)))
    _assert_same(fused_out, generic)


def test_continuous_actions_equal_generic():
    torch.manual_seed(2)
    actions = [torch.rand(N, 1) * 4 - 2 for _ in range(30)]
    outs = [_serial("Pendulum-v1", fused).rollout(30, actions=actions) for fused in (True, False)]
    _assert_same(*outs)


def test_steps_and_partial_resets_equal_generic():
    """The collector path (step_and_maybe_reset, "_reset" masks) goes through the fused stepper too."""
    torch.manual_seed(4)
    actions = [torch.nn.functional.one_hot(torch.randint(0, 2, (N,)), 2) for _ in range(60)]
    records = []
    for fused in (True, False):
        env = _serial(fused=fused)
        td, steps = env.reset(), []
        for action in actions:
            stepped, td = env.step_and_maybe_reset(td.set("action", action))
            steps.append(stepped.clone())
        mask = torch.tensor([True, False, True, False])
        steps.append(env.reset(td.clone().set("_reset", mask)))
        records.append(steps)
    for a, b in zip(*records):
        _assert_same(a, b)


def test_maybe_reset_of_a_partial_root_takes_the_generic_path():
    outs = []
    for fused in (True, False):
        env = _serial(fused=fused)
        root = env.reset().exclude("truncated")
        root.set("done", torch.tensor([False, True, False, True]))
        outs.append(env.maybe_reset(root))
    _assert_same(*outs)
    assert not outs[0]["done"].any()


def test_transformed_serial_env_keeps_its_transforms():
    env = TransformedEnv(_serial(), RewardScaling(loc=0.0, scale=3.0))
    out = env.rollout(20, break_when_any_done=False)
    assert torch.equal(out["next", "reward"], torch.full((N, 20), 3.0))


class _Writer(TensorDictModuleBase):
    """A policy module writing a fixed action and, from one step on, an entry of its own."""

    in_keys: list = []
    out_keys = ["action"]

    def __init__(self, extra: dict, from_step: int = 0) -> None:
        super().__init__()
        self.extra, self.from_step, self.calls = extra, from_step, 0

    def forward(self, td):
        td.set("action", torch.nn.functional.one_hot(torch.zeros(N, dtype=torch.long), 2))
        if self.calls >= self.from_step:
            for key, value in self.extra.items():
                td.set(key, value)
        self.calls += 1
        return td


def test_non_tensor_policy_entries_equal_generic():
    outs = [_serial(fused=fused).rollout(6, _Writer({"note": "text"})) for fused in (True, False)]
    assert outs[0]["note"] == outs[1]["note"]
    _assert_same(outs[0].exclude("note"), outs[1].exclude("note"))


def test_policy_errors():
    env = _serial()
    with pytest.raises(KeyError, match="other keys at step 1"):
        env.rollout(5, _Writer({"late": torch.zeros(N)}, from_step=1), break_when_any_done=False)
    with pytest.raises(ValueError, match="action"):
        env.rollout(3, actions=[torch.zeros(N, 3, dtype=torch.long)] * 3)
