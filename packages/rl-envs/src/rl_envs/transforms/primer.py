"""TensorDictPrimer: extra entries (e.g. recurrent states) created at reset and carried across steps."""

from __future__ import annotations

from typing import Any, Callable, cast

import torch
from tdict import TensorDictBase
from tdict import NestedKey
from tdict.specs import Composite, TensorSpec

from .base import Transform

__all__ = ["TensorDictPrimer"]


class TensorDictPrimer(Transform):
    """Adds entries described by specs to the reset output and carries them through the steps.

    At reset every primer key gets a value: ``default_value`` (a number, a callable returning a tensor,
    or a dict of those per key) or, with ``random=True``, a draw from the spec. On a partial reset
    only the reset sub-envs get new values. On each step the current value is copied to ``"next"``
    unless the step already wrote it (a recurrent policy writes its new state there), so
    ``step_mdp`` carries it on. The specs are added to the observation spec and to the state spec
    (they are inputs of the next step). ``forward`` fills a plain TensorDict (values are expanded to
    its batch size).

    Args:
        primers: a Composite or a dict ``key -> spec`` (or give the specs as keyword arguments).
        random: draw values from the specs.
        default_value: the value when not random (number, callable, or dict keyed like the primers).
        reset_key: partial-reset mask key (default ``"_reset"``).
        expand_specs: the primers' shape must start with the env batch size; with ``True`` specs
            without batch dims are expanded to it, with ``None`` (default) a mismatch raises, with
            ``False`` the batch dims are prepended as well (kept for TorchRL compatibility).
        single_default_value: ``default_value`` is one callable ``(reset=mask) -> TensorDict`` that
            returns every primer entry at once (for the reset sub-envs).
        **kwargs: primer specs by key.

    Examples:
        >>> from tdict.specs import Unbounded
        >>> from rl_envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), TensorDictPrimer(hidden=Unbounded(shape=(4,))))
        >>> r = env.rollout(3)
        >>> r["hidden"].shape, r["next", "hidden"].abs().sum().item()
        (torch.Size([3, 4]), 0.0)
    """

    def __init__(
        self,
        primers: Composite | dict | None = None,
        random: bool | None = None,
        default_value: float | Callable | dict | None = 0.0,
        reset_key: NestedKey | None = None,
        expand_specs: bool | None = None,
        single_default_value: bool = False,
        **kwargs: Any,
    ) -> None:
        device = kwargs.pop("device", None)
        if primers is not None and kwargs:
            raise ValueError(
                f"TensorDictPrimer: give the primers either as `primers` or as keyword arguments, not both "
                f"(extra keywords: {sorted(kwargs)})."
            )
        if primers is None:
            primers = kwargs
        if not isinstance(primers, Composite):
            primers = dict(primers)
            shape = primers.pop("shape", None) or primers.pop("batch_size", None) or ()
            for key, spec in primers.items():
                if not isinstance(spec, TensorSpec):
                    raise ValueError(
                        f"TensorDictPrimer: the primer {key!r} must be a TensorSpec, got {type(spec).__name__}."
                    )
            primers = Composite(primers, shape=shape, device=device)
        if random and default_value not in (None, 0.0):
            raise ValueError("TensorDictPrimer: random=True and a default_value cannot be used together.")
        if default_value is None:
            default_value = 0.0
        keys = list(primers.keys(True, True))
        if isinstance(default_value, dict):
            if set(default_value) != set(keys):
                raise ValueError(
                    f"TensorDictPrimer: default_value keys {sorted(map(str, default_value))} must match the primers "
                    f"{sorted(map(str, keys))}."
                )
        elif not single_default_value:
            default_value = {key: default_value for key in keys}
        elif not callable(default_value):
            raise ValueError("TensorDictPrimer: single_default_value=True needs a callable default_value.")
        super().__init__()
        self.primers = primers
        self.random = bool(random)
        self.default_value = default_value
        self.single_default_value = single_default_value
        self.reset_key = reset_key if reset_key is not None else "_reset"
        self.expand_specs = expand_specs

    @property
    def out_keys(self) -> list:
        return list(self.primers.keys(True, True))

    @out_keys.setter
    def out_keys(self, value: Any) -> None:
        pass

    # -------------------------------------------------------------- specs
    def _batched(self, batch: torch.Size) -> Composite:
        """The primers with the env's batch dims (raises on a mismatch unless ``expand_specs``)."""
        primers = self.primers
        if primers.shape[: len(batch)] == batch:
            return primers
        if self.expand_specs is None:
            raise RuntimeError(
                f"TensorDictPrimer: the primers have shape {list(primers.shape)} but the env batch_size is "
                f"{list(batch)}; build them with that batch size or pass expand_specs=True."
            )
        return primers.expand(*batch, *primers.shape)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        observation_spec.update(self._batched(observation_spec.shape).clone())
        return observation_spec

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        state_spec.update(self._batched(state_spec.shape).clone())
        return state_spec

    # -------------------------------------------------------------- values
    def _value(self, key: NestedKey, spec: TensorSpec, batch: torch.Size) -> torch.Tensor:
        """A value of shape ``batch + feature shape`` (feature dims: the spec's dims after the primers')."""
        feat = spec.shape[len(self.primers.shape) :]
        if self.random:
            return _rand(spec, batch, feat)
        value = cast(dict, self.default_value)[key]  # a dict unless single_default_value (see _fill)
        if callable(value):
            value = value()
            if not isinstance(value, torch.Tensor) or tuple(value.shape[value.ndim - len(feat) :]) != tuple(feat):
                raise ValueError(
                    f"TensorDictPrimer: default_value for {key!r} returned {value!r}; expected a tensor ending in "
                    f"{list(feat)}."
                )
            return value if value.shape == (*batch, *feat) else value.expand(*batch, *feat).clone()
        return torch.full((*batch, *feat), value, dtype=spec.dtype, device=spec.device)

    def _fill(self, tensordict: TensorDictBase, batch: torch.Size, mask: torch.Tensor | None) -> TensorDictBase:
        if self.single_default_value:
            values = cast(Callable, self.default_value)(reset=mask)
            if mask is None or bool(mask.all()):
                for key in self.out_keys:
                    tensordict.set(key, values.get(key))
                return tensordict
            for key, spec in self.primers.items(True, True):
                feat = spec.shape[len(self.primers.shape) :]
                full = torch.zeros((*batch, *feat), dtype=spec.dtype, device=spec.device)
                full[mask] = values.get(key)
                tensordict.set(key, full)
            return tensordict
        for key, spec in self.primers.items(True, True):
            tensordict.set(key, self._value(key, spec, batch))
        return tensordict

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        batch = tensordict_reset.batch_size
        mask = tensordict.get(self.reset_key, None) if tensordict is not None else None
        if mask is not None and len(batch):
            mask = mask.reshape(batch)
        elif mask is not None:
            mask = None
        # every sub-env gets a value; EnvBase.reset keeps the old one where "_reset" is False
        return self._fill(tensordict_reset, batch, mask)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key in self.out_keys:
            if next_tensordict.get(key, None) is None:
                value = tensordict.get(key, None)
                if value is None:
                    raise KeyError(f"TensorDictPrimer: {key!r} is missing from the step input; reset the env first.")
                next_tensordict.set(key, value)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._fill(tensordict, tensordict.batch_size, None)

    def __repr__(self) -> str:
        return f"TensorDictPrimer(keys={self.out_keys}, random={self.random})"


def _rand(spec: TensorSpec, batch: torch.Size, feat: torch.Size) -> torch.Tensor:
    """A random draw of shape ``batch + feat`` from ``spec`` (its leading batch dims replaced by ``batch``)."""
    if tuple(spec.shape) == (*batch, *feat):
        return spec.rand()
    leaf = spec
    for _ in range(len(spec.shape) - len(feat)):
        leaf = leaf.unbind(0)[0]
    return leaf.rand(batch)
