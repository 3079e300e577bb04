"""Reads and writes of single entries shared by every collection: indexed access, non-tensor
entries, in-place state (grads, clearing, devices) and combining / splitting keys.

Written against the collection primitives (``_items_raw``, ``_get_str``, ``get``, ``set``, ``_index``,
``_map_entries``, ``keys``, ``_tensor_leaves``) so that TensorDict, LazyStackedTensorDict and tensor
classes (through their inner TensorDict) share them. Lazy leaves are never stacked just to learn an
entry's type or shape (:func:`_probe`); the helpers here are shared by the other entry-level mixins
(:mod:`.conversions`, :mod:`.introspection`, :mod:`.factories`).
"""

# Mixin of TensorDictBase: the attributes it reads (batch_size, get, _items_raw...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from ..errors import locked_error
from .indexing import _expand_index, _indexed_batch_size
from .keys import is_leaf_nontensor
from .utils import _MISSING, NO_DEFAULT, NestedKey, _key_to_tuple, is_tensor_collection, unravel_key

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is new in 3.11

    from ..base import TensorDictBase


def _probe(td: Any, key: NestedKey) -> Any:
    """The entry at ``key`` without stacking lazy leaves (a member's leaf stands in); KeyError if absent."""
    from ..lazy import _probe as probe

    value = probe(td, _key_to_tuple(key))
    if value is _MISSING:
        raise td._missing_key_error(unravel_key(key))
    return value


def _is_lazy_stack(td: Any) -> bool:
    return td._is_lazy and not td._is_non_tensor


def _non_tensor(value: Any) -> bool:
    return not isinstance(value, torch.Tensor) and getattr(type(value), "_is_non_tensor", False)


def _shape_of(value: Any) -> torch.Size:
    return value.shape if isinstance(value, torch.Tensor) else value.batch_size


def _check_unlocked(td: Any, what: str) -> None:
    members = td.tensordicts if _is_lazy_stack(td) else ()
    if td.is_locked or any(m.is_locked for m in members):
        raise locked_error(f"{what} changes its keys; unlock_() it first.")


def _set_device_tree(td: Any, device: torch.device | None) -> None:
    if _is_lazy_stack(td):
        for member in td.tensordicts:
            _set_device_tree(member, device)
    elif getattr(type(td), "_is_tensorclass", False):
        _set_device_tree(td._tensordict, device)
    else:
        td._device = device
        for _, value in td._items_raw():
            if not isinstance(value, torch.Tensor):
                _set_device_tree(value, device)


