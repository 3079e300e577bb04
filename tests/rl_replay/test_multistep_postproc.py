"""rl_replay.MultiStep: TorchRL's ``torchrl.data.postprocs.MultiStep`` (n-step returns on a collected batch).

Checked against a per-step loop, against literal values read from TorchRL 0.14.1's ``MultiStep`` on the
same small batch (``TORCHRL_*`` below), and against TorchRL itself where it is importable.
"""

from __future__ import annotations

import math

import pytest
import torch
from tdict import TensorDict
from tdict.validation import ArgumentTypeError

import rl_replay
from rl_replay import MultiStep


def make_batch(obs, next_obs, reward, done, *, trailing=False, lib_td=TensorDict):
    shape = list(done.shape)
    r = reward.unsqueeze(-1) if trailing else reward
    d = done.unsqueeze(-1) if trailing else done
    nxt = lib_td(observation=next_obs, reward=r, done=d, terminated=d.clone(), batch_size=shape)
    return lib_td(observation=obs, next=nxt, batch_size=shape)


def loop_reference(next_obs, reward, done, gamma, n_steps):
    """Per-step n-step values, written as plainly as possible (time is the last dim of ``done``)."""
    shape = done.shape
    rows_done = done.reshape(-1, shape[-1])
    rows_rew = reward.reshape(-1, shape[-1], *reward.shape[done.ndim :])
    rows_obs = next_obs.reshape(-1, shape[-1], *next_obs.shape[done.ndim :])
    T = shape[-1]
    rewards, obs, steps, gammas, nonterminal = [], [], [], [], []
    for d, r, o in zip(rows_done.tolist(), rows_rew.double(), rows_obs):
        for t in range(T):
            total = torch.zeros_like(r[0])
            k = 0
            while k < n_steps:
                total = total + gamma**k * r[t + k]
                k += 1
                if d[t + k - 1] or t + k == T:  # the episode ends, or the batch does
                    break
            rewards.append(total)
            obs.append(o[t + k - 1])
            steps.append(k)
            gammas.append(gamma**k)
            nonterminal.append(not d[t + k - 1])
    return (
        torch.stack(rewards).reshape(reward.shape),
        torch.stack(obs).reshape(next_obs.shape),
        torch.tensor(steps).reshape(shape),
        torch.tensor(gammas, dtype=torch.float64).reshape(shape),
        torch.tensor(nonterminal).reshape(shape),
    )


def random_case(seed, shape, feat=()):
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(shape, generator=g) < 0.25
    obs = torch.randn(*shape, 2, generator=g)
    next_obs = torch.randn(*shape, 2, generator=g)
    reward = torch.randn(*shape, *feat, generator=g)
    return obs, next_obs, reward, done


@pytest.mark.parametrize("shape", [[1], [9], [3, 11], [2, 2, 6]])
@pytest.mark.parametrize("n_steps", [1, 2, 3, 7])
@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.0])
def test_matches_loop(shape, n_steps, gamma):
    obs, next_obs, reward, done = random_case(sum(shape) * 31 + n_steps, shape)
    batch = make_batch(obs, next_obs, reward, done)
    out = MultiStep(gamma=gamma, n_steps=n_steps)(batch)
    rew, nobs, steps, gammas, nonterminal = loop_reference(next_obs, reward, done, gamma, n_steps)
    torch.testing.assert_close(out["next", "reward"], rew.float())
    assert torch.equal(out["next", "observation"], nobs)
    assert torch.equal(out["steps_to_next_obs"], steps)
    assert out["steps_to_next_obs"].dtype == torch.int64
    torch.testing.assert_close(out["gamma"], gammas.float())
    assert out["gamma"].dtype == torch.get_default_dtype()
    assert torch.equal(out["nonterminal"], nonterminal)
    # the one-step reward is kept, the root entries and the done keys are left as they were
    assert torch.equal(out["next", "original_reward"], reward)
    assert torch.equal(out["observation"], obs)
    assert torch.equal(out["next", "done"], done)
    assert torch.equal(out["next", "terminated"], done)


@pytest.mark.parametrize("trailing", [False, True])
def test_reward_feature_dims_and_trailing_singletons(trailing):
    obs, next_obs, reward, done = random_case(5, [2, 8], feat=(3,) if not trailing else ())
    batch = make_batch(obs, next_obs, reward, done, trailing=trailing)
    out = MultiStep(0.8, 3)(batch)
    rew, nobs, steps, _, _ = loop_reference(next_obs, reward, done, 0.8, 3)
    expected = rew.float().unsqueeze(-1) if trailing else rew.float()
    torch.testing.assert_close(out["next", "reward"], expected)
    assert torch.equal(out["next", "observation"], nobs)
    assert torch.equal(out["steps_to_next_obs"], steps)
    assert out["steps_to_next_obs"].shape == (2, 8)


