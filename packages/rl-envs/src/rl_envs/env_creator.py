"""EnvCreator: a picklable env factory that knows the env's metadata without building one per query."""

from __future__ import annotations

import io
import multiprocessing as mp
import pickle
from collections import ChainMap
from dataclasses import dataclass
from typing import Any, Callable

from multiprocessing.reduction import ForkingPickler

import torch
from tdict import TensorDictBase
from tdict.specs import Composite

__all__ = ["EnvCreator", "EnvMetaData"]


class MetaSpecs(dict):
    """The full specs of an env by name, also indexed by TorchRL's paths through ``input_spec`` and
    ``output_spec`` (``specs["input_spec", "full_action_spec"]``, ``specs["output_spec"]``)."""

    composites: dict[str, Composite]

    def __getitem__(self, key: Any) -> Any:
        if type(key) is str and key in ("input_spec", "output_spec"):
            return self.composites[key]
        if type(key) is tuple and key:
            head = self[key[0]]
            return head[key[1:]] if len(key) > 1 else head
        return super().__getitem__(key)


@dataclass
class EnvMetaData:
    """What a batched env or a collector needs to know about an env without holding one.

    Attributes:
        batch_size / device / batch_locked: the env's.
        input_spec / output_spec: ``Composite(full_action_spec, full_state_spec)`` and
            ``Composite(full_observation_spec, full_reward_spec, full_done_spec)``.
        tensordict: ``env.fake_tensordict()`` (a zero step with every key).
        env_str: the env's ``repr``.
    """

    batch_size: torch.Size
    device: torch.device | None
    batch_locked: bool
    input_spec: Composite
    output_spec: Composite
    tensordict: TensorDictBase
    env_str: str

    @classmethod
    def from_env(cls, env: Any) -> "EnvMetaData":
        """The metadata of ``env`` (its specs are cloned; ``tensordict`` is its ``fake_tensordict()``)."""
        return cls(
            batch_size=torch.Size(env.batch_size),
            device=env.device,
            batch_locked=env.batch_locked,
            input_spec=env.input_spec.clone(),
            output_spec=env.output_spec.clone(),
            tensordict=env.fake_tensordict(),
            env_str=repr(env),
        )

    @property
    def specs(self) -> "MetaSpecs":
        """The five full specs by name (``full_action_spec``, ``full_observation_spec``...); TorchRL's
        paths (``specs["input_spec", "full_action_spec"]``, ``specs["output_spec"]``) index it too."""
        out = MetaSpecs({name: self.input_spec[name] for name in self.input_spec.keys()})
        out.update({name: self.output_spec[name] for name in self.output_spec.keys()})
        out.composites = {"input_spec": self.input_spec, "output_spec": self.output_spec}
        return out

    def __getattr__(self, name: str) -> Any:
        # full_action_spec, full_observation_spec... straight from the spec composites
        if name.startswith("full_") and name.endswith("_spec"):
            for composite in (self.__dict__.get("input_spec"), self.__dict__.get("output_spec")):
                if composite is not None and name in composite.keys():
                    return composite[name]
        raise AttributeError(f"EnvMetaData has no attribute {name!r}.")


def _dumps_fn(fn: Callable, shared: list, spawning: bool) -> tuple[str, bytes]:
    """Pickle ``(fn, shared)``: ``fn`` by reference when possible, else by value with cloudpickle
    (lambdas, closures).

    While a worker process is being started (``spawning``), multiprocessing's own reducers are used
    too, so that shared objects (TrajCounter id counters, in ``shared`` or held by ``fn``) reach the
    worker; one pickle for both hands each shared object over once.
    """
    obj = (fn, shared)
    try:
        return "pickle", bytes(ForkingPickler.dumps(obj)) if spawning else pickle.dumps(obj)
    except (pickle.PicklingError, AttributeError, TypeError) as err:
        try:
            import cloudpickle
        except ImportError:
            raise pickle.PicklingError(
                f"EnvCreator: the env factory {fn!r} cannot be pickled by reference ({err}); install cloudpickle "
                f"(pip install cloudpickle) to send lambdas and closures to worker processes, or pass a module-level "
                f"function or class."
            ) from None
        if not spawning:
            return "cloudpickle", cloudpickle.dumps(obj)
        base: Any = cloudpickle.CloudPickler

        class _SpawnCloudPickler(base):  # the table is read when a pickler is built: set on the class
            dispatch_table = ChainMap(ForkingPickler._extra_reducers, base.dispatch_table)  # pyright: ignore[reportAttributeAccessIssue]

        buffer = io.BytesIO()
        _SpawnCloudPickler(buffer).dump(obj)
        return "cloudpickle", buffer.getvalue()


