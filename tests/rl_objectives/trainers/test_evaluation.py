"""Whole-episode evaluation: episode_returns against hand-computed values and a loop reference,
evaluate_episodes and LogValidationReward on an env whose sub-envs end their episodes at known steps."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_envs import EnvBase, PendulumEnv, StepCounter, TransformedEnv
from rl_objectives.trainers import LogValidationReward, episode_returns, evaluate_episodes
from tdict import TensorDict
from tdict.nn import InteractionType, TensorDictModuleBase, interaction_type
from tdict.specs import Bounded, Categorical, Composite, Unbounded
from torch import nn


class EpisodeEnv(EnvBase):
    """Sub-env i terminates after ``lengths[i]`` steps; the reward of step k (1-based) is ``k * (i + 1)``.

    So an episode of sub-env i returns ``(i + 1) * L * (L + 1) / 2`` with ``L = lengths[i]``.
    """

    def __init__(self, lengths=(2, 3, 5)):
        super().__init__(batch_size=[len(lengths)])
        self.lengths = torch.tensor(lengths)
        shape = self.batch_size
        self.observation_spec = Composite(
            observation=Unbounded(shape=(*shape, 1)), count=Unbounded(shape=shape, dtype=torch.int64), shape=shape
        )
        self.state_spec = Composite(count=Unbounded(shape=shape, dtype=torch.int64), shape=shape)
        self.action_spec = Bounded(-1.0, 1.0, shape=(*shape, 1))
        flag = Categorical(2, shape=shape, dtype=torch.bool)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=shape)

    def _reset(self, tensordict=None, **kwargs):
        count = torch.zeros(self.batch_size, dtype=torch.int64)
        done = torch.zeros(self.batch_size, dtype=torch.bool)
        return TensorDict(
            {
                "observation": count.float().unsqueeze(-1),
                "count": count,
                "done": done,
                "terminated": done.clone(),
                "truncated": done.clone(),
            },
            batch_size=self.batch_size,
        )

    def _step(self, tensordict):
        count = tensordict["count"] + 1
        terminated = count >= self.lengths
        reward = count.float() * torch.arange(1, self.batch_size[0] + 1).float()
        return TensorDict(
            {
                "observation": count.float().unsqueeze(-1),
                "count": count,
                "reward": reward,
                "done": terminated.clone(),
                "terminated": terminated,
                "truncated": torch.zeros_like(terminated),
            },
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


class ConstantPolicy(TensorDictModuleBase):
    """Writes action 0 and records the interaction type, its mode and whether gradients are on."""

    in_keys, out_keys = ["observation"], ["action"]

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(1, 1)
        self.seen = []

    def forward(self, td):
        self.seen.append((interaction_type(), self.training, torch.is_grad_enabled()))
        return td.set("action", torch.zeros(*td.batch_size, 1))


# ---------------------------------------------------------------------------- episode_returns
def test_episode_returns_hand_computed():
    reward = torch.tensor(
        [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [5.0, 5.0, 5.0, 5.0, 5.0, 5.0]]
    )
    done = torch.tensor(
        [
            [0, 1, 0, 0, 1, 0],  # episodes [1, 2] and [3, 4, 5]; 6 is cut off
            [0, 0, 0, 0, 0, 1],  # one episode ending on the last step
            [0, 0, 0, 0, 0, 0],
        ],
        dtype=torch.bool,
    )  # never ends: no episode
    torch.testing.assert_close(episode_returns(reward, done), torch.tensor([3.0, 12.0, 6.0]))
    # an unbatched rollout [T], an int reward, no episode at all
    torch.testing.assert_close(
        episode_returns(torch.tensor([1, 2, 3]), torch.tensor([True, False, True])), torch.tensor([1.0, 5.0])
    )
    assert episode_returns(torch.ones(2, 4), torch.zeros(2, 4, dtype=torch.bool)).shape == (0,)


def test_episode_returns_leading_and_feature_dims():
    reward = torch.arange(2 * 2 * 4 * 3, dtype=torch.float32).reshape(2, 2, 4, 3)  # [B1, B2, T, F]
    done = torch.zeros(2, 2, 4, dtype=torch.bool)
    done[0, 1, 1] = done[1, 0, 3] = done[1, 1, 0] = done[1, 1, 2] = True
    expected = torch.stack([reward[0, 1, :2].sum(0), reward[1, 0].sum(0), reward[1, 1, 0], reward[1, 1, 1:3].sum(0)])
    torch.testing.assert_close(episode_returns(reward, done), expected)


def _loop_reference(reward, done):
    out = []
    for row_r, row_d in zip(reward.tolist(), done.tolist()):
        total = 0.0
        for r, d in zip(row_r, row_d):
            total += r
            if d:
                out.append(total)
                total = 0.0
    return torch.tensor(out, dtype=torch.float32)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 4), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_episode_returns_matches_a_loop(n_envs, steps, seed):
    gen = torch.Generator().manual_seed(seed)
    reward = torch.randint(-5, 6, (n_envs, steps), generator=gen).float()
    done = torch.rand(n_envs, steps, generator=gen) < 0.3
    torch.testing.assert_close(episode_returns(reward, done), _loop_reference(reward, done))


def test_episode_returns_errors():
    with pytest.raises(ValueError, match=r"reward \(2, 3\) must start with done's shape \(2, 4\)"):
        episode_returns(torch.ones(2, 3), torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="done must have a time dim"):
        episode_returns(torch.ones(()), torch.tensor(True))
    with pytest.raises(TypeError, match="must be tensors"):
        episode_returns([1.0], torch.tensor([True]))


# ---------------------------------------------------------------------------- evaluate_episodes
def test_evaluate_episodes_sub_envs_end_at_different_steps():
    env, policy = EpisodeEnv((2, 3, 5)), ConstantPolicy()
    returns = evaluate_episodes(env, policy, max_steps=7)
    # sub-env 0 ends at steps 2, 4, 6 (step 7 starts a 4th episode); 1 at 3 and 6; 2 at 5
    torch.testing.assert_close(returns, torch.tensor([3.0, 3.0, 3.0, 12.0, 12.0, 45.0]))
    assert set(policy.seen) == {(InteractionType.DETERMINISTIC, False, False)}
    assert policy.training  # mode restored
    # max_steps shorter than every episode: nothing ended
    assert evaluate_episodes(env, policy, max_steps=1).shape == (0,)
    with pytest.raises(ValueError, match="done_keys is empty; name at least one done key"):
        evaluate_episodes(env, policy, max_steps=3, done_keys=[])


def test_evaluate_episodes_on_pendulum_counts_whole_time_limited_episodes():
    env = TransformedEnv(PendulumEnv(batch_size=[3]), StepCounter(max_steps=20))
    env.set_seed(0)
    policy = lambda td: td.set("action", torch.zeros(3, 1))  # noqa: E731
    returns = evaluate_episodes(env, policy, max_steps=50)  # 2 whole episodes per sub-env, the third cut off
    env.set_seed(0)
    rollout = env.rollout(50, policy, break_when_any_done=False)
    reward = rollout["next", "reward"]
    expected = torch.stack([reward[:, :20].sum(-1), reward[:, 20:40].sum(-1)], -1).reshape(
        -1
    )  # ordered by env, then time
    torch.testing.assert_close(returns, expected)


def test_evaluate_episodes_done_keys_and_errors():
    env, policy = EpisodeEnv((2, 3)), ConstantPolicy()
    # only "truncated" counts here, and it is never set: no episode ends
    assert evaluate_episodes(env, policy, max_steps=6, done_keys=[("next", "truncated")]).shape == (0,)
    with pytest.raises(KeyError, match="done_keys.*'nope'"):
        evaluate_episodes(env, policy, max_steps=2, done_keys=[("next", "nope")])
    with pytest.raises(KeyError, match="no reward at \\('next', 'r'\\)"):
        evaluate_episodes(env, policy, max_steps=2, reward_key=("next", "r"))
    with pytest.raises(TypeError, match="rollout"):
        evaluate_episodes(object(), policy, max_steps=2)
    with pytest.raises(ValueError, match="max_steps"):
        evaluate_episodes(env, policy, max_steps=0)
    with pytest.raises(ValueError, match="exploration_type"):
        evaluate_episodes(env, policy, max_steps=2, exploration_type="greedy")

    class NoDone:
        def rollout(self, max_steps, policy=None, **kwargs):
            return TensorDict({"next": {"reward": torch.ones(max_steps)}}, batch_size=[max_steps])

    with pytest.raises(KeyError, match="none of the done keys"):
        evaluate_episodes(NoDone(), policy, max_steps=3)


# ---------------------------------------------------------------------------- LogValidationReward
def test_log_validation_reward_logs_whole_episodes():
    env, policy = EpisodeEnv((2, 3, 5)), ConstantPolicy()
    hook = LogValidationReward(record_interval=1, record_frames=7, policy_exploration=policy, environment=env)
    out = hook()
    # per-step rewards of the 7 steps: env 0: 1 2 1 2 1 2 1; env 1: 2 4 6 2 4 6 2; env 2: 3 6 9 12 15 3 6
    assert out["total_r_evaluation"] == pytest.approx((3 + 3 + 3 + 12 + 12 + 45) / 6)
    assert out["r_evaluation"] == pytest.approx((10 + 26 + 54) / 21)
    assert out["log_pbar"] is False


def test_log_validation_reward_without_a_complete_episode_raises():
    hook = LogValidationReward(
        record_interval=1, record_frames=1, policy_exploration=ConstantPolicy(), environment=EpisodeEnv((2, 3))
    )
    with pytest.raises(RuntimeError, match="no episode ended within record_frames=1"):
        hook()
    with pytest.raises(ValueError, match="done_keys"):
        LogValidationReward(
            record_interval=1,
            record_frames=1,
            policy_exploration=ConstantPolicy(),
            environment=EpisodeEnv(),
            done_keys="done",
        )


def test_log_validation_reward_takes_a_group_reward_key():
    # a multi-agent rollout: two agents' rewards under ("next", "agents", "reward"), episodes of 2 steps
    class AgentsEnv:
        def rollout(self, max_steps, policy=None, **kwargs):
            done = torch.arange(1, max_steps + 1) % 2 == 0
            reward = torch.stack([torch.ones(max_steps), 3 * torch.ones(max_steps)], -1)
            agents = TensorDict(reward=reward, batch_size=[max_steps, 2])
            return TensorDict({"next": {"agents": agents, "done": done}}, batch_size=[max_steps])

    hook = LogValidationReward(
        record_interval=1,
        record_frames=5,
        policy_exploration=lambda td: td,
        environment=AgentsEnv(),
        reward_key=("next", "agents", "reward"),
    )
    out = hook()
    # two whole episodes of 2 steps per agent: returns 2 and 6, averaged over agents and episodes
    assert out["total_r_evaluation"] == pytest.approx(4.0) and out["r_evaluation"] == pytest.approx(2.0)
