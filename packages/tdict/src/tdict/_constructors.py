"""Building collections from other data: dicts, keys, tuples, namedtuples, dataclasses, pytrees,
numpy structured arrays; merging, stacking and comparing collections.

Module-level functions exported by :mod:`tdict`; the ``TensorDict.from_*`` / ``fromkeys``
classmethods delegate here. Semantics follow tensordict 0.14; where ``batch_size`` is not given,
``auto_batch_size`` picks the largest leading shape the entries share (``batch_dims`` caps it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable, Sequence

import torch

from ._keys import default_is_leaf, is_leaf_nontensor  # noqa: F401  (default_is_leaf: re-exported)
from ._utils import NestedKey, is_tensor_collection, normalize_dim, unravel_key
from .lazy import LazyStackedTensorDict, lazy_stack
from .non_tensor_stack import NonTensorStack
from .tensordict import TensorDict

__all__ = [
    "assert_allclose_td",
    "assert_close",
    "default_is_leaf",
    "dense_stack_tds",
    "from_any",
    "from_dataclass",
    "from_dict",
    "from_namedtuple",
    "from_pytree",
    "from_struct_array",
    "from_tuple",
    "fromkeys",
    "make_tensordict",
    "maybe_dense_stack",
    "merge_tensordicts",
    "to_pytree",
    "unravel_key_list",
]

_PYTREE_TYPE = "_pytree_type"
_NON_NESTED = "<NON_NESTED>"


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and (hasattr(type(obj), "_fields") or type(obj).__module__ == "torch.return_types")


def _namedtuple_fields(obj: Any) -> dict:
    if hasattr(obj, "_asdict"):
        return dict(obj._asdict())
    return dict(zip(type(obj).__match_args__, obj))  # torch.return_types (structseq)


def _finish(td: TensorDict, auto_batch_size: bool, batch_dims: int | None, batch_size: Any, what: str) -> TensorDict:
    if auto_batch_size:
        if batch_size is not None:
            raise TypeError(f"{what}: pass batch_size or auto_batch_size=True, not both.")
        td.auto_batch_size_(batch_dims)
    return td


def _convert(value: Any, device: Any, batch_size: Any) -> Any:
    """A container value as the collection (or tensor) ``from_any`` makes of it; other values as they are."""
    if isinstance(value, (dict, tuple)) or dataclasses.is_dataclass(value) and not isinstance(value, type):
        return from_any(value, device=device, batch_size=batch_size)
    if isinstance(value, list):
        try:
            return torch.as_tensor(value, device=device)
        except (TypeError, ValueError, RuntimeError):
            return NonTensorStack.from_list(value) if value else value
    if type(value).__module__ == "numpy" and getattr(getattr(value, "dtype", None), "names", None):
        return from_struct_array(value, device=device)
    return value


# ---------------------------------------------------------------------------- from_*
def from_dict(
    input_dict: Any,
    batch_size: Any = None,
    device: Any = None,
    batch_dims: int | None = None,
    names: Any = None,
    *,
    auto_batch_size: bool | None = None,
) -> Any:
    """A TensorDict from a (nested) dict; tuples, namedtuples, dataclasses and lists inside are converted too.

    Without ``batch_size`` the largest common leading shape is used (``auto_batch_size=False``:
    an empty batch size), at most ``batch_dims`` dims. A tensor collection is returned as is.

    Examples:
        >>> import torch
        >>> from tdict import from_dict
        >>> from_dict({"a": torch.zeros(3, 4), "b": {"c": torch.zeros(3, 4, 5)}}).batch_size
        torch.Size([3, 4])
    """
    if is_tensor_collection(input_dict):
        return input_dict
    if not isinstance(input_dict, Mapping):
        raise TypeError(f"from_dict: input_dict must be a mapping, got {type(input_dict).__name__}.")
    if batch_size is not None and batch_dims is not None:
        raise ValueError(f"from_dict: pass batch_size or batch_dims, not both (got {batch_size!r} and {batch_dims!r}).")
    source = {k: _convert(v, device, batch_size) for k, v in input_dict.items()}
    if batch_size is None and auto_batch_size is False:
        return TensorDict(source, device=device, names=names)
    return TensorDict.from_dict(source, batch_size=batch_size, device=device, batch_dims=batch_dims, names=names)


def fromkeys(keys: Sequence[NestedKey], value: Any = 0) -> TensorDict:
    """A TensorDict (empty batch size) holding ``value`` under every key (nested keys create sub-TensorDicts).

    Examples:
        >>> from tdict import fromkeys
        >>> fromkeys(["a", ("b", "c")], 1)["b", "c"]
        tensor(1)
    """
    keys = unravel_key_list(keys)
    return TensorDict(dict.fromkeys(keys, value))


def from_namedtuple(
    named_tuple: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> TensorDict:
    """A TensorDict of a namedtuple's fields (also ``torch.return_types``), converted recursively."""
    if not _is_namedtuple(named_tuple):
        raise TypeError(f"from_namedtuple: expected a namedtuple instance, got {type(named_tuple).__name__}.")
    source = {k: _convert(v, device, batch_size) for k, v in _namedtuple_fields(named_tuple).items()}
    return _finish(
        TensorDict(source, batch_size=batch_size, device=device),
        auto_batch_size,
        batch_dims,
        batch_size,
        "from_namedtuple",
    )


