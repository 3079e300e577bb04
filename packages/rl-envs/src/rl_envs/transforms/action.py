"""Action transforms: ActionScaling, FlattenAction, ActionMask, DiscreteActionProjection, MultiAction."""

from __future__ import annotations

from typing import Any, Sequence, cast

import torch
from tdict import TensorDictBase
from tdict import NestedKey
from tdict.specs import Bounded, Categorical, Composite, MultiCategorical, MultiOneHot, OneHot, Unbounded

from .base import Compose, Transform

__all__ = ["ActionScaling", "FlattenAction", "ActionMask", "DiscreteActionProjection", "MultiAction"]


def _keys_or(value: Any, default: list) -> list:
    if value is None:
        return list(default)
    if isinstance(value, (str, tuple)):
        return [value]
    return list(value)


# ---------------------------------------------------------------------------------------------- ActionScaling
class ActionScaling(Transform):
    """Exposes a normalised action space and maps actions back to the env's range on the way in.

    With ``loc = (high + low) / 2`` and ``scale = (high - low) / 2`` (read from the inner env's
    ``Bounded`` action spec, or given explicitly), the inverse path (caller -> env) computes
    ``a_env = a * scale + loc`` and the action spec becomes ``Bounded(-1, 1)``
    (``Bounded(0, 1)`` with ``standard_normal=False``, where ``a_env = (2a - 1) * scale + loc``).
    The forward path (``transform(td)`` on a replay-buffer sample) normalises env actions.

    Args:
        in_keys_inv: the action key the inner env reads (default ``["action"]``; one key).
        out_keys_inv: the key the caller writes (default ``in_keys_inv``).
        in_keys: keys normalised by the forward path (default ``in_keys_inv``).
        out_keys: where the forward path writes (default ``in_keys``).
        loc: explicit location (with ``scale``); otherwise derived from the action spec.
        scale: explicit scale (no zero entries).
        standard_normal: ``[-1, 1]`` (True) or ``[0, 1]`` (False) normalised space.

    Examples:
        >>> import torch
        >>> from rl_envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), ActionScaling())
        >>> env.action_spec.low.tolist(), env.action_spec.high.tolist()
        ([-1.0], [1.0])
        >>> env.transform.inv(env.reset().set("action", torch.tensor([0.5])))["action"].tolist()
        [1.0]
    """

    invertible = True

    def __init__(
        self,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        *,
        loc: torch.Tensor | float | None = None,
        scale: torch.Tensor | float | None = None,
        standard_normal: bool = True,
    ) -> None:
        in_keys_inv = _keys_or(in_keys_inv, ["action"])
        if len(in_keys_inv) > 1:
            raise ValueError(
                f"ActionScaling: one action key per instance (a single action key), got in_keys_inv={in_keys_inv}."
            )
        out_keys_inv = _keys_or(out_keys_inv, in_keys_inv)
        in_keys = _keys_or(in_keys, in_keys_inv or ["action"])
        super().__init__(
            in_keys=in_keys, out_keys=_keys_or(out_keys, in_keys), in_keys_inv=in_keys_inv, out_keys_inv=out_keys_inv
        )
        if (loc is None) != (scale is None):
            raise ValueError("ActionScaling: loc and scale must be given together (or both left to None).")
        if not in_keys_inv and loc is None:
            raise ValueError("ActionScaling: in_keys_inv=[] (forward-only) needs explicit loc and scale.")
        self.standard_normal = bool(standard_normal)
        self._explicit = loc is not None
        if loc is not None:
            loc = torch.as_tensor(loc, dtype=torch.get_default_dtype())
            scale = torch.as_tensor(scale, dtype=torch.get_default_dtype())
            if (scale == 0).any():
                raise ValueError(f"ActionScaling: scale must have no zero entry, got {scale.tolist()}.")
        self.register_buffer("loc", loc)
        self.register_buffer("scale", cast("torch.Tensor | None", scale))  # None with loc (checked above)

    @classmethod
    def from_stats(
        cls,
        *,
        mean: torch.Tensor | None = None,
        std: torch.Tensor | None = None,
        low: torch.Tensor | None = None,
        high: torch.Tensor | None = None,
        eps: float = 1e-6,
        **kwargs: Any,
    ) -> "ActionScaling":
        """An ``ActionScaling`` with ``loc``/``scale`` from dataset action statistics.

        Give exactly one pair: ``mean`` and ``std`` (the normalised space has zero mean and unit
        std), or ``low`` and ``high`` (their range maps to ``[-1, 1]``). ``scale`` is floored at
        ``eps`` so that a constant action dim normalises to 0, not NaN. ``kwargs`` go to the
        constructor (``in_keys_inv``, ``standard_normal``...).

        Examples:
            >>> import torch
            >>> t = ActionScaling.from_stats(mean=torch.tensor([2.0]), std=torch.tensor([3.0]))
            >>> t.normalize(torch.tensor([5.0])).tolist()
            [1.0]
        """
        if (mean is None) != (std is None):
            raise ValueError("ActionScaling.from_stats: mean and std must be given together.")
        if (low is None) != (high is None):
            raise ValueError("ActionScaling.from_stats: low and high must be given together.")
        if (mean is None) == (low is None):
            raise ValueError("ActionScaling.from_stats: give exactly one of (mean, std) or (low, high).")
        dtype = torch.get_default_dtype()
        if mean is not None:
            loc, scale = torch.as_tensor(mean, dtype=dtype), torch.as_tensor(std, dtype=dtype)
            what = "mean and std"
        else:
            low_t, high_t = torch.as_tensor(low, dtype=dtype), torch.as_tensor(high, dtype=dtype)
            loc, scale = (low_t + high_t) / 2, (high_t - low_t) / 2
            what = "low and high"
        if loc.shape != scale.shape:
            raise ValueError(
                f"ActionScaling.from_stats: {what} must have the same shape, got {tuple(loc.shape)} and "
                f"{tuple(scale.shape)}."
            )
        return cls(loc=loc, scale=scale.clamp_min(eps), **kwargs)

    @property
    def initialized(self) -> bool:
        """Whether ``loc`` and ``scale`` are set (given, or derived from the action spec on first use)."""
        return self.loc is not None

    def _init_from_spec(self, spec: Any, batch_dims: int) -> None:
        # RuntimeError, as TorchRL: the spec read through the env cannot be scaled
        if not isinstance(spec, Bounded) or not spec.dtype.is_floating_point:
            raise RuntimeError(
                f"ActionScaling: key {self.in_keys_inv[0]!r} needs a float Bounded action spec, got {spec!r}."
            )
        first = (0,) * batch_dims  # loc/scale describe one action, not the batch
        low, high = spec.low[first], spec.high[first]
        huge = torch.finfo(spec.dtype).max  # a bound at the dtype's largest value stands for "unbounded"
        if not (low.abs() < huge).all() or not (high.abs() < huge).all() or (high <= low).any():
            raise RuntimeError(
                f"ActionScaling: the bounds of {self.in_keys_inv[0]!r} must be finite (below the dtype's largest "
                f"value) with high > low; got low={low.tolist()}, high={high.tolist()}."
            )
        self.loc = ((high + low) / 2).to(spec.dtype)
        self.scale = ((high - low) / 2).to(spec.dtype)

    def _ensure_initialized(self) -> None:
        if self.loc is None:
            parent = self.parent
            if parent is None:
                raise RuntimeError("ActionScaling: pass loc and scale, or use it inside a TransformedEnv.")
            self._init_from_spec(parent.full_action_spec[self.in_keys_inv[0]], len(parent.batch_size))

    def _check_width(self, action: torch.Tensor) -> None:
        # per-dim loc/scale must match the action's last dim, never broadcast over another width
        width = self.loc.shape[-1] if self.loc.ndim else None
        if width not in (None, 1) and (action.ndim == 0 or action.shape[-1] != width):
            raise ValueError(
                f"ActionScaling: the action's last dim ({tuple(action.shape)}) does not match the {width} entries of "
                "loc and scale."
            )

    def _apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        self._ensure_initialized()
        self._check_width(action)
        out = (action - self.loc) / self.scale
        return (out + 1) / 2 if not self.standard_normal else out

    def _inv_apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        if self.loc is None:
            self._ensure_initialized()
        self._check_width(action)
        if not self.standard_normal:
            action = action * 2 - 1
        return action * self.scale + self.loc

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict  # env outputs carry no action

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return Transform._call(self, tensordict)

    def normalize(self, action: torch.Tensor) -> torch.Tensor:
        """Env-scale action -> normalised action."""
        return self._apply_transform(action)

    def denormalize(self, action: torch.Tensor) -> torch.Tensor:
        """Normalised action -> env-scale action."""
        return self._inv_apply_transform(action)

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        if not self.in_keys_inv:
            return action_spec
        in_key, out_key = self.in_keys_inv[0], self.out_keys_inv[0]
        spec = action_spec[in_key]
        if self._explicit:
            if isinstance(spec, Bounded):
                lo, hi = self._apply_transform(spec.low), self._apply_transform(spec.high)
                new = Bounded(
                    torch.minimum(lo, hi), torch.maximum(lo, hi), shape=spec.shape, device=spec.device, dtype=spec.dtype
                )
            else:
                new = Unbounded(shape=spec.shape, device=spec.device, dtype=spec.dtype)
        else:
            if self.loc is None:
                self._init_from_spec(spec, action_spec.ndim)
            low = -1.0 if self.standard_normal else 0.0
            new = Bounded(low, 1.0, shape=spec.shape, device=spec.device, dtype=spec.dtype)
        if out_key != in_key:
            del action_spec[in_key]
        action_spec[out_key] = new
        return action_spec

    def __repr__(self) -> str:
        return f"ActionScaling(loc={self.loc}, scale={self.scale}, standard_normal={self.standard_normal})"


