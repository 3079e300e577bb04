"""Stacks of non-tensor data: :class:`NonTensorStack`, and stacking / concatenating non-tensor leaves.

A stack is stored as an integer tensor of the batch shape (``_origins``) whose entries point into
a list of payloads (``_table``). Every element that came from the same :class:`NonTensorData`
shares one id, so indexing, reshaping, permuting... are plain tensor ops on the ids, and an
element picked back out of the stack (``stack[i]``, ``unbind``) comes back as the original
:class:`NonTensorData` when all its ids agree.

:class:`NonTensorStack` is also importable from :mod:`tdict.non_tensor` (and :mod:`tdict`).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Iterator, Sequence

import torch

from ._core.utils import NO_DEFAULT, normalize_dim, parse_batch_size, parse_device
from ._core.indexing import index_on_cpu
from ._core.keys import is_leaf_nontensor
from .base import NON_TENSOR_CLASSES, TensorDictBase
from .non_tensor import _NOT_UNIQUE, NonTensorData, _deepcopy_payload, _NonTensorBase, _payload_equal

__all__ = ["LinkedList", "NonTensorStack"]


def _detached() -> None:
    return None


class LinkedList(list):
    """The payloads of a :class:`NonTensorStack` as a list (what ``td["key"]`` gives for a stacked
    non-tensor entry) that writes item assignments back into the stack.

    ``lst[i] = value`` and ``lst[a:b] = values`` also set those elements of the stack (in place:
    the entry the collection holds changes). An op that changes the list's length (``append``,
    ``extend``, ``insert``, ``pop``, ``remove``, ``clear``, ``del``, ``+=``) unlinks it: the list
    goes on as a plain copy. ``_td()`` is the linked stack, or ``None`` once unlinked. It compares,
    copies and pickles as the plain list it holds.

    Examples:
        >>> from tdict import TensorDict, NonTensorStack
        >>> td = TensorDict(a=NonTensorStack("foo", "bar"), batch_size=[2])
        >>> names = td["a"]
        >>> names
        LinkedList(['foo', 'bar'])
        >>> names[0] = "baz"
        >>> td["a"] == ["baz", "bar"], td[0]["a"]
        (True, 'baz')
    """

    __slots__ = ("_td",)

    def __init__(self, items: Any = (), *, td: Any = None) -> None:
        super().__init__(items)
        self._td = _detached if td is None else weakref.ref(td)

    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(index, value)
        stack = self._td()
        if stack is not None:
            region = stack._origins[index].shape
            if region and isinstance(value, (list, tuple)):  # several elements: one payload each
                value = NonTensorStack.from_list(list(value)) if region[0] else NonTensorStack(batch_size=region)
            new = stack._set_at(index, value)
            stack._origins, stack._table = new._origins, new._table

    def _unlink(self) -> None:
        self._td = _detached

    def append(self, item: Any) -> None:
        self._unlink()
        super().append(item)

    def extend(self, items: Any) -> None:
        self._unlink()
        super().extend(items)

    def insert(self, index: Any, item: Any) -> None:
        self._unlink()
        super().insert(index, item)

    def pop(self, index: Any = -1) -> Any:
        self._unlink()
        return super().pop(index)

    def remove(self, item: Any) -> None:
        self._unlink()
        super().remove(item)

    def clear(self) -> None:
        self._unlink()
        super().clear()

    def __delitem__(self, index: Any) -> None:
        self._unlink()
        super().__delitem__(index)

    def __iadd__(self, items: Any) -> "LinkedList":
        self._unlink()
        return super().__iadd__(items)

    def __repr__(self) -> str:
        return f"LinkedList({list.__repr__(self)})"

    __str__ = __repr__

    def __eq__(self, other: Any) -> bool:
        return list(self) == other

    def __ne__(self, other: Any) -> bool:
        return list(self) != other

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __reduce__(self) -> Any:
        return list, (list(self),)  # the link does not survive a copy or a pickle

    def __copy__(self) -> list:
        return list(self)


def _has_int(index: Any) -> bool:
    if type(index) is int:
        return True
    return type(index) is tuple and any(type(p) is int for p in index)


class NonTensorStack(_NonTensorBase):
    """A stack of non-tensor data whose elements may hold different payloads.

    ``torch.stack`` of :class:`NonTensorData` (or of TensorDicts holding them) builds one.
    ``td["key"]`` on a stacked entry gives nested lists of payloads; integer indexing gives the
    stacked element back (a :class:`NonTensorData` when it came from one).

    Args:
        *items: :class:`NonTensorData` / :class:`NonTensorStack` with the same batch size, or plain
            Python objects (each one a 0-dim element).
        stack_dim: the new dim (default 0).

    Examples:
        >>> import torch
        >>> from tdict import NonTensorData, NonTensorStack
        >>> s = torch.stack([NonTensorData("a"), NonTensorData("b")])
        >>> s.tolist(), s[1].data
        (['a', 'b'], 'b')
        >>> NonTensorStack.from_list([["a", "b"], ["c", "d"]])[:, 1].tolist()
        ['b', 'd']
    """

    __slots__ = ("_origins", "_table", "_device", "_names", "_is_locked", "__weakref__")
    _is_lazy = True

    def __init__(self, *items: Any, stack_dim: int = 0, batch_size: Any = None, device: Any = NO_DEFAULT) -> None:
        if not items:
            origins, table = (
                torch.zeros(parse_batch_size(batch_size) if batch_size is not None else (0,), dtype=torch.long),
                [],
            )
            dev = None
        else:
            # plain Python objects are stacked as 0-dim NonTensorData, as in tensordict
            items = tuple(item if isinstance(item, TensorDictBase) else NonTensorData(item) for item in items)
            first = items[0]
            dim = normalize_dim(stack_dim, first.batch_dims + 1, "stack_dim")
            built = _stack_non_tensor(list(items), dim, None)
            origins, table, dev = built._origins, built._table, built._device
            if batch_size is not None and parse_batch_size(batch_size) != origins.shape:
                raise RuntimeError(
                    f"NonTensorStack: batch_size {list(batch_size)} does not match the stacked size {list(origins.shape)}."
                )
        self._origins = origins
        self._table = table
        self._device = parse_device(device) if device is not NO_DEFAULT else dev
        self._names = None
        self._is_locked = False

    @classmethod
    def _new(cls, origins: torch.Tensor, table: list, device: Any, names: Any = None) -> "NonTensorStack":
        self = object.__new__(cls)
        self._origins = origins
        self._table = table
        self._device = device
        self._names = names
        self._is_locked = False
        return self

    @classmethod
    def from_list(cls, data: list, device: Any = None, names: Any = None) -> "NonTensorStack":
        """A stack from (rectangular) nested lists: every non-list item is one element.

        Examples:
            >>> NonTensorStack.from_list([["a", "b"], ["c", "d"]]).batch_size
            torch.Size([2, 2])
        """
        if not isinstance(data, (list, tuple)):
            raise TypeError(f"from_list expects a (nested) list, got {type(data).__name__}.")
        shape: list[int] = []
        node: Any = data
        while isinstance(node, (list, tuple)):
            shape.append(len(node))
            if not node:
                break
            node = node[0]
        table: list = []

        def flatten(item: Any, depth: int) -> None:
            if depth == len(shape):
                if isinstance(item, (list, tuple)) and depth < len(shape):
                    raise ValueError("from_list: the nested lists are not rectangular.")
                table.append(item)
                return
            if not isinstance(item, (list, tuple)) or len(item) != shape[depth]:
                raise ValueError(
                    f"from_list: the nested lists are not rectangular (expected length {shape[depth]} at depth {depth})."
                )
            for sub in item:
                flatten(sub, depth + 1)

        flatten(data, 0)
        origins = torch.arange(len(table), dtype=torch.long).reshape(shape)
        out = cls._new(origins, table, parse_device(device))
        if names is not None:
            out.names = names
        return out

    # ---- batch size
    @property
    def batch_size(self) -> torch.Size:
        return self._origins.shape

    @batch_size.setter
    def batch_size(self, new: Any) -> None:
        new = parse_batch_size(new)
        if new != self._origins.shape:
            raise RuntimeError(
                f"Cannot set the batch size of a NonTensorStack of size {list(self.batch_size)} to {list(new)}: use reshape."
            )

    @property
    def stack_dim(self) -> int:
        """The dim the elements are stacked along: always 0."""
        return 0

    @property
    def tensordicts(self) -> list:
        """The stacked elements along dim 0."""
        return [self._index(i) for i in range(self.batch_size[0])] if self.batch_dims else []

    def _with_batch_size(self, batch_size: torch.Size) -> Any:
        shape = self._origins.shape
        if batch_size == shape or shape[: len(batch_size)] == batch_size:
            return self  # a stack may carry more dims than its parent
        unique = self._unique_payload()
        if unique is not _NOT_UNIQUE:
            return NonTensorData._new(unique, torch.Size(batch_size), self._device)
        raise RuntimeError(
            f"A NonTensorStack of batch size {list(shape)} with different payloads cannot take the batch size {list(batch_size)}."
        )

    def _emptied(self, batch_size: torch.Size) -> "NonTensorStack":
        """A stack of ``batch_size`` to be filled (``new_empty(..., empty_lazy=True)``): every element
        holds the same placeholder, this stack's first payload (``None`` when it has none)."""
        flat = self._origins.reshape(-1)
        placeholder = self._table[int(flat[0])] if flat.numel() else None
        return NonTensorStack._new(torch.zeros(batch_size, dtype=torch.long), [placeholder], self._device)

    def _unique_payload(self) -> Any:
        """The payload every element holds (by ``==``), or ``_NOT_UNIQUE``."""
        flat = self._origins.reshape(-1)
        if not flat.numel():
            return _NOT_UNIQUE
        first = self._table[int(flat[0])]
        if bool((flat == flat[0]).all()):
            return first
        for i in torch.unique(flat).tolist():
            if not _payload_equal(first, self._table[i]):
                return _NOT_UNIQUE
        return first

    def _wrap(self, origins: torch.Tensor, collapse: bool, names: Any = None) -> Any:
        """An element (NonTensorData) for a 0-dim result or a uniform picked element, else a stack."""
        if origins.dim() == 0:
            return NonTensorData._new(self._table[int(origins)], torch.Size(()), self._device)
        if collapse and origins.numel():
            flat = origins.reshape(-1)
            first = flat[0]
            if bool((flat == first).all()):
                return NonTensorData._new(self._table[int(first)], origins.shape, self._device)
        return NonTensorStack._new(origins, self._table, self._device, names)

    def _map_entries(self, fn: Callable, batch_size: torch.Size, names: Any = None) -> "NonTensorStack":
        origins = fn(self._origins)
        if origins.shape != batch_size:  # pragma: no cover - a shape op that maps leaves inconsistently
            raise RuntimeError(f"NonTensorStack: op produced shape {list(origins.shape)}, expected {list(batch_size)}.")
        return NonTensorStack._new(origins, self._table, self._device, names)

    def _index(self, index: Any) -> Any:
        if isinstance(index, list) or type(index).__module__ == "numpy":
            index = torch.as_tensor(index)
        return self._wrap(self._origins[index_on_cpu(index)], _has_int(index))

    def _split_entries(self, fn: Callable, sizes: Sequence[torch.Size], names: Any = None) -> tuple:
        ndim = self._origins.dim()
        return tuple(self._wrap(part, part.dim() < ndim) for part in fn(self._origins))

    def __iter__(self) -> Iterator:
        if not self._origins.dim():
            raise TypeError("iteration over a NonTensorStack with an empty batch size.")
        for i in range(self._origins.shape[0]):
            yield self._index(i)

    # ---- copies
    def _compact(self) -> tuple[torch.Tensor, list]:
        """Ids renumbered densely over the payloads actually used (sub-stacks share big tables)."""
        if len(self._table) < 2:
            return self._origins, self._table
        used, inverse = torch.unique(self._origins, return_inverse=True)
        if used.numel() == len(self._table):
            return self._origins, self._table
        return inverse.reshape(self._origins.shape), [self._table[i] for i in used.tolist()]

    def clone(self, recurse: bool = True, *, device: Any = None) -> "NonTensorStack":
        """A copy; payloads are deep-copied unless ``recurse=False``; ``device``: the copy's device."""
        origins, table = self._compact()
        if recurse:
            table = [_deepcopy_payload(p) for p in table]
            origins = origins.clone()
        return NonTensorStack._new(
            origins, list(table), self._device if device is None else parse_device(device), self._names
        )

    def copy(self) -> "NonTensorStack":
        return NonTensorStack._new(self._origins, self._table, self._device, self._names)

    def contiguous(self, *, canonical: bool = False, inplace: bool = False) -> "NonTensorStack":
        """``self``: a stack of payloads has no memory layout to make contiguous (as in tensordict)."""
        return self

    # ---- conversion, comparison, display
    def update_(self, input_dict_or_td: Any, clone: bool = False, *, keys_to_update: Any = None) -> "NonTensorStack":
        """Replace every element (``set_`` on a stacked non-tensor entry): ``value`` is a payload,
        a :class:`NonTensorData` or a :class:`NonTensorStack` broadcastable to the batch size."""
        new = self._set_at(Ellipsis, input_dict_or_td)
        self._origins, self._table = new._origins, new._table
        return self

    def update(
        self,
        input_dict_or_td: Any,
        clone: bool = False,
        inplace: bool = False,
        *,
        keys_to_update: Any = None,
        non_blocking: bool = False,
        is_leaf: Any = None,
        update_batch_size: bool = False,
        ignore_lock: bool = False,
    ) -> "NonTensorStack":
        if self._is_locked and not ignore_lock:
            raise RuntimeError("Cannot update a locked NonTensorStack.")
        return self.update_(input_dict_or_td)

    def tolist(self) -> list:
        """The payloads as nested lists of the batch shape."""
        table = self._table
        ids = self._origins.tolist()

        def build(node):
            return [build(n) for n in node] if type(node) is list else table[node]

        return build(ids)

    @property
    def data(self) -> Any:
        """The payload when all elements share it; raises otherwise (use :meth:`tolist`)."""
        unique = self._unique_payload()
        if unique is _NOT_UNIQUE:
            raise AttributeError("Cannot get the non-unique data of a NonTensorStack. Use .tolist() instead.")
        return unique

    def _linked_list(self) -> Any:
        """What ``td[key]`` gives for this entry: a :class:`LinkedList` of the payloads (nested lists
        for more than one dim), linked to ``self``."""
        return LinkedList(self.tolist(), td=self) if self._origins.dim() else self.tolist()

    def to_dict(self, *, retain_none: bool = True, convert_tensors: bool = False) -> list:
        return self.tolist()

    def __eq__(self, other: Any) -> torch.Tensor:
        """A bool tensor of the batch shape comparing payloads element by element."""
        mine = self._origins
        if type(other) is NonTensorStack:
            a, b = torch.broadcast_tensors(mine, other._origins)
            pairs, inverse = torch.unique(torch.stack([a.reshape(-1), b.reshape(-1)], 1), dim=0, return_inverse=True)
            verdict = torch.tensor(
                [_payload_equal(self._table[i], other._table[j]) for i, j in pairs.tolist()], dtype=torch.bool
            )
            return verdict[inverse].reshape(a.shape) if verdict.numel() else torch.zeros(a.shape, dtype=torch.bool)
        single = isinstance(other, NonTensorData)
        payload = other.data if single else other
        if single and other.batch_size != mine.shape:
            mine = mine.expand(torch.broadcast_shapes(mine.shape, other.batch_size))
        used, inverse = torch.unique(mine, return_inverse=True)
        verdict = torch.tensor([_payload_equal(self._table[i], payload) for i in used.tolist()], dtype=torch.bool)
        return verdict[inverse].reshape(mine.shape) if verdict.numel() else torch.zeros(mine.shape, dtype=torch.bool)

    def __repr__(self) -> str:
        text = str(self.tolist())
        if len(text) > 50:
            text = text[:50] + "..."
        return f"NonTensorStack(\n    {text},\n    batch_size={self.batch_size},\n    device={self._device})"

    def __getstate__(self):
        origins, table = self._compact()
        return {
            "origins": origins.tolist(),
            "shape": tuple(origins.shape),
            "table": table,
            "device": self._device,
            "names": self._names,
            "locked": self._is_locked,
        }

    def __setstate__(self, state):
        self._origins = torch.tensor(state["origins"], dtype=torch.long).reshape(state["shape"])
        self._table = state["table"]
        self._device = state["device"]
        self._names = state["names"]
        self._is_locked = state["locked"]


