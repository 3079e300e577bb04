"""dtype and device casts: DTypeCastTransform, DoubleToFloat, DeviceCastTransform."""

from __future__ import annotations

import copy
from typing import Any, Sequence

import torch
from tdict import TensorDictBase
from tdict import NestedKey
from tdict.specs import Bounded, Composite, Unbounded

from .base import Transform

__all__ = ["DTypeCastTransform", "DoubleToFloat", "DeviceCastTransform"]


def _norm_key(key: NestedKey) -> NestedKey:
    return key[0] if isinstance(key, tuple) and len(key) == 1 else key


def cast_spec(spec: Any, dtype: torch.dtype) -> Any:
    """A copy of the leaf ``spec`` with dtype ``dtype`` (bounds are cast too)."""
    if isinstance(spec, Bounded):
        return Bounded(spec.low.to(dtype), spec.high.to(dtype), shape=spec.shape, device=spec.device, dtype=dtype)
    if isinstance(spec, Unbounded):
        return Unbounded(shape=spec.shape, device=spec.device, dtype=dtype)
    out = copy.copy(spec)
    out.dtype = dtype
    out._tensors = {k: (v.to(dtype) if v.is_floating_point() else v.clone()) for k, v in spec._tensors.items()}
    out._finish()
    return out


class DTypeCastTransform(Transform):
    """Casts entries from ``dtype_in`` (what the env uses) to ``dtype_out`` (what the caller sees).

    Forward: ``in_keys`` (``dtype_in``) are cast to ``dtype_out`` into ``out_keys``. Inverse: the caller's
    ``out_keys_inv`` (``dtype_out``) are cast back to ``dtype_in`` into ``in_keys_inv`` for the env.

    Keys left out are found automatically, as in TorchRL:

    - in an env, ``in_keys`` are every observation and reward entry whose spec has ``dtype_in``, and
      ``in_keys_inv`` every action and state entry of ``dtype_in`` (state entries written by the env,
      e.g. at reset, are cast forward too so the caller only sees ``dtype_out``);
    - on a plain TensorDict, every entry of ``dtype_in`` is cast (``inv``: every entry of ``dtype_out``).

    When ``in_keys`` is given and ``in_keys_inv`` is not, there is no inverse.

    Args:
        dtype_in: the env's dtype.
        dtype_out: the dtype exposed to the caller.
        in_keys: entries cast on the way out (``None``: automatic).
        out_keys: where they go (default ``in_keys``).
        in_keys_inv: entries the env reads, cast from ``out_keys_inv`` on the way in.
        out_keys_inv: the entries the caller gives (default ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict(obs=torch.ones(2, dtype=torch.float64), other=torch.ones(2, dtype=torch.float64))
        >>> td = DTypeCastTransform(torch.float64, torch.float32, in_keys=["obs"])(td)
        >>> td["obs"].dtype, td["other"].dtype
        (torch.float32, torch.float64)
    """

    invertible = True

    def __init__(
        self,
        dtype_in: torch.dtype,
        dtype_out: torch.dtype,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        for name, dt in (("dtype_in", dtype_in), ("dtype_out", dtype_out)):
            if not isinstance(dt, torch.dtype):
                raise TypeError(f"{type(self).__name__}: {name} must be a torch.dtype, got {dt!r}.")
        if in_keys is None and out_keys is not None:
            raise ValueError(
                f"{type(self).__name__}: out_keys={out_keys} needs in_keys (the automatic key order is not fixed)."
            )
        if in_keys_inv is None and out_keys_inv is not None:
            raise ValueError(f"{type(self).__name__}: out_keys_inv={out_keys_inv} needs in_keys_inv.")
        self._auto = in_keys is None
        self._auto_inv = in_keys_inv is None and in_keys is None
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self._check_pairs(self.in_keys_inv, self.out_keys_inv, "inverse")
        self.dtype_in = dtype_in
        self.dtype_out = dtype_out
        self._resolved = False  # automatic keys found from the env's specs
        self._resolved_inv = False
        self._state_pairs: list = []  # (in_key_inv, out_key_inv) of state entries, cast forward when the env writes them

    # ------------------------------------------------------------------ data
    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(self.dtype_out)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(self.dtype_in)

    def _scan(self, tensordict: TensorDictBase, source: torch.dtype, target: torch.dtype) -> TensorDictBase:
        for key, value in list(tensordict.items(True, True)):
            if isinstance(value, torch.Tensor) and value.dtype == source:
                tensordict.set(key, value.to(target))
        return tensordict

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self._auto and not self._resolved:
            return self._scan(next_tensordict, self.dtype_in, self.dtype_out)
        next_tensordict = super()._call(next_tensordict)
        dtype_in, dtype_out = self.dtype_in, self.dtype_out
        for in_key, out_key in self._state_pairs:
            value = next_tensordict.get(in_key, None)
            if value is not None and value.dtype == dtype_in:
                next_tensordict.set(out_key, value.to(dtype_out))
        return next_tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._auto_inv and not self._resolved_inv:
            return self._scan(tensordict, self.dtype_out, self.dtype_in)
        return super()._inv_call(tensordict)

    @property
    def has_inverse(self) -> bool:
        return bool(self.in_keys_inv) or (self._auto_inv and not self._resolved_inv)

    # ------------------------------------------------------------------ specs
    def _cast_leaves(self, composite: Composite, ins: list, outs: list, drop_in: bool) -> Composite:
        present = set(composite.keys(True, True))
        for in_key, out_key in zip(ins, outs):
            in_key, out_key = _norm_key(in_key), _norm_key(out_key)
            if in_key not in present:
                continue
            spec = composite[in_key]
            if spec.dtype != self.dtype_in:
                raise TypeError(
                    f"{type(self).__name__}: the spec of {in_key!r} has dtype {spec.dtype}, expected dtype_in={self.dtype_in}."
                )
            composite[out_key] = cast_spec(spec, self.dtype_out)
            if drop_in and in_key != out_key:
                del composite[in_key]
        return composite

    def _matching(self, *composites: Composite) -> list:
        return [k for c in composites for k, s in c.items(True, True) if getattr(s, "dtype", None) == self.dtype_in]

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        obs, reward = output_spec["full_observation_spec"], output_spec["full_reward_spec"]
        if self._auto:
            self.in_keys = self._matching(obs, reward)
            self.__dict__["_out_keys"] = []
            self._resolved = True
        ins, outs = self.in_keys, self.out_keys
        output_spec["full_observation_spec"] = self._cast_leaves(obs, ins, outs, False)
        output_spec["full_reward_spec"] = self._cast_leaves(reward, ins, outs, False)
        output_spec["full_done_spec"] = self._cast_leaves(output_spec["full_done_spec"], ins, outs, False)
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        action, state = input_spec["full_action_spec"], input_spec["full_state_spec"]
        if self._auto_inv:
            self.in_keys_inv = self._matching(action, state)
            self.__dict__["_out_keys_inv"] = []
            self._resolved_inv = True
        ins, outs = self.in_keys_inv, self.out_keys_inv
        state_keys = set(state.keys(True, True))
        forward_out = {_norm_key(k) for k in self.out_keys}
        self._state_pairs = [
            (i, o) for i, o in zip(ins, outs) if _norm_key(i) in state_keys and _norm_key(o) not in forward_out
        ]
        input_spec["full_action_spec"] = self._cast_leaves(action, ins, outs, True)
        input_spec["full_state_spec"] = self._cast_leaves(state, ins, outs, True)
        return input_spec

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dtype_in={self.dtype_in}, dtype_out={self.dtype_out}, "
            f"in_keys={self.in_keys}, in_keys_inv={self.in_keys_inv})"
        )


