"""RewardSum, RewardScaling, RewardClipping, BinarizeReward, Reward2GoTransform, TargetReturn."""

import pytest
import torch
from tdict import TensorDict

from rl_envs import (
    BinarizeReward,
    Compose,
    PendulumEnv,
    Reward2GoTransform,
    RewardClipping,
    RewardScaling,
    RewardSum,
    StepCounter,
    TargetReturn,
    TransformedEnv,
)

ACTIONS = torch.tensor([1, 2, 3])  # with max_count=6: episodes of 6, 3 and 2 steps


def batched(counting_env, transform, max_count=6):
    return TransformedEnv(counting_env(batch_size=[3], max_count=max_count, n_actions=4), transform)


def episode_sums(reward, done):
    """Loop reference: running episode return along the last dim, restarting after each done."""
    out = torch.zeros_like(reward)
    for idx in (
        torch.cartesian_prod(*[torch.arange(s) for s in reward.shape[:-1]]).reshape(-1, reward.ndim - 1)
        if reward.ndim > 1
        else [()]
    ):
        idx = tuple(idx.tolist()) if len(idx) else ()
        acc = 0.0
        for t in range(reward.shape[-1]):
            acc = acc + float(reward[idx + (t,)])
            out[idx + (t,)] = acc
            if bool(done[idx + (t,)]):
                acc = 0.0
    return out


# ---------------------------------------------------------------------- RewardSum
def test_reward_sum_single_env(counting_env, fixed_policy):
    env = TransformedEnv(counting_env(max_count=5), RewardSum())
    r = env.rollout(10, fixed_policy(torch.tensor(1)), break_when_any_done=False)
    assert r["next", "episode_reward"].tolist() == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]
    assert r["episode_reward"].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    assert r["next", "episode_reward"].shape == (10,)


def test_reward_sum_batched_partial_resets(counting_env, fixed_policy):
    env = batched(counting_env, RewardSum())
    r = env.rollout(12, fixed_policy(ACTIONS), break_when_any_done=False)
    done = r["next", "done"]
    assert done[1].nonzero().flatten().tolist() == [2, 5, 8, 11]  # episodes end at different times
    assert done[2].nonzero().flatten().tolist() == [1, 3, 5, 7, 9, 11]
    ref = episode_sums(r["next", "reward"], done)
    torch.testing.assert_close(r["next", "episode_reward"], ref)
    # root value = previous next value within the episode, 0 at the episode start
    start = torch.cat([torch.ones(3, 1, dtype=torch.bool), done[:, :-1]], 1)
    torch.testing.assert_close(r["episode_reward"], torch.where(start, 0.0, ref.roll(1, 1)))


def test_reward_sum_compose_pendulum(added_keys_match, all_in):
    env = TransformedEnv(PendulumEnv(batch_size=[4], seed=0), Compose(StepCounter(5), RewardSum()))
    r = env.rollout(12, break_when_any_done=False)
    torch.testing.assert_close(r["next", "episode_reward"], episode_sums(r["next", "reward"], r["next", "done"]))
    assert all_in(env.observation_spec["episode_reward"], r["next", "episode_reward"])
    added_keys_match(env)


def test_reward_sum_forward_on_trajectory(counting_env, fixed_policy):
    base = counting_env(batch_size=[3], max_count=6, n_actions=4)
    r = base.rollout(12, fixed_policy(ACTIONS), break_when_any_done=False)
    out = RewardSum()(r)
    torch.testing.assert_close(out["next", "episode_reward"], episode_sums(r["next", "reward"], r["next", "done"]))
    # a time dim that is not the last one (named "time")
    rt = torch.stack([r[:, t] for t in range(r.shape[1])], 0)
    rt.names = ["time", None]
    out_t = RewardSum()(rt)
    torch.testing.assert_close(out_t["next", "episode_reward"].transpose(0, 1), out["next", "episode_reward"])


def test_reward_sum_specs(counting_env, added_keys_match, all_in, fixed_policy):
    env = batched(counting_env, RewardSum())
    r = env.rollout(8, fixed_policy(ACTIONS), break_when_any_done=False)
    spec = env.observation_spec["episode_reward"]
    assert spec.shape == (3,) and all_in(spec, r["next", "episode_reward"])
    added_keys_match(env)


def test_reward_sum_reward_spec_mode(counting_env, fixed_policy):
    env = batched(counting_env, RewardSum(reward_spec=True))
    assert "episode_reward" in env.reward_keys and "episode_reward" not in env.observation_spec.keys()
    r = env.rollout(12, fixed_policy(ACTIONS), break_when_any_done=False)
    torch.testing.assert_close(r["next", "episode_reward"], episode_sums(r["next", "reward"], r["next", "done"]))


def test_reward_sum_bad_key(counting_env):
    with pytest.raises(KeyError, match="not_a_reward"):
        TransformedEnv(counting_env(), RewardSum(in_keys=["not_a_reward"])).reset()