def _as_origins(item: Any, table: list, what: str, i: int) -> torch.Tensor:
    """Append ``item``'s payloads to ``table`` and return its ids (a tensor of its batch shape)."""
    kind = type(item)
    if kind is NonTensorData or isinstance(item, NonTensorData):
        ids = torch.full(item._batch_size, len(table), dtype=torch.long)
        table.append(item.data)
        return ids
    if kind is NonTensorStack:
        origins, sub_table = item._compact()
        ids = origins + len(table)
        table.extend(sub_table)
        return ids
    raise TypeError(
        f"{what}: element {i} is a {kind.__name__}; non-tensor data can only be combined with non-tensor data."
    )


def _stack_non_tensor(items: Sequence, dim: int, out: Any) -> Any:
    """``torch.stack`` of non-tensor data: always a :class:`NonTensorStack` (tensordict 0.14)."""
    shape = items[0].batch_size
    for i, item in enumerate(items):
        if getattr(type(item), "_is_non_tensor", False) and item.batch_size != shape:
            raise RuntimeError(
                f"stack: non-tensor element {i} has batch size {list(item.batch_size)}, element 0 has {list(shape)}."
            )
    table: list = []
    ids = [_as_origins(item, table, "stack", i) for i, item in enumerate(items)]
    result = NonTensorStack._new(torch.stack(ids, dim), table, items[0].device)
    return _write_out(result, out, "stack")


