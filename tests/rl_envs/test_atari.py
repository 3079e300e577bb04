"""Atari: GymEnv on ale-py's ids, and make_atari_env checked against Gymnasium's own preprocessing
(``AtariPreprocessing`` + ``FrameStackObservation`` over ``gymnasium.make(id, frameskip=1)``)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")
ale_py = pytest.importorskip("ale_py")
from rl_envs import AtariEnv, GymEnv, check_env_specs, make_atari_env  # noqa: E402
from tdict.specs import Categorical, OneHot, Unbounded  # noqa: E402

gym.register_envs(ale_py)
T = 120  # steps per rollout: a fraction of a second for both pipelines


def _ale_seed_fits(seed: int) -> bool:
    """Whether ale-py's ``AtariEnv.reset(seed=seed)`` seeds ALE below 2**31 (what ALE's vector engine takes)."""
    return int(np.random.SeedSequence(seed).generate_state(2)[1]) < 2**31


def _seed_for(num_envs: int) -> int:
    """The first seed whose sub-env seeds all fit: with it, sticky actions follow Gymnasium's."""
    return next(s for s in range(1000) if all(_ale_seed_fits(s + i) for i in range(num_envs)))


class _FixedNoops(gym.Wrapper):
    """Takes ``noops`` NOOP frames after the reset: Gymnasium's no-op start with a chosen count."""

    def __init__(self, env, noops: int):
        super().__init__(env)
        self.noops = noops

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for _ in range(self.noops):
            obs, _, _, _, info = self.env.step(0)
        return obs, info


def reference_env(env_id, *, sticky, noop_max=0, noops=None, frame_skip=4, screen_size=84, stack=4, life_loss=False):
    pytest.importorskip("cv2")  # AtariPreprocessing resizes with OpenCV
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    env = gym.make(env_id, frameskip=1, repeat_action_probability=sticky)
    if noops is not None:
        env = _FixedNoops(env, noops)
    env = AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=frame_skip,
        screen_size=screen_size,
        terminal_on_life_loss=life_loss,
        grayscale_obs=True,
    )
    return FrameStackObservation(env, stack)


def reference_rollout(env, seed, actions):
    """One sub-env's steps as our rollout records them: reset (seeded once) after every done."""
    obs, _ = env.reset(seed=seed)
    ale = env.unwrapped.ale
    lives = ale.lives()
    out = {k: [] for k in ("pixels", "next_pixels", "reward", "terminated", "truncated", "lives", "eol")}
    for a in actions.tolist():
        nxt, reward, terminated, truncated, _ = env.step(a)
        new_lives = ale.lives()
        for key, value in zip(
            out,
            (obs, nxt, reward, terminated, truncated, new_lives, new_lives < lives or terminated or truncated),
        ):
            out[key].append(np.array(value))
        if terminated or truncated:
            obs, _ = env.reset()
            lives = ale.lives()
        else:
            obs, lives = nxt, new_lives
    return {k: torch.as_tensor(np.stack(v)) for k, v in out.items()}


def our_rollout(env, actions):
    steps = iter(actions.unbind(-1))
    return env.rollout(actions.shape[-1], lambda td: td.set("action", next(steps)), break_when_any_done=False)


def assert_same(ours, ref, i):
    """Sub-env ``i`` of our rollout equals the reference's steps (every frame, reward and flag)."""
    assert torch.equal(ours["pixels"][i], ref["pixels"])
    assert torch.equal(ours["next", "pixels"][i], ref["next_pixels"])
    assert ours["next", "reward"][i].tolist() == ref["reward"].float().tolist()
    assert ours["next", "terminated"][i].tolist() == ref["terminated"].tolist()
    assert ours["next", "truncated"][i].tolist() == ref["truncated"].tolist()
    assert ours["next", "done"][i].tolist() == (ref["terminated"] | ref["truncated"]).tolist()
    assert ours["next", "lives"][i].tolist() == ref["lives"].tolist()
    assert ours["next", "end-of-life"][i].tolist() == ref["eol"].tolist()


