"""Key-structure operations: select, exclude, update, rename, flatten, pop...

Written against the collection primitives (``_items_raw``, ``_get_str``, ``_set_str``,
``_del_str``, ``get``, ``set``) so that every collection type shares them.
"""

# Mixin of TensorDictBase: the attributes it reads (batch_size, get, _items_raw...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

import torch

from ..errors import locked_error
from .keys import KeysView, is_leaf_nontensor
from .utils import _MISSING, NO_DEFAULT, NestedKey, _key_to_tuple, is_tensor_collection, unravel_key


if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is new in 3.11

    from ..base import TensorDictBase


class KeyOpsMixin:
    """Operations that read or reshape the key structure of a collection."""

    __slots__ = ()

    if TYPE_CHECKING:  # defined by TensorDictBase

        def __contains__(self, key: Any) -> bool: ...

    def __delitem__(self, key: NestedKey) -> None:
        self.del_(key)

    def del_(self, key: NestedKey) -> Self:
        """Remove the entry at ``key`` in place and return ``self``.

        Raises:
            RuntimeError: the collection is locked.
            KeyError: ``key`` is absent.
        """
        if self._is_locked:
            raise locked_error(f"cannot delete key {key!r}; unlock_() it first.")
        key = unravel_key(key)
        if isinstance(key, str):
            self._del_str(key)
        else:
            parent = self._get_tuple(key[:-1], NO_DEFAULT)
            if not is_tensor_collection(parent):  # a leaf on the way: nothing nested below it
                raise KeyError(f"key {key!r} not found: {key[:-1]!r} is a {type(parent).__name__}, not a TensorDict.")
            parent.del_(key[-1])
        return self

    def pop(self, key: NestedKey, default: Any = NO_DEFAULT) -> Any:
        """Remove ``key`` and return its entry (or ``default`` when absent)."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            if default is NO_DEFAULT:
                missing = self._missing_key_error(unravel_key(key)).args[0]
                raise KeyError(f"You are trying to pop key {key!r}, which is absent, without a default: {missing}")
            return default
        self.del_(key)
        return value

    def keys(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable | None = None,
        *,
        sort: bool = False,
    ):
        """Keys of the collection; nested keys come out as tuples when ``include_nested``."""
        return KeysView(self, include_nested, leaves_only, is_leaf, sort)

    def values(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable | None = None,
        *,
        sort: bool = False,
    ):
        """Yield the entries in the order of :meth:`keys` (same arguments)."""
        for key in self.keys(include_nested, leaves_only, is_leaf, sort=sort):
            yield self.get(key)

    def items(
        self,
        include_nested: bool = False,
        leaves_only: bool = False,
        is_leaf: Callable | None = None,
        *,
        sort: bool = False,
    ):
        """Yield ``(key, entry)`` pairs in the order of :meth:`keys` (same arguments)."""
        for key in self.keys(include_nested, leaves_only, is_leaf, sort=sort):
            yield key, self.get(key)

    def is_empty(self) -> bool:
        """True when no leaf exists (empty sub-collections don't count; non-tensor data does)."""
        for _ in self.keys(True, True, is_leaf_nontensor):
            return False
        return True

    def empty(
        self, recurse: bool = False, *, batch_size: Any = None, device: Any = NO_DEFAULT, names: Any = None
    ) -> "TensorDictBase":
        """A collection with no leaves, the same batch size and device (keeps sub-structure if ``recurse``)."""
        from ..tensordict import TensorDict

        out = TensorDict(
            batch_size=self.batch_size if batch_size is None else batch_size,
            device=self.device if device is NO_DEFAULT else device,
            names=self._maybe_names() if batch_size is None and names is None else names,
        )
        if recurse:
            for key, value in self._items_raw():
                if not isinstance(value, torch.Tensor) and not value._is_non_tensor:
                    out._set_str(key, value.empty(recurse=True), inplace=False, validated=True)
        return out

    def create_nested(self, key: NestedKey) -> "TensorDictBase":
        """Sets an empty collection (same batch size, device and names) at ``key``, replacing what
        was there; missing parents along a nested key are created too. Returns ``self``.

        Examples:
            >>> from tdict import TensorDict
            >>> td = TensorDict(batch_size=[3]).create_nested(("a", "b"))
            >>> td["a", "b"].batch_size, list(td.keys(True))
            (torch.Size([3]), ['a', ('a', 'b')])
        """
        *parents, last = _key_to_tuple(key)
        node = self
        for part in parents:
            child = node.get(part, None)
            if child is None:
                child = node.empty()
                node.set(part, child)
                child = node.get(part)
            node = child
        node.set(last, node.empty())
        return cast("TensorDictBase", self)

    def select(
        self, *keys: NestedKey, inplace: bool = False, strict: bool = True, as_tensordict: bool = False
    ) -> "TensorDictBase":
        """A collection with only ``keys`` (nested keys keep their parents); ``as_tensordict`` matters
        to tensor classes only (a collection is returned either way here)."""
        out = cast("TensorDictBase", self) if inplace else self.empty()
        picked = []
        for key in keys:
            key = unravel_key(key)
            value = self.get(key, _MISSING)
            if value is _MISSING:
                if strict:
                    raise self._missing_key_error(key)
                continue
            picked.append((key, value))
        if inplace:
            keep = {k if isinstance(k, str) else k[0] for k, _ in picked}
            for key in [k for k, _ in self._items_raw() if k not in keep]:
                self._del_str(key)
            for key, _ in picked:
                if isinstance(key, tuple):
                    sub = self._get_str(key[0], None)
                    sub.select(key[1:], inplace=True)
            return cast("TensorDictBase", self)
        for key, value in picked:
            out.set(key, value)
        return out

    def exclude(self, *keys: NestedKey, inplace: bool = False) -> "TensorDictBase":
        """A collection without ``keys`` (missing keys are ignored)."""
        out = cast("TensorDictBase", self) if inplace else self.copy()
        for key in keys:
            key = unravel_key(key)
            if isinstance(key, str):
                if out._get_str(key, _MISSING) is not _MISSING:
                    out._del_str(key)
            else:
                last = key[-1]
                parent = out._get_tuple(key[:-1], None) if len(key) > 1 else out
                if parent is None or isinstance(parent, torch.Tensor) or parent._get_str(last, _MISSING) is _MISSING:
                    continue
                if not inplace:  # copy the path so the original is untouched
                    node = out
                    for part in key[:-1]:
                        child = node._get_str(part, None).copy()
                        node._set_str(part, child, inplace=False, validated=True, ignore_lock=True)
                        node = child
                    parent = node
                parent._del_str(last)
        return out

    def split_keys(
        self,
        *key_sets: Sequence[NestedKey],
        inplace: bool = False,
        default: Any = NO_DEFAULT,
        strict: bool = True,
        reproduce_struct: bool = False,
    ):
        """Split into one collection per key set, plus one with the remaining keys.

        ``inplace=True`` takes the keys out of ``self``, which is returned last. Unless
        ``reproduce_struct``, the sub-collections left empty in that last collection are removed.
        """
        outs = [self.select(*ks, strict=strict and default is NO_DEFAULT) for ks in key_sets]
        if default is not NO_DEFAULT:
            for ks, out in zip(key_sets, outs):
                for k in ks:
                    if k not in out:
                        out.set(k, default)
        used = [unravel_key(k) for ks in key_sets for k in ks]
        rest = self.exclude(*used, inplace=inplace)
        if not reproduce_struct:
            rest.filter_empty_()
        return (*outs, rest)

    def rename_key_(self, old_key: NestedKey, new_key: NestedKey, safe: bool = False) -> Self:
        """Move ``old_key`` to ``new_key`` in place (``safe`` refuses to overwrite)."""
        old_key, new_key = unravel_key(old_key), unravel_key(new_key)
        if safe and new_key in self:
            raise KeyError(
                f"rename_key_: {new_key!r} is already present in TensorDict, and safe=True forbids overwriting it."
            )
        value = self.get(old_key)
        self.del_(old_key)
        self.set(new_key, value)
        return self

    def flatten_keys(
        self, separator: str = ".", inplace: bool = False, is_leaf: Callable | None = None
    ) -> "TensorDictBase":
        """Turn nested keys into flat ``"a.b"`` keys (non-tensor data included, as in tensordict)."""
        out = self.empty()
        for key, value in self.items(True, True, is_leaf or is_leaf_nontensor):
            name = key if isinstance(key, str) else separator.join(key)
            if name in out:
                raise KeyError(
                    f"Flattening keys in tensordict causes keys to collide: {key!r} and an earlier entry both become {name!r}."
                )
            out._set_str(name, value, inplace=False, validated=True)
        if inplace:
            return self._replace_entries(out)
        _write_back_on_exit(self, out, lambda result: result.unflatten_keys(separator))
        return out

    def _replace_entries(self, new: "TensorDictBase") -> "TensorDictBase":
        """Make ``new``'s entries the entries of ``self`` (in-place flatten/unflatten)."""
        for key in [k for k, _ in self._items_raw()]:
            self._del_str(key)
        return self.update(new)

    def unflatten_keys(self, separator: str = ".", inplace: bool = False) -> "TensorDictBase":
        """Inverse of :meth:`flatten_keys`: ``"a.b"`` becomes ``("a", "b")``.

        Sub-collections that meet are merged (``{"a.b": x, "a": {"c": y}}`` gives ``a`` both keys,
        ``self`` is left as it is); two entries that land on one key, or one under the other's
        tensor, raise ``KeyError`` before anything is written."""
        out = self.empty()
        owned = {id(out)}  # collections built here, merged into freely (the others are copied first)
        for key, value in self._items_raw():
            _unflatten_put(out, (), tuple(key.split(separator)), value, key, owned)
        if inplace:
            return self._replace_entries(out)
        _write_back_on_exit(self, out, lambda result: result.flatten_keys(separator))
        return out

    def update(
        self,
        input_dict_or_td: Any = None,
        clone: bool = False,
        inplace: bool = False,
        *,
        keys_to_update: Sequence | None = None,
        non_blocking: bool = False,
        is_leaf: Callable | None = None,
        update_batch_size: bool = False,
        ignore_lock: bool = False,
        **entries: Any,
    ) -> "TensorDictBase":
        """Write every entry of ``input_dict_or_td`` (and of the keyword ``entries``, which win) into
        ``self``, merging sub-collections.

        Tuple keys of a dict are nested keys; ``clone`` copies the values; ``inplace`` copies into
        existing tensors; ``keys_to_update`` restricts the keys (a key also selects what is below
        it). Every entry is checked before the first write: an error leaves ``self`` unchanged.
        """
        from .update import update, with_entries

        source = with_entries(input_dict_or_td, entries)
        if source is None:
            return cast("TensorDictBase", self)
        return update(
            self,
            source,
            clone=clone,
            inplace=inplace,
            keys_to_update=keys_to_update,
            ignore_lock=ignore_lock,
            update_batch_size=update_batch_size,
        )

    def update_(
        self,
        input_dict_or_td: Any = None,
        clone: bool = False,
        *,
        keys_to_update: Sequence | None = None,
        **entries: Any,
    ) -> "TensorDictBase":
        """Copy every tensor of ``input_dict_or_td`` (and of the keyword ``entries``, which win) into the
        existing entry of ``self``, in place.

        Every key must exist and every value broadcast to its entry; all of it is checked before
        the first write. Non-tensor entries are skipped (as in tensordict).
        """
        from .update import update_, with_entries

        source = with_entries(input_dict_or_td, entries)
        if source is None:
            return cast("TensorDictBase", self)
        return update_(self, source, keys_to_update=keys_to_update)

    def update_at_(self, input_dict_or_td: Any, index: Any) -> Self:
        """Write ``input_dict_or_td`` into ``self[index]`` in place."""
        self._set_at_index(
            index,
            input_dict_or_td
            if is_tensor_collection(input_dict_or_td)
            else self._from_dict_like(input_dict_or_td, index),
        )
        return self

    def _from_dict_like(self, data: dict, index: Any) -> "TensorDictBase":
        from ..tensordict import TensorDict

        return TensorDict(data, batch_size=self._index(index).batch_size)

    def setdefault(self, key: NestedKey, default: Any) -> Any:
        """``get(key)`` if present, else ``set(key, default)`` and return it."""
        if key not in self:
            self.set(key, default)
        return self.get(key)


class _WriteBack:
    """Pushed on the result of ``flatten_keys`` / ``unflatten_keys`` / ``view``: leaving
    ``with td.view(-1) as v:`` without an error writes ``v``'s entries back into ``td``."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn  # fn(result); it must not hold the result itself (no reference cycle)


def _write_back_on_exit(source: Any, result: Any, restore: Callable[[Any], Any]) -> None:
    """Make ``with source.op() as result:`` write ``restore(result)`` (``result`` in ``source``'s
    layout) back into ``source`` on exit: new and changed entries (in place if ``source`` is locked)."""

    def write_back(result: Any) -> None:
        back = restore(result)
        if source.is_locked:
            source.update_(back)
        else:
            source.update(back)

    result._push_op(_WriteBack(write_back))


def _is_node(value: Any) -> bool:
    return (
        is_tensor_collection(value) and not value._is_non_tensor and not getattr(type(value), "_is_tensorclass", False)
    )


def _own(node: Any, key: str, child: Any, owned: set) -> Any:
    """``child`` (stored under ``key`` of ``node``), replaced by a copy unless built by this unflatten."""
    if id(child) in owned:
        return child
    node.set(key, child.copy())
    child = node.get(key)
    owned.add(id(child))
    return child


def _unflatten_put(node: Any, path: tuple, parts: tuple, value: Any, source_key: str, owned: set) -> None:
    """Put ``value`` at ``parts`` below ``node`` (at ``path`` in the result), merging it with a
    sub-collection already there."""

    def collision(where: tuple) -> KeyError:
        return KeyError(
            f"Unflattening key(s) in tensordict will override an existing for unflattened key "
            f"{unravel_key(path + where)!r}: the entry {source_key!r} and another entry both need it."
        )

    for i, part in enumerate(parts[:-1]):
        child = node.get(part, None)
        if child is None:
            node.set(part, node.empty())
            child = node.get(part)
            owned.add(id(child))
        elif not _is_node(child):
            raise collision(parts[: i + 1])
        else:
            child = _own(node, part, child, owned)
        node = child
    last = parts[-1]
    existing = node.get(last, None)
    if existing is None:
        node.set(last, value)
    elif _is_node(existing) and _is_node(value):
        existing = _own(node, last, existing, owned)
        for key, item in value._items_raw():
            _unflatten_put(existing, path + parts, (key,), item, source_key, owned)
    else:
        raise collision(parts)
