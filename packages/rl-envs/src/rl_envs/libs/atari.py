"""The standard Atari pipeline (DQN Nature) on ale-py's C++ vector engine: AtariEnv, make_atari_env.

ale-py (``pip install rl-envs[atari]``, ROMs included) is imported only when these are used. The
preprocessing runs in ale-py's C++ threads (``ale_py.vector_env.AtariVectorEnv``): per sub-env,
no-op starts, ``frame_skip`` repeats of each action with a max-pool over the last two frames,
grayscale, an ``INTER_AREA`` resize to ``screen_size`` x ``screen_size`` and a stack of the last
``frame_stack`` frames, oldest first. The observations, rewards and done flags are those of
Gymnasium's ``AtariPreprocessing`` + ``FrameStackObservation`` over the same ``gymnasium.make`` id
(a stack starts filled with the reset frame, as ``FrameStackObservation``'s default padding), with
two differences, both from the engine's random streams:

- the number of no-op frames after a reset is drawn uniformly in ``[0, noop_max]`` by ALE's C++
  generator; Gymnasium draws it in ``[1, noop_max]`` with NumPy, so the counts differ (each frame
  after them follows the same rules);
- sub-env ``i`` reset with ``seed`` seeds ALE as ``gymnasium.make(env_id).reset(seed=seed + i)``
  does (the same sticky actions), except that the engine takes 31-bit seeds: where Gymnasium's
  32-bit ALE seed has its top bit set, that bit is dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tdict import TensorDict, TensorDictBase
from tdict.seeding import check_seed, next_seed
from tdict.specs import Categorical, Composite, OneHot, Unbounded
from tdict.validation import check_non_negative_int, check_positive_int, check_unit_interval

from ..env_base import EnvBase
from ..transforms import EndOfLifeTransform, TransformedEnv
from .gymnasium import _gymnasium, _register_ale

if TYPE_CHECKING:
    import numpy as np
else:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - ale-py brings numpy; _vector_env_class() raises the install hint first
        np = None

__all__ = ["AtariEnv", "make_atari_env"]

_from_numpy = torch.from_numpy
_new_td = TensorDict.unchecked
_SEED_MASK = 0x7FFFFFFF  # ALE's vector engine ignores negative seeds: it takes 31 bits


def _vector_env_class() -> Any:
    try:
        from ale_py.vector_env import AtariVectorEnv
    except ImportError as err:
        raise ImportError(
            "AtariEnv/make_atari_env need ale-py >= 0.11, which is not installed: pip install rl-envs[atari]"
        ) from err
    return AtariVectorEnv


def _atari_kwargs(owner: str, env_id: Any) -> dict:
    """The ``gymnasium.make`` arguments ale-py registered for ``env_id`` (``game``, sticky actions...)."""
    if not isinstance(env_id, str):
        raise TypeError(f"{owner}: env_id must be a str (an Atari id such as 'ALE/Pong-v5'), got {env_id!r}.")
    gym = _gymnasium()
    _vector_env_class()  # the install hint before gymnasium's "unknown id"
    _register_ale(gym, env_id)
    try:
        spec = gym.spec(env_id)
    except gym.error.Error as err:
        raise ValueError(
            f"{owner}: env_id must be an Atari id registered by ale-py (e.g. 'ALE/Pong-v5'), got {env_id!r} ({err})."
        ) from None
    kwargs = dict(spec.kwargs)
    if not str(spec.entry_point).startswith("ale_py") or "game" not in kwargs:
        raise ValueError(
            f"{owner}: env_id must be an Atari id registered by ale-py (e.g. 'ALE/Pong-v5'), got {env_id!r} "
            f"(entry point {spec.entry_point!r})."
        )
    unsupported = {k: kwargs[k] for k in ("mode", "difficulty", "continuous") if kwargs.get(k) not in (None, False)}
    if kwargs.get("obs_type", "rgb") != "rgb":
        unsupported["obs_type"] = kwargs["obs_type"]
    if unsupported:
        raise ValueError(
            f"{owner}: the Atari pipeline observes the default game's screen; {env_id!r} is registered with "
            f"{unsupported}, which it does not support."
        )
    return kwargs


def _ale_seed(seed: int) -> int:
    """The ALE seed ``AtariEnv.reset(seed=seed)`` of ale-py derives, cut to the engine's 31 bits."""
    _, ale_seed = np.random.SeedSequence(seed % (1 << 64)).generate_state(2)
    return int(ale_seed) & _SEED_MASK


