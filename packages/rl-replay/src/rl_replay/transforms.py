"""Replay-buffer transforms: n-step returns on ``extend`` and random sub-trajectory crops on ``sample``.

Both are plain callables (no env machinery): a buffer calls ``transform(batch)`` on every sampled
batch and ``transform.inv(data)`` on ``extend`` (see :meth:`rl_replay.ReplayBuffer.append_transform`).
Trajectories are TensorDicts ``[*batch, T]`` with time along the last batch dim; per-step scalars
(reward, done) have the batch shape, with no trailing singleton dim.
"""

from __future__ import annotations

from typing import Sequence

import tdict
import torch
from tdict import TensorDictBase
from tdict import NestedKey
from tdict.validation import check_positive_int

__all__ = ["MultiStepTransform", "RandomCropTensorDict"]

DEFAULT_DONE_KEYS = ("done", "terminated", "truncated")


def _next(key: NestedKey) -> tuple:
    return ("next", key) if isinstance(key, str) else ("next", *key)


def _orig_key(key: NestedKey) -> tuple:
    key = (key,) if isinstance(key, str) else tuple(key)
    return ("next", *key[:-1], f"original_{key[-1]}")


def _step_done(td: TensorDictBase, key: NestedKey, who: str) -> torch.Tensor:
    """The done flags of ``td`` with exactly its batch shape (a trailing singleton dim is dropped)."""
    done = td.get(key, None)
    if done is None:
        raise KeyError(f"{who}: the data has no {key!r} entry (keys: {list(td.keys(True, True))}).")
    if done.shape != td.batch_size:
        if done.shape == (*td.batch_size, 1):
            done = done.squeeze(-1)
        else:
            raise ValueError(
                f"{who}: {key!r} has shape {list(done.shape)}, expected the batch shape {list(td.batch_size)}."
            )
    return done.bool()


def n_step_returns(
    data: TensorDictBase,
    *,
    n_steps: int,
    gamma: float,
    reward_keys: Sequence[NestedKey] = ("reward",),
    done_key: NestedKey = "done",
    done_keys: Sequence[NestedKey] = DEFAULT_DONE_KEYS,
    mask_key: NestedKey | None = "mask",
) -> TensorDictBase:
    """n-step version of every step of the trajectories ``data`` ``[*batch, T]`` (a new TensorDict).

    For step ``t`` let ``k`` be the number of steps from ``t`` to the end of its episode (the first
    ``("next", done_key)`` at or after ``t``, else the end of ``data``), capped at ``n_steps``.
    Then ``("next", r) = sum_{i<k} gamma**i * r_{t+i}`` for every reward key (the one-step reward
    moves to ``("next", "original_<r>")``), every other ``"next"`` entry except the done keys is
    taken from step ``t + k - 1``, ``"steps_to_next_obs" = k``, ``"gamma" = gamma**k`` and
    ``"nonterminal"`` is False when the window stopped at a done flag (or ``mask`` is False).
    """
    tdim = data.batch_dims - 1
    if tdim < 0:
        raise ValueError(
            "MultiStepTransform: the data needs a time dim (batch_size [*batch, T]), got an empty batch_size."
        )
    done = _step_done(data, _next(done_key), "MultiStepTransform")
    T = data.batch_size[-1]
    device = done.device
    ar = torch.arange(T, device=device)
    # first done at or after t (T - 1 when the episode runs past the window): a reversed running min
    marked = torch.where(done, ar, torch.full_like(ar, T - 1))
    end = marked.flip(-1).cummin(-1).values.flip(-1)
    steps = torch.clamp(end - ar + 1, max=n_steps)  # [*batch, T], in 1..n_steps
    hit_done = done.gather(-1, end) & (end - ar < n_steps)

    out = data.clone(False)
    offs = torch.arange(n_steps, device=device)
    window = (ar.unsqueeze(-1) + offs).clamp_max(T - 1).reshape(-1)  # [T * n], clamped rows are masked out
    valid = offs < steps.unsqueeze(-1)  # [*batch, T, n]
    for key in reward_keys:
        reward = data.get(_next(key))
        if reward.shape[: data.batch_dims] != data.batch_size:
            raise ValueError(
                f"MultiStepTransform: {_next(key)!r} has shape {list(reward.shape)}, expected it to start with the "
                f"batch shape {list(data.batch_size)}."
            )
        feat = reward.ndim - data.batch_dims
        disc = gamma ** offs.to(reward.dtype)
        win = reward.index_select(tdim, window).unflatten(tdim, (T, n_steps))  # [*batch, T, n, *F]
        weights = (valid.to(reward.dtype) * disc).reshape(*valid.shape, *([1] * feat))
        out.set(_orig_key(key), reward)
        out.set(_next(key), (win * weights).sum(tdim + 1))

    skip = [k if isinstance(k, str) else tuple(k) for k in (*reward_keys, *done_keys)]
    src = ar + steps - 1  # [*batch, T]: the step whose "next" entries become step t's
    gathered = data.get("next").exclude(*skip).gather(tdim, src)
    out.get("next").update(gathered)
    out.set("steps_to_next_obs", steps)
    out.set("gamma", torch.as_tensor(gamma, dtype=torch.get_default_dtype(), device=device) ** steps)
    nonterminal = ~hit_done
    if mask_key is not None:
        mask = data.get(mask_key, None)
        if mask is not None:
            nonterminal = nonterminal & mask.reshape(data.batch_size).bool()
    out.set("nonterminal", nonterminal)
    return out


