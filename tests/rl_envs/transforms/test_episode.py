"""InitTracker, TrajCounter, NoopResetEnv, FrameSkipTransform, RandomTruncationTransform, TerminateTransform,
EndOfLifeTransform."""

import pytest
import torch
from tdict import TensorDict
from tdict.specs import Categorical, Composite, Unbounded

from rl_envs import (
    Compose,
    EnvBase,
    EndOfLifeTransform,
    FrameSkipTransform,
    InitTracker,
    NoopResetEnv,
    PendulumEnv,
    RandomTruncationTransform,
    StepCounter,
    TerminateTransform,
    TrajCounter,
    TransformedEnv,
)

ACTIONS = torch.tensor([1, 2, 3])  # with max_count=6: episodes of 6, 3 and 2 steps


def batched(counting_env, transform, max_count=6):
    return TransformedEnv(counting_env(batch_size=[3], max_count=max_count, n_actions=4), transform)


def episode_starts(done):
    """Loop reference: True where a step starts an episode (t=0 or after a done)."""
    start = torch.zeros_like(done)
    for i in range(done.shape[0]):
        for t in range(done.shape[1]):
            start[i, t] = t == 0 or bool(done[i, t - 1])
    return start


# ---------------------------------------------------------------------- InitTracker
def test_init_tracker_single_env(counting_env, fixed_policy):
    env = TransformedEnv(counting_env(max_count=3), InitTracker())
    r = env.rollout(7, fixed_policy(torch.tensor(1)), break_when_any_done=False)
    assert r["is_init"].tolist() == [True, False, False, True, False, False, True]
    assert not r["next", "is_init"].any()
    with pytest.raises(NotImplementedError):
        InitTracker()(r)


class _GroupDoneEnv(EnvBase):
    """One agent group under ``"data"`` with its own done flags; ``root`` adds root done flags too."""

    def __init__(self, root):
        super().__init__()
        self.root = root
        self.observation_spec = Composite(obs=Unbounded(shape=(1,)))
        self.full_action_spec = Composite(action=Unbounded(shape=(1,)))
        self.full_reward_spec = Composite(reward=Unbounded(shape=(1,)))
        flag = Categorical(2, shape=(2, 1), dtype=torch.bool)
        done: dict = {"data": Composite(done=flag, terminated=flag.clone(), shape=(2,))}
        if root:
            done.update(
                done=Categorical(2, shape=(1,), dtype=torch.bool),
                terminated=Categorical(2, shape=(1,), dtype=torch.bool),
            )
        self.full_done_spec = Composite(done)

    def _flags(self):
        group = TensorDict(
            done=torch.zeros(2, 1, dtype=torch.bool), terminated=torch.zeros(2, 1, dtype=torch.bool), batch_size=[2]
        )
        out = TensorDict(obs=torch.zeros(1), data=group)
        if self.root:
            out.update(done=torch.zeros(1, dtype=torch.bool), terminated=torch.zeros(1, dtype=torch.bool))
        return out

    def _reset(self, tensordict=None, **kwargs):
        return self._flags()

    def _step(self, tensordict):
        return self._flags().set("reward", torch.zeros(1))

    def _set_seed(self, seed):
        return seed


@pytest.mark.parametrize("root", [True, False])
def test_init_tracker_root_done_hides_nested_groups(root):
    env = TransformedEnv(_GroupDoneEnv(root), InitTracker())
    expected = "is_init" if root else ("data", "is_init")
    assert env.transform.init_keys == [expected]
    r = env.rollout(2)
    assert r[expected].view(-1).tolist() == ([True, False] if root else [True, True, False, False])
    assert (("data", "is_init") in r.keys(True)) == (not root)


def test_init_tracker_batched_compose_specs(counting_env, added_keys_match, all_in, fixed_policy):
    env = batched(counting_env, Compose(StepCounter(), InitTracker()))
    r = env.rollout(12, fixed_policy(ACTIONS), break_when_any_done=False)
    assert torch.equal(r["is_init"], episode_starts(r["next", "done"]))
    assert torch.equal(r["is_init"], r["step_count"] == 0)
    spec = env.observation_spec["is_init"]
    assert spec.dtype == torch.bool and all_in(spec, r["is_init"])
    added_keys_match(env)
    # partial reset through the "_reset" mask
    td = env.reset()
    td = env.step(td.set("action", ACTIONS.clone()))["next"].clone()
    td["_reset"] = torch.tensor([True, False, True])
    assert env.reset(td)["is_init"].tolist() == [True, False, True]