def _cat_non_tensor(items: Sequence, dim: int, out: Any) -> Any:
    """``torch.cat`` of non-tensor data; all-equal :class:`NonTensorData` give one NonTensorData."""
    shape = items[0].batch_size
    for i, item in enumerate(items):
        other = item.batch_size if getattr(type(item), "_is_non_tensor", False) else None
        if (
            other is None
            or len(other) != len(shape)
            or other[:dim] != shape[:dim]
            or other[dim + 1 :] != shape[dim + 1 :]
        ):
            raise RuntimeError(
                f"cat: element {i} ({type(item).__name__}) has batch size {list(other) if other is not None else '?'}, incompatible with {list(shape)} along dim {dim}."
            )
    first = items[0]
    if all(type(item) is NonTensorData for item in items) and all(
        _payload_equal(first.data, item.data) for item in items[1:]
    ):
        new_bs = shape[:dim] + (sum(item.batch_size[dim] for item in items),) + shape[dim + 1 :]
        result: Any = NonTensorData._new(first.data, torch.Size(new_bs), first.device)
    else:
        table: list = []
        ids = [_as_origins(item, table, "cat", i) for i, item in enumerate(items)]
        result = NonTensorStack._new(torch.cat(ids, dim), table, first.device)
    return _write_out(result, out, "cat")


