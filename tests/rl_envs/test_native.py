"""Native envs (PendulumEnv, CartPoleEnv): step-for-step against Gymnasium, batching, seeding, resets, specs."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from tdict import TensorDict
from tdict.nn import TensorDictModule
from tdict.specs import Categorical, OneHot
from rl_envs import CartPoleEnv, PendulumEnv, StepCounter, TransformedEnv

THETA_LIMIT = 12 * 2 * math.pi / 360
ATOL, RTOL = 1e-5, 1e-5  # float32 (ours) against float64 (gymnasium)


def _gym_classic():
    return pytest.importorskip("gymnasium.envs.classic_control")


# ----------------------------------------------------------------------------- state samplers
def _cartpole_states(n: int, gen: torch.Generator) -> torch.Tensor:
    """Random states: a generic block and blocks close to each termination threshold (both signs)."""

    def u(lo, hi, k):
        return torch.empty(k, dtype=torch.float64).uniform_(lo, hi, generator=gen)

    k = n // 3
    generic = torch.stack([u(-2.4, 2.4, k), u(-3, 3, k), u(-THETA_LIMIT, THETA_LIMIT, k), u(-3, 3, k)], -1)
    sign = torch.where(u(0, 1, k) < 0.5, -1.0, 1.0)
    near_x = torch.stack([sign * u(2.3, 2.4, k), sign * u(-2, 2, k), u(-0.1, 0.1, k), u(-1, 1, k)], -1)
    m = n - 2 * k
    sign = torch.where(u(0, 1, m) < 0.5, -1.0, 1.0)
    near_theta = torch.stack([u(-1, 1, m), u(-1, 1, m), sign * u(0.18, THETA_LIMIT, m), sign * u(-2, 2, m)], -1)
    return torch.cat([generic, near_x, near_theta]).to(torch.float32)


def _pendulum_states(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(th, thdot, u): angles well past ±pi (wrap-around), near ±pi, speeds and torques past their clips."""

    def u(lo, hi, k):
        return torch.empty(k, dtype=torch.float32).uniform_(lo, hi, generator=gen)

    k = n // 2
    th = torch.cat(
        [
            u(-3 * math.pi, 3 * math.pi, k),
            math.pi * torch.where(u(0, 1, n - k) < 0.5, -1.0, 1.0) + u(-0.01, 0.01, n - k),
        ]
    )
    thdot = u(-8.5, 8.5, n)
    torque = u(-3.0, 3.0, n)
    return th, thdot, torque


def _encode(actions: torch.Tensor, categorical: bool) -> torch.Tensor:
    """Index actions as the env reads them: indices, or one-hot rows (int64, as GymEnv's OneHot spec)."""
    return actions if categorical else torch.nn.functional.one_hot(actions, 2)