# ---------------------------------------------------------------------- TrajCounter
def test_traj_counter_single_env(counting_env, fixed_policy):
    env = TransformedEnv(counting_env(max_count=3), TrajCounter())
    r = env.rollout(7, fixed_policy(torch.tensor(1)), break_when_any_done=False)
    assert r["traj_count"].tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert torch.equal(r["next", "traj_count"], r["traj_count"])
    with pytest.raises(RuntimeError, match="TrajCounter can only be called within an environment step or reset"):
        TrajCounter()(r)


def test_traj_counter_batched_partial_resets(counting_env, added_keys_match, all_in, fixed_policy):
    env = batched(counting_env, Compose(StepCounter(), TrajCounter()))
    r = env.rollout(12, fixed_policy(ACTIONS), break_when_any_done=False)
    done = r["next", "done"]
    ids, nxt, ref = [0, 1, 2], 3, torch.zeros(3, 12, dtype=torch.int64)
    for t in range(12):
        ref[:, t] = torch.tensor(ids)
        for i in range(3):  # sub-envs that finish at t get new ids, in sub-env order
            if bool(done[i, t]):
                ids[i], nxt = nxt, nxt + 1
    assert torch.equal(r["traj_count"], ref)
    assert all_in(env.observation_spec["traj_count"], r["traj_count"])
    added_keys_match(env)


def test_traj_counter_shared_and_state_dict(counting_env):
    t = TrajCounter()
    env1 = TransformedEnv(counting_env(), t.clone())
    env2 = TransformedEnv(counting_env(batch_size=[2]), t.clone())
    assert int(env1.reset()["traj_count"]) == 0
    assert env2.reset()["traj_count"].tolist() == [1, 2]
    assert int(env1.reset()["traj_count"]) == 3
    assert t.state_dict() == {"traj_count": 4}
    t.load_state_dict({"traj_count": 10})
    assert int(env1.reset()["traj_count"]) == 10


# ---------------------------------------------------------------------- NoopResetEnv
def test_noop_reset_counts(counting_env):
    env = TransformedEnv(counting_env(max_count=1000), Compose(StepCounter(), NoopResetEnv(5, random=False)))
    assert int(env.reset()["step_count"]) == 5
    r = env.rollout(3)
    assert r["step_count"].tolist() == [5, 6, 7] and "reward" not in r.keys()
    env = TransformedEnv(counting_env(max_count=1000), Compose(StepCounter(), NoopResetEnv(6, seed=3)))
    gen, expected = torch.Generator().manual_seed(3), []
    for _ in range(4):
        expected.append(int(torch.randint(6, (), generator=gen)))
        for _ in range(expected[-1]):  # the no-ops' random actions come from the same generator
            env.action_spec.rand(generator=gen)
    assert [int(env.reset()["step_count"]) for _ in range(4)] == expected
    assert len(set(expected)) > 1
    td = TensorDict({"a": torch.ones(2)}, [])
    assert NoopResetEnv()(td) is td  # outside an env it passes data through (TorchRL's behaviour)
    with pytest.raises(RuntimeError, match="NoopResetEnv.parent not found"):
        NoopResetEnv()._reset(td, td.empty())


def test_noop_reset_is_seeded_through_the_env():
    def make():
        return TransformedEnv(PendulumEnv(), Compose(StepCounter(), NoopResetEnv(6)))

    a, b, c = make(), make(), make()
    # the base env's generator gets 3, the transform's 4 (its no-op counts and random actions)
    assert a.set_seed(3) == b.set_seed(3) == 5 and c.set_seed(4) == 6
    ref = TransformedEnv(PendulumEnv(seed=3), Compose(StepCounter(), NoopResetEnv(6, seed=4)))
    torch.manual_seed(0)
    ra, rb = a.reset(), b.reset()
    torch.manual_seed(1)  # the global generator plays no part
    rr, rc = ref.reset(), c.reset()
    assert (ra == rb).all() and (ra == rr).all() and not (ra == rc).all()
    assert int(ra["step_count"]) > 0 or int(a.reset()["step_count"]) > 0
    with pytest.raises(TypeError, match="NoopResetEnv.set_seed: seed must be an int or None, got 1.5"):
        NoopResetEnv().set_seed(1.5)


def test_noop_reset_errors(counting_env):
    env = TransformedEnv(counting_env(max_count=1, n_actions=2), NoopResetEnv(60, random=False))
    with pytest.raises(RuntimeError, match="done before 60 no-op steps"):
        env.reset()
    with pytest.raises(ValueError, match="single envs"):
        TransformedEnv(counting_env(batch_size=[3]), NoopResetEnv(3)).reset()