class MultiStepTransform:
    """n-step returns for a replay buffer, computed on ``extend`` (``inv``) across successive writes.

    The transform keeps the last ``n_steps`` steps of what it was given; each ``inv(data)`` call
    (``[*batch, T]`` trajectories, time last) concatenates them with ``data``, turns every step into
    its n-step version (see :func:`n_step_returns`) and returns all but the last ``n_steps`` steps,
    whose look-ahead is not complete yet: they come out with the next write. A write that does not
    complete any step returns ``None`` (nothing to store). Sampling (``__call__``) is the identity.

    Semantics of TorchRL 0.14's ``MultiStepTransform``, except that reward/done carry no trailing
    singleton dim and ``"nonterminal"`` is False exactly when the n-step window stopped at a done flag
    (TorchRL marks it from the window length).

    Args:
        n_steps: look-ahead (>= 1; may be changed between writes).
        gamma: discount factor.
        reward_keys: reward entries under ``"next"`` (default ``["reward"]``).
        done_key: the entry under ``"next"`` that ends episodes (default ``"done"``).
        done_keys: entries under ``"next"`` left as they are (default done/terminated/truncated).
        mask_key: a validity mask; False steps get ``nonterminal=False`` (default ``"mask"``, if present).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_replay import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(20), transform=MultiStepTransform(n_steps=2, gamma=0.5))
        >>> traj = TensorDict(obs=torch.arange(6.0), next=TensorDict(obs=torch.arange(1.0, 7.0), reward=torch.ones(6),
        ...                   done=torch.zeros(6, dtype=torch.bool), batch_size=[6]), batch_size=[6])
        >>> _ = rb.extend(traj)
        >>> stored = rb[: len(rb)]  # 6 steps in, the last n_steps=2 wait for the next write
        >>> stored["next", "reward"].tolist(), stored["next", "obs"].tolist()
        ([1.5, 1.5, 1.5, 1.5], [2.0, 3.0, 4.0, 5.0])
    """

    def __init__(
        self,
        n_steps: int,
        gamma: float,
        *,
        reward_keys: Sequence[NestedKey] | None = None,
        done_key: NestedKey | None = None,
        done_keys: Sequence[NestedKey] | None = None,
        mask_key: NestedKey | None = None,
    ) -> None:
        self.n_steps = n_steps
        self.gamma = float(gamma)
        self.reward_keys = list(reward_keys) if reward_keys is not None else ["reward"]
        self.done_key = done_key if done_key is not None else "done"
        self.done_keys = list(done_keys) if done_keys is not None else list(DEFAULT_DONE_KEYS)
        self.mask_key = mask_key if mask_key is not None else "mask"
        self._buffer: TensorDictBase | None = None

    @property
    def n_steps(self) -> int:
        """How many steps each return looks ahead (a positive int; settable)."""
        return self._n_steps

    @n_steps.setter
    def n_steps(self, value: int) -> None:
        check_positive_int("MultiStepTransform", "n_steps", value)
        self._n_steps = value

    def __call__(self, data: TensorDictBase) -> TensorDictBase:
        """Returns sampled data unchanged: the n-step returns are computed when data is written (:meth:`inv`)."""
        return data

    forward = __call__

    def inv(self, data: TensorDictBase) -> TensorDictBase | None:
        """Turns written trajectories ``[*batch, T]`` into n-step transitions, keeping the last ``n_steps``
        steps for the next write; returns ``None`` while fewer than ``n_steps + 1`` steps are held.

        Raises:
            TypeError: ``data`` is not a TensorDict.
            ValueError: ``data`` has no time dim, or its leading dims differ from the previous write's.
        """
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"MultiStepTransform.inv takes a TensorDict of trajectories, got {type(data).__name__}.")
        if data.batch_dims == 0:
            raise ValueError("MultiStepTransform.inv: the data needs a time dim (batch_size [*batch, T]), got [].")
        _step_done(data, _next(self.done_key), "MultiStepTransform")  # validate before keeping anything
        n = self.n_steps
        if self._buffer is not None:
            if self._buffer.batch_size[:-1] != data.batch_size[:-1]:
                raise ValueError(
                    f"MultiStepTransform.inv: data has batch_size {list(data.batch_size)}, but the previous write's "
                    f"leading dims were {list(self._buffer.batch_size[:-1])}."
                )
            total = tdict.cat([self._buffer, data], -1)
        else:
            total = data
        out = None
        if total.batch_size[-1] > n:
            out = n_step_returns(
                total,
                n_steps=n,
                gamma=self.gamma,
                reward_keys=self.reward_keys,
                done_key=self.done_key,
                done_keys=self.done_keys,
                mask_key=self.mask_key,
            )[..., :-n]
        self._buffer = total[..., -n:].clone()
        return out

    def reset(self) -> None:
        """Forgets the steps kept from previous writes (e.g. after emptying the buffer)."""
        self._buffer = None

    def state_dict(self) -> dict:
        """The steps kept for the next write, as plain tensors in nested dicts: ``{"held": {"obs": ...,
        "next": {...}}, "batch_size": [...]}`` (empty when nothing is kept), so that a checkpoint
        restores them (any string key, dots included, round-trips)."""
        held = self._buffer
        if held is None:
            return {}
        return {"held": held.to_dict(), "batch_size": list(held.batch_size)}

    def load_state_dict(self, state: dict) -> None:
        """Restores the steps :meth:`state_dict` returned (an empty dict: none)."""
        if not state:
            self._buffer = None
            return
        if not state["held"]:
            raise ValueError("MultiStepTransform.load_state_dict: 'held' has no entries.")
        self._buffer = tdict.TensorDict(state["held"], batch_size=state["batch_size"])

    def __repr__(self) -> str:
        return f"MultiStepTransform(n_steps={self.n_steps}, gamma={self.gamma}, reward_keys={self.reward_keys})"


