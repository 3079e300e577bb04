"""MultiStepTransform and RandomCropTensorDict against loop references; rl_envs transforms as buffer transforms."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict

from rl_replay import LazyTensorStorage, MultiStepTransform, RandomCropTensorDict, ReplayBuffer
from rl_replay.transforms import n_step_returns

GAMMA = 0.9


def make_traj(batch, T, seed=0, p_done=0.15, feat=()):
    g = torch.Generator().manual_seed(seed)
    shape = (*batch, T)
    t = torch.arange(T, dtype=torch.float32).expand(shape)
    return TensorDict(
        {
            "obs": t.clone(),
            "step": torch.arange(T).expand(shape).clone(),
            "next": {
                "obs": t + 1,
                "reward": torch.randn(*shape, *feat, generator=g),
                "done": torch.rand(shape, generator=g) < p_done,
                "truncated": torch.zeros(shape, dtype=torch.bool),
            },
        },
        batch_size=shape,
    )


def loop_reference(reward, done, n, gamma):
    """Per-step n-step return, window length, source step and nonterminal for one 1-D trajectory."""
    T = len(done)
    out = []
    for t in range(T):
        g, k = 0.0, 0
        for i in range(n):
            if t + i >= T:
                break
            g = g + gamma**i * reward[t + i]
            k += 1
            if done[t + i]:
                break
        out.append((g, k, t + k - 1, not bool(done[t + k - 1])))
    return out


def check_against_loop(out, data, n, gamma, rows=None):
    flat_in = data.reshape(-1, data.batch_size[-1])
    flat_out = out.reshape(-1, out.batch_size[-1])
    for b in range(flat_in.batch_size[0]):
        reward = flat_in["next", "reward"][b]
        ref = loop_reference(reward, flat_in["next", "done"][b].tolist(), n, gamma)
        T_out = flat_out.batch_size[-1]
        for t in range(T_out):
            g, k, src, nonterm = ref[t]
            torch.testing.assert_close(flat_out["next", "reward"][b, t], torch.as_tensor(g, dtype=reward.dtype))
            assert int(flat_out["steps_to_next_obs"][b, t]) == k
            assert float(flat_out["next", "obs"][b, t]) == float(flat_in["next", "obs"][b, src])
            assert bool(flat_out["nonterminal"][b, t]) == nonterm
            assert float(flat_out["gamma"][b, t]) == pytest.approx(gamma**k)
            # done keys untouched, one-step reward kept
            assert bool(flat_out["next", "done"][b, t]) == bool(flat_in["next", "done"][b, t])
            torch.testing.assert_close(flat_out["next", "original_reward"][b, t], reward[t])


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("batch,feat", [((), ()), ((3,), ()), ((2,), (2,))])
def test_n_step_returns_matches_loop(n, batch, feat):
    data = make_traj(batch, 17, seed=n, feat=feat)
    out = n_step_returns(data, n_steps=n, gamma=GAMMA)
    assert out.batch_size == data.batch_size
    check_against_loop(out, data, n, GAMMA)


def test_trailing_singleton_done_accepted_and_bad_shape_rejected():
    data = make_traj((), 8)
    data2 = data.clone()
    data2.set(("next", "done"), data["next", "done"].unsqueeze(-1))
    out = n_step_returns(data2, n_steps=3, gamma=GAMMA)
    torch.testing.assert_close(out["next", "reward"], n_step_returns(data, n_steps=3, gamma=GAMMA)["next", "reward"])
    data3 = data.clone()
    data3.set(("next", "done"), torch.zeros(8, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="done"):
        MultiStepTransform(2, GAMMA).inv(data3)


@pytest.mark.parametrize("n", [1, 3])
def test_streaming_inv_equals_whole_trajectory(n):
    full = make_traj((2,), 60, seed=3)
    chunks = [5, 1, 13, 2, 20, 19]
    t = MultiStepTransform(n_steps=n, gamma=GAMMA)
    outs, start = [], 0
    for c in chunks:
        o = t.inv(full[..., start : start + c])
        start += c
        if o is not None:
            outs.append(o)
    got = torch.cat(outs, -1)
    assert got.batch_size == (2, 60 - n)  # the last n steps wait for more data
    ref = n_step_returns(full, n_steps=n, gamma=GAMMA)[..., : 60 - n]
    for key in [("next", "reward"), ("next", "obs"), "steps_to_next_obs", "nonterminal", "gamma", "obs"]:
        torch.testing.assert_close(got[key], ref[key])
    check_against_loop(got, full, n, GAMMA)


def test_state_dict_carries_the_held_steps_to_a_new_transform():
    """A checkpoint of the transform (plain tensors, loadable with weights_only) resumes the stream:
    the restored transform's next write gives what the original's would."""
    import io

    full = make_traj((2,), 30, seed=4, feat=(3,))
    t = MultiStepTransform(n_steps=3, gamma=GAMMA)
    assert t.state_dict() == {}
    t.inv(full[..., :17])
    buf = io.BytesIO()
    torch.save(t.state_dict(), buf)
    buf.seek(0)
    restored = MultiStepTransform(n_steps=3, gamma=GAMMA)
    restored.load_state_dict(torch.load(buf, weights_only=True))
    expected, got = t.inv(full[..., 17:]), restored.inv(full[..., 17:])
    assert got.batch_size == expected.batch_size == (2, 13)
    for key in [("next", "reward"), ("next", "obs"), "steps_to_next_obs", "obs"]:
        torch.testing.assert_close(got[key], expected[key])
    dotted = MultiStepTransform(n_steps=2, gamma=GAMMA)  # a key with a dot comes back as that key
    dotted.inv(full[..., :5].rename_key_("obs", "obs.raw"))
    again = MultiStepTransform(n_steps=2, gamma=GAMMA)
    again.load_state_dict(dotted.state_dict())
    assert again.state_dict()["held"].keys() == dotted.state_dict()["held"].keys()
    assert "obs.raw" in again.state_dict()["held"]
    restored.load_state_dict({})
    assert restored.inv(full[..., :2]) is None  # nothing held any more
    with pytest.raises(ValueError, match="held"):
        restored.load_state_dict({"held": {}, "batch_size": [2, 3]})


def test_short_first_write_returns_none_then_catches_up():
    full = make_traj((), 10, seed=5)
    t = MultiStepTransform(n_steps=3, gamma=GAMMA)
    assert t.inv(full[:2]) is None
    out = t.inv(full[2:])
    assert out.batch_size == (7,)
    torch.testing.assert_close(
        out["next", "reward"], n_step_returns(full, n_steps=3, gamma=GAMMA)["next", "reward"][:7]
    )


def test_multistep_in_buffer_across_extends():
    full = make_traj((), 40, seed=7)
    rb = ReplayBuffer(storage=LazyTensorStorage(100), transform=MultiStepTransform(n_steps=3, gamma=GAMMA))
    for a, b in [(0, 10), (10, 25), (25, 40)]:
        rb.extend(full[a:b])
    assert len(rb) == 37
    stored = rb[:37]
    check_against_loop(stored, full, 3, GAMMA)
    sample = rb.sample(16)
    assert (sample["next", "obs"] - sample["obs"] == sample["steps_to_next_obs"].float()).all()


def test_multistep_validation():
    with pytest.raises(ValueError, match="n_steps"):
        MultiStepTransform(0, GAMMA)
    with pytest.raises(KeyError, match="done"):
        MultiStepTransform(2, GAMMA).inv(TensorDict(obs=torch.zeros(5), batch_size=[5]))
    t = MultiStepTransform(2, GAMMA)
    t.inv(make_traj((2,), 5))
    with pytest.raises(ValueError, match="leading dims"):
        t.inv(make_traj((3,), 5))
    sample = TensorDict(x=torch.zeros(3), batch_size=[3])
    assert t(sample) is sample  # identity at sample time


def test_mask_key_clears_nonterminal():
    data = make_traj((), 12, p_done=0.0)
    data.set("mask", torch.arange(12) < 8)
    out = n_step_returns(data, n_steps=2, gamma=GAMMA)
    assert out["nonterminal"].tolist() == [True] * 8 + [False] * 4


# ---------------------------------------------------------------------- RandomCropTensorDict
def test_random_crop_windows_and_uniform_starts():
    T, L = 9, 4
    td = TensorDict(t=torch.arange(T).expand(2000, T).clone(), batch_size=[2000, T])
    out = RandomCropTensorDict(L, generator=torch.Generator().manual_seed(0))(td)
    assert out.batch_size == (2000, L)
    assert (out["t"] - out["t"][:, :1] == torch.arange(L)).all()
    starts = out["t"][:, 0]
    counts = torch.bincount(starts, minlength=T - L + 1)
    assert counts.numel() == T - L + 1  # never past the last valid start
    assert (counts > 2000 / (T - L + 1) * 0.7).all()  # every valid start, incl. the last one, appears


def test_random_crop_other_dim_and_mask():
    td = TensorDict(t=torch.arange(10).view(10, 1).expand(10, 3).clone(), batch_size=[10, 3])
    out = RandomCropTensorDict(4, sample_dim=0, generator=torch.Generator().manual_seed(1))(td)
    assert out.batch_size == (4, 3)
    assert (out["t"].diff(dim=0) == 1).all()
    lengths = torch.tensor([5, 8, 6])
    m = TensorDict(t=torch.arange(8).expand(3, 8).clone(), mask=torch.arange(8) < lengths[:, None], batch_size=[3, 8])
    for seed in range(20):
        out = RandomCropTensorDict(5, mask_key="mask", generator=torch.Generator().manual_seed(seed))(m)
        assert (out["mask"]).all()  # crops stay within the valid steps
        assert (out["t"][:, -1] < lengths).all()
    with pytest.raises(ValueError, match="sub_seq_len"):
        RandomCropTensorDict(9)(m)
    with pytest.raises(ValueError, match="valid steps"):
        RandomCropTensorDict(6, mask_key="mask")(m)


def test_random_crop_as_buffer_transform():
    trajs = TensorDict(t=torch.arange(12).expand(5, 12).clone(), batch_size=[5, 12])
    rb = ReplayBuffer(storage=LazyTensorStorage(5), batch_size=3, transform=RandomCropTensorDict(4))
    rb.extend(trajs)
    batch = rb.sample()
    assert batch.batch_size == (3, 4)
    assert (batch["t"].diff(dim=-1) == 1).all()


# ---------------------------------------------------------------------- rl_envs transforms through duck typing
rl_envs = pytest.importorskip("rl_envs")


def test_rl_envs_reward_scaling_at_sample_time():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(50),
        batch_size=20,
        transform=rl_envs.RewardScaling(loc=1.0, scale=2.0, in_keys=[("next", "reward")]),
    )
    data = make_traj((), 30, seed=2)
    rb.extend(data)
    batch, info = rb.sample(return_info=True)
    torch.testing.assert_close(batch["next", "reward"], data["next", "reward"][info["index"]] * 2.0 + 1.0)


def test_rl_envs_reward2go_on_extend():
    data = make_traj((), 25, seed=4, p_done=0.2)
    data["next", "done"][-1] = True
    rb = ReplayBuffer(storage=LazyTensorStorage(50), transform=rl_envs.Reward2GoTransform(gamma=GAMMA))
    rb.extend(data)
    reward, done = data["next", "reward"].tolist(), data["next", "done"].tolist()
    ref, running = [0.0] * 25, 0.0
    for t in range(24, -1, -1):
        running = reward[t] + (0.0 if done[t] else GAMMA * running)
        ref[t] = running
    torch.testing.assert_close(rb[:25]["next", "reward"], torch.tensor(ref))


def test_rl_envs_catframes_on_sampled_trajectories():
    T = 6
    done = torch.tensor([False, False, True, False, False, False])
    trajs = TensorDict(
        {
            "obs": torch.arange(T, dtype=torch.float32).view(1, T, 1).expand(4, T, 1).clone(),
            "next": {"done": done.expand(4, T).clone()},
        },
        batch_size=[4, T],
    )
    rb = ReplayBuffer(
        storage=LazyTensorStorage(4), batch_size=2, transform=rl_envs.CatFrames(N=2, dim=-1, in_keys=["obs"])
    )
    rb.extend(trajs)
    batch = rb.sample()
    # loop reference: frame t-1 within the episode, the first frame repeated at episode starts
    ref = []
    for t in range(T):
        prev = t - 1 if t > 0 and not bool(done[t - 1]) else t
        ref.append([float(prev), float(t)])
    assert batch["obs"].tolist() == [ref, ref]