def test_steps_to_next_obs_at_episode_and_batch_ends():
    # episode ends at t=2 and t=4; the batch ends at t=7 without a done flag
    done = torch.tensor([False, False, True, False, True, False, False, False])
    reward = torch.ones(8)
    obs = torch.arange(8.0)
    out = MultiStep(gamma=0.5, n_steps=3)(make_batch(obs, obs + 1, reward, done))
    assert out["steps_to_next_obs"].tolist() == [3, 2, 1, 2, 1, 3, 2, 1]
    assert out["next", "observation"].tolist() == [3.0, 3.0, 3.0, 5.0, 5.0, 8.0, 8.0, 8.0]
    assert out["next", "reward"].tolist() == [1.75, 1.5, 1.0, 1.5, 1.0, 1.75, 1.5, 1.0]
    assert out["gamma"].tolist() == [0.125, 0.25, 0.5, 0.25, 0.5, 0.125, 0.25, 0.5]
    # False where the window stops at a done flag; the cut at the batch end is not terminal
    assert out["nonterminal"].tolist() == [False, False, False, False, False, True, True, True]


def test_input_left_unchanged():
    obs, next_obs, reward, done = random_case(0, [2, 6])
    batch = make_batch(obs, next_obs, reward, done)
    before = batch.clone()
    out = MultiStep(0.9, 3)(batch)
    assert out is not batch
    assert ("next", "original_reward") not in batch.keys(True)
    for key in before.keys(True, True):
        assert torch.equal(batch[key], before[key])


def test_collector_mask_sets_nonterminal_false():
    obs, next_obs, reward, done = random_case(1, [2, 6])
    done.zero_()
    batch = make_batch(obs, next_obs, reward, done)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 3:] = False
    batch.set(("collector", "mask"), mask)
    out = MultiStep(0.9, 2)(batch)
    assert torch.equal(out["nonterminal"], mask)
    assert torch.equal(out[("collector", "mask")], mask)


# Read from torchrl 0.14.1: torchrl.data.postprocs.MultiStep(0.9, 3) on the batch of test_torchrl_reference_values.
TORCHRL_REWARD = [
    [5.230000019073486, 4.699999809265137, 3.0, 13.359999656677246, 16.06999969482422, 12.300000190734863, 7.0],
    [1.0699999332427979, 2.299999952316284, 4.429999828338623, 2.6999998092651367, 3.0, 4.599999904632568, 4.0],
]
TORCHRL_NEXT_OBS = [
    [102.0, 102.0, 102.0, 105.0, 106.0, 106.0, 106.0],
    [109.0, 110.0, 111.0, 111.0, 111.0, 113.0, 113.0],
]
TORCHRL_STEPS = [[3, 2, 1, 3, 3, 2, 1], [3, 3, 3, 2, 1, 2, 1]]
TORCHRL_GAMMA = [
    [0.7289999127388, 0.809999942779541, 0.8999999761581421, 0.7289999127388, 0.7289999127388, 0.809999942779541,
     0.8999999761581421],
    [0.7289999127388, 0.7289999127388, 0.7289999127388, 0.809999942779541, 0.8999999761581421, 0.809999942779541,
     0.8999999761581421],
]  # fmt: skip


def reference_batch(lib_td=TensorDict):
    done = torch.tensor(
        [[False, False, True, False, False, False, False], [False, False, False, False, True, False, True]]
    )
    reward = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], [-1.0, 0.5, 2.0, 0.0, 3.0, 1.0, 4.0]])
    obs = torch.arange(14.0).reshape(2, 7)
    return make_batch(obs, obs + 100, reward, done, lib_td=lib_td)


def test_torchrl_reference_values():
    out = MultiStep(0.9, 3)(reference_batch())
    # the sums may differ from TorchRL's (a conv1d) in the last float32 bit
    torch.testing.assert_close(out["next", "reward"], torch.tensor(TORCHRL_REWARD), rtol=0, atol=1e-6)
    assert out["next", "observation"].tolist() == TORCHRL_NEXT_OBS
    assert out["steps_to_next_obs"].tolist() == TORCHRL_STEPS
    assert out["gamma"].tolist() == TORCHRL_GAMMA  # bit for bit
    assert out["gamma"].dtype == torch.float32