class EntryOpsMixin:
    """Indexed reads and writes, non-tensor entries, in-place state, combining and splitting keys."""

    __slots__ = ()

    if TYPE_CHECKING:  # defined by TensorDictBase

        def __contains__(self, key: Any) -> bool: ...

    # ------------------------------------------------------------------ indexed access
    def get_at(self, key: NestedKey, index: Any, default: Any = NO_DEFAULT) -> Any:
        """``get(key)[index]``; ``default`` when the key is absent (``KeyError`` without one)."""
        value = self.get(key, _MISSING if default is not NO_DEFAULT else NO_DEFAULT)
        if value is _MISSING:
            return default
        try:
            return value[index]
        except IndexError as err:
            raise IndexError(
                f"get_at({key!r}): index {index!r} does not fit the entry of shape {list(_shape_of(value))}: {err}"
            ) from err

    def set_at_(self, key: NestedKey, value: Any, index: Any, *, non_blocking: bool = False) -> Self:
        """Write ``value`` (broadcast) into the existing entry ``key`` at batch index ``index``, in place."""
        from ..tensordict import TensorDict

        key, parts = unravel_key(key), _key_to_tuple(key)
        _probe(self, key)  # KeyError (listing the keys) before anything else
        nodes = [self]
        for part in parts[:-1]:
            nodes.append(nodes[-1].get(part))
        target = nodes[-1].get(parts[-1])
        full_index = _expand_index(index, self.batch_dims)
        try:
            if any(_is_lazy_stack(n) for n in nodes):  # get() stacked a copy: write member-wise
                if isinstance(target, torch.Tensor):
                    value = self._to_leaf(value, key).expand(_indexed_batch_size(target.shape, full_index))
                self._set_at_index(
                    index, TensorDict({key: value}, batch_size=_indexed_batch_size(self.batch_size, full_index))
                )
            elif isinstance(target, torch.Tensor):
                target[full_index] = self._to_leaf(value, key)
            elif target._is_non_tensor:
                nodes[-1]._set_str(
                    parts[-1], target._set_at(full_index, value), inplace=False, validated=True, ignore_lock=True
                )
            else:
                target[full_index] = value
        except (RuntimeError, IndexError) as err:
            raise type(err)(f"set_at_({key!r}, index={index!r}): {err}") from err
        return self

    def copy_at_(
        self, tensordict: Any, idx: Any, non_blocking: bool = False, *, fast: bool | None = True
    ) -> "TensorDictBase":
        """Copy ``tensordict``'s tensors into ``self[idx]`` in place (every key must exist in ``self``).

        ``fast=True`` (the default, as in tensordict 0.14) is the tensor-only copy: a source holding
        non-tensor data raises ``RuntimeError`` before any write; ``fast=False`` is :meth:`update_at_`
        (non-tensor payloads too); ``fast=None`` does the same with a ``FutureWarning`` (tensordict's
        deprecated transition value). Keys and shapes are all checked before the first write.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.zeros(4), batch_size=[4])
            >>> td.copy_at_(TensorDict(a=torch.ones(2), batch_size=[2]), slice(0, 2))["a"].tolist()
            [1.0, 1.0, 0.0, 0.0]
        """
        if fast is None:
            warnings.warn(
                "copy_at_(..., fast=None) is deprecated (tensordict 0.14's transition value): it copies non-tensor "
                "data like update_at_; pass fast=False for that, or fast=True for the tensor-only copy.",
                FutureWarning,
                stacklevel=2,
            )
        elif fast and is_tensor_collection(tensordict):
            leaves = tensordict.items(True, True, is_leaf=is_leaf_nontensor)
            non_tensor = [k for k, v in leaves if not isinstance(v, torch.Tensor)]
            if non_tensor:
                raise RuntimeError(
                    f"copy_at_(..., fast=True) copies tensors only, but the source holds non-tensor data at {non_tensor}; "
                    "use fast=False (or update_at_) to copy it too."
                )
        return self.update_at_(tensordict, idx)  # copies are issued in order: non_blocking changes nothing here

    def masked_select(self, mask: torch.Tensor) -> "TensorDictBase":
        """A new collection of the elements where ``mask`` (over the leading batch dims) is True.

        The masked dims collapse into one; lazy stacks give a dense TensorDict.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.arange(3), batch_size=[3])
            >>> td.masked_select(torch.tensor([True, False, True]))["a"]
            tensor([0, 2])
        """
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError(
                f"masked_select: mask must be a bool tensor, got {type(mask).__name__} {getattr(mask, 'dtype', '')}."
            )
        bs = self.batch_size
        while mask.dim() > len(bs) and mask.shape[-1] == 1:
            mask = mask.squeeze(-1)
        if mask.dim() > len(bs) or mask.shape != bs[: mask.dim()]:
            raise ValueError(
                f"masked_select: mask of shape {list(mask.shape)} does not match the leading batch dims of {list(bs)}."
            )
        new_bs = torch.Size((int(mask.sum()),) + tuple(bs[mask.dim() :]))
        host_mask = mask.cpu()  # non-tensor leaves index CPU bookkeeping tensors

        def pick(v: Any) -> Any:
            return (
                v[mask] if isinstance(v, torch.Tensor) else v[host_mask] if v._is_non_tensor else v.masked_select(mask)
            )

        return self._map_batch(pick, new_bs)

    # ------------------------------------------------------------------ non-tensor entries
    def is_non_tensor(self, key: NestedKey) -> bool:
        """True when the entry at ``key`` is a NonTensorData / NonTensorStack (KeyError if absent)."""
        return _non_tensor(_probe(self, key))

    def non_tensor_items(self, include_nested: bool = False) -> tuple:
        """``(key, entry)`` pairs of the non-tensor leaves (stacked for lazy stacks)."""
        return tuple(
            (k, self.get(k)) for k in self.keys(include_nested, True, is_leaf_nontensor) if _non_tensor(_probe(self, k))
        )

    def filter_non_tensor_data(self) -> "TensorDictBase":
        """A copy of the structure without its non-tensor leaves (empty sub-collections stay)."""
        return self.exclude(*(k for k, _ in self.non_tensor_items(True)))

    def set_non_tensor(self, key: NestedKey, value: Any) -> "TensorDictBase":
        """Store ``value`` as-is (never converted to a tensor) under ``key``; missing parents are created."""
        from ..non_tensor import NonTensorData

        parts = _key_to_tuple(key)
        parent = self._get_tuple(parts[:-1], None) if len(parts) > 1 else self
        if parent is None:
            parent = self
        elif isinstance(parent, torch.Tensor) or parent._is_non_tensor:
            raise KeyError(
                f"set_non_tensor({unravel_key(key)!r}): {unravel_key(parts[:-1])!r} is a leaf, not a collection."
            )
        entry = NonTensorData(
            data=value, batch_size=parent.batch_size, device=parent.device, names=parent._maybe_names()
        )
        return self.set(unravel_key(key), entry)

    # ------------------------------------------------------------------ in-place state
    def zero_grad(self, set_to_none: bool = True) -> Self:
        """Reset the ``.grad`` of every tensor leaf (to ``None``, or zero it in place)."""
        for leaf in self._tensor_leaves()[1]:
            if set_to_none:
                leaf.grad = None
            elif leaf.is_leaf and leaf.grad is not None:
                leaf.grad.zero_()
        return self

    def clear(self) -> Self:
        """Remove every entry (a lazy stack empties every member); the batch size stays."""
        _check_unlocked(self, "clear")
        if _is_lazy_stack(self):
            for member in self.tensordicts:
                member.clear()
            return self
        for key in list(self.keys()):
            self.del_(key)
        return self

    def popitem(self) -> tuple:
        """Remove and return the ``(key, entry)`` inserted last (top level only)."""
        _check_unlocked(self, "popitem")
        keys = list(self.keys())
        if not keys:
            raise KeyError("popitem(): the collection has no entries.")
        value = self.get(keys[-1])  # a ragged lazy leaf raises here, before the delete
        self.del_(keys[-1])
        return keys[-1], value

    def pin_memory_(self, num_threads: int | str = 0) -> "TensorDictBase":
        """Pin every tensor leaf in place (needs an accelerator)."""
        return self.pin_memory(num_threads=num_threads if isinstance(num_threads, int) else None, inplace=True)

    def auto_device_(self) -> Self:
        """Set the device (recursively) if all tensor leaves share one, else clear it."""
        devices = {leaf.device for leaf in self._tensor_leaves()[1]}
        _set_device_tree(self, devices.pop() if len(devices) == 1 else None)
        return self

    def filter_empty_(self) -> Self:
        """Remove the sub-collections that hold no leaf, in place (deepest first)."""
        for key in sorted(self.keys(True), key=_key_to_tuple, reverse=True):
            value = _probe(self, key)
            if not isinstance(value, torch.Tensor) and not value._is_non_tensor and self.get(key).is_empty():
                self.del_(key)
        return self

    # ------------------------------------------------------------------ combining and splitting keys
    def cat_tensors(
        self, *keys: NestedKey, out_key: NestedKey, dim: int = 0, keep_entries: bool = False
    ) -> "TensorDictBase":
        """``torch.cat`` the tensors under ``keys`` (along leaf dim ``dim``) into ``out_key``.

        The entries are removed unless ``keep_entries``. Nothing changes if any check fails.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict
            >>> td = TensorDict(a=torch.zeros(2, 1), b=torch.ones(2, 2), batch_size=[2])
            >>> td.cat_tensors("a", "b", out_key="ab", dim=1)["ab"].shape, list(td.keys())
            (torch.Size([2, 3]), ['ab'])
        """
        return self._combine_leaves(keys, out_key, dim, keep_entries, torch.cat, "cat_tensors")

    def stack_tensors(
        self, *keys: NestedKey, out_key: NestedKey, dim: int = 0, keep_entries: bool = False
    ) -> "TensorDictBase":
        """Like :meth:`cat_tensors` with ``torch.stack`` (a new leaf dim ``dim``)."""
        return self._combine_leaves(keys, out_key, dim, keep_entries, torch.stack, "stack_tensors")

    def _combine_leaves(
        self, keys: Sequence[NestedKey], out_key: NestedKey, dim: int, keep_entries: bool, fn: Callable, what: str
    ) -> "TensorDictBase":
        if not keys:
            raise ValueError(f"{what}: pass at least one key to combine.")
        keys = [unravel_key(k) for k in keys]
        out_key = unravel_key(out_key)
        values = []
        for key in keys:
            value = self.get(key)
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{what}: key {key!r} holds a {type(value).__name__}, expected a tensor.")
            values.append(value)
        _check_unlocked(self, what)
        try:
            result = fn(values, dim)
        except (RuntimeError, IndexError, TypeError) as err:
            raise RuntimeError(f"{what}: cannot combine keys {keys} along dim {dim}: {err}") from err
        parts = _key_to_tuple(out_key)
        parent = self._get_tuple(parts[:-1], None) if len(parts) > 1 else self
        if parent is not None and (isinstance(parent, torch.Tensor) or parent._is_non_tensor):
            raise KeyError(f"{what}: out_key {out_key!r} runs through the leaf {unravel_key(parts[:-1])!r}.")
        bs = (parent if parent is not None else self).batch_size
        if result.shape[: len(bs)] != bs:
            raise RuntimeError(
                f"{what}: the result of shape {list(result.shape)} does not start with the batch size {list(bs)} of {out_key!r} (combine along a feature dim, dim >= {len(bs)})."
            )
        if not keep_entries:
            for key in dict.fromkeys(keys):
                self.del_(key)
        return self.set(out_key, result)

    def separates(
        self, *keys: NestedKey, default: Any = NO_DEFAULT, strict: bool = True, filter_empty: bool = True
    ) -> "TensorDictBase":
        """Move ``keys`` out of ``self`` into a new collection, which is returned.

        A missing key raises (``strict``) or, with ``default``, is set to it in the result; with
        ``strict=False`` and no default it is skipped. ``filter_empty`` then drops the
        sub-collections of ``self`` left with no leaf. Nothing changes if a check fails.
        """
        key_list = [unravel_key(k) for k in keys]
        present = [k for k in key_list if k in self]
        missing = [k for k in key_list if k not in self]
        if missing and strict and default is NO_DEFAULT:
            raise self._missing_key_error(missing[0])
        if present:
            _check_unlocked(self, "separates")
        out = self.select(*present)
        if default is not NO_DEFAULT:
            for key in missing:
                out.set(key, default)
        tuples = {_key_to_tuple(k) for k in present}
        for key in dict.fromkeys(present):  # a key inside another separated one goes with its parent
            path = _key_to_tuple(key)
            if not any(path[:i] in tuples for i in range(1, len(path))):
                self.del_(key)
        if filter_empty:
            self.filter_empty_()
        return out


__all__ = ["EntryOpsMixin"]
