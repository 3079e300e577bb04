"""Episode-structure transforms: reset tracking, trajectory ids, no-op starts, frame skipping, random
truncation, predicate termination and Atari-style end-of-life flags."""

from __future__ import annotations

import copy
import multiprocessing as mp
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

import torch
from tdict import TensorDictBase
from tdict import NestedKey, unravel_key
from tdict.specs import Bounded, Categorical, Composite, Unbounded
from tdict.seeding import make_generator, next_seed
from tdict.validation import check_unit_interval

from ._episode_utils import _ENV_ONLY, _join, _mask, _need_parent, _prefix
from .._generator_state import GeneratorState
from .base import Compose, Transform  # noqa: F401  (Compose: used by the doctests)
from .stepping import FrameSkipTransform, NoopResetEnv

if TYPE_CHECKING:
    from multiprocessing.sharedctypes import Synchronized

__all__ = [
    "InitTracker",
    "TrajCounter",
    "NoopResetEnv",
    "FrameSkipTransform",
    "RandomTruncationTransform",
    "TerminateTransform",
    "EndOfLifeTransform",
]


# ---------------------------------------------------------------------- InitTracker
class InitTracker(Transform):
    """Writes ``is_init``: True on the first step of each episode (reset output), False afterwards.

    With a partial reset only the reset sub-envs are flagged. One flag is written per reset key of
    the parent env (``"is_init"`` at the root, ``(group, "is_init")`` for nested done entries); when
    the env has a root done flag, only the root ``"is_init"`` is written.

    Args:
        init_key: leaf name of the flag.

    Examples:
        >>> from rl_envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), InitTracker())
        >>> r = env.rollout(3)
        >>> r["is_init"].tolist(), r["next", "is_init"].tolist()
        ([True, False, False], [False, False, False])
    """

    _pairs: list | None  # set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``)

    def __init__(self, init_key: str = "is_init") -> None:
        if not isinstance(init_key, str):
            raise ValueError(f"InitTracker: init_key can only be of type str (a leaf name), got {init_key!r}.")
        super().__init__()
        self.init_key = init_key
        self.__dict__["_pairs"] = None

    def set_container(self, container: Any) -> None:
        self.__dict__["_pairs"] = None
        super().set_container(container)

    def _init_pairs(self) -> list:
        """(reset key, init key, done key) for each done root of the parent."""
        pairs = self._pairs
        if pairs is None:
            parent = _need_parent(self)
            keys = parent._keys()
            pairs = []
            groups = list(zip(keys.done_roots, keys.reset_keys))
            if any(not root for root, _ in groups):  # a root done flag: nested ones are ignored (TorchRL's rule)
                groups = [(root, reset_key) for root, reset_key in groups if not root]
            for root, reset_key in groups:
                done = [k for k in keys.done_keys if _prefix(k) == root]
                pairs.append((reset_key, _join(root, self.init_key), done[0]))
            self.__dict__["_pairs"] = pairs
        return pairs

    @property
    def out_keys(self) -> list:
        return [p[1] for p in self._init_pairs()] if self.parent is not None else [self.init_key]

    @out_keys.setter
    def out_keys(self, value: Any) -> None:
        pass

    @property
    def init_keys(self) -> list:
        """The ``is_init`` entries written, one per done group of the parent (TorchRL's name)."""
        return self.out_keys

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        for reset_key, init_key, done_key in self._init_pairs():
            shape = tensordict_reset.get(done_key).shape
            tensordict_reset.set(init_key, _mask(tensordict, reset_key, shape, tensordict_reset.device).clone())
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for _, init_key, done_key in self._init_pairs():
            next_tensordict.set(init_key, torch.zeros_like(next_tensordict.get(done_key)))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError(
            "InitTracker cannot be executed without a parent env: it flags resets, which happen inside an env."
        )

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        done_spec = output_spec["full_done_spec"]
        obs = output_spec["full_observation_spec"]
        for _, init_key, done_key in self._init_pairs():
            leaf = done_spec[done_key]
            obs[init_key] = Categorical(2, shape=leaf.shape, dtype=torch.bool, device=leaf.device)
        output_spec["full_observation_spec"] = obs
        return output_spec

    def __repr__(self) -> str:
        return f"InitTracker(init_key={self.init_key!r})"