class AtariEnv(EnvBase):
    """A batch of Atari games with the standard (DQN Nature) preprocessing, run by ale-py's C++ threads.

    Writes ``"pixels"`` (uint8 ``[num_envs, frame_stack, screen_size, screen_size]``, oldest frame
    first) and ``"lives"`` (int64); reads ``"action"`` (one-hot, or indices with
    ``categorical_action_encoding``; ale-py's minimal action set unless the id asks for the full
    one). ``"reward"`` is the float32 sum over the skipped frames; ``"terminated"`` is the game's end
    (or a lost life with ``terminal_on_life_loss``), ``"truncated"`` the frame limit of the id.
    Done sub-envs are reset through ``"_reset"``. See the module's docstring for how this matches
    Gymnasium's ``AtariPreprocessing`` + ``FrameStackObservation``; :func:`make_atari_env` adds
    the end-of-life flag.

    Args:
        env_id: an Atari id registered by ale-py (``"ALE/Pong-v5"``, ``"BreakoutNoFrameskip-v4"``...);
            its sticky-action probability, action set and frame limit are the defaults.
        num_envs: the number of games (``batch_size=[num_envs]``).
        frame_skip: frames per action; the observation is the max over the last two.
        noop_max: after each reset, a random number of no-op frames in ``[0, noop_max]``.
        terminal_on_life_loss: a lost life terminates the episode (and the next reset restarts the game).
        frame_stack: frames per observation.
        screen_size: the side of the resized (square) frames.
        repeat_action_probability: sticky actions (``None``: the id's value, 0.25 for ``v5`` ids).
        max_num_frames_per_episode: truncate after this many frames (``None``: the id's value, 108000).
        clip_rewards: clip each step's reward to ``[-1, 1]``.
        num_threads: C++ worker threads (``None``: one per env, at most one per CPU).
        categorical_action_encoding: actions as indices instead of one-hot.
        device: the device of the returned tensors.

    Examples:
        >>> env = AtariEnv("ALE/Pong-v5", num_envs=2, categorical_action_encoding=True)
        >>> env.set_seed(0)  # sub-env i is seeded with 0 + i: the next env gets 2
        2
        >>> td = env.rollout(3)
        >>> td["pixels"].shape, td["pixels"].dtype, td["next", "reward"].shape
        (torch.Size([2, 3, 4, 84, 84]), torch.uint8, torch.Size([2, 3]))
        >>> bool((td["pixels"][:, 0, 0] == td["pixels"][:, 0, 3]).all())  # the stack starts with the reset frame
        True
        >>> env.close()
    """

    _env: Any  # ale-py's AtariVectorEnv, set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``)

    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        *,
        frame_skip: int = 4,
        noop_max: int = 30,
        terminal_on_life_loss: bool = False,
        frame_stack: int = 4,
        screen_size: int = 84,
        repeat_action_probability: float | None = None,
        max_num_frames_per_episode: int | None = None,
        clip_rewards: bool = False,
        num_threads: int | None = None,
        categorical_action_encoding: bool = False,
        device: Any = None,
    ) -> None:
        owner = type(self).__name__
        num_envs = check_positive_int(owner, "num_envs", num_envs)
        frame_skip = check_positive_int(owner, "frame_skip", frame_skip)
        noop_max = check_non_negative_int(owner, "noop_max", noop_max)
        frame_stack = check_positive_int(owner, "frame_stack", frame_stack)
        screen_size = check_positive_int(owner, "screen_size", screen_size)
        num_threads = check_non_negative_int(owner, "num_threads", num_threads, allow_none=True)
        max_frames = check_positive_int(
            owner, "max_num_frames_per_episode", max_num_frames_per_episode, allow_none=True
        )
        for name, flag in (
            ("terminal_on_life_loss", terminal_on_life_loss),
            ("clip_rewards", clip_rewards),
            ("categorical_action_encoding", categorical_action_encoding),
        ):
            if not isinstance(flag, bool):
                raise TypeError(f"{owner}: {name} must be a bool, got {flag!r}.")
        if repeat_action_probability is not None:
            repeat_action_probability = float(
                check_unit_interval(owner, "repeat_action_probability", repeat_action_probability)
            )
        kwargs = _atari_kwargs(owner, env_id)
        if repeat_action_probability is None:
            repeat_action_probability = float(kwargs.get("repeat_action_probability", 0.25))
        if max_frames is None:
            max_frames = int(kwargs.get("max_num_frames_per_episode", None) or 108_000)
        gym = _gymnasium()
        env = _vector_env_class()(
            kwargs["game"],
            num_envs,
            num_threads=num_threads or 0,
            max_num_frames_per_episode=max_frames,
            repeat_action_probability=repeat_action_probability,
            full_action_space=bool(kwargs.get("full_action_space", False)),
            autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
            img_height=screen_size,
            img_width=screen_size,
            grayscale=True,
            stack_num=frame_stack,
            frameskip=frame_skip,
            maxpool=True,
            # the engine draws in [0, noop_max - 1]: one more gives "up to noop_max" no-ops
            noop_max=noop_max + 1 if noop_max else 0,
            episodic_life=terminal_on_life_loss,
            life_loss_info=False,
            reward_clipping=clip_rewards,
            use_fire_reset=False,
        )
        super().__init__(device=device, batch_size=[num_envs])
        self.__dict__["_env"] = env
        self.env_id, self.game, self.num_envs = env_id, str(kwargs["game"]), num_envs
        self.frame_skip, self.noop_max, self.frame_stack, self.screen_size = (
            frame_skip,
            noop_max,
            frame_stack,
            screen_size,
        )
        self.terminal_on_life_loss, self.clip_rewards = terminal_on_life_loss, clip_rewards
        self.repeat_action_probability, self.max_num_frames_per_episode = repeat_action_probability, max_frames
        self.categorical_action_encoding = categorical_action_encoding
        self._n_actions = int(env.single_action_space.n)
        self._pending_seed: int | None = None
        self._started = False
        # frames in each sub-env's stack since its reset: the engine pads with zeros, we with the reset frame
        self._age = np.zeros(num_envs, dtype=np.int64)
        # done at the last step and not reset since: the engine resets such a sub-env at its next step
        self._stepped_done = np.zeros(num_envs, dtype=bool)
        self._make_specs()

    def _make_specs(self) -> None:
        batch, device, n = self.batch_size, self.device, self._n_actions
        size = self.screen_size
        self.observation_spec = Composite(
            pixels=Unbounded(shape=(*batch, self.frame_stack, size, size), dtype=torch.uint8, device=device),
            lives=Unbounded(shape=batch, dtype=torch.int64, device=device),
            shape=batch,
        )
        if self.categorical_action_encoding:
            self.action_spec = Categorical(n, shape=batch, dtype=torch.int64, device=device)
        else:
            self.action_spec = OneHot(n, shape=(*batch, n), dtype=torch.int64, device=device)
        self.reward_spec = Unbounded(shape=batch, device=device)
        flag = Categorical(2, shape=batch, dtype=torch.bool, device=device)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=batch)
        self._to_device = device is not None and device.type != "cpu"

    # ------------------------------------------------------------------ seeding, reset
    def _set_seed(self, seed: int | None) -> None:
        self._pending_seed = seed  # the next reset seeds the sub-envs it resets

    def _seed_streams(self, seed: int | None) -> int | None:
        """One stream per sub-env: sub-env ``i`` is reset with ``seed + i``."""
        self._set_seed(seed)
        return None if seed is None else next_seed(seed, self.num_envs)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        seed = kwargs.pop("seed", None)
        if kwargs:
            raise TypeError(f"{type(self).__name__}.reset: unexpected arguments {sorted(kwargs)} (expected seed).")
        if seed is None:
            seed = self._pending_seed
        else:
            seed = check_seed(f"{type(self).__name__}.reset", seed)
        self._pending_seed = None
        mask = tensordict.get("_reset", None) if tensordict is not None else None
        rows = None
        if mask is not None and self._started:  # the engine's first reset must reset every sub-env
            rows = mask.reshape(self.batch_size).cpu().numpy().astype(bool)
            if rows.all():
                rows = None
        index = np.arange(self.num_envs) if rows is None else np.flatnonzero(rows)
        seeds = None if seed is None else np.array([_ale_seed(seed + int(i)) for i in index], dtype=np.int64)
        obs, info = self._env.reset(seed=seeds, options=None if rows is None else {"reset_mask": rows})
        self._started = True
        self._age[index] = 1
        self._stepped_done[index] = False
        self._pad(obs)
        out = {"pixels": _from_numpy(obs), "lives": _from_numpy(info["lives"].astype(np.int64))}
        td = _new_td(out, self._batch_size, self._device)
        return td.to(self.device) if self._to_device else td

    def _pad(self, obs: np.ndarray) -> None:
        """Fills the stack slots before each young sub-env's reset frame with that frame (in place)."""
        age, stack = self._age, self.frame_stack
        young = age < stack
        if young.any():
            for i in np.flatnonzero(young):
                first = stack - int(age[i])  # the slot of the reset frame
                obs[i, :first] = obs[i, first]

    # ------------------------------------------------------------------ step
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get("action")
        if not self.categorical_action_encoding:
            action = action.argmax(-1)
        index = action.cpu().numpy() if action.device.type != "cpu" else action.numpy()
        # an index out of range stops the engine's worker thread and the step never returns: refuse it here
        if self.categorical_action_encoding and (index.view(np.uint64) >= self._n_actions).any():
            raise ValueError(
                f"{type(self).__name__}: action indices must be in [0, {self._n_actions}), got {index.tolist()}."
            )
        obs, reward, terminated, truncated, info = self._env.step(index)
        age = self._age
        age += 1
        stepped_done = self._stepped_done
        if stepped_done.any():  # the engine reset these sub-envs in place of the step
            age[stepped_done] = 1
        np.minimum(age, self.frame_stack, out=age)
        done = terminated | truncated
        np.copyto(stepped_done, done)
        self._pad(obs)
        out = {
            "pixels": _from_numpy(obs),
            "lives": _from_numpy(info["lives"].astype(np.int64)),
            "reward": _from_numpy(reward.astype(np.float32)),
            "done": _from_numpy(done),
            "terminated": _from_numpy(terminated),
            "truncated": _from_numpy(truncated),
        }
        td = _new_td(out, self._batch_size, self._device)
        return td.to(self.device) if self._to_device else td

    # ------------------------------------------------------------------ misc
    def close(self, *, raise_if_closed: bool = False) -> None:
        """Closes ale-py's vector env (its worker threads stop when it is freed)."""
        self._env.close()

    def __repr__(self) -> str:
        return (
            f"AtariEnv(env_id={self.env_id!r}, num_envs={self.num_envs}, frame_skip={self.frame_skip}, "
            f"noop_max={self.noop_max}, frame_stack={self.frame_stack}, screen_size={self.screen_size}, "
            f"terminal_on_life_loss={self.terminal_on_life_loss}, "
            f"repeat_action_probability={self.repeat_action_probability}, device={self.device})"
        )


