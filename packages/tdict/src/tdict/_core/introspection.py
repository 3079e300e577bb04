"""Questions about a collection's entries and storage: sorted keys, entry classes and shapes,
contiguity, data pointers, element and byte counts, nesting depth, device type."""

# Mixin of TensorDictBase: the attributes it reads (batch_size, get, _items_raw...) live on the final class, out of pyright's sight.
# pyright: reportAttributeAccessIssue=false

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .entries import _is_lazy_stack, _non_tensor, _probe, _shape_of
from .keys import is_leaf_nontensor
from .utils import NestedKey, _key_to_tuple

if TYPE_CHECKING:
    from ..base import TensorDictBase


def _count_bytes(tensor: torch.Tensor, out: list) -> None:
    from ..memmap import MemoryMappedTensor

    if type(tensor) not in (torch.Tensor, torch.nn.Parameter, MemoryMappedTensor) and hasattr(
        tensor, "__tensor_flatten__"
    ):
        for attr in tensor.__tensor_flatten__()[0]:  # nested (jagged) tensors and other wrappers
            part = getattr(tensor, attr)
            if part is not None:
                _count_bytes(part, out)
        return
    out.append(tensor)
    if tensor.is_leaf and tensor.grad is not None:  # .grad of a non-leaf warns (and is None)
        out.append(tensor.grad)


def _device_type(td: Any) -> str | None:
    return None if td.device is None else td.device.type


class IntrospectionMixin:
    """Entry classes and shapes, contiguity, data pointers, sizes, depth, device type."""

    __slots__ = ()

    # ------------------------------------------------------------------ introspection
    @property
    def sorted_keys(self) -> list:
        """The (top-level) keys, sorted."""
        return sorted(self.keys())

    def entry_class(self, key: NestedKey) -> type:
        """The class of the entry at ``key``, found without stacking lazy leaves."""
        value = _probe(self, key)
        return type(self.get(key)) if _non_tensor(value) else type(value)  # non-tensor: a lazy stack stacks them

    def get_item_shape(self, key: NestedKey) -> torch.Size:
        """The shape of a tensor entry (the batch size of a collection); lazy stacks mark ragged dims with ``-1``."""
        parts = _key_to_tuple(key)
        _probe(self, key)
        node = self
        for part in parts[:-1]:  # sub-collections of lazy stacks come back as lazy views
            node = node.get(part)
        if not _is_lazy_stack(node):
            return _shape_of(node.get(parts[-1]))
        shapes = [member.get_item_shape(parts[-1]) for member in node.tensordicts]
        first = list(shapes[0])
        for shape in shapes[1:]:
            if len(shape) != len(first):
                return torch.Size([-1])
            first = [a if a == b else -1 for a, b in zip(first, shape)]
        first.insert(node.stack_dim, len(shapes))
        return torch.Size(first)

    def is_contiguous(self) -> bool:
        """True when every tensor leaf is contiguous (a lazy stack never is)."""
        if _is_lazy_stack(self):
            return False
        return all(leaf.is_contiguous() for leaf in self._tensor_leaves()[1])

    def data_ptr(self, *, storage: bool = False) -> "TensorDictBase":
        """A TensorDict (same keys) of the leaves' ``data_ptr()`` (``untyped_storage().data_ptr()``
        with ``storage``); a lazy stack gives one sub-TensorDict per member, keyed ``"0"``, ``"1"``..."""
        from ..tensordict import TensorDict

        if _is_lazy_stack(self):
            entries = {str(i): member.data_ptr(storage=storage) for i, member in enumerate(self.tensordicts)}
        else:
            entries = {}
            for key, value in self._items_raw():
                if isinstance(value, torch.Tensor):
                    entries[key] = torch.tensor(value.untyped_storage().data_ptr() if storage else value.data_ptr())
                elif not value._is_non_tensor:
                    sub = value.data_ptr(storage=storage)
                    if not sub.is_empty():
                        entries[key] = sub
        return TensorDict._new_unsafe(entries, torch.Size(()), torch.device("cpu"))

    def param_count(self, *, count_duplicates: bool = True) -> int:
        """The number of tensor elements (``count_duplicates=False``: each tensor object once)."""
        leaves = self._tensor_leaves()[1]
        if not count_duplicates:
            leaves = list({id(t): t for t in leaves}.values())
        return sum(t.numel() for t in leaves)

    def bytes(self, *, count_duplicates: bool = True) -> int:
        """The bytes held by the tensor leaves (and their ``.grad``); see :meth:`param_count`."""
        tensors: list = []
        for leaf in self._tensor_leaves()[1]:
            _count_bytes(leaf, tensors)
        if not count_duplicates:
            tensors = list({id(t): t for t in tensors}.values())
        return sum(t.numel() * t.element_size() for t in tensors)

    @property
    def depth(self) -> int:
        """The deepest nesting level of a leaf (0 when no leaf sits in a sub-collection)."""
        return max((len(k) - 1 for k in self.keys(True, True, is_leaf_nontensor) if isinstance(k, tuple)), default=0)

    @property
    def is_cuda(self) -> bool:
        """True when the collection's device is a CUDA device."""
        return _device_type(self) == "cuda"

    @property
    def is_cpu(self) -> bool:
        """True when the collection's device is the CPU."""
        return _device_type(self) == "cpu"

    @property
    def is_meta(self) -> bool:
        """True when the collection's device is ``meta``."""
        return _device_type(self) == "meta"


__all__ = ["IntrospectionMixin"]
