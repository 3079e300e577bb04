"""EnvCreator: a picklable env factory that knows the env's metadata without building one per query."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Callable

import torch
from tdict import TensorDictBase
from tdict.specs import Composite

__all__ = ["EnvCreator", "EnvMetaData"]


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
    def specs(self) -> dict[str, Composite]:
        """The five full specs by name (``full_action_spec``, ``full_observation_spec``...)."""
        out = {name: self.input_spec[name] for name in self.input_spec.keys()}
        out.update({name: self.output_spec[name] for name in self.output_spec.keys()})
        return out

    def __getattr__(self, name: str) -> Any:
        # full_action_spec, full_observation_spec... straight from the spec composites
        if name.startswith("full_") and name.endswith("_spec"):
            for composite in (self.__dict__.get("input_spec"), self.__dict__.get("output_spec")):
                if composite is not None and name in composite.keys():
                    return composite[name]
        raise AttributeError(f"EnvMetaData has no attribute {name!r}.")


def _dumps_fn(fn: Callable) -> tuple[str, bytes]:
    """Pickle ``fn`` by reference when possible, else by value with cloudpickle (lambdas, closures)."""
    try:
        return "pickle", pickle.dumps(fn)
    except (pickle.PicklingError, AttributeError, TypeError) as err:
        try:
            import cloudpickle
        except ImportError:
            raise pickle.PicklingError(
                f"EnvCreator: the env factory {fn!r} cannot be pickled by reference ({err}); install cloudpickle "
                f"(pip install cloudpickle) to send lambdas and closures to worker processes, or pass a module-level "
                f"function or class."
            ) from None
        return "cloudpickle", cloudpickle.dumps(fn)


class EnvCreator:
    """Wraps an env factory so that it pickles (lambdas included) and describes the env it makes.

    Calling the creator returns a new env built with ``create_env_fn(**create_env_kwargs)``; keyword
    arguments given to the call override ``create_env_kwargs``. ``meta_data`` (batch size, device, specs
    and a fake step) is computed once, from a first env built on first access and closed right after;
    it travels with the creator when pickled, so worker processes do not rebuild it.

    Lambdas and closures are pickled by value with ``cloudpickle`` when it is installed (a clear
    ``PicklingError`` otherwise); module-level functions and classes pickle by reference.

    Args:
        create_env_fn: a callable returning an env (an env class works).
        create_env_kwargs: keyword arguments for ``create_env_fn``.

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

    def __init__(self, create_env_fn: Callable[..., Any], create_env_kwargs: dict | None = None) -> None:
        if isinstance(create_env_fn, EnvCreator):
            create_env_kwargs = {**create_env_fn.create_env_kwargs, **(create_env_kwargs or {})}
            create_env_fn = create_env_fn.create_env_fn
        if not callable(create_env_fn):
            raise TypeError(f"EnvCreator: create_env_fn must be callable, got {type(create_env_fn).__name__}.")
        if create_env_kwargs is not None and not isinstance(create_env_kwargs, dict):
            raise TypeError(f"EnvCreator: create_env_kwargs must be a dict, got {type(create_env_kwargs).__name__}.")
        self.create_env_fn = create_env_fn
        self.create_env_kwargs = dict(create_env_kwargs or {})
        self._meta_data: EnvMetaData | None = None

    def __call__(self, **kwargs: Any) -> Any:
        """A new env; ``kwargs`` override ``create_env_kwargs`` for this env only."""
        return self.create_env_fn(**{**self.create_env_kwargs, **kwargs})

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
        return EnvCreator(self.create_env_fn, {**self.create_env_kwargs, **kwargs})

    @property
    def batch_size(self) -> torch.Size:
        """The batch size of the envs it makes (from :attr:`meta_data`)."""
        return self.meta_data.batch_size

    @property
    def device(self) -> torch.device | None:
        """The device of the envs it makes (from :attr:`meta_data`)."""
        return self.meta_data.device

    def __getstate__(self) -> dict:
        how, payload = _dumps_fn(self.create_env_fn)
        return {"how": how, "fn": payload, "kwargs": self.create_env_kwargs, "meta_data": self._meta_data}

    def __setstate__(self, state: dict) -> None:
        self.create_env_fn = pickle.loads(state["fn"])  # cloudpickle output loads with plain pickle
        self.create_env_kwargs = state["kwargs"]
        self._meta_data = state["meta_data"]

    def __repr__(self) -> str:
        name = getattr(self.create_env_fn, "__qualname__", repr(self.create_env_fn))
        return f"EnvCreator({name}, create_env_kwargs={self.create_env_kwargs})"