def random_actions(n_envs, n_actions, steps, seed=0):
    return torch.randint(n_actions, (n_envs, steps), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------- GymEnv
def test_gym_env_registers_ale_ids_on_first_use():
    """In a fresh process (no ale_py imported), GymEnv("ALE/Pong-v5") works: GymEnv registers ale-py's ids."""
    code = (
        "import sys; from rl_envs import GymEnv; assert 'ale_py' not in sys.modules; "
        "env = GymEnv('ALE/Pong-v5', categorical_action_encoding=True); "
        "print(tuple(env.rollout(2)['next', 'observation'].shape))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "(2, 210, 160, 3)"


def test_gym_env_pong_matches_gymnasium():
    env = GymEnv("ALE/Pong-v5", categorical_action_encoding=True)
    env.set_seed(5)
    actions = random_actions(1, 6, 20)[0]
    ours = our_rollout(env, actions)
    ref = gym.make("ALE/Pong-v5")
    obs, _ = ref.reset(seed=5)
    for t, a in enumerate(actions.tolist()):
        assert torch.equal(ours["observation"][t], torch.as_tensor(obs))
        obs, reward, *_ = ref.step(a)
        assert torch.equal(ours["next", "observation"][t], torch.as_tensor(obs))
        assert ours["next", "reward"][t].item() == reward
    assert ours["observation"].dtype == torch.uint8 and env.action_spec == Categorical(6, dtype=torch.int64)


# ---------------------------------------------------------------------------------------------- the pipeline
@pytest.mark.parametrize(
    "env_id, sticky, options",
    [
        ("ALE/Pong-v5", 0.0, {}),
        ("ALE/Pong-v5", 0.25, {}),
        ("ALE/Pong-v5", 0.0, {"frame_skip": 3, "frame_stack": 2, "screen_size": 64}),
        ("ALE/Breakout-v5", 0.25, {}),
        ("ALE/Breakout-v5", 0.0, {"terminal_on_life_loss": True}),
    ],
    ids=["pong", "pong-sticky", "pong-skip3-stack2-64px", "breakout-sticky", "breakout-life-loss"],
)
def test_pipeline_matches_gymnasium_wrappers(env_id, sticky, options):
    """Same seeds, same actions, no no-ops: every observation, reward and flag equals the reference's,
    across episode ends (Breakout's lives run out, or each lost life ends the episode)."""
    n = 2
    seed = (
        _seed_for(n) if sticky else 3
    )  # seed 3: sub-env 0's ALE seed has its top bit set, fine without sticky actions
    env = make_atari_env(
        env_id,
        num_envs=n,
        noop_max=0,
        seed=seed,
        repeat_action_probability=sticky,
        categorical_action_encoding=True,
        **options,
    )
    n_actions = env.action_spec.n
    steps = 300 if "Breakout" in env_id else T
    actions = random_actions(n, n_actions, steps)
    ours = our_rollout(env, actions)
    ref_kwargs = {
        "frame_skip": options.get("frame_skip", 4),
        "stack": options.get("frame_stack", 4),
        "screen_size": options.get("screen_size", 84),
        "life_loss": options.get("terminal_on_life_loss", False),
    }
    for i in range(n):
        assert_same(
            ours, reference_rollout(reference_env(env_id, sticky=sticky, **ref_kwargs), seed + i, actions[i]), i
        )
    if "Breakout" in env_id:  # the rollout went through lost lives and episode ends
        assert ours["next", "end-of-life"].any() and ours["next", "done"].any()
    env.close()


def _follows(ref_env, ours, i, actions) -> bool:
    """Whether sub-env ``i`` of our rollout is the reference's episode, started by an (unseeded) reset."""
    obs, _ = ref_env.reset()
    for t, a in enumerate(actions.tolist()):
        if not torch.equal(ours["pixels"][i, t], torch.as_tensor(obs)):
            return False
        obs, reward, terminated, truncated, _ = ref_env.step(a)
        if reward != ours["next", "reward"][i, t].item() or terminated or truncated:
            return False
    return torch.equal(ours["next", "pixels"][i, -1], torch.as_tensor(obs))


def test_noop_starts_match_gymnasium_for_the_count_drawn():
    """With no-op starts, each sub-env follows Gymnasium's pipeline started with some count of no-ops in
    ``[0, noop_max]`` (ALE's C++ generator draws the count, Gymnasium's NumPy generator its own). Without
    sticky actions the ALE seed plays no part, so the reference resets unseeded (a seeded reset reloads the ROM)."""
    n, noop_max, steps = 4, 30, 40
    env = make_atari_env("ALE/Pong-v5", num_envs=n, noop_max=noop_max, seed=11, repeat_action_probability=0.0)
    actions = random_actions(n, 6, steps, seed=1)
    ours = our_rollout(env, torch.nn.functional.one_hot(actions, 6).transpose(1, 2))
    ref_env = reference_env("ALE/Pong-v5", sticky=0.0, noops=0)
    counts = []
    for i in range(n):
        matching = []
        for k in range(noop_max + 1):
            ref_env.env.env.noops = k  # FrameStackObservation(AtariPreprocessing(_FixedNoops(...)))
            if _follows(ref_env, ours, i, actions[i]):
                matching.append(k)
        assert matching, f"sub-env {i}: no count of no-ops in [0, {noop_max}] gives our trajectory"
        counts.append(matching[0])
    assert len(set(counts)) > 1, counts  # the counts are drawn, not fixed
    env.close()


# ---------------------------------------------------------------------------------------------- specs, seeding
def test_specs_shapes_and_dtypes():
    env = make_atari_env("ALE/Pong-v5", num_envs=3, seed=0)
    assert env.batch_size == torch.Size([3])
    assert isinstance(env.base_env, AtariEnv)
    pixels = env.observation_spec["pixels"]
    assert isinstance(pixels, Unbounded) and pixels.shape == (3, 4, 84, 84) and pixels.dtype == torch.uint8
    assert env.observation_spec["lives"].dtype == torch.int64 and env.observation_spec["lives"].shape == (3,)
    eol = env.observation_spec["end-of-life"]
    assert isinstance(eol, Categorical) and eol.dtype == torch.bool and eol.shape == (3,)
    assert env.action_spec == OneHot(6, shape=(3, 6), dtype=torch.int64)
    assert env.reward_spec.shape == (3,) and env.reward_spec.dtype == torch.float32
    assert sorted(env.done_spec.keys()) == ["done", "terminated", "truncated"]
    check_env_specs(env)
    td = env.rollout(5)
    assert td.batch_size == (3, 5)
    assert td["pixels"].dtype == torch.uint8 and td["pixels"].shape == (3, 5, 4, 84, 84)
    assert td["next", "reward"].dtype == torch.float32 and td["next", "end-of-life"].dtype == torch.bool
    assert td["next", "lives"].dtype == torch.int64
    # the stack starts filled with the reset frame, and shifts by one frame per step
    first = td["pixels"][:, 0]
    assert all(torch.equal(first[:, j], first[:, 3]) for j in range(3))
    assert torch.equal(td["next", "pixels"][:, 0, :3], first[:, 1:])
    assert torch.equal(td["next", "pixels"][:, 1, :2], first[:, 2:])
    small = AtariEnv("ALE/Pong-v5", 2, frame_stack=2, screen_size=32, categorical_action_encoding=True)
    assert small.observation_spec["pixels"].shape == (2, 2, 32, 32) and small.action_spec == Categorical(
        6, shape=(2,), dtype=torch.int64
    )
    assert small.reset()["pixels"].shape == (2, 2, 32, 32)
    env.close()
    small.close()


def test_seeding_is_reproducible_and_one_hot_matches_indices():
    one_hot = make_atari_env("ALE/Breakout-v5", num_envs=2, seed=4)
    assert one_hot.set_seed(4) == 6  # sub-envs 4 and 5: the next env gets 6
    index = make_atari_env("ALE/Breakout-v5", num_envs=2, seed=4, categorical_action_encoding=True)
    actions = random_actions(2, 4, 40, seed=2)
    a = our_rollout(one_hot, torch.nn.functional.one_hot(actions, 4).transpose(1, 2))
    b = our_rollout(index, actions)
    for key in ("pixels", ("next", "pixels"), ("next", "reward"), ("next", "lives"), ("next", "done")):
        assert torch.equal(a[key], b[key])
    c = our_rollout(index, actions)  # not reseeded: another start
    assert not torch.equal(b["pixels"], c["pixels"])


def test_partial_reset_resets_only_the_masked_sub_env():
    env = make_atari_env("ALE/Pong-v5", num_envs=2, seed=0, noop_max=0, repeat_action_probability=0.0)
    td = env.reset()
    first = td["pixels"].clone()
    for _ in range(5):
        td = env.step_mdp(env.step(td.set("action", env.action_spec.rand())))
    moved = td["pixels"].clone()
    td.set("_reset", torch.tensor([True, False]))
    out = env.reset(td)
    assert torch.equal(out["pixels"][0], first[0])  # no no-ops, no sticky actions: the same start
    assert torch.equal(out["pixels"][1], moved[1])
    assert not out["end-of-life"].any()


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"num_envs": 0}, ValueError, ["num_envs", "positive int", "0"]),
        ({"frame_skip": 0}, ValueError, ["frame_skip", "positive int", "0"]),
        ({"frame_skip": 2.5}, TypeError, ["frame_skip", "positive int", "2.5"]),
        ({"noop_max": -1}, ValueError, ["noop_max", "non-negative int", "-1"]),
        ({"frame_stack": 0}, ValueError, ["frame_stack", "positive int", "0"]),
        ({"screen_size": 0}, ValueError, ["screen_size", "positive int", "0"]),
        ({"repeat_action_probability": 1.5}, ValueError, ["repeat_action_probability", "[0, 1]", "1.5"]),
        ({"terminal_on_life_loss": "yes"}, TypeError, ["terminal_on_life_loss", "bool", "'yes'"]),
        ({"num_threads": -2}, ValueError, ["num_threads", "non-negative int", "-2"]),
        ({"seed": "a"}, TypeError, ["seed", "'a'"]),
        ({"env_id": "CartPole-v1"}, ValueError, ["env_id", "Atari id", "'CartPole-v1'"]),
        ({"env_id": "ALE/NoSuchGame-v5"}, ValueError, ["env_id", "Atari id", "'ALE/NoSuchGame-v5'"]),
        ({"env_id": 3}, TypeError, ["env_id", "str", "3"]),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, error, words):
    kwargs = {"env_id": "ALE/Pong-v5", **kwargs}
    with pytest.raises(error) as info:
        make_atari_env(**kwargs)
    message = str(info.value)
    assert all(w in message for w in words), message


def test_out_of_range_action_is_refused_before_stepping():
    env = make_atari_env("ALE/Pong-v5", num_envs=2, seed=0, categorical_action_encoding=True)
    td = env.reset()
    with pytest.raises(ValueError, match=r"action indices must be in \[0, 6\), got \[6, 0\]"):
        env.step(td.clone().set("action", torch.tensor([6, 0])))
    with pytest.raises(ValueError, match=r"got \[-1, 0\]"):
        env.step(td.clone().set("action", torch.tensor([-1, 0])))
    assert env.step(td.set("action", torch.tensor([1, 2])))["next", "pixels"].shape == (2, 4, 84, 84)
    env.close()