def test_matches_torchrl_live():
    TorchRLMultiStep = pytest.importorskip("torchrl.data.postprocs").MultiStep
    TorchRLTensorDict = pytest.importorskip("tensordict").TensorDict

    for seed, shape in [(0, [7]), (1, [3, 12]), (2, [2, 2, 5])]:
        obs, next_obs, reward, done = random_case(seed, shape)
        for n_steps in (1, 2, 4):
            theirs = TorchRLMultiStep(0.9, n_steps)(make_batch(obs, next_obs, reward, done, lib_td=TorchRLTensorDict))
            ours = MultiStep(0.9, n_steps)(make_batch(obs, next_obs, reward, done))
            assert {str(k) for k in ours.keys(True, True)} == {str(k) for k in theirs.keys(True, True)}
            torch.testing.assert_close(ours["next", "reward"], theirs["next", "reward"], rtol=0, atol=1e-5)
            for key in [("next", "observation"), ("next", "original_reward"), "steps_to_next_obs", "gamma"]:
                assert ours[key].dtype == theirs[key].dtype
                assert torch.equal(ours[key], theirs[key]), key
    theirs = TorchRLMultiStep(0.9, 3)(reference_batch(TorchRLTensorDict))
    assert theirs["next", "reward"].tolist() == TORCHRL_REWARD
    assert theirs["gamma"].tolist() == TORCHRL_GAMMA
    torch.testing.assert_close(MultiStep(0.9, 3).gammas, TorchRLMultiStep(0.9, 3).gammas)


@pytest.mark.parametrize("n_steps", [0, -1])
def test_bad_n_steps(n_steps):
    with pytest.raises(ValueError, match=r"MultiStep: n_steps must be a positive int"):
        MultiStep(0.9, n_steps)


@pytest.mark.parametrize("n_steps", [1.5, 2.0, "3", True])
def test_n_steps_not_an_int(n_steps):
    with pytest.raises(ArgumentTypeError, match="n_steps"):
        MultiStep(0.9, n_steps)


@pytest.mark.parametrize("gamma", [-0.1, 1.01, math.nan])
def test_bad_gamma(gamma):
    with pytest.raises(ValueError, match=r"MultiStep: gamma must be in \[0, 1\]"):
        MultiStep(gamma, 2)


@pytest.mark.parametrize("gamma", ["0.9", None, True])
def test_gamma_not_a_number(gamma):
    with pytest.raises(ArgumentTypeError, match="gamma"):
        MultiStep(gamma, 2)


def test_bad_data():
    with pytest.raises(TypeError, match="TensorDict"):
        MultiStep(0.9, 2)(torch.zeros(3))
    with pytest.raises(ValueError, match="time dim"):
        MultiStep(0.9, 2)(TensorDict(a=torch.zeros(()), batch_size=[]))
    batch = make_batch(torch.zeros(4), torch.zeros(4), torch.zeros(4), torch.zeros(4, dtype=torch.bool))
    batch["next"].batch_size = []
    batch["next"].set("done", torch.zeros(4, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="done"):
        MultiStep(0.9, 2)(batch)


def test_is_a_module_and_moves():
    module = MultiStep(0.5, 3)
    assert isinstance(module, torch.nn.Module)
    assert list(module.state_dict()) == ["gammas"]
    assert module.gammas.tolist() == [[[1.0, 0.5, 0.25, 0.125]]]
    assert "gamma=0.5, n_steps=3" in repr(module)
    assert module.to("cpu") is module
    assert module.to(torch.float64).gammas.dtype == torch.float64
    devices = ["meta"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        moved = MultiStep(0.5, 3).to(device)
        assert moved.gammas.device.type == device
    if torch.cuda.is_available():
        batch = reference_batch().to("cuda")
        out = MultiStep(0.9, 3).to("cuda")(batch)
        assert out["gamma"].device.type == "cuda"
        assert out["steps_to_next_obs"].cpu().tolist() == TORCHRL_STEPS
        torch.testing.assert_close(out["next", "reward"].cpu(), torch.tensor(TORCHRL_REWARD), rtol=0, atol=1e-5)


def test_exported():
    assert "MultiStep" in rl_replay.__all__
    assert rl_replay.MultiStep is MultiStep
    assert MultiStep.__module__ == "rl_replay.postprocs"


def test_as_collector_postproc():
    rl_collect = pytest.importorskip("rl_collect")
    rl_envs = pytest.importorskip("rl_envs")
    env = rl_envs.TransformedEnv(rl_envs.CartPoleEnv(seed=0), rl_envs.StepCounter(max_steps=6))
    collector = rl_collect.Collector(env, None, frames_per_batch=10, total_frames=10, postproc=MultiStep(0.99, 4))
    (batch,) = list(collector)
    done = batch["next", "done"].reshape(batch.batch_size)
    steps = batch["steps_to_next_obs"]
    count = batch["step_count"].reshape(batch.batch_size)
    next_count = batch["next", "step_count"].reshape(batch.batch_size)
    # the next step count is step_count + steps_to_next_obs within an episode
    assert torch.equal(next_count, count + steps)
    assert bool((steps >= 1).all()) and bool((steps <= 4).all())
    assert not bool(batch["nonterminal"][done].any())
