"""TransformedEnv: an env seen through a chain of transforms."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from tdict import TensorDictBase
from tdict.seeding import chain_seeds
from tdict.specs import Composite

from ..env_base import _INPUT, _OUTPUT, EnvBase, carry_next_preset
from .base import Compose, Transform

__all__ = ["TransformedEnv"]


class TransformedEnv(EnvBase):
    """Wraps ``env`` so that its outputs (and, for inverse transforms, its inputs) pass through ``transform``.

    The specs are the base env's specs mapped by the transforms; attributes the wrapper does not
    define are read from the base env.

    Args:
        env: the base env.
        transform: a Transform or a Compose (default: an empty Compose to append to).
        device: move ``env`` (``env.to(device)``) before wrapping it (default: keep its device).

    Examples:
        >>> from rl_envs import PendulumEnv, StepCounter, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=5))
        >>> rollout = env.rollout(10)
        >>> rollout["next", "step_count"].tolist(), bool(rollout["next", "truncated"][-1])
        ([1, 2, 3, 4, 5], True)
    """

    def __init__(self, env: EnvBase, transform: Transform | None = None, *, device: Any = None, **kwargs: Any) -> None:
        if not isinstance(env, EnvBase):
            raise TypeError(f"TransformedEnv wraps an EnvBase, got {type(env).__name__}.")
        if device is not None and env.device != torch.device(device):
            env = env.to(device)
        super().__init__(device=env.device, batch_size=env.batch_size, **kwargs)
        self.base_env = env
        self.__dict__["_base"] = env  # plain attribute: read on every step without nn.Module's __getattr__
        bare = None
        if transform is None:
            transform = Compose()
        elif not isinstance(transform, Compose):
            bare, transform = transform, Compose(transform)
        transform.set_container(self)
        self._modules["transform"] = transform  # a submodule (state_dict keys "transform.transforms.*")
        self.__dict__["_transform"] = transform
        self.__dict__["_bare"] = bare
        self._specs_changed()

    @property
    def transform(self) -> Transform:  # type: ignore[override]
        """The transform given (TorchRL: a single transform stays itself), or the Compose of the chain
        once there are several (``append_transform``) or when a Compose was given."""
        bare, chain = self.__dict__.get("_bare"), self.__dict__.get("_transform")
        if bare is not None and chain is not None and len(chain) == 1 and chain[0] is bare:
            return bare
        if chain is None:  # not built through __init__
            raise AttributeError(f"{type(self).__name__} has no transform yet.")
        return chain

    @classmethod
    def _view(cls, env: EnvBase, transforms: Sequence[Transform]) -> "TransformedEnv":
        """An env with ``transforms`` applied that does not take ownership of them (``Transform.parent``)."""
        view = cls.__new__(cls)
        EnvBase.__init__(view, device=env.device, batch_size=env.batch_size)
        view.base_env = env
        view.__dict__["_base"] = env
        compose = Compose.__new__(Compose)
        Transform.__init__(compose)
        from torch import nn

        compose.transforms = nn.ModuleList(transforms)
        view._modules["transform"] = compose
        view.__dict__["_transform"] = compose
        view._specs_changed()
        return view

    # ------------------------------------------------------------------ specs
    def _specs_changed(self) -> None:
        super()._specs_changed()
        self.__dict__["_transformed_specs"] = None
        self.__dict__["_has_inverse"] = None
        transform = self.__dict__.get("_transform")
        if transform is not None:  # the transforms' parent views hold specs that may be stale now
            for module in transform.modules():
                module.__dict__.pop("_parent_cache", None)

    def _all_specs(self) -> dict[str, Composite]:
        specs = self.__dict__.get("_transformed_specs")
        if specs is None:
            base = self.base_env
            base._keys()  # fills the base env's default reward/done specs
            shape = base.batch_size
            output = Composite({n: base._get_spec(n).clone() for n in _OUTPUT}, shape=shape)
            output = self._transform.transform_output_spec(output)
            inputs = Composite({n: base._get_spec(n).clone() for n in _INPUT}, shape=shape)
            inputs = self._transform.transform_input_spec(inputs)
            specs = {n: output[n] for n in _OUTPUT}
            specs.update({n: inputs[n] for n in _INPUT})
            self.__dict__["_transformed_specs"] = specs
        return specs

    def _fill_default_specs(self, specs: dict[str, Composite]) -> None:
        pass  # the base env fills its own defaults

    def add_truncated_keys(self) -> "TransformedEnv":
        """Declares the ``"truncated"`` flags on the base env (see :meth:`EnvBase.add_truncated_keys`);
        the transforms see them from then on. Returns this env."""
        self.base_env.add_truncated_keys()
        self._specs_changed()
        return self

    def _set_spec(self, name: str, spec: Any) -> None:
        raise AttributeError(
            f"TransformedEnv: cannot set {name}; set it on the base env or change it with a transform."
        )

    @property
    def batch_size(self):  # type: ignore[override]
        return self._base.batch_size

    @property
    def batch_locked(self) -> bool:
        return self._base.batch_locked

    @property
    def resumable(self) -> bool:
        """The base env is resumable and no transform keeps per-step state outside the tensordict."""
        return self._base.resumable and all(t.resumable for t in self._transform)

    # ------------------------------------------------------------------ transforms
    def append_transform(self, transform: Transform) -> "TransformedEnv":
        """Adds a transform at the end of the chain."""
        if not isinstance(transform, Transform):
            raise TypeError(f"append_transform takes a Transform, got {type(transform).__name__}.")
        self._transform.append(transform)
        self.__dict__["_bare"] = None  # now a chain: ``transform`` is the Compose
        self._specs_changed()
        return self

    def insert_transform(self, index: int, transform: Transform) -> "TransformedEnv":
        """Inserts a transform at position ``index`` of the chain."""
        if not isinstance(transform, Transform):
            raise TypeError(f"insert_transform takes a Transform, got {type(transform).__name__}.")
        self._transform.insert(index, transform)
        self.__dict__["_bare"] = None
        self._specs_changed()
        return self

    # ------------------------------------------------------------------ hooks
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        base = self._base
        out = base._reset(tensordict, **kwargs)
        base._complete_reset_done(out, base._keys())
        return self._transform._reset(tensordict, out)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        has_inverse = self._has_inverse
        if has_inverse is None:
            has_inverse = self._transform.has_inverse
            self.__dict__["_has_inverse"] = has_inverse
        transform = self._transform
        inner = transform.inv(tensordict) if has_inverse else tensordict
        base = self._base
        if base.validate_actions:  # its step() is bypassed: check what it receives, in its own terms
            base._validate_actions(inner, base._keys())
        # the policy's "next" entries join the base env's output before the transforms see it
        return transform._step(tensordict, carry_next_preset(tensordict, base._step(inner)))

    def _seed_streams(self, seed: int | None) -> int | None:
        """The base env's streams first, then those of the transforms that draw (chain order)."""
        return chain_seeds(seed, [self.base_env.set_seed, self._transform.set_seed])

    def _set_seed(self, seed: int | None) -> None:
        self._seed_streams(seed)

    def close(self, *, raise_if_closed: bool = False) -> None:
        self._transform.close()
        self.base_env.close(raise_if_closed=raise_if_closed)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)  # parameters, buffers, submodules
        except AttributeError:
            pass
        modules = self.__dict__.get("_modules", {})
        base = modules.get("base_env")
        if base is None or name.startswith("__"):
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}.")
        return getattr(base, name)

    def __repr__(self) -> str:
        return f"TransformedEnv(env={self.base_env!r}, transform={self._transform!r})"
