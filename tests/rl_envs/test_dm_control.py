"""DMControlEnv / DMControlWrapper, checked against stepping dm_control itself."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("dm_control")
# imported before dm_control.suite: the module picks a headless MUJOCO_GL default, read when mujoco loads
from rl_envs.libs.dm_control import DMControlEnv, DMControlWrapper  # isort: skip
from dm_control import suite  # isort: skip
from rl_envs import check_env_specs
from tdict.specs import Bounded, Unbounded

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _actions(spec, n, seed=0):
    """``n`` reproducible actions inside ``spec`` (float64, as dm_control's action spec)."""
    gen = torch.Generator().manual_seed(seed)
    low, high = spec.low, spec.high
    return [low + (high - low) * torch.rand(spec.shape, generator=gen, dtype=torch.float64) for _ in range(n)]


def _replay(actions):
    """A policy that writes ``actions[t]`` at step t."""
    it = iter(actions)
    return lambda td: td.set("action", next(it).clone())


def _np_obs(observation, key):
    return torch.from_numpy(np.array(observation[key], dtype=np.float64).reshape(-1))


# ---------------------------------------------------------------------------------------------- specs
@pytest.mark.parametrize(("domain", "task"), [("cheetah", "run"), ("cartpole", "swingup"), ("walker", "walk")])
def test_specs_match_dm_control(domain, task):
    env = DMControlEnv(domain, task)
    dm = suite.load(domain, task)
    obs_spec = env.observation_spec
    assert set(obs_spec.keys()) == set(dm.observation_spec())
    for key, dm_spec in dm.observation_spec().items():
        spec = obs_spec[key]
        assert isinstance(spec, Unbounded)
        assert spec.dtype == torch.float64
        # scalars (walker's "height") get one feature dim, as in TorchRL
        assert tuple(spec.shape) == (tuple(dm_spec.shape) or (1,)), key
    action = env.action_spec
    dm_action = dm.action_spec()
    assert isinstance(action, Bounded)
    assert tuple(action.shape) == dm_action.shape and action.dtype == torch.float64
    torch.testing.assert_close(action.low, torch.from_numpy(np.array(dm_action.minimum)))
    torch.testing.assert_close(action.high, torch.from_numpy(np.array(dm_action.maximum)))
    assert env.reward_spec.shape == torch.Size([]) and env.reward_spec.dtype == torch.float64
    assert set(env.full_done_spec.keys()) == {"done", "terminated", "truncated"}
    for key in ("done", "terminated", "truncated"):
        assert env.full_done_spec[key].shape == torch.Size([]) and env.full_done_spec[key].dtype == torch.bool


@pytest.mark.parametrize(("domain", "task"), [("cheetah", "run"), ("cartpole", "swingup")])
def test_check_env_specs(domain, task):
    check_env_specs(DMControlEnv(domain, task), seed=0)


def test_available_envs():
    envs = DMControlEnv.available_envs
    assert all(tuple(pair) in envs for pair in suite.BENCHMARKING)
    assert ("cheetah", "run") in DMControlWrapper.available_envs
    assert all(isinstance(d, str) and isinstance(t, str) for d, t in envs)


# ---------------------------------------------------------------------------------------------- values
@pytest.mark.parametrize(("domain", "task"), [("cheetah", "run"), ("cartpole", "swingup")])
def test_rollout_equals_dm_control(domain, task):
    seed, steps = 3, 50
    env = DMControlEnv(domain, task, seed=seed)
    actions = _actions(env.action_spec, steps, seed=1)
    rollout = env.rollout(steps, _replay(actions))
    assert rollout.batch_size == torch.Size([steps])

    dm = suite.load(domain, task, task_kwargs={"random": seed})
    timestep = dm.reset()
    keys = list(dm.observation_spec())
    for t, action in enumerate(actions):
        for key in keys:
            torch.testing.assert_close(rollout[key][t], _np_obs(timestep.observation, key), rtol=0, atol=0)
        timestep = dm.step(action.numpy())
        for key in keys:
            torch.testing.assert_close(rollout["next", key][t], _np_obs(timestep.observation, key), rtol=0, atol=0)
        assert rollout["next", "reward"][t].item() == timestep.reward
        torch.testing.assert_close(rollout["action"][t], action)
    assert not rollout["next", "done"].any()
    assert not rollout["next", "terminated"].any() and not rollout["next", "truncated"].any()


def test_set_seed_reproduces_rollouts():
    env_a, env_b = DMControlEnv("cartpole", "swingup"), DMControlEnv("cartpole", "swingup")
    actions = _actions(env_a.action_spec, 20)
    assert env_a.set_seed(7) == env_b.set_seed(7)
    a, b = env_a.rollout(20, _replay(actions)), env_b.rollout(20, _replay(actions))
    assert (a == b).all()
    # reseeding the same env replays it; another seed gives another initial state
    env_a.set_seed(7)
    again = env_a.rollout(20, _replay(actions))
    assert (again == a).all()
    env_a.set_seed(8)
    other = env_a.rollout(20, _replay(actions))
    assert not torch.equal(other["position"][0], a["position"][0])
    # seed= at construction and set_seed on a wrapper seed the same stream
    built = DMControlEnv("cartpole", "swingup", seed=7).rollout(20, _replay(actions))
    wrapped = DMControlWrapper(suite.load("cartpole", "swingup"))
    wrapped.set_seed(7)
    assert (built == a).all() and (wrapped.rollout(20, _replay(actions)) == a).all()


def test_time_limit_truncates():
    # cartpole's control step is 0.01 s: a 0.1 s time limit ends every episode after 10 steps
    env = DMControlEnv("cartpole", "swingup", task_kwargs={"time_limit": 0.1}, seed=0)
    rollout = env.rollout(25, break_when_any_done=False)
    expected = torch.zeros(25, dtype=torch.bool)
    expected[[9, 19]] = True
    assert torch.equal(rollout["next", "truncated"], expected)
    assert torch.equal(rollout["next", "done"], expected)
    assert not rollout["next", "terminated"].any()
    # the step after a time limit starts from a reset, not from the truncated state
    assert not torch.equal(rollout["position"][10], rollout["next", "position"][9])
    # the default rollout stops at the first done
    assert env.rollout(25).batch_size == torch.Size([10])


def test_termination_sets_terminated():
    dm = suite.load("cartpole", "swingup", task_kwargs={"random": 0})
    calls = []

    def get_termination(physics):
        calls.append(1)
        return 0.0 if len(calls) >= 4 else None  # the task ends the episode at its 4th step

    dm.task.get_termination = get_termination
    env = DMControlWrapper(dm)
    rollout = env.rollout(10)
    assert rollout.batch_size == torch.Size([4])
    expected = torch.tensor([False, False, False, True])
    assert torch.equal(rollout["next", "terminated"], expected)
    assert torch.equal(rollout["next", "done"], expected)
    assert not rollout["next", "truncated"].any()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame_skip=st.integers(1, 4), limit=st.integers(3, 9))