def from_tuple(
    obj: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> TensorDict:
    """A TensorDict with keys ``"0"``, ``"1"``... holding the converted elements of a tuple (or list).

    Examples:
        >>> import torch
        >>> from tdict import from_tuple
        >>> sorted(from_tuple((torch.zeros(3), {"k": torch.ones(3)}), auto_batch_size=True).keys())
        ['0', '1']
    """
    if not isinstance(obj, (tuple, list)):
        raise TypeError(f"from_tuple: expected a tuple or a list, got {type(obj).__name__}.")
    source = {str(i): _convert(v, device, batch_size) for i, v in enumerate(obj)}
    return _finish(
        TensorDict(source, batch_size=batch_size, device=device), auto_batch_size, batch_dims, batch_size, "from_tuple"
    )


def td_from_dataclass(
    dataclass: Any,
    *,
    dest_cls: Any = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> TensorDict:
    """A TensorDict of a dataclass instance's fields (what ``TensorDict.from_dataclass`` returns)."""
    if not dataclasses.is_dataclass(dataclass) or isinstance(dataclass, type):
        raise TypeError(f"from_dataclass: expected a dataclass instance, got {dataclass!r}.")
    source = {f.name: _convert(getattr(dataclass, f.name), device, batch_size) for f in dataclasses.fields(dataclass)}
    return _finish(
        TensorDict(source, batch_size=batch_size, device=device),
        auto_batch_size,
        batch_dims,
        batch_size,
        "from_dataclass",
    )


_TC_CACHE: dict = {}


def _tensorclass_for(dc_type: type) -> type:
    """A tensor class with ``dc_type``'s fields and defaults (built once per dataclass type)."""
    from .tensorclass import TensorClass

    cls = _TC_CACHE.get(dc_type)
    if cls is None:
        ns: dict = {
            "__annotations__": {},
            "__module__": dc_type.__module__,
            "__doc__": f"Tensor class made from {dc_type.__qualname__}.",
        }
        for f in dataclasses.fields(dc_type):
            ns["__annotations__"][f.name] = f.type
            if f.default is not dataclasses.MISSING:
                ns[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                ns[f.name] = dataclasses.field(default_factory=f.default_factory)
        cls = _TC_CACHE[dc_type] = type(f"{dc_type.__name__}_tc", (TensorClass,), ns)
    return cls


def from_dataclass(
    obj: Any,
    *,
    dest_cls: type | None = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
    device: Any = None,
) -> Any:
    """A tensor class made from a dataclass: a class for a dataclass type, an instance for an instance.

    ``dest_cls`` (a tensor class) receives the fields instead of a generated ``<Name>_tc`` class.

    Examples:
        >>> import dataclasses, torch
        >>> from tdict import from_dataclass, is_tensorclass
        >>> @dataclasses.dataclass
        ... class Point:
        ...     x: torch.Tensor
        ...     label: str = "p"
        >>> p = from_dataclass(Point(torch.zeros(3)), auto_batch_size=True)
        >>> is_tensorclass(p), p.batch_size, p.label
        (True, torch.Size([3]), 'p')
    """
    from .tensorclass import is_tensorclass

    if not dataclasses.is_dataclass(obj):
        raise TypeError(f"from_dataclass: expected a dataclass type or instance, got {type(obj).__name__}.")
    if dest_cls is not None and not is_tensorclass(dest_cls):
        raise TypeError(f"from_dataclass: dest_cls must be a tensor class, got {dest_cls!r}.")
    if isinstance(obj, type):
        return dest_cls if dest_cls is not None else _tensorclass_for(obj)
    if is_tensorclass(obj):
        return obj
    cls = dest_cls if dest_cls is not None else _tensorclass_for(type(obj))
    values = {f.name: _convert(getattr(obj, f.name), device, batch_size) for f in dataclasses.fields(obj)}
    out = cls(**values, batch_size=batch_size, device=device)
    _finish(out._tensordict, auto_batch_size, batch_dims, batch_size, "from_dataclass")
    return out


def from_struct_array(
    struct_array: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> TensorDict:
    """A TensorDict of a numpy structured array: one entry per field, batch size the array's shape."""
    names = getattr(getattr(struct_array, "dtype", None), "names", None)
    if not names:
        raise TypeError(f"from_struct_array: expected a numpy structured array, got {type(struct_array).__name__}.")
    source = {}
    for name in names:
        field = struct_array[name]
        source[name] = (
            from_struct_array(field, device=device)
            if field.dtype.names
            else torch.as_tensor(field.copy(), device=device)
        )
    out = TensorDict(source, batch_size=struct_array.shape if batch_size is None else batch_size, device=device)
    return _finish(out, auto_batch_size, batch_dims, None, "from_struct_array")


def from_any(
    obj: Any,
    *,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    device: Any = None,
    batch_size: Any = None,
) -> Any:
    """Convert dicts, namedtuples, tuples, dataclasses and numpy structured arrays to TensorDicts.

    Tensor collections and tensors come back as they are; lists become a tensor when numeric,
    else a :class:`~tdict.NonTensorStack`; any other object is returned unchanged.

    Examples:
        >>> import collections, torch
        >>> from tdict import from_any
        >>> Obs = collections.namedtuple("Obs", ["pos", "vel"])
        >>> from_any(Obs(torch.zeros(4, 2), torch.zeros(4, 2)), auto_batch_size=True).batch_size
        torch.Size([4, 2])
    """
    kwargs = {"auto_batch_size": auto_batch_size, "batch_dims": batch_dims, "device": device, "batch_size": batch_size}
    if is_tensor_collection(obj) or isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, Mapping):
        td = from_dict(obj, batch_size=batch_size, device=device, auto_batch_size=False)
        return _finish(td, auto_batch_size, batch_dims, batch_size, "from_any")
    if _is_namedtuple(obj):
        return from_namedtuple(obj, **kwargs)
    if isinstance(obj, tuple):
        return from_tuple(obj, **kwargs)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return td_from_dataclass(obj, **kwargs)
    if type(obj).__module__ == "numpy" and getattr(getattr(obj, "dtype", None), "names", None):
        return from_struct_array(obj, **kwargs)
    return _convert(obj, device, batch_size) if isinstance(obj, list) else obj


# ---------------------------------------------------------------------------- pytrees
def from_pytree(
    pytree: Any, *, batch_size: Any = None, auto_batch_size: bool = False, batch_dims: int | None = None
) -> Any:
    """A TensorDict mirroring a pytree of lists, tuples, namedtuples and dicts; :func:`to_pytree` inverts it.

    Each level records its container type under ``"_pytree_type"``; list/tuple items go under
    ``"0"``, ``"1"``...; dict keys that are not strings (or would collide) go under
    ``"<NON_NESTED>i"`` as ``{"key": ..., "value": ...}``. Numbers and arrays become tensors,
    other leaves non-tensor data.

    Examples:
        >>> import torch
        >>> from tdict import from_pytree
        >>> tree = {"obs": [torch.zeros(2), torch.ones(2)], 3: "three"}
        >>> back = from_pytree(tree).to_pytree()
        >>> back[3], back["obs"][1]
        ('three', tensor([1., 1.]))
    """
    if is_tensor_collection(pytree) or isinstance(pytree, torch.Tensor):
        return pytree
    if isinstance(pytree, (list, tuple, dict)):
        if _is_namedtuple(pytree):
            source = {k: from_pytree(v, batch_size=batch_size) for k, v in _namedtuple_fields(pytree).items()}
        elif isinstance(pytree, dict):
            source = {}
            for i, (key, item) in enumerate(pytree.items()):
                if isinstance(key, str) and key != _PYTREE_TYPE and not key.startswith(_NON_NESTED):
                    source[key] = from_pytree(item, batch_size=batch_size)
                else:
                    entry = {"value": from_pytree(item, batch_size=batch_size), "key": _as_non_tensor(key, batch_size)}
                    source[f"{_NON_NESTED}{i}"] = TensorDict(entry, batch_size=batch_size)
        else:
            source = {str(i): from_pytree(item, batch_size=batch_size) for i, item in enumerate(pytree)}
        source[_PYTREE_TYPE] = _as_non_tensor(type(pytree), batch_size)
        out = TensorDict(source, batch_size=batch_size)
        return _finish(out, auto_batch_size, batch_dims, batch_size, "from_pytree")
    if isinstance(pytree, (bool, int, float, complex)) or type(pytree).__module__ == "numpy":
        return torch.as_tensor(pytree)
    return pytree


def _as_non_tensor(obj: Any, batch_size: Any) -> Any:
    from .non_tensor import NonTensorData

    return NonTensorData(obj, batch_size=batch_size)


def to_pytree(td: Any) -> Any:
    """The pytree :func:`from_pytree` built ``td`` from (``td`` itself when it has no ``"_pytree_type"``)."""
    kind = td.get_non_tensor(_PYTREE_TYPE, None) if td._get_str(_PYTREE_TYPE, None) is not None else None
    if not isinstance(kind, type):
        return td
    items = {}
    for key, value in td.items():
        if key == _PYTREE_TYPE:
            continue
        if key.startswith(_NON_NESTED):
            items[key] = (td.get_non_tensor((key, "key")), _leaf_back(value.get("value")))
        else:
            items[key] = _leaf_back(value)
    if issubclass(kind, dict):
        return kind((v if k.startswith(_NON_NESTED) else (k, v)) for k, v in items.items())
    if _is_namedtuple_class(kind):
        return kind(**items)
    return kind(items[str(i)] for i in range(len(items)))


def _is_namedtuple_class(kind: type) -> bool:
    return issubclass(kind, tuple) and hasattr(kind, "_fields")


def _leaf_back(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value
    if value._is_non_tensor:
        return value.tolist() if value._is_lazy else value.data
    return to_pytree(value)


# ---------------------------------------------------------------------------- helpers on several collections
def make_tensordict(
    input_dict: Any = None,
    batch_size: Any = None,
    device: Any = None,
    auto_batch_size: bool | None = None,
    **kwargs: Any,
) -> TensorDict:
    """A TensorDict from ``input_dict`` and/or keyword entries; without ``batch_size`` the largest
    common leading shape is used (``auto_batch_size=False``: an empty batch size).

    A collection passed as ``input_dict`` has its batch sizes worked out again (it is not modified).

    Examples:
        >>> import torch
        >>> from tdict import make_tensordict
        >>> make_tensordict(a=torch.zeros(3, 4), b=torch.zeros(3)).batch_size
        torch.Size([3])
    """
    if auto_batch_size and batch_size is not None:
        raise TypeError(
            f"make_tensordict: pass batch_size or auto_batch_size=True, not both (got batch_size={batch_size!r})."
        )
    if is_tensor_collection(input_dict):
        input_dict = input_dict.to_dict()
    if input_dict is not None:
        if not isinstance(input_dict, Mapping):
            raise TypeError(
                f"make_tensordict: input_dict must be a mapping or a tensor collection, got {type(input_dict).__name__}."
            )
        kwargs.update(input_dict)
    return from_dict(kwargs, batch_size=batch_size, device=device, auto_batch_size=auto_batch_size)


def merge_tensordicts(*tensordicts: Any, callback_exist: Callable | Mapping | None = None) -> Any:
    """Merge collections into a new one (the first one's batch size and device).

    A leaf present in every collection is ``callback_exist(*values)`` when a callback applies to
    it (a callable, or a mapping of nested keys to callables); otherwise the first collection
    holding a leaf provides it.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict, merge_tensordicts
        >>> td = merge_tensordicts(TensorDict(c=0, a=1), TensorDict(c=1, b=2), callback_exist=lambda *v: torch.stack(v))
        >>> td["c"], sorted(td.keys())
        (tensor([0, 1]), ['a', 'b', 'c'])
    """
    if len(tensordicts) < 2:
        raise ValueError(f"merge_tensordicts: needs at least 2 collections, got {len(tensordicts)}.")
    for i, td in enumerate(tensordicts):
        if not is_tensor_collection(td):
            raise TypeError(f"merge_tensordicts: item {i} is a {type(td).__name__}, expected a tensor collection.")
    callbacks = {unravel_key(k): v for k, v in callback_exist.items()} if isinstance(callback_exist, Mapping) else None
    keys: dict = {}
    for td in tensordicts:
        keys.update(dict.fromkeys(td.keys(True, True, is_leaf_nontensor)))
    out = tensordicts[0].empty(recurse=True)
    for key in keys:
        values = [_get_or_none(td, key) for td in tensordicts]
        callback = callbacks.get(key) if callbacks is not None else callback_exist
        if callback is not None and all(v is not None for v in values):
            value = callback(*values)
        else:
            value = next(v for v in values if v is not None)
        out.set(key, value)
    return out


def _get_or_none(td: Any, key: NestedKey) -> Any:
    try:
        return td.get(key, None)
    except KeyError:  # the path runs through a leaf of this collection
        return None


def maybe_dense_stack(items: Sequence[Any], dim: int = 0) -> Any:
    """Stack densely where the structures allow it, lazily where they do not.

    Tensors are stacked with ``torch.stack``. Collections with the same keys and leaf shapes give a
    TensorDict; at any level where keys or shapes differ, that level becomes a lazy stack.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict, maybe_dense_stack
        >>> a, b = TensorDict(x=torch.zeros(3)), TensorDict(x=torch.zeros(4))
        >>> type(maybe_dense_stack([a, a])).__name__, type(maybe_dense_stack([a, b])).__name__
        ('TensorDict', 'LazyStackedTensorDict')
    """
    items = list(items)
    if not items:
        raise ValueError("maybe_dense_stack: items must be a non-empty sequence.")
    if all(isinstance(it, torch.Tensor) for it in items):
        return torch.stack(items, dim)
    for i, it in enumerate(items):
        if not is_tensor_collection(it):
            raise TypeError(
                f"maybe_dense_stack: item {i} is a {type(it).__name__}, expected tensors or tensor collections only."
            )
    bs = items[0].batch_size
    for i, it in enumerate(items):
        if it.batch_size != bs:
            raise RuntimeError(
                f"maybe_dense_stack: item {i} has batch size {list(it.batch_size)}, item 0 has {list(bs)}."
            )
    return _dense_or_lazy(items, normalize_dim(dim, len(bs) + 1))


def _dense_or_lazy(items: list, dim: int) -> Any:
    from .tensorclass import is_tensorclass

    first = items[0]
    if all(it._is_non_tensor for it in items):
        return torch.stack(items, dim)
    if is_tensorclass(first) and all(type(it) is type(first) for it in items):
        inner = _dense_or_lazy([it._tensordict for it in items], dim)
        return type(first)._from_tensordict(inner) if type(inner) is TensorDict else lazy_stack(items, dim)
    if all(
        type(it) is LazyStackedTensorDict
        and it.stack_dim == first.stack_dim
        and len(it.tensordicts) == len(first.tensordicts)
        for it in items
    ):
        # lazy stacks along the same dim: stack their members pairwise and keep the stack lazy, so
        # that keys held by some members only are kept (a lazy stack of lazy stacks hides them)
        sd = first.stack_dim
        members = [
            _dense_or_lazy([it.tensordicts[j] for it in items], dim if dim <= sd else dim - 1)
            for j in range(len(first.tensordicts))
        ]
        bs = first.batch_size
        return LazyStackedTensorDict._new_unsafe(
            members, sd + 1 if sd >= dim else sd, torch.Size(bs[:dim] + (len(items),) + bs[dim:]), first._stack_dim_name
        )
    if not all(type(it) is TensorDict for it in items) or any(
        it._tensordict.keys() != first._tensordict.keys() for it in items
    ):
        return lazy_stack(items, dim)
    out = {}
    for key, v0 in first._tensordict.items():
        vals = [it._tensordict[key] for it in items]
        if all(isinstance(v, torch.Tensor) and v.shape == v0.shape for v in vals):
            out[key] = torch.stack(vals, dim)
        elif (
            all(is_tensor_collection(v) and v.batch_size == v0.batch_size for v in vals)
            and len({v._is_non_tensor for v in vals}) == 1
        ):
            out[key] = _dense_or_lazy(vals, dim)
        else:
            return lazy_stack(items, dim)
    devices = {it.device for it in items}
    bs = first.batch_size
    return TensorDict._new_unsafe(
        out, torch.Size(bs[:dim] + (len(items),) + bs[dim:]), devices.pop() if len(devices) == 1 else None
    )


def dense_stack_tds(td_list: Any, dim: int | None = None) -> Any:
    """:func:`maybe_dense_stack` of a list of collections, or of a lazy stack's members along its stack dim.

    A collection that is not a lazy stack is returned as is.
    """
    if isinstance(td_list, LazyStackedTensorDict):
        return maybe_dense_stack(td_list.tensordicts, td_list.stack_dim)
    if is_tensor_collection(td_list):
        return td_list
    if dim is None:
        raise ValueError("dense_stack_tds: pass dim when stacking a list of collections.")
    return maybe_dense_stack(td_list, dim)


def assert_allclose_td(
    actual: Any,
    expected: Any,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = True,
    intersection: bool = False,
    msg: str = "",
) -> bool:
    """Assert that two collections hold the same keys and close values (``torch.testing.assert_close``
    per leaf; non-tensor payloads must be equal). ``intersection`` compares the common keys only.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict, assert_allclose_td
        >>> assert_allclose_td(TensorDict(a=torch.ones(2)), TensorDict(a=torch.ones(2) + 1e-9))
        True
    """
    for name, td in (("actual", actual), ("expected", expected)):
        if not is_tensor_collection(td):
            raise TypeError(f"assert_allclose_td: {name} must be a tensor collection, got {type(td).__name__}.")
    _assert_close(actual, expected, rtol, atol, equal_nan, intersection, msg, ())
    return True


assert_close = assert_allclose_td


def _assert_close(
    actual: Any, expected: Any, rtol: Any, atol: Any, equal_nan: bool, intersection: bool, msg: str, prefix: tuple
) -> None:
    actual, expected = getattr(actual, "_tensordict", actual), getattr(expected, "_tensordict", expected)
    if (
        isinstance(actual, LazyStackedTensorDict)
        and isinstance(expected, LazyStackedTensorDict)
        and actual.stack_dim == expected.stack_dim
        and len(actual.tensordicts) == len(expected.tensordicts)
    ):
        for a, e in zip(actual.tensordicts, expected.tensordicts):
            _assert_close(a, e, rtol, atol, equal_nan, intersection, msg, prefix)
        return
    keys_a, keys_e = set(actual.keys()), set(expected.keys())
    if not intersection and keys_a != keys_e:
        raise AssertionError(
            f"{msg + ': ' if msg else ''}keys differ at {unravel_key(prefix) if prefix else 'the root'}: "
            f"only in actual {sorted(keys_a - keys_e)}, only in expected {sorted(keys_e - keys_a)}."
        )
    for key in sorted(keys_a & keys_e):
        a, e = actual.get(key), expected.get(key)
        where = unravel_key(prefix + (key,))
        if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor):
            if a.is_nested or e.is_nested:
                a, e = (
                    torch.cat([a.values().flatten(), a.offsets().to(a.dtype)]),
                    torch.cat([e.values().flatten(), e.offsets().to(e.dtype)]),
                )
            torch.testing.assert_close(
                a,
                e,
                rtol=rtol,
                atol=atol,
                equal_nan=equal_nan,
                msg=lambda m, w=where: f"{msg + ': ' if msg else ''}key {w!r}: {m}",
            )
        elif is_tensor_collection(a) and is_tensor_collection(e) and a._is_non_tensor == e._is_non_tensor:
            if not a._is_non_tensor:
                _assert_close(a, e, rtol, atol, equal_nan, intersection, msg, prefix + (key,))
            elif a.batch_size != e.batch_size or not bool((a == e).all()):
                raise AssertionError(
                    f"{msg + ': ' if msg else ''}key {where!r}: non-tensor data differ: {a.tolist()!r} vs {e.tolist()!r}."
                )
        else:
            raise AssertionError(
                f"{msg + ': ' if msg else ''}key {where!r}: actual holds a {type(a).__name__}, expected a {type(e).__name__}."
            )


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