# ----------------------------------------------------------------------------- vs gymnasium
@pytest.mark.parametrize("categorical", [False, True])
def test_cartpole_matches_gymnasium_step_for_step(categorical):
    classic = _gym_classic()
    gen = torch.Generator().manual_seed(0)
    n = 1500
    states = _cartpole_states(n, gen)
    actions = torch.randint(0, 2, (n,), generator=gen)
    env = CartPoleEnv(batch_size=[n], categorical_action_encoding=categorical)
    out = env.step(TensorDict(observation=states, action=_encode(actions, categorical), batch_size=[n]))["next"]
    assert out["observation"].dtype == torch.float32 and out["reward"].dtype == torch.float32

    gym_env = classic.CartPoleEnv()
    gym_env.reset(seed=0)
    gym_obs, gym_term = np.empty((n, 4), dtype=np.float32), np.empty(n, dtype=bool)
    ambiguous = np.zeros(n, dtype=bool)
    for i in range(n):
        gym_env.unwrapped.state = states[i].double().numpy()
        gym_env.unwrapped.steps_beyond_terminated = None
        obs, reward, terminated, truncated, _ = gym_env.step(int(actions[i]))
        assert reward == 1.0 and truncated is False
        gym_obs[i], gym_term[i] = obs, terminated
        # within float32 rounding of a threshold the two precisions may legitimately disagree
        ambiguous[i] = abs(abs(obs[0]) - 2.4) < 1e-5 or abs(abs(obs[2]) - THETA_LIMIT) < 1e-5
    torch.testing.assert_close(out["observation"], torch.from_numpy(gym_obs), atol=ATOL, rtol=RTOL)
    keep = torch.from_numpy(~ambiguous)
    assert int(keep.sum()) > n - 5
    assert torch.equal(out["terminated"][keep], torch.from_numpy(gym_term)[keep])
    assert torch.equal(out["done"], out["terminated"])
    assert not out["truncated"].any()
    torch.testing.assert_close(out["reward"], torch.ones(n))
    # the near-threshold blocks really exercise both outcomes of each threshold
    x_block, theta_block = gym_term[n // 3 : 2 * (n // 3)], gym_term[2 * (n // 3) :]
    assert 0.1 < x_block.mean() < 0.9 and 0.1 < theta_block.mean() < 0.9


def test_cartpole_trajectory_matches_gymnasium():
    """Whole episodes from a reset state, with gymnasium stepping its own (float64) state alongside."""
    classic = _gym_classic()
    env = CartPoleEnv(seed=1, categorical_action_encoding=True)
    gen = torch.Generator().manual_seed(1)
    gym_env = classic.CartPoleEnv()
    gym_env.reset(seed=0)
    for _ in range(3):
        td = env.reset()
        gym_env.unwrapped.state = td["observation"].double().numpy()
        gym_env.unwrapped.steps_beyond_terminated = None
        for t in range(500):
            td["action"] = torch.randint(0, 2, (), generator=gen)
            td = env.step(td)
            obs, reward, terminated, _, _ = gym_env.step(int(td["action"]))
            torch.testing.assert_close(td["next", "observation"], torch.from_numpy(obs), atol=1e-4, rtol=1e-4)
            assert bool(td["next", "terminated"]) == terminated and float(td["next", "reward"]) == reward
            if terminated:
                break
            td = td["next"]
        assert terminated and t > 3


@pytest.mark.parametrize("batch", [[], [3]])
def test_cartpole_action_spec_equals_gymenv(batch):
    """CartPoleEnv's action spec is GymEnv("CartPole-v1")'s, for each encoding (the real gymnasium)."""
    pytest.importorskip("gymnasium")
    from rl_envs import GymEnv

    kwargs = {"num_envs": batch[0]} if batch else {}
    for cat_kwargs in ({}, {"categorical_action_encoding": False}, {"categorical_action_encoding": True}):
        native = CartPoleEnv(batch_size=batch, **cat_kwargs)
        gym_env = GymEnv("CartPole-v1", **kwargs, **cat_kwargs)
        try:
            ours, theirs = native.action_spec, gym_env.action_spec
            assert type(ours) is type(theirs), cat_kwargs
            assert (ours.shape, ours.dtype, ours.device) == (theirs.shape, theirs.dtype, theirs.device), cat_kwargs
            assert ours.space == theirs.space and ours.n == theirs.n == 2, cat_kwargs
            assert ours == theirs and native.full_action_spec == gym_env.full_action_spec, cat_kwargs
            assert native.observation_spec == gym_env.observation_spec
            # each env accepts the other's random actions
            assert ours.is_in(theirs.rand()) and theirs.is_in(ours.rand())
        finally:
            gym_env.close()
    assert type(CartPoleEnv(batch_size=batch).action_spec) is OneHot  # the default is GymEnv's one-hot


@pytest.mark.parametrize("batch", [[], [3]])
def test_cartpole_one_hot_and_categorical_trajectories_are_equal(batch):
    """Same seed, same action sequence: one-hot and index actions give the same rollouts (with auto-resets)."""
    T = 150
    indices = torch.randint(0, 2, (*batch, T), generator=torch.Generator().manual_seed(4))

    def table(categorical):
        t = [0]

        def policy(td):
            a = indices[..., t[0]]
            td["action"] = a if categorical else torch.nn.functional.one_hot(a, 2)
            t[0] += 1
            return td

        return policy

    one_hot = CartPoleEnv(batch_size=batch, seed=5).rollout(T, table(False), break_when_any_done=False)
    index = CartPoleEnv(batch_size=batch, seed=5, categorical_action_encoding=True).rollout(
        T, table(True), break_when_any_done=False
    )
    assert one_hot["action"].shape == (*batch, T, 2) and index["action"].shape == (*batch, T)
    assert torch.equal(one_hot["action"].argmax(-1), index["action"]) and torch.equal(index["action"], indices)
    assert bool(index["next", "done"].sum() >= 2)  # episodes ended and restarted inside the rollout
    assert (one_hot.exclude("action") == index.exclude("action")).all()


def _batched_pendulum_step(n: int, seed: int):
    """One step of a PendulumEnv with batch [n] from random states/torques; returns (th, thdot, torque, next td)."""
    th, thdot, torque = _pendulum_states(n, torch.Generator().manual_seed(seed))
    env = PendulumEnv(batch_size=[n])
    td = env.reset()
    td.update({"th": th, "thdot": thdot, "action": torque.unsqueeze(-1)})
    return th, thdot, torque, env.step(td)["next"]


def test_pendulum_matches_gymnasium_step_for_step():
    classic = _gym_classic()
    n = 1000
    th, thdot, torque, out = _batched_pendulum_step(n, seed=0)

    gym_env = classic.PendulumEnv()
    gym_env.reset(seed=0)
    gym_state, gym_obs, gym_rew = np.empty((n, 2)), np.empty((n, 3), dtype=np.float32), np.empty(n)
    for i in range(n):
        gym_env.state = np.array([float(th[i]), float(thdot[i])])
        obs, reward, terminated, truncated, _ = gym_env.step(torque[i : i + 1].double().numpy())
        assert terminated is False and truncated is False
        gym_state[i], gym_obs[i], gym_rew[i] = gym_env.state, obs, reward
    gym_state = torch.from_numpy(gym_state).float()
    torch.testing.assert_close(out["th"], gym_state[:, 0], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(out["thdot"], gym_state[:, 1], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(out["observation"], torch.from_numpy(gym_obs), atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(out["reward"], torch.from_numpy(gym_rew).float(), atol=1e-4, rtol=RTOL)
    assert not out["done"].any() and not out["terminated"].any() and not out["truncated"].any()
    # the samples did reach the speed clip and the wrap-around of the angle cost
    assert (out["thdot"].abs() == 8.0).any() and (th.abs() > math.pi).sum() > n // 4


def test_pendulum_params_match_gymnasium():
    """Per-env parameters (stateless path) against gymnasium envs built with the same gravity."""
    classic = _gym_classic()
    gen = torch.Generator().manual_seed(1)
    n = 6
    g = torch.tensor([0.0, 1.62, 3.7, 9.81, 10.0, 24.8])
    th, thdot, torque = _pendulum_states(n, gen)
    env = PendulumEnv()
    params = env.gen_params(batch_size=[n])
    params["params", "g"] = g.clone()
    td = env.reset(params)
    td.update({"th": th, "thdot": thdot, "action": torque.unsqueeze(-1)})
    out = env.step(td)["next"]
    for i in range(n):
        gym_env = classic.PendulumEnv(g=float(g[i]))
        gym_env.reset(seed=0)
        gym_env.state = np.array([float(th[i]), float(thdot[i])])
        obs, reward, *_ = gym_env.step(torque[i : i + 1].double().numpy())
        torch.testing.assert_close(out["observation"][i], torch.from_numpy(obs), atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(out["reward"][i], torch.tensor(reward, dtype=torch.float32), atol=1e-4, rtol=RTOL)


# ----------------------------------------------------------------------------- batching
@pytest.mark.parametrize("categorical", [False, True])
def test_cartpole_batched_equals_single(categorical):
    gen = torch.Generator().manual_seed(2)
    n = 16
    states, actions = _cartpole_states(n, gen), torch.randint(0, 2, (n,), generator=gen)
    actions = _encode(actions, categorical)
    batched = CartPoleEnv(batch_size=[n], categorical_action_encoding=categorical).step(
        TensorDict(observation=states, action=actions, batch_size=[n])
    )["next"]
    single = CartPoleEnv(categorical_action_encoding=categorical)
    for i in range(n):
        out = single.step(TensorDict(observation=states[i], action=actions[i]))["next"]
        assert out.batch_size == torch.Size([]) and out["reward"].shape == torch.Size([])
        torch.testing.assert_close(out["observation"], batched["observation"][i], atol=1e-6, rtol=1e-6)
        for key in ("reward", "done", "terminated", "truncated"):
            assert out[key].shape == torch.Size([]) and out[key] == batched[key][i], key


def test_pendulum_batched_equals_single():
    n = 16
    th, thdot, torque, batched = _batched_pendulum_step(n, seed=3)
    single = PendulumEnv()
    for i in range(n):
        td = single.reset()
        td.update({"th": th[i], "thdot": thdot[i], "action": torque[i : i + 1]})
        out = single.step(td)["next"]
        assert out["reward"].shape == torch.Size([]) and out["observation"].shape == torch.Size([3])
        for key in ("th", "thdot", "observation", "reward"):
            torch.testing.assert_close(out[key], batched[key][i], atol=1e-6, rtol=1e-6)


def test_cartpole_is_batch_locked():
    env = CartPoleEnv(batch_size=[3])
    assert env.batch_locked
    with pytest.raises(RuntimeError, match="shape==env.batch_size, got batch_size \\[2\\]"):
        env.reset(TensorDict(batch_size=[2]))
    with pytest.raises(RuntimeError, match="shape==env.batch_size, got batch_size \\[\\]"):
        env.step(TensorDict(observation=torch.zeros(4), action=torch.zeros((), dtype=torch.int64)))
    with pytest.raises(ValueError, match="action"):
        env.step(TensorDict(observation=torch.zeros(3, 4), action=torch.zeros(3), batch_size=[3]))
    with pytest.raises(TypeError, match="low"):
        env.reset(low=-0.1)


# ----------------------------------------------------------------------------- resets and seeding
def test_cartpole_reset_distribution():
    env = CartPoleEnv(batch_size=[2000], seed=0)
    td = env.reset()
    obs = td["observation"]
    assert obs.shape == (2000, 4) and obs.dtype == torch.float32
    assert bool((obs.abs() < 0.05).all())
    assert bool((obs.amin(0) < -0.045).all() and (obs.amax(0) > 0.045).all())  # fills the range, per coordinate
    assert abs(float(obs.mean())) < 0.005
    for key in ("done", "terminated", "truncated"):
        assert td[key].shape == (2000,) and td[key].dtype == torch.bool and not td[key].any()
    single = CartPoleEnv(seed=0).reset()
    assert single["observation"].shape == (4,) and single["done"].shape == ()


def test_pendulum_reset_distribution():
    td = PendulumEnv(batch_size=[2000], seed=0).reset()
    th, thdot = td["th"], td["thdot"]
    assert bool((th.abs() <= math.pi).all() and (thdot.abs() <= 1.0).all())
    assert th.min() < -3.0 and th.max() > 3.0 and thdot.min() < -0.95 and thdot.max() > 0.95
    torch.testing.assert_close(td["observation"], torch.stack([th.cos(), th.sin(), thdot], -1))


def _cartpole_policy(td):
    """A balancing controller; one-hot actions (CartPoleEnv's default encoding)."""
    obs = td["observation"]
    push_right = ((obs[..., 2] * 10 + obs[..., 3] * 2 + obs[..., 0] * 0.1 + obs[..., 1] * 0.5) > 0).long()
    td["action"] = torch.nn.functional.one_hot(push_right, 2)
    return td


def _pendulum_policy(td):
    td["action"] = (-0.5 * td["thdot"]).clamp(-2, 2).unsqueeze(-1)
    return td


@pytest.mark.parametrize("make, policy", [(CartPoleEnv, _cartpole_policy), (PendulumEnv, _pendulum_policy)])
def test_seeding_reproducible(make, policy):
    a = make(batch_size=[3], seed=7).rollout(20, policy, break_when_any_done=False)
    b = make(batch_size=[3], seed=7).rollout(20, policy, break_when_any_done=False)
    assert (a == b).all()
    env = make(batch_size=[3], seed=8)
    c = env.rollout(20, policy, break_when_any_done=False)
    assert not torch.equal(a["observation"], c["observation"])
    next_seed = env.set_seed(7)
    assert (env.rollout(20, policy, break_when_any_done=False) == a).all()
    assert next_seed == 8 == make().set_seed(7)  # one generator: seed + 1 (tdict.seeding)
    assert env.set_seed(7, static_seed=True) == 7 and env.set_seed(None) is None
    # seeding consecutive envs with the returned seeds gives different episodes
    other = make(batch_size=[3])
    other.set_seed(next_seed)
    assert not torch.equal(other.reset()["observation"], make(batch_size=[3], seed=7).reset()["observation"])


@pytest.mark.parametrize(
    "make, policy, keys",
    [
        (CartPoleEnv, _cartpole_policy, ["observation"]),
        (PendulumEnv, _pendulum_policy, ["th", "thdot", "observation"]),
    ],
)
def test_partial_reset(make, policy, keys):
    env = make(batch_size=[4], seed=0)
    td = env.reset()
    for _ in range(5):
        td = env.step(policy(td))["next"]
    before = td.clone()
    mask = torch.tensor([True, False, True, False])
    td["_reset"] = mask
    td["done"] = mask.clone()
    out = env.reset(td)
    assert out is td and "_reset" not in out.keys()
    for key in keys:
        assert torch.equal(out[key][~mask], before[key][~mask]), key
        assert not torch.equal(out[key][mask], before[key][mask]), key
    assert not out["done"].any()
    if make is CartPoleEnv:
        assert bool((out["observation"][mask].abs() < 0.05).all())
    else:
        assert bool((out["thdot"][mask].abs() <= 1.0).all())


# ----------------------------------------------------------------------------- stateless pendulum
def test_pendulum_stateless_params_rollout():
    n, t = 4, 12
    g = torch.tensor([0.0, 3.7, 9.81, 20.0])
    env = PendulumEnv(seed=0)
    params = env.gen_params(batch_size=[n], g=5.0)
    assert params["params", "g"].tolist() == [5.0] * n and torch.equal(params["params", "dt"], torch.full([n], 0.05))
    params["params", "g"] = g.clone()
    rollout = env.rollout(t, _pendulum_policy, tensordict=params)
    assert rollout.batch_size == (n, t) and rollout["next", "reward"].shape == (n, t)
    assert torch.equal(rollout["params", "g"], g.unsqueeze(-1).expand(n, t))
    # reference: one single env per parameter set, replaying the same start and actions
    for i in range(n):
        single = PendulumEnv(g=float(g[i]))
        td = single.reset()
        td.update({"th": rollout["th"][i, 0], "thdot": rollout["thdot"][i, 0]})
        for s in range(t):
            td["action"] = rollout["action"][i, s]
            td = single.step(td)
            for key in ("th", "thdot", "observation", "reward"):
                torch.testing.assert_close(td["next", key], rollout["next", key][i, s], atol=1e-5, rtol=1e-5)
            td = td["next"]
    # the parameters change the dynamics: default gravity from the same start gives other states
    default = PendulumEnv()
    td = default.reset()
    td.update({"th": rollout["th"][0, 0], "thdot": rollout["thdot"][0, 0], "action": rollout["action"][0, 0]})
    assert not torch.allclose(default.step(td)["next", "thdot"], rollout["next", "thdot"][0, 0])


# ----------------------------------------------------------------------------- specs
@pytest.mark.parametrize("make, policy", [(CartPoleEnv, _cartpole_policy), (PendulumEnv, _pendulum_policy)])
@pytest.mark.parametrize("batch", [[], [5]])
def test_rollout_values_inside_specs(make, policy, batch):
    env = make(batch_size=batch, seed=0)
    rollout = env.rollout(60, policy if make is PendulumEnv else None, break_when_any_done=False)
    assert rollout.batch_size == (*batch, 60)
    done_keys = env.done_keys
    assert sorted(done_keys) == ["done", "terminated", "truncated"]
    for step in rollout.unbind(len(batch)):
        assert step.batch_size == tuple(batch)
        env.observation_spec.assert_is_in(step)
        env.observation_spec.assert_is_in(step["next"])
        env.state_spec.assert_is_in(step)  # CartPole: empty (the observation is the state)
        env.full_action_spec.assert_is_in(step)
        assert env.action_spec.is_in(step["action"])
        assert env.reward_spec.is_in(step["next", "reward"])
        env.full_done_spec.assert_is_in(step["next"])
        env.full_done_spec.assert_is_in(step)
    if make is CartPoleEnv:
        assert type(env.action_spec) is OneHot and env.action_spec.n == 2 and env.action_spec.dtype == torch.int64
        assert env.action_spec.shape == (*batch, 2) and env.reward_spec.dtype == torch.float32
        assert bool((rollout["action"].sum(-1) == 1).all())
        assert env.observation_spec["observation"].dtype == torch.float32
        assert rollout["next", "done"].any()  # random actions fail quickly: terminating states are in the spec too
    fake = env.fake_tensordict()
    assert set(fake.keys(True, True)) >= {"action", ("next", "reward"), ("next", "done"), "observation"}


# ----------------------------------------------------------------------------- rollouts
def test_quick_example(capsys):
    env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=200))
    policy = TensorDictModule(
        nn.Sequential(nn.LazyLinear(64), nn.Tanh(), nn.Linear(64, 1), nn.Tanh()),
        in_keys=["observation"],
        out_keys=["action"],
    )
    rollout = env.rollout(max_steps=32, policy=policy)
    print(rollout.batch_size)
    print(rollout["next", "reward"].shape)  # noqa: E702
    assert capsys.readouterr().out == "torch.Size([32])\ntorch.Size([32])\n"


def test_cartpole_rollout_stops_at_termination():
    env = CartPoleEnv(seed=0)
    rollout = env.rollout(500)
    steps = rollout.batch_size[0]
    assert 5 < steps < 500
    done = rollout["next", "done"]
    assert bool(done[-1]) and not done[:-1].any() and bool(rollout["next", "terminated"][-1])
    last = rollout["next", "observation"][-1]
    assert abs(float(last[0])) > 2.4 or abs(float(last[2])) > THETA_LIMIT
    inside = rollout["next", "observation"][:-1]
    assert bool((inside[:, 0].abs() <= 2.4).all() and (inside[:, 2].abs() <= THETA_LIMIT).all())
    # consecutive steps are chained: the next observation becomes the following root
    assert torch.equal(rollout["observation"][1:], rollout["next", "observation"][:-1])


@pytest.mark.parametrize("batch", [[], [3]])
def test_cartpole_rollout_autoresets(batch):
    env = CartPoleEnv(batch_size=batch, seed=0)
    rollout = env.rollout(200, break_when_any_done=False)
    assert rollout.batch_size == (*batch, 200)
    obs, next_obs = rollout["observation"].reshape(-1, 200, 4), rollout["next", "observation"].reshape(-1, 200, 4)
    done = rollout["next", "done"].reshape(-1, 200)
    root_done = rollout["done"].reshape(-1, 200)
    assert done.sum() >= 3
    for b, t in done[:, :-1].nonzero().tolist():
        fresh = obs[b, t + 1]
        assert bool((fresh.abs() < 0.05).all()) and not root_done[b, t + 1]
        assert not torch.equal(fresh, next_obs[b, t])
    # where no episode ended, the next root is the previous next observation
    cont = ~done[:, :-1]
    assert torch.equal(obs[:, 1:][cont], next_obs[:, :-1][cont])


def test_cartpole_time_limit_with_step_counter():
    env = TransformedEnv(CartPoleEnv(seed=0), StepCounter(max_steps=500))
    rollout = env.rollout(600, _cartpole_policy)
    assert rollout.batch_size == (500,)
    assert bool(rollout["next", "truncated"][-1]) and bool(rollout["next", "done"][-1])
    assert not rollout["next", "terminated"].any() and rollout["next", "step_count"][-1] == 500


def test_cartpole_step_leaves_its_input_alone_and_follows_to():
    env = CartPoleEnv(batch_size=[2], seed=0)
    td = env.reset()
    td["action"] = torch.tensor([[1, 0], [0, 1]])
    before = td.clone()
    out = env.step(td)
    assert torch.equal(out["observation"], before["observation"]) and torch.equal(out["action"], before["action"])
    # pushing left vs right from the same start: the cart accelerates in opposite directions
    same = TensorDict(observation=torch.zeros(2, 4), action=torch.tensor([[1, 0], [0, 1]]), batch_size=[2])
    x_dot = env.step(same)["next", "observation"][:, 1]
    temp = 10 / 1.1
    thetaacc = -temp / (0.5 * (4 / 3 - 0.1 / 1.1))
    xacc = temp - 0.05 * thetaacc / 1.1
    torch.testing.assert_close(x_dot, torch.tensor([-0.02 * xacc, 0.02 * xacc]))
    a, b = CartPoleEnv(seed=3).to("cpu"), CartPoleEnv(seed=3).to("cpu")
    rollout = a.rollout(10, _cartpole_policy)
    assert a.device == torch.device("cpu") and rollout["observation"].device == torch.device("cpu")
    assert (rollout == b.rollout(10, _cartpole_policy)).all()


# ----------------------------------------------------------------------------- CartPole action checks
@pytest.mark.parametrize("actions, bad", [(torch.tensor(7), [7]), (torch.tensor([0, 7, -1, 1]), [-1, 7])])
def test_cartpole_refuses_invalid_actions_by_default(actions, bad):
    env = CartPoleEnv(batch_size=actions.shape, seed=0, categorical_action_encoding=True)
    assert env.validate_actions is True
    td = env.reset()
    before = td.clone()
    td["action"] = actions
    with pytest.raises(
        ValueError,
        match=rf"CartPoleEnv: action 'action' must be 0 \(push left\) or 1 \(push right\), got {re.escape(str(bad))}",
    ):
        env.step(td)
    assert "next" not in td.keys() and torch.equal(td["observation"], before["observation"])
    # the same check runs for rollouts and behind transforms
    with pytest.raises(ValueError, match="must be 0 .* or 1"):
        TransformedEnv(CartPoleEnv(batch_size=actions.shape, categorical_action_encoding=True), StepCounter(5)).rollout(
            3, lambda t: t.set("action", actions)
        )


# every int64 row of two entries that is not [1, 0] or [0, 1], next to valid rows
_NOT_ONE_HOT = [[1, 1], [0, 0], [2, 0], [0, 2], [-1, 2], [2, -1], [3, 1], [1, -1], [-1, 0], [-(2**63), 1], [1, 2**62]]


@pytest.mark.parametrize(
    "batch, rows, bad",
    [
        ([], [[1, 1]], [[1, 1]]),
        ([4], [[1, 0], [0, 0], [0, 1], [0, 0]], [[0, 0]]),
        ([2, 2], [[2, -1], [0, 1], [1, 0], [1, 1]], [[1, 1], [2, -1]]),
    ]
    + [([2], [[0, 1], row], [row]) for row in _NOT_ONE_HOT],
)
def test_cartpole_refuses_non_one_hot_actions_by_default(batch, rows, bad):
    env = CartPoleEnv(batch_size=batch, seed=0)
    td = env.reset()
    before = td.clone()
    td["action"] = torch.tensor(rows).reshape(*batch, 2)
    expected = rf"CartPoleEnv: action 'action' must be one-hot, \[1, 0\] \(push left\) or \[0, 1\] \(push right\), got {re.escape(str(bad))}"
    with pytest.raises(ValueError, match=expected):
        env.step(td)
    assert "next" not in td.keys() and torch.equal(td["observation"], before["observation"])
    # the valid rows pass: the check accepts exactly the two one-hot rows
    td["action"] = torch.nn.functional.one_hot(
        torch.tensor([i % 2 for i in range(max(1, math.prod(batch)))]), 2
    ).reshape(*batch, 2)
    assert env.step(td)["next", "observation"].shape == (*batch, 4)
    # index actions on a one-hot env are refused by shape before any check of the values
    with pytest.raises(ValueError, match=r"action 'action': expected shape \[3, 2\]"):
        CartPoleEnv(batch_size=[3]).step(
            TensorDict(observation=torch.zeros(3, 4), action=torch.tensor([0, 1, 1]), batch_size=[3])
        )


def test_cartpole_one_hot_check_agrees_with_the_spec():
    """The fused check refuses exactly what OneHot(2).is_in refuses, over a grid of int64 rows."""
    values = torch.tensor([-(2**63), -3, -2, -1, 0, 1, 2, 3, 2**62, 2**63 - 1])
    rows = torch.cartesian_prod(values, values)  # [100, 2]
    env = CartPoleEnv(batch_size=[1], seed=0)
    spec = OneHot(2, dtype=torch.int64)
    for row in rows:
        td = env.reset()
        td["action"] = row.unsqueeze(0)
        if spec.is_in(row):
            env.step(td)
        else:
            with pytest.raises(ValueError, match="must be one-hot"):
                env.step(td)


def test_cartpole_categorical_action_encoding_argument():
    with pytest.raises(TypeError, match=r"categorical_action_encoding must be a bool, got 1 \(int\)"):
        CartPoleEnv(categorical_action_encoding=1)
    env = CartPoleEnv(batch_size=[3], categorical_action_encoding=True)
    assert env.categorical_action_encoding is True and env.action_spec == Categorical(2, shape=(3,))
    assert CartPoleEnv(batch_size=[3]).action_spec == OneHot(2, shape=(3, 2), dtype=torch.int64)


def test_cartpole_validate_actions_argument_and_unchecked_rule():
    assert CartPoleEnv(validate_actions=True).validate_actions is True
    env = CartPoleEnv(batch_size=[3], validate_actions=False, categorical_action_encoding=True)
    start = TensorDict(observation=torch.zeros(3, 4), action=torch.tensor([0, 7, 1]), batch_size=[3])
    x_dot = env.step(start)["next", "observation"][:, 1]
    # Gymnasium's rule: 1 pushes right, anything else left; the action never scales the force
    temp = 10 / 1.1
    xacc = temp - 0.05 * (-temp / (0.5 * (4 / 3 - 0.1 / 1.1))) / 1.1
    torch.testing.assert_close(x_dot, torch.tensor([-0.02 * xacc, -0.02 * xacc, 0.02 * xacc]))
    # one-hot rows are decoded with argmax (the first on ties), as GymEnv decodes them
    env = CartPoleEnv(batch_size=[5], validate_actions=False)
    rows = torch.tensor([[1, 0], [0, 1], [1, 1], [0, 0], [2, 5]])
    start = TensorDict(observation=torch.zeros(5, 4), action=rows, batch_size=[5])
    x_dot = env.step(start)["next", "observation"][:, 1]
    torch.testing.assert_close(x_dot, 0.02 * xacc * torch.tensor([-1.0, 1.0, -1.0, -1.0, 1.0]))


def test_cartpole_action_check_reaches_batched_workers():
    from rl_envs.batched import ParallelEnv, SerialEnv

    bad = torch.tensor([1, 7])
    cat = {"categorical_action_encoding": True}
    with pytest.raises(ValueError, match=r"CartPoleEnv: action 'action' must be 0 .* got \[7\]"):
        SerialEnv(2, CartPoleEnv, cat).rollout(3, lambda t: t.set("action", bad))
    with pytest.raises(ValueError, match=r"CartPoleEnv: action 'action' must be one-hot.* got \[\[1, 1\]\]"):
        SerialEnv(2, CartPoleEnv).rollout(3, lambda t: t.set("action", torch.tensor([[1, 0], [1, 1]])))
    env = ParallelEnv(2, CartPoleEnv, cat, mp_start_method="fork")
    try:
        with pytest.raises(
            RuntimeError, match=r"worker 1 .* raised:[\s\S]*CartPoleEnv: action 'action' must be 0 .* got \[7\]"
        ):
            env.rollout(3, lambda t: t.set("action", bad))
    finally:
        env.close()