def test_frame_skip_sums_rewards_and_stops_at_episode_end(frame_skip, limit):
    steps = 4
    env = DMControlEnv("cartpole", "swingup", frame_skip=frame_skip, task_kwargs={"time_limit": limit * 0.01}, seed=1)
    actions = _actions(env.action_spec, steps, seed=2)
    rollout = env.rollout(steps, _replay(actions), break_when_any_done=True)

    dm = suite.load("cartpole", "swingup", task_kwargs={"random": 1, "time_limit": limit * 0.01})
    dm.reset()
    for t in range(rollout.batch_size[0]):
        total, last = 0.0, False
        for _ in range(frame_skip):
            timestep = dm.step(actions[t].numpy())
            total += timestep.reward
            if timestep.last():
                last = True
                break
        assert rollout["next", "reward"][t].item() == pytest.approx(total, rel=1e-12, abs=1e-12)
        torch.testing.assert_close(
            rollout["next", "position"][t], _np_obs(timestep.observation, "position"), rtol=0, atol=0
        )
        assert bool(rollout["next", "truncated"][t]) == last
    expected_len = min(steps, -(-limit // frame_skip))
    assert rollout.batch_size == torch.Size([expected_len])


# ---------------------------------------------------------------------------------------------- pixels
def _can_render():
    try:
        suite.load("cartpole", "swingup").physics.render(height=8, width=8, camera_id=0)
    except Exception as err:  # noqa: BLE001 - any GL failure means no renderer on this machine
        return str(err) or type(err).__name__
    return None


def test_from_pixels_matches_physics_render():
    why = _can_render()
    if why is not None:
        pytest.skip(f"MuJoCo cannot render here (MUJOCO_GL): {why}")
    kwargs = {"height": 24, "width": 32}
    env = DMControlEnv("cartpole", "swingup", from_pixels=True, render_kwargs=kwargs, seed=0)
    spec = env.observation_spec["pixels"]
    assert spec.shape == torch.Size([24, 32, 3]) and spec.dtype == torch.uint8
    assert {"position", "velocity", "pixels"} == set(env.observation_spec.keys())
    actions = _actions(env.action_spec, 3)
    rollout = env.rollout(3, _replay(actions))
    dm = suite.load("cartpole", "swingup", task_kwargs={"random": 0})
    dm.reset()
    assert torch.equal(rollout["pixels"][0], torch.from_numpy(dm.physics.render(camera_id=0, **kwargs).copy()))
    for t in range(3):
        dm.step(actions[t].numpy())
        assert torch.equal(
            rollout["next", "pixels"][t], torch.from_numpy(dm.physics.render(camera_id=0, **kwargs).copy())
        )
    check_env_specs(env)

    only = DMControlEnv("cartpole", "swingup", from_pixels=True, pixels_only=True, camera_id=1, render_kwargs=kwargs)
    assert set(only.observation_spec.keys()) == {"pixels"}
    assert only.render_kwargs["camera_id"] == 1
    assert only.rollout(2)["next", "pixels"].shape == torch.Size([2, 24, 32, 3])


def test_render_failure_names_mujoco_gl():
    dm = suite.load("cartpole", "swingup")

    def broken_render(**kwargs):
        raise OSError("no GL context")

    dm.physics.render = broken_render
    with pytest.raises(RuntimeError, match=r"from_pixels=True.*MUJOCO_GL.*no GL context"):
        DMControlWrapper(dm, from_pixels=True)


# ---------------------------------------------------------------------------------------------- errors
def test_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"unknown env_name.*'cheetahh'.*'cartpole'"):
        DMControlEnv("cheetahh", "run")
    with pytest.raises(ValueError, match=r"unknown task_name 'walk'.*'cheetah'.*\['run'\]"):
        DMControlEnv("cheetah", "walk")
    with pytest.raises(ValueError, match=r"batch_size must be \[\].*\[2\]"):
        DMControlEnv("cheetah", "run", batch_size=[2])
    with pytest.raises(ValueError, match=r"frame_skip must be an integer >= 1, got 0"):
        DMControlEnv("cheetah", "run", frame_skip=0)
    with pytest.raises(ValueError, match=r"pixels_only=True needs from_pixels=True"):
        DMControlEnv("cheetah", "run", pixels_only=True)
    with pytest.raises(ValueError, match=r"seed= or as task_kwargs\['random'\]"):
        DMControlEnv("cheetah", "run", seed=0, task_kwargs={"random": 1})
    with pytest.raises(TypeError, match=r"env must be a dm_control"):
        DMControlWrapper("cheetah")
    env = DMControlEnv("cheetah", "run")
    td = env.reset()
    td["action"] = torch.zeros(6, dtype=torch.float32)  # float32 where the spec says float64
    with pytest.raises(Exception, match="action"):
        env.step(td)


def test_import_rl_envs_does_not_import_dm_control():
    code = "import sys, rl_envs; assert 'dm_control' not in sys.modules and 'mujoco' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
