"""ActionScaling, FlattenAction, ActionMask, DiscreteActionProjection, MultiAction."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict
from tdict.specs import Bounded, Categorical, Composite, OneHot, Unbounded

from rl_envs import Compose, EnvBase, PendulumEnv, StepCounter, TransformedEnv
from rl_envs.transforms import ActionMask, ActionScaling, DiscreteActionProjection, FlattenAction, MultiAction


class BoxEnv(EnvBase):
    """Continuous action of shape ``action_shape`` in [low, high]; observation = the last action, flattened."""

    def __init__(self, batch_size=(), action_shape=(2,), low=0.0, high=4.0):
        super().__init__(batch_size=batch_size)
        b = self.batch_size
        n = int(torch.Size(action_shape).numel())
        self.action_spec = Bounded(
            torch.as_tensor(low).expand(*b, *action_shape),
            torch.as_tensor(high).expand(*b, *action_shape),
            shape=(*b, *action_shape),
        )
        self.observation_spec = Composite(observation=Unbounded(shape=(*b, n)), shape=b)
        self.actions = []

    def _reset(self, tensordict=None, **kw):
        done = torch.zeros(self.batch_size, dtype=torch.bool)
        n = self.observation_spec["observation"].shape[-1]
        return TensorDict(
            {"observation": torch.zeros(*self.batch_size, n), "done": done, "terminated": done.clone()},
            batch_size=self.batch_size,
        )

    def _step(self, tensordict):
        a = tensordict["action"]
        self.actions.append(a.clone())
        done = torch.zeros(self.batch_size, dtype=torch.bool)
        flat = a.reshape(*self.batch_size, -1)
        return TensorDict(
            {"observation": flat.clone(), "reward": flat.sum(-1), "done": done, "terminated": done.clone()},
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


# ---------------------------------------------------------------------------------------------- ActionScaling
@pytest.mark.parametrize("batch", [[], [3]])
def test_action_scaling_env(batch, specs_truthful):
    base = BoxEnv(batch_size=batch, action_shape=(2,), low=torch.tensor([0.0, -1.0]), high=torch.tensor([4.0, 3.0]))
    env = TransformedEnv(base, ActionScaling())
    spec = env.action_spec
    assert isinstance(spec, Bounded) and (spec.low == -1).all() and (spec.high == 1).all()
    torch.manual_seed(0)
    r = env.rollout(5)
    outer = r["action"]
    inner = torch.stack(base.actions, len(batch))
    loc, scale = torch.tensor([2.0, 1.0]), torch.tensor([2.0, 2.0])
    torch.testing.assert_close(inner, outer * scale + loc)
    assert base.action_spec.is_in(inner[(slice(None),) * len(batch) + (0,)])
    specs_truthful(env, r)


def test_action_scaling_pendulum_compose_and_plain_td(specs_truthful, recording_pendulum):
    base = recording_pendulum(batch_size=[3])
    env = TransformedEnv(base, Compose(StepCounter(4), ActionScaling(standard_normal=False)))
    assert env.action_spec.low.unique().tolist() == [0.0] and env.action_spec.high.unique().tolist() == [1.0]
    r = env.rollout(4)
    torch.testing.assert_close(torch.stack(base.actions, 1), (r["action"] * 2 - 1) * 2.0)
    specs_truthful(env, r)
    # replay-buffer stand-in: forward normalises env actions, inv maps back
    t = env.transform[1]
    td = TensorDict(action=torch.tensor([[-2.0], [0.0], [2.0]]), batch_size=[3])
    assert t(td.clone())["action"].flatten().tolist() == [0.0, 0.5, 1.0]
    assert t.inv(TensorDict(action=torch.tensor([[0.25]]), batch_size=[1]))["action"].item() == -1.0
    explicit = ActionScaling(loc=1.0, scale=2.0)
    assert explicit(TensorDict(action=torch.tensor([5.0])))["action"].item() == 2.0


def test_action_scaling_bad_spec(counting_env):
    # what the env's spec cannot give is a RuntimeError when the spec is read (TorchRL's contract)
    with pytest.raises(RuntimeError, match="ActionScaling: key 'action' needs a float Bounded action spec"):
        TransformedEnv(counting_env(), ActionScaling()).action_spec
    for low, high in ((float("-inf"), 1.0), (-2.0, torch.finfo(torch.float32).max)):
        env = TransformedEnv(BoxEnv(action_shape=(3,), low=low, high=high), ActionScaling())
        with pytest.raises(RuntimeError, match=r"bounds of 'action' must be finite \(below the dtype's largest"):
            env.action_spec
    with pytest.raises(ValueError, match="together"):
        ActionScaling(loc=1.0)
    with pytest.raises(ValueError, match="single action key"):
        ActionScaling(in_keys_inv=["a", "b"])
    with pytest.raises(ValueError, match="forward-only"):
        ActionScaling(in_keys_inv=[])


def test_action_scaling_refuses_a_width_that_does_not_match():
    t = ActionScaling(loc=torch.arange(3.0), scale=torch.ones(3))
    torch.testing.assert_close(t.normalize(torch.arange(3.0).expand(2, 3)), torch.zeros(2, 3))
    for action in (torch.zeros(4, 1), torch.zeros(4, 5)):
        with pytest.raises(ValueError, match=r"last dim .* does not match the 3 entries of loc and scale"):
            t.normalize(action)
        with pytest.raises(ValueError, match="does not match"):
            t.denormalize(action)
    scalar = ActionScaling(loc=1.0, scale=2.0)  # a scalar broadcasts over any width
    torch.testing.assert_close(scalar.normalize(torch.full((4, 5), 3.0)), torch.ones(4, 5))


# ---------------------------------------------------------------------------------------------- FlattenAction
def test_flatten_action_inverse_of_one_tensor_and_positive_dims():
    t = FlattenAction(action_shape=(3, 5))
    action = torch.arange(15.0)
    unflat = t._inv_apply_transform(action)
    assert unflat.shape == (3, 5) and torch.equal(t._apply_transform(unflat), action)
    with pytest.raises(RuntimeError, match="cannot disambiguate"):
        FlattenAction(in_keys_inv=["a", "b"], action_shape=(3, 5))._inv_apply_transform(action)
    with pytest.raises(ValueError, match="allow_positive_dim=True"):
        FlattenAction(first_dim=0, last_dim=1)
    with pytest.raises(ValueError, match="same sign"):
        FlattenAction(first_dim=0, last_dim=-1, allow_positive_dim=True)
    for batch in ([], [2]):  # positive dims count within the action, after the env's batch dims
        base = BoxEnv(batch_size=batch, action_shape=(3, 5), low=-100.0, high=100.0)
        env = TransformedEnv(base, FlattenAction(first_dim=0, last_dim=1, allow_positive_dim=True))
        assert env.action_spec.shape == (*batch, 15)
        td = env.reset().set("action", torch.arange(15.0).expand(*batch, 15))
        env.step(td)
        assert torch.equal(base.actions[-1], torch.arange(15.0).reshape(3, 5).expand(*batch, 3, 5))


@pytest.mark.parametrize("batch", [[], [3]])
def test_flatten_action_env(batch, specs_truthful):
    low = torch.arange(6.0).reshape(2, 3) - 10
    base = BoxEnv(batch_size=batch, action_shape=(2, 3), low=low, high=low + 1)
    env = TransformedEnv(base, Compose(StepCounter(3), FlattenAction()))
    spec = env.action_spec
    assert spec.shape == (*batch, 6)
    torch.testing.assert_close(spec.low, low.reshape(6).expand(*batch, 6))
    r = env.rollout(3)
    assert r["action"].shape == (*batch, 3, 6)
    inner = torch.stack(base.actions, len(batch))
    torch.testing.assert_close(inner, r["action"].reshape(*batch, 3, 2, 3))
    specs_truthful(env, r)


def test_flatten_action_plain_td():
    t = FlattenAction(action_shape=(2, 3))
    x = torch.randn(4, 2, 3)
    flat = t(TensorDict(action=x, batch_size=[4]))["action"]
    torch.testing.assert_close(flat, x.reshape(4, 6))
    torch.testing.assert_close(t.inv(TensorDict(action=flat, batch_size=[4]))["action"], x)
    with pytest.raises(ValueError, match="negative"):
        FlattenAction(first_dim=0)


def _long_one_hot(td):
    # conftest's CountingEnv calls argmax on the bool one-hot action, which torch rejects
    a = td["action"]
    return td.copy().set("action", a.long()) if a.dtype is torch.bool else td


# ---------------------------------------------------------------------------------------------- ActionMask
@pytest.fixture
def masked_env(counting_env):
    class MaskedEnv(counting_env):
        """Action ``count % n`` is forbidden at each step."""

        def __init__(self, **kw):
            super().__init__(n_actions=4, max_count=40, **kw)
            obs = self.observation_spec.clone()
            obs["action_mask"] = Categorical(2, shape=(*self.batch_size, 4), dtype=torch.bool)
            self.observation_spec = obs

        def _obs(self, count):
            out = super()._obs(count)
            out["action_mask"] = torch.arange(4) != (count % 4).unsqueeze(-1)
            return out

        def _step(self, tensordict):
            return super()._step(_long_one_hot(tensordict))

    return MaskedEnv


@pytest.mark.parametrize("batch", [[], [3]])
@pytest.mark.parametrize("one_hot", [False, True])
def test_action_mask_random_rollout(masked_env, batch, one_hot, specs_truthful):
    env = TransformedEnv(masked_env(batch_size=batch, one_hot=one_hot), Compose(StepCounter(30), ActionMask()))
    torch.manual_seed(1)
    r = env.rollout(30)
    index = r["action"].long().argmax(-1) if one_hot else r["action"]
    allowed = r["action_mask"].gather(-1, index.unsqueeze(-1)).squeeze(-1)
    assert allowed.all()
    assert (index != r["count"] % 4).all()
    # the action spec mask is the last observed mask
    torch.testing.assert_close(env.action_spec.mask, r["next", "action_mask"][(slice(None),) * len(batch) + (-1,)])
    specs_truthful(env, r, check_action=False)  # past actions were drawn under past masks


def test_action_mask_partial_reset_and_errors(masked_env):
    env = TransformedEnv(masked_env(batch_size=[2]), ActionMask())
    td = env.reset()
    td.set("action", torch.tensor([1, 2]))
    td = env.step(td)["next"]
    td.set("_reset", torch.tensor([True, False]))
    env.reset(td)
    # sub-env 0 is back to count 0 (action 0 masked), sub-env 1 keeps count 2 (action 2 masked)
    assert env.action_spec.mask.tolist() == [[False, True, True, True], [True, True, False, True]]
    with pytest.raises(RuntimeError, match="TransformedEnv"):
        ActionMask()(TensorDict(action_mask=torch.ones(4, dtype=torch.bool)))


# ---------------------------------------------------------------------------------------------- DiscreteActionProjection
@pytest.fixture
def recording_counting(counting_env):
    class Recording(counting_env):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.actions = []

        def _step(self, tensordict):
            self.actions.append(tensordict["action"].clone())
            return super()._step(_long_one_hot(tensordict))

    return Recording


@pytest.mark.parametrize("batch", [[], [3]])
def test_discrete_action_projection_env(recording_counting, batch, specs_truthful):
    base = recording_counting(batch_size=batch, one_hot=True, n_actions=2, max_count=100)
    env = TransformedEnv(base, Compose(StepCounter(20), DiscreteActionProjection(2, 5)))
    assert isinstance(env.action_spec, OneHot) and env.action_spec.shape == (*batch, 5)
    torch.manual_seed(0)
    r = env.rollout(20)
    outer = r["action"].long().argmax(-1)
    inner = torch.stack(base.actions, len(batch))
    assert inner.shape == (*batch, 20, 2) and inner.dtype == torch.bool
    inner_idx = inner.long().argmax(-1)
    kept = outer < 2
    assert kept.any() and (~kept).any()
    assert (inner_idx[kept] == outer[kept]).all()
    assert ((inner_idx >= 0) & (inner_idx < 2)).all()
    # the reward is the inner action
    torch.testing.assert_close(r["next", "reward"], inner_idx.float())
    specs_truthful(env, r)


def test_discrete_action_projection_plain_td():
    t = DiscreteActionProjection(2, 4)
    out = t(TensorDict(action=torch.tensor([[0, 1], [1, 0]]), batch_size=[2]))["action"]
    assert out.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]
    inv = t.inv(TensorDict(action=torch.tensor([[0, 0, 0, 1], [0, 1, 0, 0]]), batch_size=[2]))["action"]
    assert inv.shape == (2, 2) and inv[1].tolist() == [0, 1] and inv[0].sum() == 1
    with pytest.raises(ValueError, match="max_actions"):
        DiscreteActionProjection(3, 2)
    with pytest.raises(ValueError, match="one-hot"):
        t.inv(TensorDict(action=torch.zeros(3)))


# ---------------------------------------------------------------------------------------------- MultiAction
def _reference_macro(chunks, max_count):
    """Per sub-env loop: (final count, reward list with zeros after done, done) for one macro step."""
    out = []
    for row in chunks.tolist():
        count, rewards, done = 0, [], False
        for a in row:
            if done:
                rewards.append(0.0)
                continue
            count += a
            rewards.append(float(a))
            done = count >= max_count
        out.append((count, rewards, done))
    return out


@pytest.mark.parametrize("batch", [[], [3]])
def test_multi_action_stacked_rewards(recording_counting, batch):
    base = recording_counting(batch_size=batch, n_actions=3, max_count=5)
    env = TransformedEnv(base, MultiAction(num_actions=4))
    assert env.action_spec.shape == (*batch, 4)
    assert env.full_reward_spec["reward"].shape == (*batch, 4)
    td = env.reset()
    chunks = torch.tensor([[2, 2, 2, 2], [1, 0, 1, 0], [2, 1, 0, 2]])[: (batch[0] if batch else 1)]
    td.set("action", chunks.reshape(*batch, 4))
    out = env.step(td)
    ref = _reference_macro(chunks, 5)
    nxt = out["next"]
    count = nxt["count"].reshape(-1)
    assert count.tolist() == [c for c, _, _ in ref]
    assert nxt["reward"].reshape(-1, 4).tolist() == [r for _, r, _ in ref]
    assert nxt["done"].reshape(-1).tolist() == [d for _, _, d in ref]
    assert nxt["observation"].reshape(-1, 3)[:, 0].tolist() == [float(c) for c, _, _ in ref]
    # the root keeps the macro action the caller gave
    assert out["action"].shape == (*batch, 4)
    if not batch:
        # single env: the inner env ran until done (3 steps), not the fourth action
        assert [int(a) for a in base.actions] == [2, 2, 2]


def test_multi_action_sum_rewards_compose_rollout(counting_env, specs_truthful):
    env = TransformedEnv(
        counting_env(batch_size=[3], n_actions=3, max_count=6),
        Compose(MultiAction(num_actions=2, sum_rewards=True), StepCounter(3)),
    )
    torch.manual_seed(0)
    r = env.rollout(3, break_when_any_done=False)
    assert r["next", "reward"].shape == (3, 3)
    # reference: reward summed until done, count tracks actions
    acts = r["action"]
    for b in range(3):
        count = 0
        for t in range(r.shape[1]):
            if t and bool(r["done"][b, t]):
                count = 0
            start = int(r["count"][b, t])
            assert start == count
            total, done = 0.0, False
            for a in acts[b, t].tolist():
                if done:
                    continue
                count += a
                total += a
                done = count >= 6
            assert r["next", "reward"][b, t].item() == total
            assert int(r["next", "count"][b, t]) == count
    specs_truthful(env, r)


def test_multi_action_pendulum_inverse_and_plain_td(recording_pendulum):
    base = recording_pendulum()
    env = TransformedEnv(base, MultiAction(num_actions=3, stack_rewards=False))
    td = env.reset()
    chunk = torch.tensor([[0.5], [-1.0], [2.0]])
    out = env.step(td.set("action", chunk))
    torch.testing.assert_close(torch.stack(base.actions), chunk)
    # reference: three pendulum steps from the same state
    ref = PendulumEnv()
    s = td.exclude("action").clone()
    for a in chunk:
        s = ref.step(s.set("action", a))
        last = s["next"]
        s = last.clone()
    torch.testing.assert_close(out["next", "observation"], last["observation"])
    torch.testing.assert_close(out["next", "reward"], last["reward"])
    t = MultiAction(num_actions=3)
    assert t.inv(TensorDict(action=chunk))["action"].tolist() == [0.5]
    with pytest.raises(ValueError, match="num_actions"):
        TransformedEnv(PendulumEnv(), MultiAction()).action_spec


def test_action_scaling_from_mean_std_and_from_low_high():
    t = ActionScaling.from_stats(mean=torch.tensor([2.0, -1.0]), std=torch.tensor([3.0, 0.5]))
    a = torch.tensor([[5.0, -1.5], [2.0, 0.0]])
    expected = (a - torch.tensor([2.0, -1.0])) / torch.tensor([3.0, 0.5])
    torch.testing.assert_close(t.normalize(a), expected)
    torch.testing.assert_close(t.denormalize(expected), a)
    t = ActionScaling.from_stats(low=torch.tensor([-2.0, 0.0]), high=torch.tensor([2.0, 10.0]))
    torch.testing.assert_close(
        t.normalize(torch.tensor([[-2.0, 10.0], [0.0, 5.0]])), torch.tensor([[-1.0, 1.0], [0.0, 0.0]])
    )


def test_action_scaling_from_stats_floors_a_zero_std():
    t = ActionScaling.from_stats(mean=torch.tensor([5.0]), std=torch.tensor([0.0]), eps=1e-3)
    assert t.scale.tolist() == [pytest.approx(1e-3)]
    assert t.normalize(torch.tensor([[5.0]])).tolist() == [[0.0]]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "exactly one of"),
        ({"mean": torch.zeros(2), "std": torch.ones(2), "low": -torch.ones(2), "high": torch.ones(2)}, "exactly one"),
        ({"mean": torch.zeros(2)}, "mean and std must be given together"),
        ({"high": torch.zeros(2)}, "low and high must be given together"),
        ({"mean": torch.zeros(3), "std": torch.ones(2)}, r"same shape, got \(3,\) and \(2,\)"),
    ],
)
def test_action_scaling_from_stats_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ActionScaling.from_stats(**kwargs)
