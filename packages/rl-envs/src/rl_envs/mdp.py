"""step_mdp: the one time shift of the data contract (``td["next"]`` becomes the new root)."""
from __future__ import annotations

from typing import Any, Sequence

import torch
from tdict import TensorDict, TensorDictBase
from tdict._utils import NestedKey

__all__ = ["step_mdp", "MDPShift"]


def _as_key_list(keys: NestedKey | Sequence[NestedKey] | None) -> list:
    if keys is None:
        return []
    if isinstance(keys, (str, tuple)):
        return [keys]
    return list(keys)


class MDPShift:
    """A precomputed :func:`step_mdp` for a fixed set of keys (what an env uses on its hot path).

    Args:
        action_keys / reward_keys / done_keys: the env's keys (a list; a tuple is one nested key).
        keep_other: keep root entries that ``"next"`` does not hold (policy outputs, parameters...).
        exclude_reward / exclude_done / exclude_action: drop those keys from the result.

    Example:
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
        done_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        keep_other: bool = True,
        exclude_reward: bool = True,
        exclude_done: bool = False,
        exclude_action: bool = True,
    ) -> None:
        if done_keys is None:
            done_keys = ["done", "terminated", "truncated"]
        action_keys, reward_keys, done_keys = (_as_key_list(k) for k in (action_keys, reward_keys, done_keys))
        self.keep_other = keep_other
        # keys never carried over from the root: "next" itself, rewards and dones (they come from "next")
        root_drop = ["next", *reward_keys, *done_keys]
        if exclude_action:
            root_drop += action_keys
        next_drop = []
        if exclude_reward:
            next_drop += reward_keys
        if exclude_done:
            next_drop += done_keys
        self.root_drop = tuple(root_drop)
        self.next_drop = tuple(next_drop)
        flat = all(type(k) is str for k in (*root_drop, *next_drop))
        self._root_drop_set = frozenset(root_drop) if flat else None
        self._next_drop_set = frozenset(next_drop) if flat else None

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        nxt = tensordict.get("next")
        if self._root_drop_set is not None and type(tensordict) is TensorDict and type(nxt) is TensorDict:
            return self._flat(tensordict, nxt)
        return self._general(tensordict, nxt)

    def _flat(self, tensordict: TensorDict, nxt: TensorDict) -> TensorDict:
        # the hot path: all keys are strings, both levels are plain TensorDicts
        out: dict[str, Any] = {}
        if self.keep_other:
            drop = self._root_drop_set
            for key, value in tensordict._tensordict.items():
                if key not in drop:
                    # a fresh structure for nested entries, so that writing into the new root never
                    # reaches the step that was just recorded
                    out[key] = value if type(value) is not TensorDict else value.copy()
        drop = self._next_drop_set
        for key, value in nxt._tensordict.items():
            if key not in drop:
                out[key] = value if type(value) is not TensorDict else value.copy()
        return TensorDict._new_unsafe(out, tensordict._batch_size, tensordict._device, tensordict._names)

    def _general(self, tensordict: TensorDictBase, nxt: TensorDictBase) -> TensorDictBase:
        if self.keep_other:
            out = tensordict.exclude(*self.root_drop).clone(False)
        else:
            out = tensordict.empty()
        _merge_into(out, nxt.exclude(*self.next_drop) if self.next_drop else nxt)
        return out


def _merge_into(dest: TensorDictBase, src: TensorDictBase) -> None:
    """Write ``src`` into ``dest`` key by key, creating fresh sub-TensorDicts (never sharing them)."""
    for key, value in src.items():
        if isinstance(value, torch.Tensor) or value._is_non_tensor:
            dest.set(key, value)
            continue
        sub = dest.get(key, None)
        if sub is None or isinstance(sub, torch.Tensor):
            dest.set(key, value.copy())
        else:
            _merge_into(sub, value)


def step_mdp(
    tensordict: TensorDictBase,
    next_tensordict: TensorDictBase | None = None,
    keep_other: bool = True,
    exclude_reward: bool = True,
    exclude_done: bool = False,
    exclude_action: bool = True,
    reward_keys: NestedKey | Sequence[NestedKey] = "reward",
    done_keys: NestedKey | Sequence[NestedKey] | None = None,
    action_keys: NestedKey | Sequence[NestedKey] = "action",
) -> TensorDictBase:
    """Moves ``tensordict["next"]`` to the root: the state at t+1 becomes the input of the next step.

    Args:
        tensordict: a TensorDict that holds a ``"next"`` entry (the output of ``env.step``).
        next_tensordict: if given, the result is written into it in place and returned.
        keep_other: keep root entries that are not in ``"next"`` (e.g. recurrent states).
        exclude_reward: drop the reward keys (default ``True``).
        exclude_done: drop the done keys (default ``False``: the new root says whether it is done).
        exclude_action: drop the action keys (default ``True``).
        reward_keys, done_keys, action_keys: the keys in question (a tuple is one nested key; pass
            several keys as a list). ``done_keys`` defaults to ``["done", "terminated", "truncated"]``.

    Example:
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
    if done_keys is None:
        done_keys = ["done", "terminated", "truncated"]
    shift = MDPShift(
        action_keys, reward_keys, done_keys,
        keep_other=keep_other, exclude_reward=exclude_reward, exclude_done=exclude_done, exclude_action=exclude_action,
    )
    out = shift(tensordict)
    if next_tensordict is not None:
        next_tensordict.update(out)
        return next_tensordict
    return out
