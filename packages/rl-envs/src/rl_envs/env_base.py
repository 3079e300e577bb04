"""EnvBase: the environment contract (specs, reset, step, rollout) that every env implements."""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import torch
from torch import nn
from tdict import (
    LazyStackedTensorDict,
    NonTensorStack,
    TensorDict,
    TensorDictBase,
    is_leaf_nontensor,
    is_non_tensor,
    lazy_stack,
)
from tdict.seeding import check_seed, next_seed
from tdict.specs import Categorical, Composite, Unbounded

from ._env_keys import EnvKeys, _leaf_name, _root_of, any_done, fill_done, plan_done_fill, spec_shape_error
from ._generator_state import GeneratorState

__all__ = ["EnvBase", "SPEC_NAMES"]

# the five composite specs an env is described by; output = observation + reward + done, input = action + state
SPEC_NAMES = ("full_observation_spec", "full_reward_spec", "full_done_spec", "full_action_spec", "full_state_spec")
_OUTPUT = ("full_observation_spec", "full_reward_spec", "full_done_spec")
_INPUT = ("full_state_spec", "full_action_spec")


def _unbatched_property(name: str, doc: str) -> property:
    """A TorchRL ``*_unbatched`` spec property: reads the spec ``name`` of one sub-env, and expands
    an assigned per-sub-env spec to the env's batch dims."""

    def get(env: EnvBase) -> Any:
        return env._unbatched(getattr(env, name))

    def set_(env: EnvBase, spec: Any) -> None:
        setattr(env, name, env._batched(spec))

    return property(get, set_, doc=doc)


def _init_with_spec_lock(init: Callable) -> Callable:
    """Wraps an env class's ``__init__``: it takes TorchRL's ``spec_locked=`` keyword (so that the
    class's own ``__init__`` never sees it), and the outermost ``__init__`` applies it once the
    specs are set (:meth:`EnvBase.set_spec_lock_`)."""

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, spec_locked: bool | None = None, **kwargs: Any) -> None:
        state = self.__dict__
        outer = "_spec_lock_pending" not in state
        if outer or spec_locked is not None:
            state["_spec_lock_pending"] = True if spec_locked is None else spec_locked
        try:
            init(self, *args, **kwargs)
        finally:
            mode = state.pop("_spec_lock_pending") if outer else None
        if outer:
            self.set_spec_lock_(mode)

    __init__._applies_spec_lock = True  # type: ignore[attr-defined]
    return __init__


def _cast_action(
    key: Any, action: Any, batch_dims: int, feature_shape: torch.Size, dtype: torch.dtype, batch_size: torch.Size
) -> torch.Tensor:
    """An integer or bool ``action`` cast to the spec's ``dtype`` when every value survives the cast.

    A policy writing a one-hot ``int64`` action for a ``bool`` spec, or an ``int32`` index for an
    ``int8`` spec, gets its action cast (TorchRL passes it through as it is). A wrong shape, a
    floating-point action for another dtype, or a value the dtype cannot hold (``2`` for a ``bool``
    spec) raises ``ValueError``.
    """
    if (
        not isinstance(action, torch.Tensor)
        or action.shape[batch_dims:] != feature_shape
        or action.is_floating_point()
        or action.is_complex()
    ):
        raise spec_shape_error("action", key, batch_size + feature_shape, dtype, action)
    cast = action.to(dtype)
    if not torch.equal(cast.to(action.dtype), action):
        raise ValueError(
            f"action {key!r}: dtype {action.dtype} cannot be cast to the spec dtype {dtype} without changing "
            f"its values (expected shape {list(batch_size + feature_shape)} and dtype {dtype})."
        )
    return cast


