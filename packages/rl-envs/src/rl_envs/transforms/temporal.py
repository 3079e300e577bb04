"""Transforms over time: frame stacking (CatFrames), max pooling over frames (TimeMaxPool) and next-minus-current
observation deltas (NextObservationDelta).

CatFrames and TimeMaxPool work in two places: inside an env (a buffer per sub-env, refilled on (partial)
resets) and on a trajectory TensorDict ``[*batch, T]`` (a rollout or a replay-buffer slice), where the
windows are rebuilt from the time dim without crossing episode boundaries (read from ``("next", "done")``).
"""

from __future__ import annotations

from typing import Sequence

import torch
from tdict import TensorDictBase
from tdict import NestedKey
from tdict.specs import Bounded, Composite, Unbounded

from .base import Transform, _key_list

__all__ = ["CatFrames", "TimeMaxPool", "NextObservationDelta"]


# ---------------------------------------------------------------------- trajectory helpers
def _time_dim(tensordict: TensorDictBase) -> int:
    """The batch dim named ``"time"`` (what ``rollout`` writes), else the last batch dim."""
    if tensordict.batch_dims == 0:
        raise ValueError(
            "At least one dimension of the tensordict must be the time dim: expected a trajectory TensorDict "
            "(batch_size [*batch, T]), got batch_size []."
        )
    names = getattr(tensordict, "names", None)
    if names is not None:
        for i, name in enumerate(names):
            if name == "time":
                return i
    return tensordict.batch_dims - 1


def _episode_starts(done: torch.Tensor, tdim: int) -> torch.Tensor:
    """For each step t, the index of the first step of its episode (t=0, or the step after a done)."""
    T = done.shape[tdim]
    done = done.movedim(tdim, -1)
    start = torch.zeros_like(done, dtype=torch.bool)
    start[..., 0] = True
    start[..., 1:] = done[..., :-1]
    ar = torch.arange(T, device=done.device).expand_as(start)
    idx = torch.where(start, ar, torch.zeros_like(ar)).cummax(-1).values
    return idx.movedim(-1, tdim)


def _get_done(tensordict: TensorDictBase, done_key: NestedKey, who: str) -> torch.Tensor:
    key = ("next", done_key) if isinstance(done_key, str) else ("next", *done_key)
    done = tensordict.get(key, None)
    if done is None:
        raise KeyError(
            f"{who}: the trajectory has no {key!r} entry to find episode boundaries; it has "
            f"{sorted(map(str, tensordict.keys(True, True)))}."
        )
    return done


def _windows(
    data: torch.Tensor,
    root: torch.Tensor | None,
    starts: torch.Tensor,
    tdim: int,
    N: int,
    padding: str,
    padding_value: float,
) -> torch.Tensor:
    """``[*B, T, *F] -> [*B, T, N, *F]``: for each t the frames t-N+1..t of its episode, oldest first.

    ``root`` (the root counterpart of a ``("next", key)`` entry) supplies the episode's first frame.
    Frames before the episode start are padded with its first frame (``"same"``) or ``padding_value``.
    """
    B = data.shape[:tdim]
    T = data.shape[tdim]
    F = data.shape[tdim + 1 :]
    device = data.device
    t = torch.arange(T, device=device)
    u = t.unsqueeze(-1) - (N - 1) + torch.arange(N, device=device)  # [T, N]
    s = starts.reshape(*B, T, 1)
    u = u.expand(*B, T, N)
    if root is None:
        valid = u >= s
        src = torch.where(valid, u, s)
        source = data
    else:  # sequence of the episode: root[s], next[s], next[s+1], ...
        valid = u >= s - 1
        src = torch.where(u >= s, u + T, s)
        source = torch.cat([root, data], tdim)
    index = src.reshape(*B, T * N, *([1] * len(F))).expand(*B, T * N, *F)
    out = torch.gather(source, tdim, index).reshape(*B, T, N, *F)
    if padding == "constant":
        mask = valid.reshape(*B, T, N, *([1] * len(F)))
        out = torch.where(mask, out, torch.full((), padding_value, dtype=out.dtype, device=device))
    return out


def _check_dim(dim: int, who: str) -> None:
    if dim >= 0:
        raise ValueError(f"{who}: dim must be negative (batch-size independent), got {dim}.")


