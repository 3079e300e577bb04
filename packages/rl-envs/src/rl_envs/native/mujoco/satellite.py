"""SatelliteEnv: attitude control of a spacecraft with control moment gyroscopes, a MuJoCo task of our own.

The "write your own MuJoCo task" example: the model is generated here (a free-floating bus carrying
``num_cmgs`` gimbals, each holding a spinning rotor), the task is four hooks of :class:`MujocoEnv`.
MuJoCo's multibody dynamics supply the gyroscopic torques: turning a gimbal tilts its rotor's
angular momentum and the bus turns the other way.
"""

from __future__ import annotations

import math

import numpy as np

from .env import MujocoEnv, State

__all__ = ["SatelliteEnv", "cmg_geometry", "quaternion_multiply", "satellite_xml"]

PYRAMID_SKEW = math.acos(1 / math.sqrt(3))  # 54.74 deg between each gimbal axis and +z (the usual skew angle)


def cmg_geometry(num_cmgs: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Gimbal axes ``g`` and rotor spin axes ``s0`` at zero gimbal angle (``[num_cmgs, 3]`` each, bus frame).

    ``"pyramid"``: gimbal axes normal to the faces of a pyramid with the usual skew angle (54.74°
    from ``+z``), equally spaced in azimuth, spins tangent to the base circle. ``"orthogonal"`` (6 CMGs): two gimbals on each body
    axis, spinning in opposite directions. Both layouts start with zero total angular momentum.

    Examples:
        >>> g, s0 = cmg_geometry(4, "pyramid")
        >>> bool(np.allclose((g * s0).sum(1), 0)), bool(np.allclose(s0.sum(0), 0))
        (True, True)
    """
    if layout == "pyramid":
        if num_cmgs < 3:
            raise ValueError(f"cmg_geometry: a pyramid needs num_cmgs >= 3, got {num_cmgs}.")
        azimuth = 2 * math.pi * np.arange(num_cmgs) / num_cmgs
        sin_b, cos_b = math.sin(PYRAMID_SKEW), math.cos(PYRAMID_SKEW)
        gimbal = np.stack([sin_b * np.cos(azimuth), sin_b * np.sin(azimuth), np.full(num_cmgs, cos_b)], 1)
        spin = np.stack([-np.sin(azimuth), np.cos(azimuth), np.zeros(num_cmgs)], 1)
        return gimbal, spin
    if layout == "orthogonal":
        if num_cmgs != 6:
            raise ValueError(f"cmg_geometry: the orthogonal layout has 6 CMGs, got num_cmgs={num_cmgs}.")
        eye = np.eye(3)
        gimbal = np.repeat(eye, 2, axis=0)
        spin = np.stack([sign * eye[(axis + 1) % 3] for axis in range(3) for sign in (1.0, -1.0)])
        return gimbal, spin
    raise ValueError(f"cmg_geometry: layout must be 'pyramid' or 'orthogonal', got {layout!r}.")


def satellite_xml(
    gimbal_axes: np.ndarray, spin_axes: np.ndarray, bus_mass: float = 50.0, rotor_mass: float = 2.0
) -> str:
    """The MJCF model: a 1 m cubic bus (no gravity, no contacts) with one gimbal + rotor per CMG.

    Gimbals are driven by velocity actuators (``ctrl``: gimbal rate in rad/s, within ±1); rotors
    turn freely on their axes (their spin is set at reset and kept by the dynamics). Runge-Kutta 4
    at 5 ms keeps the total angular momentum to about 1e-5 of a rotor's over 5 s of slewing
    (semi-implicit Euler drifts by 1%: the rotors spin at 100 rad/s). With no contacts, 1 MB of
    MuJoCo arena per simulation is plenty (MuJoCo's default for this model reserves 14 MB).
    """

    def vec(v: np.ndarray) -> str:
        return " ".join(f"{x:.9g}" for x in v)

    cmgs, actuators = [], []
    for i, (g, s) in enumerate(zip(gimbal_axes, spin_axes)):
        cmgs.append(
            f"""
      <body name="gimbal{i}" pos="{vec(0.3 * g)}">
        <joint name="gimbal{i}" type="hinge" axis="{vec(g)}" armature="0.01"/>
        <geom type="sphere" size="0.04" mass="0.5" rgba=".6 .6 .6 1"/>
        <body name="rotor{i}">
          <joint name="rotor{i}" type="hinge" axis="{vec(s)}"/>
          <geom type="cylinder" size="0.14 0.02" zaxis="{vec(s)}" mass="{rotor_mass}" rgba=".9 .5 .1 1"/>
        </body>
      </body>"""
        )
        actuators.append(
            f'    <velocity name="gimbal{i}" joint="gimbal{i}" kv="10" ctrlrange="-1 1" ctrllimited="true"/>'
        )
    return f"""<mujoco model="satellite">
  <option timestep="0.005" gravity="0 0 0" integrator="RK4"/>
  <size memory="1M"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <light pos="0 0 5" dir="0 0 -1"/>
    <camera name="side" pos="3 -3 2" xyaxes="1 1 0 -0.3 0.3 1"/>
    <body name="bus">
      <freejoint name="bus"/>
      <geom type="box" size=".5 .5 .5" mass="{bus_mass}" rgba=".8 .8 .9 1"/>
      <geom type="box" size="1.2 .5 .01" pos="0 0 0" mass="0.01" rgba=".2 .3 .8 1"/>{"".join(cmgs)}
    </body>
  </worldbody>
  <actuator>
{chr(10).join(actuators)}
  </actuator>
</mujoco>
"""


def quaternion_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The Hamilton products ``a ⊗ b`` of ``[..., 4]`` quaternions ``(w, x, y, z)``."""
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        -1,
    )


class SatelliteEnv(MujocoEnv):
    """Point a spacecraft at a random target attitude by turning the gimbals of its CMGs.

    Each episode draws a target attitude (uniform over rotations, or within ``max_target_angle`` of
    the start) and starts at rest in the identity attitude, gimbals near zero, rotors spinning at
    ``rotor_speed``. The action is the gimbals' rates (rad/s, within ±1).

    Observation (``8 + 3 num_cmgs``): the attitude error quaternion ``conj(target) ⊗ attitude``
    (sign chosen with ``w >= 0``), the body rates (body frame), the sines, cosines and rates of the
    gimbal angles, and the cluster's manipulability ``sqrt(det(A Aᵀ))`` (``A``: the unit torque
    directions of the CMGs; 0 at a singular configuration, where some torque cannot be produced).

    Reward: ``-(attitude_weight * error angle + ctrl_cost_weight * |action|² + rate_weight *
    |body rates|² + singularity_weight * max(0, 1 - manipulability / singularity_threshold))``.
    Never terminates; truncated after ``max_episode_steps`` (200 steps of 0.1 s).

    Args:
        num_cmgs: 4 (pyramid) or 6 (pyramid or orthogonal).
        layout: ``"pyramid"`` or ``"orthogonal"`` (default: pyramid for 4, orthogonal for 6).
        rotor_speed: the rotors' spin (rad/s).
        max_target_angle: the largest target rotation (rad; ``math.pi``: any attitude).
        *args, **kwargs: :class:`MujocoEnv`'s (``num_envs``, ``seed``...; ``xml_path`` is generated).

    Examples:
        >>> env = SatelliteEnv(num_cmgs=4, num_envs=2, seed=0)
        >>> rollout = env.rollout(3)
        >>> rollout["observation"].shape, env.action_spec.shape
        (torch.Size([2, 3, 20]), torch.Size([2, 4]))
    """

    default_frame_skip = 20
    default_reset_noise_scale = 0.01
    default_max_episode_steps = 200

    def __init__(
        self,
        num_cmgs: int = 4,
        layout: str | None = None,
        *,
        rotor_speed: float = 100.0,
        max_target_angle: float = math.pi,
        attitude_weight: float = 1.0,
        ctrl_cost_weight: float = 0.01,
        rate_weight: float = 0.1,
        singularity_weight: float = 0.5,
        singularity_threshold: float = 0.3,
        **kwargs,
    ) -> None:
        if num_cmgs not in (4, 6):
            raise ValueError(f"SatelliteEnv: num_cmgs must be 4 or 6, got {num_cmgs!r}.")
        layout = layout or ("pyramid" if num_cmgs == 4 else "orthogonal")
        if "xml_path" in kwargs:
            raise TypeError("SatelliteEnv: the model is generated from num_cmgs and layout; xml_path is not accepted.")
        if not 0 < max_target_angle <= math.pi:
            raise ValueError(f"SatelliteEnv: max_target_angle must be in (0, pi], got {max_target_angle!r}.")
        self.num_cmgs, self.layout = num_cmgs, layout
        self.gimbal_axes, self.spin_axes = cmg_geometry(num_cmgs, layout)
        self.rotor_speed, self.max_target_angle = float(rotor_speed), float(max_target_angle)
        self.attitude_weight, self.ctrl_cost_weight = attitude_weight, ctrl_cost_weight
        self.rate_weight, self.singularity_weight = rate_weight, singularity_weight
        self.singularity_threshold = singularity_threshold
        self._xml = satellite_xml(self.gimbal_axes, self.spin_axes)
        self._target = np.tile([1.0, 0.0, 0.0, 0.0], (kwargs.get("num_envs", 1), 1))
        # the joints in tree order: the bus's free joint (7 qpos, 6 dofs), then gimbal i and rotor i
        self._gimbal_qpos = 7 + 2 * np.arange(num_cmgs)
        self._gimbal_dof, self._rotor_dof = 6 + 2 * np.arange(num_cmgs), 7 + 2 * np.arange(num_cmgs)
        super().__init__(**kwargs)
        model = self.model
        assert list(model.jnt_qposadr[1::2]) == list(self._gimbal_qpos), "unexpected joint layout"
        rotor = model.body("rotor0")
        # spin inertia: the rotor's principal inertia about its own axis (the cylinder's axis)
        self.rotor_momentum = float(rotor.inertia.max()) * self.rotor_speed

    def _load_model(self, mujoco, owner: str):
        return mujoco.MjModel.from_xml_string(self._xml)

    @property
    def target(self) -> np.ndarray:
        """The current target attitudes (``[num_envs, 4]`` quaternions)."""
        return self._target.copy()

    # ------------------------------------------------------------------ the task
    def _initial_state(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        qpos = np.tile(self.init_qpos, (n, 1))
        qpos[:, self._gimbal_qpos] += self._uniform(n, self.num_cmgs)
        qvel = np.zeros((n, self.model.nv))
        qvel[:, 3:6] = self._uniform(n, 3)
        qvel[:, self._rotor_dof] = self.rotor_speed
        return qpos, qvel

    def _episode_started(self, indices: np.ndarray) -> None:
        n = len(indices)
        axis = self._normal(n, 3)
        axis /= np.linalg.norm(axis, axis=1, keepdims=True)
        if self.max_target_angle >= math.pi:  # uniform over rotations: a normalised Gaussian quaternion
            quat = self._normal(n, 4)
            quat /= np.linalg.norm(quat, axis=1, keepdims=True)
        else:  # a uniform angle below the bound about a uniform axis
            angle = (self._uniform(n, 1, 0.5) + 0.5) * self.max_target_angle
            quat = np.concatenate([np.cos(angle / 2), np.sin(angle / 2) * axis], 1)
        self._target[indices] = quat * np.where(quat[:, :1] < 0, -1.0, 1.0)

    def attitude_error(self, state: State) -> np.ndarray:
        """``conj(target) ⊗ attitude`` with ``w >= 0`` (``[n, 4]``; identity when on target)."""
        conjugate = self._target * np.array([1.0, -1.0, -1.0, -1.0])
        error = quaternion_multiply(conjugate, state["qpos"][:, 3:7])
        return error * np.where(error[:, :1] < 0, -1.0, 1.0)

    def attitude_error_angle(self) -> np.ndarray:
        """Each env's current angle to its target attitude (rad, ``[num_envs]``)."""
        return 2 * np.arccos(np.clip(self.attitude_error(self._state)[:, 0], -1.0, 1.0))

    def torque_directions(self, gimbal_angles: np.ndarray) -> np.ndarray:
        """The CMGs' unit torque directions ``A`` (``[n, 3, num_cmgs]``) at ``gimbal_angles`` (``[n, num_cmgs]``).

        Turning gimbal ``i`` at rate ``d`` changes the cluster's momentum by ``h d A[:, i]``
        (``h = rotor_momentum``); the bus feels the opposite torque.
        """
        cos, sin = np.cos(gimbal_angles)[..., None], np.sin(gimbal_angles)[..., None]
        s0, t0 = self.spin_axes, np.cross(self.gimbal_axes, self.spin_axes)
        return np.swapaxes(cos * t0 - sin * s0, -1, -2)

    def manipulability(self, gimbal_angles: np.ndarray) -> np.ndarray:
        """``sqrt(det(A Aᵀ))`` of :meth:`torque_directions` (``[n]``)."""
        a = self.torque_directions(gimbal_angles)
        return np.sqrt(np.clip(np.linalg.det(a @ np.swapaxes(a, -1, -2)), 0, None))

    def _observation(self, state: State) -> np.ndarray:
        gimbal = state["qpos"][:, self._gimbal_qpos]
        return np.concatenate(
            [
                self.attitude_error(state),
                state["qvel"][:, 3:6],
                np.sin(gimbal),
                np.cos(gimbal),
                state["qvel"][:, self._gimbal_dof],
                self.manipulability(gimbal)[:, None],
            ],
            axis=1,
        )

    def _reward(self, before: State, after: State, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        error_angle = 2 * np.arccos(np.clip(self.attitude_error(after)[:, 0], -1.0, 1.0))  # after: the new state
        rates = np.square(after["qvel"][:, 3:6]).sum(1)
        closeness = self.manipulability(after["qpos"][:, self._gimbal_qpos]) / self.singularity_threshold
        cost = (
            self.attitude_weight * error_angle
            + self.ctrl_cost_weight * np.square(action).sum(1)
            + self.rate_weight * rates
            + self.singularity_weight * np.clip(1 - closeness, 0, None)
        )
        return -cost, np.zeros(len(cost), dtype=bool)
