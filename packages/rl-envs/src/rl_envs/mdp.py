"""step_mdp: the one time shift of the data contract (``td["next"]`` becomes the new root)."""

from __future__ import annotations

from typing import Any, Sequence, cast

import torch
from tdict import LazyStackedTensorDict, NestedKey, TensorDict, TensorDictBase, lazy_stack

__all__ = ["step_mdp", "MDPShift"]


def _as_key_list(keys: NestedKey | Sequence[NestedKey] | None) -> list:
    if keys is None:
        return []
    if isinstance(keys, (str, tuple)):
        return [keys]
    return list(keys)


def _path(key: NestedKey) -> tuple:
    return (key,) if type(key) is str else tuple(key)


def _is_collection(value: Any) -> bool:
    """A sub-TensorDict (not a tensor, not non-tensor data): its entries are copied one by one."""
    return not isinstance(value, torch.Tensor) and not value._is_non_tensor


class MDPShift:
    """A precomputed :func:`step_mdp` for a fixed set of keys (what an env uses on its hot path).

    Args:
        action_keys / reward_keys / done_keys: the keys (a list; a tuple is one nested key).
        keep_other: keep root entries that are not excluded (observations are then replaced by
            ``"next"``'s; policy outputs, recurrent states... stay).
        exclude_reward / exclude_done / exclude_action: drop those keys, at the root and in ``"next"``.
            A kept action stays even with ``keep_other=False`` (as in TorchRL).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> shift = MDPShift(action_keys=["action"], reward_keys=["reward"], done_keys=["done"])
        >>> td = TensorDict(obs=torch.zeros(2), action=torch.ones(2),
        ...                 next=TensorDict(obs=torch.ones(2), reward=torch.ones(()), done=torch.tensor(False)))
        >>> sorted(shift(td).keys())
        ['done', 'obs']
    """

    def __init__(
        self,
        action_keys: NestedKey | Sequence[NestedKey] = "action",
        reward_keys: NestedKey | Sequence[NestedKey] = "reward",
        done_keys: NestedKey | Sequence[NestedKey] = "done",
        *,
        keep_other: bool = True,
        exclude_reward: bool = True,
        exclude_done: bool = False,
        exclude_action: bool = True,
    ) -> None:
        action_keys, reward_keys, done_keys = (_as_key_list(k) for k in (action_keys, reward_keys, done_keys))
        # TorchRL's rule: one set of excluded keys for both levels; the root's other entries are
        # copied first, then "next"'s overwrite them (so done flags always come from "next")
        excluded = (reward_keys if exclude_reward else []) + (done_keys if exclude_done else [])
        excluded += action_keys if exclude_action else []
        self.keep_other = keep_other
        self.excluded = frozenset(_path(k) for k in excluded)
        # with keep_other=False the root contributes only the actions, when they are kept
        self.kept_actions = () if keep_other or exclude_action else tuple(_path(k) for k in action_keys)
        flat = keep_other and all(len(k) == 1 for k in self.excluded)
        self._flat_excluded = frozenset(k[0] for k in self.excluded) | {"next"} if flat else None

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        if isinstance(tensordict, LazyStackedTensorDict):
            # members may differ in shape (heterogeneous agents): shift each one, stack lazily again
            return lazy_stack([self(td) for td in tensordict.tensordicts], tensordict.stack_dim)
        nxt = tensordict.get("next")
        if self._flat_excluded is not None and type(tensordict) is TensorDict and type(nxt) is TensorDict:
            return self._flat(tensordict, nxt)
        return self._general(tensordict, nxt)

    def _flat(self, tensordict: TensorDict, nxt: TensorDict) -> TensorDict:
        # the hot path: every excluded key is a root key, both levels are plain TensorDicts
        out: dict[str, Any] = {}
        drop = self._flat_excluded
        assert drop is not None  # the caller checked it
        for source in (tensordict, nxt):
            for key, value in source.items():
                if key in drop:
                    continue
                if type(value) is TensorDict:
                    if value.is_empty():  # no leaf to carry (TorchRL drops such entries)
                        continue
                    # a fresh structure, so that writing into the new root never reaches the recorded step
                    value = _merged(out.get(key), value)
                out[key] = value
        return TensorDict.unchecked(out, tensordict.batch_size, tensordict.device, tensordict.names)

    def _general(self, tensordict: TensorDictBase, nxt: TensorDictBase) -> TensorDictBase:
        out = tensordict.empty()
        if self.keep_other:
            _copy_into(out, tensordict, (), self.excluded, skip="next")
        for path in self.kept_actions:
            _copy_path(out, tensordict, path)
        _copy_into(out, nxt, (), self.excluded)
        return out


