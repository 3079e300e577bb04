"""Locked graphs: a collection locked as part of a locked parent is not unlocked on its own.

``lock_()`` on a collection locks every collection under it and records the locking collection, by
weak reference, in each of them. ``unlock_()`` checks before changing anything that the collection
is not held by a locked collection outside its own tree (a parent that locked it, or a second locked
tree sharing one of its children); otherwise it raises ``RuntimeError``. Unlocking clears the flags
through the tree and drops the records its members made. A holder that was garbage-collected, or
has been unlocked since, holds nothing.

Examples:
    >>> import torch
    >>> from tdict import TensorDict
    >>> td = TensorDict({("a", "b"): torch.zeros(2)}, [2]).lock_()
    >>> child = td["a"]
    >>> try:
    ...     child.unlock_()
    ... except RuntimeError as err:
    ...     print(str(err).split(":")[0])
    Cannot unlock a tensordict that is part of a locked graph
    >>> _ = td.unlock_()
    >>> child.is_locked
    False
"""

from __future__ import annotations

import weakref
from typing import Any

from .keys import is_leaf_nontensor
from .utils import content_of

__all__ = ["lock_graph", "unlock_graph"]

_UNLOCK_ERROR = (
    "Cannot unlock a tensordict that is part of a locked graph: {what} is held locked by a {holder} "
    "that contains it. Unlock that root first (or delete it), or group the graphs under one "
    "TensorDict and unlock that."
)


def _children(node: Any) -> list:
    """The collections right under ``node``: a lazy stack's members, a collection's sub-collections."""
    if is_leaf_nontensor(type(node)):  # non-tensor data and stacks are leaves
        return []
    stacked = getattr(node, "tensordicts", None)
    values = stacked if isinstance(stacked, list) else [value for _, value in node._items_raw()]
    return [content_of(value) for value in values if not is_leaf_nontensor(type(value))]


def _under(root: Any) -> list:
    """Every collection under ``root`` (not ``root`` itself), each once."""
    seen, found, todo = {id(root)}, [], [root]
    while todo:
        for child in _children(todo.pop()):
            if id(child) not in seen:
                seen.add(id(child))
                found.append(child)
                todo.append(child)
    return found


def _holders(node: Any, inside: set[int]) -> list:
    """The live, locked collections outside ``inside`` (ids) that locked ``node``."""
    refs = getattr(node, "_lock_parents", None) or ()
    return [p for p in (ref() for ref in refs) if p is not None and p._is_locked and id(p) not in inside]


def lock_graph(root: Any) -> None:
    """Lock ``root`` and every collection under it, recording ``root`` in each of them."""
    root._set_lock(True)
    nodes = _under(root)
    if not nodes:
        return
    ref = weakref.ref(root)
    for node in nodes:
        parents = getattr(node, "_lock_parents", None)
        if parents is None:
            try:
                node._lock_parents = [ref]
            except AttributeError:  # a leaf-like collection (non-tensor data): it keeps no records
                pass
        else:
            parents[:] = [p for p in parents if p() is not None and p is not ref]
            parents.append(ref)


def unlock_graph(root: Any) -> None:
    """Unlock ``root`` and every collection under it; ``RuntimeError`` (nothing changed) when a locked
    collection outside ``root``'s tree holds ``root`` or one of them."""
    nodes = _under(root)
    inside = {id(root), *(id(n) for n in nodes)}
    for node in (root, *nodes):
        holders = _holders(node, inside)
        if holders:
            what = "this collection" if node is root else "a collection under it"
            raise RuntimeError(_UNLOCK_ERROR.format(what=what, holder=type(holders[0]).__name__))
    root._set_lock(False)
    for node in (root, *nodes):
        parents = getattr(node, "_lock_parents", None)
        if parents:
            parents[:] = [p for p in parents if (held := p()) is not None and id(held) not in inside]
