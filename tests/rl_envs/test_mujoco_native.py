"""Native MuJoCo tasks: step for step against Gymnasium's v5 tasks from identical states, batching, resets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdict import TensorDict

mujoco = pytest.importorskip("mujoco")
gym = pytest.importorskip("gymnasium")

from rl_envs import check_env_specs  # noqa: E402
from rl_envs.native.mujoco import (  # noqa: E402
    AntEnv,
    HalfCheetahEnv,
    HopperEnv,
    HumanoidEnv,
    InvertedPendulumEnv,
    MujocoSimulation,
    ReacherEnv,
    Walker2dEnv,
)

TASKS = {
    "HalfCheetah-v5": HalfCheetahEnv,
    "Hopper-v5": HopperEnv,
    "Walker2d-v5": Walker2dEnv,
    "Ant-v5": AntEnv,
    "Humanoid-v5": HumanoidEnv,
    "InvertedPendulum-v5": InvertedPendulumEnv,
    "Reacher-v5": ReacherEnv,
}


def _actions(env, steps: int, seed: int) -> torch.Tensor:
    low, high = env.action_spec.space.low[0], env.action_spec.space.high[0]
    gen = torch.Generator().manual_seed(seed)
    shape = (steps, *env.action_spec.shape)
    return (low + (high - low) * torch.rand(shape, generator=gen)).to(torch.float32)


@pytest.mark.parametrize("name", list(TASKS))
def test_equals_gymnasium_from_identical_states(name):
    """Same qpos/qvel in both, same actions: every observation, reward and termination equal."""
    n, steps = 3, 25
    ours = TASKS[name](num_envs=n, seed=1, dtype=torch.float64)
    td = ours.reset()
    state = ours.physics_state()
    theirs = [gym.make(name).unwrapped for _ in range(n)]
    for i, env in enumerate(theirs):
        env.reset(seed=i)
        env.set_state(state["qpos"][i].numpy(), state["qvel"][i].numpy())
        np.testing.assert_array_equal(env._get_obs(), td["observation"][i].numpy())
    for t, action in enumerate(_actions(ours, steps, seed=2)):
        td = ours.step(td.set("action", action))["next"]
        for i, env in enumerate(theirs):
            obs, reward, terminated, truncated, _ = env.step(action[i].numpy())
            np.testing.assert_allclose(td["observation"][i].numpy(), obs, rtol=0, atol=1e-12, err_msg=f"{name} t={t}")
            assert td["reward"][i].item() == pytest.approx(float(reward), rel=0, abs=1e-12), (name, t, i)
            assert bool(td["terminated"][i]) == bool(terminated), (name, t, i)
            assert not bool(td["truncated"][i])


@pytest.mark.parametrize("name", ["HalfCheetah-v5", "Hopper-v5", "InvertedPendulum-v5"])
def test_bit_equal_where_the_operations_are_the_same(name):
    """The state-only tasks do Gymnasium's arithmetic exactly: bit-equal observations and rewards."""
    ours = TASKS[name](num_envs=2, seed=3, dtype=torch.float64)
    td = ours.reset()
    state = ours.physics_state()
    theirs = [gym.make(name).unwrapped for _ in range(2)]
    for i, env in enumerate(theirs):
        env.reset(seed=0)
        env.set_state(state["qpos"][i].numpy(), state["qvel"][i].numpy())
    for action in _actions(ours, 10, seed=4):
        td = ours.step(td.set("action", action))["next"]
        for i, env in enumerate(theirs):
            obs, reward, *_ = env.step(action[i].numpy())
            assert np.array_equal(td["observation"][i].numpy(), obs)
            assert td["reward"][i].item() == float(reward)


@pytest.mark.parametrize("name", list(TASKS))
def test_specs_and_float32(name):
    env = TASKS[name](num_envs=2, seed=0)
    check_env_specs(env)
    gym_env = gym.make(name)
    assert env.observation_spec["observation"].shape == (2, *gym_env.observation_space.shape)
    assert env.action_spec.shape == (2, *gym_env.action_space.shape)
    assert torch.equal(env.action_spec.space.low[0], torch.from_numpy(gym_env.action_space.low))
    assert torch.equal(env.action_spec.space.high[0], torch.from_numpy(gym_env.action_space.high))
    assert env.dt == pytest.approx(gym_env.unwrapped.dt)
    # float32 outputs are the float64 ones rounded
    single, double = TASKS[name](num_envs=2, seed=0), TASKS[name](num_envs=2, seed=0, dtype=torch.float64)
    actions = iter(_actions(single, 5, seed=0))

    def policy(td):
        return td.set("action", next(actions))

    a = single.rollout(5, policy, break_when_any_done=False)
    actions = iter(_actions(single, 5, seed=0))
    b = double.rollout(5, policy, break_when_any_done=False)
    assert a["observation"].dtype == torch.float32 and a["next", "reward"].dtype == torch.float32
    torch.testing.assert_close(a["next", "observation"], b["next", "observation"].float(), rtol=1e-5, atol=1e-4)


