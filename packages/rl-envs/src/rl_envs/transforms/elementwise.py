"""Element-wise transforms (ClipTransform, SignTransform, UnaryTransform) and the key-mapping base they share.

``_MapTransform`` is a :class:`Transform` whose tensor function is also applied to the specs of its
keys (forward keys in the observation/reward/done specs, inverse keys in the action/state specs);
the shape and image transforms build on it too.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from tdict import TensorDictBase
from tdict import NestedKey
from tdict.specs import Bounded, Composite, Unbounded

from .base import Transform

__all__ = ["ClipTransform", "SignTransform", "UnaryTransform"]


def _norm_key(key: NestedKey) -> NestedKey:
    """``("a",)`` and ``"a"`` name the same entry: specs list top-level keys as strings."""
    if isinstance(key, tuple) and len(key) == 1:
        return key[0]
    return key


def unbounded_like(spec: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Unbounded:
    """An Unbounded spec with the shape and dtype that ``fn`` gives on a zero tensor of ``spec``."""
    z = fn(spec.zero())
    return Unbounded(shape=z.shape, device=spec.device, dtype=z.dtype)


def map_spec(spec: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """The spec of ``fn(x)`` for ``x`` in ``spec``, for a monotone (or convex-combination) ``fn``.

    A Bounded spec keeps its box (``fn`` applied to both bounds, reordered if ``fn`` decreases);
    a spec whose type can reshape (Categorical, OneHot...) keeps its type when ``fn`` only reshapes;
    anything else becomes Unbounded with ``fn``'s output shape and dtype.
    """
    if isinstance(spec, Bounded):
        low, high = fn(spec.low), fn(spec.high)
        if low.dtype is not torch.bool:
            lo, hi = torch.minimum(low, high), torch.maximum(low, high)
            return Bounded(lo, hi, shape=lo.shape, device=spec.device, dtype=lo.dtype)
    z = fn(spec.zero())
    if not isinstance(spec, Unbounded) and z.dtype == spec.dtype and z.numel() == spec.shape.numel():
        try:
            return spec.reshape(z.shape)
        except (ValueError, RuntimeError, IndexError):
            pass
    return Unbounded(shape=z.shape, device=spec.device, dtype=z.dtype)


class _MapTransform(Transform):
    """A key-mapping transform whose function is also applied to the specs of its keys.

    Forward keys (``in_keys -> out_keys``) are looked up in the observation, reward and done specs;
    inverse keys in the action and state specs, where the spec the caller sees at ``out_key_inv`` is
    :meth:`_inv_spec_fn` of the inner env's spec at ``in_key_inv``.
    """

    def _spec_fn(self, spec: Any) -> Any:
        """The spec of the forward output given the spec of its input."""
        return map_spec(spec, self._apply_transform)

    def _inv_spec_fn(self, spec: Any) -> Any:
        """The spec the caller must give (``out_key_inv``) given the inner env's spec (``in_key_inv``)."""
        return self._spec_fn(spec)

    @staticmethod
    def _map_specs(composite: Any, ins: list, outs: list, fn: Callable, drop_in: bool) -> Any:
        if not ins:
            return composite
        if not isinstance(composite, Composite):  # a leaf spec (TorchRL accepts one): mapped as it is
            return fn(composite)
        present = set(composite.keys(True, True))
        for in_key, out_key in zip(ins, outs):
            in_key, out_key = _norm_key(in_key), _norm_key(out_key)
            if in_key in present:
                composite[out_key] = fn(composite[in_key])
                if drop_in and in_key != out_key:
                    del composite[in_key]
        return composite

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        return self._map_specs(observation_spec, self.in_keys, self.out_keys, self._spec_fn, False)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        return self._map_specs(reward_spec, self.in_keys, self.out_keys, self._spec_fn, False)

    def transform_done_spec(self, done_spec: Composite) -> Composite:
        return self._map_specs(done_spec, self.in_keys, self.out_keys, self._spec_fn, False)

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        # the caller gives out_key_inv; in_key_inv only exists in the copy handed to the inner env
        return self._map_specs(action_spec, self.in_keys_inv, self.out_keys_inv, self._inv_spec_fn, True)

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        return self._map_specs(state_spec, self.in_keys_inv, self.out_keys_inv, self._inv_spec_fn, True)