# ---------------------------------------------------------------------- TrajCounter
class TrajCounter(Transform):
    """Gives every episode of every sub-env a unique id ``traj_count`` (0, 1, 2, ... in reset order).

    The counter is an ``mp.Value`` with its lock: ``clone()`` shares it, so clones in several envs (or
    worker processes started by fork, or by spawn with the transform passed at creation) never hand
    out the same id twice. ``state_dict()`` saves the next id.

    Args:
        out_key: where the id is written.

    Examples:
        >>> from rl_envs import PendulumEnv, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), StepCounter(2))
        >>> env.append_transform(TrajCounter())  # doctest: +ELLIPSIS
        TransformedEnv(...)
        >>> env.rollout(5, break_when_any_done=False)["next", "traj_count"].tolist()
        [0, 0, 1, 1, 2]
    """

    # set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``)
    _traj_count: Synchronized[int]
    _initialized: bool

    def __init__(self, out_key: NestedKey = "traj_count", *, repeats: int | None = None) -> None:
        super().__init__(in_keys=[], out_keys=[unravel_key(out_key)])  # ("a", ("b",)) -> ("a", "b")
        # a spawn-context lock: it may be handed to workers started by fork, spawn or forkserver
        self.__dict__["_traj_count"] = mp.get_context("spawn").Value("q", 0)
        self.repeats = repeats or 0
        self.__dict__["_initialized"] = False

    @property
    def _key(self) -> NestedKey:
        return self.out_keys[0]

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        key = self._key
        reset_key = _join(_prefix(key), "_reset")
        done_key = _join(_prefix(key), "done")
        done = tensordict_reset.get(done_key, None)
        shape = done.shape if done is not None else tensordict_reset.batch_size
        mask = _mask(tensordict, reset_key, shape, tensordict_reset.device)
        n = int(mask.sum())
        counter = self._traj_count
        with counter.get_lock():
            first = int(counter.value)
            counter.value = first + n
        ids = torch.zeros(shape, dtype=torch.int64, device=tensordict_reset.device)
        ids[mask] = torch.arange(first, first + n, device=ids.device)
        tensordict_reset.set(key, ids)
        self.__dict__["_initialized"] = True
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        value = tensordict.get(self._key, None)
        if value is None:
            raise RuntimeError(f"TrajCounter: {self._key!r} is missing from the step input; reset the env first.")
        next_tensordict.set(self._key, value)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(
            "TrajCounter can only be called within an environment step or reset; it has no meaning on a plain "
            "TensorDict."
        )

    def clone(self) -> "TrajCounter":
        counter = self.__dict__.pop("_traj_count")
        try:
            out = cast("TrajCounter", super().clone())
        finally:
            self.__dict__["_traj_count"] = counter
        out.__dict__["_traj_count"] = counter
        return out

    def __deepcopy__(self, memo: dict) -> "TrajCounter":
        # the shared counter is never copied: every copy hands out ids from the same sequence
        cls = type(self)
        out = cls.__new__(cls)
        memo[id(self)] = out
        for k, v in self.__dict__.items():
            out.__dict__[k] = v if k == "_traj_count" else copy.deepcopy(v, memo)
        return out

    def state_dict(self, *args: Any, **kwargs: Any) -> dict:
        return {"traj_count": int(self._traj_count.value)}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        with self._traj_count.get_lock():
            self._traj_count.value = int(state_dict["traj_count"])

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        key = self._key
        done_spec = output_spec["full_done_spec"]
        done_key = _join(_prefix(key), "done")
        shape = done_spec[done_key].shape if done_key in done_spec.keys(True, True) else output_spec.shape
        obs = output_spec["full_observation_spec"]
        obs[key] = Bounded(0, torch.iinfo(torch.int64).max, shape=shape, dtype=torch.int64, device=obs.device)
        output_spec["full_observation_spec"] = obs
        return output_spec

    def __repr__(self) -> str:
        return f"TrajCounter(out_key={self._key!r}, next_id={int(self._traj_count.value)})"


