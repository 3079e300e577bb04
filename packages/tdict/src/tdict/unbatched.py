"""UnbatchedTensor: a tensor stored in a collection without the collection's batch dims.

A TensorDict's entries start with its batch dims; an :class:`UnbatchedTensor` entry does not
(a lookup table, a shared embedding, per-run constants). Ops on the batch dims (indexing,
reshape, permute, unbind, split, stack, cat, gather, masking, ``td[index] = value`` ...) leave
its data whole: the result holds the same data, tagged with the result's batch size
(``ut.batch_size``). Data ops (arithmetic, ``clone``, ``to``, ``apply``, ``zero_`` ...) run on
the data itself, as on any tensor, and give UnbatchedTensors back.

Stacking or concatenating collections keeps the first member's UnbatchedTensor; a
``UserWarning`` says so when the members' data lie in different storages.

Differences from tensordict 0.14: ``td.batch_size = ...`` re-tags the UnbatchedTensors;
``masked_fill`` and ``where`` leave them whole (tensordict raises); under ``torch.vmap`` and
``torch.utils._pytree`` an UnbatchedTensor is not a pytree leaf (it rides in the TensorDict's
context, as non-tensor data does), so vmap never maps its dims and ``tree_map`` leaves it as it is.
Memory-mapping, saving and consolidating a collection that holds one raise
``NotImplementedError`` naming the key (as in tensordict).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import torch

from ._core.utils import parse_batch_size

__all__ = ["UnbatchedTensor"]

_Tensor = torch.Tensor
_DisableSubclass = torch._C.DisableTorchFunctionSubclass

# UnbatchedTensor and its subclasses: containers test ``type(value) in UNBATCHED_TYPES`` (a set
# lookup) on the entries that are not plain tensors.
UNBATCHED_TYPES: set[type] = set()


def _is_unbatched(value: Any) -> bool:
    """True for an :class:`UnbatchedTensor` (or a subclass)."""
    return type(value) in UNBATCHED_TYPES


def _pass_through(value: Any) -> bool:
    """True for the leaves that batch ops carry over whole: UnbatchedTensors and non-tensor data."""
    cls = type(value)
    return cls in UNBATCHED_TYPES or bool(getattr(cls, "_is_non_tensor", False))


def _first_unbatched(args: Any, kwargs: dict) -> Any:
    """The first UnbatchedTensor among the arguments (one level into lists and tuples), or None."""
    for value in (*args, *kwargs.values()):
        if type(value) in UNBATCHED_TYPES:
            return value
        if type(value) in (list, tuple):
            for item in value:
                if type(item) in UNBATCHED_TYPES:
                    return item
    return None


class UnbatchedTensor(torch.Tensor):
    """A tensor whose shape ignores the batch dims of the collection that holds it.

    Args:
        data: the tensor (or anything ``torch.as_tensor`` accepts). The result shares its storage.
        batch_size: the batch size of the collection it belongs to (``ut.batch_size``); set by the
            containers, default ``[]``. It never changes ``ut.shape``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict, UnbatchedTensor
        >>> td = TensorDict(obs=torch.zeros(4, 3), table=UnbatchedTensor(torch.arange(5.0)), batch_size=[4])
        >>> td[1:3]["table"].shape, td[1:3].get("table").batch_size
        (torch.Size([5]), torch.Size([2]))
        >>> torch.stack([td, td]).get("table").batch_size
        torch.Size([2, 4])
        >>> (td["table"] * 2).sum()
        UnbatchedTensor(tensor(20.))
    """

    _pass_through = True
    _batch_size: torch.Size | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        UNBATCHED_TYPES.add(cls)

    @staticmethod
    def __new__(cls, data: Any, batch_size: Any = None) -> "UnbatchedTensor":
        size = None if batch_size is None else parse_batch_size(batch_size)  # raises before anything is built
        if isinstance(data, UnbatchedTensor) and type(data) is cls:
            return data if size is None else data._with_batch_size(size)
        if not isinstance(data, torch.Tensor):
            try:
                data = torch.as_tensor(data)
            except (TypeError, ValueError, RuntimeError) as err:
                raise TypeError(
                    f"UnbatchedTensor: data must be a tensor or convertible to one, got {type(data).__name__}."
                ) from err
        if data.grad_fn is None:  # a leaf: the result is a leaf too (sharing the storage), so it gets .grad
            out = torch.Tensor._make_subclass(cls, data, data.requires_grad)
        else:  # a result of autograd-tracked ops: an alias that stays in the graph
            with _DisableSubclass():
                out = torch.Tensor.as_subclass(data, cls)
        if size is not None:
            out._batch_size = size
        return out

    # ---- the batch size of the owning collection
    @property
    def batch_size(self) -> torch.Size:
        """The batch size of the collection this tensor belongs to (``[]`` when standalone)."""
        size = self._batch_size
        return torch.Size(()) if size is None else size

    @batch_size.setter
    def batch_size(self, value: Any) -> None:
        self._batch_size = parse_batch_size(value)

    def _with_batch_size(self, batch_size: torch.Size) -> "UnbatchedTensor":
        """``self`` tagged with ``batch_size``: ``self`` when it already is, else a new alias of the data."""
        if self._batch_size == batch_size:
            return self
        with _DisableSubclass():
            out = torch.Tensor.as_subclass(self, type(self))
        out._batch_size = torch.Size(batch_size)
        return out

    def _plain(self) -> torch.Tensor:
        """The data as a plain tensor (an alias)."""
        with _DisableSubclass():
            return torch.Tensor.as_subclass(self, torch.Tensor)

    # ---- torch functions run on the data and give UnbatchedTensors back
    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if kwargs is None:
            kwargs = {}
        with _DisableSubclass():
            result = func(*args, **kwargs)
        if func is _BASE_GETTER:  # rewrapping a view's base would chain views without end
            return result
        return _rewrap(cls, result, args, kwargs)

    # ---- Python protocols: exactly those of the plain tensor
    def __repr__(self, *, tensor_contents: Any = None) -> str:
        return f"UnbatchedTensor({self._plain()!r})"

    def __str__(self) -> str:
        return str(self._plain())

    def __format__(self, format_spec: str) -> str:
        return format(self._plain(), format_spec)

    def __bool__(self) -> bool:
        return bool(self._plain())

    def __int__(self) -> int:
        return int(self._plain())

    def __float__(self) -> float:
        return float(self._plain())

    def __complex__(self) -> complex:
        return complex(self._plain())

    def __index__(self) -> int:
        return self._plain().__index__()

    def __round__(self, ndigits: Any = None) -> Any:
        plain: Any = self._plain()  # round() and math.trunc() raise as they do for a plain tensor
        return round(plain) if ndigits is None else round(plain, ndigits)

    def __trunc__(self) -> Any:
        plain: Any = self._plain()
        return math.trunc(plain)

    def __floor__(self) -> Any:
        return math.floor(self._plain())

    def __ceil__(self) -> Any:
        return math.ceil(self._plain())

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        return self._plain().__array__(*args, **kwargs)

    def item(self) -> Any:
        return self._plain().item()

    def tolist(self) -> Any:
        return self._plain().tolist()

    def numpy(self, *, force: bool = False) -> Any:
        return self._plain().numpy(force=force)

    def __deepcopy__(self, memo: dict) -> "UnbatchedTensor":
        if id(self) in memo:
            return memo[id(self)]
        out = type(self)(self._plain().__deepcopy__(memo), self._batch_size)
        memo[id(self)] = out
        return out

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return (_rebuild, (type(self), self._plain(), None if self._batch_size is None else tuple(self._batch_size)))


_BASE_GETTER = torch.Tensor._base.__get__  # pyright: ignore
UNBATCHED_TYPES.add(UnbatchedTensor)


def _rebuild(cls: type, data: torch.Tensor, batch_size: Any) -> UnbatchedTensor:
    return cls(data, batch_size)


def _wrap(cls: type, tensor: torch.Tensor, source: Any) -> UnbatchedTensor:
    out = tensor.as_subclass(cls)
    if source is not None and source._batch_size is not None:
        out._batch_size = source._batch_size
    return out


def _rewrap(cls: type, result: Any, args: Any, kwargs: dict) -> Any:
    """``func``'s result with its tensors as UnbatchedTensors (the batch size of the first input's)."""
    if isinstance(result, torch.Tensor):
        if type(result) in UNBATCHED_TYPES:
            return result
        out = kwargs.get("out")
        if result is out or any(result is a for a in args):  # an in-place op on another tensor
            return result
        return _wrap(cls, result, _first_unbatched(args, kwargs))
    if type(result) in (list, tuple) or isinstance(result, tuple) and hasattr(result, "n_fields"):
        first = args[0] if args else None
        if isinstance(first, (list, tuple)) and len(first) == len(result):
            # one result per input (torch._foreach_*): only the UnbatchedTensor inputs' results are theirs
            items = [
                _wrap(cls, r, s) if type(s) in UNBATCHED_TYPES and isinstance(r, torch.Tensor) else r
                for r, s in zip(result, first)
            ]
        else:
            source = _first_unbatched(args, kwargs)
            items = [
                _wrap(cls, r, source) if isinstance(r, torch.Tensor) and type(r) not in UNBATCHED_TYPES else r
                for r in result
            ]
        return type(result)(items)
    return result


def _combine_unbatched(values: Sequence, batch_size: torch.Size, key: Any, what: str) -> UnbatchedTensor:
    """The entry at ``key`` of ``what`` (stack / cat) of collections: the first member's
    UnbatchedTensor tagged with the result's batch size. Stacking warns when the data differ
    (concatenating does not, as in tensordict)."""
    first = values[0]
    for i, value in enumerate(values):
        if type(value) not in UNBATCHED_TYPES:
            raise TypeError(
                f"{what}: key {key!r} is an UnbatchedTensor in collection 0 but a {type(value).__name__} in collection {i}."
            )
    ptr = first.data_ptr()
    if what != "cat" and any(value.data_ptr() != ptr for value in values[1:]):
        warnings.warn(
            f"{what}: the UnbatchedTensors at key {key!r} hold different data storage; the first one's data is "
            "kept (an UnbatchedTensor is shared by the whole batch; use a regular tensor for per-element data).",
            UserWarning,
            stacklevel=3,
        )
    return first._with_batch_size(torch.Size(batch_size))


def _unbatched_error(what: str, key: Any) -> NotImplementedError:
    return NotImplementedError(
        f"{what}: UnbatchedTensor entries are not supported yet, but {key!r} is one. Exclude it first, e.g. with "
        f"td.exclude({key!r})."
    )