def _reset_states(env, resets: int):
    """The states of ``resets`` successive resets of every sub-env, stacked: ``(qpos, qvel)``."""
    states = []
    for _ in range(resets):
        env.reset()
        states.append(env.physics_state())
    return torch.cat([s["qpos"] for s in states]), torch.cat([s["qvel"] for s in states])


def test_initial_state_distributions():
    """Reset noise as in Gymnasium: uniform qpos, Gaussian (cheetah, ant) or uniform qvel; Reacher's disc.

    Many resets of a few sub-envs (MuJoCo reserves megabytes of arena per simulation, and a large
    process makes the later tests' forks fail).
    """
    cheetah = HalfCheetahEnv(num_envs=10, seed=0)
    qpos, qvel = _reset_states(cheetah, 30)
    dq = qpos - torch.from_numpy(cheetah.init_qpos)
    assert dq.abs().max() <= 0.1 and dq.abs().max() > 0.099
    assert abs(dq.std().item() - 0.1 / 3**0.5) < 3e-3
    assert abs(qvel.std().item() - 0.1) < 3e-3  # 0.1 * N(0, 1)
    _, qvel = _reset_states(HopperEnv(num_envs=10, seed=0), 30)
    assert qvel.abs().max() <= 5e-3 and abs(qvel.std().item() - 5e-3 / 3**0.5) < 1e-4
    qpos, qvel = _reset_states(ReacherEnv(num_envs=10, seed=0), 30)
    goal = qpos[:, -2:]
    assert goal.norm(dim=1).max() < 0.2 and goal.abs().max() > 0.19
    assert torch.all(qvel[:, -2:] == 0) and qvel[:, :2].abs().max() <= 0.005


def test_threads_and_seeds_reproduce():
    """Same seed: same rollout; 2 stepping threads give the same numbers as 1."""
    actions = _actions(HalfCheetahEnv(num_envs=6), 20, seed=5)

    def run(**kwargs):
        env = AntEnv(num_envs=6, seed=7, dtype=torch.float64, **kwargs)
        td, obs = env.reset(), []
        for action in actions[:, :, :0].new_zeros(20, 6, 8) + 0.3 * actions[:, :, :1]:
            td = env.step(td.set("action", action))["next"]
            obs.append(td["observation"])
        env.close()
        return torch.stack(obs)

    one = run()
    assert torch.equal(one, run(num_threads=2))
    assert torch.equal(one, run(num_threads=1))
    other = AntEnv(num_envs=6, seed=8).reset()["observation"]
    assert not torch.equal(one[0], other.double())


def test_partial_reset_and_branching():
    env = HopperEnv(num_envs=4, seed=0, dtype=torch.float64)
    td = env.reset()
    for action in _actions(env, 5, seed=0):
        td = env.step(td.set("action", action))["next"]
    before = env.physics_state()
    mask = torch.tensor([True, False, True, False])
    out = env.reset(td.clone().set("_reset", mask))
    after = env.physics_state()
    assert torch.equal(after["qpos"][~mask], before["qpos"][~mask])
    assert not torch.equal(after["qpos"][mask], before["qpos"][mask])
    assert torch.equal(out["observation"][~mask], td["observation"][~mask])
    assert torch.equal(out["observation"][mask][:, 0], after["qpos"][mask][:, 1])
    # branching: two resets from the same state, the same actions: the same trajectories
    actions = _actions(env, 8, seed=1)
    runs = []
    for _ in range(2):
        td = env.reset(before.clone())
        assert torch.equal(env.physics_state()["qpos"], before["qpos"])
        rewards = []
        for action in actions:
            td = env.step(td.set("action", action))["next"]
            rewards.append(td["reward"])
        runs.append(torch.stack(rewards))
    assert torch.equal(runs[0], runs[1])


def test_time_limit_truncates():
    env = InvertedPendulumEnv(num_envs=2, seed=0, max_episode_steps=3)
    rollout = env.rollout(3, lambda td: td.set("action", torch.zeros(2, 1)))
    assert rollout["next", "truncated"].tolist() == [[False, False, True]] * 2
    assert rollout["next", "done"].tolist() == [[False, False, True]] * 2
    assert not rollout["next", "terminated"].any()
    assert ReacherEnv().max_episode_steps == 50 and HalfCheetahEnv().max_episode_steps == 1000
    unlimited = InvertedPendulumEnv(max_episode_steps=0, seed=0)
    assert not unlimited.rollout(5, lambda td: td.set("action", torch.zeros(1, 1)))["next", "truncated"].any()