# ---------------------------------------------------------------------- RandomTruncationTransform
class RandomTruncationTransform(GeneratorState, Transform):
    """Truncates episodes at a random horizon per sub-env, to decorrelate batched envs (TorchRL 0.14).

    Needs a :class:`~rl_envs.StepCounter` earlier in the chain (reads ``step_count``). On the first
    reset every sub-env gets a horizon uniform in ``[1, max_horizon]``; on later resets of a sub-env,
    with probability ``prob`` (``first_episode_prob`` for its first later episode) a horizon uniform in
    ``[min_horizon, max_horizon]``, else ``max_horizon``. When ``step_count`` reaches the horizon,
    ``truncated`` and ``done`` are set. Draws use the transform's generator (``seed``), one random
    stream: a transformed env seeds it after its base env (``set_seed``).

    Args:
        min_horizon: smallest random horizon (inclusive).
        max_horizon: largest horizon (inclusive), and the horizon when no random truncation is drawn.
        prob: probability of a random horizon on each later reset.
        first_episode_prob: probability for the first episode after the initial spread (default ``prob``).
        step_count_key, truncated_key, done_key: the entries read and written.
        seed: seed of the transform's generator (``None``: drawn from torch's global generator).

    Examples:
        >>> from rl_envs import PendulumEnv, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(batch_size=[4]),
        ...                      Compose(StepCounter(), RandomTruncationTransform(2, 5, prob=1.0, seed=0)))
        >>> env.set_seed(0)  # the env's generator gets 0, the transform's 1
        2
        >>> r = env.rollout(20, break_when_any_done=False)
        >>> bool((r["next", "step_count"] <= 5).all())
        True
    """

    def __init__(
        self,
        min_horizon: int,
        max_horizon: int,
        prob: float = 0.0,
        first_episode_prob: float | None = None,
        *,
        step_count_key: NestedKey = "step_count",
        truncated_key: NestedKey = "truncated",
        done_key: NestedKey = "done",
        seed: int | None = None,
    ) -> None:
        first_episode_prob = prob if first_episode_prob is None else first_episode_prob
        for name, p in (("prob", prob), ("first_episode_prob", first_episode_prob)):
            check_unit_interval("RandomTruncationTransform", name, p)
        for name, h in (("min_horizon", min_horizon), ("max_horizon", max_horizon)):
            if h < 1:
                raise ValueError(f"RandomTruncationTransform: {name} must be >= 1, got {h}.")
        if max_horizon < min_horizon:
            raise ValueError(
                f"RandomTruncationTransform: min_horizon ({min_horizon}) must be <= max_horizon ({max_horizon})."
            )
        super().__init__()
        self.min_horizon, self.max_horizon = int(min_horizon), int(max_horizon)
        self.prob, self.first_episode_prob = float(prob), float(first_episode_prob)
        self.step_count_key, self.truncated_key, self.done_key = step_count_key, truncated_key, done_key
        self.generator = make_generator(seed, owner="RandomTruncationTransform")
        self.register_buffer("_horizons", None, persistent=False)
        self.register_buffer("_first_episode", None, persistent=False)

    def set_seed(self, seed: int | None) -> int | None:
        """Seeds the transform's generator with ``seed`` (one stream); returns ``seed + 1``."""
        self.generator = make_generator(seed, owner="RandomTruncationTransform.set_seed")
        return None if seed is None else next_seed(seed)

    def _draw(self, n: int, prob: torch.Tensor) -> torch.Tensor:
        h = torch.randint(self.min_horizon, self.max_horizon + 1, (n,), generator=self.generator)
        keep_full = torch.rand(n, generator=self.generator) >= prob
        return torch.where(keep_full, torch.full_like(h, self.max_horizon), h)

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        count = tensordict_reset.get(self.step_count_key, None)
        if count is None:
            raise RuntimeError(
                f"RandomTruncationTransform reads {self.step_count_key!r}, which the reset output lacks: put a "
                "StepCounter before it, e.g. Compose(StepCounter(), RandomTruncationTransform(...))."
            )
        done = tensordict_reset.get(self.done_key, None)
        tensordict_reset.set(
            self.truncated_key, torch.zeros_like(count, dtype=torch.bool) if done is None else torch.zeros_like(done)
        )
        shape = count.shape
        if self._horizons is None or self._horizons.shape != shape:
            self._horizons = torch.randint(1, self.max_horizon + 1, shape, generator=self.generator).to(count.device)
            self._first_episode = torch.ones(shape, dtype=torch.bool, device=count.device)
            return tensordict_reset
        mask = _mask(tensordict, _join(_prefix(self.step_count_key), "_reset"), shape, count.device)
        n = int(mask.sum())
        if n:
            prob = torch.where(self._first_episode[mask].cpu(), self.first_episode_prob, self.prob)
            horizons = self._horizons.clone()
            horizons[mask] = self._draw(n, prob).to(horizons.device)
            self._horizons = horizons
            first = self._first_episode.clone()
            first[mask] = False
            self._first_episode = first
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        horizons = self._horizons
        if horizons is None:  # no reset seen yet: no horizon to cut at
            return next_tensordict
        count = next_tensordict.get(self.step_count_key)
        cut = count >= horizons
        done = next_tensordict.get(self.done_key, None)
        if done is not None and cut.shape != done.shape:  # a done flag with a trailing dim ([*B, 1])
            cut = cut.reshape(*cut.shape, *([1] * (done.ndim - cut.ndim))).expand(done.shape)
        for key in (self.truncated_key, self.done_key):
            old = done if key == self.done_key else next_tensordict.get(key, None)
            next_tensordict.set(key, cut if old is None else old | cut)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError(_ENV_ONLY.format("RandomTruncationTransform"))

    def _check_attachment(self) -> None:
        # inside an env, refuse a chain where nothing before this transform writes the step count
        from ..env_base import EnvBase
        from .step_counter import StepCounter

        env = self._holding_env()
        if not isinstance(env, EnvBase):
            return
        node, container = self, self._container
        while isinstance(container, Transform):
            if isinstance(container, Compose):
                for t in container:
                    if t is node:
                        break
                    if any(isinstance(m, StepCounter) and m.step_count_key == self.step_count_key for m in t.modules()):
                        return
            node, container = container, container._container
        base = env.__dict__.get("_base")
        if base is not None and self.step_count_key in base.observation_spec.keys(True, True):
            return
        raise RuntimeError(
            f"RandomTruncationTransform requires a StepCounter earlier in the chain (it reads "
            f"{self.step_count_key!r}), e.g. Compose(StepCounter(), RandomTruncationTransform(...))."
        )

    def transform_done_spec(self, done_spec: Composite) -> Composite:
        if self.truncated_key not in done_spec.keys(True, True):
            leaf = done_spec[self.done_key]
            done_spec[self.truncated_key] = Categorical(2, shape=leaf.shape, dtype=torch.bool, device=leaf.device)
        return done_spec

    def __repr__(self) -> str:
        return (
            f"RandomTruncationTransform(min_horizon={self.min_horizon}, max_horizon={self.max_horizon}, "
            f"prob={self.prob})"
        )


