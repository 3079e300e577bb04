"""``update`` and ``update_``: every entry of the source is checked before the first write.

The source (a dict, whose tuple keys are nested keys, or a collection) is walked against the
destination once to build a plan: the writes, each already validated (converted, batch size,
lock, shape). Only then is the plan carried out, so a bad entry anywhere leaves the destination
as it was. Sub-collections the source creates are built detached while planning (nothing can
see them until the plan attaches them); a lazy stack hands each member its slice of the value.

Semantics (tensordict 0.14): a sub-collection of the source is merged into an existing
sub-collection of the destination (a tensor class included), anything else replaces the entry;
``("k",)`` is the key ``"k"``; ``keys_to_update`` keeps the keys equal to, inside or on the way
to one of its keys.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import torch

from ..errors import LOCKED
from .entries import _is_lazy_stack, _non_tensor
from .indexing import broadcasts_to
from .rebatch import batch_sizes_clash, check_rebatch, rebatch, rebatches
from .utils import _MISSING, _key_to_tuple, is_tensor_collection, unravel_key

_SKIP = object()  # a key that keys_to_update leaves out
_REBATCH = object()  # a planned write that gives a sub-collection the source's batch size
_ALL = None  # keys_to_update keeps everything below this key


class _Plan:
    """Validated writes, carried out by :meth:`run`; ``pending`` answers what a planned write will
    have put under a key, so that later entries of the same source see it."""

    __slots__ = ("writes", "pending", "update_batch_size")

    def __init__(self, update_batch_size: bool = False) -> None:
        self.writes: list = []
        self.pending: dict = {}
        self.update_batch_size = update_batch_size

    def entry(self, content: Any, key: str) -> Any:
        planned = self.pending.get((id(content), key), _MISSING)
        return content._get_str(key, None) if planned is _MISSING else planned

    def set(self, content: Any, key: str, value: Any) -> None:
        self.pending[(id(content), key)] = value  # ``content`` stays alive in ``writes``
        self.writes.append((content, key, value))

    def copy(self, dest: torch.Tensor, value: torch.Tensor) -> None:
        self.writes.append((dest, None, value))

    def run(self) -> None:
        for target, key, value in self.writes:
            if key is None:
                target.copy_(value)
            elif key is _REBATCH:
                rebatch(target, *value)
            else:
                target._set_str(key, value, inplace=False, validated=True, ignore_lock=True)


def with_entries(source: Any, entries: dict) -> Any:
    """The source of ``update(source, **entries)``: ``source`` with ``entries`` on top (the keywords win);
    ``None`` when there is neither."""
    if not entries:
        return source
    if source is None:
        return entries
    base = source.items() if getattr(type(source), "_is_tensor_collection", False) else source
    return {**dict(base), **entries}


def update(
    td: Any,
    source: Any,
    *,
    clone: bool,
    inplace: bool,
    keys_to_update: Sequence | None,
    ignore_lock: bool,
    update_batch_size: bool = False,
) -> Any:
    """``td.update(source, ...)``: merge ``source`` into ``td`` (see the module docstring)."""
    if source is td:
        return td
    _check_source(source, "update")
    if not isinstance(source, dict) and batch_sizes_clash(td, source):
        check_rebatch(td, source, update_batch_size=update_batch_size, inplace=inplace, keys_to_update=keys_to_update)
        rebatch(td, source, clone)
        return td
    plan = _Plan(update_batch_size)
    _plan_sets(td, source, plan, clone, inplace, _allowed(keys_to_update), ignore_lock, ())
    plan.run()
    return td


def update_(td: Any, source: Any, *, keys_to_update: Sequence | None) -> Any:
    """``td.update_(source)``: copy every tensor of ``source`` into the existing entry of ``td``
    in place (a missing key, or a shape that does not broadcast to the entry's, raises first)."""
    _check_source(source, "update_")
    plan = _Plan()
    _plan_copies(td, source, plan, _allowed(keys_to_update), (), td)
    with torch.no_grad():
        plan.run()
    return td


# --------------------------------------------------------------------------------------------- #
# planning
# --------------------------------------------------------------------------------------------- #


def _plan_sets(
    dest: Any, source: Any, plan: _Plan, clone: bool, inplace: bool, allowed: Any, ignore_lock: bool, path: tuple
) -> None:
    """Plan merging every entry of ``source`` into ``dest``."""
    members = _member_parts(dest, source, path)
    if members is not None:
        for member, part in members:
            _plan_sets(member, part, plan, clone, inplace, allowed, ignore_lock, path)
        return
    for key, value in _entries(source):
        parts = _key_to_tuple(key)
        below = _narrow(allowed, parts)
        if below is not _SKIP:
            _plan_set(dest, parts, value, plan, clone, inplace, below, ignore_lock, path)


def _plan_set(
    dest: Any,
    parts: tuple,
    value: Any,
    plan: _Plan,
    clone: bool,
    inplace: bool,
    allowed: Any,
    ignore_lock: bool,
    path: tuple,
) -> None:
    """Plan writing ``value`` at ``parts`` (a nested key) below ``dest`` (at ``path`` from the root)."""
    if _is_lazy_stack(dest):  # each member takes its slice
        for member, part in zip(dest.tensordicts, dest._split_value(unravel_key(path + parts), value)):
            _plan_set(member, parts, part, plan, clone, inplace, allowed, ignore_lock, path)
        return
    content = _content(dest, parts[0])
    head = parts[0]
    full = path + (head,)
    current = plan.entry(content, head)
    if len(parts) > 1:  # a nested key: walk (or create) the sub-collection on the way
        if current is None:
            _check_unlocked(content, full, ignore_lock)
            current = content.empty()
            plan.set(content, head, current)
        elif _is_leaf(current):
            raise KeyError(
                f"update: cannot set {unravel_key(path + parts)!r}: {unravel_key(full)!r} holds a leaf ({type(current).__name__}), not a collection."
            )
        _plan_set(current, parts[1:], value, plan, clone, inplace, allowed, ignore_lock, full)
        return
    if (
        plan.update_batch_size
        and current is not None
        and is_tensor_collection(value)
        and is_tensor_collection(current)
        and batch_sizes_clash(current, value)
    ):  # update_batch_size=True: the sub-collection takes the value's batch size
        if rebatches(current, value):  # a sub-TensorDict keeps its identity
            check_rebatch(current, value, update_batch_size=True, inplace=inplace, keys_to_update=None)
            plan.writes.append((current, _REBATCH, (value, clone)))
            return
        _check_unlocked(content, full, ignore_lock)  # anything else is replaced
        plan.set(content, head, content._validate(unravel_key(full), _cloned(value) if clone else value))
        return
    if _is_subtree(value) and current is not None and not _is_leaf(current):  # merge into it
        _plan_sets(current, value, plan, clone, inplace, allowed, ignore_lock, full)
        return
    if clone:
        value = _cloned(value)
    if inplace and isinstance(current, torch.Tensor):
        value = content._to_leaf(value, unravel_key(full))
        if value.shape != current.shape:
            raise RuntimeError(
                f"update(inplace=True): key {unravel_key(full)!r}: value of shape {list(value.shape)}, expected the entry's shape {list(current.shape)}."
            )
        plan.copy(current, value)
        return
    _check_unlocked(content, full, ignore_lock)
    plan.set(content, head, content._validate(unravel_key(full), value))


def _plan_copies(dest: Any, source: Any, plan: _Plan, allowed: Any, path: tuple, root: Any) -> None:
    """Plan copying every tensor of ``source`` into ``dest``."""
    members = _member_parts(dest, source, path)
    if members is not None:
        for member, part in members:
            _plan_copies(member, part, plan, allowed, path, root)
        return
    for key, value in _entries(source):
        parts = _key_to_tuple(key)
        below = _narrow(allowed, parts)
        if below is not _SKIP:
            _plan_copy(dest, parts, value, plan, below, path, root)


def _plan_copy(dest: Any, parts: tuple, value: Any, plan: _Plan, allowed: Any, path: tuple, root: Any) -> None:
    """Plan copying ``value`` into the existing entry at ``parts`` below ``dest``."""
    if _non_tensor(value):  # as tensordict: update_ copies tensors only
        return
    if _is_lazy_stack(dest):
        for member, part in zip(dest.tensordicts, dest._split_value(unravel_key(path + parts), value)):
            _plan_copy(member, parts, part, plan, allowed, path, root)
        return
    head = parts[0]
    full = path + (head,)
    current = _content(dest, head)._get_str(head, None)
    if current is None:  # update_ writes in place: the key must exist
        keys = list(root.keys(include_nested=True))
        raise KeyError(
            f"update_: key {unravel_key(full)!r} was not found in {type(root).__name__} with keys {keys} "
            "(update_ writes into existing entries; update() adds keys)."
        )
    if len(parts) > 1 or _is_subtree(value):
        if _is_leaf(current):
            what = f"sub-key {unravel_key(parts[1:])!r}" if len(parts) > 1 else "a collection"
            raise KeyError(
                f"update_: key {unravel_key(full)!r} holds a leaf ({type(current).__name__}), cannot take {what}."
            )
        if len(parts) > 1:
            _plan_copy(current, parts[1:], value, plan, allowed, full, root)
        else:
            _plan_copies(current, value, plan, allowed, full, root)
        return
    if not isinstance(current, torch.Tensor):
        if _non_tensor(current):
            return
        raise TypeError(
            f"update_: key {unravel_key(full)!r} holds a {type(current).__name__}, the value is a {type(value).__name__}."
        )
    value = root._to_leaf(value, unravel_key(full))
    if not broadcasts_to(value.shape, current.shape):
        raise RuntimeError(
            f"update_: key {unravel_key(full)!r}: value of shape {list(value.shape)} does not broadcast to the entry's shape {list(current.shape)}."
        )
    plan.copy(current, value)


# --------------------------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------------------------- #


def _member_parts(dest: Any, source: Any, path: tuple) -> list | None:
    """``(member, its part of source)`` pairs when ``dest`` is a lazy stack and ``source`` a
    collection (a lazy stack along the same dim hands over its members: nothing is stacked)."""
    if not _is_lazy_stack(dest) or not _is_subtree(source) or isinstance(source, dict):
        return None
    parts = dest._split_collection(source)
    if parts is None:
        raise RuntimeError(
            f"update: {unravel_key(path) if path else 'the source'!r} has batch size {list(source.batch_size)}, "
            f"which does not start with the lazy stack's {list(dest.batch_size)}."
        )
    return list(zip(dest.tensordicts, parts))


def _check_source(source: Any, what: str) -> None:
    if not isinstance(source, dict) and not is_tensor_collection(source):
        raise TypeError(f"{what}: expected a dict or a tensor collection, got {type(source).__name__}.")


def _entries(source: Any) -> Iterable:
    return source.items() if isinstance(source, dict) else source._items_raw()


def _allowed(keys_to_update: Sequence | None) -> Any:
    return _ALL if keys_to_update is None else [_key_to_tuple(k) for k in keys_to_update]


def _narrow(allowed: Any, parts: tuple) -> Any:
    """``keys_to_update`` seen from below ``parts``: ``_ALL``, the sub-keys still wanted, or ``_SKIP``."""
    if allowed is _ALL:
        return _ALL
    below = []
    for key in allowed:
        n = min(len(key), len(parts))
        if key[:n] != parts[:n]:
            continue
        if len(key) <= len(parts):  # ``key`` names this entry or one of its parents
            return _ALL
        below.append(key[len(parts) :])
    return below if below else _SKIP


def _content(dest: Any, key: str) -> Any:
    """The TensorDict holding ``dest``'s entries (a tensor class checks that ``key`` is a field)."""
    if getattr(type(dest), "_is_tensorclass", False):
        fields = type(dest)._tc_field_set
        if key not in fields:
            raise AttributeError(
                f"Cannot set the attribute {key!r} on {type(dest).__name__}: it is not a field (fields: {list(type(dest)._tc_fields)})."
            )
        return dest._tensordict
    return dest


def _check_unlocked(content: Any, key: tuple, ignore_lock: bool) -> None:
    if content._is_locked and not ignore_lock:
        raise RuntimeError(
            f"{LOCKED}: update cannot set key {unravel_key(key)!r} (update_() or update(inplace=True) write "
            "existing tensors in place; or unlock_() first)."
        )


def _is_leaf(obj: Any) -> bool:
    return isinstance(obj, torch.Tensor) or not is_tensor_collection(obj) or obj._is_non_tensor


def _is_subtree(value: Any) -> bool:
    return isinstance(value, dict) or (is_tensor_collection(value) and not value._is_non_tensor)


def _cloned(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor) or is_tensor_collection(value):
        return value.clone()
    return value  # numbers and Python objects: the destination converts (copies) them
