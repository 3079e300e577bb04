"""DeepMind Control Suite wrappers: DMControlWrapper (wraps a dm_control env), DMControlEnv (loads one).

dm_control is imported only when these classes are used (``pip install rl-envs[dm-control]``).
Names and semantics follow TorchRL 0.14 (``torchrl.envs.DMControlEnv``/``DMControlWrapper``), with
this library's data contract:

- ``"reward"``, ``"done"``, ``"terminated"`` and ``"truncated"`` have the batch shape (``[]``), no
  trailing dim (TorchRL: ``[1]``).
- Episodes of the suite end at their time limit: that last step is ``truncated=True,
  terminated=False`` (dm_env's discount is 1 there, the value may be bootstrapped). A task that ends
  the episode itself (``TimeStep.last()`` with ``discount == 0``) gives ``terminated=True,
  truncated=False``. TorchRL reports these episodes as never done; here the time limit is visible.

Dtypes and shapes are dm_env's, as in TorchRL: the suite's float64 observations, action and reward
stay float64 (append ``DoubleToFloat`` to work in float32), and a scalar observation (walker's
``"height"``...) gets shape ``[1]``.

Rendering (``from_pixels``) uses MuJoCo's OpenGL backend from ``MUJOCO_GL``, read when mujoco is
first imported. When that variable is unset and there is no display, importing this module sets it
to ``"egl"`` (headless rendering); set ``MUJOCO_GL=osmesa`` for software rendering. A failed first
render raises a ``RuntimeError`` with that hint.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, cast

import torch
from tdict import TensorDict, TensorDictBase
from tdict.specs import Bounded, Categorical, Composite, TensorSpec, Unbounded

from .._mujoco_gl import render_error
from ..env_base import EnvBase

if TYPE_CHECKING:
    import numpy as np
else:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - dm_control brings numpy; _dm_control() raises the install hint first
        np = None

__all__ = ["DMControlEnv", "DMControlWrapper"]

_from_numpy = torch.from_numpy
_new_td = TensorDict.unchecked


def _default_gl() -> None:
    # without a display MuJoCo's default backend (glfw) cannot render, and the backend is fixed when
    # mujoco/dm_control is first imported: set the headless default as early as we can
    if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"


_default_gl()


def _dm_control() -> tuple[Any, Any]:
    """``(dm_env, dm_control.suite)``, imported on first use with a headless GL default."""
    _default_gl()
    try:
        import dm_env
        from dm_control import suite
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError(
            "DMControlEnv/DMControlWrapper need dm_control, which is not installed: pip install rl-envs[dm-control]"
        ) from err
    return dm_env, suite


def _torch_dtype(np_dtype: Any) -> torch.dtype:
    return _from_numpy(np.empty(0, dtype=np_dtype)).dtype


def _leaf_spec(spec: Any, dm_env: Any, key: str) -> tuple[TensorSpec, tuple]:
    """A dm_env ``Array``/``BoundedArray`` as a spec (scalars become shape ``[1]``, as in TorchRL)."""
    shape = tuple(spec.shape) or (1,)
    dtype = _torch_dtype(spec.dtype)
    if isinstance(spec, dm_env.specs.BoundedArray):
        low = _from_numpy(np.array(np.broadcast_to(spec.minimum, spec.shape)).reshape(shape))
        high = _from_numpy(np.array(np.broadcast_to(spec.maximum, spec.shape)).reshape(shape))
        return Bounded(low, high, shape=shape, dtype=dtype), shape
    if isinstance(spec, dm_env.specs.Array):
        return Unbounded(shape=shape, dtype=dtype), shape
    raise TypeError(f"DMControlWrapper: the spec of {key!r} is a {type(spec).__name__}, expected a dm_env.specs.Array.")


def _obs_specs(spec: Any, dm_env: Any, prefix: tuple = ()) -> tuple[dict | TensorSpec, list]:
    """Spec tree and the flat ``(path, numpy dtype, shape)`` readers of a (nested) observation spec.

    The tree is a dict for a dict spec, else the leaf spec.
    """
    if isinstance(spec, dict):
        specs, readers = {}, []
        for name, sub in spec.items():
            sub_spec, sub_readers = _obs_specs(sub, dm_env, (*prefix, str(name)))
            specs[str(name)] = sub_spec if not isinstance(sub_spec, dict) else Composite(sub_spec, shape=())
            readers.extend(sub_readers)
        return specs, readers
    leaf, shape = _leaf_spec(spec, dm_env, "/".join(prefix) or "observation")
    return leaf, [(prefix, np.dtype(spec.dtype), shape)]


class _ClassProperty:
    """A read-only property of the class (``DMControlEnv.available_envs``)."""

    def __init__(self, fget: Any) -> None:
        self.fget = fget

    def __get__(self, obj: Any, owner: type) -> Any:
        return self.fget(owner)


def _available_envs(cls: type) -> list[tuple[str, str]]:
    _, suite = _dm_control()
    return [tuple(pair) for pair in suite.ALL_TASKS]


class DMControlWrapper(EnvBase):
    """Wraps a dm_control (dm_env) environment as an env of this library.

    A dict observation gives one key per entry (``"position"``, ``"velocity"``..., nested dicts as
    nested keys); a single-array observation goes to ``"observation"``. The action is read from
    ``"action"`` (a ``Bounded`` spec from dm_env's ``BoundedArray``). Per step the wrapper writes
    ``"reward"`` (float64, shape ``[]``), ``"done"``, ``"terminated"`` and ``"truncated"``: at the
    episode's last step ``terminated = (discount == 0)`` and ``truncated = not terminated`` (the
    suite's time limit has discount 1).

    Args:
        env: the dm_control env (``dm_control.suite.load(...)`` or any ``dm_env.Environment``;
            rendering needs a ``physics`` attribute, seeding a ``task.random`` RandomState).
        from_pixels: add ``physics.render(**render_kwargs)`` as ``"pixels"`` (uint8 ``[H, W, 3]``).
        pixels_only: with ``from_pixels``, drop the state observations.
        frame_skip: repeat each action this many times, summing rewards (stops at the episode end).
        device: the device of the returned tensors.
        batch_size: only ``[]`` (one env) is supported; batch with SerialEnv/ParallelEnv.
        camera_id: the camera the pixels are rendered from (default 0; overrides ``render_kwargs``).
        render_kwargs: passed to ``physics.render`` (``height``, ``width``, ``camera_id``...;
            default ``{"camera_id": 0}`` and dm_control's 240x320 frame).

    Examples:
        >>> from dm_control import suite
        >>> env = DMControlWrapper(suite.load("cartpole", "swingup"))
        >>> env.set_seed(0)  # the task's RandomState: one stream, the next env's seed is 1
        1
        >>> rollout = env.rollout(5)
        >>> rollout["position"].shape, rollout["next", "reward"].shape, rollout["action"].dtype
        (torch.Size([5, 3]), torch.Size([5]), torch.float64)
    """

    _env: Any  # the dm_env env, set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``)

    def __init__(
        self,
        env: Any = None,
        *,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int = 1,
        device: Any = None,
        batch_size: Any = None,
        camera_id: int | str | None = None,
        render_kwargs: dict | None = None,
    ) -> None:
        dm_env, _ = _dm_control()
        name = type(self).__name__
        if not isinstance(env, dm_env.Environment):
            raise TypeError(f"{name}: env must be a dm_control (dm_env.Environment) env, got {env!r}.")
        if isinstance(frame_skip, bool) or int(frame_skip) != frame_skip or frame_skip < 1:
            raise ValueError(f"{name}: frame_skip must be an integer >= 1, got {frame_skip!r}.")
        if batch_size is not None and tuple(batch_size) != ():
            raise ValueError(
                f"{name}: batch_size must be [] (one dm_control env), got {list(batch_size)}; "
                "batch several envs with SerialEnv or ParallelEnv."
            )
        if pixels_only and not from_pixels:
            raise ValueError(f"{name}: pixels_only=True needs from_pixels=True.")
        render_kwargs = dict(render_kwargs or {})
        render_kwargs.setdefault("camera_id", 0)
        if camera_id is not None:
            render_kwargs["camera_id"] = camera_id
        if from_pixels and getattr(env, "physics", None) is None:
            raise ValueError(f"{name}(from_pixels=True): the env has no `physics` to render, got {type(env).__name__}.")
        super().__init__(device=device, batch_size=[])
        self.__dict__["_env"] = env
        self.from_pixels = bool(from_pixels)
        self.pixels_only = bool(pixels_only)
        self.frame_skip = int(frame_skip)
        self.render_kwargs = render_kwargs
        self._make_specs(dm_env)

    # ------------------------------------------------------------------ construction
    def _make_specs(self, dm_env: Any) -> None:
        env, device = self._env, self.device
        obs_spec = env.observation_spec()
        tree, readers = _obs_specs(obs_spec, dm_env)
        specs: dict[str, Any]
        if not isinstance(obs_spec, dict):
            specs, readers = {"observation": tree}, [(("observation",), dt, shape) for _, dt, shape in readers]
            self._dict_obs = False
        else:
            specs = cast(dict, tree)  # a dict spec gives a dict tree
            self._dict_obs = True
        if self.pixels_only:
            specs, readers = {}, []
        if self.from_pixels:
            frame = self._first_render()
            specs["pixels"] = Bounded(0, 255, shape=tuple(frame.shape), dtype=torch.uint8)
        self._readers = tuple(readers)
        self._nested = any(len(path) > 1 for path, _, _ in readers)
        self.observation_spec = Composite(specs, shape=(), device=device)
        action_spec, _ = _leaf_spec(env.action_spec(), dm_env, "action")
        self._action_dtype = np.dtype(env.action_spec().dtype)
        self._action_shape = tuple(env.action_spec().shape)
        self.action_spec = action_spec.to(device) if device is not None else action_spec
        reward_dtype = _torch_dtype(getattr(env.reward_spec(), "dtype", np.float64))
        self.reward_spec = Unbounded(shape=(), dtype=reward_dtype, device=device)
        self._reward_np = np.dtype(getattr(env.reward_spec(), "dtype", np.float64))
        flag = Categorical(2, shape=(), dtype=torch.bool, device=device)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=(), device=device)
        self._to_device = device is not None and device.type != "cpu"
        self._false = _from_numpy(np.array(False))

    def _render(self) -> Any:
        return self._env.physics.render(**self.render_kwargs)

    def _first_render(self) -> Any:
        try:
            return self._render()
        except Exception as err:  # GL errors come in many types (mujoco, PyOpenGL, ctypes)
            raise render_error(type(self).__name__, err) from err

    def _read_obs(self, observation: Any) -> dict:
        out = {}
        for path, dtype, shape in self._readers:
            value = observation
            if self._dict_obs:
                for part in path:
                    value = value[part]
            # np.array copies: a task may hand out views of the physics state, which the next step overwrites
            tensor = _from_numpy(np.array(value, dtype=dtype).reshape(shape))
            if len(path) == 1:
                out[path[0]] = tensor
            else:
                out[path] = tensor
        if self.from_pixels:
            out["pixels"] = _from_numpy(np.array(self._render(), dtype=np.uint8))
        return out

    def _finish(self, out: dict) -> TensorDictBase:
        # numpy gives CPU tensors: a TensorDict claiming another device would lie until moved
        device = None if self._to_device else self._device
        if self._nested:
            nested = {k: v for k, v in out.items() if isinstance(k, tuple)}
            flat = {k: v for k, v in out.items() if not isinstance(k, tuple)}
            td = _new_td(flat, self._batch_size, device)
            for key, value in nested.items():
                td.set(key, value)
        else:
            td = _new_td(out, self._batch_size, device)
        if self._to_device:
            td = td.to(self.device)
        return td

    # ------------------------------------------------------------------ seeding, reset
    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            return
        task = getattr(self._env, "task", None)
        random = getattr(task, "random", None)
        if random is None or not hasattr(random, "seed"):
            raise RuntimeError(
                f"{type(self).__name__}.set_seed: the env has no task.random RandomState to seed "
                f"(got {type(self._env).__name__}); seed it when building it (task_kwargs={{'random': seed}})."
            )
        # numpy's RandomState takes seeds in [0, 2**32): larger or negative seeds are folded in
        random.seed(int(seed) % (2**32))

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        if kwargs:
            raise TypeError(f"{type(self).__name__}.reset: unexpected arguments {sorted(kwargs)}.")
        timestep = self._env.reset()
        out = self._read_obs(timestep.observation)
        out["done"] = self._false.clone()
        out["terminated"] = self._false.clone()
        out["truncated"] = self._false.clone()
        return self._finish(out)

    # ------------------------------------------------------------------ step
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get("action")
        if action.device.type != "cpu":
            action = action.cpu()
        action = np.asarray(action.numpy(), dtype=self._action_dtype).reshape(self._action_shape)
        step = self._env.step
        reward = 0.0
        for _ in range(self.frame_skip):
            timestep = step(action)
            if timestep.reward is not None:  # None only on a FIRST step (stepping past an episode's end)
                reward = reward + timestep.reward
            if timestep.last():
                break
        out = self._read_obs(timestep.observation)
        out["reward"] = _from_numpy(np.array(reward, dtype=self._reward_np))
        last = bool(timestep.last())
        terminated = last and timestep.discount is not None and float(timestep.discount) == 0.0
        out["done"] = _from_numpy(np.array(last))
        out["terminated"] = _from_numpy(np.array(terminated))
        out["truncated"] = _from_numpy(np.array(last and not terminated))
        return self._finish(out)

    # ------------------------------------------------------------------ misc
    available_envs = _ClassProperty(_available_envs)

    def close(self, *, raise_if_closed: bool = False) -> None:
        self._env.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={type(self._env).__name__}, batch_size={list(self.batch_size)}, device={self.device})"


class DMControlEnv(DMControlWrapper):
    """A DeepMind Control Suite task built from its domain and task names (``suite.load``).

    Args:
        env_name: the domain (``"cheetah"``, ``"cartpole"``...).
        task_name: the task of that domain (``"run"``, ``"swingup"``...).
        from_pixels: observe rendered frames as ``"pixels"`` (uint8 ``[H, W, 3]``).
        pixels_only: with ``from_pixels``, drop the state observations.
        frame_skip: repeat each action this many times (rewards summed, stops at the episode end).
        device: the device of the returned tensors.
        batch_size: only ``[]`` is supported.
        camera_id: the camera for ``from_pixels`` (default 0).
        render_kwargs: passed to ``physics.render`` (``height``, ``width``...).
        seed: seeds the task's random state (as ``set_seed``).
        task_kwargs: passed to ``suite.load`` (``{"time_limit": 5}``...). ``seed`` sets its
            ``"random"`` entry (giving both is an error).
        environment_kwargs: passed to ``suite.load`` (``{"flat_observation": True}``...).

    Examples:
        >>> env = DMControlEnv("cheetah", "run", seed=0)
        >>> rollout = env.rollout(3)
        >>> sorted(rollout.keys()), rollout["action"].shape
        (['action', 'done', 'next', 'position', 'terminated', 'truncated', 'velocity'], torch.Size([3, 6]))
        >>> ("cheetah", "run") in DMControlEnv.available_envs
        True
    """

    def __init__(
        self,
        env_name: str | None = None,
        task_name: str | None = None,
        *,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int = 1,
        device: Any = None,
        batch_size: Any = None,
        camera_id: int | str | None = None,
        render_kwargs: dict | None = None,
        seed: int | None = None,
        task_kwargs: dict | None = None,
        environment_kwargs: dict | None = None,
    ) -> None:
        _, suite = _dm_control()
        domains = suite.TASKS_BY_DOMAIN
        if env_name not in domains:
            raise ValueError(f"DMControlEnv: unknown env_name (domain) {env_name!r}; available: {sorted(domains)}.")
        if task_name not in domains[env_name]:
            raise ValueError(
                f"DMControlEnv: unknown task_name {task_name!r} for domain {env_name!r}; available: {list(domains[env_name])}."
            )
        task_kwargs = dict(task_kwargs or {})
        if seed is not None:
            if "random" in task_kwargs:
                raise ValueError("DMControlEnv: give the seed either as seed= or as task_kwargs['random'], not both.")
            task_kwargs["random"] = int(seed) % (2**32)
        if batch_size is not None and tuple(batch_size) != ():
            raise ValueError(
                f"DMControlEnv: batch_size must be [] (one dm_control env), got {list(batch_size)}; "
                "batch several envs with SerialEnv or ParallelEnv."
            )
        env = suite.load(env_name, task_name, task_kwargs=task_kwargs, environment_kwargs=environment_kwargs)
        super().__init__(
            env,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            frame_skip=frame_skip,
            device=device,
            batch_size=batch_size,
            camera_id=camera_id,
            render_kwargs=render_kwargs,
        )
        self.env_name, self.task_name = env_name, task_name

    def __repr__(self) -> str:
        return f"DMControlEnv(env={self.env_name}, task={self.task_name}, batch_size={list(self.batch_size)}, device={self.device})"
