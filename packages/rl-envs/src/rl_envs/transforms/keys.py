"""Key transforms: ExcludeTransform, SelectTransform, RenameTransform, CatTensors."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from tdict import TensorDictBase
from tdict import NestedKey
from tdict.specs import Bounded, Composite, Unbounded

from .base import Transform

__all__ = ["ExcludeTransform", "SelectTransform", "RenameTransform", "CatTensors"]


def _norm_key(key: Any) -> NestedKey:
    if isinstance(key, str):
        return key
    if isinstance(key, tuple) and key and all(isinstance(k, str) for k in key):
        return key[0] if len(key) == 1 else key
    raise TypeError(f"keys must be strings or tuples of strings, got {key!r}.")


def _keys_arg(name: str, keys: tuple) -> list:
    if len(keys) == 1 and isinstance(keys[0], list):
        keys = tuple(keys[0])
    try:
        return [_norm_key(k) for k in keys]
    except TypeError as err:
        raise TypeError(f"{name}: {err}") from None


def _under(key: NestedKey, prefixes: set) -> bool:
    """Whether ``key`` is one of ``prefixes`` or nested below one of them."""
    path = (key,) if isinstance(key, str) else key
    return any(path[:i] in prefixes for i in range(1, len(path) + 1))


def _as_path_set(keys: list) -> set:
    return {(k,) if isinstance(k, str) else k for k in keys}


def _remove_leaves(composite: Composite, drop: Any) -> Composite:
    for key in list(composite.keys(True, True)):
        if drop(key):
            del composite[key]
    return composite


class ExcludeTransform(Transform):
    """Removes entries from the env outputs (or, with ``inverse=True``, from the inputs given to the env).

    Keys that are absent are ignored.

    Args:
        *excluded_keys: the entries to remove (a single list is accepted too).
        inverse: remove them from the input of each step (before the inner env sees it) instead.

    Examples:
        >>> from rl_envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), ExcludeTransform("observation"))
        >>> "observation" in env.reset().keys(), "observation" in env.observation_spec.keys()
        (False, False)
    """

    def __init__(self, *excluded_keys: NestedKey, inverse: bool = False) -> None:
        super().__init__()
        self.excluded_keys = _keys_arg("ExcludeTransform", excluded_keys)
        self.inverse = inverse

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self.inverse:
            return next_tensordict
        return next_tensordict.exclude(*self.excluded_keys)

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict_reset)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.inverse:
            return tensordict.exclude(*self.excluded_keys)
        return tensordict

    @property
    def has_inverse(self) -> bool:
        return self.inverse

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        if self.inverse:
            return output_spec
        excluded = _as_path_set(self.excluded_keys)
        for name in ("full_observation_spec", "full_reward_spec", "full_done_spec"):
            output_spec[name] = _remove_leaves(output_spec[name], lambda k: _under(k, excluded))
        return output_spec

    def __repr__(self) -> str:
        return f"ExcludeTransform(keys={self.excluded_keys}, inverse={self.inverse})"


class SelectTransform(Transform):
    """Keeps only the selected entries of the env outputs (plus rewards, done flags and state entries).

    Args:
        *selected_keys: the entries to keep (nested keys keep their sub-tree; a single list is accepted).
        keep_rewards: also keep the reward entries (default ``True``).
        keep_dones: also keep the done entries (default ``True``).

    In an env the reward, done and state keys come from its specs; on a plain TensorDict they are
    ``"reward"`` and ``"done"``/``"terminated"``/``"truncated"``.

    Examples:
        >>> from rl_envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), SelectTransform("th", "thdot"))
        >>> sorted(env.rand_step(env.reset())["next"].keys())
        ['done', 'reward', 'terminated', 'th', 'thdot', 'truncated']
    """

    def __init__(self, *selected_keys: NestedKey, keep_rewards: bool = True, keep_dones: bool = True) -> None:
        super().__init__()
        self.selected_keys = _keys_arg("SelectTransform", selected_keys)
        self.keep_rewards = keep_rewards
        self.keep_dones = keep_dones
        self._env_reward_keys: list | None = None
        self._env_done_keys: list | None = None
        self._env_state_keys: list = []
        self._keep: list | None = None

    def _kept(self) -> list:
        keep = self._keep
        if keep is None:
            rewards = self._env_reward_keys if self._env_reward_keys is not None else ["reward"]
            dones = self._env_done_keys if self._env_done_keys is not None else ["done", "terminated", "truncated"]
            keep = list(self.selected_keys)
            if self.keep_rewards:
                keep += rewards
            if self.keep_dones:
                keep += dones
            keep += self._env_state_keys
            keep = list(dict.fromkeys(keep))
            self._keep = keep
        return keep

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict.select(*self._kept(), strict=False)

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict_reset)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._call(tensordict)

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        selected = _as_path_set(self.selected_keys)
        self._env_reward_keys = list(output_spec["full_reward_spec"].keys(True, True))
        self._env_done_keys = list(output_spec["full_done_spec"].keys(True, True))
        self._keep = None
        output_spec["full_observation_spec"] = _remove_leaves(
            output_spec["full_observation_spec"], lambda k: not _under(k, selected)
        )
        if not self.keep_rewards:
            output_spec["full_reward_spec"] = _remove_leaves(
                output_spec["full_reward_spec"], lambda k: not _under(k, selected)
            )
        if not self.keep_dones:
            output_spec["full_done_spec"] = _remove_leaves(
                output_spec["full_done_spec"], lambda k: not _under(k, selected)
            )
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        self._env_state_keys = list(input_spec["full_state_spec"].keys(True, True))
        self._keep = None
        return input_spec

    def __repr__(self) -> str:
        return f"SelectTransform(keys={self.selected_keys}, keep_rewards={self.keep_rewards}, keep_dones={self.keep_dones})"


class RenameTransform(Transform):
    """Renames entries: ``in_keys -> out_keys`` on the env outputs, ``out_keys_inv -> in_keys_inv`` on its inputs.

    Args:
        in_keys: the entries to rename on the way out.
        out_keys: their new names.
        in_keys_inv: the names the inner env reads (e.g. ``["action"]``).
        out_keys_inv: the names the caller uses for them (default ``in_keys_inv``).
        create_copy: keep the original entries too (a copy under the new name); needed to rename
            entries the env itself reads back, such as its state.

    Examples:
        >>> from rl_envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), RenameTransform(["observation"], ["obs"], ["action"], ["torque"]))
        >>> td = env.reset()
        >>> td["torque"] = env.full_action_spec["torque"].rand()
        >>> sorted(env.step(td)["next"].keys())
        ['done', 'obs', 'reward', 'terminated', 'th', 'thdot', 'truncated']
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey],
        out_keys: NestedKey | Sequence[NestedKey],
        in_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        out_keys_inv: NestedKey | Sequence[NestedKey] | None = None,
        create_copy: bool = False,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self._check_pairs(self.in_keys, self.out_keys, "in")
        self._check_pairs(self.in_keys_inv, self.out_keys_inv, "inverse")
        self._pairs = [(_norm_key(i), _norm_key(o)) for i, o in zip(self.in_keys, self.out_keys)]
        self._pairs_inv = [(_norm_key(i), _norm_key(o)) for i, o in zip(self.in_keys_inv, self.out_keys_inv)]
        clash = {i for i, _ in self._pairs} & {o for _, o in self._pairs}
        clash_inv = {i for i, _ in self._pairs_inv} & {o for _, o in self._pairs_inv}
        if clash or clash_inv:
            raise ValueError(
                f"RenameTransform: keys {sorted(map(str, clash | clash_inv))} are both renamed and a new name; "
                "use two transforms so that the order is clear."
            )
        self.create_copy = create_copy

    def _rename(self, tensordict: TensorDictBase, pairs: list, what: str) -> TensorDictBase:
        copy = self.create_copy
        for src, dst in pairs:
            value = tensordict.get(src, None)
            if value is None:
                if self._missing_tolerance:
                    continue
                raise KeyError(
                    f"RenameTransform{what}: key {src!r} not found; the tensordict has "
                    f"{sorted(map(str, tensordict.keys(True, True)))}."
                )
            tensordict.set(dst, value)
            if not copy:
                tensordict.del_(src)
        return tensordict

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self._rename(next_tensordict, self._pairs, "")

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._rename(tensordict, [(o, i) for i, o in self._pairs_inv], " (inverse)")

    @property
    def has_inverse(self) -> bool:
        return bool(self._pairs_inv)

    def _rename_specs(self, composite: Composite, pairs: list) -> Composite:
        present = set(composite.keys(True))
        for src, dst in pairs:
            if src in present:
                composite[dst] = composite[src].clone()
                if not self.create_copy:
                    del composite[src]
        return composite

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        for name in ("full_observation_spec", "full_reward_spec", "full_done_spec"):
            output_spec[name] = self._rename_specs(output_spec[name], self._pairs)
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        for name in ("full_action_spec", "full_state_spec"):
            input_spec[name] = self._rename_specs(input_spec[name], self._pairs_inv)
        return input_spec

    def __repr__(self) -> str:
        return f"RenameTransform(in_keys={self.in_keys}, out_keys={self.out_keys}, in_keys_inv={self.in_keys_inv})"


