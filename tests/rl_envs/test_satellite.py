"""SatelliteEnv: CMG geometry, the physics (momentum, torque directions), observation and reward by hand, macros."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

mujoco = pytest.importorskip("mujoco")

from rl_envs import TransformedEnv, check_env_specs  # noqa: E402
from rl_envs.native.mujoco import (  # noqa: E402
    HumanoidEnv,
    HumanoidMacroAction,
    SatelliteEnv,
    SatelliteMacroAction,
)
from rl_envs.native.mujoco.satellite import cmg_geometry, quaternion_multiply  # noqa: E402
from rl_envs.transforms import MacroPrimitiveTransform  # noqa: E402


@pytest.mark.parametrize(("n", "layout"), [(4, "pyramid"), (6, "pyramid"), (6, "orthogonal")])
def test_geometry(n, layout):
    gimbal, spin = cmg_geometry(n, layout)
    assert gimbal.shape == spin.shape == (n, 3)
    np.testing.assert_allclose(np.linalg.norm(gimbal, axis=1), 1)
    np.testing.assert_allclose(np.linalg.norm(spin, axis=1), 1)
    np.testing.assert_allclose((gimbal * spin).sum(1), 0, atol=1e-12)
    np.testing.assert_allclose(spin.sum(0), 0, atol=1e-12)  # zero momentum at zero gimbal angles
    if layout == "pyramid":  # the skew angle: 54.74 deg between each gimbal axis and +z, cos = 1/sqrt(3)
        np.testing.assert_allclose(gimbal[:, 2], 1 / math.sqrt(3))


def test_geometry_errors():
    with pytest.raises(ValueError, match="orthogonal layout has 6 CMGs, got num_cmgs=4"):
        cmg_geometry(4, "orthogonal")
    with pytest.raises(ValueError, match="layout must be 'pyramid' or 'orthogonal', got 'ring'"):
        cmg_geometry(4, "ring")
    with pytest.raises(ValueError, match="num_cmgs must be 4 or 6, got 5"):
        SatelliteEnv(num_cmgs=5)
    with pytest.raises(ValueError, match=r"max_target_angle must be in \(0, pi\]"):
        SatelliteEnv(max_target_angle=4.0)
    with pytest.raises(TypeError, match="xml_path is not accepted"):
        SatelliteEnv(xml_path="x.xml")


def _momentum(env, i):
    data = env._sim.data[i]
    mujoco.mj_subtreeVel(env.model, data)
    return data.subtree_angmom[1].copy()


@pytest.mark.parametrize("num_cmgs", [4, 6])
def test_angular_momentum_is_conserved(num_cmgs):
    """No external torque: the whole spacecraft's angular momentum stays put while the gimbals turn."""
    env = SatelliteEnv(num_cmgs=num_cmgs, num_envs=2, seed=0, dtype=torch.float64)
    td = env.reset()
    before = [_momentum(env, i) for i in range(2)]
    gen = torch.Generator().manual_seed(0)
    for _ in range(30):
        td = env.step(td.set("action", torch.rand(2, num_cmgs, generator=gen) * 2 - 1))["next"]
    for i in range(2):
        assert np.abs(_momentum(env, i) - before[i]).max() < 1e-3 * env.rotor_momentum
    assert np.abs(td["observation"][:, 4:7].numpy()).max() > 0.01  # and the bus did turn


@pytest.mark.parametrize("cmg", [0, 2])
def test_torque_directions_match_the_physics(cmg):
    """Turning one gimbal from rest spins the bus about -A[:, i] (the momentum goes into the cluster)."""
    env = SatelliteEnv(num_envs=1, seed=0, reset_noise_scale=0.0, dtype=torch.float64)
    td = env.reset()
    direction = env.torque_directions(np.zeros((1, 4)))[0, :, cmg]
    action = torch.zeros(1, 4, dtype=torch.float32)
    action[0, cmg] = 0.2
    body_rate = env.step(td.set("action", action))["next", "observation"][0, 4:7].numpy()
    cosine = body_rate @ -direction / np.linalg.norm(body_rate)
    assert cosine > 0.99


