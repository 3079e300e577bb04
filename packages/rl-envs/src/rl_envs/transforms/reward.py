"""Reward transforms: episode return (RewardSum), affine scaling, clipping, binarisation, reward-to-go and
decision-transformer target returns."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from tdict import TensorDictBase, expand_as_right
from tdict import NestedKey
from tdict.specs import Bounded, Categorical, Composite, Unbounded

from ._episode_utils import _join, _prefix
from .base import Transform, _key_list
from .temporal import _episode_starts, _time_dim

__all__ = ["RewardSum", "RewardScaling", "RewardClipping", "BinarizeReward", "Reward2GoTransform", "TargetReturn"]


def _replace_last(key: NestedKey, name: str) -> NestedKey:
    return name if isinstance(key, str) else (*key[:-1], name)


def _last(key: NestedKey) -> str:
    return key if isinstance(key, str) else key[-1]


def _segment_cumsum(reward: torch.Tensor, done: torch.Tensor, tdim: int) -> torch.Tensor:
    """Cumulative sum of ``reward`` along ``tdim`` restarting after each ``done`` (``done`` is batch-shaped)."""
    starts = _episode_starts(done, tdim)
    total = reward.cumsum(tdim)
    before = total - reward  # sum of the rewards before t
    index = expand_as_right(starts, reward)
    return total - before.gather(tdim, index)


def _locate(tensordict: TensorDictBase, key: NestedKey) -> tuple:
    """(prefix, value) of ``key`` at the root or under ``"next"`` (trajectories keep rewards in ``"next"``)."""
    value = tensordict.get(key, None)
    if value is not None:
        return (), value
    value = tensordict.get(_join(("next",), key), None)
    if value is not None:
        return ("next",), value
    raise KeyError(
        f"key {key!r} not found at the root nor under 'next'; the tensordict has "
        f"{sorted(map(str, tensordict.keys(True, True)))}."
    )


# ---------------------------------------------------------------------- RewardSum
class RewardSum(Transform):
    """Running episode return: ``episode_reward`` accumulates ``reward`` and restarts at each reset.

    In an env, reset writes zeros (a partial reset only zeroes the reset sub-envs) and each step writes
    ``("next", "episode_reward") = episode_reward + reward``. ``forward`` on a trajectory ``[*batch, T]``
    computes the same sums along the time dim, restarting after each ``done`` of the same level
    (rewards are looked up at the root, then under ``"next"``).

    Args:
        in_keys: reward entries (default ``["reward"]``).
        out_keys: sum entries (default ``"episode_<name>"`` next to each reward).
        reset_keys: partial-reset mask keys, one per in_key (default ``"_reset"`` at the reward's level).
        reward_spec: declare the sums in the reward spec instead of the observation spec. The running
            sum then lives in the transform (``step_mdp`` drops reward entries from the root).

    Examples:
        >>> from rl_envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), RewardSum())
        >>> r = env.rollout(3)
        >>> torch.allclose(r["next", "episode_reward"], r["next", "reward"].cumsum(0))
        True
    """

    _sums: dict  # set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``)

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        reset_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        reward_spec: bool = False,
    ) -> None:
        in_keys = _key_list(in_keys) or ["reward"]
        if not out_keys:
            out_keys = [_replace_last(k, f"episode_{_last(k)}") for k in in_keys]
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        resets = _key_list(reset_keys) or [_join(_prefix(k), "_reset") for k in self.in_keys]
        if len(resets) == 1 and len(self.in_keys) > 1:
            resets = resets * len(self.in_keys)
        if len(resets) != len(self.in_keys):
            raise ValueError(f"RewardSum: got {len(resets)} reset_keys for {len(self.in_keys)} in_keys.")
        self.reset_keys = resets
        self.reward_spec = reward_spec
        self.__dict__["_sums"] = {}  # reward_spec=True only

    def _zero(self, in_key: NestedKey, tensordict_reset: TensorDictBase) -> torch.Tensor:
        parent = self.parent
        if parent is not None:
            spec = parent.full_reward_spec[in_key]
            extra = tensordict_reset.batch_size[: tensordict_reset.batch_dims - len(parent.batch_size)]
            return spec.zero(extra) if len(extra) else spec.zero()
        return torch.zeros(tensordict_reset.batch_size, device=tensordict_reset.device)

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        for in_key, out_key, reset_key in zip(self.in_keys, self.out_keys, self.reset_keys):
            zero = self._zero(in_key, tensordict_reset)
            if self.reward_spec:
                old = self._sums.get(out_key)
                mask = tensordict.get(reset_key, None) if tensordict is not None else None
                if old is not None and mask is not None and old.shape == zero.shape:
                    zero = torch.where(expand_as_right(mask.reshape(zero.shape[: mask.ndim]), zero), zero, old)
                self._sums[out_key] = zero
            else:
                tensordict_reset.set(out_key, zero)
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            reward = next_tensordict.get(in_key)
            prev = self._sums.get(out_key) if self.reward_spec else tensordict.get(out_key, None)
            total = reward if prev is None else prev + reward
            if self.reward_spec:
                self._sums[out_key] = total
            next_tensordict.set(out_key, total)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tdim = _time_dim(tensordict)
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            prefix, reward = _locate(tensordict, in_key)
            done = tensordict.get(_join(prefix, _replace_last(in_key, "done")))
            tensordict.set(_join(prefix, out_key), _segment_cumsum(reward, done, tdim))
        return tensordict

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        rewards = output_spec["full_reward_spec"]
        target = "full_reward_spec" if self.reward_spec else "full_observation_spec"
        dest = output_spec[target]
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if in_key not in rewards.keys(True, True):
                raise KeyError(
                    f"RewardSum: in_key {in_key!r} is not in the reward spec (keys: {list(rewards.keys(True, True))})."
                )
            leaf = rewards[in_key]
            dest[out_key] = Unbounded(shape=leaf.shape, dtype=leaf.dtype, device=leaf.device)
        output_spec[target] = dest
        return output_spec

    def __repr__(self) -> str:
        return f"RewardSum(in_keys={self.in_keys}, out_keys={self.out_keys})"


# ---------------------------------------------------------------------- element-wise reward maps
def _map_reward_specs(transform: Transform, spec: Composite, fn) -> Composite:
    for in_key, out_key in zip(transform.in_keys, transform.out_keys):
        if in_key in spec.keys(True, True):
            spec[out_key] = fn(spec[in_key])
    return spec


class RewardScaling(Transform):
    """Affine reward map: ``reward * scale + loc``, or ``(reward - loc) / scale`` with ``standard_normal``.

    Args:
        loc: offset (number or tensor broadcastable to the reward).
        scale: scale (clamped to >= 1e-6, as in TorchRL).
        in_keys: rewards to map (default ``["reward"]``).
        out_keys: where the results go (default: ``in_keys``).
        standard_normal: standardise instead of scaling.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> RewardScaling(loc=1.0, scale=2.0)(TensorDict(reward=torch.tensor([1.0, -1.0])))["reward"].tolist()
        [3.0, -1.0]
    """

    loc: torch.Tensor  # buffers
    scale: torch.Tensor

    def __init__(
        self,
        loc: float | torch.Tensor,
        scale: float | torch.Tensor,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        standard_normal: bool = False,
    ) -> None:
        super().__init__(in_keys=in_keys or ["reward"], out_keys=out_keys)
        self.register_buffer("loc", torch.as_tensor(loc, dtype=torch.get_default_dtype()))
        self.register_buffer("scale", torch.as_tensor(scale, dtype=torch.get_default_dtype()).clamp_min(1e-6))
        self.standard_normal = bool(standard_normal)

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        if self.standard_normal:
            return (reward - self.loc) / self.scale
        return reward * self.scale + self.loc

    def _spec(self, leaf):
        if isinstance(leaf, Bounded):
            a, b = self._apply_transform(leaf.low), self._apply_transform(leaf.high)
            return Bounded(
                torch.minimum(a, b), torch.maximum(a, b), shape=leaf.shape, dtype=leaf.dtype, device=leaf.device
            )
        return Unbounded(shape=leaf.shape, dtype=leaf.dtype, device=leaf.device)

    def transform_reward_spec(self, reward_spec: Any) -> Any:
        """Maps the reward spec; a leaf spec (TorchRL accepts one) is mapped as the spec of the first in_key."""
        if not isinstance(reward_spec, Composite):
            key = self.in_keys[0]
            return _map_reward_specs(self, Composite({key: reward_spec}), self._spec)[key]
        return _map_reward_specs(self, reward_spec, self._spec)

    def __repr__(self) -> str:
        return f"RewardScaling(loc={self.loc.tolist()}, scale={self.scale.tolist()}, keys={self.in_keys})"


class RewardClipping(Transform):
    """Clamps rewards to ``[clamp_min, clamp_max]`` (either bound may be None).

    Args:
        clamp_min: lower bound.
        clamp_max: upper bound.
        in_keys: rewards to clip (default ``["reward"]``).
        out_keys: where the results go (default: ``in_keys``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> RewardClipping(-1, 1)(TensorDict(reward=torch.tensor([-3.0, 0.5, 2.0])))["reward"].tolist()
        [-1.0, 0.5, 1.0]
    """

    def __init__(
        self,
        clamp_min: float | None = None,
        clamp_max: float | None = None,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        if clamp_min is not None and clamp_max is not None and float(clamp_min) > float(clamp_max):
            raise ValueError(f"RewardClipping: clamp_min ({clamp_min}) must be <= clamp_max ({clamp_max}).")
        super().__init__(in_keys=in_keys or ["reward"], out_keys=out_keys)
        self.clamp_min = None if clamp_min is None else float(clamp_min)
        self.clamp_max = None if clamp_max is None else float(clamp_max)

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        return reward.clamp(self.clamp_min, self.clamp_max)

    def _spec(self, leaf):
        low = -float("inf") if self.clamp_min is None else self.clamp_min
        high = float("inf") if self.clamp_max is None else self.clamp_max
        if isinstance(leaf, Bounded):
            return Bounded(
                leaf.low.clamp(low, high),
                leaf.high.clamp(low, high),
                shape=leaf.shape,
                dtype=leaf.dtype,
                device=leaf.device,
            )
        return Bounded(low, high, shape=leaf.shape, dtype=leaf.dtype, device=leaf.device)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        return _map_reward_specs(self, reward_spec, self._spec)

    def __repr__(self) -> str:
        return f"RewardClipping(clamp_min={self.clamp_min}, clamp_max={self.clamp_max}, keys={self.in_keys})"


class BinarizeReward(Transform):
    """Maps each reward to 1 when it is positive, else 0 (``torch.int8``, as in TorchRL).

    Unlike TorchRL, rewards have no trailing singleton dim, so any shape is accepted.

    Args:
        in_keys: rewards to map (default ``["reward"]``).
        out_keys: where the results go (default: ``in_keys``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> BinarizeReward()(TensorDict(reward=torch.tensor([-1.0, 0.0, 0.3])))["reward"].tolist()
        [0, 0, 1]
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
    ) -> None:
        super().__init__(in_keys=in_keys or ["reward"], out_keys=out_keys)

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        return (reward > 0).to(torch.int8)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        return _map_reward_specs(
            self, reward_spec, lambda leaf: Categorical(2, shape=leaf.shape, dtype=torch.int8, device=leaf.device)
        )


# ---------------------------------------------------------------------- Reward2GoTransform
class Reward2GoTransform(Transform):
    """Discounted reward-to-go of complete trajectories: ``g_t = r_t + gamma * g_{t+1}``, restarting after
    each ``("next", done_key)``.

    It needs whole trajectories ``[*batch, T]`` (time = the dim named ``"time"``, else the last one), so
    it is an inverse transform (replay-buffer ``extend``, collector post-processing) and raises when it
    runs inside an env, as in TorchRL. ``forward`` computes it too when ``out_keys`` differ from
    ``in_keys`` (recomputing from the unchanged rewards is idempotent) and is a no-op otherwise, so a
    buffer that applied ``inv`` on ``extend`` does not apply it twice on ``sample``.

    Args:
        gamma: discount factor.
        in_keys: reward entries (default ``[("next", "reward")]``).
        out_keys: where the reward-to-go goes (default: ``in_keys``).
        done_key: the done entry under ``"next"``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> traj = TensorDict(next=TensorDict(reward=torch.ones(4), done=torch.tensor([False, True, False, True]),
        ...                                   batch_size=[4]), batch_size=[4])
        >>> Reward2GoTransform(gamma=0.5).inv(traj)["next", "reward"].tolist()
        [1.5, 1.0, 1.5, 1.0]
    """

    # no regex metacharacters: callers match it with pytest.raises(match=ENV_ERR), as in TorchRL's tests
    ENV_ERR = (
        "Reward2GoTransform needs complete trajectories: use it on a replay buffer or on collected data "
        "with transform.inv, not inside an env"
    )

    gamma: torch.Tensor  # a buffer

    def __init__(
        self,
        gamma: float | torch.Tensor = 1.0,
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        done_key: NestedKey = "done",
    ) -> None:
        in_keys = _key_list(in_keys) or [("next", "reward")]
        out_keys = _key_list(out_keys) or list(in_keys)
        super().__init__(in_keys=in_keys, out_keys=out_keys, in_keys_inv=in_keys, out_keys_inv=out_keys)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self.register_buffer("gamma", torch.as_tensor(gamma, dtype=torch.get_default_dtype()))
        self.done_key = done_key

    def _check_attachment(self) -> None:
        # refused inside an env, directly or through a Compose (it needs whole trajectories)
        from ..env_base import EnvBase

        if isinstance(self._holding_env(), EnvBase):
            raise ValueError(self.ENV_ERR)

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        raise ValueError(self.ENV_ERR)

    def _compute(self, tensordict: TensorDictBase) -> TensorDictBase:
        done_key = ("next", self.done_key) if isinstance(self.done_key, str) else ("next", *self.done_key)
        done = tensordict.get(done_key, None)
        if done is None:
            raise KeyError(f"Reward2GoTransform: the trajectory has no {done_key!r} entry.")
        rewards = {k: tensordict.get(k, None) for k in self.in_keys}  # read before writing
        missing = [k for k, reward in rewards.items() if reward is None]
        if missing:
            raise KeyError(
                f"Reward2GoTransform: Could not find the reward {missing[0]!r} in the trajectory; it holds "
                f"{sorted(map(str, tensordict.keys(True, True)))}."
            )
        if done.ndim > tensordict.batch_dims and done.shape[-1] == 1:
            tdim = done.ndim - 2  # TorchRL's layout: flags [..., T, 1], time the dim before the singleton
        else:
            tdim = _time_dim(tensordict)
        if not bool(done.any(tdim).all()):
            raise RuntimeError(
                "Reward2GoTransform: some trajectory has no episode end (no done along the time dim); the "
                "reward-to-go of an unfinished episode is unknown. Collect longer batches or whole episodes."
            )
        gamma = self.gamma
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            reward = rewards[in_key].movedim(tdim, 0)
            d = expand_as_right(done.movedim(tdim, 0), reward)
            out = torch.empty_like(reward)
            running = torch.zeros_like(reward[0])
            for t in range(reward.shape[0] - 1, -1, -1):  # T steps of batched tensor ops
                running = reward[t] + gamma * running * (~d[t])
                out[t] = running
            tensordict.set(out_key, out.movedim(0, tdim))
        return tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.parent is not None:
            raise ValueError(self.ENV_ERR)
        return self._compute(tensordict)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if list(self.in_keys) == list(self.out_keys):
            return tensordict
        return self._compute(tensordict)

    def __repr__(self) -> str:
        return f"Reward2GoTransform(gamma={float(self.gamma)}, in_keys={self.in_keys}, out_keys={self.out_keys})"


# ---------------------------------------------------------------------- TargetReturn
class TargetReturn(Transform):
    """Target return for return-conditioned policies (decision transformers).

    Reset writes ``target_return``; each step writes ``("next", "target_return")`` = the previous target
    minus the reward (``mode="reduce"``) or unchanged (``mode="constant"``). ``forward`` on a trajectory
    ``[*batch, T]`` (rewards and dones under ``"next"``) computes the same values for the root and
    ``"next"`` entries, restarting at each episode.

    Args:
        target_return: the return to reach.
        mode: ``"reduce"`` or ``"constant"``.
        in_keys: reward entries (default ``["reward"]``).
        out_keys: target entries (default ``["target_return"]`` next to each reward).
        reset_key: partial-reset mask key (default ``"_reset"``).

    Examples:
        >>> from rl_envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(seed=0), TargetReturn(10.0))
        >>> r = env.rollout(3)
        >>> torch.allclose(r["next", "target_return"], 10.0 - r["next", "reward"].cumsum(0))
        True
    """

    MODES = ("reduce", "constant")

    def __init__(
        self,
        target_return: float,
        mode: str = "reduce",
        in_keys: NestedKey | Sequence[NestedKey] | None = None,
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        reset_key: NestedKey | None = None,
    ) -> None:
        if mode not in self.MODES:
            raise ValueError(f"TargetReturn: mode must be 'reduce' or 'constant', got {mode!r}.")
        in_keys = _key_list(in_keys) or ["reward"]
        out_keys = _key_list(out_keys) or [_replace_last(k, "target_return") for k in in_keys]
        if len(set(out_keys)) != len(out_keys):
            raise ValueError(f"TargetReturn: out_keys must be unique, got {out_keys}.")
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self.target_return = float(target_return)
        self.mode = mode
        self.reset_key = reset_key if reset_key is not None else "_reset"

    def _full(
        self, in_key: NestedKey, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase
    ) -> torch.Tensor:
        parent = self.parent
        # without an env, the shape of the reward seen in the input's "next" (else the batch shape)
        reward = tensordict.get(_join(("next",), in_key), None) if parent is None and tensordict is not None else None
        if parent is not None:
            spec = parent.full_reward_spec[in_key]
            extra = tensordict_reset.batch_size[: tensordict_reset.batch_dims - len(parent.batch_size)]
            shape, dtype = (*extra, *spec.shape), spec.dtype
        elif reward is not None:
            shape, dtype = reward.shape, reward.dtype
        else:
            shape, dtype = tensordict_reset.batch_size, torch.get_default_dtype()
        return torch.full(shape, self.target_return, dtype=dtype, device=tensordict_reset.device)

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        # every sub-env gets the target; EnvBase.reset keeps the old value where "_reset" is False
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            tensordict_reset.set(out_key, self._full(in_key, tensordict, tensordict_reset))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            target = tensordict.get(out_key)
            if self.mode == "reduce":
                target = target - next_tensordict.get(in_key)
            next_tensordict.set(out_key, target)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tdim = _time_dim(tensordict)
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            reward = tensordict.get(_join(("next",), in_key))
            if self.mode == "constant":
                nxt = root = torch.full_like(reward, self.target_return)
            else:
                done = tensordict.get(_join(("next",), _replace_last(in_key, "done")))
                ret = _segment_cumsum(reward, done, tdim)
                nxt, root = self.target_return - ret, self.target_return - (ret - reward)
            tensordict.set(out_key, root)
            tensordict.set(_join(("next",), out_key), nxt)
        return tensordict

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        rewards = output_spec["full_reward_spec"]
        obs = output_spec["full_observation_spec"]
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if in_key not in rewards.keys(True, True):
                raise KeyError(f"TargetReturn: in_key {in_key!r} is not in the reward spec.")
            leaf = rewards[in_key]
            obs[out_key] = Unbounded(shape=leaf.shape, dtype=leaf.dtype, device=leaf.device)
        output_spec["full_observation_spec"] = obs
        return output_spec

    def __repr__(self) -> str:
        return f"TargetReturn(target_return={self.target_return}, mode={self.mode!r}, out_keys={self.out_keys})"
