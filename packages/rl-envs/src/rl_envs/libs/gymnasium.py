"""Gymnasium wrappers: GymWrapper (wraps an env or vector env), GymEnv (builds one by id).

gymnasium is imported only when these classes are used (``pip install rl-envs[gymnasium]``).
Names and semantics follow TorchRL 0.14 (``torchrl.envs.GymEnv``/``GymWrapper``), except that
reward and done flags have the batch shape with no trailing dim.

The hot path (``_step``) is one gymnasium call plus a handful of precomputed conversions:
``torch.from_numpy`` on the observation arrays (zero-copy once the first steps showed the env
returns fresh, well-formed arrays), one numpy scalar per reward/flag, and a TensorDict built
without validation.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from tdict import TensorDict, TensorDictBase
from tdict.seeding import next_seed
from tdict.specs import Categorical, Composite, TensorSpec, Unbounded

from ..env_base import EnvBase

if TYPE_CHECKING:
    import numpy as np
else:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - gymnasium brings numpy; _gymnasium() raises the install hint first
        np = None

__all__ = ["BaseInfoDictReader", "GymEnv", "GymWrapper", "default_info_dict_reader", "gym_backend"]

_from_numpy = torch.from_numpy
_new_td = TensorDict.unchecked
# None only without numpy, where GymWrapper fails (install hint) before any use
_array: Any = np.array if np is not None else None
_float32: Any = np.float32 if np is not None else None
# steps during which observations are copied while we check that the env hands out fresh arrays
_PROBATION_STEPS = 3


def _gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError(
            "GymEnv/GymWrapper need gymnasium, which is not installed: pip install rl-envs[gymnasium]"
        ) from err
    return gymnasium


def _register_ale(gym: Any, env_id: str) -> None:
    """Registers ale-py's Atari ids with gymnasium (``gymnasium.register_envs(ale_py)``) when ``env_id`` is
    not registered yet: an ``"ALE/..."`` id needs ale-py, another unknown id gets it only where installed."""
    if env_id in gym.registry:
        return
    try:
        import ale_py
    except ImportError as err:
        if not env_id.startswith("ALE/"):
            return  # not an Atari id as far as we can tell: gymnasium reports the unknown id
        raise ImportError(
            f"{env_id!r} is an Atari id, which needs ale-py (not installed): pip install rl-envs[atari]"
        ) from err
    gym.register_envs(ale_py)


def gym_backend(submodule: str | None = None) -> Any:
    """The Gymnasium module the wrappers use, or one of its submodules (``gym_backend("spaces")``).

    TorchRL can switch between gym and gymnasium; here the backend is always gymnasium.

    Examples:
        >>> gym_backend().__name__
        'gymnasium'
        >>> gym_backend("spaces").Box.__name__
        'Box'
    """
    gymnasium = _gymnasium()
    if submodule is None:
        return gymnasium
    import importlib

    return importlib.import_module(f"gymnasium.{submodule}")


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty((), dtype=dtype).numpy().dtype


# ---------------------------------------------------------------------------------------------- info readers
class BaseInfoDictReader:
    """Reads entries of gymnasium's ``info`` dict into the step's TensorDict.

    Subclasses implement ``__call__(info_dict, tensordict) -> tensordict`` (write in place) and
    ``info_spec`` (a Composite of the entries written, feature shapes without the env's batch dims).
    """

    def __call__(self, info_dict: dict, tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError

    @property
    def info_spec(self) -> Composite | None:
        """The entries the reader writes (feature shapes, no batch dims); ``None`` until they are known."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forgets what the reader inferred from earlier steps (nothing by default).

        ``GymWrapper.set_info_dict_reader`` calls it on a reader whose ``info_spec`` is still ``None``.
        """


class default_info_dict_reader(BaseInfoDictReader):
    """Copies ``info[key]`` into the TensorDict for each key (a zero where the info lacks it).

    Args:
        keys: the info keys to read. ``None``: every key of the first step's info dict (the
            specs are then inferred by a short rollout in ``set_info_dict_reader``).
        spec: the specs of the entries (a list matching ``keys``, a dict or a Composite), with
            feature shapes (no batch dims). Default: float32 scalars.
        ignore_private: with ``keys=None``, skip keys that start with ``"_"``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import Unbounded
        >>> reader = default_info_dict_reader(["x_position"], spec=[Unbounded((), dtype=torch.float64)])
        >>> td = reader({"x_position": 1.5, "other": 0}, TensorDict())
        >>> td["x_position"], reader.info_spec["x_position"].dtype
        (tensor(1.5000, dtype=torch.float64), torch.float64)
    """

    def __init__(
        self,
        keys: Sequence[str] | None = None,
        spec: Sequence[TensorSpec] | dict[str, TensorSpec] | Composite | None = None,
        ignore_private: bool = True,
    ) -> None:
        self.ignore_private = ignore_private
        self.keys = list(keys) if keys is not None else None
        if spec is None:
            info_spec = None if self.keys is None else Composite({k: Unbounded(shape=()) for k in self.keys}, shape=())
        elif isinstance(spec, Composite):
            info_spec = spec.clone()
        elif isinstance(spec, dict):
            info_spec = Composite(dict(spec), shape=())
        else:
            spec = list(spec)
            if self.keys is None or len(spec) != len(self.keys):
                raise ValueError(
                    f"default_info_dict_reader: {len(spec)} specs given for keys {self.keys}; give one spec per key."
                )
            info_spec = Composite(dict(zip(self.keys, spec)), shape=())
        if info_spec is not None and self.keys is None:
            self.keys = list(info_spec.keys())
        self._info_spec = info_spec
        self._entries: tuple | None = None

    @property
    def info_spec(self) -> Composite | None:
        """The specs of the entries read (float32 scalars by default; ``None`` until inferred with ``keys=None``)."""
        return self._info_spec

    def reset(self) -> None:
        """Forgets inferred keys and specs (only for readers built with ``keys=None``)."""
        self._entries = None

    def _infer(self, info_dict: dict, batch_dims: int) -> None:
        specs = {}
        for key, value in info_dict.items():
            if self.ignore_private and key.startswith("_"):
                continue
            arr = np.asarray(value)
            if arr.dtype == object or arr.dtype.kind not in "biuf":
                continue  # final observations, strings...: not a tensor
            t = _from_numpy(np.array(arr))
            if t.dtype == torch.float64 and np.ndim(value) == 0 and not isinstance(value, np.generic):
                t = t.float()  # a python float: the default float dtype, as a reward would be
            specs[key] = Unbounded(shape=t.shape[batch_dims:], dtype=t.dtype)
        self.keys = list(specs)
        self._info_spec = Composite(specs, shape=())

    def _build_entries(self) -> tuple:
        spec, keys = self._info_spec, self.keys
        assert spec is not None and keys is not None  # given, or inferred by _infer first
        return tuple((k, _np_dtype(spec[k].dtype), spec[k].shape, spec[k]) for k in keys)

    def __call__(self, info_dict: dict, tensordict: TensorDictBase) -> TensorDictBase:
        entries = self._entries
        batch = tensordict.batch_size
        if entries is None:
            if self._info_spec is None:
                self._infer(info_dict, len(batch))
            entries = self._entries = self._build_entries()
        for key, np_dtype, shape, spec in entries:
            value = info_dict.get(key, None)
            if value is None:
                tensor = spec.zero(batch)
            else:
                tensor = _from_numpy(np.array(value, dtype=np_dtype))
                full = batch + shape
                if tensor.shape != full:
                    try:
                        tensor = tensor.reshape(full)
                    except RuntimeError:
                        raise ValueError(
                            f"info reader: info[{key!r}] has shape {list(tensor.shape)}, expected {list(full)} "
                            f"(batch {list(batch)} + spec shape {list(shape)})."
                        ) from None
            tensordict.set(key, tensor)
        return tensordict

    def __repr__(self) -> str:
        return f"default_info_dict_reader(keys={self.keys})"


# ---------------------------------------------------------------------------------------------- wrapper
class GymWrapper(EnvBase):
    """Wraps a gymnasium env (or a ``gymnasium.vector.VectorEnv``) as an env of this library.

    Observations go to ``"observation"`` (``"pixels"`` for a pixel-only env; a Dict space gives one
    key per entry, nested for nested Dicts), the action is read from ``"action"`` (one key per
    entry of a Dict action space), ``"reward"`` is float32 and ``"terminated"``/``"truncated"``
    come from gymnasium, ``"done" = terminated | truncated``. Spaces map to specs as described in
    :mod:`rl_envs.libs._gym_spaces`.

    A vector env gives ``batch_size=[num_envs]``; every autoreset mode of gymnasium 1.x is handled
    so that the data contract holds (a done sub-env is reset through ``"_reset"`` and its next root
    is the reset observation; no transition of a gymnasium "reset step" is ever recorded):

    - ``NEXT_STEP`` (default): resets go through ``reset(options={"reset_mask": ...})``, which
      also cancels gymnasium's pending autoreset of those sub-envs.
    - ``SAME_STEP``: the final observation (``info["final_obs"]``) is written to ``"next"`` and the
      reset observation gymnasium already produced is returned by the following ``"_reset"``.
    - ``DISABLED``: partial resets through ``reset_mask``.

    Args:
        env: the gymnasium env.
        categorical_action_encoding: discrete spaces as indices (``Categorical``) instead of
            one-hot (``OneHot``, the default).
        from_pixels: add the rendered frame (``env.render()``, needs ``render_mode="rgb_array"``)
            as ``"pixels"`` (uint8 ``[H, W, 3]``).
        pixels_only: with ``from_pixels``, drop the state observation.
        frame_skip: repeat each action this many times, summing rewards (stops at done; for a
            vector env, when any sub-env is done).
        device: the device of the returned tensors.

    Examples:
        >>> import gymnasium as gym
        >>> env = GymWrapper(gym.make("Pendulum-v1"))
        >>> env.set_seed(0)  # the next reset uses seed 0; a vector env of N sub-envs returns 0 + N
        1
        >>> rollout = env.rollout(5)
        >>> rollout["observation"].shape, rollout["next", "reward"].shape, rollout["action"].dtype
        (torch.Size([5, 3]), torch.Size([5]), torch.float32)
    """

    _env: Any  # the gymnasium env, set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``)

    def __init__(
        self,
        env: Any = None,
        categorical_action_encoding: bool = False,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int = 1,
        device: Any = None,
        *,
        _pixels_ready: bool = False,
    ) -> None:
        gym = _gymnasium()
        if env is None or not (hasattr(env, "action_space") and hasattr(env, "observation_space")):
            raise TypeError(
                f"GymWrapper: env must be a gymnasium env (with action_space and observation_space), got {env!r}."
            )
        if int(frame_skip) != frame_skip or frame_skip < 1:
            raise ValueError(f"GymWrapper: frame_skip must be an integer >= 1, got {frame_skip!r}.")
        vector = isinstance(env, gym.vector.VectorEnv) or isinstance(
            getattr(env, "unwrapped", None), gym.vector.VectorEnv
        )
        super().__init__(device=device, batch_size=[env.num_envs] if vector else [])
        self.categorical_action_encoding = bool(categorical_action_encoding)
        self.frame_skip = int(frame_skip)
        self.pixels_only = bool(pixels_only)
        if from_pixels and not _pixels_ready and not _has_pixels(env):
            if vector:
                raise ValueError(
                    "GymWrapper(from_pixels=True) of a vector env: build it with the pixels already in the observation "
                    "(GymEnv(..., num_envs=N, from_pixels=True) does so)."
                )
            if getattr(env, "render_mode", None) != "rgb_array":
                raise ValueError(
                    f"GymWrapper(from_pixels=True) needs an env made with render_mode='rgb_array', got "
                    f"render_mode={getattr(env, 'render_mode', None)!r}."
                )
            env = gym.wrappers.AddRenderObservation(env, render_only=self.pixels_only)
        self.from_pixels = bool(from_pixels) or _has_pixels(env)
        self.__dict__["_env"] = env
        self._is_vector = vector
        self._info_dict_reader: list = []
        self._pending_seed: int | None = None
        self.autoreset_mode = None
        if vector:
            mode = getattr(env, "autoreset_mode", None) or env.metadata.get(
                "autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP
            )
            self.autoreset_mode = gym.vector.AutoresetMode(mode)
            self._same_step = self.autoreset_mode == gym.vector.AutoresetMode.SAME_STEP
            self._disabled = self.autoreset_mode == gym.vector.AutoresetMode.DISABLED
            base = env.unwrapped
            self._reset_mask_ok = self._disabled or isinstance(
                base, (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv)
            )
            self._done_rows = np.zeros(env.num_envs, dtype=bool)  # done at the last step, not reset since
            self._last_raw_obs = None
            self._last_info: dict = {}
            self.__dict__["_step"] = self._step_vector
        self._make_specs()

    # ------------------------------------------------------------------ construction
    def _make_specs(self) -> None:
        from ._gym_spaces import make_codec

        env, batch, device = self._env, self.batch_size, self.device
        obs_space = env.single_observation_space if self._is_vector else env.observation_space
        act_space = env.single_action_space if self._is_vector else env.action_space
        cat = self.categorical_action_encoding
        obs = make_codec(obs_space, categorical_action_encoding=cat, batch_size=batch, device=device)
        act = make_codec(act_space, categorical_action_encoding=cat, batch_size=batch, device=device)
        self._obs_codec, self._act_codec = obs, act
        if isinstance(obs.spec, Composite):
            obs_spec = obs.spec.expand(batch)
            entries, entries_safe = obs.entries, obs.entries_safe
            assert entries is not None and entries_safe is not None  # a Dict/Tuple codec has them
            self._obs_dict_fast, self._obs_dict_safe = entries, entries_safe
        else:
            key = "pixels" if self.from_pixels else "observation"
            obs_spec = Composite({key: obs.spec.expand(*batch, *obs.spec.shape)}, shape=batch)
            read, read_safe = obs.read, obs.read_safe
            self._obs_dict_fast = lambda x: {key: read(x)}
            self._obs_dict_safe = lambda x: {key: read_safe(x)}
        self._probation = _PROBATION_STEPS
        self._probation_clean = True
        self._prev_arrays: tuple = ()
        self._obs_dict = self._probe_obs
        if isinstance(act.spec, Composite):
            self.full_action_spec = act.spec.expand(batch)
            self._read_action = act.write
        else:
            self.action_spec = act.spec.expand(*batch, *act.spec.shape)
            write = act.write
            self._read_action = lambda td: write(td.get("action"))
        self.observation_spec = obs_spec
        self.reward_spec = Unbounded(shape=batch, device=device)
        flag = Categorical(2, shape=batch, dtype=torch.bool, device=device)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=batch)
        self._base_observation_spec = obs_spec
        self._to_device = self.device is not None and self.device.type != "cpu"

    def _probe_obs(self, obs: Any) -> dict:
        """The first steps: copy, and check that the env returns fresh arrays we may share later."""
        codec = self._obs_codec
        arrays = codec.arrays(obs)
        ok = codec.check(obs)
        prev = self._prev_arrays
        if ok:
            ok = not any(np.may_share_memory(a, b) for a in arrays for b in prev) and len(
                {id(a) for a in arrays}
            ) == len(arrays)
        self._probation_clean = self._probation_clean and ok
        # kept alive (so no new array can take their memory) and compared with every later one
        self._prev_arrays = prev + arrays if ok else ()
        self._probation -= 1
        if self._probation <= 0:
            self._prev_arrays = ()
            if self._probation_clean:
                self._obs_dict = self._obs_dict_fast
            else:
                self._obs_dict = self._obs_dict_safe
        return self._obs_dict_safe(obs)

    # ------------------------------------------------------------------ info readers
    @property
    def info_dict_reader(self) -> list:
        """The registered info readers (applied in order after each step and reset)."""
        return self._info_dict_reader

    def set_info_dict_reader(
        self, info_dict_reader: BaseInfoDictReader | None = None, ignore_private: bool = True
    ) -> GymWrapper:
        """Registers a reader of gymnasium's ``info`` dict and adds its entries to the observation spec.

        Args:
            info_dict_reader: a reader (``default_info_dict_reader(keys, spec=...)``); ``None``
                reads every (non-private) key, with specs inferred from a short rollout.
            ignore_private: passed to the default reader when none is given.

        Returns: the env.
        """
        if info_dict_reader is None:
            info_dict_reader = default_info_dict_reader(ignore_private=ignore_private)
        if getattr(info_dict_reader, "info_spec", None) is None:
            # the keys and specs come from what a step writes (reset may carry fewer entries)
            td = self.reset()
            self._info_dict_reader.append(info_dict_reader)
            info_dict_reader.reset()
            self.rand_step(td)
        else:
            self._info_dict_reader.append(info_dict_reader)
        self._extend_observation_spec()
        return self

    def _extend_observation_spec(self) -> None:
        batch = self.batch_size
        spec = self._base_observation_spec.clone()
        for reader in self._info_dict_reader:
            info_spec = getattr(reader, "info_spec", None)
            if info_spec is None:
                continue
            for key, leaf in info_spec.items(True, True):
                spec[key] = (
                    leaf.expand(*batch, *leaf.shape).to(self.device)
                    if self.device is not None
                    else leaf.expand(*batch, *leaf.shape)
                )
        self.observation_spec = spec

    def _read_info(self, info: Any, td: TensorDictBase) -> TensorDictBase:
        for reader in self._info_dict_reader:
            out = reader(info, td)
            if out is not None:
                td = out
        return td

    # ------------------------------------------------------------------ seeding, reset
    def _set_seed(self, seed: int | None) -> None:
        # gymnasium seeds through reset(seed=...): the next reset uses it
        self._pending_seed = None if seed is None else int(seed)
        if seed is not None:
            self._env.action_space.seed(int(seed))

    def _seed_streams(self, seed: int | None) -> int | None:
        """One stream, or ``num_envs`` for a vector env (gymnasium seeds its sub-env ``i`` with ``seed + i``)."""
        self._set_seed(seed)
        return None if seed is None else next_seed(seed, self._env.num_envs if self._is_vector else 1)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        seed = kwargs.pop("seed", None)
        options = kwargs.pop("options", None)
        if kwargs:
            raise TypeError(
                f"{type(self).__name__}.reset: unexpected arguments {sorted(kwargs)} (expected seed, options)."
            )
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        if self._is_vector:
            mask = tensordict.get("_reset", None) if tensordict is not None else None
            if mask is not None:
                mask = mask.reshape(self.batch_size).cpu().numpy().astype(bool)
                if not mask.all():
                    return self._partial_reset(mask, seed, options)
            obs, info = self._env.reset(seed=seed, options=options)
            self._done_rows[:] = False
            self._last_raw_obs, self._last_info = obs, info
        else:
            obs, info = self._env.reset(seed=seed, options=options)
        return self._finish_reset(obs, info)

    def _reset_raw(self) -> Any:
        """Resets the (single) gymnasium env with the pending seed, if any; returns its raw observation."""
        seed, self._pending_seed = self._pending_seed, None
        return self._env.reset(seed=seed)[0]

    @classmethod
    def _fuse_serial(cls, envs: Sequence[EnvBase]) -> Any:
        """SerialEnv steps plain single-env wrappers in one loop (:class:`~rl_envs.libs._gym_fused.GymFusedSteps`)."""
        from ._gym_fused import GymFusedSteps

        return GymFusedSteps.build(envs)

    def _finish_reset(self, obs: Any, info: Any) -> TensorDictBase:
        if self._probation > 0:
            self._prev_arrays = self._prev_arrays + self._obs_codec.arrays(obs)
        td = _new_td(self._obs_dict_safe(obs), self.batch_size, self.device)
        if self._info_dict_reader:
            td = self._read_info(info, td)
        if self._to_device:
            td = td.to(self.device)
        return td

    def _partial_reset(self, mask: np.ndarray, seed: Any, options: Any) -> TensorDictBase:
        done_rows = self._done_rows
        if not mask.any():
            obs, info = self._last_raw_obs, {}
        elif self._same_step and seed is None and options is None and bool(np.all(done_rows[mask])):
            # gymnasium already reset these sub-envs during the step: their observation is waiting
            obs, info = self._last_raw_obs, self._last_info
        else:
            if not self._reset_mask_ok:
                raise RuntimeError(
                    f"{type(self).__name__}: partial reset of sub-envs {np.flatnonzero(mask).tolist()} needs "
                    f"reset(options={{'reset_mask': ...}}), which {type(self._env.unwrapped).__name__} does not support "
                    f"in autoreset mode {self.autoreset_mode}. Use a SyncVectorEnv/AsyncVectorEnv "
                    f"(gymnasium.make_vec(..., vectorization_mode='sync')) or autoreset_mode DISABLED."
                )
            options = dict(options or {})
            options["reset_mask"] = mask
            obs, info = self._env.reset(seed=seed, options=options)
            self._last_raw_obs = obs
        done_rows[mask] = False
        return self._finish_reset(obs, info)

    # ------------------------------------------------------------------ step
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = self._read_action(tensordict)
        if self.frame_skip == 1:
            obs, reward, terminated, truncated, info = self._env.step(action)
        else:
            obs, reward, terminated, truncated, info = self._skip_frames(action)
        out = self._obs_dict(obs)
        out["reward"] = _from_numpy(_array(reward, _float32))
        terminated, truncated = bool(terminated), bool(truncated)
        out["done"] = _from_numpy(_array(terminated or truncated))
        out["terminated"] = _from_numpy(_array(terminated))
        out["truncated"] = _from_numpy(_array(truncated))
        td = _new_td(out, self._batch_size, self._device)
        if self._info_dict_reader or self._to_device:
            td = self._post(td, info)
        return td

    def _skip_frames(self, action: Any) -> tuple:
        step = self._env.step
        total = 0.0
        for _ in range(self.frame_skip):
            obs, reward, terminated, truncated, info = step(action)
            total = total + reward
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info

    def _post(self, td: TensorDictBase, info: Any) -> TensorDictBase:
        if self._info_dict_reader:
            td = self._read_info(info, td)
        if self._to_device:
            td = td.to(self.device)
        return td

    def _step_vector(self, tensordict: TensorDictBase) -> TensorDictBase:
        env = self._env
        if self._disabled and self._done_rows.any():
            # stepping done sub-envs that were not reset (e.g. rollout(break_when_all_done=True) keeps
            # stepping them and masks their output): gymnasium refuses that in DISABLED mode
            env.reset(options={"reset_mask": self._done_rows.copy()})
        action = self._read_action(tensordict)
        if self.frame_skip == 1:
            obs, reward, terminated, truncated, info = env.step(action)
            reward = np.array(reward, dtype=np.float32)
            terminated = np.array(terminated, dtype=bool)
            truncated = np.array(truncated, dtype=bool)
            done = terminated | truncated
        else:
            reward = 0.0
            for _ in range(self.frame_skip):
                obs, r, terminated, truncated, info = env.step(action)
                reward = reward + np.asarray(r, dtype=np.float64)
                terminated = np.array(terminated, dtype=bool)
                truncated = np.array(truncated, dtype=bool)
                done = terminated | truncated
                if done.any():
                    break
            reward = np.array(reward, dtype=np.float32)
        self._done_rows = done.copy()  # edited in place by resets: not the array the step records
        if self._same_step:
            self._last_raw_obs, self._last_info = obs, info
            if done.any():
                obs, info = self._final_values(obs, info, done)
        out = self._obs_dict(obs)
        out["reward"] = _from_numpy(reward)
        out["done"] = _from_numpy(done)
        out["terminated"] = _from_numpy(terminated)
        out["truncated"] = _from_numpy(truncated)
        td = _new_td(out, self._batch_size, self._device)
        if self._info_dict_reader or self._to_device:
            td = self._post(td, info)
        return td

    def _final_values(self, obs: Any, info: dict, done: np.ndarray) -> tuple:
        """SAME_STEP: the observation and info of the step that ended, not of the reset that followed."""
        idx = np.flatnonzero(done)
        finals = info.get("final_obs", None)
        if finals is not None:
            obs = self._obs_codec.replace_rows(obs, finals, idx)
        final_info = info.get("final_info", None)
        if final_info:
            merged = dict(info)
            for key, value in final_info.items():
                if key.startswith("_") or key not in info:
                    continue
                rows = final_info.get("_" + key, done)
                current = np.array(info[key], copy=True)
                try:
                    current[rows] = np.asarray(value)[rows]
                except (ValueError, TypeError, IndexError):
                    continue
                merged[key] = current
            info = merged
        return obs, info

    # ------------------------------------------------------------------ misc
    def close(self, *, raise_if_closed: bool = False) -> None:
        self._env.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self._env}, batch_size={list(self.batch_size)}, device={self.device})"


def _has_pixels(env: Any) -> bool:
    space = getattr(env, "single_observation_space", None) or env.observation_space
    spaces = getattr(space, "spaces", None)
    return isinstance(spaces, dict) and "pixels" in spaces


class GymEnv(GymWrapper):
    """A gymnasium env built from its id (``gymnasium.make``, or ``gymnasium.make_vec`` with ``num_envs``).

    Args:
        env_id: the registered id (``"Pendulum-v1"``, ``"HalfCheetah-v5"``...); TorchRL's
            ``env_name=`` keyword is accepted too. Atari ids (``"ALE/Pong-v5"``) are registered
            from ale-py on first use (``pip install rl-envs[atari]``); for the standard Atari
            preprocessing see :func:`rl_envs.libs.atari.make_atari_env`.
        num_envs: build a vector env of this many sub-envs (``batch_size=[num_envs]``), by default a
            ``SyncVectorEnv`` (pass ``vectorization_mode="async"`` for processes) in gymnasium's default
            autoreset mode; ``vector_kwargs={"autoreset_mode": ...}`` picks another one.
        from_pixels: observe rendered frames as ``"pixels"`` (sets ``render_mode="rgb_array"``).
        pixels_only: with ``from_pixels``, drop the state observation.
        frame_skip: repeat each action this many times (rewards summed, stops at done).
        categorical_action_encoding: discrete actions as indices instead of one-hot.
        device: the device of the returned tensors.
        **kwargs: passed to ``gymnasium.make`` / ``gymnasium.make_vec`` (``max_episode_steps``,
            ``render_mode``, env arguments...). ``disable_env_checker`` defaults to ``True``, as in TorchRL.

    Examples:
        >>> env = GymEnv("CartPole-v1", categorical_action_encoding=True)
        >>> env.set_seed(0)
        1
        >>> td = env.rollout(3)
        >>> td["action"].shape, td["next", "terminated"].dtype
        (torch.Size([3]), torch.bool)
        >>> GymEnv("CartPole-v1", num_envs=2).rollout(3).batch_size
        torch.Size([2, 3])
    """

    def __init__(
        self,
        env_id: str | None = None,
        num_envs: int | None = None,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int = 1,
        categorical_action_encoding: bool = False,
        device: Any = None,
        **kwargs: Any,
    ) -> None:
        gym = _gymnasium()
        if env_id is None:  # TorchRL's keyword
            env_id = kwargs.pop("env_name", None)
            if env_id is None:
                raise TypeError("GymEnv: give the env id, e.g. GymEnv('Pendulum-v1').")
        if isinstance(env_id, str):
            _register_ale(gym, env_id)  # "ALE/Pong-v5": ale-py registers its ids when imported
        if from_pixels:
            kwargs.setdefault("render_mode", "rgb_array")
        if num_envs is None:
            kwargs.setdefault("disable_env_checker", True)
            env = gym.make(env_id, **kwargs)
        else:
            kwargs.setdefault("vectorization_mode", "sync")
            if from_pixels:
                wrappers = list(kwargs.pop("wrappers", None) or [])
                wrappers.append(partial(gym.wrappers.AddRenderObservation, render_only=bool(pixels_only)))
                kwargs["wrappers"] = wrappers
            env = gym.make_vec(env_id, num_envs=int(num_envs), **kwargs)
        super().__init__(
            env,
            categorical_action_encoding=categorical_action_encoding,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            frame_skip=frame_skip,
            device=device,
            _pixels_ready=num_envs is not None,
        )
        self.env_name = env_id

    def __repr__(self) -> str:
        return f"GymEnv(env={self.env_name}, batch_size={list(self.batch_size)}, device={self.device})"