# ---------------------------------------------------------------------------------------------- FlattenAction
def _reshape_leaf(spec: Any, shape: torch.Size) -> Any:
    """The same kind of spec with a new full shape (element-wise bounds reshaped)."""
    if isinstance(spec, Bounded):
        return Bounded(
            spec.low.reshape(shape), spec.high.reshape(shape), shape=shape, device=spec.device, dtype=spec.dtype
        )
    if isinstance(spec, Categorical):
        return Categorical(spec.n, shape=shape, device=spec.device, dtype=spec.dtype)
    if isinstance(spec, Unbounded):
        return Unbounded(shape=shape, device=spec.device, dtype=spec.dtype)
    raise TypeError(f"cannot reshape a {type(spec).__name__} action spec to {tuple(shape)}.")


class FlattenAction(Transform):
    """The caller sees the action dims ``first_dim..last_dim`` merged into one; the inner env gets them back.

    Inverse path (caller -> env): ``unflatten`` to the inner action shape; forward path (replay-buffer
    samples): ``flatten``. Dims are negative (counted from the end of the action).

    Args:
        first_dim: first action dim to merge (negative).
        last_dim: last action dim to merge, inclusive (negative).
        in_keys_inv: the action keys the inner env reads (default ``["action"]``).
        out_keys_inv: the keys the caller writes (default ``in_keys_inv``).
        in_keys: keys flattened by the forward path (default ``in_keys_inv``).
        out_keys: where the forward path writes (default ``in_keys``).
        allow_positive_dim: accept non-negative dims, counted from the first dim of the action itself
            (after the env's batch dims); in an env they are turned into the negative equivalent.
        action_shape: the merged dims' original sizes (needed outside an env).

    Examples:
        >>> import torch
        >>> t = FlattenAction(action_shape=(2, 3))
        >>> from tdict import TensorDict
        >>> t.inv(TensorDict(action=torch.arange(6.0)))["action"].shape
        torch.Size([2, 3])
    """

    invertible = True

    def __init__(
        self,
        first_dim: int = -2,
        last_dim: int = -1,
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        allow_positive_dim: bool = False,
        *,
        action_shape: Sequence[int] | None = None,
    ) -> None:
        if not allow_positive_dim and (first_dim >= 0 or last_dim >= 0):
            raise ValueError(
                f"FlattenAction: first_dim and last_dim must be negative (or pass allow_positive_dim=True), got "
                f"{first_dim}, {last_dim}."
            )
        if (first_dim >= 0) != (last_dim >= 0):
            raise ValueError(
                f"FlattenAction: first_dim and last_dim must have the same sign, got {first_dim}, {last_dim}."
            )
        if first_dim > last_dim:
            raise ValueError(f"FlattenAction: first_dim ({first_dim}) must be <= last_dim ({last_dim}).")
        in_keys_inv = _keys_or(in_keys_inv, ["action"])
        in_keys = _keys_or(in_keys, in_keys_inv)
        super().__init__(
            in_keys=in_keys,
            out_keys=_keys_or(out_keys, in_keys),
            in_keys_inv=in_keys_inv,
            out_keys_inv=_keys_or(out_keys_inv, in_keys_inv),
        )
        self.first_dim, self.last_dim = first_dim, last_dim
        self.allow_positive_dim = allow_positive_dim
        self._shapes: dict = {}
        if action_shape is not None:
            for key in self.in_keys_inv:
                self._shapes[key] = tuple(int(s) for s in action_shape)

    def _span(self, shape: torch.Size, key: NestedKey) -> tuple:
        n = len(shape)
        first, last = n + self.first_dim, n + self.last_dim
        if first < 0:
            raise ValueError(
                f"FlattenAction: action {key!r} of shape {tuple(shape)} has fewer than {-self.first_dim} dims."
            )
        return tuple(shape[first : last + 1])

    def _apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        return action.flatten(self.first_dim, self.last_dim)

    def _inv_apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        """Unflattens one action (a single ``in_keys_inv`` only: the tensor alone names no key)."""
        if len(self.in_keys_inv) != 1:
            raise RuntimeError(
                f"FlattenAction._inv_apply_transform cannot disambiguate between in_keys_inv={self.in_keys_inv} (it "
                "gets a tensor, not a key); use inv(), which goes key by key."
            )
        shape = self._shapes.get(self.in_keys_inv[0])
        if shape is None:
            raise RuntimeError(
                f"FlattenAction: no original shape for {self.in_keys_inv[0]!r}; pass action_shape= or use it in an env."
            )
        return action.unflatten(self.last_dim, shape)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict  # env outputs carry no action

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return Transform._call(self, tensordict)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        shapes = self._shapes
        if not shapes:
            parent = self.parent
            if parent is not None:
                parent.full_action_spec  # fills self._shapes through transform_action_spec
        merged = self.last_dim  # the merged dim, counted from the end of the flattened action
        for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv):
            value = tensordict.get(out_key, None)
            if value is None:
                if self._missing_tolerance:
                    continue
                raise KeyError(f"FlattenAction (inverse): key {out_key!r} not found.")
            shape = shapes.get(in_key)
            if shape is None:
                raise RuntimeError(
                    f"FlattenAction: no original shape for {in_key!r}; pass action_shape= or use it in an env."
                )
            tensordict.set(in_key, value.unflatten(merged, shape))
        return tensordict

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv):
            spec = action_spec[in_key]
            if self.first_dim >= 0:  # allow_positive_dim: dims of the action itself, after the batch dims
                ndim = len(spec.shape) - len(action_spec.shape)
                self.first_dim, self.last_dim = self.first_dim - ndim, self.last_dim - ndim
            span = self._span(spec.shape, in_key)
            self._shapes[in_key] = span
            probe = torch.empty(spec.shape, device="meta").flatten(self.first_dim, self.last_dim)
            if out_key != in_key:
                del action_spec[in_key]
            action_spec[out_key] = _reshape_leaf(spec, probe.shape)
        return action_spec