# ---------------------------------------------------------------------- element-wise maps
@pytest.mark.parametrize("standard_normal", [False, True])
def test_reward_scaling(counting_env, standard_normal, all_in, fixed_policy):
    t = RewardScaling(loc=0.5, scale=2.0, standard_normal=standard_normal)
    fn = (lambda x: (x - 0.5) / 2.0) if standard_normal else (lambda x: x * 2.0 + 0.5)
    base = counting_env(batch_size=[3], max_count=6, n_actions=4)
    raw = base.rollout(7, fixed_policy(ACTIONS), break_when_any_done=False)
    env = TransformedEnv(counting_env(batch_size=[3], max_count=6, n_actions=4), Compose(StepCounter(), t))
    r = env.rollout(7, fixed_policy(ACTIONS), break_when_any_done=False)
    torch.testing.assert_close(r["next", "reward"], fn(raw["next", "reward"]))
    assert all_in(env.reward_spec, r["next", "reward"])
    # single env
    single = TransformedEnv(counting_env(max_count=5), RewardScaling(0.5, 2.0, standard_normal=standard_normal))
    assert single.rollout(3, fixed_policy(torch.tensor(1)))["next", "reward"].tolist() == [fn(1.0)] * 3
    # forward on a stored trajectory
    out = RewardScaling(0.5, 2.0, in_keys=[("next", "reward")], standard_normal=standard_normal)(raw.clone())
    torch.testing.assert_close(out["next", "reward"], fn(raw["next", "reward"]))


def test_reward_scaling_maps_a_leaf_spec_like_the_composite():
    from tdict.specs import Bounded, Composite

    t = RewardScaling(loc=1.0, scale=2.0, standard_normal=False)  # x * 2 + 1
    leaf = Bounded(0.0, 1.0, shape=(4,))
    mapped = t.transform_reward_spec(leaf.clone())
    whole = t.transform_reward_spec(Composite(reward=leaf.clone()))["reward"]
    assert mapped == whole and mapped.low.tolist() == [1.0] * 4 and mapped.high.tolist() == [3.0] * 4


def test_reward_clipping(counting_env, all_in, fixed_policy):
    base = counting_env(batch_size=[3], max_count=6, n_actions=4)
    raw = base.rollout(6, fixed_policy(ACTIONS), break_when_any_done=False)
    env = TransformedEnv(counting_env(batch_size=[3], max_count=6, n_actions=4), RewardClipping(1.5, 2.5))
    r = env.rollout(6, fixed_policy(ACTIONS), break_when_any_done=False)
    torch.testing.assert_close(r["next", "reward"], raw["next", "reward"].clamp(1.5, 2.5))
    spec = env.reward_spec
    assert float(spec.low.min()) == 1.5 and float(spec.high.max()) == 2.5 and all_in(spec, r["next", "reward"])
    single = TransformedEnv(counting_env(), Compose(RewardClipping(clamp_max=0.5)))
    assert single.rollout(2, fixed_policy(torch.tensor(1)))["next", "reward"].tolist() == [0.5, 0.5]
    out = RewardClipping(-1, 1, in_keys=[("next", "reward")])(
        TensorDict(next=TensorDict(reward=torch.tensor([-2.0, 3.0]), batch_size=[2]), batch_size=[2])
    )
    assert out["next", "reward"].tolist() == [-1.0, 1.0]
    with pytest.raises(ValueError, match="clamp_min"):
        RewardClipping(2, 1)


def test_binarize_reward(counting_env, all_in, fixed_policy):
    env = TransformedEnv(
        counting_env(batch_size=[3], max_count=6, n_actions=4), Compose(StepCounter(), BinarizeReward())
    )
    actions = torch.tensor([0, 2, 3])
    r = env.rollout(4, fixed_policy(actions))
    assert r["next", "reward"].dtype == torch.int8
    assert r["next", "reward"][:, 0].tolist() == [0, 1, 1]
    assert all_in(env.reward_spec, r["next", "reward"])
    single = TransformedEnv(counting_env(), BinarizeReward())
    assert single.rollout(2, fixed_policy(torch.tensor(1)))["next", "reward"].tolist() == [1, 1]
    out = BinarizeReward(in_keys=["r"])(TensorDict(r=torch.tensor([[-1.0, 0.0], [0.5, 2.0]]), batch_size=[2]))
    assert out["r"].tolist() == [[0, 0], [1, 1]]


# ---------------------------------------------------------------------- Reward2GoTransform
def reward_to_go(reward, done, gamma):
    out = torch.zeros_like(reward)
    for i in range(reward.shape[0]):
        g = 0.0
        for t in reversed(range(reward.shape[1])):
            if bool(done[i, t]):
                g = 0.0
            g = float(reward[i, t]) + gamma * g
            out[i, t] = g
    return out