class EnvCreator:
    """Wraps an env factory so that it pickles (lambdas included) and describes the env it makes.

    Calling the creator returns a new env built with ``create_env_fn(**create_env_kwargs)``; keyword
    arguments given to the call override ``create_env_kwargs``. Extra keyword arguments of the
    constructor are merged into ``create_env_kwargs`` (TorchRL's ``EnvCreator(fn, max_steps=4)``).
    ``meta_data`` (batch size, device, specs and a fake step) is computed once, from a first env built
    on first access and closed right after; it travels with the creator when pickled, so worker
    processes do not rebuild it.

    Every :class:`~rl_envs.TrajCounter` of the envs a creator (and its :meth:`make_variant` copies)
    makes counts from one shared id sequence: the first env built lends its counters to the next
    ones, so sub-envs of a batched env never hand out the same trajectory id. The counters travel
    to worker processes started with the creator (not through a plain ``pickle.dumps``).

    Lambdas and closures are pickled by value with ``cloudpickle`` when it is installed (a clear
    ``PicklingError`` otherwise); module-level functions and classes pickle by reference.

    Args:
        create_env_fn: a callable returning an env (an env class works).
        create_env_kwargs: keyword arguments for ``create_env_fn``.
        **kwargs: more keyword arguments for ``create_env_fn`` (they win over ``create_env_kwargs``).

    Examples:
        >>> import pickle
        >>> from rl_envs import PendulumEnv
        >>> creator = EnvCreator(lambda **kw: PendulumEnv(**kw), {"batch_size": [2]})
        >>> creator.meta_data.batch_size
        torch.Size([2])
        >>> clone = pickle.loads(pickle.dumps(creator))
        >>> clone().batch_size, clone(batch_size=[5]).batch_size
        (torch.Size([2]), torch.Size([5]))
    """

    def __init__(self, create_env_fn: Callable[..., Any], create_env_kwargs: dict | None = None, **kwargs: Any) -> None:
        if create_env_kwargs is not None and not isinstance(create_env_kwargs, dict):
            raise TypeError(f"EnvCreator: create_env_kwargs must be a dict, got {type(create_env_kwargs).__name__}.")
        counters: list = []
        if isinstance(create_env_fn, EnvCreator):
            create_env_kwargs = {**create_env_fn.create_env_kwargs, **(create_env_kwargs or {})}
            counters = create_env_fn._traj_counters
            create_env_fn = create_env_fn.create_env_fn
        if not callable(create_env_fn):
            raise TypeError(f"EnvCreator: create_env_fn must be callable, got {type(create_env_fn).__name__}.")
        self.create_env_fn = create_env_fn
        self.create_env_kwargs = {**(create_env_kwargs or {}), **kwargs}
        self._meta_data: EnvMetaData | None = None
        # the id counters of the TrajCounters of the first env built, lent to the later ones (shared by variants)
        self._traj_counters: list = counters

    def __call__(self, **kwargs: Any) -> Any:
        """A new env; ``kwargs`` override ``create_env_kwargs`` for this env only."""
        env = self.create_env_fn(**{**self.create_env_kwargs, **kwargs})
        self._share_traj_counters(env)
        return env

    def _share_traj_counters(self, env: Any) -> None:
        from .transforms.episode import TrajCounter

        modules = getattr(env, "modules", None)
        if modules is None:
            return
        found = [m for m in modules() if isinstance(m, TrajCounter)]
        shared = self._traj_counters
        if not shared:
            shared.extend(t._traj_count for t in found)
        elif len(shared) == len(found):
            for t, counter in zip(found, shared):
                t.__dict__["_traj_count"] = counter

    @property
    def meta_data(self) -> EnvMetaData:
        """The env's :class:`EnvMetaData` (a first env is built and closed on the first access)."""
        if self._meta_data is None:
            env = self()
            try:
                self._meta_data = EnvMetaData.from_env(env)
            finally:
                env.close()
        return self._meta_data

    @meta_data.setter
    def meta_data(self, value: EnvMetaData) -> None:
        self._meta_data = value

    # TorchRL's spelling: init_() computes the metadata eagerly
    def init_(self) -> "EnvCreator":
        """Computes :attr:`meta_data` now; returns ``self``."""
        self.meta_data  # noqa: B018
        return self

    def make_variant(self, **kwargs: Any) -> "EnvCreator":
        """A new creator with ``kwargs`` merged into ``create_env_kwargs`` (its metadata is recomputed)."""
        variant = EnvCreator(self.create_env_fn, {**self.create_env_kwargs, **kwargs})
        variant._traj_counters = self._traj_counters
        return variant

    @property
    def batch_size(self) -> torch.Size:
        """The batch size of the envs it makes (from :attr:`meta_data`)."""
        return self.meta_data.batch_size

    @property
    def device(self) -> torch.device | None:
        """The device of the envs it makes (from :attr:`meta_data`)."""
        return self.meta_data.device

    def __getstate__(self) -> dict:
        # the shared counters travel only while a worker process is being started
        spawning = mp.context.get_spawning_popen() is not None  # pyright: ignore[reportAttributeAccessIssue]
        how, payload = _dumps_fn(self.create_env_fn, self._traj_counters if spawning else [], spawning)
        return {"how": how, "fn": payload, "kwargs": self.create_env_kwargs, "meta_data": self._meta_data}

    def __setstate__(self, state: dict) -> None:
        # cloudpickle output loads with plain pickle
        self.create_env_fn, self._traj_counters = pickle.loads(state["fn"])
        self.create_env_kwargs = state["kwargs"]
        self._meta_data = state["meta_data"]

    def __repr__(self) -> str:
        name = getattr(self.create_env_fn, "__qualname__", repr(self.create_env_fn))
        return f"EnvCreator({name}, create_env_kwargs={self.create_env_kwargs})"
