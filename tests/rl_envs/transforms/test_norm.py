"""ObservationNorm, VecNorm and NormalizeReward."""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp
from tdict import TensorDict
from tdict.specs import Bounded, Unbounded

from rl_envs import Compose, PendulumEnv, StepCounter, TransformedEnv
from rl_envs.transforms import NormalizeReward, ObservationNorm, VecNorm


# ---------------------------------------------------------------------------------------------- ObservationNorm
@pytest.mark.parametrize("batch", [[], [3]])
@pytest.mark.parametrize("standard_normal", [False, True])
def test_observation_norm_env(batch, standard_normal, specs_truthful):
    loc, scale = torch.tensor([0.5, -1.0, 2.0]), torch.tensor([2.0, 0.5, 4.0])
    t = ObservationNorm(
        loc=loc, scale=scale, in_keys=["observation"], out_keys=["obs_norm"], standard_normal=standard_normal
    )
    env = TransformedEnv(PendulumEnv(batch_size=batch, seed=0), Compose(StepCounter(5), t))
    r = env.rollout(5)
    raw = r["next", "observation"]
    expected = (raw - loc) / scale if standard_normal else raw * scale + loc
    torch.testing.assert_close(r["next", "obs_norm"], expected)
    spec = env.full_observation_spec["obs_norm"]
    raw_low, raw_high = torch.tensor([-1.0, -1.0, -8.0]), torch.tensor([1.0, 1.0, 8.0])
    lo = (raw_low - loc) / scale if standard_normal else raw_low * scale + loc
    hi = (raw_high - loc) / scale if standard_normal else raw_high * scale + loc
    assert isinstance(spec, Bounded)
    torch.testing.assert_close(spec.low, torch.minimum(lo, hi).expand(*batch, 3))
    torch.testing.assert_close(spec.high, torch.maximum(lo, hi).expand(*batch, 3))
    specs_truthful(env, r)


def test_observation_norm_inverse_on_action(specs_truthful, recording_pendulum):
    base = recording_pendulum(batch_size=[2])
    t = ObservationNorm(loc=0.5, scale=2.0, in_keys=[], in_keys_inv=["action"], standard_normal=True)
    env = TransformedEnv(base, t)
    spec = env.action_spec
    torch.testing.assert_close(spec.low, torch.full((2, 1), -1.25))
    torch.testing.assert_close(spec.high, torch.full((2, 1), 0.75))
    r = env.rollout(4)
    torch.testing.assert_close(torch.stack(base.actions, 1), r["action"] * 2.0 + 0.5)
    specs_truthful(env, r)


@pytest.mark.parametrize("standard_normal", [False, True])
def test_observation_norm_init_stats(standard_normal, specs_truthful):
    env = TransformedEnv(PendulumEnv(seed=3), ObservationNorm(in_keys=["observation"], standard_normal=standard_normal))
    assert isinstance(env.full_observation_spec["observation"], Unbounded)  # no stats yet
    torch.manual_seed(0)
    env.transform.init_stats(50)
    ref_env = PendulumEnv(seed=3)
    torch.manual_seed(0)
    data = ref_env.rollout(50)["observation"]
    mean, std = data.mean(0), data.std(0)
    t = env.transform
    if standard_normal:
        torch.testing.assert_close(t.loc, mean)
        torch.testing.assert_close(t.scale, std)
    else:
        torch.testing.assert_close(t.scale, 1 / std)
        torch.testing.assert_close(t.loc, -mean / std)
    assert isinstance(env.full_observation_spec["observation"], Bounded)  # specs recomputed
    r = env.rollout(5)
    specs_truthful(env, r)
    # buffers travel through state_dict
    fresh = ObservationNorm(in_keys=["observation"], standard_normal=standard_normal)
    fresh.load_state_dict(t.state_dict())
    td = TensorDict(observation=torch.randn(4, 3), batch_size=[4])
    torch.testing.assert_close(fresh(td.clone())["observation"], t(td.clone())["observation"])
    with pytest.raises(RuntimeError, match="already"):
        t.init_stats(5)


