"""Whole-collection ops of a lazy stack, done member by member (no stacking).

Copies and moves (``clone``, ``to``, ``detach``...), key selection, ``apply``,
comparisons, in-place arithmetic and masked fills are forwarded to every member, with the
other operand cut along the stack dim; the results are restacked lazily. Ops whose result has
another batch size work on the dense stack.
"""

# Mixin of LazyStackedTensorDict: the attributes it reads (tensordicts, stack_dim, _like...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

import torch

from .._core.locking import keeps_lock
from .._core.utils import NO_DEFAULT, NestedKey
from ..base import TensorDictBase, is_tensor_collection
from ..tensordict import TensorDict

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is new in 3.11

    from ..lazy import LazyStackedTensorDict


class LazyMemberOpsMixin:
    """Member-wise whole-collection ops of :class:`~tdict.lazy.LazyStackedTensorDict`. The host
    provides ``tensordicts``, ``stack_dim``, ``_batch_size``, ``device``, ``_like``,
    ``_items_raw`` and ``_split_collection``."""

    __slots__ = ()

    def _map_entries(self, fn: Callable[[Any], Any], batch_size: torch.Size, names: Any = None) -> TensorDict:
        # Ops that mix the stack dim with others work on the dense stack.
        return TensorDict._new_unsafe(
            {k: fn(v) for k, v in self._items_raw()}, torch.Size(batch_size), self.device, names
        )

    def clone(self, recurse: bool = True, *, device: Any = None) -> "LazyStackedTensorDict":
        """A deep copy, member by member (``recurse=False``: new structure, shared tensors); ``device``: the copy's device."""
        return self._like([td.clone(recurse, device=device) for td in self.tensordicts])

    def copy(self) -> "LazyStackedTensorDict":
        """A shallow copy: a new stack of shallow copies of the members (the leaves are shared)."""
        return self._like([td.copy() for td in self.tensordicts])

    @keeps_lock
    def to(self, *args: Any, **kwargs: Any) -> "LazyStackedTensorDict":
        """Move / cast every member (same arguments as :meth:`TensorDict.to`)."""
        if kwargs.get("batch_size") is not None:
            raise TypeError(
                "Cannot pass batch-size to a LazyStackedTensorDict's to(): change the members' batch size and restack "
                "(or densify it first with to_tensordict())."
            )
        kwargs.pop("batch_size", None)
        tds = self.tensordicts
        members = [td.to(*args, **kwargs) for td in tds]
        if all(m is td for m, td in zip(members, tds)):
            return cast("LazyStackedTensorDict", self)
        return self._like(members)

    @keeps_lock
    def detach(self) -> "LazyStackedTensorDict":
        """A new stack of the members' detached copies (the leaves share their data)."""
        return self._like([td.detach() for td in self.tensordicts])

    def pin_memory(self, num_threads: int | None = None, inplace: bool = False) -> "LazyStackedTensorDict":
        """Pin every member's tensors (needs an accelerator): a new stack, or ``self`` with ``inplace``."""
        members = [td.pin_memory(inplace=inplace) for td in self.tensordicts]
        return cast("LazyStackedTensorDict", self) if inplace else self._like(members)

    def empty(
        self, recurse: bool = False, *, batch_size: Any = None, device: Any = NO_DEFAULT, names: Any = None
    ) -> TensorDictBase:
        """A lazy stack of the members' empty copies (``recurse``: keep their sub-collections).

        With ``batch_size``, ``device`` or ``names``, a plain empty TensorDict, as :meth:`TensorDict.empty` gives.
        """
        if batch_size is not None or device is not NO_DEFAULT or names is not None:
            return TensorDictBase.empty(
                cast(TensorDictBase, self), recurse, batch_size=batch_size, device=device, names=names
            )
        return self._like([td.empty(recurse) for td in self.tensordicts])

    def select(self, *keys: NestedKey, inplace: bool = False, strict: bool = True) -> "LazyStackedTensorDict":
        """Keep only ``keys`` in every member: a new stack, or ``self`` with ``inplace`` (see :meth:`TensorDict.select`)."""
        members = [td.select(*keys, inplace=inplace, strict=strict) for td in self.tensordicts]
        return cast("LazyStackedTensorDict", self) if inplace else self._like(members)

    def exclude(self, *keys: NestedKey, inplace: bool = False) -> "LazyStackedTensorDict":
        """Drop ``keys`` from every member: a new stack, or ``self`` with ``inplace`` (see :meth:`TensorDict.exclude`)."""
        members = [td.exclude(*keys, inplace=inplace) for td in self.tensordicts]
        return cast("LazyStackedTensorDict", self) if inplace else self._like(members)

    def _apply(
        self,
        fn,
        others,
        named,
        path,
        batch_size,
        device,
        names,
        inplace,
        default,
        filter_empty,
        call_on_nested,
        constructor_kwargs,
    ):
        if batch_size is not None or constructor_kwargs:
            # the result has another batch size: compute it on the dense stack
            return TensorDictBase._apply(
                cast(TensorDictBase, self),
                fn,
                others,
                named,
                path,
                batch_size,
                device,
                names,
                inplace,
                default,
                filter_empty,
                call_on_nested,
                constructor_kwargs,
            )
        tds = self.tensordicts
        split_others = []
        for other in others:
            parts = self._split_collection(other) if is_tensor_collection(other) else None
            if parts is None:
                raise RuntimeError(
                    f"apply: the other collection's batch size {list(getattr(other, 'batch_size', []))} does not start with "
                    f"the lazy stack's {list(self._batch_size)}."
                )
            split_others.append(parts)
        results = [
            td._apply(
                fn,
                [parts[i] for parts in split_others],
                named,
                path,
                None,
                device,
                NO_DEFAULT,
                inplace,
                default,
                filter_empty,
                call_on_nested,
                {},
            )
            for i, td in enumerate(tds)
        ]
        if inplace:
            return self
        if tds and all(r is None for r in results):
            return None
        results = [td.empty() if r is None else r for td, r in zip(tds, results)]
        out = self._like(results)
        if names is not NO_DEFAULT and names is not None:
            out.names = names
        return out

    def _tensor_leaves(self) -> tuple[list, list]:
        keys, leaves = [], []
        for td in self.tensordicts:
            k, v = td._tensor_leaves()
            keys.extend(k)
            leaves.extend(v)
        return keys, leaves

    def _compare(self, other: Any, op: Callable) -> "LazyStackedTensorDict":
        """``==``/``!=`` member by member (ragged members never get stacked)."""
        parts = self._split_collection(other) if is_tensor_collection(other) else [other] * len(self.tensordicts)
        if parts is None and not other.batch_size:  # a batch-less collection (a compared dict) meets every member
            parts = [other] * len(self.tensordicts)
        if parts is None:
            raise RuntimeError(
                f"Comparison: the other collection's batch size {list(other.batch_size)} does not start with {list(self._batch_size)}."
            )
        return self._like([td._compare(part, op) for td, part in zip(self.tensordicts, parts)])

    def _binary(self, other: Any, op: Callable, default: Any = NO_DEFAULT) -> "LazyStackedTensorDict":
        if isinstance(other, torch.Tensor) and other.dim():  # each member takes its slice of the operand
            return self._like(
                [td._binary(part, op) for td, part in zip(self.tensordicts, self._member_operands(other))]
            )
        return super()._binary(other, op, default)

    def _member_operands(self, other: torch.Tensor) -> tuple:
        """A batch-aligned tensor operand cut into one slice per member."""
        return self._batch_operand(other).expand(self._batch_size).unbind(self.stack_dim)

    def _binary_(self, other: Any, foreach: Callable, fallback: Callable) -> Self:
        tds = self.tensordicts
        if is_tensor_collection(other):
            parts = self._split_collection(other)
            if parts is None:
                raise RuntimeError(
                    f"In-place op: the other collection's batch size {list(other.batch_size)} does not start with {list(self._batch_size)}."
                )
            for td, part in zip(tds, parts):
                td._binary_(part, foreach, fallback)
        elif isinstance(other, torch.Tensor) and other.dim() > 0:
            for td, part in zip(tds, self._member_operands(other)):
                td._binary_(part, foreach, fallback)
        else:
            for td in tds:
                td._binary_(other, foreach, fallback)
        return self

    def allclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
        """True when each member is :meth:`TensorDict.allclose` to its slice of ``other`` along the stack dim."""
        parts = self._split_collection(other)
        if parts is None:
            raise RuntimeError(
                f"allclose: batch size {list(other.batch_size)} does not match {list(self._batch_size)}."
            )
        return all(td.allclose(p, rtol=rtol, atol=atol, equal_nan=equal_nan) for td, p in zip(self.tensordicts, parts))

    def zero_(self) -> Self:
        """Zero every member's tensor leaves in place; returns ``self``."""
        for td in self.tensordicts:
            td.zero_()
        return self

    def fill_(self, key: NestedKey, value: float | bool) -> Self:
        """Fill the entry ``key`` of every member with ``value`` in place (``KeyError`` before any write if one lacks it)."""
        tds = self.tensordicts
        for td in tds:
            if key not in td:
                raise td._missing_key_error(key)
        for td in tds:
            td.fill_(key, value)
        return self

    def detach_(self) -> Self:
        """Detach every member's tensor leaves in place; returns ``self``."""
        for td in self.tensordicts:
            td.detach_()
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        """Set ``requires_grad`` on every member's tensor leaves in place; returns ``self``."""
        for td in self.tensordicts:
            td.requires_grad_(requires_grad)
        return self

    @property
    def requires_grad(self) -> bool:
        """True when any member has a leaf that requires grad."""
        return any(td.requires_grad for td in self.tensordicts)

    def is_shared(self) -> bool:
        """True when the stack has members and all of them are in shared memory."""
        return bool(self.tensordicts) and all(td.is_shared() for td in self.tensordicts)

    def share_memory_(self) -> "LazyStackedTensorDict":
        """Move every member to shared memory, then lock the stack; returns ``self``."""
        for td in self.tensordicts:
            td.share_memory_()
        return self.lock_()

    def _split_mask(self, mask: torch.Tensor) -> Sequence:
        self._check_mask(mask)
        return mask.unbind(self.stack_dim) if mask.dim() > self.stack_dim else [mask] * len(self.tensordicts)

    def masked_fill(self, mask: torch.Tensor, value: Any) -> "LazyStackedTensorDict":
        """A new stack where the entries at ``mask`` (bool, over the leading batch dims) are ``value``."""
        return self._like([td.masked_fill(m, value) for td, m in zip(self.tensordicts, self._split_mask(mask))])

    def masked_fill_(self, mask: torch.Tensor, value: Any) -> Self:
        """In place: set the tensor leaves to ``value`` where ``mask`` is True, member by member; returns ``self``."""
        for td, m in zip(self.tensordicts, self._split_mask(mask)):
            td.masked_fill_(m, value)
        return self