def _merged(existing: Any, value: TensorDict) -> TensorDict:
    """``value``'s structure copied (never shared); merged into ``existing`` when that is a copy too."""
    if type(existing) is TensorDict:
        _copy_into(existing, value, (), frozenset())
        return existing
    return value.copy()


def _copy_path(dest: TensorDictBase, src: TensorDictBase, path: tuple) -> None:
    """Copies the entry at ``path`` if there is one, creating the sub-TensorDicts on the way with ``src``'s shapes."""
    chain = []
    for key in path[:-1]:
        src = src.get(key, None)
        if src is None or not _is_collection(src):
            return
        chain.append((key, src))
    value = src.get(path[-1], None)
    if value is None:
        return
    for key, sub_src in chain:
        sub = dest.get(key, None)
        if sub is None:
            sub = sub_src.empty()
            dest.set(key, sub)
        dest = sub
    dest.set(path[-1], value)


def _copy_into(
    dest: TensorDictBase, src: TensorDictBase, prefix: tuple, excluded: frozenset, skip: str | None = None
) -> bool:
    """Copies ``src``'s entries into ``dest`` except the ``excluded`` paths; sub-TensorDicts are new
    structures, and those left without a leaf are not created. Returns whether anything was written.
    Lazy stacks copy member by member (their members may differ in shapes: heterogeneous envs)."""
    wrote = False
    if (
        type(src) is LazyStackedTensorDict
        and type(dest) is LazyStackedTensorDict
        and len(src.tensordicts) == len(dest.tensordicts)
        and src.stack_dim == dest.stack_dim
    ):
        for dest_member, src_member in zip(dest.tensordicts, src.tensordicts):
            wrote = _copy_into(dest_member, src_member, prefix, excluded, skip) or wrote
        return wrote
    for key, value in src.items():
        path = prefix + (key,)
        if key == skip or path in excluded:
            continue
        if not _is_collection(value):
            dest.set(key, value)
            wrote = True
            continue
        sub = dest.get(key, None)
        fresh = sub is None or isinstance(sub, torch.Tensor)
        if fresh:
            sub = value.empty()
        if _copy_into(cast(TensorDictBase, sub), value, path, excluded):
            if fresh:
                dest.set(key, sub)
            wrote = True
    return wrote


def step_mdp(
    tensordict: TensorDictBase,
    next_tensordict: TensorDictBase | None = None,
    keep_other: bool = True,
    exclude_reward: bool = True,
    exclude_done: bool = False,
    exclude_action: bool = True,
    reward_keys: NestedKey | Sequence[NestedKey] = "reward",
    done_keys: NestedKey | Sequence[NestedKey] = "done",
    action_keys: NestedKey | Sequence[NestedKey] = "action",
) -> TensorDictBase:
    """Moves ``tensordict["next"]`` to the root: the state at t+1 becomes the input of the next step.

    TorchRL's semantics: the root's entries (all of them with ``keep_other``, else only the kept
    actions) are copied, then ``"next"``'s entries overwrite them; the excluded keys are dropped at
    both levels, and sub-TensorDicts left without a leaf are dropped. A lazy stack is shifted member
    by member (members may differ in shape). The input is never modified.

    Args:
        tensordict: a TensorDict that holds a ``"next"`` entry (the output of ``env.step``).
        next_tensordict: if given, the result is written into it in place and returned.
        keep_other: keep root entries that are not in ``"next"`` (e.g. recurrent states).
        exclude_reward: drop the reward keys (default ``True``).
        exclude_done: drop the done keys (default ``False``: the new root says whether it is done).
        exclude_action: drop the action keys (default ``True``); a kept action stays even with
            ``keep_other=False``.
        reward_keys, done_keys, action_keys: the keys in question (a tuple is one nested key; pass
            several keys as a list). Defaults: ``"reward"``, ``"done"``, ``"action"`` (as in TorchRL;
            an env's own shift uses all of its done keys).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict(obs=torch.zeros(3), action=torch.ones(3),
        ...                 next=TensorDict(obs=torch.ones(3), reward=torch.ones(()), done=torch.tensor(False)))
        >>> out = step_mdp(td)
        >>> sorted(out.keys()), out["obs"].tolist()
        (['done', 'obs'], [1.0, 1.0, 1.0])
    """
    if "next" not in tensordict.keys():
        raise KeyError(f"step_mdp: the tensordict has no 'next' entry (keys: {sorted(map(str, tensordict.keys()))}).")
    shift = MDPShift(
        action_keys,
        reward_keys,
        done_keys,
        keep_other=keep_other,
        exclude_reward=exclude_reward,
        exclude_done=exclude_done,
        exclude_action=exclude_action,
    )
    out = shift(tensordict)
    if next_tensordict is not None:
        next_tensordict.update(out)
        return next_tensordict
    return out