def _next_key(key: NestedKey) -> NestedKey | None:
    """The root counterpart of a ``("next", ...)`` key, or None."""
    if isinstance(key, tuple) and len(key) > 1 and key[0] == "next":
        return key[1:] if len(key) > 2 else key[1]
    return None


def _reset_mask(
    tensordict: TensorDictBase | None, reset_key: NestedKey, batch_shape: torch.Size
) -> torch.Tensor | None:
    """The ``"_reset"`` mask reshaped to the batch (None: every sub-env resets)."""
    if tensordict is None:
        return None
    mask = tensordict.get(reset_key, None)
    if mask is None or not len(batch_shape):
        return None
    mask = mask.reshape(batch_shape)
    return None if bool(mask.all()) else mask


# ---------------------------------------------------------------------- CatFrames
class CatFrames(Transform):
    """Concatenates the last ``N`` frames of each ``in_key`` along the feature dim ``dim``.

    In an env, a buffer per sub-env holds the last ``N`` frames; a (partial) reset refills the buffer
    of the reset sub-envs with the first frame (``padding="same"``) or with ``padding_value``
    (``"constant"``). On a trajectory TensorDict ``[*batch, T]`` (``forward``, e.g. a replay-buffer
    slice that stores single frames), the stacks are rebuilt along the time dim (the dim named
    ``"time"``, else the last one) without crossing episode boundaries (``("next", done_key)``);
    ``("next", key)`` entries take the episode's first frame from their root counterpart when it is
    present. With ``as_inverse=True`` that unfolding is done by ``inv`` instead (replay-buffer
    ``extend``), and the transform cannot be used in an env.

    Args:
        N: number of frames.
        dim: the (negative) feature dim to concatenate along.
        in_keys: frames to stack (default ``["pixels"]``).
        out_keys: where stacks are written (default: ``in_keys``).
        padding: ``"same"`` or ``"constant"``.
        padding_value: value used by ``"constant"`` padding.
        as_inverse: unfold in ``inv`` rather than ``forward``.
        reset_key: the partial-reset mask key (default ``"_reset"``).
        done_key: the done entry that ends episodes in trajectories (default ``"done"``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> traj = TensorDict(obs=torch.arange(4.).unsqueeze(-1),
        ...                   next=TensorDict(done=torch.tensor([False, True, False, False]), batch_size=[4]),
        ...                   batch_size=[4])
        >>> CatFrames(N=2, dim=-1, in_keys=["obs"])(traj)["obs"].tolist()
        [[0.0, 0.0], [0.0, 1.0], [2.0, 2.0], [2.0, 3.0]]
    """

    def __init__(
        self,
        N: int,
        dim: int,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        padding: str = "same",
        padding_value: float = 0,
        as_inverse: bool = False,
        reset_key: NestedKey | None = None,
        done_key: NestedKey | None = None,
    ) -> None:
        if int(N) < 1:
            raise ValueError(f"CatFrames: N must be >= 1, got {N}.")
        _check_dim(dim, "CatFrames")
        if padding not in ("same", "constant"):
            raise ValueError(f"CatFrames: padding must be 'same' or 'constant', got {padding!r}.")
        in_keys = ["pixels"] if in_keys is None else in_keys
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self.N, self.dim, self.padding, self.padding_value = int(N), dim, padding, padding_value
        self.as_inverse = as_inverse
        self.reset_key = reset_key if reset_key is not None else "_reset"
        self.done_key = done_key if done_key is not None else "done"
        for i in range(len(self.in_keys)):
            self.register_buffer(f"_cat_buffer_{i}", None, persistent=False)

    # -------------------------------------------------------------- env path
    def _fresh(self, data: torch.Tensor) -> torch.Tensor:
        reps = [1] * data.ndim
        reps[self.dim] = self.N
        if self.padding == "same":
            return data.repeat(reps)
        buffer = torch.full_like(data.repeat(reps), self.padding_value)
        d = data.shape[self.dim]
        buffer.narrow(self.dim, buffer.shape[self.dim] - d, d).copy_(data)
        return buffer

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        if self.as_inverse:
            raise RuntimeError(
                "CatFrames(as_inverse=True) unfolds replay-buffer data in inv(); it cannot run in an env."
            )
        mask = _reset_mask(tensordict, self.reset_key, tensordict_reset.batch_size)
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            data = tensordict_reset.get(in_key, None)
            if data is None:
                continue
            fresh = self._fresh(data)
            buffer = getattr(self, f"_cat_buffer_{i}")
            if mask is None or buffer is None or buffer.shape != fresh.shape:
                buffer = fresh
            else:
                buffer = torch.where(mask.reshape(tuple(mask.shape) + (1,) * (fresh.ndim - mask.ndim)), fresh, buffer)
            setattr(self, f"_cat_buffer_{i}", buffer)
            tensordict_reset.set(out_key, buffer.clone())
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            data = next_tensordict.get(in_key)
            buffer = getattr(self, f"_cat_buffer_{i}")
            d = data.shape[self.dim]
            if buffer is None or buffer.shape[: data.ndim + self.dim] != data.shape[: data.ndim + self.dim]:
                buffer = self._fresh(data)
            else:
                buffer = torch.cat([buffer.narrow(self.dim, d, buffer.shape[self.dim] - d), data], self.dim)
            setattr(self, f"_cat_buffer_{i}", buffer)
            next_tensordict.set(out_key, buffer.clone())
        return next_tensordict

    # -------------------------------------------------------------- trajectory path
    def unfolding(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Stacks frames along the time dim of a trajectory TensorDict (episode-aware)."""
        tdim = _time_dim(tensordict)
        starts = _episode_starts(_get_done(tensordict, self.done_key, "CatFrames"), tdim)
        inputs = {k: tensordict.get(k) for k in self.in_keys}  # read everything before writing
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            data = inputs[in_key]
            root_key = _next_key(in_key)
            root = None
            if root_key is not None:
                root = inputs.get(root_key, None)
                if root is None:
                    root = tensordict.get(root_key, None)
            win = _windows(data, root, starts, tdim, self.N, self.padding, self.padding_value)
            # [*B, T, N, *F] -> concatenate the N frames along `dim`
            feat = win.ndim + self.dim
            win = win.movedim(tdim + 1, feat - 1)
            tensordict.set(out_key, win.flatten(feat - 1, feat))
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict if self.as_inverse else self.unfolding(tensordict)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self.unfolding(tensordict) if self.as_inverse else tensordict

    # -------------------------------------------------------------- specs
    def _stack_spec(self, spec):
        shape = list(spec.shape)
        shape[self.dim] *= self.N
        if isinstance(spec, Bounded):
            return Bounded(
                torch.cat([spec.low] * self.N, self.dim),
                torch.cat([spec.high] * self.N, self.dim),
                shape=shape,
                dtype=spec.dtype,
                device=spec.device,
            )
        return Unbounded(shape=shape, dtype=spec.dtype, device=spec.device)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if in_key in observation_spec.keys(True, True):
                observation_spec[out_key] = self._stack_spec(observation_spec[in_key])
        return observation_spec

    def __repr__(self) -> str:
        return f"CatFrames(N={self.N}, dim={self.dim}, in_keys={self.in_keys}, out_keys={self.out_keys})"


# ---------------------------------------------------------------------- TimeMaxPool
class TimeMaxPool(Transform):
    """Element-wise maximum of each ``in_key`` over the last ``T`` frames of the episode.

    In an env the last ``T`` frames are buffered per sub-env; a (partial) reset fills the buffer of the
    reset sub-envs with the first frame, so the pool only covers frames of the current episode
    (TorchRL zero-fills instead, which gives 0 for negative observations). ``forward`` on a
    trajectory ``[*batch, T']`` computes the same pools from the time dim and ``("next", "done")``.

    Args:
        in_keys: entries to pool (default ``["observation"]``).
        out_keys: where pools are written (default: ``in_keys``).
        T: window length.
        reset_key: the partial-reset mask key (default ``"_reset"``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> traj = TensorDict(obs=torch.tensor([1., 3., 2., 0.]),
        ...                   next=TensorDict(done=torch.zeros(4, dtype=torch.bool), batch_size=[4]), batch_size=[4])
        >>> TimeMaxPool(in_keys=["obs"], T=2)(traj)["obs"].tolist()
        [1.0, 3.0, 3.0, 2.0]
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        T: int = 1,
        reset_key: NestedKey | None = None,
    ) -> None:
        if int(T) < 1:
            raise ValueError(f"TimeMaxPool: T must be >= 1, got {T}.")
        super().__init__(in_keys=["observation"] if in_keys is None else in_keys, out_keys=out_keys)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self.T = int(T)
        self.reset_key = reset_key if reset_key is not None else "_reset"
        self.done_key = "done"
        for i in range(len(self.in_keys)):
            self.register_buffer(f"_maxpool_buffer_{i}", None, persistent=False)

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        mask = _reset_mask(tensordict, self.reset_key, tensordict_reset.batch_size)
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            data = tensordict_reset.get(in_key, None)
            if data is None:
                continue
            fresh = data.unsqueeze(0).expand(self.T, *data.shape).clone()
            buffer = getattr(self, f"_maxpool_buffer_{i}")
            if mask is not None and buffer is not None and buffer.shape == fresh.shape:
                fresh = torch.where(mask.reshape(1, *mask.shape, *([1] * (data.ndim - mask.ndim))), fresh, buffer)
            setattr(self, f"_maxpool_buffer_{i}", fresh)
            tensordict_reset.set(out_key, fresh.amax(0))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for i, (in_key, out_key) in enumerate(zip(self.in_keys, self.out_keys)):
            data = next_tensordict.get(in_key)
            buffer = getattr(self, f"_maxpool_buffer_{i}")
            if buffer is None or buffer.shape[1:] != data.shape:
                buffer = data.unsqueeze(0).expand(self.T, *data.shape).clone()
            else:
                buffer = torch.cat([buffer[1:], data.unsqueeze(0)], 0)
            setattr(self, f"_maxpool_buffer_{i}", buffer)
            next_tensordict.set(out_key, buffer.amax(0))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tdim = _time_dim(tensordict)
        starts = _episode_starts(_get_done(tensordict, self.done_key, "TimeMaxPool"), tdim)
        inputs = {k: tensordict.get(k) for k in self.in_keys}
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            root_key = _next_key(in_key)
            root = inputs.get(root_key, tensordict.get(root_key, None)) if root_key is not None else None
            win = _windows(inputs[in_key], root, starts, tdim, self.T, "same", 0)
            tensordict.set(out_key, win.amax(tdim + 1))
        return tensordict

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if in_key in observation_spec.keys(True, True) and out_key != in_key:
                observation_spec[out_key] = observation_spec[in_key].clone()
        return observation_spec

    def __repr__(self) -> str:
        return f"TimeMaxPool(T={self.T}, in_keys={self.in_keys}, out_keys={self.out_keys})"


# ---------------------------------------------------------------------- NextObservationDelta
_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)


class NextObservationDelta(Transform):
    """Stores ``next_obs - obs`` (in ``delta_dtype``) as ``("next", "delta", key)``; ``forward`` rebuilds
    ``("next", key) = obs + delta`` on replay-buffer samples.

    Env side: every step writes the delta of each ``in_key``; resets write a zero delta so that the
    root of every step has the same keys (``("delta", key)`` is declared in the observation spec).
    Unlike TorchRL, the full ``("next", key)`` entry is kept in the step output: dropping it needs a
    hook after the ``step_mdp`` shift, which this env API does not have; remove it before storing
    (e.g. with ``ExcludeTransform``) to save memory. Buffer side (``forward``): reconstruct
    ``("next", key)`` from the root entry and the delta, in the root's dtype (``restore_dtype="root"``)
    or ``restore_dtype``, and drop the delta when ``drop_delta``.

    Args:
        in_keys: observations to encode (default: every floating-point observation of the parent env;
            required when used without an env).
        delta_dtype: floating dtype of the stored delta (default ``torch.float16``).
        restore_dtype: dtype of the rebuilt ``("next", key)`` (``"root"``: the root entry's dtype).
        drop_delta: remove ``("next", "delta", key)`` after rebuilding.
        excluded_dtypes: dtypes never picked when ``in_keys`` is inferred.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> sample = TensorDict(obs=torch.ones(2, 3), next=TensorDict(delta=TensorDict(
        ...     obs=torch.full((2, 3), 0.5, dtype=torch.float16), batch_size=[2]), batch_size=[2]), batch_size=[2])
        >>> NextObservationDelta(in_keys=["obs"])(sample)["next", "obs"][0].tolist()
        [1.5, 1.5, 1.5]
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        delta_dtype: torch.dtype = torch.float16,
        restore_dtype: torch.dtype | str = "root",
        drop_delta: bool = True,
        excluded_dtypes: tuple = _INT_DTYPES,
    ) -> None:
        if not isinstance(delta_dtype, torch.dtype) or not delta_dtype.is_floating_point:
            raise ValueError(f"NextObservationDelta: delta_dtype must be a floating dtype, got {delta_dtype!r}.")
        if restore_dtype != "root" and not (isinstance(restore_dtype, torch.dtype) and restore_dtype.is_floating_point):
            raise ValueError(
                f"NextObservationDelta: restore_dtype must be a floating dtype or 'root', got {restore_dtype!r}."
            )
        super().__init__()
        self.__dict__["_explicit_keys"] = None if in_keys is None else _key_list(in_keys)
        self.delta_dtype, self.restore_dtype, self.drop_delta = delta_dtype, restore_dtype, drop_delta
        self.excluded_dtypes = tuple(excluded_dtypes)

    @property
    def in_keys(self) -> list:
        """The observations encoded.

        The given keys, else the parent env's floating-point observations outside ``"delta"`` whose
        dtype is not in ``excluded_dtypes`` (inferred once, then fixed; ``[]`` without a parent).
        """
        keys = self.__dict__.get("_explicit_keys")
        if keys is not None:
            return keys
        parent = self.parent
        if parent is None:
            return []
        return self._infer_keys(parent.full_observation_spec)

    @in_keys.setter
    def in_keys(self, value) -> None:
        if value:
            self.__dict__["_explicit_keys"] = _key_list(value)

    @property
    def out_keys(self) -> list:
        """The same keys as :attr:`in_keys` (the deltas go to ``("delta", key)``); assigning is ignored."""
        return self.in_keys

    @out_keys.setter
    def out_keys(self, value) -> None:
        pass

    def _infer_keys(self, spec: Composite) -> list:
        keys = []
        for key, leaf in spec.items(True, True):
            path = (key,) if isinstance(key, str) else tuple(key)
            if path[0] == "delta" or leaf.dtype in self.excluded_dtypes or not leaf.dtype.is_floating_point:
                continue
            keys.append(key)
        self.__dict__["_explicit_keys"] = keys  # fixed once known (before the delta specs are added)
        return keys

    @staticmethod
    def _delta_key(key: NestedKey) -> tuple:
        return ("delta", key) if isinstance(key, str) else ("delta", *key)

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        for key in self.in_keys:
            obs = tensordict_reset.get(key, None)
            if obs is not None:
                tensordict_reset.set(self._delta_key(key), torch.zeros_like(obs, dtype=self.delta_dtype))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key in self.in_keys:
            obs, nxt = tensordict.get(key, None), next_tensordict.get(key, None)
            if obs is not None and nxt is not None:
                # subtract at full precision, cast once
                next_tensordict.set(self._delta_key(key), (nxt - obs).to(self.delta_dtype))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for key in self.in_keys:
            path = (key,) if isinstance(key, str) else tuple(key)
            delta_key = ("next", "delta", *path)
            obs, delta = tensordict.get(key, None), tensordict.get(delta_key, None)
            if obs is None or delta is None:
                continue
            dtype = obs.dtype if self.restore_dtype == "root" else self.restore_dtype
            tensordict.set(("next", *path), obs.to(dtype) + delta.to(dtype))
            if self.drop_delta:
                tensordict.pop(delta_key)
        return tensordict

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        keys = self.__dict__.get("_explicit_keys")
        if keys is None:
            keys = self._infer_keys(observation_spec)
        for key in keys:
            if key in observation_spec.keys(True, True):
                leaf = observation_spec[key]
                observation_spec[self._delta_key(key)] = Unbounded(
                    shape=leaf.shape, dtype=self.delta_dtype, device=leaf.device
                )
        return observation_spec

    def __repr__(self) -> str:
        return f"NextObservationDelta(in_keys={self.__dict__.get('_explicit_keys')}, delta_dtype={self.delta_dtype})"