# ---------------------------------------------------------------------------------------------- ActionMask
class ActionMask(Transform):
    """Keeps the action spec's mask equal to the env's ``action_mask`` observation.

    After each reset and step the boolean mask read at ``mask_key`` is written into the (discrete)
    action spec, so ``env.rand_action``, ``spec.rand()`` and random rollouts only pick allowed actions.
    It only makes sense inside an env: calling it on a plain TensorDict raises.

    Args:
        action_key: the action whose spec is masked (Categorical, OneHot, MultiCategorical, MultiOneHot).
        mask_key: the observation holding the boolean mask.

    Examples:
        >>> import torch
        >>> from tdict.specs import Categorical
        >>> spec = Categorical(3)
        >>> spec.update_mask(torch.tensor([False, True, False]))
        >>> spec.rand((4,)).tolist()
        [1, 1, 1, 1]
    """

    _ACCEPTED = (Categorical, OneHot, MultiCategorical, MultiOneHot)

    def __init__(self, action_key: NestedKey = "action", mask_key: NestedKey = "action_mask") -> None:
        for name, key in (("action_key", action_key), ("mask_key", mask_key)):
            if not isinstance(key, (str, tuple)):
                raise TypeError(f"ActionMask: {name} must be a str or tuple key, got {type(key).__name__}.")
        super().__init__(in_keys=[action_key, mask_key], out_keys=[], in_keys_inv=[], out_keys_inv=[])
        self.action_key, self.mask_key = action_key, mask_key

    @property
    def action_spec(self) -> Any:
        """The env's spec of ``action_key``, whose mask this transform updates.

        Raises:
            RuntimeError: the transform is not inside a TransformedEnv.
            TypeError: the spec is not Categorical, OneHot, MultiCategorical or MultiOneHot.
        """
        env = self.container
        while isinstance(env, Compose):
            env = env.container
        if env is None:
            raise RuntimeError("ActionMask only works inside a TransformedEnv (it masks the env's action spec).")
        spec = env.full_action_spec[self.action_key]
        if not isinstance(spec, self._ACCEPTED):
            raise TypeError(f"ActionMask: the spec of {self.action_key!r} must be discrete, got {type(spec).__name__}.")
        return spec

    def _update(self, mask: torch.Tensor) -> None:
        self.action_spec.update_mask(mask)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        mask = next_tensordict.get(self.mask_key, None)
        if mask is None:
            raise KeyError(f"ActionMask: mask key {self.mask_key!r} not found in the env output.")
        self._update(mask)
        return next_tensordict

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        mask = tensordict_reset.get(self.mask_key, None)
        if mask is None:
            raise KeyError(f"ActionMask: mask key {self.mask_key!r} not found in the reset output.")
        if tensordict is not None:
            reset = tensordict.get("_reset", None)
            old = tensordict.get(self.mask_key, None)
            if reset is not None and old is not None:  # sub-envs that are not reset keep their mask
                mask = torch.where(reset.reshape(reset.shape + (1,) * (mask.ndim - reset.ndim)), mask, old)
        self._update(mask)
        return tensordict_reset

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("ActionMask only works inside a TransformedEnv (it masks the env's action spec).")


