"""Brax wrappers: BraxWrapper (wraps a brax ``Env``), BraxEnv (builds one from brax's registry).

Brax simulates in JAX. The wrapper vmaps the env's ``reset``/``step`` over the batch and jit-compiles
them (once per env, at the first reset and the first step), keeps the brax state on the JAX side, and
moves observations, rewards and done flags to torch through DLPack, without copies on the same
device. jax and brax are imported only when these classes are used (``pip install rl-envs[brax]``).
Names follow TorchRL 0.14 (``torchrl.envs.BraxEnv``/``BraxWrapper``); the differences are listed in
:class:`BraxWrapper`.

Layout of one step (``B`` the batch size)::

    "observation"                     [*B, obs_size]   (one key per entry of a dict observation)
    "action"                          [*B, action_size] float32 in [-1, 1]
    "reward"                          [*B]              under "next"
    "done" | "terminated" | "truncated"   [*B]          bool
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tdict import TensorDict, TensorDictBase
from tdict.seeding import check_seed
from tdict.specs import Bounded, Categorical, Composite, Unbounded
from tdict.validation import check_one_of, check_positive_int

from ..env_base import EnvBase

__all__ = ["BraxEnv", "BraxWrapper"]

_new_td = TensorDict.unchecked
_BACKENDS = ("generalized", "positional", "spring", "mjx")
_JAX_SEEDS = 2**63  # jax.random.PRNGKey takes an int64


def _jax() -> tuple[Any, Any]:
    """``(jax, brax.envs)``, imported on first use."""
    try:
        import jax
        from brax import envs
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError(
            "BraxEnv/BraxWrapper need brax and jax, which are not installed: pip install rl-envs[brax]"
        ) from err
    return jax, envs


def _batch_shape(owner: str, batch_size: Any) -> torch.Size:
    if batch_size is None:
        return torch.Size()
    if isinstance(batch_size, int) and not isinstance(batch_size, bool):
        batch_size = (batch_size,)
    if not isinstance(batch_size, Sequence) or isinstance(batch_size, str):
        raise TypeError(f"{owner}: batch_size must be a sequence of positive ints (or None), got {batch_size!r}.")
    return torch.Size([check_positive_int(owner, "batch_size", n) for n in batch_size])


def _check_brax_env(owner: str, env: Any, envs: Any) -> None:
    if not isinstance(env, envs.Env):
        raise TypeError(f"{owner}: env must be a brax env (brax.envs.Env), got {env!r}.")
    training = envs.training
    batching = (training.VmapWrapper, training.DomainRandomizationVmapWrapper, training.AutoResetWrapper)
    inner = env
    while inner is not None:
        if isinstance(inner, batching):
            raise ValueError(
                f"{owner}: env must be an unbatched brax env without {type(inner).__name__} (the wrapper vmaps "
                f"over batch_size and resets through '_reset'); got {env!r}. An EpisodeWrapper is fine."
            )
        inner = getattr(inner, "env", None) if isinstance(inner, envs.Wrapper) else None


def _jax_functions(env: Any, n: int, frame_skip: int) -> tuple[Any, Any, Any, Any]:
    """``(reset, step, zero_state, layout)`` for ``n`` vmapped copies of the brax ``env``.

    ``reset(key, mask, state) -> (key, state, outputs)`` resets the copies where ``mask`` is set, with
    the keys ``jax.random.split(sub, n)`` of ``key, sub = jax.random.split(key)`` (what brax's
    ``VmapWrapper(env, n).reset(sub)`` uses). ``step(state, action) -> (state, outputs)`` repeats the
    action ``frame_skip`` times, summing rewards. ``outputs = (obs, reward, flags)``, with ``flags``
    the bool ``[3, n]`` stack of done, terminated and truncated. ``layout`` is the state's shapes.
    """
    import jax
    import jax.numpy as jnp

    v_reset, v_step = jax.vmap(env.reset), jax.vmap(env.step)

    def raw_reset(key: Any) -> Any:
        return v_reset(jax.random.split(key, n))

    layout = jax.eval_shape(raw_reset, jax.random.PRNGKey(0))
    has_truncation = "truncation" in layout.info

    def canonical(state: Any) -> Any:
        # the same dtypes after reset and step (brax steps give weak types): one compilation of each
        return jax.tree.map(lambda x, s: x.astype(s.dtype), state, layout)

    def outputs(state: Any) -> tuple[Any, Any, Any]:
        done = state.done != 0
        truncated = state.info["truncation"] != 0 if has_truncation else jnp.zeros_like(done)
        return state.obs, state.reward, jnp.stack([done, done & ~truncated, truncated])

    def select(mask: Any, new: Any, old: Any) -> Any:
        return jnp.where(mask.reshape(mask.shape + (1,) * (new.ndim - 1)), new, old)

    def reset(key: Any, mask: Any, old: Any) -> tuple[Any, Any, Any]:
        key, sub = jax.random.split(key)
        state = jax.tree.map(lambda new, was: select(mask, new, was), canonical(raw_reset(sub)), old)
        return key, state, outputs(state)

    def repeat(state: Any, _: Any, action: Any) -> tuple[Any, Any]:
        state = canonical(v_step(state, action))
        return state, state.reward

    def step(state: Any, action: Any) -> tuple[Any, Any]:
        if frame_skip == 1:
            state = canonical(v_step(state, action))
        else:  # as brax's EpisodeWrapper(action_repeat=frame_skip): no stop at the episode's end
            state, rewards = jax.lax.scan(lambda s, x: repeat(s, x, action), state, None, length=frame_skip)
            state = state.replace(reward=jnp.sum(rewards, axis=0))
        return state, outputs(state)

    zero_state = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), layout)
    return jax.jit(reset), jax.jit(step), zero_state, layout


def _torch_dtype(jax_dtype: Any) -> torch.dtype:
    import jax.numpy as jnp

    return torch.from_dlpack(jnp.zeros((), jax_dtype)).dtype


class _ClassProperty:
    """A read-only property of the class (``BraxEnv.available_envs``)."""

    def __init__(self, fget: Any) -> None:
        self.fget = fget

    def __get__(self, obj: Any, owner: type) -> Any:
        return self.fget(owner)


def _available_envs(cls: type) -> list[str]:
    _, envs = _jax()
    return sorted(envs._envs)


class BraxWrapper(EnvBase):
    """Wraps a brax env (``brax.envs.get_environment(...)``), run as ``batch_size`` vmapped copies.

    - Observations go to ``"observation"`` (a dict observation gives one key per entry), the action
      is read from ``"action"`` (``Bounded`` in ``[-1, 1]``, float32, brax's convention).
    - ``done`` is brax's ``done``. When the env carries brax's ``EpisodeWrapper``, its ``truncation``
      info gives ``truncated``; ``terminated = done and not truncated``. Otherwise ``truncated`` is
      always False.
    - Seeding: the env holds a JAX PRNG key, ``jax.random.PRNGKey(seed)``. Each reset takes
      ``key, sub = jax.random.split(key)`` and resets copy ``i`` with ``jax.random.split(sub, n)[i]``
      (``n`` the batch's number of elements), the keys brax's ``VmapWrapper(env, n).reset(sub)`` uses:
      the same seed gives the same rollout. ``seed=None`` draws the seed from torch's global generator.
    - Partial resets: a ``"_reset"`` mask of the batch shape resets only the flagged copies, each to
      the state a full reset would give it (a partial reset takes one key split, as a full one);
      the others keep their state.
    - ``frame_skip`` repeats each action, summing rewards, as brax's ``EpisodeWrapper(action_repeat=...)``
      (the repeats do not stop at an episode's end). Around an ``EpisodeWrapper``, give it the
      repeats instead (as :class:`BraxEnv` does): it checks the time limit once per repeated step.
    - Transfers: brax's outputs become torch tensors through DLPack, sharing JAX's buffers (no
      copy on JAX's device; don't modify them in place); an action goes to JAX on CPU as a NumPy
      view (``jax.dlpack.from_dlpack`` costs about 30 us more per call), on GPU through
      ``jax.dlpack``.

    Differences from TorchRL: the brax state stays on the JAX side (TorchRL puts the whole state
    under ``"state"`` in every step); reward and flags have the batch shape (TorchRL ``[*B, 1]``);
    ``truncated`` is reported; ``requires_grad`` (backpropagation through brax) and ``from_pixels``
    are not supported.

    Args:
        env: an unbatched brax env (``brax.envs.Env``), optionally inside brax's ``EpisodeWrapper``;
            not batched (``VmapWrapper``) nor auto-resetting (``AutoResetWrapper``): the wrapper does both.
        batch_size: the batch shape (number of vmapped copies: its product). Default ``[]``, one env.
        device: the device of the returned tensors (default: JAX's device).
        seed: the seed of the PRNG key (see above).
        frame_skip: how many times each action is repeated.
        from_pixels: not supported (TorchRL neither): must be False.
        requires_grad: not supported: must be False.

    Examples:
        >>> from brax import envs
        >>> env = BraxWrapper(envs.get_environment("inverted_pendulum"), batch_size=[2], seed=0)
        >>> rollout = env.rollout(3)
        >>> rollout["observation"].shape, rollout["next", "reward"].shape, rollout["action"].dtype
        (torch.Size([2, 3, 4]), torch.Size([2, 3]), torch.float32)
    """

    # set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``): the brax env, the jitted
    # functions, the brax state of the copies (None before the first reset) and the PRNG key
    _env: Any
    _jit_reset: Any
    _jit_step: Any
    _zero_state: Any
    _state: Any
    _key: Any

    def __init__(
        self,
        env: Any = None,
        *,
        batch_size: Sequence[int] | int | None = None,
        device: Any = None,
        seed: int | None = None,
        frame_skip: int = 1,
        from_pixels: bool = False,
        requires_grad: bool = False,
    ) -> None:
        jax, envs = _jax()
        import numpy as np

        owner = type(self).__name__
        _check_brax_env(owner, env, envs)
        batch = _batch_shape(owner, batch_size)
        seed = check_seed(owner, seed, allow_none=True)
        frame_skip = check_positive_int(owner, "frame_skip", frame_skip)
        if from_pixels:
            raise NotImplementedError(f"{owner}: from_pixels=True is not supported (TorchRL's BraxEnv neither).")
        if requires_grad:
            raise NotImplementedError(f"{owner}: requires_grad=True (backpropagation through brax) is not supported.")
        jax_device = jax.devices()[0]
        jax_torch = torch.device("cpu") if jax_device.platform == "cpu" else torch.device("cuda", jax_device.id)
        super().__init__(device=jax_torch if device is None else device, batch_size=batch)
        self.__dict__["_env"] = env
        self.frame_skip = frame_skip
        self._n = max(1, math.prod(batch))
        self._jax_torch = jax_torch
        self._all_copies = np.ones(self._n, dtype=bool)
        fns = _jax_functions(env, self._n, frame_skip)
        self.__dict__["_jit_reset"], self.__dict__["_jit_step"], self.__dict__["_zero_state"], layout = fns
        self.__dict__["_state"] = None
        self._make_specs(layout, env.action_size)
        self._set_seed(seed)

    @property
    def env(self) -> Any:
        """The wrapped brax env."""
        return self._env

    @property
    def state(self) -> Any:
        """The brax ``State`` of the vmapped copies (leading dim: the batch's number of elements), None before a reset."""
        return self._state

    # ------------------------------------------------------------------ construction
    def _make_specs(self, layout: Any, action_size: int) -> None:
        batch, dev = self.batch_size, self.device
        obs = layout.obs
        if isinstance(obs, Mapping):
            bad = [k for k in obs if not isinstance(k, str) or not hasattr(obs[k], "shape")]
            if bad:
                raise TypeError(f"{type(self).__name__}: the brax observation must map str to arrays, got keys {bad}.")
            self._obs_keys: tuple[str, ...] | None = tuple(obs)
            leaves = {k: obs[k] for k in self._obs_keys}
        else:
            self._obs_keys = None
            leaves = {"observation": obs}
        self.observation_spec = Composite(
            {
                k: Unbounded(shape=(*batch, *v.shape[1:]), dtype=_torch_dtype(v.dtype), device=dev)
                for k, v in leaves.items()
            },
            shape=batch,
            device=dev,
        )
        self.action_spec = Bounded(-1.0, 1.0, shape=(*batch, action_size), dtype=torch.float32, device=dev)
        self.reward_spec = Unbounded(shape=batch, dtype=_torch_dtype(layout.reward.dtype), device=dev)
        flag = Categorical(2, shape=batch, dtype=torch.bool, device=dev)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=batch, device=dev)
        self._action_shape = (self._n, action_size)

    # ------------------------------------------------------------------ seeding, reset, step
    def _set_seed(self, seed: int | None) -> None:
        jax, _ = _jax()
        if seed is None:
            seed = int(torch.empty((), dtype=torch.int64).random_())
        self.__dict__["_key"] = jax.random.PRNGKey(int(seed) % _JAX_SEEDS)

    def _reset_mask(self, tensordict: TensorDictBase | None) -> Any:
        """The numpy bool ``[n]`` mask of the copies to reset (all of them without a ``"_reset"`` entry)."""
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            return self._all_copies
        if mask.shape != self.batch_size:
            raise ValueError(
                f"{type(self).__name__}.reset: '_reset' must have the batch shape {list(self.batch_size)}, "
                f"got {list(mask.shape)}."
            )
        mask = mask.detach().reshape(self._n).to("cpu", torch.bool)
        if self._state is None and not bool(mask.all()):
            raise RuntimeError(
                f"{type(self).__name__}.reset: the first reset must reset every copy (a '_reset' mask with False "
                "entries was given before any reset)."
            )
        return mask.numpy()

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        if kwargs:
            raise TypeError(f"{type(self).__name__}.reset: unexpected arguments {sorted(kwargs)}.")
        mask = self._reset_mask(tensordict)
        old = self._state if self._state is not None else self._zero_state
        key, state, outputs = self._jit_reset(self._key, mask, old)
        self.__dict__["_key"], self.__dict__["_state"] = key, state
        return self._to_tensordict(outputs, with_reward=False)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._state is None:
            raise RuntimeError(f"{type(self).__name__}.step: call reset() before the first step.")
        action = tensordict.get("action").detach().reshape(self._action_shape)
        if self._jax_torch.type == "cpu":
            action = action.cpu().numpy()
        else:
            import jax

            action = jax.dlpack.from_dlpack(action.to(self._jax_torch).contiguous())
        state, outputs = self._jit_step(self._state, action)
        self.__dict__["_state"] = state
        return self._to_tensordict(outputs, with_reward=True)

    def _to_tensordict(self, outputs: tuple, with_reward: bool) -> TensorDictBase:
        obs, reward, flags = outputs
        batch = self.batch_size
        reshape = len(batch) != 1
        from_dlpack = torch.from_dlpack
        flags = from_dlpack(flags)
        out: dict[str, Any] = {"done": flags[0], "terminated": flags[1], "truncated": flags[2]}
        if with_reward:
            out["reward"] = from_dlpack(reward)
        if self._obs_keys is None:
            out["observation"] = from_dlpack(obs)
        else:
            for k in self._obs_keys:
                out[k] = from_dlpack(obs[k])
        if reshape:
            out = {k: v.reshape(batch + v.shape[1:]) for k, v in out.items()}
        device = self._device
        if device is not None and device != self._jax_torch:
            return _new_td({k: v.to(device) for k, v in out.items()}, batch, device)
        return _new_td(out, batch, self._jax_torch)

    # ------------------------------------------------------------------ misc
    available_envs = _ClassProperty(_available_envs)

    def close(self, *, raise_if_closed: bool = False) -> None:
        self.__dict__["_state"] = None

    def __repr__(self) -> str:
        name = type(self._env.unwrapped).__name__
        return f"{type(self).__name__}(env={name}, batch_size={list(self.batch_size)}, device={self.device})"


class BraxEnv(BraxWrapper):
    """A brax env built by name (``brax.envs.get_environment``) and wrapped (:class:`BraxWrapper`).

    With ``episode_length`` (default 1000, as ``brax.envs.create``) the env is wrapped in brax's
    ``EpisodeWrapper``, which also repeats the action ``frame_skip`` times: an episode is truncated
    after ``episode_length`` repeats. ``BraxEnv(name, batch_size=[n], seed=s, episode_length=L,
    frame_skip=k)`` steps as ``brax.envs.create(name, L, k, auto_reset=False, batch_size=n)`` reset
    with the second key of ``jax.random.split(jax.random.PRNGKey(s))``.

    Args:
        env_name: a name of brax's registry (see ``available_envs``: ``"ant"``, ``"inverted_pendulum"``...).
        batch_size: the batch shape (the number of vmapped copies is its product).
        device: the device of the returned tensors (default: JAX's device).
        seed: the seed of the env's PRNG key.
        backend: brax's physics pipeline, one of ``"generalized"``, ``"positional"``, ``"spring"``,
            ``"mjx"``; None: the env's default.
        episode_length: truncate episodes after that many steps; None: no time limit (TorchRL's
            BraxEnv has none).
        frame_skip: how many times each action is repeated (rewards summed).
        **kwargs: passed to the brax env's constructor.

    Examples:
        >>> env = BraxEnv("fast", batch_size=[4], seed=0, episode_length=3)  # brax's quick test env
        >>> rollout = env.rollout(3)
        >>> rollout["next", "truncated"][:, -1].tolist(), rollout["next", "terminated"].any().item()
        ([True, True, True, True], False)
        >>> "ant" in BraxEnv.available_envs
        True
    """

    def __init__(
        self,
        env_name: str,
        *,
        batch_size: Sequence[int] | int | None = None,
        device: Any = None,
        seed: int | None = None,
        backend: str | None = None,
        episode_length: int | None = 1000,
        frame_skip: int = 1,
        from_pixels: bool = False,
        requires_grad: bool = False,
        **kwargs: Any,
    ) -> None:
        _, envs = _jax()
        available = sorted(envs._envs)
        if env_name not in available:
            raise ValueError(f"BraxEnv: unknown env_name {env_name!r}; available: {available}.")
        if backend is not None:
            check_one_of("BraxEnv", "backend", backend, _BACKENDS)
            kwargs["backend"] = backend
        check_positive_int("BraxEnv", "episode_length", episode_length, allow_none=True)
        _batch_shape("BraxEnv", batch_size)  # checked before brax builds the env
        check_seed("BraxEnv", seed, allow_none=True)
        check_positive_int("BraxEnv", "frame_skip", frame_skip)
        env = envs.get_environment(env_name, **kwargs)
        repeats = frame_skip
        if episode_length is not None:  # brax's EpisodeWrapper repeats the action itself
            env, repeats = envs.training.EpisodeWrapper(env, episode_length, frame_skip), 1
        super().__init__(
            env,
            batch_size=batch_size,
            device=device,
            seed=seed,
            frame_skip=repeats,
            from_pixels=from_pixels,
            requires_grad=requires_grad,
        )
        self.env_name = env_name
        self.episode_length = episode_length
        self.frame_skip = frame_skip

    def __repr__(self) -> str:
        return f"BraxEnv(env_name={self.env_name!r}, batch_size={list(self.batch_size)}, device={self.device})"
