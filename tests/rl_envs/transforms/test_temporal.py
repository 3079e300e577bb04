"""CatFrames, TimeMaxPool, NextObservationDelta."""

import pytest
import torch
from tdict import TensorDict

from rl_envs import (
    CatFrames,
    Compose,
    NextObservationDelta,
    PendulumEnv,
    RandomTruncationTransform,
    StepCounter,
    TimeMaxPool,
    TransformedEnv,
)

ACTIONS = torch.tensor([1, 2, 3])  # with max_count=6: episodes of 6, 3 and 2 steps


def window_reference(obs, next_obs, done, N, reduce, padding="same", value=0.0):
    """Loop reference for one trajectory [T, ...]: the buffer an env keeps (reset-filled, pushed each step).

    Returns (root_out, next_out) where ``reduce(list_of_frames)`` makes the output.
    """
    T = obs.shape[0]
    roots, nexts = [], []

    def fill(frame):
        pad = frame if padding == "same" else torch.full_like(frame, value)
        return [pad] * (N - 1) + [frame]

    buf = fill(obs[0])
    for t in range(T):
        roots.append(reduce(buf))
        buf = buf[1:] + [next_obs[t]]
        nexts.append(reduce(buf))
        if bool(done[t]) and t + 1 < T:
            buf = fill(obs[t + 1])
    return torch.stack(roots), torch.stack(nexts)


def check_windows(r, in_key, out_key, N, reduce, padding="same", value=0.0):
    for i in range(r.shape[0]):
        root_ref, next_ref = window_reference(
            r[in_key][i], r["next", in_key][i], r["next", "done"][i], N, reduce, padding, value
        )
        torch.testing.assert_close(r[out_key][i], root_ref)
        torch.testing.assert_close(r["next", out_key][i], next_ref)


def cat_last(frames):
    return torch.cat(frames, -1)


# ---------------------------------------------------------------------- CatFrames
def test_catframes_single_env(counting_env, fixed_policy):
    env = TransformedEnv(counting_env(max_count=4), CatFrames(N=3, dim=-1, in_keys=["observation"]))
    r = env.rollout(7, fixed_policy(torch.tensor(1)), break_when_any_done=False)
    assert r["observation"].shape == (7, 9)
    # counts 0,1,2,3 | 0,1,2 ... (3 copies each)
    first = [[0.0] * 9, [0.0] * 6 + [1.0] * 3, [0.0] * 3 + [1.0] * 3 + [2.0] * 3]
    assert r["observation"][:3].tolist() == first
    assert r["observation"][4].tolist() == [0.0] * 9  # reset after the episode ended at t=3


@pytest.mark.parametrize("padding", ["same", "constant"])
def test_catframes_batched_partial_resets(counting_env, padding, added_keys_match, all_in, fixed_policy):
    t = CatFrames(N=3, dim=-1, in_keys=["observation"], out_keys=["stack"], padding=padding, padding_value=-1.0)
    env = TransformedEnv(counting_env(batch_size=[3], max_count=6, n_actions=4), t)
    r = env.rollout(12, fixed_policy(ACTIONS), break_when_any_done=False)
    assert r["next", "done"][2].nonzero().flatten().tolist() == [1, 3, 5, 7, 9, 11]
    check_windows(r, "observation", "stack", 3, cat_last, padding, -1.0)
    spec = env.observation_spec["stack"]
    assert spec.shape == (3, 9) and all_in(spec, r["next", "stack"])
    added_keys_match(env)


def test_catframes_pixels_compose_specs(counting_env, added_keys_match, all_in, fixed_policy):
    env = TransformedEnv(
        counting_env(batch_size=[3], max_count=6, n_actions=4, pixels=True, size=4),
        Compose(StepCounter(), CatFrames(N=2, dim=-1, in_keys=["pixels"], out_keys=["pixels_stack"])),
    )
    r = env.rollout(6, fixed_policy(ACTIONS), break_when_any_done=False)
    assert r["pixels_stack"].shape == (3, 6, 4, 4, 6) and r["pixels_stack"].dtype == torch.uint8
    check_windows(r, "pixels", "pixels_stack", 2, cat_last)
    spec = env.observation_spec["pixels_stack"]
    assert spec.shape == (3, 4, 4, 6) and float(spec.high.max()) == 255 and all_in(spec, r["next", "pixels_stack"])
    added_keys_match(env)


def test_catframes_forward_on_trajectory_matches_env(counting_env, fixed_policy):
    env = TransformedEnv(
        counting_env(batch_size=[3], max_count=6, n_actions=4),
        CatFrames(N=4, dim=-1, in_keys=["observation"], out_keys=["stack"]),
    )
    r = env.rollout(12, fixed_policy(ACTIONS), break_when_any_done=False)
    plain = r.exclude("stack", ("next", "stack"))  # what a buffer storing single frames holds
    t = CatFrames(N=4, dim=-1, in_keys=["observation", ("next", "observation")], out_keys=["stack", ("next", "stack")])
    out = t(plain)
    torch.testing.assert_close(out["stack"], r["stack"])
    torch.testing.assert_close(out["next", "stack"], r["next", "stack"])
    # single trajectory [T], in place on the default keys
    single = TransformedEnv(counting_env(max_count=3), CatFrames(N=2, dim=-1, in_keys=["observation"]))
    rs = single.rollout(6, fixed_policy(torch.tensor(1)), break_when_any_done=False)
    raw = counting_env(max_count=3).rollout(6, fixed_policy(torch.tensor(1)), break_when_any_done=False)
    out = CatFrames(N=2, dim=-1, in_keys=["observation", ("next", "observation")])(raw)
    torch.testing.assert_close(out["observation"], rs["observation"])
    torch.testing.assert_close(out["next", "observation"], rs["next", "observation"])