def test_terminates_and_stops_rewarding():
    """InvertedPendulum: pushing one way topples the pole; the falling step gives 0 and terminates."""
    env = InvertedPendulumEnv(num_envs=2, seed=0)
    rollout = env.rollout(200, lambda td: td.set("action", torch.full((2, 1), 3.0)))
    assert rollout.batch_size[1] < 200  # broke at the first done
    last = rollout[:, -1]
    assert last["next", "terminated"].any()
    assert torch.equal(last["next", "reward"], (~last["next", "terminated"]).float())
    assert (last["next", "observation"][last["next", "terminated"]][:, 1].abs() > 0.2).all()


def test_bad_arguments():
    with pytest.raises(ValueError, match="backend must be one of"):
        HalfCheetahEnv(backend="jax")
    with pytest.raises(ValueError, match="num_envs must be a positive int, got 0"):
        HalfCheetahEnv(num_envs=0)
    with pytest.raises(ValueError, match="reset_noise_scale must be a float >= 0"):
        HalfCheetahEnv(reset_noise_scale=-1.0)
    with pytest.raises(ValueError, match="pixels_only=True needs from_pixels=True"):
        HalfCheetahEnv(pixels_only=True)
    with pytest.raises(ValueError, match="camera_id must be -1 or below"):
        HalfCheetahEnv(camera_id=7)
    with pytest.raises(FileNotFoundError, match="xml_path 'nowhere.xml' is not a file"):
        HalfCheetahEnv(xml_path="nowhere.xml")
    with pytest.raises(ValueError, match="dtype must be torch.float32 or torch.float64"):
        HalfCheetahEnv(dtype=torch.int64)
    env = HopperEnv(num_envs=2, seed=0)
    env.reset()
    before = env.physics_state()
    with pytest.raises(ValueError, match=r"needs both 'qpos' and 'qvel'; expected 'qvel' of shape \[2, 6\], got None"):
        env.reset(TensorDict(qpos=torch.zeros(2, 6, dtype=torch.float64), batch_size=[2]))
    assert torch.equal(env.physics_state()["qpos"], before["qpos"])  # nothing changed


def test_pixels_or_a_clear_error():
    env = HalfCheetahEnv(num_envs=2, from_pixels=True, render_width=32, render_height=24)
    try:
        td = env.reset()
    except RuntimeError as err:
        assert "MUJOCO_GL" in str(err) and "from_pixels=False" in str(err)
        return
    assert td["pixels"].shape == (2, 24, 32, 3) and td["pixels"].dtype == torch.uint8
    assert td["pixels"].float().std() > 0


_RENDER_SCRIPT = """
import torch
from rl_envs.native.mujoco import HalfCheetahEnv
env = HalfCheetahEnv(num_envs=2, from_pixels=True, render_width=32, render_height=24, seed=0)
rollout = env.rollout(5, lambda td: td.set("action", torch.ones(2, 6)))
pixels = rollout["next", "pixels"]
assert pixels.shape == (2, 5, 24, 32, 3) and pixels.dtype == torch.uint8, pixels.shape
assert pixels.float().std() > 5  # an image, not a blank frame
assert (pixels[:, 0].float() - pixels[:, -1].float()).abs().mean() > 0  # the cheetah moved
assert "observation" in rollout.keys()
env.close()
print("rendered")
"""


def test_pixels_render_with_osmesa():
    """Software rendering where OSMesa is installed (libosmesa6): frames of the right shape that change."""
    import ctypes.util
    import os
    import subprocess
    import sys

    if ctypes.util.find_library("OSMesa") is None:
        pytest.skip("OSMesa is not installed (apt-get install libosmesa6)")
    env = {**os.environ, "MUJOCO_GL": "osmesa", "PYOPENGL_PLATFORM": "osmesa"}
    proc = subprocess.run([sys.executable, "-c", _RENDER_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "rendered" in proc.stdout, proc.stderr[-2000:]


def test_simulation_checks_fields():
    model = HalfCheetahEnv().model
    with pytest.raises(ValueError, match=r"\['nope'\] are not array fields of mujoco.MjData"):
        MujocoSimulation(model, 2, fields=("nope",))
    sim = MujocoSimulation(model, 2, fields=("cfrc_ext",), num_threads=4)
    assert sim.num_threads == 2
    with pytest.raises(ValueError, match="expected qpos of shape"):
        sim.set_state(np.arange(2), np.zeros((2, 3)), np.zeros((2, model.nv)))
    sim.close()