def test_observation_norm_init_stats_batched_reduce_dims():
    env = TransformedEnv(
        PendulumEnv(batch_size=[3], seed=1), ObservationNorm(in_keys=["observation"], standard_normal=True)
    )
    torch.manual_seed(0)
    env.transform.init_stats(30, reduce_dim=(0, 1), cat_dim=1, keep_dims=(1,))
    ref = PendulumEnv(batch_size=[3], seed=1)
    torch.manual_seed(0)
    data = ref.rollout(30)["observation"]
    torch.testing.assert_close(env.transform.loc, data.mean((0, 1), keepdim=True)[0])
    assert env.transform.loc.shape == (1, 3)


def test_observation_norm_plain_td_and_errors():
    t = ObservationNorm(loc=1.0, scale=3.0, in_keys=["obs"])
    td = TensorDict(obs=torch.tensor([[1.0], [2.0]]), batch_size=[2])
    assert t(td)["obs"].flatten().tolist() == [4.0, 7.0]
    with pytest.raises(RuntimeError, match="init_stats"):
        ObservationNorm(in_keys=["obs"])(TensorDict(obs=torch.ones(1)))
    with pytest.raises(RuntimeError, match="parent"):
        ObservationNorm(in_keys=["obs"]).init_stats(3)
    with pytest.raises(ValueError, match="together"):
        ObservationNorm(loc=1.0)


# ---------------------------------------------------------------------------------------------- VecNorm
def vecnorm_reference(frames, decay, eps, batch_dims=0):
    """Running normalisation of a list of frames ([*batch, *feat]), computed step by step in float64."""
    s = q = c = 0.0
    out = []
    for x in frames:
        flat = x.double().reshape(-1, *x.shape[batch_dims:])
        s = s * decay + flat.sum(0)
        q = q * decay + (flat**2).sum(0)
        c = c * decay + flat.shape[0]
        mean = s / c
        std = (q / c - mean**2).clamp_min(eps).sqrt()
        out.append(((x.double() - mean) / std.clamp_min(eps)).to(x.dtype))
    return out