def test_catframes_inverse_path(counting_env, fixed_policy):
    raw = counting_env(batch_size=[3], max_count=6, n_actions=4).rollout(
        8, fixed_policy(ACTIONS), break_when_any_done=False
    )
    fwd = CatFrames(N=2, dim=-1, in_keys=["observation"], out_keys=["stack"])(raw.clone())
    t = CatFrames(N=2, dim=-1, in_keys=["observation"], out_keys=["stack"], as_inverse=True)
    assert "stack" not in t(raw.clone()).keys()
    inv = t.inv(raw)
    torch.testing.assert_close(inv["stack"], fwd["stack"])
    assert "stack" not in raw.keys()
    env = TransformedEnv(counting_env(), t.clone())
    with pytest.raises(RuntimeError, match="as_inverse"):
        env.reset()


def test_catframes_errors():
    with pytest.raises(ValueError, match="negative"):
        CatFrames(N=2, dim=0)
    with pytest.raises(ValueError, match="padding"):
        CatFrames(N=2, dim=-1, padding="zeros")
    td = TensorDict(observation=torch.zeros(4, 3), batch_size=[4])
    with pytest.raises(KeyError, match="done"):
        CatFrames(N=2, dim=-1, in_keys=["observation"])(td)


# ---------------------------------------------------------------------- TimeMaxPool
def pool(frames):
    return torch.stack(frames).amax(0)


def truncating_pendulum(transform):
    # random horizons per sub-env: episodes end at different times, observations are not monotone
    return TransformedEnv(
        PendulumEnv(batch_size=[3], seed=0),
        Compose(StepCounter(), RandomTruncationTransform(2, 4, prob=1.0, seed=1), transform),
    )


def test_timemaxpool_batched_partial_resets(added_keys_match, all_in):
    env = truncating_pendulum(TimeMaxPool(in_keys=["observation"], out_keys=["pooled"], T=3))
    r = env.rollout(14, break_when_any_done=False)
    done = r["next", "done"]
    assert bool(done.any(1).all())
    assert not (torch.equal(done[0], done[1]) and torch.equal(done[1], done[2]))  # different episode ends
    check_windows(r, "observation", "pooled", 3, pool)
    assert all_in(env.observation_spec["pooled"], r["next", "pooled"])
    added_keys_match(env)
    # forward on the trajectory (root and next) gives the env's values
    out = TimeMaxPool(in_keys=["observation", ("next", "observation")], out_keys=["p", ("next", "p")], T=3)(
        r.exclude("pooled", ("next", "pooled"))
    )
    torch.testing.assert_close(out["p"], r["pooled"])
    torch.testing.assert_close(out["next", "p"], r["next", "pooled"])


def test_timemaxpool_single_env_in_place():
    env = TransformedEnv(PendulumEnv(seed=0), TimeMaxPool(T=2))
    raw = TransformedEnv(PendulumEnv(seed=0), Compose())
    torch.manual_seed(0)
    r = env.rollout(6)
    torch.manual_seed(0)
    ref = raw.rollout(6)
    root_ref, next_ref = window_reference(ref["observation"], ref["next", "observation"], ref["next", "done"], 2, pool)
    torch.testing.assert_close(r["observation"], root_ref)
    torch.testing.assert_close(r["next", "observation"], next_ref)
    with pytest.raises(ValueError, match="T must be"):
        TimeMaxPool(T=0)


# ---------------------------------------------------------------------- NextObservationDelta
def test_next_observation_delta_single_env(added_keys_match):
    env = TransformedEnv(PendulumEnv(seed=0), NextObservationDelta())
    assert sorted(env.transform.in_keys) == ["observation", "th", "thdot"]
    r = env.rollout(5)
    delta = r["next", "delta", "observation"]
    assert delta.dtype == torch.float16
    torch.testing.assert_close(delta, (r["next", "observation"] - r["observation"]).half())
    assert float(env.reset()["delta", "observation"].abs().sum()) == 0.0
    assert env.observation_spec["delta", "observation"].dtype == torch.float16
    assert env.observation_spec["delta", "observation"].is_in(delta)
    added_keys_match(env)


def test_next_observation_delta_batched_compose_and_buffer(counting_env, added_keys_match, all_in, fixed_policy):
    env = TransformedEnv(
        counting_env(batch_size=[3], max_count=6, n_actions=4),
        Compose(StepCounter(), NextObservationDelta(["observation"], delta_dtype=torch.float32)),
    )
    r = env.rollout(10, fixed_policy(ACTIONS), break_when_any_done=False)
    ref = r["next", "observation"] - r["observation"]
    torch.testing.assert_close(r["next", "delta", "observation"], ref)
    assert r["next", "delta", "observation"][1, :, 0].tolist() == [2.0] * 10  # exact even across resets
    assert all_in(env.observation_spec["delta", "observation"], r["next", "delta", "observation"])
    added_keys_match(env)
    # buffer side: rebuild ("next", "observation") from the root and the delta
    stored = r.exclude(("next", "observation"))
    out = NextObservationDelta(["observation"])(stored)
    torch.testing.assert_close(out["next", "observation"], r["next", "observation"])
    assert ("next", "delta", "observation") not in out.keys(True, True)


def test_next_observation_delta_errors():
    with pytest.raises(ValueError, match="delta_dtype"):
        NextObservationDelta(delta_dtype=torch.int32)