def make_atari_env(
    env_id: str,
    num_envs: int = 1,
    *,
    frame_skip: int = 4,
    noop_max: int = 30,
    terminal_on_life_loss: bool = False,
    frame_stack: int = 4,
    screen_size: int = 84,
    repeat_action_probability: float | None = None,
    clip_rewards: bool = False,
    seed: int | None = None,
    num_threads: int | None = None,
    categorical_action_encoding: bool = False,
    device: Any = None,
) -> TransformedEnv:
    """The standard Atari pipeline (DQN Nature): an :class:`AtariEnv` with an end-of-life flag.

    Up to ``noop_max`` no-op frames after each reset, each action repeated ``frame_skip`` times
    with a max-pool over the last two frames, grayscale, a resize to ``screen_size`` x
    ``screen_size``, the last ``frame_stack`` frames stacked (``"pixels"``, uint8), and
    ``("next", "end-of-life")`` = a life lost or done (:class:`~rl_envs.EndOfLifeTransform`, read by
    losses in place of ``terminated``); or, with ``terminal_on_life_loss``, a lost life ends the
    episode. The arguments are :class:`AtariEnv`'s, plus:

    Args:
        seed: seeds the env (sub-env ``i`` with ``seed + i``; ``None``: not seeded).

    Returns:
        ``TransformedEnv(AtariEnv(...), EndOfLifeTransform())``.

    Examples:
        >>> env = make_atari_env("ALE/Breakout-v5", num_envs=2, seed=0)
        >>> td = env.rollout(4)
        >>> td["pixels"].shape, td["next", "end-of-life"].dtype, td["next", "lives"][:, -1].tolist()
        (torch.Size([2, 4, 4, 84, 84]), torch.bool, [5, 5])
        >>> env.close()
    """
    seed = check_seed("make_atari_env", seed, allow_none=True)
    env = AtariEnv(
        env_id,
        num_envs,
        frame_skip=frame_skip,
        noop_max=noop_max,
        terminal_on_life_loss=terminal_on_life_loss,
        frame_stack=frame_stack,
        screen_size=screen_size,
        repeat_action_probability=repeat_action_probability,
        clip_rewards=clip_rewards,
        num_threads=num_threads,
        categorical_action_encoding=categorical_action_encoding,
        device=device,
    )
    out = TransformedEnv(env, EndOfLifeTransform())
    if seed is not None:
        out.set_seed(seed)
    return out