class RandomCropTensorDict:
    """Crops a random sub-trajectory of ``sub_seq_len`` steps along ``sample_dim`` of each sampled batch.

    Each trajectory (every index of the other batch dims) gets its own start, uniform over the
    valid ones. With ``mask_key``, only the first ``mask.sum()`` steps of a trajectory count as
    valid (a mask of leading True values, as padded slices have).

    Args:
        sub_seq_len: length of the crops.
        sample_dim: the time dim (default ``-1``).
        mask_key: the validity mask entry (optional).
        generator: the ``torch.Generator`` the starts are drawn from (default: torch's global one).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict(t=torch.arange(10).expand(4, 10), batch_size=[4, 10])
        >>> out = RandomCropTensorDict(3)(td)
        >>> out.batch_size, bool((out["t"].diff(dim=-1) == 1).all())
        (torch.Size([4, 3]), True)
    """

    def __init__(
        self,
        sub_seq_len: int,
        sample_dim: int = -1,
        mask_key: NestedKey | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        check_positive_int("RandomCropTensorDict", "sub_seq_len", sub_seq_len)
        self.sub_seq_len = sub_seq_len
        self.sample_dim = sample_dim
        self.mask_key = mask_key
        self.generator = generator

    def __call__(self, data: TensorDictBase) -> TensorDictBase:
        """``data`` cropped to ``sub_seq_len`` steps along ``sample_dim``, from a random start per trajectory.

        Raises:
            ValueError: ``data`` has no batch dims or fewer than ``sub_seq_len`` steps.
        """
        shape = data.batch_size
        if not len(shape):
            raise ValueError("RandomCropTensorDict: cannot crop a TensorDict with an empty batch_size.")
        dim = self.sample_dim % len(shape)
        L = self.sub_seq_len
        if shape[dim] < L:
            raise ValueError(
                f"RandomCropTensorDict: sub_seq_len={L} exceeds the {shape[dim]} steps along dim {self.sample_dim} "
                f"(batch_size {list(shape)})."
            )
        start_shape = list(shape)
        start_shape[dim] = 1
        mask = data.get(self.mask_key, None) if self.mask_key is not None else None
        if mask is None:
            lengths = torch.full(start_shape, shape[dim], dtype=torch.int64)
        else:
            if mask.shape != shape:
                raise ValueError(
                    f"RandomCropTensorDict: mask {self.mask_key!r} has shape {list(mask.shape)}, expected the batch "
                    f"shape {list(shape)}."
                )
            lengths = mask.long().sum(dim, keepdim=True).cpu()
            if bool((lengths < L).any()):
                raise ValueError(
                    f"RandomCropTensorDict: a trajectory has {int(lengths.min())} valid steps, fewer than sub_seq_len={L}."
                )
        u = torch.rand(start_shape, generator=self.generator)
        start = (u * (lengths - L + 1)).long().clamp_max(lengths - L)
        view = [1] * len(shape)
        view[dim] = L
        index = (start + torch.arange(L).view(view)).to(data.device if data.device is not None else "cpu")
        return data.gather(dim, index)

    forward = __call__

    def __repr__(self) -> str:
        return f"RandomCropTensorDict(sub_seq_len={self.sub_seq_len}, sample_dim={self.sample_dim}, mask_key={self.mask_key!r})"
