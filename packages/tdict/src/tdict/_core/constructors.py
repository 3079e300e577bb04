"""Building collections from other data: dicts, keys, tuples, namedtuples, dataclasses, pytrees,
numpy structured arrays.

Module-level functions exported by :mod:`tdict`; the ``TensorDict.from_*`` / ``fromkeys``
classmethods delegate here. Semantics follow tensordict 0.14; where ``batch_size`` is not given,
``auto_batch_size`` picks the largest leading shape the entries share (``batch_dims`` caps it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Sequence

import torch

from .utils import NestedKey, is_tensor_collection, parse_device, unravel_key_list
from ..non_tensor_stack import NonTensorStack
from ..tensordict import TensorDict

__all__ = [
    "from_any",
    "from_dataclass",
    "from_list",
    "from_dict",
    "from_namedtuple",
    "from_pytree",
    "from_struct_array",
    "to_struct_array",
    "from_tuple",
    "fromkeys",
    "make_tensordict",
    "to_pytree",
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
    if _is_h5_group(value):
        return from_any(value, batch_size=batch_size)
    if isinstance(value, list):
        try:
            return torch.as_tensor(value, device=device)
        except (TypeError, ValueError, RuntimeError):
            return _list_stack(value, device) if value else value
    if type(value).__module__ == "numpy" and getattr(getattr(value, "dtype", None), "names", None):
        return from_struct_array(value, device=device)
    return value


def _list_stack(value: list, device: Any) -> Any:
    """A NonTensorStack of nested lists; ragged lists are stacked over their rectangular leading
    dims, each element holding the (ragged) sub-list found there."""
    try:
        return NonTensorStack.from_list(value, device=device)
    except ValueError:
        pass
    shape, level = [], [value]
    while all(isinstance(x, (list, tuple)) for x in level) and len({len(x) for x in level}) == 1 and level[0]:
        shape.append(len(level[0]))
        level = [y for x in level for y in x]
    origins = torch.arange(len(level), dtype=torch.long).reshape(shape)
    return NonTensorStack._new(origins, level, parse_device(device))


def like_template(template: Any, data: dict) -> dict:
    """``data`` (a nested dict) with each sub-dict found where ``template`` holds a tensor class
    rebuilt as that class (its constructor casts the fields); other sub-dicts are walked the same way."""
    out = {}
    for key, value in data.items():
        sub = template._get_str(key, None) if isinstance(key, str) else None
        if isinstance(value, dict) and sub is not None and is_tensor_collection(sub) and not sub._is_non_tensor:
            inner = sub._tensordict if getattr(type(sub), "_is_tensorclass", False) else sub
            value = like_template(inner, value)
            if inner is not sub:
                value = type(sub)(**value)
        out[key] = value
    return out


def _is_h5_group(obj: Any) -> bool:
    """An open ``h5py.File`` or ``h5py.Group`` (checked without importing h5py)."""
    return type(obj).__module__.startswith("h5py") and type(obj).__name__ in ("File", "Group")


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


def from_list(
    input: Sequence[Any],
    *,
    auto_batch_size: bool | None = None,
    batch_size: Any = None,
    device: Any = None,
    batch_dims: int | None = None,
    names: Any = None,
    lazy: bool | None = None,
) -> Any:
    """A TensorDict stacked from a list of dicts (or collections) along a new first dim.

    Each dict is made a TensorDict by :func:`from_dict` (``batch_size``, ``batch_dims`` and ``names``
    describe the stacked result: their first dim is the list's; without them an item's batch size is
    empty unless ``auto_batch_size=True``); ``lazy=None`` stacks densely where
    the items agree and lazily where they do not (:func:`tdict.maybe_dense_stack`), ``True`` always
    lazily, ``False`` always densely.

    Examples:
        >>> from tdict import TensorDict
        >>> td = TensorDict.from_list([{"a": 1, "b": {"c": 2.0}}, {"a": 3, "b": {"c": 4.0}}])
        >>> td.batch_size, td["a"].tolist(), td["b", "c"].tolist()
        (torch.Size([2]), [1, 3], [2.0, 4.0])
    """
    from .combining import maybe_dense_stack
    from .torch_function import stack

    if not isinstance(input, (list, tuple)) or not input:
        raise ValueError(f"from_list: input must be a non-empty list of dicts or collections, got {input!r}.")
    inner = None
    if batch_size is not None:
        full = torch.Size([batch_size]) if isinstance(batch_size, int) else torch.Size(batch_size)
        if not full or full[0] != len(input):
            raise ValueError(
                f"from_list: batch_size {list(full)} does not start with the length of the list ({len(input)})."
            )
        inner = full[1:]
    dims = None if batch_dims is None else batch_dims - 1
    inner_names = None if names is None else list(names)[1:]
    items = [
        item
        if is_tensor_collection(item)
        else from_dict(
            item,
            batch_size=inner,
            device=device,
            batch_dims=dims,
            names=inner_names,
            auto_batch_size=bool(auto_batch_size),  # items keep an empty batch size unless asked
        )
        for item in input
    ]
    if lazy is None:
        out = maybe_dense_stack(items, 0)
    elif lazy:
        from ..lazy import lazy_stack

        out = lazy_stack(items, 0)
    else:
        out = stack(items, 0)
    if names is not None:
        out.names = list(names)
    return out


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


def _tensorclass_for(dc_type: type, options: dict[str, bool]) -> type:
    """A tensor class with ``dc_type``'s fields and defaults and the given options (built once per
    dataclass type and options)."""
    from ..tensorclass import TensorClass

    key = (dc_type, tuple(sorted(options.items())))
    cls = _TC_CACHE.get(key)
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
        cls = _TC_CACHE[key] = type(f"{dc_type.__name__}_tc", (TensorClass,), ns, **options)
    return cls


def from_dataclass(
    obj: Any,
    *,
    dest_cls: type | None = None,
    auto_batch_size: bool = False,
    batch_dims: int | None = None,
    batch_size: Any = None,
    frozen: bool = False,
    autocast: bool = False,
    nocast: bool = False,
    inplace: bool = False,
    shadow: bool = False,
    tensor_only: bool = False,
    device: Any = None,
) -> Any:
    """A tensor class made from a dataclass: a class for a dataclass type, an instance for an instance.

    ``dest_cls`` (a tensor class) receives the fields instead of a generated ``<Name>_tc`` class;
    ``frozen``, ``autocast``, ``nocast``, ``shadow`` and ``tensor_only`` are the generated class's
    options (see :class:`~tdict.TensorClass`); ``inplace=True`` turns a dataclass type itself into the
    tensor class (the decorator's way) instead of generating one.

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
        >>> from_dataclass(Point, nocast=True)._nocast
        True
    """
    from ..tensorclass import _check_options, is_tensorclass, tensorclass

    options = _check_options(
        dict(autocast=autocast, frozen=frozen, nocast=nocast, shadow=shadow, tensor_only=tensor_only), "from_dataclass"
    )
    if not dataclasses.is_dataclass(obj):
        raise TypeError(f"from_dataclass: expected a dataclass type or instance, got {type(obj).__name__}.")
    if dest_cls is not None and not is_tensorclass(dest_cls):
        raise TypeError(f"from_dataclass: dest_cls must be a tensor class, got {dest_cls!r}.")
    if isinstance(obj, type):
        if dest_cls is not None or is_tensorclass(obj):
            return dest_cls if dest_cls is not None else obj
        return tensorclass(obj, **options) if inplace else _tensorclass_for(obj, options)
    if is_tensorclass(obj):
        return obj
    cls = dest_cls if dest_cls is not None else _tensorclass_for(type(obj), options)
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
    """A TensorDict of a numpy structured array: one entry per field, batch size the array's shape.

    Numeric fields share the array's memory where torch can view them (a write to the array shows in
    the TensorDict) and are copied otherwise; string fields become strings (a
    :class:`~tdict.NonTensorStack` over the batch); nested structured fields become sub-TensorDicts.
    :meth:`TensorDict.to_struct_array` goes back.

    Examples:
        >>> import numpy as np
        >>> from tdict import from_struct_array
        >>> x = np.array([("Rex", 9), ("Fido", 3)], dtype=[("name", "U10"), ("age", "i4")])
        >>> td = from_struct_array(x)
        >>> x["age"] += 1
        >>> td["name"], td["age"].tolist()
        (LinkedList(['Rex', 'Fido']), [10, 4])
    """
    names = getattr(getattr(struct_array, "dtype", None), "names", None)
    if not names:
        raise TypeError(f"from_struct_array: expected a numpy structured array, got {type(struct_array).__name__}.")
    source = {}
    for name in names:
        field = struct_array[name]
        if field.dtype.names:
            source[name] = from_struct_array(field, device=device)
        elif field.dtype.kind in "USO":  # strings and objects: Python values, one per element
            source[name] = field.tolist()
        else:
            try:
                tensor = torch.from_numpy(field)  # a view of the array's memory
            except (TypeError, ValueError, RuntimeError):  # a layout torch cannot view: a copy
                tensor = torch.as_tensor(field.copy())
            source[name] = tensor if device is None else tensor.to(device)
    out = TensorDict(source, batch_size=struct_array.shape if batch_size is None else batch_size, device=device)
    return _finish(out, auto_batch_size, batch_dims, None, "from_struct_array")


def to_struct_array(td: Any) -> Any:
    """A numpy structured array of ``td`` (shape ``td.batch_size``): one field per entry, nested
    collections as nested structured fields, strings as unicode fields. Tensors are copied to the CPU.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict({"age": torch.tensor([9, 3]), "name": ["Rex", "Fido"]}, [2])
        >>> arr = td.to_struct_array()
        >>> arr.dtype.names, arr["name"].tolist(), arr["age"].tolist()
        (('age', 'name'), ['Rex', 'Fido'], [9, 3])
    """
    import numpy as np

    shape = tuple(td.batch_size)
    fields, columns = [], []
    for key, value in td.items():
        if isinstance(value, torch.Tensor):
            column = value.detach().cpu().numpy()
        elif getattr(type(value), "_is_non_tensor", False):
            payload = td[key]
            column = np.asarray(payload) if type(payload) is list else np.full(shape, payload)
        elif is_tensor_collection(value):
            column = to_struct_array(value)
        else:
            raise TypeError(f"to_struct_array: key {key!r} holds a {type(value).__name__}, which numpy cannot hold.")
        fields.append((key, column.dtype, column.shape[len(shape) :]))
        columns.append(column)
    out = np.empty(shape, dtype=fields)
    for (key, _, _), column in zip(fields, columns):
        out[key] = column
    return out


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
    if _is_h5_group(obj):
        from ..persistent import PersistentTensorDict  # an open HDF5 file or group, read lazily

        return PersistentTensorDict._of_h5_group(obj, batch_size=batch_size)
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
    from ..non_tensor import NonTensorData

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