# ---------------------------------------------------------------------- FrameSkipTransform
def test_frame_skip_single_env(counting_env, fixed_policy):
    env = TransformedEnv(counting_env(max_count=100), FrameSkipTransform(3))
    r = env.rollout(3, fixed_policy(torch.tensor(1)))
    assert r["next", "observation"][:, 0].tolist() == [3, 6, 9] and r["next", "reward"].tolist() == [3, 3, 3]
    env = TransformedEnv(counting_env(max_count=5), Compose(StepCounter(), FrameSkipTransform(3)))
    r = env.rollout(10, fixed_policy(torch.tensor(1)))
    assert r["next", "reward"].tolist() == [3, 2] and r["next", "step_count"].tolist() == [3, 5]
    assert r["next", "done"].tolist() == [False, True]
    with pytest.raises(RuntimeError, match="FrameSkipTransform can only be used when appended to a transformed env"):
        FrameSkipTransform(2)(r)
    with pytest.raises(ValueError, match="frame_skip"):
        FrameSkipTransform(0)


def test_frame_skip_batched_partial_resets(counting_env, all_in, fixed_policy):
    env = batched(counting_env, Compose(StepCounter(), FrameSkipTransform(2)), max_count=7)
    r = env.rollout(8, fixed_policy(ACTIONS), break_when_any_done=False)
    # loop reference: each env step repeats the action until 2 frames or done
    for i, a in enumerate(ACTIONS.tolist()):
        count, steps = 0, 0
        for t in range(8):
            reward, frames = 0, 0
            while frames < 2:
                count, frames, steps = count + a, frames + 1, steps + 1
                reward += a
                if count >= 7:
                    break
            assert r["next", "observation"][i, t, 0] == count and r["next", "reward"][i, t] == reward
            assert r["next", "step_count"][i, t] == steps and bool(r["next", "done"][i, t]) == (count >= 7)
            if count >= 7:
                count, steps = 0, 0
    assert all_in(env.observation_spec["step_count"], r["next", "step_count"])


# ---------------------------------------------------------------------- RandomTruncationTransform
def episode_lengths(done):
    out = []
    for row in done:
        ends = row.nonzero().flatten().tolist()
        out.append([e - s for s, e in zip([-1] + ends[:-1], ends)])
    return out


def test_random_truncation_batched(added_keys_match, all_in):
    def run(seed, prob):
        env = TransformedEnv(
            PendulumEnv(batch_size=[3], seed=0),
            Compose(StepCounter(), RandomTruncationTransform(3, 6, prob=prob, seed=seed)),
        )
        return env, env.rollout(30, break_when_any_done=False)

    env, r = run(0, 1.0)
    lengths = episode_lengths(r["next", "done"])
    assert all(1 <= ls[0] <= 6 and all(3 <= x <= 6 for x in ls[1:]) for ls in lengths)
    assert len({tuple(ls) for ls in lengths}) > 1  # decorrelated
    assert torch.equal(r["next", "truncated"], r["next", "done"])
    assert torch.equal(run(0, 1.0)[1]["next", "done"], r["next", "done"])  # seeded
    _, r0 = run(0, 0.0)
    assert all(all(x == 6 for x in ls[1:]) for ls in episode_lengths(r0["next", "done"]))
    assert all_in(env.full_done_spec["truncated"], r["next", "truncated"])
    added_keys_match(env)


def test_random_truncation_is_seeded_through_the_env():
    def make(env_seed=None, seed=None):
        transform = Compose(StepCounter(), RandomTruncationTransform(3, 6, prob=1.0, seed=seed))
        return TransformedEnv(PendulumEnv(batch_size=[4], seed=env_seed), transform)

    a, b = make(), make()
    assert a.set_seed(10) == b.set_seed(10) == 12  # the base env's stream, then the transform's
    ref = make(env_seed=10, seed=11)
    runs = [env.rollout(25, break_when_any_done=False)["next", "done"] for env in (a, b, ref)]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])
    other = make()
    other.set_seed(12)  # the next env in a chain: no stream shared with a
    assert not torch.equal(other.rollout(25, break_when_any_done=False)["next", "done"], runs[0])
    assert a.set_seed(None) is None


def test_random_truncation_single_env_and_errors():
    env = TransformedEnv(PendulumEnv(seed=0), Compose(StepCounter(), RandomTruncationTransform(2, 4, seed=1)))
    r = env.rollout(20)
    assert 1 <= r.shape[0] <= 4 and bool(r["next", "truncated"][-1])
    with pytest.raises(RuntimeError, match="StepCounter"):
        TransformedEnv(PendulumEnv(), RandomTruncationTransform(2, 4)).reset()
    with pytest.raises(ValueError, match="min_horizon"):
        RandomTruncationTransform(5, 4)
    with pytest.raises(RuntimeError, match="only works inside an env"):
        RandomTruncationTransform(1, 2)(r)