def test_observation_and_reward_by_hand():
    env = SatelliteEnv(num_envs=3, seed=1, dtype=torch.float64)
    td = env.reset()
    action = torch.tensor([[0.3, -0.2, 0.1, 0.0]] * 3)
    out = env.step(td.set("action", action))["next"]
    state, target = env.physics_state(), env.target
    qpos, qvel = state["qpos"].numpy(), state["qvel"].numpy()
    for i in range(3):
        attitude = qpos[i, 3:7]
        error = quaternion_multiply(target[i] * [1, -1, -1, -1], attitude)
        error = error if error[0] >= 0 else -error
        gimbal = qpos[i, [7, 9, 11, 13]]
        a = env.torque_directions(gimbal[None])[0]
        manipulability = math.sqrt(max(np.linalg.det(a @ a.T), 0))
        expected_obs = np.concatenate(
            [error, qvel[i, 3:6], np.sin(gimbal), np.cos(gimbal), qvel[i, [6, 8, 10, 12]], [manipulability]]
        )
        np.testing.assert_allclose(out["observation"][i].numpy(), expected_obs, atol=1e-12)
        angle = 2 * math.acos(min(error[0], 1.0))
        cost = (
            angle
            + 0.01 * float((action[i] ** 2).sum())
            + 0.1 * float((qvel[i, 3:6] ** 2).sum())
            + 0.5 * max(0.0, 1 - manipulability / 0.3)
        )
        assert out["reward"][i].item() == pytest.approx(-cost, abs=1e-6)
    check_env_specs(SatelliteEnv(num_envs=2, seed=0))


def _targets(env, resets: int) -> np.ndarray:
    out = []
    for _ in range(resets):
        env.reset()
        out.append(env.target)
    return np.concatenate(out)


def test_targets():
    target = _targets(SatelliteEnv(num_envs=10, seed=0, max_target_angle=0.5), 30)
    np.testing.assert_allclose(np.linalg.norm(target, axis=1), 1)
    angles = 2 * np.arccos(target[:, 0])
    assert angles.max() <= 0.5 + 1e-9 and angles.max() > 0.45 and angles.min() < 0.05  # uniform in [0, max]
    anywhere = _targets(SatelliteEnv(num_envs=10, seed=0), 30)
    assert (anywhere[:, 0] >= 0).all() and (2 * np.arccos(anywhere[:, 0])).max() > 2.5


def test_manipulability_and_singular_configuration():
    env = SatelliteEnv(num_cmgs=6, layout="orthogonal")
    angles = np.zeros((1, 6))
    a = env.torque_directions(angles)[0]
    assert env.manipulability(angles)[0] == pytest.approx(math.sqrt(np.linalg.det(a @ a.T)))
    # the gimbals about x both at 0, those about y at pi/2, those about z at 0 or pi: torques in one plane only
    singular = np.array([[0.0, 0.0, math.pi / 2, math.pi / 2, 0.0, math.pi]])
    a = env.torque_directions(singular)[0]
    assert np.linalg.matrix_rank(a, tol=1e-9) <= 2
    assert env.manipulability(singular)[0] == pytest.approx(0.0, abs=1e-6)


def test_slew_macro_points_the_satellite():
    base = SatelliteEnv(num_envs=3, seed=0, max_target_angle=1.0)
    env = TransformedEnv(base, MacroPrimitiveTransform(SatelliteMacroAction, max_duration=100))
    td = env.reset()
    start = base.attitude_error_angle()
    for _ in range(2):
        td = env.step(td.set("action", torch.tensor([[0.0, 0.0, 0.0, 1.0]] * 3)))["next"]
    assert (base.attitude_error_angle() < 0.2 * start).all()
    assert (base.attitude_error_angle() < 0.2).all()


def test_humanoid_posture_macro_moves_the_joints():
    env = TransformedEnv(
        HumanoidEnv(num_envs=2, seed=0, terminate_when_unhealthy=False),
        MacroPrimitiveTransform(HumanoidMacroAction, max_duration=40),
    )
    assert env.action_spec.shape == (2, 18)
    td = env.reset()
    flat = torch.zeros(2, 18)
    flat[:, -1] = 1.0
    macro = HumanoidMacroAction.from_flat(flat, td, env.base_env, 40)
    before = macro.error(td, env.base_env)
    after = macro.error(env.step(td.set("action", flat))["next"], env.base_env)
    assert (after < 0.7 * before).all()
