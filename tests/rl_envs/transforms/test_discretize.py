"""ActionDiscretizer."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict
from tdict.specs import Bounded, Categorical, Composite, MultiCategorical, MultiOneHot, Unbounded

from rl_envs import Compose, EnvBase, PendulumEnv, StepCounter, TransformedEnv
from rl_envs.transforms import ActionDiscretizer


class BoxEnv(EnvBase):
    """Action in [low, high] (shape [*batch, n]); records the actions it receives."""

    def __init__(self, batch_size=(), low=(0.0, -1.0), high=(4.0, 1.0)):
        super().__init__(batch_size=batch_size)
        b = self.batch_size
        low, high = torch.tensor(low), torch.tensor(high)
        n = low.numel()
        self.action_spec = Bounded(low.expand(*b, n), high.expand(*b, n), shape=(*b, n))
        self.observation_spec = Composite(observation=Unbounded(shape=(*b, n)), shape=b)
        self.actions = []

    def _reset(self, tensordict=None, **kw):
        done = torch.zeros(self.batch_size, dtype=torch.bool)
        n = self.action_spec.shape[-1]
        return TensorDict(
            {"observation": torch.zeros(*self.batch_size, n), "done": done, "terminated": done.clone()},
            batch_size=self.batch_size,
        )

    def _step(self, tensordict):
        a = tensordict["action"]
        self.actions.append(a.clone())
        done = torch.zeros(self.batch_size, dtype=torch.bool)
        return TensorDict(
            {"observation": a.clone(), "reward": a.sum(-1), "done": done, "terminated": done.clone()},
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


def grid_reference(low, high, n, sampling):
    """Grid values computed element by element."""
    width = (high - low) / n
    offset = {"MEDIAN": 0.5, "LOW": 0.0, "HIGH": 1.0}[sampling]
    return [low + (i + offset) * width for i in range(n)]


@pytest.mark.parametrize("batch", [[], [3]])
@pytest.mark.parametrize("sampling", ["MEDIAN", "LOW", "HIGH"])
def test_discretizer_per_dim_intervals(batch, sampling, specs_truthful):
    base = BoxEnv(batch_size=batch)
    t = ActionDiscretizer(torch.tensor([4, 3]), sampling=ActionDiscretizer.SamplingStrategy[sampling])
    env = TransformedEnv(base, Compose(StepCounter(6), t))
    spec = env.action_spec
    assert isinstance(spec, MultiCategorical) and spec.shape == (*batch, 2)
    assert spec.nvec.reshape(-1, 2)[0].tolist() == [4, 3]
    torch.manual_seed(0)
    r = env.rollout(6)
    inner = torch.stack(base.actions, len(batch)).reshape(-1, 2)
    idx = r["action"].reshape(-1, 2)
    g0, g1 = grid_reference(0.0, 4.0, 4, sampling), grid_reference(-1.0, 1.0, 3, sampling)
    expected = torch.tensor([[g0[i], g1[j]] for i, j in idx.tolist()])
    torch.testing.assert_close(inner, expected)
    assert base.action_spec.is_in(inner[: (batch[0] if batch else 1)].reshape(*batch, 2))
    specs_truthful(env, r)


def test_discretizer_random_sampling_stays_in_interval():
    base = BoxEnv()
    env = TransformedEnv(base, ActionDiscretizer(4, sampling=ActionDiscretizer.SamplingStrategy.RANDOM))
    r = env.rollout(20)
    inner = torch.stack(base.actions)
    low = torch.tensor([0.0, -1.0]) + r["action"] * torch.tensor([1.0, 0.5])
    assert ((inner >= low) & (inner <= low + torch.tensor([1.0, 0.5]))).all()


@pytest.mark.parametrize("batch", [[], [3]])
def test_discretizer_one_hot_pendulum(batch, specs_truthful):
    base = PendulumEnv(batch_size=batch)
    env = TransformedEnv(base, ActionDiscretizer(5, categorical=False))
    spec = env.action_spec
    assert isinstance(spec, MultiOneHot) and spec.shape == (*batch, 5)
    r = env.rollout(4)
    index = r["action"].long().argmax(-1)
    torch.testing.assert_close(env.transform.to_continuous(r["action"]).squeeze(-1), -2 + (index + 0.5) * 0.8)
    specs_truthful(env, r)


def test_discretizer_scalar_action_and_out_key(specs_truthful):
    class ScalarEnv(BoxEnv):
        def __init__(self):
            EnvBase.__init__(self)
            self.action_spec = Bounded(-1.0, 1.0, shape=())
            self.observation_spec = Composite(observation=Unbounded(shape=(1,)))
            self.actions = []

        def _reset(self, tensordict=None, **kw):
            done = torch.zeros((), dtype=torch.bool)
            return TensorDict({"observation": torch.zeros(1), "done": done, "terminated": done.clone()})

        def _step(self, tensordict):
            a = tensordict["action"]
            self.actions.append(a.clone())
            done = torch.zeros((), dtype=torch.bool)
            return TensorDict(
                {"observation": a.reshape(1), "reward": a.clone(), "done": done, "terminated": done.clone()}
            )

    base = ScalarEnv()
    env = TransformedEnv(base, ActionDiscretizer(4, out_action_key="action_disc"))
    assert isinstance(env.full_action_spec["action_disc"], Categorical)
    assert "action" not in env.full_action_spec.keys() and "action" in env.full_state_spec.keys()
    r = env.rollout(5)
    assert r["action_disc"].shape == (5,)
    expected = -1 + (r["action_disc"] + 0.5) * 0.5
    torch.testing.assert_close(torch.stack(base.actions), expected)
    torch.testing.assert_close(r["action"], expected)  # the continuous action is recorded at the root
    specs_truthful(env, r)


def test_discretizer_plain_td_and_errors(counting_env):
    env = TransformedEnv(PendulumEnv(), ActionDiscretizer(3))
    t = env.transform
    env.action_spec  # builds the grid
    td = TensorDict(action=torch.tensor([[0], [1], [2]]), batch_size=[3])
    assert t(td.clone())["action"].tolist() == [[0], [1], [2]]  # forward leaves buffer data discrete
    torch.testing.assert_close(t.inv(td)["action"], torch.tensor([[-4 / 3], [0.0], [4 / 3]]))
    with pytest.raises(ValueError, match="outside"):
        t.inv(TensorDict(action=torch.tensor([3])))
    with pytest.raises(TypeError, match="Bounded"):
        TransformedEnv(counting_env(), ActionDiscretizer(3)).action_spec
    with pytest.raises(ValueError, match="entries"):
        TransformedEnv(PendulumEnv(), ActionDiscretizer(torch.tensor([3, 4]))).action_spec
