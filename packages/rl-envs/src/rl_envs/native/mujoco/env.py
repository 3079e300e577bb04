"""MujocoEnv: a batch of MuJoCo simulations as one env; subclasses describe the task.

The physics runs in MuJoCo (one ``MjData`` per env, see :class:`MujocoSimulation`); the task's
observation, reward and termination are vectorised NumPy over the batch, written as Gymnasium
writes them for one env, so that both give the same numbers for the same states and actions.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from tdict import TensorDict, TensorDictBase
from tdict.seeding import make_generator
from tdict.specs import Bounded, Categorical, Composite, Unbounded
from tdict.validation import check_int, check_positive_int

from ..._mujoco_gl import render_error
from ...env_base import EnvBase
from .assets import resolve_xml
from .simulation import MujocoSimulation, _mujoco

__all__ = ["MujocoEnv"]

State = dict[str, np.ndarray]
_BACKENDS = ("mujoco", "mjx")


class MujocoEnv(EnvBase):
    """``num_envs`` independent simulations of one MuJoCo model, stepped together.

    A task subclasses it and fills in :meth:`_observation`, :meth:`_reward` and, if its initial
    states are not the model's ``qpos0``/``qvel0`` plus uniform noise, :meth:`_initial_state`
    (:meth:`_episode_started` draws per-episode task data, :meth:`_load_model` builds a model of its
    own instead of loading ``default_xml``); the class attributes give its defaults (model file,
    frame skip, noise, time limit) and the ``MjData`` fields it reads (``data_fields``). The env's
    batch size is ``[num_envs]``. A tutorial: "A MuJoCo task of your own" in the documentation.

    Keys: ``"observation"`` (``dtype``), ``"action"`` (float32, the actuators' control range),
    ``"reward"``, and ``"done"`` / ``"terminated"`` / ``"truncated"`` (the time limit). With
    ``from_pixels``: ``"pixels"`` (uint8, ``[num_envs, height, width, 3]``). A ``"_reset"`` mask
    resets only the selected envs; ``reset(TensorDict(qpos=..., qvel=...))`` starts episodes from
    the given states instead of random ones (branching: :meth:`physics_state` reads them).

    Args:
        xml_path: the model file (default: the task's, from the installed package that ships it).
        backend: the simulator: ``"mujoco"`` (the official bindings, float64) or ``"mjx"`` (MJX:
            every env in one jitted JAX call, in ``dtype``'s precision, on JAX's default device;
            frames rendered from the state copied back; see :class:`MjxSimulation`; ``pip install
            rl-envs[mjx]``). A task reading a field MJX does not compute raises a ValueError. MJX's
            physics equals MuJoCo's within its precision for HalfCheetah, Hopper and
            InvertedPendulum (tested); Ant's contacts (geoms with a margin) already differ at the
            first contact, so Ant and Humanoid under MJX are MJX's own tasks, not Gymnasium's.
        num_envs: the number of simulations.
        device: where the output tensors go (``"mujoco"`` runs the physics on the CPU).
        seed: seeds the initial-state sampling.
        frame_skip: physics steps per env step (default: the task's).
        reset_noise_scale: the scale of the initial-state noise (default: the task's).
        max_episode_steps: steps before ``truncated`` (default: the task's Gymnasium time limit;
            ``0``: none).
        from_pixels: add rendered frames under ``"pixels"`` (MuJoCo's offscreen OpenGL: set
            ``MUJOCO_GL=egl`` or ``osmesa`` on a machine without a display).
        pixels_only: with ``from_pixels``, leave ``"observation"`` out.
        render_width, render_height: the frame size.
        camera_id: the camera rendered (``-1``: the free camera).
        num_threads: threads stepping the simulations.
        dtype: the dtype of observations and rewards (``torch.float64``: Gymnasium's values exactly).
    """

    default_xml: tuple[str, str] | None = None
    default_frame_skip: int = 1
    default_reset_noise_scale: float = 0.0
    default_max_episode_steps: int = 1000
    data_fields: tuple[str, ...] = ()

    def __init__(
        self,
        xml_path: str | os.PathLike | None = None,
        backend: str = "mujoco",
        num_envs: int = 1,
        device: Any = None,
        seed: int | None = None,
        frame_skip: int | None = None,
        reset_noise_scale: float | None = None,
        max_episode_steps: int | None = None,
        from_pixels: bool = False,
        pixels_only: bool = False,
        render_width: int = 64,
        render_height: int = 64,
        camera_id: int = -1,
        num_threads: int = 1,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        owner = type(self).__name__
        if backend not in _BACKENDS:
            raise ValueError(f"{owner}: backend must be one of {list(_BACKENDS)}, got {backend!r}.")
        num_envs = check_positive_int(owner, "num_envs", num_envs)
        skip: int = check_positive_int(owner, "frame_skip", frame_skip, allow_none=True) or self.default_frame_skip
        limit = check_int(owner, "max_episode_steps", max_episode_steps, minimum=0, allow_none=True)
        noise = self.default_reset_noise_scale if reset_noise_scale is None else reset_noise_scale
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or noise < 0:
            raise ValueError(f"{owner}: reset_noise_scale must be a float >= 0, got {reset_noise_scale!r}.")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"{owner}: dtype must be torch.float32 or torch.float64, got {dtype!r}.")
        if pixels_only and not from_pixels:
            raise ValueError(f"{owner}: pixels_only=True needs from_pixels=True.")
        render_width = check_positive_int(owner, "render_width", render_width)
        render_height = check_positive_int(owner, "render_height", render_height)
        camera_id = check_int(owner, "camera_id", camera_id, minimum=-1)
        mujoco = _mujoco()
        model = (
            self._load_model(mujoco, owner)
            if xml_path is None
            else mujoco.MjModel.from_xml_path(resolve_xml(xml_path, None, owner))
        )
        if camera_id >= model.ncam:
            raise ValueError(
                f"{owner}: camera_id must be -1 or below the model's {model.ncam} cameras, got {camera_id}."
            )
        super().__init__(device=device, batch_size=[num_envs])
        self.model = model
        self.frame_skip = skip
        self.dt = float(model.opt.timestep) * skip
        self.reset_noise_scale = float(noise)
        self.max_episode_steps = self.default_max_episode_steps if limit is None else limit
        self.from_pixels, self.pixels_only = bool(from_pixels), bool(pixels_only)
        self.render_size, self.camera_id = (render_height, render_width), camera_id
        self.dtype = dtype
        self.init_qpos, self.init_qvel = model.qpos0.copy(), np.zeros(model.nv)
        self._sim = self._simulation(backend, model, num_envs, num_threads)
        self._rng = make_generator(seed, owner=owner)
        self._renderer: Any = None
        self._elapsed = np.zeros(num_envs, dtype=np.int64)
        self._state = self._sim.read()
        self._make_specs(self._observation(self._state).shape[-1])

    def _simulation(self, backend: str, model: Any, num_envs: int, num_threads: int) -> Any:
        if backend == "mjx":
            from .mjx_simulation import MjxSimulation

            try:
                return MjxSimulation(model, num_envs, self.data_fields, num_threads=num_threads, dtype=self.dtype)
            except ValueError as err:
                raise ValueError(f"{type(self).__name__}: {err}") from err
        return MujocoSimulation(model, num_envs, self.data_fields, num_threads=num_threads)

    # ------------------------------------------------------------------ the task (subclasses)
    def _load_model(self, mujoco: Any, owner: str) -> Any:
        """The task's default model (``default_xml``); a task that generates its model overrides this."""
        return mujoco.MjModel.from_xml_path(resolve_xml(None, self.default_xml, owner))

    def _initial_state(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` initial ``(qpos, qvel)``: the model's plus uniform noise of ``reset_noise_scale``."""
        return self.init_qpos + self._uniform(n, self.model.nq), self.init_qvel + self._uniform(n, self.model.nv)

    def _episode_started(self, indices: np.ndarray) -> None:
        """Called after the envs ``indices`` were reset: draw per-episode task data (a target...) here."""

    def _observation(self, state: State) -> np.ndarray:
        """The ``[n, obs_dim]`` observations of ``state`` (``qpos``, ``qvel`` and ``data_fields``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _observation(state).")

    def _reward(self, before: State, after: State, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(reward, terminated)`` of the step from ``before`` to ``after`` under ``action`` (float32)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _reward(before, after, action).")

    # ------------------------------------------------------------------ sampling helpers
    def _uniform(self, n: int, size: int, scale: float | None = None) -> np.ndarray:
        scale = self.reset_noise_scale if scale is None else scale
        out = torch.empty(n, size, dtype=torch.float64)
        return out.uniform_(-scale, scale, generator=self._rng).numpy()

    def _normal(self, n: int, size: int) -> np.ndarray:
        return torch.empty(n, size, dtype=torch.float64).normal_(generator=self._rng).numpy()

    # ------------------------------------------------------------------ the env contract
    def _make_specs(self, obs_dim: int) -> None:
        shape, device = self.batch_size, self.device
        observation = {}
        if not self.pixels_only:
            observation["observation"] = Unbounded(shape=(*shape, obs_dim), dtype=self.dtype, device=device)
        if self.from_pixels:
            height, width = self.render_size
            observation["pixels"] = Bounded(0, 255, shape=(*shape, height, width, 3), dtype=torch.uint8, device=device)
        self.observation_spec = Composite(observation, shape=shape)
        low, high = torch.from_numpy(self.model.actuator_ctrlrange.astype(np.float32)).unbind(-1)
        nu = self.model.nu
        self.action_spec = Bounded(low.expand(*shape, nu), high.expand(*shape, nu), shape=(*shape, nu), device=device)
        self.reward_spec = Unbounded(shape=shape, dtype=self.dtype, device=device)
        flag = Categorical(2, shape=shape, dtype=torch.bool, device=device)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=shape)

    def _tensor(self, array: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.from_numpy(array).to(device=self.device, dtype=dtype or self.dtype)

    def _output(self, extra: dict[str, torch.Tensor]) -> TensorDict:
        out = dict(extra)
        if not self.pixels_only:
            out["observation"] = self._tensor(self._observation(self._state))
        if self.from_pixels:
            out["pixels"] = self._render()
        return TensorDict.unchecked(out, self.batch_size, self.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDict:
        if kwargs:
            raise TypeError(f"{type(self).__name__}.reset: unexpected keyword arguments {sorted(kwargs)}.")
        n = self.batch_size[0]
        mask = tensordict.get("_reset", None) if tensordict is not None else None
        indices = np.arange(n) if mask is None else np.flatnonzero(mask.reshape(n).cpu().numpy())
        qpos, qvel = self._given_state(tensordict, indices)
        if qpos is None or qvel is None:
            qpos, qvel = self._initial_state(len(indices))
        fresh = self._sim.set_state(indices, qpos, qvel)
        for field, array in self._state.items():
            array[indices] = fresh[field]
        self._elapsed[indices] = 0
        self._episode_started(indices)
        done = torch.zeros(n, dtype=torch.bool, device=self.device)
        return self._output({"done": done, "terminated": done.clone(), "truncated": done.clone()})

    def _given_state(
        self, tensordict: TensorDictBase | None, indices: np.ndarray
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        if tensordict is None or ("qpos" not in tensordict.keys() and "qvel" not in tensordict.keys()):
            return None, None
        arrays = []
        for key, size in (("qpos", self.model.nq), ("qvel", self.model.nv)):
            value = tensordict.get(key, None)
            expected = (*self.batch_size, size)
            if value is None or tuple(value.shape) != expected:
                raise ValueError(
                    f"{type(self).__name__}.reset: a state to start from needs both 'qpos' and 'qvel'; expected {key!r} "
                    f"of shape {list(expected)}, got {None if value is None else list(value.shape)}."
                )
            arrays.append(value.detach().to("cpu", torch.float64).numpy()[indices])
        return arrays[0], arrays[1]

    def _step(self, tensordict: TensorDictBase) -> TensorDict:
        action = tensordict.get("action").detach().to("cpu", torch.float32).numpy()
        before = self._state
        self._state = after = self._sim.step(action, self.frame_skip)
        reward, terminated = self._reward(before, after, action)
        self._elapsed += 1
        limit = self.max_episode_steps
        truncated = self._elapsed >= limit if limit else np.zeros(len(self._elapsed), dtype=bool)
        terminated_t = torch.from_numpy(np.asarray(terminated, dtype=bool)).to(self.device)
        truncated_t = torch.from_numpy(truncated).to(self.device)
        return self._output(
            {
                "reward": self._tensor(np.asarray(reward, dtype=np.float64)),
                "done": terminated_t | truncated_t,
                "terminated": terminated_t,
                "truncated": truncated_t,
            }
        )

    def physics_state(self) -> TensorDict:
        """The current ``qpos`` and ``qvel`` (float64, ``[num_envs, nq]`` / ``[num_envs, nv]``).

        ``reset(env.physics_state())`` starts new episodes from these states (branching).
        """
        qpos, qvel = self._state["qpos"].copy(), self._state["qvel"].copy()
        return TensorDict.unchecked(
            {"qpos": torch.from_numpy(qpos), "qvel": torch.from_numpy(qvel)}, self.batch_size, torch.device("cpu")
        )

    # ------------------------------------------------------------------ pixels
    def _render(self) -> torch.Tensor:
        mujoco = self._sim._mujoco
        if self._renderer is None:
            height, width = self.render_size
            try:
                self._renderer = mujoco.Renderer(self.model, height=height, width=width)
            except Exception as err:  # GL errors come in many types (mujoco, PyOpenGL, ctypes)
                raise render_error(type(self).__name__, err) from err
        frames = np.empty((self.batch_size[0], *self.render_size, 3), dtype=np.uint8)
        for i, data in enumerate(self._sim.data):
            self._renderer.update_scene(data, camera=self.camera_id)
            frames[i] = self._renderer.render()
        return torch.from_numpy(frames).to(self.device)

    def _set_seed(self, seed: int | None) -> None:
        self._rng = make_generator(seed, owner=type(self).__name__)

    def close(self, *, raise_if_closed: bool = False) -> None:
        """Stops the stepping threads and frees the renderer."""
        self._sim.close()
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
