"""backend="mjx": step for step against backend="mujoco" from identical states, resets, specs, errors.

MJX compiles each (task, dtype, frame_skip) once, slowly on the CPU: the envs are built once per
module and shared. Tolerances: float64 (x64 scoped to the simulation) 1e-6, measured about 1e-8
after 20 steps; float32 1e-4, measured about 1e-5 (Hopper, InvertedPendulum). HalfCheetah in
float32 is compared one step at a time from the same states: its contacts amplify float32 rounding
to order 1 over 20 steps.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

mujoco = pytest.importorskip("mujoco")
pytest.importorskip("gymnasium")
pytest.importorskip("mujoco.mjx")

from rl_envs import check_env_specs  # noqa: E402
from rl_envs.native.mujoco import HalfCheetahEnv, HopperEnv, InvertedPendulumEnv, MujocoEnv  # noqa: E402
from rl_envs.native.mujoco.mjx_simulation import MjxSimulation  # noqa: E402

N = 3
TASKS = {"HalfCheetah": HalfCheetahEnv, "Hopper": HopperEnv, "InvertedPendulum": InvertedPendulumEnv}
ATOL = {torch.float32: 1e-4, torch.float64: 1e-6}
_ENVS: dict = {}


@pytest.fixture(scope="module")
def pair():
    """``pair(name, dtype)``: the (mujoco, mjx) envs of that task, built once per module."""

    def get(name, dtype):
        if (name, dtype) not in _ENVS:
            make = TASKS[name]
            _ENVS[name, dtype] = (
                make(num_envs=N, seed=1, dtype=dtype),
                make(num_envs=N, seed=1, dtype=dtype, backend="mjx"),
            )
        return _ENVS[name, dtype]

    yield get
    _ENVS.clear()


def _actions(env, steps: int, seed: int) -> torch.Tensor:
    low, high = env.action_spec.space.low[0], env.action_spec.space.high[0]
    gen = torch.Generator().manual_seed(seed)
    return (low + (high - low) * torch.rand((steps, *env.action_spec.shape), generator=gen)).to(torch.float32)


def _assert_close(a, b, atol, msg):
    torch.testing.assert_close(b["observation"], a["observation"], rtol=0, atol=atol, msg=msg)
    if "reward" in a.keys():
        torch.testing.assert_close(b["reward"], a["reward"], rtol=0, atol=atol, msg=msg)
        for key in ("terminated", "truncated", "done"):
            assert torch.equal(a[key], b[key]), (key, msg)


@pytest.mark.parametrize(
    "name, dtype",
    [("Hopper", torch.float32), ("InvertedPendulum", torch.float32), ("HalfCheetah", torch.float64)],
)
def test_equals_mujoco_from_identical_states(pair, name, dtype):
    """Same qpos/qvel, same actions, 20 steps: observations, rewards and flags within ATOL[dtype]."""
    ours, theirs = pair(name, dtype)
    td = ours.reset()
    tx = theirs.reset(ours.physics_state())
    _assert_close(td, tx, ATOL[dtype], f"{name} reset")
    for t, action in enumerate(_actions(ours, 20, seed=2)):
        td = ours.step(td.set("action", action))["next"]
        tx = theirs.step(tx.set("action", action))["next"]
        _assert_close(td, tx, ATOL[dtype], f"{name} t={t}")
    assert tx["observation"].dtype == dtype and tx["reward"].dtype == dtype


def test_halfcheetah_float32_step_by_step(pair):
    """float32 HalfCheetah: each step from the same state (both reset to the mujoco backend's) agrees."""
    ours, theirs = pair("HalfCheetah", torch.float32)
    td = ours.reset()
    for t, action in enumerate(_actions(ours, 20, seed=3)):
        state = ours.physics_state()
        td, tx = ours.reset(state), theirs.reset(state)
        td = ours.step(td.set("action", action))["next"]
        tx = theirs.step(tx.set("action", action))["next"]
        _assert_close(td, tx, 1e-3, f"t={t}")


def test_partial_reset_and_branching(pair):
    """Masked resets (random and from given states) keep both backends in step; branching repeats."""
    ours, theirs = pair("Hopper", torch.float32)
    td, tx = ours.reset(), None
    tx = theirs.reset(ours.physics_state())
    actions = _actions(ours, 6, seed=4)
    for action in actions[:3]:
        td = ours.step(td.set("action", action))["next"]
        tx = theirs.step(tx.set("action", action))["next"]
    before = theirs.physics_state()
    assert before["qpos"].dtype == torch.float64 and before["qpos"].shape == (N, 6)
    mask = torch.tensor([True, False, True])
    # random initial states: the same seed draws the same ones in both backends
    ours._set_seed(5)
    theirs._set_seed(5)
    td = ours.reset(td.clone().set("_reset", mask))
    tx = theirs.reset(tx.clone().set("_reset", mask))
    after = theirs.physics_state()
    assert torch.equal(after["qpos"][~mask], before["qpos"][~mask])
    torch.testing.assert_close(after["qpos"], ours.physics_state()["qpos"], rtol=0, atol=1e-4)
    _assert_close(td, tx, 1e-4, "partial reset")
    # from given states, one env only
    given = ours.physics_state().apply(lambda x: x + 0.01)
    one = torch.tensor([False, True, False])
    td = ours.reset(given.clone().set("_reset", one))
    tx = theirs.reset(given.clone().set("_reset", one))
    assert torch.equal(theirs.physics_state()["qpos"][1].float(), given["qpos"][1].float())
    for action in actions[3:]:
        td = ours.step(td.set("action", action))["next"]
        tx = theirs.step(tx.set("action", action))["next"]
        _assert_close(td, tx, 1e-4, "after partial resets")
    # branching: the same state and actions twice give the same trajectory
    start = theirs.physics_state()
    runs = []
    for _ in range(2):
        tx = theirs.reset(start.clone())
        runs.append(torch.stack([theirs.step(tx.set("action", a))["next", "observation"] for a in actions[:3]]))
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("name", ["Hopper", "InvertedPendulum"])
def test_specs_equal_the_mujoco_backend(pair, name):
    ours, theirs = pair(name, torch.float32)
    for attr in ("observation_spec", "action_spec", "reward_spec", "done_spec"):
        assert getattr(theirs, attr) == getattr(ours, attr), attr
    assert theirs.batch_size == ours.batch_size == torch.Size([N]) and theirs.dt == ours.dt
    check_env_specs(theirs)


def test_rendering_data_follows_the_state(pair):
    """``sim.data`` (what ``from_pixels`` renders) holds MJX's state, copied back into MjData."""
    _, theirs = pair("Hopper", torch.float32)
    theirs.reset()
    data = theirs._sim.data
    assert len(data) == N and isinstance(data[0], mujoco.MjData)
    np.testing.assert_allclose(np.stack([d.qpos for d in data]), theirs.physics_state()["qpos"].numpy())
    assert data[0].xpos[1].any()  # mj_forward ran: positions of the bodies
    env = HopperEnv(num_envs=2, backend="mjx", from_pixels=True, render_width=32, render_height=24)
    try:
        td = env.reset()
    except RuntimeError as err:
        assert "MUJOCO_GL" in str(err)
        return
    assert td["pixels"].shape == (2, 24, 32, 3) and td["pixels"].float().std() > 0


class _Damped(HalfCheetahEnv):
    data_fields = ("qfrc_damper",)


class _PGS(MujocoEnv):
    def _load_model(self, mujoco, owner):
        return mujoco.MjModel.from_xml_string(
            "<mujoco><option solver='PGS'/><worldbody><body><joint name='x' type='slide'/><geom size='.1'/></body>"
            "</worldbody><actuator><motor joint='x'/></actuator></mujoco>"
        )


def test_clear_errors():
    with pytest.raises(ValueError, match=r"backend must be one of \['mujoco', 'mjx'\], got 'jax'"):
        HopperEnv(backend="jax")
    with pytest.raises(ValueError, match=r"_Damped: backend='mjx' cannot compute the MjData fields \['qfrc_damper'\]"):
        _Damped(backend="mjx")
    with pytest.raises(ValueError, match="_PGS: backend='mjx' does not support this model: .*PGS"):
        _PGS(backend="mjx")
    model = HopperEnv().model
    with pytest.raises(ValueError, match=r"\['nope'\] are not array fields of mujoco.MjData"):
        MjxSimulation(model, 2, fields=("nope",))
    sim = MjxSimulation(model, 2)
    with pytest.raises(ValueError, match="expected qpos of shape"):
        sim.set_state(np.arange(2), np.zeros((2, 3)), np.zeros((2, model.nv)))
    with pytest.raises(ValueError, match="dtype must be torch.float32 or torch.float64"):
        MjxSimulation(model, 2, dtype=torch.float16)


def test_x64_stays_scoped(pair):
    """A float64 mjx env leaves JAX's global default (float32) alone."""
    import jax

    pair("HalfCheetah", torch.float64)
    assert not jax.config.read("jax_enable_x64")
    assert jax.numpy.zeros(1).dtype == jax.numpy.float32
