"""ObservationNorm (fixed affine normalisation), VecNorm (running statistics, shareable between envs) and
NormalizeReward (rewards scaled by the running spread of the discounted return)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, cast

import torch
from tdict import TensorDict, TensorDictBase
from tdict import NestedKey
from tdict.specs import Bounded, Composite, Unbounded
from tdict.validation import check_positive, check_unit_interval

from .base import Compose, Transform

if TYPE_CHECKING:
    from ..env_base import EnvBase

__all__ = ["ObservationNorm", "VecNorm", "NormalizeReward"]


def _suffix(key: NestedKey, suffix: str) -> NestedKey:
    if isinstance(key, str):
        return key + suffix
    return (*key[:-1], key[-1] + suffix)


class ObservationNorm(Transform):
    """Affine normalisation with fixed ``loc`` and ``scale``.

    With ``standard_normal=False`` (TorchRL's default) ``out = x * scale + loc``; with
    ``standard_normal=True`` ``out = (x - loc) / scale``. The inverse keys get the inverse map.
    ``loc`` and ``scale`` are buffers (saved in ``state_dict``); they can be left to ``None`` and
    estimated from the parent env with :meth:`init_stats`. Bounded specs of the transformed keys get
    their bounds mapped.

    Args:
        loc: location (broadcast against the values).
        scale: scale (clamped to ``eps`` from below).
        in_keys: entries normalised (default ``["observation"]``).
        out_keys: where results go (default ``in_keys``).
        in_keys_inv: inner-env entries produced by the inverse map.
        out_keys_inv: caller entries read by the inverse map.
        standard_normal: see above.
        eps: lower bound of ``scale``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> t = ObservationNorm(loc=1.0, scale=2.0, in_keys=["obs"], standard_normal=True)
        >>> t(TensorDict(obs=torch.tensor([3.0, 5.0])))["obs"].tolist()
        [1.0, 2.0]
    """

    invertible = True

    def __init__(
        self,
        loc: float | torch.Tensor | None = None,
        scale: float | torch.Tensor | None = None,
        in_keys: Sequence[NestedKey] | NestedKey | None = None,
        out_keys: Sequence[NestedKey] | NestedKey | None = None,
        in_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | NestedKey | None = None,
        standard_normal: bool = False,
        eps: float | None = None,
    ) -> None:
        if in_keys is None:
            in_keys = ["observation"]
        super().__init__(in_keys=in_keys, out_keys=out_keys, in_keys_inv=in_keys_inv, out_keys_inv=out_keys_inv)
        if (loc is None) != (scale is None):
            raise ValueError("ObservationNorm: loc and scale must be given together (or both None for init_stats).")
        self.standard_normal = bool(standard_normal)
        self.eps = 1e-6 if eps is None else float(eps)
        if loc is not None:
            loc = torch.as_tensor(loc, dtype=torch.get_default_dtype()) if not isinstance(loc, torch.Tensor) else loc
            scale = torch.as_tensor(scale, dtype=torch.get_default_dtype()) if not torch.is_tensor(scale) else scale
            scale = scale.clamp_min(self.eps)
        self.register_buffer("loc", loc)
        self.register_buffer("scale", cast("torch.Tensor | None", scale))  # None with loc (checked above)

    @property
    def initialized(self) -> bool:
        """Whether ``loc`` and ``scale`` are set (given, or estimated by :meth:`init_stats`)."""
        return self.loc is not None

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        # buffers that are still None take the saved tensors (state_dict of an initialised transform)
        for name in ("loc", "scale"):
            key = prefix + name
            if key in state_dict and getattr(self, name) is None:
                setattr(self, name, state_dict[key].clone())
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def init_stats(
        self,
        num_iter: int,
        reduce_dim: int | tuple[int, ...] = 0,
        cat_dim: int | None = None,
        key: NestedKey | None = None,
        keep_dims: tuple[int, ...] | None = None,
    ) -> None:
        """Estimates ``loc``/``scale`` from random rollouts of the parent env (at least ``num_iter`` frames).

        The rollouts (``[*batch, T]``) are concatenated along ``cat_dim`` and the mean/std taken over
        ``reduce_dim``; ``keep_dims`` keeps reduced dims as singletons.
        """
        if cat_dim is None:
            if not isinstance(reduce_dim, int):
                raise ValueError("ObservationNorm.init_stats: cat_dim is required when reduce_dim is a tuple.")
            cat_dim = reduce_dim
        reduce = [reduce_dim] if isinstance(reduce_dim, int) else list(reduce_dim)
        if cat_dim not in reduce:
            raise ValueError(f"ObservationNorm.init_stats: cat_dim {cat_dim} must be one of reduce_dim {reduce}.")
        if self.initialized:
            raise RuntimeError(f"ObservationNorm: loc/scale are already set ({self.loc}, {self.scale}).")
        if len(self.in_keys) > 1 and key is None:
            raise ValueError(f"ObservationNorm.init_stats: several in_keys {self.in_keys}; pass key=.")
        key = self.in_keys[0] if key is None else key
        parent = self.parent
        if parent is None:
            raise RuntimeError("ObservationNorm.init_stats needs a parent env (use it inside a TransformedEnv).")
        for module in parent.transform.modules():
            if isinstance(module, ObservationNorm) and not module.initialized:
                raise RuntimeError("ObservationNorm.init_stats: initialise the ObservationNorms before this one first.")
        data, frames = [], 0
        while frames < num_iter:
            rollout = parent.rollout(max_steps=num_iter)
            frames += rollout.numel()
            data.append(rollout.get(key))
        values = torch.cat(data, cat_dim)
        reduce = sorted(d if d < 0 else d - values.ndim for d in reduce)
        keep = sorted(d if d < 0 else d - values.ndim for d in (keep_dims or ()))
        if any(k not in reduce for k in keep):
            raise ValueError(f"ObservationNorm.init_stats: keep_dims {keep_dims} must be part of reduce_dim.")
        loc = values.mean(reduce, keepdim=True)
        scale = values.std(reduce, keepdim=True)
        for d in sorted(reduce):  # most negative first keeps the later negative indices valid
            if d not in keep:
                loc, scale = loc.squeeze(d), scale.squeeze(d)
        if not self.standard_normal:
            scale = 1 / scale.clamp_min(self.eps)
            loc = -loc * scale
        if not (torch.isfinite(loc).all() and torch.isfinite(scale).all()):
            raise RuntimeError("ObservationNorm.init_stats: non-finite statistics.")
        self.loc = loc
        self.scale = scale.clamp_min(self.eps)
        self.notify_specs_changed()

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        loc, scale = self.loc, self.scale
        if loc is None:
            raise RuntimeError("ObservationNorm: loc/scale are not set; pass them or call init_stats().")
        return (value - loc) / scale if self.standard_normal else value * scale + loc

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        loc, scale = self.loc, self.scale
        if loc is None:
            raise RuntimeError("ObservationNorm: loc/scale are not set; pass them or call init_stats().")
        return value * scale + loc if self.standard_normal else (value - loc) / scale

    def _map_leaf(self, spec: Any, fn) -> Any:
        if isinstance(spec, Bounded) and spec.dtype.is_floating_point and self.initialized:
            a, b = fn(spec.low), fn(spec.high)
            return Bounded(
                torch.minimum(a, b), torch.maximum(a, b), shape=spec.shape, device=spec.device, dtype=spec.dtype
            )
        if isinstance(spec, Bounded):  # unknown stats: nothing can be said about the bounds
            return Unbounded(shape=spec.shape, device=spec.device, dtype=spec.dtype)
        return spec.clone()

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if in_key in observation_spec.keys(True, True):
                observation_spec[out_key] = self._map_leaf(observation_spec[in_key], self._apply_transform)
        return observation_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv):
            for name in ("full_action_spec", "full_state_spec"):
                sub = input_spec[name]
                if in_key in sub.keys(True, True):
                    spec = sub[in_key]
                    if out_key != in_key:
                        del sub[in_key]
                    sub[out_key] = self._map_leaf(spec, self._apply_transform)
        return input_spec

    def __repr__(self) -> str:
        return f"ObservationNorm(loc={self.loc}, scale={self.scale}, keys={self.in_keys}, standard_normal={self.standard_normal})"


class VecNorm(Transform):
    """Normalises entries with running (exponentially decayed) mean and variance.

    For each key it keeps ``sum``, ``ssq`` (sum of squares) and ``count``, each decayed by ``decay``
    before adding the new batch (all leading batch dims are summed). The value is normalised with the
    updated statistics: ``(x - mean) / max(std, eps)``, ``std = sqrt(max(ssq/count - mean², eps))``.
    Statistics are updated on every reset and step and, as in TorchRL, on ``transform(td)`` for plain
    TensorDicts, unless the transform is frozen (:meth:`freeze`).

    The statistics live in one TensorDict (keys ``<key>_sum``, ``<key>_ssq``, ``<key>_count``). Build
    it in shared memory with :meth:`build_td_for_shared_vecnorm` and pass it as ``shared_td`` to
    several VecNorms (envs, processes): they then update the same statistics (under ``lock``).

    Args:
        in_keys: entries to normalise (default ``["observation", "reward"]``).
        out_keys: where results go (default ``in_keys``).
        shared_td: a statistics TensorDict shared with other VecNorms.
        lock: a ``multiprocessing`` lock serialising updates (created when ``shared_td`` is given).
        decay: decay of the running sums.
        eps: lower bound of the variance and of the std.
        shapes: feature shape of each key (default: the value's shape without the batch dims).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> t = VecNorm(in_keys=["obs"], decay=1.0)
        >>> _ = t(TensorDict(obs=torch.tensor([[0.0], [2.0]]), batch_size=[2]))
        >>> t.loc["obs"].tolist(), t.scale["obs"].tolist()
        ([1.0], [1.0])
    """

    _td: TensorDictBase | None

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        shared_td: TensorDictBase | None = None,
        lock: Any = None,
        decay: float = 0.9999,
        eps: float = 1e-4,
        shapes: Sequence[Sequence[int]] | None = None,
    ) -> None:
        if in_keys is None:
            in_keys = ["observation", "reward"]
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        if shapes is not None and len(shapes) != len(self.in_keys):
            raise ValueError(f"VecNorm: {len(shapes)} shapes for {len(self.in_keys)} in_keys.")
        if shared_td is not None:
            if not shared_td.is_shared():
                raise ValueError("VecNorm: shared_td must be in shared memory (td.share_memory_()).")
            for key in self.in_keys:
                for sfx in ("_sum", "_ssq", "_count"):
                    if _suffix(key, sfx) not in shared_td.keys(True, True):
                        raise KeyError(
                            f"VecNorm: shared_td lacks {_suffix(key, sfx)!r} (keys: {list(shared_td.keys(True, True))})."
                        )
            if lock is None:
                import torch.multiprocessing as mp

                lock = mp.Lock()
        self._td = shared_td
        self.lock = lock
        self.decay, self.eps = float(decay), float(eps)
        self.shapes = [torch.Size(s) for s in shapes] if shapes is not None else None
        self.frozen = False

    # ------------------------------------------------------------------ state
    def freeze(self) -> "VecNorm":
        """Stops updating the statistics (they are still used)."""
        self.frozen = True
        return self

    def unfreeze(self) -> "VecNorm":
        """Resumes updating the statistics; returns ``self``."""
        self.frozen = False
        return self

    def frozen_copy(self) -> "VecNorm":
        """A frozen copy holding a private copy of the current statistics."""
        if self._td is None:
            raise RuntimeError("VecNorm.frozen_copy: no statistics yet (run the env first).")
        td, lock = self._td, self.lock
        self._td, self.lock = None, None
        try:
            clone = cast("VecNorm", self.clone())
        finally:
            self._td, self.lock = td, lock
        clone._td = td.clone()
        return clone.freeze()

    def get_extra_state(self) -> dict:
        if self._td is None:
            return {}
        keys = list(self._td.keys(True, True))
        state: dict = {str(i): self._td.get(k).clone() for i, k in enumerate(keys)}
        state["keys"] = keys
        return state

    def set_extra_state(self, state: dict) -> None:
        if not state:
            return
        keys = state["keys"]
        values = {k: state[str(i)] for i, k in enumerate(keys)}
        if self._td is None:
            self._td = TensorDict({}, batch_size=[])
            for k, v in values.items():
                self._td.set(k, v.clone())
        else:
            for k, v in values.items():
                self._td.get(k).copy_(v)

    def _init_key(self, key: NestedKey, value: torch.Tensor, batch_dims: int, index: int) -> None:
        shape = self.shapes[index] if self.shapes is not None else value.shape[batch_dims:]
        dtype = value.dtype if value.dtype.is_floating_point else torch.get_default_dtype()
        if self._td is None:
            self._td = TensorDict({}, batch_size=[])
        self._td.set(_suffix(key, "_sum"), torch.zeros(shape, dtype=dtype, device=value.device))
        self._td.set(_suffix(key, "_ssq"), torch.zeros(shape, dtype=dtype, device=value.device))
        self._td.set(_suffix(key, "_count"), torch.zeros((), dtype=dtype, device=value.device))

    # ------------------------------------------------------------------ hot path
    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        lock = self.lock
        if lock is not None:
            lock.acquire()
        try:
            for i, (key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
                value = next_tensordict.get(key, None)
                if value is None:
                    if self._missing_tolerance:
                        continue
                    raise KeyError(
                        f"VecNorm: key {key!r} not found; the tensordict has "
                        f"{sorted(map(str, next_tensordict.keys(True, True)))}."
                    )
                td = self._td
                if td is None or _suffix(key, "_sum") not in td.keys(True, True):
                    self._init_key(key, value, next_tensordict.batch_dims, i)
                    td = self._td
                    assert td is not None  # _init_key created it
                next_tensordict.set(out_key, self._update(td, key, value))
        finally:
            if lock is not None:
                lock.release()
        return next_tensordict

    def _update(self, td: TensorDictBase, key: NestedKey, value: torch.Tensor) -> torch.Tensor:
        s, q, c = td.get(_suffix(key, "_sum")), td.get(_suffix(key, "_ssq")), td.get(_suffix(key, "_count"))
        lead = value.ndim - s.ndim
        if lead < 0 or value.shape[lead:] != s.shape:
            raise ValueError(
                f"VecNorm: {key!r} has shape {tuple(value.shape)}, its statistics have feature shape {tuple(s.shape)}."
            )
        if not self.frozen:
            x = value.to(s.dtype)
            dims = tuple(range(lead))
            n = 1
            for d in value.shape[:lead]:
                n *= d
            s.mul_(self.decay).add_(x.sum(dims) if dims else x)
            q.mul_(self.decay).add_(x.pow(2).sum(dims) if dims else x.pow(2))
            c.mul_(self.decay).add_(n)
        mean = s / c
        std = (q / c - mean.pow(2)).clamp_min(self.eps).sqrt()
        return ((value - mean) / std.clamp_min(self.eps)).to(value.dtype if value.dtype.is_floating_point else s.dtype)

    # ------------------------------------------------------------------ stats
    def _loc_scale(self) -> tuple[TensorDict, TensorDict]:
        if self._td is None:
            raise RuntimeError("VecNorm: no statistics yet (run the env first).")
        loc, scale = {}, {}
        for key in self.in_keys:
            s, q, c = (self._td.get(_suffix(key, x)) for x in ("_sum", "_ssq", "_count"))
            mean = s / c
            loc[key] = mean
            scale[key] = (q / c - mean.pow(2)).clamp_min(self.eps).sqrt()
        return TensorDict(loc, batch_size=[]), TensorDict(scale, batch_size=[])

    @property
    def loc(self) -> TensorDict:
        """Current means (a TensorDict keyed by ``in_keys``)."""
        return self._loc_scale()[0]

    @property
    def scale(self) -> TensorDict:
        """Current standard deviations (a TensorDict keyed by ``in_keys``)."""
        return self._loc_scale()[1]

    @property
    def standard_normal(self) -> bool:
        """Always ``True``: values are standardised, ``(x - loc) / scale``."""
        return True

    def denorm(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Maps normalised ``out_keys`` back to ``in_keys`` (on a structural copy)."""
        loc, scale = self._loc_scale()
        tensordict = tensordict.copy()
        for key, out_key in zip(self.in_keys, self.out_keys):
            value = tensordict.get(out_key, None)
            if value is not None:
                tensordict.set(key, value * scale.get(key).clamp_min(self.eps) + loc.get(key))
        return tensordict

    def to_observation_norm(self) -> "ObservationNorm | Compose":
        """A fixed :class:`ObservationNorm` (``standard_normal=True``) with the current statistics."""
        loc, scale = self._loc_scale()
        norms = [
            ObservationNorm(
                loc=loc.get(k).clone(),
                scale=scale.get(k).clamp_min(self.eps).clone(),
                in_keys=[k],
                out_keys=[o],
                standard_normal=True,
                eps=self.eps,
            )
            for k, o in zip(self.in_keys, self.out_keys)
        ]
        return norms[0] if len(norms) == 1 else Compose(*norms)

    @staticmethod
    def build_td_for_shared_vecnorm(
        env: "EnvBase", keys: Sequence[NestedKey] | None = None, memmap: bool = False
    ) -> TensorDictBase:
        """Zeroed statistics for ``keys`` (default ``["observation", "reward"]``) in shared memory.

        Feature shapes come from ``env``'s specs (the batch dims removed). Pass the result as
        ``shared_td`` to each VecNorm (several envs, or worker processes).
        """
        if memmap:
            raise NotImplementedError("VecNorm.build_td_for_shared_vecnorm: memmap=True is not supported.")
        keys = ["observation", "reward"] if keys is None else list(keys)
        specs = env.full_observation_spec.clone()
        specs.update(env.full_reward_spec.clone())
        nb = len(env.batch_size)
        td = TensorDict({}, batch_size=[])
        for key in keys:
            spec = specs.get(key, None)
            if spec is None:
                raise KeyError(
                    f"VecNorm.build_td_for_shared_vecnorm: {key!r} is not an observation or reward of the env."
                )
            dtype = spec.dtype if spec.dtype.is_floating_point else torch.get_default_dtype()
            shape = spec.shape[nb:]
            td.set(_suffix(key, "_sum"), torch.zeros(shape, dtype=dtype))
            td.set(_suffix(key, "_ssq"), torch.zeros(shape, dtype=dtype))
            td.set(_suffix(key, "_count"), torch.zeros((), dtype=dtype))
        return td.share_memory_()

    # ------------------------------------------------------------------ specs
    def _leaf(self, spec: Any) -> Any:
        dtype = spec.dtype if spec.dtype.is_floating_point else torch.get_default_dtype()
        return Unbounded(shape=spec.shape, device=spec.device, dtype=dtype)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for key, out_key in zip(self.in_keys, self.out_keys):
            if key in observation_spec.keys(True, True):
                observation_spec[out_key] = self._leaf(observation_spec[key])
        return observation_spec

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        for key, out_key in zip(self.in_keys, self.out_keys):
            if key in reward_spec.keys(True, True):
                reward_spec[out_key] = self._leaf(reward_spec[key])
        return reward_spec

    def __repr__(self) -> str:
        return f"VecNorm(decay={self.decay}, eps={self.eps}, in_keys={self.in_keys}, out_keys={self.out_keys})"


class NormalizeReward(Transform):
    """Divides rewards by the running standard deviation of the discounted return.

    The reward normalisation of Stable-Baselines3's ``VecNormalize(norm_reward=True)`` and Gymnasium's
    ``NormalizeReward``, which on-policy MuJoCo settings (RL-zoo's ``normalize: true``) rely on. Each
    sub-env keeps a discounted return ``G = gamma * G + r``; the mean and variance of ``G`` over every
    step and sub-env so far (a parallel Welford update, float64, starting from variance 1 with weight
    1e-4) scale the reward: ``clamp(r / sqrt(var + eps), -clip, clip)``. ``G`` restarts at 0 after a
    ``done`` (terminated or truncated: append this after the time limit). The reward's sign and the
    optimal policy are unchanged; the returns an evaluation reports come from an env without it.

    :meth:`freeze` stops the updates (the rewards are still scaled). ``state_dict`` holds the
    statistics and the per-sub-env returns, so a resumed run continues exactly. ``forward`` on a plain
    TensorDict (a stored batch) scales its rewards with the current statistics and updates nothing.

    Args:
        gamma: discount of the return whose spread scales the rewards (the algorithm's discount).
        eps: added to the variance under the square root.
        clip: bound of the scaled rewards (``None``: no clipping).
        in_keys: the reward entry (one key; default ``["reward"]``).
        done_key: the flag that restarts the return (default ``"done"`` beside the reward).

    Examples:
        >>> import torch
        >>> from rl_envs import PendulumEnv, TransformedEnv
        >>> t = NormalizeReward(gamma=0.9)
        >>> env = TransformedEnv(PendulumEnv(seed=0), t)
        >>> r = env.rollout(50)
        >>> bool(r["next", "reward"].abs().max() <= 10.0), int(t.count.round())
        (True, 50)
    """

    # buffers (``register_buffer``) and a plain attribute set through ``self.__dict__``
    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor
    _returns: torch.Tensor | None

    def __init__(
        self,
        gamma: float = 0.99,
        eps: float = 1e-8,
        clip: float | None = 10.0,
        in_keys: Sequence[NestedKey] | None = None,
        done_key: NestedKey | None = None,
    ) -> None:
        check_unit_interval("NormalizeReward", "gamma", gamma)
        check_positive("NormalizeReward", "eps", eps)
        check_positive("NormalizeReward", "clip", clip, allow_none=True)
        super().__init__(in_keys=in_keys if in_keys is not None else ["reward"])
        if len(self.in_keys) != 1:
            raise ValueError(f"NormalizeReward: one reward key per transform, got in_keys={self.in_keys}.")
        key = self.in_keys[0]
        self.done_key = done_key if done_key is not None else ("done" if isinstance(key, str) else (*key[:-1], "done"))
        self.gamma, self.eps = float(gamma), float(eps)
        self.clip = None if clip is None else float(clip)
        self.frozen = False
        self.register_buffer("mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("var", torch.ones((), dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))
        self.__dict__["_returns"] = None  # [*batch, *reward feature], float64: created at the first step

    def freeze(self) -> "NormalizeReward":
        """Stops updating the statistics and the returns (the rewards are still scaled)."""
        self.frozen = True
        return self

    def unfreeze(self) -> "NormalizeReward":
        """Resumes updating the statistics and the returns; returns ``self``."""
        self.frozen = False
        return self

    def get_extra_state(self) -> dict:
        return {} if self._returns is None else {"returns": self._returns.clone()}

    def set_extra_state(self, state: dict) -> None:
        returns = state.get("returns") if state else None
        self.__dict__["_returns"] = None if returns is None else returns.to(torch.float64).clone()

    def _update_statistics(self, returns: torch.Tensor) -> None:
        batch = returns.reshape(-1)
        n = batch.numel()
        batch_mean = batch.mean()
        batch_var = batch.var(unbiased=False)
        delta = batch_mean - self.mean
        total = self.count + n
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def _scale(self, reward: torch.Tensor) -> torch.Tensor:
        scaled = reward.to(torch.float64) / (self.var + self.eps).sqrt()
        if self.clip is not None:
            scaled = scaled.clamp(-self.clip, self.clip)
        return scaled.to(reward.dtype if reward.dtype.is_floating_point else torch.get_default_dtype())

    def _reward(self, tensordict: TensorDictBase) -> torch.Tensor:
        reward = tensordict.get(self.in_keys[0], None)
        if reward is None:
            raise KeyError(
                f"NormalizeReward: reward {self.in_keys[0]!r} not found; the tensordict has "
                f"{sorted(map(str, tensordict.keys(True, True)))}."
            )
        return reward

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        reward = self._reward(next_tensordict)
        if not self.frozen:
            done = next_tensordict.get(self.done_key, None)
            if done is None:
                raise KeyError(
                    f"NormalizeReward: done flag {self.done_key!r} not found; the step has "
                    f"{sorted(map(str, next_tensordict.keys(True, True)))}."
                )
            returns = self._returns
            if returns is None or returns.shape != reward.shape:
                returns = torch.zeros(reward.shape, dtype=torch.float64, device=reward.device)
            returns = returns * self.gamma + reward.to(torch.float64)
            self._update_statistics(returns)
            ended = done.reshape(tuple(done.shape) + (1,) * (returns.ndim - done.ndim))
            self.__dict__["_returns"] = returns.masked_fill(ended, 0.0)
        next_tensordict.set(self.in_keys[0], self._scale(reward))
        return next_tensordict

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return tensordict_reset  # returns restart after each done, in _step

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        next_tensordict.set(self.in_keys[0], self._scale(self._reward(next_tensordict)))
        return next_tensordict

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        key = self.in_keys[0]
        if key in reward_spec.keys(True, True):
            leaf = reward_spec[key]
            dtype = leaf.dtype if leaf.dtype.is_floating_point else torch.get_default_dtype()
            if self.clip is None:
                reward_spec[key] = Unbounded(shape=leaf.shape, dtype=dtype, device=leaf.device)
            else:
                reward_spec[key] = Bounded(-self.clip, self.clip, shape=leaf.shape, dtype=dtype, device=leaf.device)
        return reward_spec

    def __repr__(self) -> str:
        return (
            f"NormalizeReward(gamma={self.gamma}, eps={self.eps}, clip={self.clip}, in_keys={self.in_keys}, "
            f"count={float(self.count):.0f}, frozen={self.frozen})"
        )
