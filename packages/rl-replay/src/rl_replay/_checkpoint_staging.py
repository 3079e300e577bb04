"""Staging a checkpoint: every saved state is checked against the live part it is for, and turned
into a function that applies it. Loading runs all the checks first and applies only when every one
passed, so a corrupt or mismatched checkpoint raises :class:`CheckpointError` with the buffer unchanged.

States of samplers, writers, transforms and storages with their own hooks are checked by loading
them into a throwaway copy (:func:`~rl_replay._part.check_loadable`): whatever their
``load_state_dict`` would raise, it raises there. Tensor and list storages are checked entry by entry
(their rows are too large to copy).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from tdict import is_tensor_collection
from torch.utils._pytree import treespec_loads

from ._checkpoint_io import CheckpointError
from ._part import check_loadable

__all__ = ["guarded", "stage_buffer_state", "stage_part", "structure"]

Apply = Callable[[], None]


def guarded(where: str, check: Callable[..., Any], *args: Any) -> Any:
    """Runs a check; any error other than CheckpointError means the saved state is corrupt."""
    try:
        return check(*args)
    except CheckpointError:
        raise
    except Exception as err:  # noqa: BLE001 - a state read from disk may break a check in any way
        raise CheckpointError(
            f"{where}: the saved state is corrupt or does not fit ({type(err).__name__}: {err})."
        ) from err


def _entry(state: Any, key: str, where: str) -> Any:
    if not isinstance(state, dict) or key not in state:
        raise CheckpointError(f"{where}: the entry {key!r} is missing (found {_keys(state)}).")
    return state[key]


def _keys(state: Any) -> str:
    return str(sorted(map(str, state))) if isinstance(state, dict) else f"a {type(state).__name__}"


def _count(state: Any, key: str, where: str) -> int:
    value = _entry(state, key, where)
    if type(value) is not int or value < 0:
        raise CheckpointError(f"{where}: the entry {key!r} must be an int >= 0, found {value!r}.")
    return value


def _data(value: Any, key: str, where: str) -> Any:
    if not (isinstance(value, torch.Tensor) or is_tensor_collection(value)):
        raise CheckpointError(
            f"{where}: the entry {key!r} must be a tensor or a TensorDict, found a {type(value).__name__}."
        )
    return value


def _leading(data: Any) -> torch.Size:
    return data.batch_size if is_tensor_collection(data) else data.shape


def structure(data: Any) -> Any:
    """Keys, dtypes and per-row shapes of a tensor or TensorDict (to compare layouts)."""
    return sorted((str(k), str(v.dtype), tuple(v.shape[1:])) for k, v in _leaves(data).items())


def _leaves(data: Any) -> dict:
    if is_tensor_collection(data):
        return {k: data.get(k) for k in data.keys(include_nested=True, leaves_only=True)}
    return {(): data}


# ============================================================================================ #
# parts
# ============================================================================================ #
def stage_part(part: Any, role: str, state: Any, where: str) -> Apply:
    """Checks ``state`` (what the checkpoint holds for ``part``) and returns the function that applies it."""
    if role == "storage":
        return guarded(where, _stage_storage, part, state, where)
    return guarded(where, _stage_component, part, state, where)


def _stage_component(part: Any, state: Any, where: str) -> Apply:
    kind = _entry(state, "kind", where)
    data = _entry(state, "data", where)
    if kind == "hook":
        if getattr(part, "_load_checkpoint_state", None) is None:
            raise CheckpointError(f"{where}: written through a checkpoint hook that {type(part).__name__} lacks.")
        check_loadable(part, data, "_load_checkpoint_state")
        return lambda: part._load_checkpoint_state(data)
    if kind == "state_dict":
        check_loadable(part, data)
        return lambda: part.load_state_dict(data)
    raise CheckpointError(f"{where}: unknown state kind {kind!r}.")


def _stage_storage(storage: Any, state: Any, where: str) -> Apply:
    from .storages.list import ListStorage
    from .storages.tensor import TensorStorage

    kind = _entry(state, "kind", where)
    max_size = _entry(state, "max_size", where)
    if max_size != storage.max_size:
        raise CheckpointError(
            f"{where}: the checkpoint's storage has max_size {max_size}, this buffer's {type(storage).__name__} "
            f"has max_size {storage.max_size}."
        )
    if kind == "hook":
        if getattr(storage, "_load_checkpoint_state", None) is None:
            raise CheckpointError(
                f"{where}: written by a storage with its own checkpoint hook; {type(storage).__name__} has none."
            )
        data = _entry(state, "data", where)
        check_loadable(storage, data, "_load_checkpoint_state")
        return lambda: storage._load_checkpoint_state(data)
    if kind == "state_dict":
        data = _entry(state, "data", where)
        check_loadable(storage, data)
        return lambda: storage.load_state_dict(data)
    hooks = getattr(storage, "_load_hooks", None)
    if hooks and kind in ("tensor", "items") and isinstance(state, dict) and state.get("items") is not None:
        items = state["items"]
        for hook in hooks:
            items = hook(items)
        state = {**state, "items": items}
    if kind in ("tensor", "items"):
        if not isinstance(storage, TensorStorage):
            raise CheckpointError(f"{where}: holds a tensor storage, this buffer has a {type(storage).__name__}.")
        ndim = _entry(state, "ndim", where)
        if ndim != storage.ndim:
            raise CheckpointError(f"{where}: the checkpoint's storage has ndim={ndim}, this one ndim={storage.ndim}.")
        return (_stage_tensor if kind == "tensor" else _stage_items)(storage, state, where)
    if kind == "list":
        if not isinstance(storage, ListStorage):
            raise CheckpointError(f"{where}: holds a ListStorage, this buffer has a {type(storage).__name__}.")
        return _stage_list(storage, state, where)
    raise CheckpointError(f"{where}: unknown storage kind {kind!r}.")


def _rows_of(storage: Any, items: Any, rows: int, where: str) -> torch.Size:
    """Checks that ``items`` hold ``rows`` rows that fit ``storage``; returns the item dims of a row."""
    leading = _leading(items)
    if len(leading) < storage.ndim or leading[0] != rows:
        raise CheckpointError(
            f"{where}: items of leading shape {list(leading)} saved for {rows} rows of {storage.ndim} dims."
        )
    item_dims = leading[1 : storage.ndim]
    per_row = max(1, math.prod(item_dims))
    if storage.max_size % per_row or rows > storage.max_size // per_row:
        raise CheckpointError(
            f"{where}: {rows} rows of {list(item_dims)} items do not fit a capacity of {storage.max_size}."
        )
    return item_dims


def _stage_tensor(storage: Any, state: Any, where: str) -> Apply:
    rows = _count(state, "rows", where)
    items = _entry(state, "items", where)
    if items is None:
        if rows:
            raise CheckpointError(f"{where}: no items saved for a recorded length of {rows} rows.")
        return lambda: storage._len_t.fill_(0)
    items = _data(items, "items", where)
    item_dims = _rows_of(storage, items, rows, where)
    tree = state.get("tree") if isinstance(state, dict) else None
    try:
        spec = None if tree is None else treespec_loads(tree)
    except (TypeError, ValueError, KeyError, NotImplementedError) as err:
        raise CheckpointError(f"{where}: the saved pytree structure cannot be read ({err}).") from err
    if storage._storage is not None and storage._tree_spec != spec:
        raise CheckpointError(
            f"{where}: the checkpoint holds {'pytrees' if spec is not None else 'no pytrees'}, the storage "
            f"{'pytrees of another structure' if storage._tree_spec is not None and spec is not None else 'not'}."
        )
    current = storage._storage
    if current is not None:
        if is_tensor_collection(current) != is_tensor_collection(items):
            raise CheckpointError(
                f"{where}: the checkpoint holds {type(items).__name__} items, the storage {type(current).__name__}."
            )
        have, want = _leaves(current), _leaves(items)
        if set(have) != set(want):
            raise CheckpointError(
                f"{where}: the checkpoint's keys {sorted(map(str, want))} differ from the storage's {sorted(map(str, have))}."
            )
        for key, value in want.items():
            slot = have[key]
            if slot.dtype != value.dtype or slot.shape[1:] != value.shape[1:]:
                raise CheckpointError(
                    f"{where}: entry {key!r} is {value.dtype} {list(value.shape[1:])} per row in the checkpoint, "
                    f"{slot.dtype} {list(slot.shape[1:])} in the storage."
                )
        if _leading(current)[1 : storage.ndim] != item_dims:
            raise CheckpointError(
                f"{where}: rows of {list(item_dims)} items in the checkpoint, {list(_leading(current)[1 : storage.ndim])} in the storage."
            )

    def apply() -> None:
        if storage._storage is None:
            storage._allocate(items)
        storage._tree_spec = spec
        if rows:
            target = storage._storage
            assert target is not None  # made by _allocate above
            if is_tensor_collection(target):
                target[:rows] = items
            else:
                target[:rows].copy_(items)
        storage._len_t.fill_(rows)

    return apply


def _stage_items(storage: Any, state: Any, where: str) -> Apply:
    # a storage whose layout differs from what get() returns: the items are written back with set()
    rows = _count(state, "rows", where)
    items = _data(_entry(state, "items", where), "items", where)
    _rows_of(storage, items, rows, where)
    if storage._storage is not None and len(storage):
        have, want = structure(storage.get(torch.arange(1))), structure(items[:1])
        if have != want:
            raise CheckpointError(f"{where}: the checkpoint's items ({want}) do not match the storage's ({have}).")

    def apply() -> None:
        storage._empty()
        storage.set(torch.arange(rows), items)
        storage._len_t.fill_(rows)

    return apply


def _stage_list(storage: Any, state: Any, where: str) -> Apply:
    n = _count(state, "len", where)
    saved = _entry(state, "items", where)
    stacked = _entry(saved, "stacked", where)
    data = _entry(saved, "data", where)
    if stacked == "tensor" and isinstance(data, torch.Tensor) and data.ndim:
        items = [data[i] for i in range(data.shape[0])]
    # (pyright keeps the branch above's Tensor narrowing of data; here it is a tensor collection)
    elif stacked == "tensordict" and is_tensor_collection(data) and data.batch_dims:  # pyright: ignore[reportAttributeAccessIssue]
        items = list(data.unbind(0))
    elif stacked is None and isinstance(data, list):
        items = data
    else:
        raise CheckpointError(f"{where}: items stacked as {stacked!r} cannot be a {type(data).__name__}.")
    for hook in getattr(storage, "_load_hooks", ()):
        items = hook(items)
    if not isinstance(items, list):
        raise CheckpointError(f"{where}: ListStorage load hooks must return a list, got {type(items).__name__}.")
    if len(items) != n or n > storage.max_size:
        raise CheckpointError(
            f"{where}: {len(items)} items for a recorded length of {n} (capacity {storage.max_size})."
        )

    def apply() -> None:
        storage._items = list(items)
        storage._len_t.fill_(n)

    return apply


# ============================================================================================ #
# the buffer's own state: generator, transforms, batch size, item format
# ============================================================================================ #
def stage_buffer_state(buffer: Any, extra: Any, head: dict, where: str) -> Apply:
    """Checks the buffer-level state (``buffer/`` and the checkpoint's head) and returns its applier."""
    return guarded(where, _stage_buffer_state, buffer, extra, head, where)


def _stage_buffer_state(buffer: Any, extra: Any, head: dict, where: str) -> Apply:
    rng = _entry(extra, "rng", where)
    if rng is not None:
        state, device = _entry(rng, "state", where), _entry(rng, "device", where)
        if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or not isinstance(device, str):
            raise CheckpointError(
                f"{where}: the generator state must be a uint8 tensor and a device name, found {type(state).__name__}, {device!r}."
            )
        torch.Generator(device=device).set_state(state)  # raises on a state of another size or device
    transforms = _entry(extra, "transforms", where)
    own = getattr(buffer, "_transforms", [])
    if not isinstance(transforms, list) or (len(transforms) != len(own) and any(t is not None for t in transforms)):
        raise CheckpointError(
            f"{where}: {_len(transforms)} transform states saved, the buffer has {len(own)} transforms."
        )
    loads = []
    for t, sd in zip(own, transforms):
        if sd is not None:
            check_loadable(t, sd)
            loads.append((t, sd))
    dict_items = extra.get("dict_items", False)  # absent from checkpoints written before it existed
    batch_size = head.get("batch_size")
    if type(dict_items) is not bool or not (batch_size is None or (type(batch_size) is int and batch_size >= 1)):
        raise CheckpointError(f"{where}: bad settings (dict_items={dict_items!r}, batch_size={batch_size!r}).")

    def apply() -> None:
        for t, sd in loads:
            t.load_state_dict(sd)
        if rng is not None:
            generator = buffer._rng
            if generator is None:  # as in TorchRL: a buffer without a generator gets the saved one
                generator = torch.Generator(device=rng["device"])
                buffer.set_rng(generator)
            generator.set_state(rng["state"])
        if batch_size is not None:
            buffer._batch_size = batch_size
        buffer._dict_items = dict_items

    return apply


def _len(value: Any) -> Any:
    return len(value) if isinstance(value, list) else f"a {type(value).__name__} of"