class DoubleToFloat(DTypeCastTransform):
    """Casts float64 entries to float32 on the way out, and float32 actions back to float64 on the way in.

    A :class:`DTypeCastTransform` from ``torch.float64`` to ``torch.float32``: without keys, every
    float64 observation, reward, action and state entry of the env is handled and its spec changed.

    Args:
        in_keys: entries cast on the way out (``None``: automatic).
        out_keys: where they go (default ``in_keys``).
        in_keys_inv: entries the env reads as float64, cast from the caller's float32 ``out_keys_inv``.
        out_keys_inv: the entries the caller gives (default ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = DoubleToFloat()(TensorDict(obs=torch.ones(2, dtype=torch.float64)))
        >>> td["obs"].dtype
        torch.float32
        >>> DoubleToFloat().inv(TensorDict(action=torch.ones(1)))["action"].dtype
        torch.float64
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(torch.float64, torch.float32, in_keys, out_keys, in_keys_inv, out_keys_inv)


class DeviceCastTransform(Transform):
    """Moves data to ``device`` on the way out of the env, and back to ``orig_device`` on the way in.

    Without keys the whole TensorDict moves (and every spec); with keys only those entries move.

    Args:
        device: the device the caller sees.
        orig_device: the env's device (default: the env's device once in an env, else unchanged).
        in_keys: entries moved on the way out (``None`` together with ``in_keys_inv``: everything).
        out_keys: where they go (default ``in_keys``).
        in_keys_inv: entries the env reads, moved back from ``out_keys_inv``.
        out_keys_inv: the entries the caller gives (default ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> t = DeviceCastTransform("meta", "cpu", in_keys=["obs"])
        >>> t(TensorDict(obs=torch.ones(2), other=torch.ones(2)))["obs"].device
        device(type='meta')
        >>> t.inv(TensorDict(obs=torch.ones(2)))["obs"].device
        device(type='cpu')
    """

    invertible = True

    def __init__(
        self,
        device: Any,
        orig_device: Any = None,
        *,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self._check_pairs(self.in_keys_inv, self.out_keys_inv, "inverse")
        self.device = torch.device(device)
        self.orig_device = torch.device(orig_device) if orig_device is not None else None
        self._whole = not self.in_keys and not self.in_keys_inv

    def _target_orig(self) -> torch.device | None:
        if self.orig_device is not None:
            return self.orig_device
        parent = self.parent
        if parent is not None:
            # an env without a device holds its tensors where torch creates them by default
            return parent.device if parent.device is not None else torch.device("cpu")
        return None

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(self.device, non_blocking=True)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        device = self.__dict__.get("_inv_device") or self._target_orig()
        return value if device is None else value.to(device, non_blocking=True)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self._whole:
            return next_tensordict.to(self.device, non_blocking=True)
        return super()._call(next_tensordict)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        device = self.__dict__.get("_inv_device")
        if device is None:
            device = self._target_orig()
            self.__dict__["_inv_device"] = device
        if device is None:
            return tensordict
        if self._whole:
            return tensordict.to(device, non_blocking=True)
        return super()._inv_call(tensordict)

    @property
    def has_inverse(self) -> bool:
        return True

    def _move(self, composite: Composite, ins: list, outs: list) -> Composite:
        present = set(composite.keys(True, True))
        for in_key, out_key in zip(ins, outs):
            in_key, out_key = _norm_key(in_key), _norm_key(out_key)
            if in_key in present:
                composite[out_key] = composite[in_key].to(self.device)
        return composite

    def _moved_composite(self, composite: Composite, ins: list, outs: list) -> Composite:
        if self._whole:
            return composite.to(self.device)
        # entries on several devices: the composite itself holds no device
        loose = Composite({k: v for k, v in composite.items()}, shape=composite.shape)
        return self._move(loose, ins, outs)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        self.__dict__["_inv_device"] = None  # the env (or its device) may have changed
        out = Composite(shape=output_spec.shape, device=self.device if self._whole else None)
        for name in ("full_observation_spec", "full_reward_spec", "full_done_spec"):
            out[name] = self._moved_composite(output_spec[name], self.in_keys, self.out_keys)
        return out

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        out = Composite(shape=input_spec.shape, device=self.device if self._whole else None)
        for name in ("full_action_spec", "full_state_spec"):
            out[name] = self._moved_composite(input_spec[name], self.in_keys_inv, self.out_keys_inv)
        return out

    def __repr__(self) -> str:
        return f"DeviceCastTransform(device={self.device}, orig_device={self.orig_device}, in_keys={self.in_keys})"