def test_reward2go_inverse_and_forward(counting_env, fixed_policy):
    base = counting_env(batch_size=[3], max_count=6, n_actions=4)
    r = base.rollout(12, fixed_policy(ACTIONS), break_when_any_done=False)
    ref = reward_to_go(r["next", "reward"], r["next", "done"], 0.9)
    t = Reward2GoTransform(gamma=0.9, out_keys=["reward_to_go"])
    out = t.inv(r)
    torch.testing.assert_close(out["reward_to_go"], ref)
    assert "reward_to_go" not in r.keys()  # inv works on a copy
    torch.testing.assert_close(t(r.clone())["reward_to_go"], ref)  # distinct out key: forward computes too
    same = Reward2GoTransform(gamma=0.9)
    torch.testing.assert_close(same.inv(r)["next", "reward"], ref)
    torch.testing.assert_close(same(r.clone())["next", "reward"], r["next", "reward"])  # no double application
    # single trajectory [T] and inside a Compose
    single = base.rollout(12, fixed_policy(ACTIONS), break_when_any_done=False)[1]
    out = Compose(Reward2GoTransform(gamma=1.0, out_keys=["rtg"])).inv(single)
    torch.testing.assert_close(
        out["rtg"], reward_to_go(single["next", "reward"][None], single["next", "done"][None], 1.0)[0]
    )


def test_reward2go_on_torchrl_layout_data():
    """Flags and rewards shaped [B, T, 1] under a TensorDict of batch [B]: time is the dim before the singleton."""
    torch.manual_seed(0)
    reward = torch.randn(4, 6, 1)
    done = torch.zeros(4, 6, 1, dtype=torch.bool)
    done[:, 2] = True
    done[1, 5] = True
    td = TensorDict(next=TensorDict(reward=reward, done=done, batch_size=[4]), batch_size=[4])
    out = Reward2GoTransform(gamma=0.9, out_keys=["rtg"]).inv(td)
    expected = reward_to_go(reward[..., 0], done[..., 0], 0.9)  # our layout [B, T], the same numbers
    torch.testing.assert_close(out["rtg"], expected[..., None])
    with pytest.raises(KeyError, match=r"Could not find the reward .*next.*other.* in the trajectory"):
        Reward2GoTransform(in_keys=[("next", "other")]).inv(td)


def test_reward2go_errors(counting_env):
    with pytest.raises(ValueError, match="not inside an env"):
        TransformedEnv(counting_env(), Reward2GoTransform())
    inner = Compose(StepCounter(), Reward2GoTransform())  # refused through a Compose too, which stays free
    with pytest.raises(ValueError, match="not inside an env"):
        TransformedEnv(counting_env(), inner)
    assert inner.container is None
    assert Compose(Reward2GoTransform()).container is None  # outside an env it is welcome
    td = TensorDict(
        next=TensorDict(reward=torch.ones(2, 3), done=torch.zeros(2, 3, dtype=torch.bool), batch_size=[2, 3]),
        batch_size=[2, 3],
    )
    with pytest.raises(RuntimeError, match="no episode end"):
        Reward2GoTransform().inv(td)


# ---------------------------------------------------------------------- TargetReturn
def test_target_return_single_and_constant(counting_env, fixed_policy):
    env = TransformedEnv(counting_env(max_count=5), TargetReturn(10.0))
    r = env.rollout(7, fixed_policy(torch.tensor(1)), break_when_any_done=False)
    assert r["target_return"].tolist() == [10, 9, 8, 7, 6, 10, 9]
    assert r["next", "target_return"].tolist() == [9, 8, 7, 6, 5, 9, 8]
    env = TransformedEnv(counting_env(max_count=5), TargetReturn(3.0, mode="constant"))
    assert env.rollout(3, fixed_policy(torch.tensor(1)))["next", "target_return"].tolist() == [3, 3, 3]
    with pytest.raises(ValueError, match="mode"):
        TargetReturn(1.0, mode="bad")


def test_target_return_batched_compose_forward_specs(counting_env, added_keys_match, all_in, fixed_policy):
    env = batched(counting_env, Compose(StepCounter(), TargetReturn(20.0)))
    r = env.rollout(12, fixed_policy(ACTIONS), break_when_any_done=False)
    ref_next = 20.0 - episode_sums(r["next", "reward"], r["next", "done"])
    torch.testing.assert_close(r["next", "target_return"], ref_next)
    torch.testing.assert_close(r["target_return"], ref_next + r["next", "reward"])
    # forward on the trajectory without the entries gives the same values
    plain = r.exclude("target_return", ("next", "target_return"))
    out = TargetReturn(20.0)(plain)
    torch.testing.assert_close(out["target_return"], r["target_return"])
    torch.testing.assert_close(out["next", "target_return"], r["next", "target_return"])
    assert all_in(env.observation_spec["target_return"], r["next", "target_return"])
    added_keys_match(env)
