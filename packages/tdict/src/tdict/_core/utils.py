"""Small helpers shared by the container classes: keys, batch sizes, devices, dims."""

from __future__ import annotations

import enum
from typing import Any, Sequence, Tuple, Union

import torch

from ..errors import DimError

NestedKey = Union[str, Tuple[str, ...]]


class _NoDefault(enum.Enum):
    """Sentinel for "no default given" (``None`` is a legitimate default).

    An enum member so that torch.compile (Dynamo) can treat it as a constant wherever it appears.
    """

    NO_DEFAULT = 0

    def __repr__(self) -> str:
        return "NO_DEFAULT"

    def __bool__(self) -> bool:
        return False


NO_DEFAULT = _NoDefault.NO_DEFAULT


class _Missing(enum.Enum):
    # An enum member so that torch.compile (Dynamo) treats the sentinel as a constant.
    MISSING = 0

    def __repr__(self):
        return "MISSING"


_MISSING = _Missing.MISSING


def is_tensor_collection(obj: Any) -> bool:
    """True for TensorDicts, lazy stacks, tensorclasses and non-tensor data, and for their classes."""
    if getattr(type(obj), "_is_tensor_collection", False):  # instances first: the hot case
        return True
    return isinstance(obj, type) and getattr(obj, "_is_tensor_collection", False)


def content_of(collection: Any) -> Any:
    """The TensorDict that holds a collection's entries (a tensor class wraps one); any other value as it is."""
    return collection._tensordict if getattr(type(collection), "_is_tensorclass", False) else collection


def unravel_key(key: Any) -> NestedKey:
    """Normalise a nested key: ``("a",)`` -> ``"a"``, ``("a", ("b", "c"))`` -> ``("a", "b", "c")``.

    Examples:
        >>> unravel_key(("a", ("b", "c")))
        ('a', 'b', 'c')
    """
    if type(key) is str:
        return key
    parts = _key_to_tuple(key)
    return parts[0] if len(parts) == 1 else parts


def _key_to_tuple(key: Any) -> tuple[str, ...]:
    if type(key) is str:
        return (key,)
    if type(key) is tuple and key:  # already flat: the common case
        for part in key:
            if type(part) is not str:
                break
        else:
            return key
    if isinstance(key, tuple):
        out: list[str] = []
        for part in key:
            if type(part) is str or isinstance(part, str):
                out.append(part)
            elif isinstance(part, tuple):
                out.extend(_key_to_tuple(part))
            else:
                raise TypeError(
                    f"Nested keys are made of strings, got {part!r} ({type(part).__name__}) in key {key!r}."
                )
        if not out:
            raise KeyError("The empty tuple is not a valid key.")
        return tuple(out)
    if isinstance(key, str):
        return (str(key),)
    raise TypeError(f"Keys are strings or tuples of strings, got {key!r} ({type(key).__name__}).")


def is_nested_key(key: Any) -> bool:
    """True when ``key`` is a string or a (possibly nested) tuple of strings."""
    if isinstance(key, str):
        return True
    if isinstance(key, tuple) and key:
        return all(isinstance(k, str) or (isinstance(k, tuple) and is_nested_key(k)) for k in key)
    return False


def parse_batch_size(batch_size: Any) -> torch.Size:
    """``batch_size`` as a ``torch.Size``; ``ValueError`` naming it for a negative dim (a
    ``torch.Size`` too: ``torch.Size([-1])`` is a valid Size but not a valid batch size)."""
    if batch_size is None:
        return torch.Size(())
    if type(batch_size) is torch.Size:
        size = batch_size
    else:
        if isinstance(batch_size, int):
            batch_size = (batch_size,)
        try:
            size = torch.Size(batch_size)
        except (TypeError, ValueError) as err:
            raise TypeError(f"batch_size must be a sequence of non-negative ints, got {batch_size!r}.") from err
    for dim in size:
        if dim < 0:
            raise ValueError(f"batch_size must be a sequence of non-negative ints, got {list(size)}.")
    return size


def parse_device(device: Any) -> torch.device | None:
    if device is None:
        return None
    if isinstance(device, int):
        return torch.device("cuda", device)
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return device