@pytest.mark.parametrize("batch", [[], [3]])
def test_vecnorm_env_values(batch, specs_truthful):
    t = VecNorm(in_keys=["observation"], out_keys=["obs_norm"], decay=0.9)
    env = TransformedEnv(PendulumEnv(batch_size=batch, seed=0), Compose(StepCounter(6), t))
    td = env.reset()
    r = env.rollout(6, tensordict=td, auto_reset=False)
    nb = len(batch)
    frames = [td["observation"]] + list(r["next", "observation"].unbind(nb))
    ref = vecnorm_reference(frames, 0.9, 1e-4, nb)
    torch.testing.assert_close(td["obs_norm"], ref[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(r["next", "obs_norm"], torch.stack(ref[1:], nb), atol=1e-4, rtol=1e-4)
    # stats TensorDict: count = sum of decayed frame counts
    n = batch[0] if batch else 1
    expected_count = sum(n * 0.9**k for k in range(7))
    assert abs(t._td["observation_count"].item() - expected_count) < 1e-4
    spec = env.full_observation_spec["obs_norm"]
    assert isinstance(spec, Unbounded) and spec.shape == (*batch, 3)
    specs_truthful(env, r)


def test_vecnorm_reward_and_plain_td_forward():
    env = TransformedEnv(PendulumEnv(seed=2), VecNorm(in_keys=["reward"], out_keys=["reward_norm"], decay=1.0))
    r = env.rollout(5)
    rew = r["next", "reward"]
    ref = vecnorm_reference(list(rew.unbind(0)), 1.0, 1e-4)
    torch.testing.assert_close(r["next", "reward_norm"], torch.stack(ref), atol=1e-4, rtol=1e-4)
    assert r["next", "reward_norm"].shape == (5,)
    # forward on a plain TensorDict updates the statistics (as TorchRL), freeze stops it
    t = VecNorm(in_keys=["obs"], decay=1.0)
    x = torch.tensor([[1.0, 0.0], [3.0, 4.0]])
    out = t(TensorDict(obs=x, batch_size=[2]))["obs"]
    torch.testing.assert_close(t.loc["obs"], x.mean(0))
    torch.testing.assert_close(out, (x - x.mean(0)) / x.std(0, unbiased=False))
    t.freeze()
    t(TensorDict(obs=x + 10, batch_size=[2]))
    torch.testing.assert_close(t.loc["obs"], x.mean(0))
    back = t.denorm(TensorDict(obs=out, batch_size=[2]))["obs"]
    torch.testing.assert_close(back, x)


def test_vecnorm_to_observation_norm_and_state_dict():
    t = VecNorm(in_keys=["obs"], decay=0.99)
    for k in range(4):
        t(TensorDict(obs=torch.randn(5, 2) * (k + 1), batch_size=[5]))
    norm = t.to_observation_norm()
    assert isinstance(norm, ObservationNorm) and norm.standard_normal
    x = TensorDict(obs=torch.randn(3, 2), batch_size=[3])
    t.freeze()
    torch.testing.assert_close(norm(x.clone())["obs"], t(x.clone())["obs"])
    other = VecNorm(in_keys=["obs"], decay=0.99)
    other.load_state_dict(t.state_dict())
    torch.testing.assert_close(other.loc["obs"], t.loc["obs"])
    torch.testing.assert_close(other.scale["obs"], t.scale["obs"])


def test_vecnorm_two_envs_share_stats():
    env_a = PendulumEnv(seed=0)
    shared = VecNorm.build_td_for_shared_vecnorm(env_a, ["observation"])
    assert shared.is_shared() and shared["observation_sum"].shape == (3,)
    env_a = TransformedEnv(env_a, VecNorm(in_keys=["observation"], shared_td=shared, decay=1.0))
    env_b = TransformedEnv(PendulumEnv(seed=1), VecNorm(in_keys=["observation"], shared_td=shared, decay=1.0))
    env_a.rollout(3), env_b.rollout(4)
    assert shared["observation_count"].item() == 3 + 4 + 2  # steps + one reset each
    assert env_a.transform.loc["observation"].tolist() == env_b.transform.loc["observation"].tolist()
    with pytest.raises(ValueError, match="shared memory"):
        VecNorm(in_keys=["observation"], shared_td=TensorDict(observation_sum=torch.zeros(3)))


def _child_update(shared, lock, values):
    t = VecNorm(in_keys=["obs"], shared_td=shared, lock=lock, decay=1.0)
    t(TensorDict(obs=values, batch_size=[values.shape[0]]))


def test_vecnorm_shared_stats_across_processes():
    shared = TensorDict(obs_sum=torch.zeros(2), obs_ssq=torch.zeros(2), obs_count=torch.zeros(())).share_memory_()
    ctx = mp.get_context("fork")
    lock = ctx.Lock()
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    proc = ctx.Process(target=_child_update, args=(shared, lock, values))
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0
    torch.testing.assert_close(shared["obs_sum"], values.sum(0))
    assert shared["obs_count"].item() == 2
    parent = VecNorm(in_keys=["obs"], shared_td=shared, lock=lock, decay=1.0)
    torch.testing.assert_close(parent.loc["obs"], values.mean(0))


# ---------------------------------------------------------------------------------------------- NormalizeReward
def _swing(td):
    """A deterministic policy: the same actions in every env built alike."""
    return td.set("action", 2.0 * torch.tanh(td["observation"][..., 2:3]))


def _pendulums(*transforms, seed=0):
    return TransformedEnv(PendulumEnv(batch_size=[3], seed=seed), Compose(StepCounter(7), *transforms))


def test_normalize_reward_matches_a_hand_written_loop(specs_truthful):
    gamma, eps, clip = 0.9, 1e-8, 1.5
    r = _pendulums(NormalizeReward(gamma=gamma, eps=eps, clip=clip)).rollout(30, _swing, break_when_any_done=False)
    raw = _pendulums().rollout(30, _swing, break_when_any_done=False)
    rewards, dones = raw["next", "reward"].double(), raw["next", "done"]
    assert dones[:, 6].all() and not dones[:, 5].any()  # episodes of 7 steps end inside the rollout
    # reference: SB3's VecNormalize reward path written as a loop over steps and sub-envs
    mean, var, count = 0.0, 1.0, 1e-4
    returns, seen, expected = [0.0] * 3, [], torch.empty(3, 30, dtype=torch.float64)
    for t in range(30):
        returns = [returns[i] * gamma + float(rewards[i, t]) for i in range(3)]
        seen += returns
        b_mean = sum(returns) / 3
        b_var = sum((x - b_mean) ** 2 for x in returns) / 3
        delta, total = b_mean - mean, count + 3
        var = (var * count + b_var * 3 + delta**2 * count * 3 / total) / total
        mean, count = mean + delta * 3 / total, total
        for i in range(3):
            expected[i, t] = max(-clip, min(clip, float(rewards[i, t]) / (var + eps) ** 0.5))
            if dones[i, t]:
                returns[i] = 0.0
    torch.testing.assert_close(r["next", "reward"].double(), expected, rtol=1e-5, atol=1e-6)
    assert r["next", "reward"].abs().max() <= clip and (r["next", "reward"].abs() == clip).any()
    specs_truthful(_pendulums(NormalizeReward(gamma=gamma)), r)


def test_normalize_reward_statistics_are_those_of_the_returns():
    env = _pendulums(NormalizeReward(gamma=0.95))
    raw = _pendulums().rollout(40, _swing, break_when_any_done=False)
    env.rollout(40, _swing, break_when_any_done=False)
    rewards, dones = raw["next", "reward"].double(), raw["next", "done"]
    returns, g = torch.empty_like(rewards), torch.zeros(3, dtype=torch.float64)
    for t in range(40):
        g = g * 0.95 + rewards[:, t]
        returns[:, t] = g
        g = torch.where(dones[:, t], 0.0, g)
    t = env.transform[-1]
    assert float(t.count) == pytest.approx(120 + 1e-4)
    torch.testing.assert_close(t.mean, returns.mean(), rtol=1e-5, atol=0)
    torch.testing.assert_close(t.var, returns.var(unbiased=False), rtol=1e-5, atol=0)


def test_normalize_reward_freeze_state_dict_and_plain_td():
    env = _pendulums(NormalizeReward(gamma=0.9))
    env.rollout(10, _swing, break_when_any_done=False)
    t = env.transform[-1]
    # a copy loaded from the state dict continues the same returns and statistics
    twin = _pendulums(NormalizeReward(gamma=0.9))
    twin.load_state_dict(env.state_dict())
    td = env.reset()
    a = env.rollout(5, _swing, auto_reset=False, tensordict=td.clone(), break_when_any_done=False)
    b = twin.rollout(5, _swing, auto_reset=False, tensordict=td.clone(), break_when_any_done=False)
    torch.testing.assert_close(a["next", "reward"], b["next", "reward"])
    torch.testing.assert_close(twin.transform[-1].var, t.var)
    # frozen: rewards still scaled, nothing updated
    t.freeze()
    before = (t.mean.clone(), t.var.clone(), t.count.clone())
    raw_env = _pendulums()
    raw_env.load_state_dict(env.state_dict(), strict=False)  # the same generator: the same resets
    r = env.rollout(5, _swing, break_when_any_done=False)
    assert (t.mean, t.var, t.count) == before
    raw = raw_env.rollout(5, _swing, break_when_any_done=False)
    torch.testing.assert_close(r["next", "reward"], (raw["next", "reward"].double() / (t.var + 1e-8).sqrt()).float())
    # a stored batch: scaled with the current statistics, not counted
    t.unfreeze()
    out = t(TensorDict(reward=torch.tensor([2.0, -4.0])))
    torch.testing.assert_close(out["reward"], (torch.tensor([2.0, -4.0]).double() / (t.var + 1e-8).sqrt()).float())
    assert float(t.count) == float(before[2])


def test_normalize_reward_bad_arguments():
    with pytest.raises(ValueError, match="gamma must be in"):
        NormalizeReward(gamma=1.5)
    with pytest.raises(ValueError, match="clip must be a number > 0 or None"):
        NormalizeReward(clip=0.0)
    with pytest.raises(ValueError, match="eps must be a number > 0"):
        NormalizeReward(eps=0)
    with pytest.raises(ValueError, match="one reward key"):
        NormalizeReward(in_keys=["reward", "other"])
    env = _pendulums(NormalizeReward(done_key="finished"))
    with pytest.raises(KeyError, match="'finished' not found"):
        env.rollout(2, _swing)