def _write_out(result: Any, out: Any, what: str) -> Any:
    if out is None:
        return result
    if out.batch_size != result.batch_size:
        raise RuntimeError(
            f"{what}(out=...): out has batch size {list(out.batch_size)}, the result has {list(result.batch_size)}."
        )
    if type(out) is NonTensorStack:
        if isinstance(result, NonTensorData):
            out._origins, out._table = torch.zeros(result.batch_size, dtype=torch.long), [result.data]
        else:
            out._origins, out._table = result._origins, result._table
        return out
    if isinstance(out, NonTensorData):
        unique = result.data if isinstance(result, NonTensorData) else result._unique_payload()
        if unique is _NOT_UNIQUE:
            raise TypeError(f"{what}(out=...): out is a NonTensorData but the elements hold different payloads.")
        out.data = unique
        return out
    raise TypeError(f"{what}(out=...): out must be non-tensor data, got {type(out).__name__}.")


NON_TENSOR_CLASSES.add(NonTensorStack)


def list_to_stack(items: list, device: Any = None) -> Any:
    """What a non-empty Python list that is not numeric becomes in a collection (tensordict's
    ``list_to_stack`` rule): collections of one shape stacked densely, tensors of one shape stacked,
    anything else a :class:`NonTensorStack` of the items (nested lists of one length give its inner
    dims), so that indexing the collection indexes the list.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict({"text": ["a", "b", "c"]}, [3])
        >>> td[1]["text"], td.get("text").batch_size
        ('b', torch.Size([3]))
    """
    if all(isinstance(item, torch.Tensor) for item in items) and len({item.shape for item in items}) == 1:
        return torch.stack(items).to(device) if device is not None else torch.stack(items)
    if all(not is_leaf_nontensor(type(item)) for item in items):  # tensor collections, tensor classes
        return torch.stack(items)
    try:
        return NonTensorStack.from_list(items, device=device)
    except ValueError:  # ragged nested lists: one item per element of the outer list
        return NonTensorStack(*items, device=device)