def _as_bound(value: float | torch.Tensor | None, name: str) -> torch.Tensor | float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, torch.Tensor):
        return value
    raise TypeError(f"ClipTransform: {name} must be a number, a tensor or None, got {type(value).__name__}.")


class ClipTransform(_MapTransform):
    """Clips entries to ``[low, high]`` (forward on ``in_keys``, inverse on ``in_keys_inv``).

    The specs of the clipped entries become :class:`~tdict.specs.Bounded` with the clip range
    (intersected with the original box when there is one).

    Args:
        in_keys: entries clipped on the way out of the env.
        out_keys: where the clipped values go (default ``in_keys``).
        in_keys_inv: entries the inner env reads, clipped from ``out_keys_inv`` on the way in.
        out_keys_inv: the entries the caller gives (default ``in_keys_inv``).
        low: the lower bound (``None``: no lower bound).
        high: the upper bound (``None``: no upper bound).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> t = ClipTransform(in_keys=["obs"], low=-1.0, high=1.0)
        >>> t(TensorDict(obs=torch.tensor([-3.0, 0.5, 2.0])))["obs"].tolist()
        [-1.0, 0.5, 1.0]
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        *,
        low: float | torch.Tensor | None = None,
        high: float | torch.Tensor | None = None,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        low, high = _as_bound(low, "low"), _as_bound(high, "high")
        if low is None and high is None:
            raise ValueError("ClipTransform: give at least one of low and high.")
        if low is not None and high is not None and bool(torch.as_tensor(low > high).any()):
            raise ValueError(f"ClipTransform: low must be <= high, got low={low} and high={high}.")
        self.low = low
        self.high = high
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self._check_pairs(self.in_keys_inv, self.out_keys_inv, "inverse")

    def _clip(self, value: torch.Tensor) -> torch.Tensor:
        low, high = self.low, self.high
        if isinstance(low, torch.Tensor) or isinstance(high, torch.Tensor):
            if low is not None:
                value = torch.maximum(value, torch.as_tensor(low, dtype=value.dtype, device=value.device))
            if high is not None:
                value = torch.minimum(value, torch.as_tensor(high, dtype=value.dtype, device=value.device))
            return value
        return value.clamp(low, high)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._clip(value)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._clip(value)

    def _spec_fn(self, spec: Any) -> Any:
        dtype = spec.dtype
        if not dtype.is_floating_point:
            return map_spec(spec, self._clip)
        shape, device = spec.shape, spec.device
        inf = torch.full(shape, float("inf"), dtype=dtype, device=device)
        low, high = -inf, inf
        if isinstance(spec, Bounded):
            low, high = spec.low.to(dtype), spec.high.to(dtype)
        if self.low is not None:
            low = torch.maximum(low, torch.as_tensor(self.low, dtype=dtype, device=device).expand(shape))
        if self.high is not None:
            high = torch.minimum(high, torch.as_tensor(self.high, dtype=dtype, device=device).expand(shape))
        low = torch.minimum(low, high)  # a box outside the clip range collapses onto the clip bound
        return Bounded(low, high, shape=shape, device=device, dtype=dtype)

    def _inv_spec_fn(self, spec: Any) -> Any:
        # the caller may give any value of the env's spec: clipping only makes it safer
        return spec.clone()

    def __repr__(self) -> str:
        return f"ClipTransform(in_keys={self.in_keys}, low={self.low}, high={self.high})"


class SignTransform(_MapTransform):
    """Replaces entries by their sign (-1, 0 or 1), as done to Atari rewards.

    Specs of the transformed entries become ``Bounded(-1, 1)`` with the same shape and dtype.

    Args:
        in_keys: entries transformed on the way out of the env (e.g. ``["reward"]``).
        out_keys: where the results go (default ``in_keys``).
        in_keys_inv: entries the inner env reads, computed from ``out_keys_inv``.
        out_keys_inv: the entries the caller gives (default ``in_keys_inv``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> SignTransform(in_keys=["reward"])(TensorDict(reward=torch.tensor([-2.5, 0.0, 0.1])))["reward"].tolist()
        [-1.0, 0.0, 1.0]
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self._check_pairs(self.in_keys_inv, self.out_keys_inv, "inverse")

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return torch.sign(value)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return torch.sign(value)

    def _spec_fn(self, spec: Any) -> Any:
        if spec.dtype is torch.bool:
            return spec.clone()
        return Bounded(-1, 1, shape=spec.shape, device=spec.device, dtype=spec.dtype)


class UnaryTransform(_MapTransform):
    """Applies a user function to entries (``fn`` forward, ``inv_fn`` on the inverse path).

    The transformed specs are derived by evaluating the function on ``spec.zero()``: they become
    Unbounded specs with the result's shape and dtype, as in TorchRL. On the inverse path the caller's
    spec is Unbounded with the inner env's shape and dtype (``inv_fn`` is assumed to keep them).

    Args:
        in_keys: entries read by ``fn``.
        out_keys: where ``fn``'s results go.
        in_keys_inv: entries the inner env reads, written by ``inv_fn``.
        out_keys_inv: the entries the caller gives, read by ``inv_fn``.
        fn: the forward function (tensor -> tensor).
        inv_fn: the inverse function (default: none; required when inverse keys are given).
        use_raw_nontensor: pass non-tensor entries (``NonTensorData``) to ``fn`` as they are
            instead of their raw data.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> t = UnaryTransform(in_keys=["obs"], out_keys=["obs_sq"], fn=lambda x: x ** 2)
        >>> t(TensorDict(obs=torch.tensor([1.0, -2.0])))["obs_sq"].tolist()
        [1.0, 4.0]
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey],
        out_keys: NestedKey | Sequence[NestedKey],
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        *,
        fn: Callable[[Any], Any],
        inv_fn: Callable[[Any], Any] | None = None,
        use_raw_nontensor: bool = False,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        if not callable(fn):
            raise TypeError(f"UnaryTransform: fn must be callable, got {type(fn).__name__}.")
        if self.in_keys_inv and inv_fn is None:
            raise ValueError(f"UnaryTransform: in_keys_inv={self.in_keys_inv} were given but no inv_fn.")
        if inv_fn is not None and not callable(inv_fn):
            raise TypeError(f"UnaryTransform: inv_fn must be callable, got {type(inv_fn).__name__}.")
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self._check_pairs(self.in_keys_inv, self.out_keys_inv, "inverse")
        self._fn = fn
        self._inv_fn = inv_fn
        self.use_raw_nontensor = use_raw_nontensor

    def _get(self, tensordict: TensorDictBase, key: NestedKey) -> Any:
        if self.use_raw_nontensor:
            return tensordict.get(key, None)
        value = tensordict.get(key, None)
        data = getattr(value, "data", None) if value is not None and not isinstance(value, torch.Tensor) else None
        return data if data is not None else value

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        fn = self._fn
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            value = self._get(next_tensordict, in_key)
            if value is not None:
                next_tensordict.set(out_key, fn(value))
            elif not self._missing_tolerance:
                raise KeyError(
                    f"UnaryTransform: key {in_key!r} not found; the tensordict has "
                    f"{sorted(map(str, next_tensordict.keys(True, True)))}."
                )
        return next_tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        inv_fn = self._inv_fn
        if inv_fn is None:
            if not self.in_keys_inv:
                return tensordict
            raise ValueError(f"UnaryTransform: in_keys_inv={self.in_keys_inv} are set but there is no inv_fn.")
        for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv):
            value = self._get(tensordict, out_key)
            if value is not None:
                tensordict.set(in_key, inv_fn(value))
            elif not self._missing_tolerance:
                raise KeyError(
                    f"UnaryTransform (inverse): key {out_key!r} not found; the tensordict has "
                    f"{sorted(map(str, tensordict.keys(True, True)))}."
                )
        return tensordict

    @property
    def has_inverse(self) -> bool:
        return bool(self.in_keys_inv)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._fn(value)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._inv_fn(value) if self._inv_fn is not None else value

    def _spec_fn(self, spec: Any) -> Any:
        return unbounded_like(spec, self._fn)

    def _inv_spec_fn(self, spec: Any) -> Any:
        # inv_fn maps the caller's values onto the env's spec: the caller keeps its shape and dtype
        return Unbounded(shape=spec.shape, device=spec.device, dtype=spec.dtype)

    def __repr__(self) -> str:
        return f"UnaryTransform(in_keys={self.in_keys}, out_keys={self.out_keys}, fn={self._fn!r})"
