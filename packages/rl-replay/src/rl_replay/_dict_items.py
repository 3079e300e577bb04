"""Items given as dicts (a dataset of samples): checked against each other and stacked into one batch.

``[{"x": tensor, "y": 1}, ...]`` becomes ``{"x": stacked tensor, "y": tensor([...])}``: tensors are
stacked (every item's must have the same shape, dtype and device), Python numbers become one tensor,
other objects (strings...) a list where the caller allows them. Nested dicts are stacked leaf by leaf.
Errors name the item's index and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

import torch
from tdict import TensorDict

__all__ = ["as_tensordict", "check_dicts", "converts_to_tensordict", "is_dict_list", "stack_dicts"]


def converts_to_tensordict(data: Any) -> bool:
    """True for a dict whose keys are strings at every level and whose leaves are not lists or tuples."""
    if not isinstance(data, Mapping):
        return False
    for key, value in data.items():
        if not isinstance(key, str) or isinstance(value, (list, tuple)):
            return False
        if isinstance(value, Mapping) and not converts_to_tensordict(value):
            return False
    return True


def is_dict_list(data: Any) -> TypeGuard[list]:
    """True for a non-empty list whose first item is a dict (what :func:`stack_dicts` takes)."""
    return type(data) is list and bool(data) and isinstance(data[0], Mapping)


def _flatten(item: Any, owner: str, i: int, prefix: tuple = ()) -> dict:
    if not isinstance(item, Mapping):
        raise TypeError(f"{owner}: item {i} is a {type(item).__name__}, expected a dict like item 0.")
    out = {}
    for key, value in item.items():
        path = (*prefix, key)
        if isinstance(value, Mapping):
            out.update(_flatten(value, owner, i, path))
        else:
            out[path] = value
    return out


def _name(path: tuple) -> str:
    return repr(path[0] if len(path) == 1 else path)


def _kind(value: Any) -> Any:
    """What must agree between items for a key to stack."""
    if isinstance(value, torch.Tensor):
        return (value.dtype, value.shape, value.device)
    if isinstance(value, bool):
        return bool
    if isinstance(value, (int, float)):
        return float  # ints and floats stack together (as torch.tensor promotes them)
    return object


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        where = "" if value.device.type == "cpu" else f" on {value.device}"
        what = f"{str(value.dtype).removeprefix('torch.')} tensor of shape {list(value.shape)}{where}"
    else:
        what = type(value).__name__
    return f"{'an' if what[0] in 'aeiou' else 'a'} {what}"


def _columns(items: list, owner: str, objects: bool) -> dict:
    """``{key path: [value of each item]}``, raising at the first item that does not match item 0."""
    first = _flatten(items[0], owner, 0)
    kinds = {}
    for path, value in first.items():
        kind = kinds[path] = _kind(value)
        if kind is object and not objects:
            raise TypeError(
                f"{owner}: key {_name(path)} of item 0 is {_describe(value)}; a tensor storage holds tensors and "
                f"numbers (store other objects in a ListStorage)."
            )
    columns = {path: [value] for path, value in first.items()}
    for i in range(1, len(items)):
        leaves = _flatten(items[i], owner, i)
        if leaves.keys() != first.keys():
            missing = [_name(p) for p in first if p not in leaves]
            extra = [_name(p) for p in leaves if p not in first]
            raise KeyError(
                f"{owner}: item {i} has other keys than item 0: missing [{', '.join(missing)}], "
                f"unexpected [{', '.join(extra)}]."
            )
        for path, value in leaves.items():
            if _kind(value) != kinds[path]:
                raise ValueError(
                    f"{owner}: key {_name(path)} of item {i} is {_describe(value)}, expected "
                    f"{_describe(columns[path][0])} as in item 0."
                )
            columns[path].append(value)
    return columns


def check_dicts(items: list, owner: str) -> None:
    """Raises (naming the item and the key) unless ``items`` stack with ``stack_dicts(objects=True)``."""
    _columns(items, owner, objects=True)


def stack_dicts(items: list, owner: str, *, objects: bool = False) -> dict:
    """One nested dict of batched leaves from a list of dicts with the same keys.

    Args:
        items: the dicts, one per item.
        owner: who is asking, for the error messages.
        objects: keep leaves that are neither tensors nor numbers as lists (else ``TypeError``).

    Examples:
        >>> out = stack_dicts([{"x": torch.zeros(2), "y": 1}, {"x": torch.ones(2), "y": 2}], "demo")
        >>> out["x"].shape, out["y"].tolist()
        (torch.Size([2, 2]), [1, 2])
    """
    out: dict = {}
    for path, values in _columns(items, owner, objects).items():
        first = values[0]
        if isinstance(first, torch.Tensor):
            stacked = torch.stack(values)
        elif isinstance(first, (bool, int, float)):
            stacked = torch.tensor(values)
        else:
            stacked = list(values)
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = stacked
    return out


def as_tensordict(data: Any, owner: str, *, one: bool) -> TensorDict | None:
    """A list of dicts (one per item), or a dict, as a TensorDict; ``None`` for anything else.

    A dict is one item when ``one`` (``add``), else a batch: tensors with a leading item dim (``extend``).
    """
    if type(data) is dict:
        if one:
            return TensorDict(stack_dicts([data], owner), batch_size=[1])[0]
        leaf: Any = data
        while isinstance(leaf, Mapping) and leaf:
            leaf = next(iter(leaf.values()))
        if not isinstance(leaf, torch.Tensor) or leaf.ndim == 0:
            raise ValueError(
                f"{owner}: a dict given to extend is a batch (tensors with a leading item dim), got {_describe(leaf)} "
                f"as its first leaf; pass a list of dicts for one dict per item."
            )
        return TensorDict(data, batch_size=leaf.shape[:1])
    if is_dict_list(data):
        return TensorDict(stack_dicts(data, owner), batch_size=[len(data)])
    return None