# ---------------------------------------------------------------------------------------------- DiscreteActionProjection
class DiscreteActionProjection(Transform):
    """Lets a policy with ``max_actions`` one-hot outputs act in an env with ``num_actions_effective``.

    Inverse path: a one-hot action of size ``max_actions`` whose index is ``>= num_actions_effective``
    is replaced by a uniformly random valid action, then re-encoded as a one-hot of size
    ``num_actions_effective`` (in the inner spec's dtype). Forward path (``include_forward``, replay
    buffers): one-hot of size ``num_actions_effective`` padded to ``max_actions``.

    Args:
        num_actions_effective: actions the inner env accepts.
        max_actions: actions the caller produces (>= ``num_actions_effective``).
        action_key: the one-hot action key.
        include_forward: also map on the forward path.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> t = DiscreteActionProjection(2, 3)
        >>> t.inv(TensorDict(action=torch.tensor([0, 1, 0])))["action"].tolist()
        [0, 1]
    """

    def __init__(
        self,
        num_actions_effective: int,
        max_actions: int,
        action_key: NestedKey = "action",
        include_forward: bool = True,
    ) -> None:
        if max_actions < num_actions_effective:
            raise ValueError(
                f"DiscreteActionProjection: max_actions ({max_actions}) must be >= num_actions_effective "
                f"({num_actions_effective})."
            )
        super().__init__(in_keys=[action_key] if include_forward else [], in_keys_inv=[action_key])
        self.num_actions_effective, self.max_actions = int(num_actions_effective), int(max_actions)
        self.action_key = action_key
        self._inner_dtype: torch.dtype | None = None

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict  # the env's outputs carry no action

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return Transform._call(self, tensordict)

    def _apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(action.long().argmax(-1), self.max_actions).to(action.dtype)

    def _inv_apply_transform(self, action: torch.Tensor) -> torch.Tensor:
        if action.shape[-1] != self.max_actions:
            raise ValueError(
                f"DiscreteActionProjection: {self.action_key!r} must end with {self.max_actions} one-hot entries, "
                f"got shape {tuple(action.shape)}."
            )
        index = action.long().argmax(-1)
        invalid = index >= self.num_actions_effective
        if invalid.any():
            index = torch.where(invalid, torch.randint_like(index, self.num_actions_effective), index)
        dtype = self._inner_dtype if self._inner_dtype is not None else action.dtype
        return torch.nn.functional.one_hot(index, self.num_actions_effective).to(dtype)

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        spec = action_spec[self.action_key]
        if spec.shape[-1] != self.num_actions_effective:
            raise ValueError(
                f"DiscreteActionProjection: the inner action {self.action_key!r} must be a one-hot of size "
                f"{self.num_actions_effective}, got shape {tuple(spec.shape)}."
            )
        self._inner_dtype = spec.dtype
        action_spec[self.action_key] = OneHot(
            self.max_actions, shape=(*spec.shape[:-1], self.max_actions), device=spec.device, dtype=spec.dtype
        )
        return action_spec

    def __repr__(self) -> str:
        return (
            f"DiscreteActionProjection(num_actions_effective={self.num_actions_effective}, "
            f"max_actions={self.max_actions}, action_key={self.action_key!r})"
        )