# ---------------------------------------------------------------------- TerminateTransform
class TerminateTransform(Transform):
    """Ends episodes when ``stop(next_tensordict)`` is true: the flag is OR-ed into ``terminated`` (and
    ``done`` unless ``write_done=False``) of each done group, as in TorchRL 0.14.

    Args:
        stop: ``next_td -> bool`` (a bool or a tensor broadcastable to the done entries).
        write_done: also set ``done``.

    Examples:
        >>> from rl_envs import PendulumEnv, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0),
        ...                      Compose(StepCounter(), TerminateTransform(lambda td: td["step_count"] >= 4)))
        >>> r = env.rollout(100)
        >>> r.batch_size, bool(r["next", "terminated"][-1])
        (torch.Size([4]), True)
    """

    def __init__(self, stop: Callable[[TensorDictBase], Any], *, write_done: bool = True) -> None:
        if not callable(stop):
            raise ValueError(f"TerminateTransform: stop must be callable, got {type(stop).__name__}.")
        super().__init__()
        self.stop = stop
        self.write_done = write_done

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        flag = self.stop(next_tensordict)
        flag = torch.as_tensor(flag, device=next_tensordict.device).bool()
        parent = self.parent
        cached = self.__dict__.get("_targets")
        if cached is None or cached[0] != id(parent):  # an id: a copy of the transform never copies a view
            done_keys = parent._keys().done_keys if parent is not None else ["done", "terminated"]
            names = ("terminated", "done") if self.write_done else ("terminated",)
            cached = (id(parent), [k for k in done_keys if (k if isinstance(k, str) else k[-1]) in names])
            self.__dict__["_targets"] = cached
        for key in cached[1]:
            current = next_tensordict.get(key, None)
            if current is None:
                continue
            f = flag.reshape(tuple(flag.shape) + (1,) * (current.ndim - flag.ndim)).expand(current.shape)
            next_tensordict.set(key, current | f)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(
            "TerminateTransform cannot run without a parent environment: it only works inside an env (reset/step)."
        )

    def __repr__(self) -> str:
        return f"TerminateTransform(stop={self.stop!r}, write_done={self.write_done})"