class EnvBase(GeneratorState, nn.Module):
    """Base class of all environments: specs describe the data, ``_reset``/``_step`` produce it.

    Subclasses set their specs in ``__init__`` (``observation_spec``, ``action_spec``, and optionally
    ``reward_spec``, ``done_spec``, ``state_spec``) and implement:

    - ``_reset(tensordict, **kwargs) -> TensorDict``: the first observation (and done flags, which
      default to ``False`` when left out). ``tensordict`` may hold a ``"_reset"`` mask (partial reset
      of a batched env) or parameters (stateless envs).
    - ``_step(tensordict) -> TensorDict``: reads the action, returns the next observation, reward
      and done flags (``done``, ``terminated``, and ``truncated`` when declared).
    - ``_set_seed(seed)``: seeds the env's random stream (its ``torch.Generator``); ``set_seed`` then
      returns ``seed + 1``, the next env's seed (the convention of :mod:`tdict.seeding`). An env
      with several streams overrides ``_seed_streams`` instead.

    Per-step scalars (reward, done flags) have the batch shape with no trailing dim.

    ``state_dict`` carries the env's buffers and the state of every ``torch.Generator`` attribute
    (``self._rng = torch.Generator()``), so that a restored env draws the same resets. An env whose
    whole state is in the TensorDicts it exchanges plus its ``state_dict`` says so with
    :attr:`resumable` (then a collector can continue its trajectories after a restart).

    Args:
        device: where the env's tensors live.
        batch_size: the env's batch dims (``[]`` for a single env, ``[N]`` for N vectorised envs).
        validate_actions: check every action against its spec (``is_in``) before stepping.
            Shape and dtype are always checked (cheaply).
        allow_done_after_reset: let ``reset`` return episodes that are already done (by default a
            done flag set in a freshly reset sub-env raises ``RuntimeError``).
        spec_locked: (taken by any subclass's constructor, TorchRL's keyword) ``True`` (default): once
            built, the specs are locked, so that an in-place edit (``env.observation_spec["x"] = ...``)
            raises ``RuntimeError``; assigning a whole spec stays allowed. ``False`` allows in-place
            edits, at the cost of re-reading the specs' keys on every step. See :meth:`set_spec_lock_`.

    TorchRL-style envs port unchanged: specs declared as class attributes ``_output_spec`` /
    ``_input_spec`` in a custom ``__new__`` are adopted, and a ``_step`` that writes only ``done``
    or only ``terminated`` gets the other (``terminated = done``; ``done = terminated | truncated``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import Bounded, Composite, Unbounded
        >>> class Counter(EnvBase):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.observation_spec = Composite(count=Unbounded(shape=(1,)))
        ...         self.action_spec = Bounded(0.0, 1.0, shape=(1,))
        ...     def _reset(self, tensordict=None):
        ...         return TensorDict(count=torch.zeros(1))
        ...     def _step(self, tensordict):
        ...         count = tensordict["count"] + tensordict["action"]
        ...         done = (count > 2).squeeze(-1)
        ...         return TensorDict(count=count, reward=count.sum(), done=done, terminated=done)
        ...     def _set_seed(self, seed):
        ...         pass
        >>> env = Counter()
        >>> env.set_seed(3)  # one random stream: the next env gets seed 4
        4
        >>> rollout = env.rollout(5, lambda td: td.set("action", torch.ones(1)))
        >>> rollout["next", "count"].squeeze(-1).tolist()
        [1.0, 2.0, 3.0]
        >>> rollout["next", "reward"].shape
        torch.Size([3])
    """

    # set through ``self.__dict__`` in ``__init__`` (so that nn.Module's ``__setattr__`` is bypassed)
    _device: torch.device | None
    _batch_size: torch.Size
    _env_keys: EnvKeys | None
    _specs: dict[str, Composite]

    def __new__(cls, *args: Any, _batch_locked: bool = True, **kwargs: Any) -> Any:
        # Subclasses may define ``__new__(cls, *args, **kwargs)`` that forwards its arguments here, and
        # may declare their specs there as class attributes ``_output_spec`` / ``_input_spec`` (TorchRL's
        # convention): those belong to the instance, and ``__init__`` adopts them. ``_batch_locked=False``
        # makes the env batch-unlocked, as in TorchRL (or override the ``batch_locked`` property).
        env = super().__new__(cls)
        if not _batch_locked:
            env.__dict__["_batch_locked"] = False
        declared = {}
        for attr, names in (("_output_spec", _OUTPUT), ("_input_spec", _INPUT)):
            spec = cls.__dict__.get(attr)
            if spec is None:
                continue
            delattr(cls, attr)
            if not isinstance(spec, Composite):
                raise TypeError(f"{cls.__name__}.{attr} must be a Composite, got {type(spec).__name__}.")
            declared.update({name: spec[name].clone() for name in names if name in spec.keys()})
        env.__dict__["_declared_specs"] = declared
        return env

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_applies_spec_lock", False):
            cls.__init__ = _init_with_spec_lock(init)  # type: ignore[method-assign]

    def __init__(
        self,
        *,
        device: Any = None,
        batch_size: Sequence[int] | torch.Size | None = None,
        validate_actions: bool = False,
        allow_done_after_reset: bool = False,
    ) -> None:
        super().__init__()
        declared = self.__dict__.pop("_declared_specs", None) or {}
        if batch_size is None and declared:  # specs declared in ``__new__`` carry the batch size
            batch_size = next(iter(declared.values())).shape
        self.__dict__["_device"] = torch.device(device) if device is not None else None
        self.__dict__["_batch_size"] = torch.Size(batch_size if batch_size is not None else ())
        self.validate_actions = validate_actions
        self.allow_done_after_reset = allow_done_after_reset
        self.__dict__["_env_keys"] = None
        shape = self._batch_size
        self.__dict__["_specs"] = {name: Composite(shape=shape, device=self._device) for name in SPEC_NAMES}
        for name, spec in declared.items():
            self._set_spec(name, spec if self._device is None else spec.to(self._device))

    # ------------------------------------------------------------------ basic attributes
    @property
    def batch_size(self) -> torch.Size:
        """The env's batch dims (``torch.Size([])`` for a single env, ``[N]`` for N vectorised envs)."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: Sequence[int]) -> None:
        self.__dict__["_batch_size"] = torch.Size(value)
        self._specs_changed()

    @property
    def shape(self) -> torch.Size:
        """The batch size (TorchRL's alias: ``env.shape == env.batch_size``)."""
        return self._batch_size

    @property
    def device(self) -> torch.device | None:
        """Where the env's tensors live (``None``: not fixed); setting it does not move the specs (``to`` does)."""
        return self._device

    @device.setter
    def device(self, value: Any) -> None:
        self.__dict__["_device"] = torch.device(value) if value is not None else None

    @property
    def resumable(self) -> bool:
        """Whether the env's whole state lives in the step TensorDict and in its ``state_dict``.

        Then a restored env (``load_state_dict``) continues a trajectory from a saved step
        TensorDict, as a collector resuming a run does. ``False`` by default (a wrapped simulator
        keeps state of its own); native envs that read their state from the TensorDict say ``True``.
        """
        return False

    @property
    def batch_locked(self) -> bool:
        """Whether ``step``/``reset`` accept only the env's own batch size (read-only, True by default).

        A batch-unlocked env (a stateless env that reads its whole state from the TensorDict) takes
        any leading batch dims before its own.
        """
        return self.__dict__.get("_batch_locked", True)

    @batch_locked.setter
    def batch_locked(self, value: bool) -> None:
        raise RuntimeError(
            "batch_locked is a read-only property: override it in the env class, or pass _batch_locked=False "
            "to EnvBase.__new__ (TorchRL's convention)."
        )

    def _all_specs(self) -> dict[str, Composite]:
        """The five full specs (TransformedEnv returns the transformed ones)."""
        return self._specs

    def _keys(self) -> EnvKeys:
        keys = self._env_keys
        if keys is None:
            specs = self._all_specs()
            self._fill_default_specs(specs)
            keys = EnvKeys(specs, len(self._batch_size))
            # heterogeneous actions (a stack of specs of different shapes: -1 dims) are lazy stacks that
            # cannot be read densely; like TorchRL, they are passed to the env unchecked
            dense = tuple(c for c in keys.action_checks if -1 not in c[3])
            keys.hetero_actions = len(dense) != len(keys.action_checks)  # type: ignore[attr-defined]
            keys.action_checks = dense
            if self.is_spec_locked:  # in-place edits would make the cached keys lie: assign a new spec instead
                for spec in specs.values():
                    spec.lock_()
                self.__dict__["_env_keys"] = keys
        return keys

    @property
    def is_spec_locked(self) -> bool:
        """Whether the specs are locked against in-place edits (``spec_locked`` at construction)."""
        return self.__dict__.get("_spec_locked", True)

    def set_spec_lock_(self, mode: bool = True) -> EnvBase:
        """Lock (``mode=True``) or unlock the specs; returns the env.

        Locked specs refuse in-place edits (``env.observation_spec["x"] = spec`` raises
        ``RuntimeError``), which lets the env read their keys once; assigning a whole new spec
        (``env.observation_spec = spec``) is always allowed. Unlocked, the keys are re-read on
        every ``step``/``reset``.

        Examples:
            >>> from tdict.specs import Unbounded
            >>> from rl_envs import PendulumEnv
            >>> env = PendulumEnv()
            >>> env.is_spec_locked
            True
            >>> env.set_spec_lock_(False).observation_spec["extra"] = Unbounded(shape=(2,))
            >>> "extra" in env.observation_spec.keys()
            True
        """
        mode = bool(mode)
        self.__dict__["_spec_locked"] = mode
        self._specs_changed()
        for spec in (self.__dict__.get("_specs") or {}).values():  # the derived specs lock when first read
            spec.lock_() if mode else spec.unlock_()
        return self

    def _specs_changed(self) -> None:
        self.__dict__["_env_keys"] = None

    def _fill_default_specs(self, specs: dict[str, Composite]) -> None:
        shape = self._batch_size
        if specs["full_reward_spec"].is_empty() and "full_reward_spec" in self._specs:
            self._specs["full_reward_spec"] = Composite(reward=Unbounded(shape=shape, device=self._device), shape=shape)
            specs["full_reward_spec"] = self._specs["full_reward_spec"]
        if specs["full_done_spec"].is_empty() and "full_done_spec" in self._specs:
            done = Categorical(2, shape=shape, dtype=torch.bool, device=self._device)
            self._specs["full_done_spec"] = Composite(done=done, terminated=done.clone(), shape=shape)
            specs["full_done_spec"] = self._specs["full_done_spec"]

    # ------------------------------------------------------------------ specs
    def _get_spec(self, name: str) -> Composite:
        specs = self._all_specs()
        if name in ("full_reward_spec", "full_done_spec") and specs[name].is_empty():
            self._keys()  # fills the defaults
            specs = self._all_specs()
        return specs[name]

    def _set_spec(self, name: str, spec: Any) -> None:
        if not isinstance(spec, Composite):
            raise TypeError(f"{name} must be a Composite, got {type(spec).__name__}.")
        if "_specs" not in self.__dict__:  # assigned before EnvBase.__init__ ran: adopted there, as in TorchRL
            self.__dict__.setdefault("_declared_specs", {})[name] = spec
            return
        if spec.shape != self._batch_size:
            if len(spec.shape) == 0 and len(self._batch_size) > 0:
                raise ValueError(
                    f"{name}: the Composite has shape [] but the env's batch_size is {list(self._batch_size)}; "
                    f"build it with Composite(..., shape={list(self._batch_size)})."
                )
            raise ValueError(
                f"{name}: shape {list(spec.shape)} does not match the env's batch_size {list(self._batch_size)}."
            )
        if name == "full_done_spec":
            spec = self._complete_done_spec(spec)
        self._specs[name] = spec
        self._specs_changed()

    def _wrap_leaf(self, key: str, spec: Any) -> Composite:
        if isinstance(spec, Composite):
            return spec
        shape = self.__dict__.get("_batch_size", torch.Size())  # before __init__: the leaf's batch is unknown
        if tuple(spec.shape[: len(shape)]) != tuple(shape):
            raise ValueError(
                f"{key} spec: shape {list(spec.shape)} must start with the env's batch_size {list(shape)}."
            )
        return Composite({key: spec}, shape=shape)

    @staticmethod
    def _complete_done_spec(spec: Composite) -> Composite:
        # "done" and "terminated" always come together (done = terminated | truncated)
        keys = spec.keys()
        if "done" in keys and "terminated" not in keys:
            spec = spec.clone()
            spec["terminated"] = spec["done"].clone()
        elif "terminated" in keys and "done" not in keys:
            spec = spec.clone()
            spec["done"] = spec["terminated"].clone()
        return spec

    def _leaf_or_full(self, name: str) -> Any:
        full = self._get_spec(name)
        leaves = list(full.keys(True, True))
        return full[leaves[0]] if len(leaves) == 1 else full

    full_observation_spec = property(
        lambda self: self._get_spec("full_observation_spec"),
        lambda self, v: self._set_spec("full_observation_spec", v),
        doc="The observations: a Composite of shape ``batch_size`` (assign a new one to change it).",
    )
    full_reward_spec = property(
        lambda self: self._get_spec("full_reward_spec"),
        lambda self, v: self._set_spec("full_reward_spec", v),
        doc='The rewards: a Composite of shape ``batch_size`` (default: an Unbounded ``"reward"`` of that shape).',
    )
    full_done_spec = property(
        lambda self: self._get_spec("full_done_spec"),
        lambda self, v: self._set_spec("full_done_spec", v),
        doc='The done flags: a Composite of shape ``batch_size`` (default: bool ``"done"`` and '
        '``"terminated"``); an assigned spec with only one of the two gets the other as a copy.',
    )
    full_action_spec = property(
        lambda self: self._get_spec("full_action_spec"),
        lambda self, v: self._set_spec("full_action_spec", v),
        doc="The actions: a Composite of shape ``batch_size`` (assign a new one to change it).",
    )
    full_state_spec = property(
        lambda self: self._get_spec("full_state_spec"),
        lambda self, v: self._set_spec("full_state_spec", v),
        doc="The inputs other than actions that ``step`` reads: a Composite of shape ``batch_size``.",
    )

    @property
    def observation_spec(self) -> Composite:
        """``full_observation_spec``; a leaf spec assigned here becomes its ``"observation"`` entry."""
        return self._get_spec("full_observation_spec")

    @observation_spec.setter
    def observation_spec(self, spec: Any) -> None:
        self._set_spec("full_observation_spec", self._wrap_leaf("observation", spec))

    state_spec = full_state_spec

    @property
    def action_spec(self) -> Any:
        """The action leaf spec when there is one action, else the full composite.

        A leaf assigned here becomes the ``"action"`` entry of ``full_action_spec``.
        """
        return self._leaf_or_full("full_action_spec")

    @action_spec.setter
    def action_spec(self, spec: Any) -> None:
        self._set_spec("full_action_spec", self._wrap_leaf("action", spec))

    @property
    def reward_spec(self) -> Any:
        """The reward leaf spec when there is one reward, else the full composite.

        A leaf assigned here becomes the ``"reward"`` entry of ``full_reward_spec``.
        """
        return self._leaf_or_full("full_reward_spec")

    @reward_spec.setter
    def reward_spec(self, spec: Any) -> None:
        self._set_spec("full_reward_spec", self._wrap_leaf("reward", spec))

    @property
    def done_spec(self) -> Any:
        """The done leaf spec when there is one done flag, else the full composite.

        A leaf assigned here becomes the ``"done"`` entry (and a copy the ``"terminated"`` one).
        """
        return self._leaf_or_full("full_done_spec")

    @done_spec.setter
    def done_spec(self, spec: Any) -> None:
        self._set_spec("full_done_spec", self._wrap_leaf("done", spec))

    def _unbatched(self, spec: Any) -> Any:
        """``spec`` for one env of the batch (the env's batch dims removed), as TorchRL's ``*_unbatched``."""
        return spec[(0,) * len(self._batch_size)] if self._batch_size else spec.clone()

    def _batched(self, spec: Any) -> Any:
        """``spec`` of one sub-env expanded to the env's batch dims (the inverse of ``_unbatched``)."""
        return spec.expand(*self._batch_size, *spec.shape) if self._batch_size else spec

    full_observation_spec_unbatched = _unbatched_property(
        "full_observation_spec", "``full_observation_spec`` of one sub-env (assigning expands it to the batch)."
    )
    full_reward_spec_unbatched = _unbatched_property(
        "full_reward_spec", "``full_reward_spec`` of one sub-env (assigning expands it to the batch)."
    )
    full_done_spec_unbatched = _unbatched_property(
        "full_done_spec", "``full_done_spec`` of one sub-env (assigning expands it to the batch)."
    )
    full_action_spec_unbatched = _unbatched_property(
        "full_action_spec", "``full_action_spec`` of one sub-env (assigning expands it to the batch)."
    )
    full_state_spec_unbatched = _unbatched_property(
        "full_state_spec", "``full_state_spec`` of one sub-env (assigning expands it to the batch)."
    )
    observation_spec_unbatched = _unbatched_property(
        "observation_spec", "``observation_spec`` of one sub-env (assigning expands it to the batch)."
    )
    state_spec_unbatched = full_state_spec_unbatched
    action_spec_unbatched = _unbatched_property(
        "action_spec", "``action_spec`` of one sub-env (batch dims removed; assigning expands it to the batch)."
    )
    reward_spec_unbatched = _unbatched_property(
        "reward_spec", "``reward_spec`` of one sub-env (batch dims removed; assigning expands it to the batch)."
    )
    done_spec_unbatched = _unbatched_property(
        "done_spec", "``done_spec`` of one sub-env (batch dims removed; assigning expands it to the batch)."
    )
    output_spec_unbatched = _unbatched_property(
        "output_spec", "``output_spec`` of one sub-env (assigning expands it to the batch)."
    )
    input_spec_unbatched = _unbatched_property(
        "input_spec", "``input_spec`` of one sub-env (assigning expands it to the batch)."
    )

    @property
    def output_spec(self) -> Composite:
        """``Composite(full_observation_spec, full_reward_spec, full_done_spec)``."""
        spec = Composite({name: self._get_spec(name) for name in _OUTPUT}, shape=self._batch_size)
        return spec.lock_(recurse=False) if self.is_spec_locked else spec

    @output_spec.setter
    def output_spec(self, spec: Composite) -> None:
        for name in _OUTPUT:
            if name in spec.keys():
                self._set_spec(name, spec[name])

    @property
    def input_spec(self) -> Composite:
        """``Composite(full_state_spec, full_action_spec)``."""
        spec = Composite({name: self._get_spec(name) for name in _INPUT}, shape=self._batch_size)
        return spec.lock_(recurse=False) if self.is_spec_locked else spec

    @input_spec.setter
    def input_spec(self, spec: Composite) -> None:
        for name in _INPUT:
            if name in spec.keys():
                self._set_spec(name, spec[name])

    # keys (TorchRL names)
    action_keys = property(
        lambda self: list(self._keys().action_keys), doc="The leaf keys of ``full_action_spec`` (a new list)."
    )
    reward_keys = property(
        lambda self: list(self._keys().reward_keys), doc="The leaf keys of ``full_reward_spec`` (a new list)."
    )
    done_keys = property(
        lambda self: list(self._keys().done_keys), doc="The leaf keys of ``full_done_spec`` (a new list)."
    )
    observation_keys = property(
        lambda self: list(self._keys().observation_keys), doc="The leaf keys of ``full_observation_spec`` (a new list)."
    )
    state_keys = property(
        lambda self: list(self._keys().state_keys), doc="The leaf keys of ``full_state_spec`` (a new list)."
    )
    reset_keys = property(
        lambda self: list(self._keys().reset_keys),
        doc='The ``"_reset"`` mask keys: one per sub-tree holding done flags (``"_reset"`` at the root).',
    )

    @property
    def done_keys_groups(self) -> list[list]:
        """The done keys grouped by the ``"_reset"`` key that resets them (one group per entry of ``reset_keys``)."""
        keys = self._keys()
        return [[k for k in keys.done_keys if _root_of(k) == root] for root in keys.done_roots]

    def _single_key(self, keys: list, what: str) -> Any:
        if len(keys) != 1:
            raise KeyError(f"The env has {len(keys)} {what} keys ({keys}); use {what}_keys.")
        return keys[0]

    action_key = property(
        lambda self: self._single_key(self._keys().action_keys, "action"),
        doc="The action key; raises ``KeyError`` when the env has several (use ``action_keys``).",
    )
    reward_key = property(
        lambda self: self._single_key(self._keys().reward_keys, "reward"),
        doc="The reward key; raises ``KeyError`` when the env has several (use ``reward_keys``).",
    )
    done_key = property(
        lambda self: self._keys().stop_keys[0],
        doc='The first ``"done"`` key (the first done key when no leaf is named ``"done"``).',
    )

    # ------------------------------------------------------------------ subclass hooks
    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__} must implement _reset(tensordict, **kwargs).")

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__} must implement _step(tensordict).")

    def _set_seed(self, seed: int | None) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _set_seed(seed).")

    @classmethod
    def _fuse_serial(cls, envs: Sequence[EnvBase]) -> Any:
        """How a :class:`~rl_envs.SerialEnv` may step ``envs`` (its sub-envs, all of this class) as one.

        ``None`` (the default): each sub-env steps on its own. A class may return an object with
        ``step_keys``, ``reset_keys``, ``step(action, out) -> done``, ``convert(actions)`` /
        ``step_converted(converted_row, out)`` (the action conversion done once for many steps)
        and ``reset(rows, out)``, which write numpy rows into ``out`` (see
        :class:`~rl_envs.libs._gym_fused.GymFusedSteps`); the data must be what the sub-envs' own
        ``_step`` and ``reset`` give.
        """
        return None

    def _seed_streams(self, seed: int | None) -> int | None:
        """Seeds every random stream of the env from ``seed``; returns the seed that follows them.

        One stream by default (``_set_seed(seed)``, then ``seed + 1``). An env made of seeded parts (a
        transformed env, a batched env) seeds them in turn (:func:`tdict.seeding.chain_seeds`).
        """
        self._set_seed(seed)
        return None if seed is None else next_seed(seed)

    # ------------------------------------------------------------------ the contract
    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seeds the env; returns the seed of the next env (the convention of :mod:`tdict.seeding`).

        An env with ``k`` random streams seeds them with ``seed, ..., seed + k - 1`` and returns
        ``seed + k``: ``seed + 1`` for an env with one generator (TorchRL returns a hashed seed).
        ``static_seed=True`` returns ``seed`` itself; ``seed=None`` seeds randomly and returns ``None``.
        """
        seed = check_seed(f"{type(self).__name__}.set_seed", seed, allow_none=True)
        following = self._seed_streams(seed)
        return seed if seed is None or static_seed else following

    def reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        """Starts new episodes; returns the first step's root entries (observation, done flags...).

        With ``tensordict`` given, its entries are updated with the reset output and it is returned;
        a ``"_reset"`` mask in it resets only the selected sub-envs (the others keep their values).
        """
        keys = self._keys()
        masks = None
        if tensordict is not None:
            self._check_batch_size("reset", tensordict)
            masks = [tensordict.get(k, None) for k in keys.reset_keys]
            if all(m is None for m in masks):
                masks = None
        out = self._reset(tensordict, **kwargs)
        if out is tensordict:
            raise RuntimeError(f"{type(self).__name__}._reset must return a new TensorDict, not modify its input.")
        self._complete_reset_done(out, keys)
        if not self.allow_done_after_reset:
            _check_not_done_after_reset(self, out, keys, masks)
        if tensordict is None:
            return out
        for key in keys.reset_keys:
            tensordict.pop(key, None)
        if masks is None or all(m is None or bool(m.all()) for m in masks):
            tensordict.update(out)
            return tensordict
        return _partial_update(tensordict, out, keys, masks, self._batch_size)

    def _check_batch_size(self, what: str, tensordict: TensorDictBase) -> None:
        """Raises unless ``tensordict``'s batch size is the env's (a batch-unlocked env: ends with it)."""
        size, n = tensordict.batch_size, len(self._batch_size)
        if self.batch_locked and size != self._batch_size:
            raise RuntimeError(
                f"{what}: Expected a tensordict with shape==env.batch_size, got batch_size {list(size)} for an env of "
                f"batch_size {list(self._batch_size)}."
            )
        if not self.batch_locked and (len(size) < n or size[len(size) - n :] != self._batch_size):
            raise RuntimeError(
                f"{what}: Expected a tensordict with shape ending in env.batch_size {list(self._batch_size)} "
                f"(a batch-unlocked env takes leading dims), got batch_size {list(size)}."
            )

    def _complete_reset_done(self, out: TensorDictBase, keys: EnvKeys) -> None:
        done_spec = None
        for key in keys.done_keys:
            if out.get(key, None) is None:
                if done_spec is None:
                    done_spec = self._get_spec("full_done_spec")
                extra = out.batch_size[: out.batch_dims - keys.batch_dims]  # batch-unlocked envs: leading dims
                out.set(key, done_spec[key].zero(extra))

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Takes one step: reads the action in ``tensordict``, writes ``tensordict["next"]``, returns it."""
        keys = self._env_keys
        if keys is None:
            keys = self._keys()
        batch_dims = tensordict.batch_dims
        if tensordict.batch_size != self._batch_size:
            self._check_batch_size("step", tensordict)
        for key, feature_shape, dtype, shape in keys.action_checks:
            action = tensordict.get(key)
            if action.shape[batch_dims:] != feature_shape or action.dtype != dtype:
                tensordict.set(key, _cast_action(key, action, batch_dims, feature_shape, dtype, tensordict.batch_size))
        if self.validate_actions:
            self._validate_actions(tensordict, keys)
        next_td = carry_next_preset(tensordict, self._step(tensordict))
        if not keys.first_step_checked:
            keys.done_fill = plan_done_fill(next_td, keys.done_keys)
        if keys.done_fill:
            fill_done(next_td, keys.done_fill, self._get_spec("full_done_spec"), keys.batch_dims)
        if not keys.first_step_checked:
            self._check_step_output(next_td, keys)
        if next_td.batch_size != tensordict.batch_size:
            raise ValueError(
                f"{type(self).__name__}._step returned batch_size {list(next_td.batch_size)}, "
                f"expected {list(tensordict.batch_size)}."
            )
        tensordict.set("next", next_td)
        return tensordict

    def _validate_actions(self, tensordict: TensorDictBase, keys: EnvKeys) -> None:
        for key, spec in keys.action_specs:
            value = tensordict.get(key)
            if value.ndim > len(spec.shape):  # batch-unlocked env: extra leading dims
                spec = spec.expand(*value.shape[: value.ndim - len(spec.shape)], *spec.shape)
            try:
                spec.assert_is_in(value)
            except (ValueError, AssertionError) as err:
                raise ValueError(f"action {key!r} is outside its spec: {err}") from None

    def _check_step_output(self, next_td: TensorDictBase, keys: EnvKeys) -> None:
        """The first step is checked against the specs: missing or misshapen rewards and done flags."""
        batch = next_td.batch_size
        for key, feature_shape, dtype, _ in keys.output_checks:
            shape = batch + feature_shape
            value = next_td.get(key, None)
            if value is None:
                raise KeyError(
                    f"{type(self).__name__}._step did not write {key!r} (expected shape {list(shape)}, dtype {dtype}); "
                    f"it wrote {sorted(map(str, next_td.keys(True, True)))}."
                )
            if value.shape != shape:
                raise spec_shape_error(f"{type(self).__name__}._step output", key, shape, dtype, value)
        keys.first_step_checked = True

    def step_and_maybe_reset(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Steps, moves to the next root, and resets the sub-envs that are done.

        Returns ``(stepped, next_root)``: the step as recorded (with ``"next"``), and the input of the
        following step, where done sub-envs already hold their reset observation.
        """
        tensordict = self.step(tensordict)
        return tensordict, self.maybe_reset(self._keys().shift(tensordict))

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Resets the sub-envs whose done flags are set in ``tensordict`` (a root step, no ``"next"``).

        Returns ``tensordict`` itself, updated in place where a reset happened.
        """
        keys = self._keys()
        if any_done(tensordict, keys.stop_keys):
            for reset_key, done_root in zip(keys.reset_keys, keys.done_roots):
                tensordict.set(reset_key, _reset_flag(tensordict, done_root, keys))
            tensordict = self.reset(tensordict)
        return tensordict

    def rollout(
        self,
        max_steps: int,
        policy: Callable | None = None,
        callback: Callable | None = None,
        *,
        auto_reset: bool = True,
        break_when_any_done: bool | None = None,
        break_when_all_done: bool | None = None,
        return_contiguous: bool = True,
        tensordict: TensorDictBase | None = None,
        set_truncated: bool = False,
        out: TensorDictBase | None = None,
        trust_policy: bool = False,
        actions: Any = None,
        storing_device: Any = None,
        auto_cast_to_device: bool = False,
    ) -> TensorDictBase:
        """Runs ``max_steps`` steps and returns them stacked: a ``[*batch_size, T]`` TensorDict.

        See :func:`rl_envs.rollout.rollout` for the arguments.
        """
        from .rollout import rollout

        return rollout(
            self,
            max_steps,
            policy,
            callback,
            auto_reset=auto_reset,
            break_when_any_done=break_when_any_done,
            break_when_all_done=break_when_all_done,
            return_contiguous=return_contiguous,
            tensordict=tensordict,
            set_truncated=set_truncated,
            out=out,
            trust_policy=trust_policy,
            actions=actions,
            storing_device=storing_device,
            auto_cast_to_device=auto_cast_to_device,
        )

    def add_truncated_keys(self) -> EnvBase:
        """Declares a ``"truncated"`` flag next to every ``"done"`` flag (a copy of its spec); returns the env.

        A ``_step`` that does not write it reports ``False`` (see the class docs); ``rollout(...,
        set_truncated=True)`` marks the last step with it.
        """
        done_spec = self._get_spec("full_done_spec")
        dones = [key for key in self._keys().done_keys if _leaf_name(key) == "done"]
        if not dones:
            raise KeyError(f"{type(self).__name__}.add_truncated_keys: the env declares no 'done' key: {done_spec}.")
        done_spec = done_spec.clone()
        for key in dones:
            root = _root_of(key)
            done_spec[(*root, "truncated") if root else "truncated"] = done_spec[key].clone()
        self.full_done_spec = done_spec
        return self

    def step_mdp(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The next step's input from a stepped ``tensordict`` (with ``"next"``): see :func:`rl_envs.step_mdp`.

        Uses the env's keys: the ``"next"`` entries move to the root, the reward leaves, the action
        stays (as in TorchRL's ``env.step_mdp``; the rollout's own shift drops it).
        """
        from .mdp import MDPShift

        keys = self._keys()
        return MDPShift(keys.action_keys, keys.reward_keys, keys.done_keys, exclude_action=False)(tensordict)

    def append_transform(self, transform: Any) -> Any:
        """A :class:`~rl_envs.TransformedEnv` applying ``transform`` to this env (a new wrapper; a
        ``TransformedEnv`` appends to its own chain instead)."""
        from .transforms import Transform, TransformedEnv

        if not isinstance(transform, Transform):
            raise TypeError(f"append_transform takes a Transform, got {type(transform).__name__}.")
        return TransformedEnv(self, transform)

    def auto_specs_(self, policy: Callable[[TensorDictBase], TensorDictBase], **kwargs: Any) -> EnvBase:
        """Sets the specs from what one reset and one step with ``policy`` produce (TorchRL's
        ``auto_specs_``); see :func:`rl_envs.auto_specs.auto_specs` for the keyword arguments."""
        from .auto_specs import auto_specs

        return auto_specs(self, policy, **kwargs)

    def check_env_specs(self, *args: Any, **kwargs: Any) -> None:
        """Runs :func:`rl_envs.check_env_specs` on this env (same arguments)."""
        from .checks import check_env_specs

        check_env_specs(self, *args, **kwargs)

    def rand_action(
        self, tensordict: TensorDictBase | None = None, *, generator: torch.Generator | None = None
    ) -> TensorDictBase:
        """Writes a random action (from the action spec) into ``tensordict`` (a new one if None).

        With ``generator`` the action is drawn from it and torch's global generator is left alone.
        """
        keys = self._keys()
        if tensordict is None:
            tensordict = TensorDict.unchecked({}, self._batch_size, self._device)
        extra = tensordict.batch_size[: tensordict.batch_dims - keys.batch_dims]
        if getattr(keys, "hetero_actions", False):  # lazy stacks of actions of different shapes: drawn whole
            _merge_into(tensordict, self._get_spec("full_action_spec").rand(extra, generator=generator))
            return tensordict
        for key, spec in keys.action_specs:
            tensordict.set(key, spec.rand(extra, generator=generator))
        return tensordict

    def rand_step(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """``step`` with a random action."""
        return self.step(self.rand_action(tensordict))

    def fake_tensordict(self) -> TensorDictBase:
        """A zero-filled step with every key the specs declare (root and ``"next"``)."""
        self._keys()
        obs = self._get_spec("full_observation_spec").zero()
        root = self._get_spec("full_state_spec").zero()
        root.update(self._get_spec("full_action_spec").zero())
        root.update(obs.clone())
        done = self._get_spec("full_done_spec").zero()
        root.update(done.clone())
        nxt = obs
        nxt.update(self._get_spec("full_reward_spec").zero())
        nxt.update(done)
        root.set("next", nxt)
        return root

    def close(self, *, raise_if_closed: bool = False) -> None:
        """Releases the env's resources (no-op by default).

        ``raise_if_closed``: batched envs raise when already closed (TorchRL's default is ``True``;
        closing is idempotent here unless asked).
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_size={list(self._batch_size)}, device={self._device})"

    def to(self, *args: Any, **kwargs: Any) -> "EnvBase":
        device = torch._C._nn._parse_to(*args, **kwargs)[0]  # pyright: ignore[reportAttributeAccessIssue]
        super().to(*args, **kwargs)
        if device is not None:
            self.device = device
            for name, spec in self._specs.items():
                self._specs[name] = spec.to(device)
            self._specs_changed()
        return self


EnvBase.__init__ = _init_with_spec_lock(EnvBase.__init__)  # type: ignore[method-assign]


def carry_next_preset(tensordict: TensorDictBase, next_td: TensorDictBase) -> TensorDictBase:
    """Keep what the policy already wrote under ``"next"`` and the env does not produce.

    A recurrent policy writes its next hidden state at ``("next", "recurrent_state")`` before the
    step; the step's output gets those entries (the env's own entries win), as in TorchRL.
    """
    preset = tensordict.get("next", None)
    if preset is None or preset is next_td or isinstance(preset, torch.Tensor):
        return next_td
    for key in preset.keys(include_nested=True, leaves_only=True):
        if key not in next_td:
            next_td.set(key, preset.get(key))
    return next_td


def _reset_flag(root: TensorDictBase, done_root: tuple, keys: EnvKeys) -> torch.Tensor:
    """The ``"_reset"`` mask of one sub-tree: its ``done`` flag, or the OR of its done keys."""
    sub = root.get(done_root) if done_root else root
    flag = sub.get("done", None)
    if flag is not None:
        return flag
    leaves = [root.get(k) for k in keys.done_keys if _root_of(k) == done_root]
    flag = leaves[0]
    for leaf in leaves[1:]:
        flag = flag | leaf
    return flag


def _check_not_done_after_reset(env: EnvBase, out: TensorDictBase, keys: EnvKeys, masks: list | None) -> None:
    """Raises when a sub-env that was just reset reports done (``masks``: the ``"_reset"`` masks, or None)."""
    for reset_key, done_root, mask in zip(keys.reset_keys, keys.done_roots, masks or [None] * len(keys.reset_keys)):
        for key in keys.stop_keys:
            if _root_of(key) != done_root:
                continue
            flag = out.get(key)
            if mask is not None:
                flag = flag & _expand_mask(mask.reshape(mask.shape[: flag.ndim]), flag)
            if flag.any():
                raise RuntimeError(
                    f"{type(env).__name__}.reset returned {key!r} True for a sub-env it reset (where {reset_key!r} "
                    "was set); an episode must not be done right after its reset. Pass allow_done_after_reset=True "
                    "to the env's constructor if this is intended."
                )


def _expand_mask(mask: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    extra = value.ndim - mask.ndim
    return mask.reshape(*mask.shape, *([1] * extra)) if extra > 0 else mask


def _merge_into(dest: TensorDictBase, src: TensorDictBase) -> None:
    """Writes ``src``'s leaves into ``dest``, member by member where both hold lazy stacks (whose
    members may differ in shape), keeping ``dest``'s other entries."""
    for key in src.keys():
        value = src.get(key)
        target = dest.get(key, None)
        if isinstance(value, LazyStackedTensorDict) and type(target) is TensorDict:  # split it into members
            target = lazy_stack(list(target.unbind(value.stack_dim)), value.stack_dim)
            dest.set(key, target)
        if isinstance(value, LazyStackedTensorDict) and isinstance(target, LazyStackedTensorDict):
            if len(value.tensordicts) == len(target.tensordicts) and value.stack_dim == target.stack_dim:
                for dst_member, src_member in zip(target.tensordicts, value.tensordicts):
                    _merge_into(dst_member, src_member)
                continue
        if isinstance(value, TensorDictBase) and isinstance(target, TensorDictBase):
            _merge_into(target, value)
            continue
        dest.set(key, value)


def _partial_update(
    tensordict: TensorDictBase, out: TensorDictBase, keys: EnvKeys, masks: list, batch_size: torch.Size
) -> TensorDictBase:
    """Writes the reset output only where a ``"_reset"`` mask is set; other sub-envs keep their values.

    A root mask prevails (TorchRL's rule): where it is set, the sub-trees reset too, whatever their
    own masks say.
    """
    root_mask = None
    for done_root, mask in zip(keys.done_roots, masks):
        if mask is not None and not done_root:
            root_mask = mask.reshape(batch_size) if mask.numel() == batch_size.numel() else mask
    given_root = root_mask is not None
    if root_mask is None:  # only sub-tree masks: the root resets where any sub-entry does
        nested = [m for m in masks if m is not None]
        root_mask = nested[0].reshape(*batch_size, -1).any(-1)
        for m in nested[1:]:
            root_mask = root_mask | m.reshape(*batch_size, -1).any(-1)
    sub_masks = {root: m for root, m in zip(keys.done_roots, masks) if root and m is not None}
    if given_root:
        for root, m in sub_masks.items():
            if m.ndim >= root_mask.ndim and m.shape[: root_mask.ndim] == root_mask.shape:
                sub_masks[root] = m | root_mask.reshape(*root_mask.shape, *(1,) * (m.ndim - root_mask.ndim))
    for key, value in out.items(True, True, is_leaf_nontensor):
        path = (key,) if type(key) is str else key
        mask = root_mask
        for root, m in sub_masks.items():
            if path[: len(root)] == root:
                mask = m
        old = tensordict.get(key, None)
        if old is not None and is_non_tensor(value) and is_non_tensor(old) and old.batch_size == value.batch_size:
            tensordict.set(key, _where_non_tensor(mask, value, old))
        elif old is None or old.shape != value.shape or not isinstance(value, torch.Tensor):
            tensordict.set(key, value)
        else:
            tensordict.set(key, torch.where(_expand_mask(mask, value), value, old))
    return tensordict


def _where_non_tensor(mask: torch.Tensor, new: Any, old: Any) -> Any:
    """The non-tensor entry holding ``new``'s values where ``mask`` is set and ``old``'s elsewhere."""
    shape = new.batch_size
    if mask.numel() != shape.numel():  # a mask over more dims than the entry has: any set flag counts
        mask = mask.reshape(*shape, -1).any(-1)
    if not shape:
        return new if bool(mask) else old

    def choose(flags: Any, a: Any, b: Any) -> Any:
        return [choose(f, x, y) for f, x, y in zip(flags, a, b)] if isinstance(flags, list) else (a if flags else b)

    return NonTensorStack.from_list(choose(mask.reshape(shape).tolist(), new.tolist(), old.tolist()))