# ---------------------------------------------------------------------------------------------- MultiAction
def _where_tds(keep: torch.Tensor, old: TensorDictBase, new: TensorDictBase, keys: list) -> None:
    """``new[k] = old[k]`` where ``keep`` (batch-shaped) is True, for every key in ``keys`` (in place)."""
    nb = keep.ndim
    for key in keys:
        value = new.get(key)
        prev = old.get(key)
        new.set(key, torch.where(keep.reshape(keep.shape + (1,) * (value.ndim - nb)), prev, value))


class MultiAction(Transform):
    """Macro actions: the caller gives a stack of ``K`` actions per step and the env runs them in order.

    The action at ``chunk_key`` has shape ``[*batch, K, *action_shape]`` (the stack dim sits ``dim``
    dims after the batch dims). One outer step runs the inner env ``K`` times; a sub-env that reaches
    ``done`` stops there: its later actions are ignored and its outputs (observations, done flags)
    are those of the step where it finished. The reward is, as in TorchRL, the stack of the ``K``
    per-step rewards (``stack_rewards=True``, zeros for skipped steps), the last one
    (``stack_rewards=False``), or the sum over the executed steps (``sum_rewards=True``).

    Transforms placed before MultiAction see every inner step; transforms after it see one macro step.
    A batch-locked inner env is still stepped as a whole batch: sub-envs that finished early are
    stepped too, but their results are discarded.

    Args:
        dim: where the stack dim sits, counted after the batch dims (``>= 1``).
        stack_rewards: stack the per-step rewards along the stack dim (reward spec gains it).
        stack_observations: not supported (raises); kept for TorchRL's signature.
        action_key: the one-step action the inner env reads (default ``"action"``).
        chunk_key: where the caller writes the stacked actions (default ``action_key``).
        num_actions: ``K``; our specs have static shapes, so the action spec needs it.
        sum_rewards: report the sum of the executed steps' rewards (takes precedence over stacking).

    Examples:
        >>> import torch
        >>> from rl_envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), MultiAction(num_actions=3, sum_rewards=True))
        >>> env.action_spec.shape, env.rollout(2)["next", "reward"].shape
        (torch.Size([3, 1]), torch.Size([2]))
    """

    def __init__(
        self,
        *,
        dim: int = 1,
        stack_rewards: bool = True,
        stack_observations: bool = False,
        action_key: NestedKey | None = None,
        chunk_key: NestedKey | None = None,
        num_actions: int | None = None,
        sum_rewards: bool = False,
    ) -> None:
        if dim < 1:
            raise ValueError(f"MultiAction: dim must be >= 1, got {dim}.")
        if stack_observations:
            raise NotImplementedError("MultiAction: stack_observations=True is not supported.")
        if num_actions is not None and num_actions < 1:
            raise ValueError(f"MultiAction: num_actions must be >= 1, got {num_actions}.")
        action_key = "action" if action_key is None else action_key
        chunk_key = action_key if chunk_key is None else chunk_key
        super().__init__(in_keys_inv=[action_key], out_keys_inv=[chunk_key])
        self.dim, self.stack_rewards, self.stack_observations = dim, stack_rewards, stack_observations
        self.sum_rewards = sum_rewards
        self.num_actions = num_actions
        self.action_key, self.chunk_key = action_key, chunk_key
        self._meta: tuple | None = None

    def _stack_dim(self, batch_dims: int) -> int:
        return batch_dims + self.dim - 1

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        chunk = tensordict.get(self.chunk_key, None)
        if chunk is None:
            raise KeyError(
                f"MultiAction: stacked actions expected at {self.chunk_key!r}; the tensordict has "
                f"{sorted(map(str, tensordict.keys(True, True)))}."
            )
        tensordict.set(self.action_key, chunk.select(self._stack_dim(tensordict.batch_dims), 0))
        return tensordict

    def _parent_meta(self) -> tuple:
        meta = self._meta
        if meta is None:
            parent = self.parent
            if parent is None:
                raise RuntimeError("MultiAction only steps inside a TransformedEnv.")
            done_keys = list(parent.done_keys)
            done_key = next((k for k in done_keys if (k if isinstance(k, str) else k[-1]) == "done"), done_keys[0])
            meta = self._meta = (parent, list(parent.reward_keys), done_key)
        return meta

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        parent, reward_keys, done_key = self._parent_meta()
        batch_dims = tensordict.batch_dims
        sdim = self._stack_dim(batch_dims)
        actions = tensordict.get(self.chunk_key).unbind(sdim)
        rewards = [[next_tensordict.get(k)] for k in reward_keys]
        totals = [r[0] for r in rewards]
        done = next_tensordict.get(done_key)
        root = (
            tensordict.exclude("next", self.chunk_key)
            if self.chunk_key != self.action_key
            else tensordict.exclude("next")
        )
        current = next_tensordict
        for action in actions[1:]:
            if done.all():
                for r in rewards:
                    r.append(torch.zeros_like(r[0]))
                continue
            step_td = root.copy()
            step_td.update(current.exclude(*reward_keys))
            step_td.set(self.action_key, action)
            new = parent.step(step_td).get("next")
            if done.any():
                _where_tds(done, current, new, [k for k in new.keys(True, True) if k not in reward_keys])
            for i, k in enumerate(reward_keys):
                r = new.get(k)
                r = torch.where(done.reshape(done.shape + (1,) * (r.ndim - done.ndim)), torch.zeros_like(r), r)
                rewards[i].append(r)
                totals[i] = totals[i] + r
            done = done | new.get(done_key)
            current = new
        if current is not next_tensordict:
            next_tensordict.update(current.exclude(*reward_keys))
        for i, k in enumerate(reward_keys):
            if self.sum_rewards:
                value = totals[i]
            elif self.stack_rewards:
                value = torch.stack(rewards[i], sdim)
            else:
                value = rewards[i][-1]  # zero for sub-envs that finished before the last action
            next_tensordict.set(k, value)
        return next_tensordict

    def _k(self) -> int:
        if self.num_actions is None:
            raise ValueError("MultiAction: pass num_actions=K so the stacked action spec has a static shape.")
        return self.num_actions

    def _stacked(self, spec: Any, batch_dims: int) -> Any:
        sdim = self._stack_dim(batch_dims)
        spec = spec.unsqueeze(sdim)
        shape = list(spec.shape)
        shape[sdim] = self._k()
        return spec.expand(shape)

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        spec = action_spec[self.action_key]
        if self.chunk_key != self.action_key:
            del action_spec[self.action_key]
        action_spec[self.chunk_key] = self._stacked(spec, action_spec.ndim)
        return action_spec

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        if self.stack_rewards and not self.sum_rewards:
            for key in reward_spec.keys(True, True):
                reward_spec[key] = self._stacked(reward_spec[key], reward_spec.ndim)
        return reward_spec

    def __repr__(self) -> str:
        return (
            f"MultiAction(num_actions={self.num_actions}, dim={self.dim}, stack_rewards={self.stack_rewards}, "
            f"sum_rewards={self.sum_rewards})"
        )