# ---------------------------------------------------------------------- EndOfLifeTransform
class EndOfLifeTransform(Transform):
    """Writes an end-of-life flag (``done`` or a lost life) for games with several lives (Atari).

    The number of lives comes from the ``lives_key`` observation when the parent env declares one,
    else from the base env attribute ``eol_attribute`` (a dotted path; a callable is called), written
    as ``lives_key``. ``("next", eol_key) = (lives dropped) | done``. The flag is an observation, not a
    done entry, so it does not reset the env; losses read it in place of ``done``/``terminated``.
    ``forward`` on a trajectory or replay sample computes the flag from the root and ``"next"`` lives.

    Args:
        eol_key: where the flag is written.
        lives_key: the lives entry.
        done_key: the done entry combined with the flag.
        eol_attribute: dotted attribute path of the lives counter on the base env.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict(lives=torch.tensor([3, 3]), next=TensorDict(
        ...     lives=torch.tensor([3, 2]), done=torch.tensor([False, False]), batch_size=[2]), batch_size=[2])
        >>> EndOfLifeTransform()(td)["next", "end-of-life"].tolist()
        [False, True]
    """

    _from_obs: bool | None  # set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``)

    def __init__(
        self,
        eol_key: NestedKey = "end-of-life",
        lives_key: NestedKey = "lives",
        done_key: NestedKey = "done",
        eol_attribute: str = "unwrapped.ale.lives",
    ) -> None:
        super().__init__(in_keys=[done_key], out_keys=[eol_key, lives_key])
        self.eol_key, self.lives_key, self.done_key = eol_key, lives_key, done_key
        self.eol_attribute = eol_attribute.split(".")
        self.__dict__["_from_obs"] = None

    def _lives_from_obs(self) -> bool:
        from_obs = self._from_obs
        if from_obs is None:
            from_obs = self.lives_key in _need_parent(self).full_observation_spec.keys(True, True)
            self.__dict__["_from_obs"] = from_obs
        return from_obs

    def _attribute_lives(self, like: torch.Tensor) -> torch.Tensor:
        obj: Any = _need_parent(self).base_env
        try:
            for name in self.eol_attribute:
                obj = [getattr(o, name) for o in obj] if isinstance(obj, list) else getattr(obj, name)
        except AttributeError as err:
            raise AttributeError(
                f"EndOfLifeTransform: the env has no lives observation {self.lives_key!r} and no attribute "
                f"{'.'.join(self.eol_attribute)!r} ({err})."
            ) from None
        if callable(obj):
            obj = obj()
        elif isinstance(obj, list):
            obj = [o() if callable(o) else o for o in obj]
        return torch.as_tensor(obj, dtype=torch.int64, device=like.device).reshape(like.shape)

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        done = tensordict_reset.get(self.done_key)
        tensordict_reset.set(self.eol_key, torch.zeros_like(done))
        if not self._lives_from_obs():
            tensordict_reset.set(self.lives_key, self._attribute_lives(done))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        done = next_tensordict.get(self.done_key)
        if self._lives_from_obs():
            lives = next_tensordict.get(self.lives_key)
        else:
            lives = self._attribute_lives(done)
            next_tensordict.set(self.lives_key, lives)
        lost = tensordict.get(self.lives_key) > lives
        next_tensordict.set(self.eol_key, lost.reshape(tuple(lost.shape) + (1,) * (done.ndim - lost.ndim)) | done)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        nxt = tensordict.get("next")
        lost = tensordict.get(self.lives_key) > nxt.get(self.lives_key)
        done = nxt.get(self.done_key)
        nxt.set(self.eol_key, lost.reshape(tuple(lost.shape) + (1,) * (done.ndim - lost.ndim)) | done)
        return tensordict

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        done_leaf = output_spec["full_done_spec"][self.done_key]
        obs = output_spec["full_observation_spec"]
        obs[self.eol_key] = Categorical(2, shape=done_leaf.shape, dtype=torch.bool, device=done_leaf.device)
        if self.lives_key not in obs.keys(True, True):
            obs[self.lives_key] = Unbounded(shape=output_spec.shape, dtype=torch.int64, device=obs.device)
        output_spec["full_observation_spec"] = obs
        return output_spec

    def __repr__(self) -> str:
        return f"EndOfLifeTransform(eol_key={self.eol_key!r}, lives_key={self.lives_key!r})"