# ---------------------------------------------------------------------- TerminateTransform
def test_terminate_transform(counting_env, fixed_policy):
    def stop(td):
        return td["observation"][..., 0] >= 4

    env = TransformedEnv(counting_env(max_count=100), TerminateTransform(stop))
    r = env.rollout(10, fixed_policy(torch.tensor(1)))
    assert r.shape == (4,) and r["next", "terminated"].tolist() == [False] * 3 + [True]
    env = batched(counting_env, Compose(StepCounter(), TerminateTransform(stop)), max_count=100)
    r = env.rollout(8, fixed_policy(ACTIONS), break_when_any_done=False)
    ref = torch.zeros(3, 8, dtype=torch.bool)
    for i, a in enumerate(ACTIONS.tolist()):
        count = 0
        for t in range(8):
            count += a
            ref[i, t] = count >= 4
            count = 0 if count >= 4 else count
    assert torch.equal(r["next", "terminated"], ref) and torch.equal(r["next", "done"], ref)
    env = TransformedEnv(counting_env(max_count=100), TerminateTransform(stop, write_done=False))
    r = env.rollout(6, fixed_policy(torch.tensor(1)))
    assert r.shape == (6,) and r["next", "terminated"][3:].all() and not r["next", "done"].any()
    with pytest.raises(RuntimeError, match="only works inside an env"):
        TerminateTransform(stop)(r)
    with pytest.raises(ValueError, match="callable"):
        TerminateTransform(3)


# ---------------------------------------------------------------------- EndOfLifeTransform
def lives_env_class(counting_env):
    class LivesEnv(counting_env):
        """Lives = 3 - count // 2, exposed as an int64 observation (and as an attribute)."""

        def __init__(self, **kw):
            super().__init__(**kw)
            obs = self.observation_spec.clone()
            obs["lives"] = Unbounded(shape=self.batch_size, dtype=torch.int64)
            self.observation_spec = obs
            self.last_lives = None

        def _obs(self, count):
            out = super()._obs(count)
            out["lives"] = 3 - count // 2
            self.last_lives = out["lives"].clone()
            return out

        def current_lives(self):
            return self.last_lives

    return LivesEnv


def test_end_of_life_single_env(counting_env, fixed_policy):
    env = TransformedEnv(lives_env_class(counting_env)(max_count=6), EndOfLifeTransform())
    r = env.rollout(8, fixed_policy(torch.tensor(1)), break_when_any_done=False)
    # counts 1..6 then 1, 2: lives 3,2,2,1,1,0 | 3,2
    assert r["next", "end-of-life"].tolist() == [False, True, False, True, False, True, False, True]
    # the flag is an observation: the root holds the previous step's flag, False after a reset
    assert r["end-of-life"].tolist() == [False, False, True, False, True, False, False, False]
    # lives read from an attribute of the base env instead of an observation
    plain = counting_env  # an env without the lives observation
    base = lives_env_class(plain)(max_count=6)
    env2 = TransformedEnv(base, EndOfLifeTransform(lives_key="n_lives", eol_attribute="current_lives"))
    r2 = env2.rollout(8, fixed_policy(torch.tensor(1)), break_when_any_done=False)
    assert torch.equal(r2["next", "end-of-life"], r["next", "end-of-life"])
    assert r2["next", "n_lives"].tolist() == r["next", "lives"].tolist()


def test_end_of_life_batched_compose_forward_specs(counting_env, added_keys_match, all_in, fixed_policy):
    env = TransformedEnv(
        lives_env_class(counting_env)(batch_size=[3], max_count=6, n_actions=4),
        Compose(StepCounter(), EndOfLifeTransform()),
    )
    r = env.rollout(10, fixed_policy(ACTIONS), break_when_any_done=False)
    ref = (r["next", "lives"] < r["lives"]) | r["next", "done"]
    assert torch.equal(r["next", "end-of-life"], ref)
    assert r["next", "end-of-life"][1, :3].tolist() == [True, True, True]  # 2 counts per step: a life per step
    assert all_in(env.observation_spec["end-of-life"], r["next", "end-of-life"])
    added_keys_match(env)
    out = EndOfLifeTransform(eol_key="eol")(r.exclude(("next", "end-of-life")))
    assert torch.equal(out["next", "eol"], ref)