def check_names(value: Sequence[str | None], ndim: int) -> list:
    """Validate dim names: one per batch dim, the non-None ones unique."""
    value = list(value)
    if len(value) != ndim:
        raise ValueError(
            f"names: the length of the dimension names must equate the tensordict batch_dims: expected {ndim} "
            f"names (one per batch dim), got {len(value)}: {value}."
        )
    named = [v for v in value if v is not None]
    if len(set(named)) != len(named):
        raise ValueError(f"names must be unique, got {value}.")
    return value


def normalize_dim(dim: int, ndim: int, name: str = "dim") -> int:
    """Map a possibly negative batch dim into ``[0, ndim)`` with a clear error."""
    if not isinstance(dim, int):
        raise TypeError(f"{name} must be an int, got {dim!r} ({type(dim).__name__}).")
    if dim < 0:
        dim += ndim
    if not 0 <= dim < ndim:
        raise DimError(f"{name}={dim if dim >= 0 else dim - ndim} is out of range for a batch of {ndim} dims.")
    return dim


def normalize_dims(dims: Sequence[int] | int, ndim: int) -> tuple[int, ...]:
    if isinstance(dims, int):
        dims = (dims,)
    return tuple(normalize_dim(d, ndim) for d in dims)


def leaf_shape(value: Any) -> torch.Size:
    """The full shape of a leaf tensor, or the batch size of a nested collection."""
    return value.shape if isinstance(value, torch.Tensor) else value.batch_size


def parse_to_args(args: tuple, kwargs: dict) -> tuple:
    """``to(...)`` arguments as ``(device, dtype, non_blocking, batch_size)``."""
    device = dtype = batch_size = other = None
    non_blocking = False
    if kwargs:  # (most calls pass positional arguments only)
        device = kwargs.pop("device", None)
        dtype = kwargs.pop("dtype", None)
        non_blocking = kwargs.pop("non_blocking", False)
        batch_size = kwargs.pop("batch_size", None)
        other = kwargs.pop("other", None)
        if kwargs:
            raise TypeError(f"to(): unexpected arguments {sorted(kwargs)}.")
    if other is None:
        pass
    elif is_tensor_collection(other):  # to(other=td): its device, and its dtype when all its leaves share one
        device, dtype = other.device, getattr(other, "dtype", None)
    else:
        args = (*args, other)
    for arg in args:
        if arg is None:  # to(None): nothing to move to (tensordict returns the collection unchanged)
            continue
        if isinstance(arg, torch.dtype):
            dtype = arg
        elif isinstance(arg, (str, torch.device, int)):
            device = arg
        elif isinstance(arg, torch.Tensor):
            device, dtype = arg.device, arg.dtype
        elif is_tensor_collection(arg):
            device = arg.device
        elif isinstance(arg, bool):
            non_blocking = arg
        else:
            raise TypeError(f"to(): cannot interpret argument {arg!r}.")
    return parse_device(device), dtype, non_blocking, batch_size


def unravel_keys(*keys: NestedKey) -> NestedKey | tuple:
    """``unravel_key`` of one key, or the tuple of each key unravelled (tensordict's ``unravel_keys``).

    Examples:
        >>> unravel_keys(("a", ("b",))), unravel_keys("a", ("b", ("c",)))
        (('a', 'b'), ('a', ('b', 'c')))
    """
    if len(keys) == 1:
        return unravel_key(keys[0])
    return tuple(unravel_key(key) for key in keys)


def unravel_key_list(keys: Sequence[NestedKey]) -> list:
    """Every key of ``keys`` unravelled (``("a", ("b",))`` -> ``["a", "b"]``; ``(("a", "b"),)`` -> ``[("a", "b")]``)."""
    if isinstance(keys, str):
        raise TypeError(f"unravel_key_list: expected a sequence of keys, got the string {keys!r} (wrap it in a list).")
    out = []
    for i, key in enumerate(keys):
        try:
            out.append(unravel_key(key))
        except (TypeError, KeyError) as err:
            raise TypeError(f"unravel_key_list: element {i} ({key!r}) is not a valid key: {err}") from None
    return out