class CatTensors(Transform):
    """Concatenates entries along a feature dim into ``out_key``.

    Per-step scalars (entries with no feature dim, e.g. ``step_count``) and entries with fewer dims
    than the others get a trailing dim first when ``unsqueeze_if_needed`` is set.

    Args:
        in_keys: the entries to concatenate (``None``: every observation entry of the env).
        out_key: where the result goes.
        dim: the (negative) feature dim to concatenate along.
        del_keys: remove the ``in_keys`` afterwards.
        unsqueeze_if_needed: add a trailing dim to entries that lack one.
        sort: concatenate in sorted key order (default), else in the given order.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict(b=torch.ones(4, 2), a=torch.zeros(4), batch_size=[4])
        >>> out = CatTensors(["b", "a"], "vec")(td)
        >>> out["vec"][0].tolist(), sorted(out.keys())
        ([0.0, 1.0, 1.0], ['vec'])
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_key: NestedKey = "observation_vector",
        dim: int = -1,
        del_keys: bool = True,
        unsqueeze_if_needed: bool = True,
        sort: bool = True,
    ) -> None:
        if not isinstance(dim, int) or dim >= 0:
            raise ValueError(f"CatTensors: dim must be a negative (feature) dim, got {dim!r}.")
        self._auto = in_keys is None
        keys = (
            []
            if in_keys is None
            else [_norm_key(k) for k in ([in_keys] if isinstance(in_keys, (str, tuple)) else in_keys)]
        )
        if sort:
            keys = sorted(keys, key=lambda k: (k,) if isinstance(k, str) else k)
        super().__init__(keys, [_norm_key(out_key)])
        self.out_key = _norm_key(out_key)
        self.dim = dim
        self.del_keys = del_keys
        self.unsqueeze_if_needed = unsqueeze_if_needed
        self.sort = sort
        self._drop = [k for k in keys if k != self.out_key]

    def _align(self, values: list, batch_dims: int) -> list:
        if not self.unsqueeze_if_needed:
            return values
        target = max(max(v.ndim for v in values), batch_dims + 1)
        return [v if v.ndim == target else v.unsqueeze(-1) for v in values]

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        keys = self.in_keys
        if not keys:
            raise RuntimeError("CatTensors: in_keys are unknown; give them, or use the transform inside an env.")
        values = [next_tensordict.get(k, None) for k in keys]
        if any(v is None for v in values):
            missing = [k for k, v in zip(keys, values) if v is None]
            if self._missing_tolerance and len(missing) == len(keys):
                return next_tensordict
            raise KeyError(
                f"CatTensors: keys {missing} not found; the tensordict has "
                f"{sorted(map(str, next_tensordict.keys(True, True)))}."
            )
        values = self._align(values, next_tensordict.batch_dims)
        try:
            out = torch.cat(values, self.dim)
        except RuntimeError as err:
            shapes = {str(k): list(v.shape) for k, v in zip(keys, values)}
            raise ValueError(f"CatTensors: cannot concatenate {shapes} along dim {self.dim}: {err}") from None
        if self.del_keys:
            next_tensordict = next_tensordict.exclude(*self._drop)
        next_tensordict.set(self.out_key, out)
        return next_tensordict

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        if self._auto:
            keys = [k for k in observation_spec.keys(True, True) if k != self.out_key]
            if self.sort:
                keys = sorted(keys, key=lambda k: (k,) if isinstance(k, str) else k)
            self.in_keys = keys
            self._drop = list(keys)
        present = set(observation_spec.keys(True, True))
        missing = [k for k in self.in_keys if k not in present]
        if missing:
            raise KeyError(
                f"CatTensors: keys {missing} are not observation entries; the observation spec has {sorted(map(str, present))}."
            )
        specs = [observation_spec[k] for k in self.in_keys]
        nb = len(observation_spec.shape)
        zeros = self._align([s.zero() for s in specs], nb)
        shape = torch.cat(zeros, self.dim).shape
        if all(isinstance(s, Bounded) for s in specs):
            lows = self._align([s.low for s in specs], nb)
            highs = self._align([s.high for s in specs], nb)
            dtype = torch.cat(zeros, self.dim).dtype
            out = Bounded(
                torch.cat(lows, self.dim), torch.cat(highs, self.dim), shape=shape, device=specs[0].device, dtype=dtype
            )
        else:
            out = Unbounded(shape=shape, device=specs[0].device, dtype=torch.cat(zeros, self.dim).dtype)
        if self.del_keys:
            for k in self._drop:
                del observation_spec[k]
        observation_spec[self.out_key] = out
        return observation_spec

    def __repr__(self) -> str:
        return f"CatTensors(in_keys={self.in_keys}, out_key={self.out_key!r}, dim={self.dim})"
