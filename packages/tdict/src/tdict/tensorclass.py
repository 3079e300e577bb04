"""Tensor classes: dataclasses whose fields live in a TensorDict.

``@tensorclass`` (or subclassing :class:`TensorClass`) turns an annotated class into a
dataclass-like container: instances take ``batch_size`` / ``device`` keywords, tensor fields
(and nested TensorDicts / tensor classes) are stored in an inner :class:`~tdict.TensorDict`
(``obj._tensordict``), other Python objects (a ``dict`` too, unless ``autocast`` casts it to a
collection annotation) as :class:`~tdict.NonTensorData`. Every TensorDict
method works on the instance; results that are collections of the same fields come back as the
tensor class.

The class you write is the class you get: the decorator adds methods to it and returns it, and
:class:`TensorClass` configures subclasses in ``__init_subclass__`` (no metaclass).

Options (as in tensordict): ``autocast``, ``nocast``, ``frozen``, ``shadow`` and ``tensor_only``,
given as ``@tensorclass(nocast=True)``, ``class Foo(TensorClass["nocast"])`` (several:
``TensorClass["nocast", "frozen"]``) or ``class Foo(TensorClass, nocast=True)``. Subclasses
inherit them; see :class:`TensorClass` for what each does.
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
import sys
import types
import typing
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Sequence, cast

import torch

from ._core.arithmetic import _UNCOMPARABLE, comparison_operand
from ._core.utils import NO_DEFAULT
from .base import NON_TENSOR_CLASSES, TD_HANDLED_FUNCTIONS, TensorDictBase, _is_key_tuple, _repr, is_tensor_collection
from .errors import KeyValueError, ShapeMismatchError, incompatible_leaf_of
from .metadata import MetaData as MetaData  # re-exported: tensordict.tensorclass.MetaData
from .non_tensor import NonTensorData
from .tensordict import TensorDict
from .unbatched import UNBATCHED_TYPES

__all__ = ["TensorClass", "is_tensorclass", "tensorclass"]

_OPTIONS = ("autocast", "frozen", "nocast", "shadow", "tensor_only")
_OPTION_BASES: dict = {}  # (class, option names) -> the TensorClass[...] base


def _check_options(options: dict, where: str) -> dict:
    """Validate tensor-class options (names, bool values, exclusive pairs); returns them."""
    unknown = [k for k in options if k not in _OPTIONS]
    if unknown:
        raise TypeError(f"{where}: unknown option(s) {unknown}; the options are {list(_OPTIONS)}.")
    for key, value in options.items():
        if type(value) is not bool:
            raise TypeError(f"{where}: option {key!r} expects a bool, got {type(value).__name__} {value!r}.")
    if options.get("autocast") and options.get("nocast"):
        raise TypeError(f"{where}: autocast is exclusive with nocast.")
    if options.get("tensor_only") and (options.get("autocast") or options.get("nocast")):
        raise TypeError(f"{where}: tensor_only and autocast or nocast are exclusive features.")
    return options


def _plain_mapping(value: Mapping) -> Any:
    """Nested dicts of a (nested) Mapping; tensor collections are kept."""
    if is_tensor_collection(value):
        return value
    return {k: _plain_mapping(v) if isinstance(v, Mapping) else v for k, v in value.items()}


def _is_ndarray(value: Any) -> bool:
    np = sys.modules.get("numpy")  # numpy is optional: no array exists unless it was imported
    return np is not None and isinstance(value, np.ndarray)


def is_tensorclass(obj: Any) -> bool:
    """True for tensor classes and their instances.

    Examples:
        >>> import torch
        >>> from tdict import tensorclass
        >>> from tdict.tensorclass import is_tensorclass
        >>> @tensorclass
        ... class Obs:
        ...     x: torch.Tensor
        >>> is_tensorclass(Obs), is_tensorclass(Obs(x=torch.zeros(2), batch_size=[2]))
        (True, True)
    """
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(cls, "_is_tensorclass", False)


def _unwrap(value: Any) -> Any:
    """The inner TensorDict of a tensor-class instance (other values pass through)."""
    if getattr(type(value), "_is_tensorclass", False):
        return value._tensordict
    if type(value) in (list, tuple) and value and getattr(type(value[0]), "_is_tensorclass", False):
        return type(value)(_unwrap(v) for v in value)
    return value


# Methods whose TensorDict results are never re-wrapped (they return entries or unrelated trees).
_NO_WRAP = frozenset(
    {
        "get",
        "_get_str",
        "_get_tuple",
        "get_non_tensor",
        "pop",
        "setdefault",
        "to_tensordict",
        "to_dict",
        "keys",
        "values",
        "items",
        "_items_raw",
        "flatten_keys",
        "unflatten_keys",
        "_to_leaf",
        "state_dict",
        "get_at",
        "data_ptr",
    }
)


_VALUES_INDICES = tuple(getattr(torch.return_types, n) for n in ("max", "min", "cummax", "cummin"))


def _wrap(self: Any, name: str, result: Any) -> Any:
    """Re-wrap ``result`` of ``self._tensordict.<name>(...)`` into ``type(self)`` when it fits."""
    inner = self._tensordict
    if result is inner:
        return self
    if name in _NO_WRAP:
        return result
    if isinstance(result, TensorDictBase):
        return _maybe_wrap_td(type(self), result)
    if type(result) in (tuple, list) and result and all(type(r) is TensorDict for r in result):
        return type(result)(_maybe_wrap_td(type(self), r) for r in result)
    if type(result) in _VALUES_INDICES:  # max/min/cummax/cummin
        return type(result)(tuple(_maybe_wrap_td(type(self), r) for r in result))
    return result


def _maybe_wrap_td(cls: type, td: Any) -> Any:
    if type(td) is not TensorDict or td._is_non_tensor:
        kind = type(td)
        # a PersistentTensorDict view and a lazy stack are wrapped too
        if td._is_non_tensor or not (getattr(kind, "_is_persistent", False) or kind._is_lazy):
            return td
        keys = td.keys()
    else:
        keys = td._tensordict
    fields = cls._tc_field_set
    for key in keys:
        if key not in fields:
            return td
    return cls._from_tensordict(td)


def _autocast_value(cls: Any, name: str, value: Any, td: Any) -> Any:
    """``value`` cast to the annotation of field ``name`` (``autocast`` classes)."""
    hints = cls._type_hints  # field -> annotated class, or None (Any, Optional[...], unresolved)
    hint: Any = hints.get(name) if hints is not None else None
    collection_hint = getattr(hint, "_is_tensor_collection", False)
    if isinstance(value, dict):
        if collection_hint:
            if getattr(hint, "_is_tensorclass", False):  # like from_dict: absent fields stay unset
                obj = hint._from_tensordict(TensorDict())
                for key, item in value.items():
                    if key not in hint._tc_field_set:
                        raise KeyError(f"{cls.__name__}.{name}: {key!r} is not a field of {hint.__name__}.")
                    obj._set_field(key, item)
                return obj
            return (hint if issubclass(hint, TensorDict) else TensorDict)(value, batch_size=[])
        return NonTensorData._new(value, td.batch_size, td.device)
    if hint is None:
        if (
            isinstance(value, (int, float, torch.Tensor))
            or _is_ndarray(value)
            or getattr(type(value), "_is_tensor_collection", False)
        ):
            return value
        return NonTensorData._new(value, td.batch_size, td.device)
    if isinstance(value, hint) and (collection_hint or issubclass(hint, torch.Tensor)):
        return value
    if issubclass(hint, torch.Tensor):
        try:
            return torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(
                f"{cls.__name__}.{name}: failed to cast a {type(value).__name__} to the annotation {hint.__name__} ({err})."
            ) from None
    if collection_hint:
        return hint(value)
    try:
        is_array = hint.__module__ == "numpy" and hint.__name__ == "ndarray"
        cast = sys.modules["numpy"].asarray(value) if is_array else hint(value)
    except (TypeError, ValueError) as err:
        raise type(err)(
            f"{cls.__name__}.{name}: cannot cast {value!r} to the annotation {hint.__name__} ({err})."
        ) from None
    return NonTensorData._new(cast, td.batch_size, td.device)


class _Field:
    """Data descriptor for one field: reads from / validates into the inner TensorDict."""

    __slots__ = ("name", "default", "default_factory")

    def __init__(self, name: str, default: Any, default_factory: Any) -> None:
        self.name = name
        self.default = default
        self.default_factory = default_factory

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            if self.default is not dataclasses.MISSING:
                return self.default
            raise AttributeError(f"type object {cls.__name__!r} has no default for field {self.name!r}")
        value = obj._tensordict._get_str(self.name, None)
        if value is None:
            return None
        if value.__class__ in NON_TENSOR_CLASSES:
            return value.tolist() if value._is_lazy else value.data
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj._set_field(self.name, value)

    def __delete__(self, obj: Any) -> None:
        if type(obj)._frozen:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {self.name!r}")
        obj._set_field(self.name, None)


class _RawField(_Field):
    """A ``tensor_only`` field: reads the stored entry as it is (no payload unwrapping). A field
    removed with ``del obj.field`` is gone (reading it raises ``AttributeError``) until set again."""

    __slots__ = ()

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return _Field.__get__(self, obj, cls)
        value = obj._tensordict._get_str(self.name, None)
        if value is None and self.name in obj.__dict__.get("_tc_deleted", ()):
            raise AttributeError(f"{type(obj).__name__!r} object has no attribute {self.name!r} (it was deleted).")
        return value

    def __delete__(self, obj: Any) -> None:
        _Field.__delete__(self, obj)
        obj.__dict__.setdefault("_tc_deleted", set()).add(self.name)


class TensorClass:
    """Base class of tensor classes: ``class MyData(TensorClass): x: torch.Tensor``.

    Fields are declared with annotations, like a dataclass. Instances take the field values
    (positionally or by name) plus ``batch_size``, ``device`` and ``names`` keywords.

    Examples:
        >>> import torch
        >>> from tdict import TensorClass
        >>> class Batch(TensorClass):
        ...     obs: torch.Tensor
        ...     label: str | None = None
        >>> b = Batch(obs=torch.zeros(4, 3), label="train", batch_size=[4])
        >>> b[1:3].obs.shape, b[0].label
        (torch.Size([2, 3]), 'train')
        >>> torch.stack([b, b]).batch_size
        torch.Size([2, 4])

    Options, as ``TensorClass["opt", ...]`` bases, ``class Foo(TensorClass, opt=True)`` or
    ``@tensorclass(opt=True)``; subclasses inherit them:

    - ``nocast``: ``int`` / ``float`` / ``bool`` / numpy-array values stay as they are (by
      default they become tensors).
    - ``autocast``: values are cast to the field's annotation when set (``int``, ``str``,
      ``torch.Tensor``, a TensorDict or tensor class from a dict...); fields annotated with
      something that is not a class (``Any``, ``Optional[...]``) keep numbers as tensors and other
      values as they are. Exclusive with ``nocast``.
    - ``frozen``: instances are locked and assigning an attribute raises
      :class:`dataclasses.FrozenInstanceError`. Frozen and non-frozen classes do not mix in a
      hierarchy.
    - ``shadow``: fields may take names of TensorClass attributes (``batch_size``, ``device``,
      ``get``...); the field wins on the instance.
    - ``tensor_only``: every field must be annotated with a tensor type, a TensorDict or tensor
      class (or an Optional of those), checked when the class is made; fields read back what is
      stored (non-tensor values as their :class:`~tdict.NonTensorData`). Exclusive with
      ``autocast`` and ``nocast``.

    Examples:
        >>> import dataclasses
        >>> class Count(TensorClass["nocast"]):
        ...     n: int
        >>> Count(n=3).n
        3
        >>> class Typed(TensorClass["autocast"]):
        ...     n: int
        ...     x: torch.Tensor
        >>> t = Typed(n=torch.ones(()), x=2.5)
        >>> t.n, t.x
        (1, tensor(2.5000))
        >>> class Point(TensorClass["frozen"]):
        ...     x: torch.Tensor
        >>> p = Point(x=torch.zeros(2), batch_size=[2])
        >>> p.is_locked
        True
        >>> try:
        ...     p.x = torch.ones(2)
        ... except dataclasses.FrozenInstanceError as err:
        ...     print(err)
        cannot assign to field 'x'
    """

    _is_tensor_collection = True
    _is_tensorclass = True
    _is_non_tensor = False
    _is_lazy = False
    _tc_fields: tuple = ()
    _tc_field_set: frozenset = frozenset()
    _tc_settable: frozenset = frozenset()
    _tc_defaults: dict = {}
    _type_hints: dict | None = None
    _tc_mapping_fields: frozenset = frozenset()  # tensor_only: fields annotated with a TensorDict
    # Options (tensordict's attribute names); set on every processed class.
    _autocast: bool = False
    _nocast: bool = False
    _frozen: bool = False
    _tc_post_init: Callable | None = None  # the class's __post_init__, run by _from_tensordict too
    _shadow: bool = False
    _tensor_only: bool = False

    if TYPE_CHECKING:  # every subclass is made a dataclass (see _process_class)
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        if cls.__dict__.get("_tc_option_base", False):
            return  # a TensorClass[...] base: only carries options
        where = f"class {cls.__name__}"
        given = _check_options(kwargs, where)
        _process_class(cls, _check_options({o: given.get(o, getattr(cls, "_" + o)) for o in _OPTIONS}, where))

    def __class_getitem__(cls, item: Any) -> Any:
        """A base class with the named options turned on: ``TensorClass["nocast", "frozen"]``.

        Raises:
            TypeError: an item is not one of the option names, or the options exclude each other.
        """
        items = item if type(item) is tuple else (item,)
        bad = [i for i in items if not isinstance(i, str) or i not in _OPTIONS]
        if bad or not items:
            raise TypeError(
                f"{cls.__name__}[...]: unknown option(s) {list(bad or items)!r}; the options are {list(_OPTIONS)}."
            )
        key = (cls, items)
        base = _OPTION_BASES.get(key)
        if base is None:
            options = {opt: getattr(cls, "_" + opt) or opt in items for opt in _OPTIONS}
            _check_options(options, f"{cls.__name__}[...]")
            name = f"{cls.__name__}_{'_'.join(items)}"
            namespace = {"_tc_option_base": True, "__module__": cls.__module__, "__qualname__": name}
            namespace.update({"_" + opt: value for opt, value in options.items()})
            base = _OPTION_BASES[key] = type(cls)(name, (cls,), namespace)
        return base

    # ------------------------------------------------------------------ construction
    def __init__(
        self,
        *args: Any,
        batch_size: Any = None,
        device: Any = None,
        names: Any = None,
        non_blocking: bool | None = None,
        lock: bool = False,
        **kwargs: Any,
    ) -> None:
        cls = type(self)
        fields = cls._tc_fields
        if len(args) > len(fields):  # counted as Python counts them, ``self`` included
            raise TypeError(
                f"{cls.__name__}.__init__() takes {len(fields) + 1} positional arguments but {len(args) + 1} were given "
                f"(the fields are {list(fields)})."
            )
        values = dict(zip(fields, args))
        for key, value in kwargs.items():
            if key in values:
                raise TypeError(f"{cls.__name__}.__init__() got multiple values for field {key!r}.")
            if key not in cls._tc_field_set:
                raise AttributeError(f"{cls.__name__} has no field {key!r}; its fields are {list(fields)}.")
            values[key] = value
        if cls._shadow:  # fields named like the keywords take their values
            for key, value in (("batch_size", batch_size), ("device", device), ("names", names)):
                if key in cls._tc_field_set:
                    if value is not None:
                        if key in values:
                            raise TypeError(f"{cls.__name__}.__init__() got multiple values for field {key!r}.")
                        values[key] = value
                    if key == "batch_size":
                        batch_size = None
                    elif key == "device":
                        device = None
                    else:
                        names = None
        defaults = cls._tc_defaults
        missing = [f for f in fields if f not in values and f not in defaults]
        if missing:
            plural = "argument" if len(missing) == 1 else "arguments"
            raise TypeError(
                f"{cls.__name__}.__init__() missing {len(missing)} required positional {plural}: "
                f"{', '.join(map(repr, missing))}."
            )
        object.__setattr__(self, "_tensordict", TensorDict(batch_size=batch_size, device=device))
        # A class's own __setattr__ sees the constructor's values too (as in tensordict).
        set_field = self._set_field
        if cls.__setattr__ is not TensorClass.__dict__["__setattr__"] and not cls._frozen:
            set_field = self.__setattr__
        for name in fields:
            if name in values:
                value = values[name]
            else:
                default, factory = defaults[name]
                value = factory() if factory is not dataclasses.MISSING else default
            if value is not None:
                set_field(name, value)
        if names is not None:
            self._tensordict.names = names
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()
        if lock or cls._frozen:
            self._tensordict.lock_()

    @classmethod
    def _from_tensordict(cls, tensordict: Any) -> Any:
        self = object.__new__(cls)
        object.__setattr__(self, "_tensordict", tensordict)
        post_init = cls._tc_post_init  # found once per class (a missing-attribute lookup is slow)
        if post_init is not None:  # as in tensordict: wrapping data runs the class's checks too
            post_init(self)
        return self

    @classmethod
    def from_tensordict(cls, tensordict: Any, non_tensordict: dict | None = None, safe: bool = True) -> Any:
        """Wrap ``tensordict`` (shared, not copied) as an instance; extra keys raise when ``safe``."""
        if not is_tensor_collection(tensordict):
            raise TypeError(f"{cls.__name__}.from_tensordict expects a TensorDict, got {type(tensordict).__name__}.")
        tensordict = _unwrap(tensordict)
        if safe:  # keys only: a lazy stack's ragged leaves are not combined
            extra = [k for k in tensordict.keys() if k not in cls._tc_field_set]
            if extra:
                raise KeyError(
                    f"{cls.__name__}.from_tensordict: keys {extra} are not fields of {cls.__name__} (fields: {list(cls._tc_fields)})."
                )
        self = cls._from_tensordict(tensordict)
        for key, value in (non_tensordict or {}).items():
            setattr(self, key, value)
        return self

    def to_tensordict(self, *, retain_none: bool | None = None) -> TensorDict:
        """A plain TensorDict copy (tensors cloned, nested tensor classes turned into TensorDicts)."""
        return _to_plain(self._tensordict)

    def _set_field(self, name: str, value: Any) -> None:
        td = self._tensordict
        cls = type(self)
        if cls._tensor_only:
            deleted = self.__dict__.get("_tc_deleted")
            if deleted:  # set again after ``del obj.field``
                deleted.discard(name)
        if cls._tensor_only and name in cls._tc_mapping_fields and isinstance(value, Mapping):
            value = _plain_mapping(value)  # a UserDict, a mappingproxy... become a TensorDict
        elif value is not None and (cls._nocast or cls._autocast):
            if cls._autocast:
                value = _autocast_value(cls, name, value, td)
            elif isinstance(value, (int, float)) or _is_ndarray(value):  # nocast (bool is an int)
                value = NonTensorData._new(value, td.batch_size, td.device)
        if isinstance(value, dict) and not (cls._autocast or cls._tensor_only):
            value = NonTensorData._new(value, td.batch_size, td.device)  # a dict is a value, as in tensordict
        if value is None:
            if td._get_str(name, None) is not None:
                if td.is_locked:
                    raise RuntimeError(f"Cannot reset {type(self).__name__}.{name} to None: the instance is locked.")
                td._del_str(name)
            return
        bs = td.batch_size
        if isinstance(value, torch.Tensor):
            shape = value.shape if type(value) not in UNBATCHED_TYPES else None  # any shape (the TensorDict tags it)
        elif is_tensor_collection(value):
            shape = cast(Any, value).batch_size
        else:
            shape = None
        if shape is not None and shape[: len(bs)] != bs and not isinstance(value, torch.Tensor):
            from .tensordict import _grown_to

            if _grown_to(value, bs) is not None:  # fewer batch dims, leading ours: given ours, as tensordict does
                shape = bs
        if shape is not None and shape[: len(bs)] != bs:
            if isinstance(value, torch.Tensor):
                what, detail = "tensor of shape", ""
            else:
                what, detail = f"{type(value).__name__} of batch size", incompatible_leaf_of(value, bs)
            raise ShapeMismatchError(
                f"{type(self).__name__}.{name}: batch dimension mismatch, expected a value whose leading dims match "
                f"the batch size {list(bs)}, got a {what} {list(shape)}{detail}."
            )
        td._set_str(name, value, inplace=False, validated=False)

    def __setattr__(self, name: str, value: Any) -> None:
        cls = type(self)
        if cls._frozen and name[:1] != "_":
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        if name in cls._tc_settable or name[:1] == "_":
            object.__setattr__(self, name, value)
            return
        if name == "device":
            raise RuntimeError(
                "device cannot be set using tensorclass.device = device: a tensor class's device moves with its "
                "tensors; use tensorclass.to(device), which returns an instance on that device."
            )
        raise AttributeError(
            f"Cannot set the attribute {name!r} on {cls.__name__}: it is not a field (fields: {list(cls._tc_fields)})."
        )

    def __getattr__(self, name: str) -> Any:
        # Reached only for names that are neither fields nor methods of the class: forward
        # to the inner TensorDict and re-wrap collection results.
        if name[:2] == "__" and name[-2:] == "__":
            raise AttributeError(name)
        inner = self.__dict__.get("_tensordict")
        if inner is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        try:
            attr = getattr(inner, name)
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r} (fields: {list(type(self)._tc_fields)})."
            ) from None
        if callable(attr) and not isinstance(attr, (torch.Tensor, TensorDictBase)):

            def method(*args: Any, **kwargs: Any) -> Any:
                return _wrap(
                    self, name, attr(*[_unwrap(a) for a in args], **{k: _unwrap(v) for k, v in kwargs.items()})
                )

            return method
        return _wrap(self, name, attr) if isinstance(attr, TensorDictBase) else attr  # td.grad, td.data: the class

    # ------------------------------------------------------------------ shape / attributes
    @property
    def batch_size(self) -> torch.Size:
        """The leading dims every field shares (assignable, as on the underlying TensorDict)."""
        return self._tensordict.batch_size

    @batch_size.setter
    def batch_size(self, new: Any) -> None:
        self._tensordict.batch_size = new

    @property
    def names(self) -> list:
        """The batch dim names, one per dim (``None`` for an unnamed dim); assignable."""
        return self._tensordict.names

    @names.setter
    def names(self, value: Any) -> None:
        self._tensordict.names = value

    @property
    def device(self) -> torch.device | None:
        """The device of the underlying TensorDict, or ``None``."""
        return self._tensordict.device

    @property
    def shape(self) -> torch.Size:
        """The batch size (same as :attr:`batch_size`)."""
        return self._tensordict.batch_size

    @property
    def batch_dims(self) -> int:
        """The number of batch dims (``ndim`` too)."""
        return len(self._tensordict.batch_size)

    ndim = batch_dims

    def dim(self) -> int:
        """The number of batch dims."""
        return len(self._tensordict.batch_size)

    def numel(self) -> int:
        """The number of elements of the batch (the product of the batch size)."""
        return self._tensordict.batch_size.numel()

    def __len__(self) -> int:
        return len(self._tensordict)

    def __bool__(self) -> bool:
        return self._tensordict.__bool__()

    def __contains__(self, key: Any) -> bool:
        return key in self._tensordict

    def __iter__(self) -> Iterator:
        for sub in self._tensordict:
            yield _maybe_wrap_td(type(self), sub)

    # ------------------------------------------------------------------ entries
    def get(self, key: Any, default: Any = NO_DEFAULT, **kwargs: Any) -> Any:
        """A field's value (payloads for non-tensor fields, ``None`` for unset ones) or a nested entry.

        Keyword arguments go to the inner collection's ``get`` (a lazy stack's ``as_list``,
        ``as_padded_tensor``, ``as_nested_tensor``...)."""
        if kwargs:
            return self._tensordict.get(key, default, **kwargs)
        if type(key) is str and key in type(self)._tc_field_set:
            value = self._tensordict._get_str(key, None)
            if value is None:
                return None if default is NO_DEFAULT else default
            if value.__class__ in NON_TENSOR_CLASSES:
                return value.tolist() if value._is_lazy else value.data
            return value
        return self._tensordict.get(key, default)

    def set(self, key: Any, value: Any, inplace: bool = False, *, non_blocking: bool = False) -> Any:
        """Set the field ``key`` (or the nested entry at a tuple key); returns ``self``.

        Raises:
            AttributeError: ``key`` is a string that names no field.
        """
        if type(key) is str:
            if key not in type(self)._tc_field_set:
                raise AttributeError(
                    f"Cannot set the attribute {key!r} on {type(self).__name__}: it is not a field (fields: {list(type(self)._tc_fields)})."
                )
            if inplace and isinstance(value, torch.Tensor):
                self._tensordict.set(key, value, inplace=True)
            else:
                self._set_field(key, value)
            return self
        self._tensordict.set(key, _unwrap(value), inplace=inplace, non_blocking=non_blocking)
        return self

    def __getitem__(self, index: Any) -> Any:
        if type(index) is str:
            return self.get(index)
        if type(index) is tuple and index and isinstance(index[0], (str, tuple)) and _is_key_tuple(index):
            return self._tensordict[index]
        return _maybe_wrap_td(type(self), self._tensordict[index])

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str:
            self.set(index, value)
            return
        value_td = _unwrap(value)
        try:
            if is_tensor_collection(value_td):  # the fields are fixed: no key is created (TensorDict's would)
                try:
                    self._tensordict._set_at_index(index, value_td)
                except KeyError:
                    # unset fields the value has are allocated (zeros over the whole batch), then written
                    allocations: list = []
                    _plan_allocations(self, value_td, allocations)
                    if not allocations:
                        raise
                    for owner, name, empty in allocations:
                        owner._set_field(name, empty)
                    try:
                        self._tensordict._set_at_index(index, value_td)
                    except Exception:
                        for owner, name, _ in allocations:  # nothing half-applied: the fields are unset again
                            owner._set_field(name, None)
                        raise
            else:
                self._tensordict[index] = value_td
        except KeyError as err:
            if getattr(type(value), "_is_tensorclass", False) and type(value) is not type(self):
                raise KeyValueError(
                    f"{type(self).__name__}[index] = value: __setitem__ is only allowed for same-class or compatible "
                    f"class (same fields) assignment, got a {type(value).__name__} with fields "
                    f"{list(type(value)._tc_fields)} for fields {list(type(self)._tc_fields)} ({err.args[0]})"
                ) from None
            raise

    # ------------------------------------------------------------------ primitives the core calls
    def _items_raw(self):
        return self._tensordict._items_raw()

    def _get_str(self, key: str, default: Any) -> Any:
        return self._tensordict._get_str(key, default)

    def _get_tuple(self, key: tuple, default: Any) -> Any:
        return self._tensordict._get_tuple(key, default)

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool, ignore_lock: bool = False) -> None:
        if key not in type(self)._tc_field_set:
            raise AttributeError(
                f"Cannot set the attribute {key!r} on {type(self).__name__}: it is not a field (fields: {list(type(self)._tc_fields)})."
            )
        self._tensordict._set_str(key, value, inplace=inplace, validated=validated, ignore_lock=ignore_lock)

    def _set_tuple(self, key: tuple, value: Any, *, inplace: bool) -> None:
        if len(key) == 1:
            self._set_str(key[0], value, inplace=inplace, validated=False)
        else:
            self._tensordict._set_tuple(key, value, inplace=inplace)

    def _del_str(self, key: str) -> None:
        self._tensordict._del_str(key)

    def _index(self, index: Any) -> Any:
        return _maybe_wrap_td(type(self), self._tensordict._index(index))

    def _map_entries(self, fn: Callable, batch_size: torch.Size, names: Any = None) -> Any:
        return _maybe_wrap_td(type(self), self._tensordict._map_entries(fn, batch_size, names))

    def _apply(self, fn, others, *args: Any) -> Any:
        result = self._tensordict._apply(fn, [_unwrap(o) for o in others], *args)
        return _wrap(self, "_apply", result) if result is not None else None

    def _tensor_leaves(self) -> tuple[list, list]:
        return self._tensordict._tensor_leaves()

    def _set_lock(self, locked: bool) -> None:
        self._tensordict._set_lock(locked)

    def _maybe_names(self):
        return self._tensordict._maybe_names()

    def _with_batch_size(self, batch_size: torch.Size) -> Any:
        out = self.copy()
        out.batch_size = batch_size
        return out

    # ------------------------------------------------------------------ copies
    def clone(self, recurse: bool = True, *, device: Any = None) -> Any:
        """A copy of the same class (``recurse=False``: new structure, shared tensors); ``device``: its device."""
        return type(self)._from_tensordict(self._tensordict.clone(recurse, device=device))

    def copy(self) -> Any:
        """A shallow copy of the same class: new structure, same tensors."""
        return type(self)._from_tensordict(self._tensordict.copy())

    def to(self, *args: Any, **kwargs: Any) -> Any:
        """Like :meth:`tdict.TensorDict.to` (device, dtype or batch size); the result is of this class."""
        return _wrap(self, "to", self._tensordict.to(*[_unwrap(a) for a in args], **kwargs))

    def __copy__(self) -> Any:
        return self.copy()

    def __deepcopy__(self, memo: dict) -> Any:
        return self.clone()

    # ------------------------------------------------------------------ comparison, display
    def __eq__(self, other: Any) -> Any:
        """Field-wise ``==``: bool tensors, as this class (non-tensor fields compare payloads with
        another collection's); ``False`` for a non-comparable ``other`` such as a string."""
        return self._equality(other, operator.eq)

    def __ne__(self, other: Any) -> Any:
        return self._equality(other, operator.ne)

    def _equality(self, other: Any, op: Callable) -> Any:
        operand = comparison_operand(_unwrap(other))
        if operand is _UNCOMPARABLE:
            return op is operator.ne
        return type(self)._from_tensordict(_compare(self._tensordict, _unwrap(operand), op))

    __hash__ = object.__hash__

    @property
    def is_locked(self) -> bool:
        """Whether the underlying TensorDict is locked (see :meth:`tdict.TensorDict.lock_`)."""
        return self._tensordict.is_locked

    def __repr__(self) -> str:
        inner = self._tensordict
        lines = []
        seen = set()
        for name in list(type(self)._tc_fields) + [k for k, _ in inner._items_raw()]:
            if name in seen:
                continue
            seen.add(name)
            value = inner._get_str(name, None)
            if value is None:
                desc = "None"
            elif isinstance(value, torch.Tensor):
                desc = f"{type(value).__name__}(shape={value.shape}, device={value.device}, dtype={value.dtype}, is_shared={value.is_shared()})"
            elif value._is_non_tensor:
                desc = repr(value)
            elif getattr(type(value), "_is_tensorclass", False):
                desc = repr(value).replace("\n", "\n    ")
            else:
                desc = _repr(value, 4)
            lines.append(f"    {name}={desc},")
        fields = type(self)._tc_field_set  # shadowing fields: "shape=", no device line
        lines.append(f"    {'shape' if 'batch_size' in fields else 'batch_size'}={inner.batch_size},")
        if "device" not in fields:
            lines.append(f"    device={inner.device},")
        body = "\n".join(lines + [f"    is_shared={inner.is_shared()})"])
        return f"{type(self).__name__}(\n{body}"

    # ------------------------------------------------------------------ torch functions
    @classmethod
    def __torch_function__(cls, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        handler = TD_HANDLED_FUNCTIONS.get(func)
        if handler is None:
            return NotImplemented
        return handler(*args, **(kwargs or {}))

    @classmethod
    def _stack_impl(cls, items: Sequence, dim: int, out: Any = None) -> Any:
        from ._core.torch_function import stack

        result = stack([_unwrap(item) for item in items], dim, out=_unwrap(out))
        return out if out is not None else cls._from_tensordict(result)

    @classmethod
    def _cat_impl(cls, items: Sequence, dim: int, out: Any = None) -> Any:
        from ._core.torch_function import cat

        result = cat([_unwrap(item) for item in items], dim, out=_unwrap(out))
        return out if out is not None else cls._from_tensordict(result)

    # ------------------------------------------------------------------ persistence
    # The instance itself goes to tdict.persistence, which records the class so that loading
    # gives the tensor class back.
    def memmap_(
        self,
        prefix: Any = None,
        copy_existing: bool = False,
        *,
        num_threads: int = 0,
        existsok: bool = True,
        robust_key: bool | None = None,
        share_non_tensor: bool = False,
        return_early: bool = False,
    ) -> Any:
        """Write every tensor leaf to memory-mapped files under ``prefix`` and point the fields at them
        (``return_early``: a Future, see :meth:`tdict.TensorDict.memmap_`)."""
        from ._io.storage_methods import _run_maybe_early
        from .persistence import memmap_

        def write() -> Any:
            memmap_(self, prefix, copy_existing=copy_existing, existsok=existsok, inplace=True)
            return self

        return _run_maybe_early(return_early, write)

    def memmap(
        self,
        prefix: Any = None,
        copy_existing: bool = False,
        *,
        num_threads: int = 0,
        existsok: bool = True,
        robust_key: bool | None = None,
        share_non_tensor: bool = False,
        return_early: bool = False,
    ) -> Any:
        """Like :meth:`memmap_` but returns a new instance and leaves ``self`` untouched."""
        from ._io.storage_methods import _run_maybe_early
        from .persistence import memmap_

        return _run_maybe_early(
            return_early, lambda: memmap_(self, prefix, copy_existing=copy_existing, existsok=existsok, inplace=False)
        )

    def memmap_like(
        self, prefix: Any = None, copy_existing: bool = False, *, existsok: bool = True, num_threads: int = 0
    ) -> Any:
        """A new, locked copy whose leaves are memory-mapped under ``prefix`` with ``self``'s shapes and
        dtypes, contents uninitialised (new files read as zeros). ``copy_existing`` and ``num_threads``
        are ignored."""
        from .persistence import memmap_like

        return memmap_like(self, prefix, existsok=existsok)

    def save(
        self,
        prefix: Any = None,
        copy_existing: bool = False,
        *,
        num_threads: int = 0,
        existsok: bool = True,
        robust_key: bool | None = None,
        share_non_tensor: bool = False,
    ) -> Any:
        """Write a memory-mapped copy under ``prefix`` (see :meth:`memmap`); returns ``self``, unchanged.

        Raises:
            TypeError: ``prefix`` is ``None`` (an anonymous copy would be written and lost).
        """
        from .persistence import save

        return save(self, prefix, copy_existing=copy_existing, existsok=existsok)

    dumps = save

    @classmethod
    def load_memmap(
        cls,
        prefix: Any,
        device: Any = None,
        non_blocking: bool = False,
        *,
        out: Any = None,
        allow_pickle: bool = False,
    ) -> Any:
        """Open an instance saved with :meth:`memmap_` / :meth:`save` (the class it was saved as).

        ``allow_pickle`` is accepted for tensordict's signature and changes nothing: tdict never
        writes or reads pickles (non-tensor payloads are stored as JSON)."""
        from .persistence import load_memmap

        loaded = load_memmap(prefix, device=device)
        # saved as a tensor class: that class, whichever class this is called on (as in tensordict)
        return loaded if is_tensorclass(loaded) else cls._from_tensordict(_unwrap(loaded))

    @classmethod
    def load(cls, prefix: Any, device: Any = None, non_blocking: bool = False, *, out: Any = None) -> Any:
        """Same as :meth:`load_memmap` (``non_blocking`` and ``out`` are ignored)."""
        return cls.load_memmap(prefix, device=device)

    @classmethod
    def fields(cls) -> tuple:
        """The dataclass fields, in declaration order."""
        return dataclasses.fields(cls)

    # ------------------------------------------------------------------ methods with tensor-class keywords
    def select(self, *keys: Any, inplace: bool = False, strict: bool = True, as_tensordict: bool = False) -> Any:
        """An instance with only ``keys`` (the other fields read ``None``), or with ``as_tensordict=True``
        the plain TensorDict of those keys."""
        result = self._tensordict.select(*keys, inplace=inplace, strict=strict)
        return result if as_tensordict and not inplace else _wrap(self, "select", result)

    def state_dict(
        self, destination: dict | None = None, prefix: str = "", keep_vars: bool = False, flatten: bool = True
    ) -> dict:
        """:meth:`tdict.TensorDict.state_dict`, with the class recorded (``_metadata[level]["_type"]``)."""
        from .persistence import state_dict

        return state_dict(self, destination=destination, prefix=prefix, keep_vars=keep_vars, flatten=flatten)

    def load_state_dict(
        self, state_dict: dict, strict: bool = True, assign: bool = False, from_flatten: bool = False
    ) -> Any:
        """:meth:`tdict.TensorDict.load_state_dict`; also reads the legacy ``{"_tensordict", "_non_tensordict"}`` layout."""
        from .persistence import load_state_dict

        _check_state_dict_fields(self, state_dict)
        load_state_dict(self, state_dict, strict=strict, assign=assign, from_flatten=from_flatten)
        return self

    # ------------------------------------------------------------------ TensorDict's constructors, as instances
    @classmethod
    def from_dict(cls, input_dict: Any, **kwargs: Any) -> Any:
        """An instance from a dict of field values (:meth:`TensorDict.from_dict`'s keywords: ``batch_size``,
        ``auto_batch_size``, ``batch_dims``, ``device``, ``names``)."""
        return cls.from_tensordict(TensorDict.from_dict(input_dict, **kwargs))

    @classmethod
    def from_list(cls, input: Any, **kwargs: Any) -> Any:
        """An instance stacked from a list of dicts of field values (:meth:`TensorDict.from_list`)."""
        return cls.from_tensordict(TensorDict.from_list([_unwrap(item) for item in input], **kwargs))

    @classmethod
    def fromkeys(cls, keys: Any, value: Any = 0) -> Any:
        """An instance (empty batch size) with ``value`` in every field of ``keys``."""
        return cls.from_tensordict(TensorDict.fromkeys(keys, value))

    @classmethod
    def stack(cls, input: Sequence[Any], dim: int = 0, *, out: Any = None) -> Any:
        """``torch.stack`` of instances, as an instance of this class."""
        return cls._stack_impl(input, dim, out=out)

    @classmethod
    def cat(cls, input: Sequence[Any], dim: int = 0, *, out: Any = None) -> Any:
        """``torch.cat`` of instances, as an instance of this class."""
        return cls._cat_impl(input, dim, out=out)

    @classmethod
    def lazy_stack(cls, input: Sequence[Any], dim: int = 0, **kwargs: Any) -> Any:
        """A lazy stack of the instances' TensorDicts, as an instance of this class."""
        from .lazy import lazy_stack

        return cls._from_tensordict(lazy_stack([_unwrap(item) for item in input], dim, **kwargs))

    @classmethod
    def maybe_dense_stack(cls, input: Sequence[Any], dim: int = 0) -> Any:
        """Dense where the instances agree, lazy where they do not, as an instance of this class."""
        from ._core.combining import maybe_dense_stack

        return cls._from_tensordict(maybe_dense_stack([_unwrap(item) for item in input], dim))


def _plan_allocations(dest: Any, value: Any, out: list) -> None:
    """``(owner, field, zeros)`` for each field unset in the tensor class ``dest`` (nested ones too) that
    ``value`` (``dest`` indexed) holds as a tensor or a collection: zeros of ``dest``'s batch size
    followed by the entry's own dims."""
    inner = dest._tensordict
    bs, value_dims = dest.batch_size, len(value.batch_size)
    for key, leaf in _unwrap(value)._items_raw():
        target = inner._get_str(key, None)
        if target is None:
            if key not in type(dest)._tc_field_set:
                continue
            if isinstance(leaf, torch.Tensor) and type(leaf) not in UNBATCHED_TYPES:
                out.append((dest, key, leaf.new_zeros(bs + leaf.shape[value_dims:])))
            elif is_tensor_collection(leaf):
                sub = cast(Any, leaf)
                if sub._is_non_tensor or sub._is_lazy:
                    continue  # nothing to allocate from: the write raises
                shape, own_dims = bs + sub.batch_size[value_dims:], len(sub.batch_size)
                zeros = sub.apply(lambda t: t.new_zeros(shape + t.shape[own_dims:]), batch_size=shape)
                out.append((dest, key, zeros))
        elif getattr(type(target), "_is_tensorclass", False) and is_tensor_collection(leaf):
            _plan_allocations(target, leaf, out)


def _check_state_dict_fields(obj: Any, state_dict: Mapping) -> None:
    """Raise ``KeyError`` for a state-dict key (an entry, flat or nested, or a ``_metadata`` non-tensor
    payload) that names no field of the tensor class at its level; checked before anything is loaded."""
    if not state_dict or set(state_dict) <= {"_tensordict", "_non_tensordict"}:
        return  # the legacy layout: read as one level by the loader
    for key, value in state_dict.items():
        if isinstance(key, str):
            _check_field_path(obj, key.split("."), value)
    meta = getattr(state_dict, "_metadata", None)
    if isinstance(meta, Mapping):
        for level, info in meta.items():
            if isinstance(level, str) and isinstance(info, Mapping):
                for key in info.get("_non_tensor") or ():
                    _check_field_path(obj, [*(level.split(".") if level else ()), key], None)


def _check_field_path(obj: Any, parts: list, value: Any, above: tuple = ()) -> None:
    for i, part in enumerate(parts):
        if not getattr(type(obj), "_is_tensorclass", False) or part[:2] == "__":
            return  # below a plain collection (any key), or a "__batch_size" / "__device" record
        if part not in type(obj)._tc_field_set:
            raise KeyError(
                f"Key {'.'.join([*above, *parts[: i + 1]])!r} wasn't expected in the state-dict: {part!r} is not a "
                f"field of {type(obj).__name__} (fields: {list(type(obj)._tc_fields)})."
            )
        obj = obj._tensordict._get_str(part, None)
        if obj is None:
            return
    if isinstance(value, Mapping):  # the nested form
        for key, sub in value.items():
            if isinstance(key, str):
                _check_field_path(obj, key.split("."), sub, (*above, *parts))


def _compare(td: Any, other: Any, op: Callable) -> TensorDict:
    out = {}
    collection = is_tensor_collection(other)
    for key, value in td._items_raw():
        o = other._get_str(key, NO_DEFAULT) if collection else other
        if isinstance(value, torch.Tensor):
            out[key] = op(value, o)
        elif value._is_non_tensor:
            out[key] = op(value, o) if collection else value  # a number or a tensor: passed through
        elif getattr(type(value), "_is_tensorclass", False):
            out[key] = type(value)._from_tensordict(_compare(value._tensordict, _unwrap(o), op))
        else:
            out[key] = _compare(value, o, op)
    return TensorDict._new_unsafe(out, td.batch_size, td.device, td._maybe_names())


def _to_plain(td: Any) -> TensorDict:
    out = {}
    for key, value in td._items_raw():
        if isinstance(value, torch.Tensor) or value._is_non_tensor:
            out[key] = value.clone()
        else:
            out[key] = _to_plain(_unwrap(value))
    return TensorDict._new_unsafe(out, td.batch_size, td.device, td._maybe_names())


def _make_forwarder(name: str) -> Callable:
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self._tensordict, name)(
            *[_unwrap(a) for a in args], **{k: _unwrap(v) for k, v in kwargs.items()}
        )
        return _wrap(self, name, result)

    forward.__name__ = name
    forward.__qualname__ = f"TensorClass.{name}"
    forward.__doc__ = f"Like :meth:`tdict.TensorDict.{name}`; collections of the same fields come back as this class."
    return forward


# TensorDict methods defined on the class (fast, and dunders must live on the type).
_FORWARDED = (
    # shape ops
    "reshape",
    "view",
    "unsqueeze",
    "squeeze",
    "permute",
    "transpose",
    "flatten",
    "unflatten",
    "expand",
    "expand_as",
    "repeat",
    "repeat_interleave",
    "flip",
    "roll",
    "contiguous",
    "masked_fill",
    "masked_fill_",
    "where",
    "gather",
    "unbind",
    "split",
    "chunk",
    # copies, devices, dtypes
    "cpu",
    "cuda",
    "float",
    "double",
    "half",
    "bfloat16",
    "int",
    "long",
    "bool",
    "detach",
    "detach_",
    "pin_memory",
    "share_memory_",
    "zero_",
    "requires_grad_",
    "copy_",
    # apply family and structure
    "apply",
    "apply_",
    "named_apply",
    "empty",
    "select",
    "exclude",
    "update",
    "update_",
    "update_at_",
    "set_",
    "fill_",
    "lock_",
    "unlock_",
    "rename",
    "rename_",
    "refine_names",
    "auto_batch_size_",
    "is_empty",
    "items",
    "keys",
    "values",
    "tolist",
    "to_dict",
    "all",
    "any",
    "allclose",
    # arithmetic and reductions
    "add",
    "add_",
    "sub",
    "sub_",
    "mul",
    "mul_",
    "div",
    "div_",
    "pow",
    "pow_",
    "lerp",
    "lerp_",
    "clamp",
    "clamp_",
    "maximum",
    "minimum",
    "isfinite",
    "isnan",
    "cumsum",
    "cumprod",
    "sum",
    "nansum",
    "mean",
    "nanmean",
    "std",
    "var",
    "prod",
    "max",
    "min",
    "amax",
    "amin",
    "norm",
    "abs",
    "neg",
    "exp",
    "log",
    "sqrt",
    "sigmoid",
    "tanh",
    "sign",
    "reciprocal",
    "sin",
    "cos",
    "floor",
    "ceil",
    "round",
    "abs_",
    "neg_",
    "exp_",
    "log_",
    "sqrt_",
    "sigmoid_",
    "tanh_",
    "sign_",
    "reciprocal_",
    "floor_",
    "ceil_",
    "round_",
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__truediv__",
    "__rtruediv__",
    "__floordiv__",
    "__mod__",
    "__pow__",
    "__rpow__",
    "__and__",
    "__or__",
    "__xor__",
    "__ror__",
    "__rand__",
    "__rxor__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__neg__",
    "__abs__",
    "__invert__",
    "__iadd__",
    "__isub__",
    "__imul__",
    "__itruediv__",
    "__ipow__",
    "__enter__",
    "__exit__",
    # persistence
    "state_dict",
    "load_state_dict",
    "consolidate",
    "is_memmap",
    "is_shared",
    "is_locked",
)
for _name in _FORWARDED:
    if _name not in TensorClass.__dict__:  # (is_locked: a property of the class body)
        setattr(TensorClass, _name, _make_forwarder(_name))


# Math / reduction methods a field may shadow (the core never calls them on nested entries);
# every other TensorClass attribute is part of the collection protocol and is reserved.
_SHADOWABLE = frozenset(
    n + suffix
    for n in (
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "lerp",
        "clamp",
        "maximum",
        "minimum",
        "isfinite",
        "isnan",
        "cumsum",
        "cumprod",
        "sum",
        "nansum",
        "mean",
        "nanmean",
        "std",
        "var",
        "prod",
        "max",
        "min",
        "amax",
        "amin",
        "norm",
        "abs",
        "neg",
        "exp",
        "log",
        "sqrt",
        "sigmoid",
        "tanh",
        "sign",
        "reciprocal",
        "sin",
        "cos",
        "floor",
        "ceil",
        "round",
        "all",
        "any",
        "allclose",
        "int",
        "long",
        "float",
        "double",
        "half",
        "bfloat16",
        "bool",
    )
    for suffix in ("", "_")
)

_NOT_COPIED = {
    "__dict__",
    "__weakref__",
    "__module__",
    "__qualname__",
    "__doc__",
    "__annotations__",
    "_tc_fields",
    "_tc_field_set",
    "_tc_settable",
    "_tc_defaults",
    "_tc_option_base",
    "_type_hints",
    "_tc_mapping_fields",
}
_METHOD_TYPES = (property, types.FunctionType, types.MethodType, classmethod, staticmethod)


# tensor classes defined inside a function, by "module:qualname" (the latest definition): saving never
# pickles, so loading finds a class by that path, and such a class is found here while it is alive
_LOCAL_CLASSES: weakref.WeakValueDictionary[str, type] = weakref.WeakValueDictionary()


def local_tensorclass(path: str) -> type | None:
    """The live tensor class defined inside a function at ``path`` (``"module:qualname"``), or ``None``."""
    return _LOCAL_CLASSES.get(path)


def _process_class(cls: type, options: dict) -> type:
    """Turn the annotated ``cls`` into a tensor class with ``options``, in place (checks first)."""
    if "<locals>" in cls.__qualname__:
        _LOCAL_CLASSES[f"{cls.__module__}:{cls.__qualname__}"] = cls
    frozen, shadow, tensor_only = options["frozen"], options["shadow"], options["tensor_only"]
    for base in cls.__mro__[1:]:
        if base is not TensorClass and "_tc_fields" in base.__dict__ and base.__dict__["_frozen"] is not frozen:
            raise TypeError(
                f"{cls.__name__}: cannot inherit non-frozen dataclass from a frozen one ({base.__name__})."
                if not frozen
                else f"{cls.__name__}: cannot inherit frozen dataclass from a non-frozen one ({base.__name__})."
            )
    user_init = cls.__dict__.get("__init__")
    if user_init is TensorClass.__dict__["__init__"] or getattr(user_init, "_tc_generated", False):
        user_init = None
    dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    fields = dataclasses.fields(cls)
    for field in fields:
        reserved = TensorClass.__dict__.get(field.name)
        if reserved is None or isinstance(reserved, _Field):
            continue
        if not shadow and field.name not in _SHADOWABLE:
            raise AttributeError(
                f"{cls.__name__}: Attribute name {field.name} can't be used with @tensorclass: the field "
                f"{field.name!r} clashes with a TensorClass attribute (allow it with @tensorclass(shadow=True) or "
                "TensorClass['shadow'])."
            )
        if isinstance(field.default, _METHOD_TYPES):  # the inherited attribute, not a default
            field.default = dataclasses.MISSING
    hints = _resolve_hints(cls) if options["autocast"] or tensor_only else None
    if tensor_only and hints is not None:
        for field in fields:
            if field.name in hints and not _tensor_only_type(hints[field.name]):
                raise TypeError(
                    f"{cls.__name__}: tensor_only requires types to be Tensor, Tensor-subtrypes or None "
                    f"(or TensorDict / tensor classes); field {field.name!r} is annotated {hints[field.name]!r}."
                )
    names, defaults = [], {}
    descriptor = _RawField if tensor_only else _Field
    for field in fields:
        names.append(field.name)
        if field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING:
            defaults[field.name] = (field.default, field.default_factory)
        setattr(cls, field.name, descriptor(field.name, field.default, field.default_factory))
    cls._tc_fields = tuple(names)
    cls._tc_field_set = frozenset(names)
    # fields, the shape attributes, and properties the class gives a setter
    setters = {k for k in dir(cls) if getattr(inspect.getattr_static(cls, k, None), "fset", None) is not None}
    cls._tc_settable = frozenset(names) | {"batch_size", "names"} | setters
    # tensordict's name for the field names (ClassVars are not fields)
    cls.__expected_keys__ = frozenset(names)
    cls._tc_defaults = defaults
    cls._tc_post_init = getattr(cls, "__post_init__", None)
    if cls.__dict__.get("__hash__", object.__hash__) is object.__hash__:  # a class's own __hash__ is kept
        setattr(cls, "__hash__", object.__hash__ if frozen else None)  # as a dataclass: mutable ones are unhashable
    for opt, value in options.items():
        setattr(cls, "_" + opt, value)
    cls._type_hints = (
        None if hints is None else {k: v if isinstance(v, type) and v is not Any else None for k, v in hints.items()}
    )
    cls._tc_mapping_fields = frozenset(
        k for k, v in (hints or {}).items() if k in cls._tc_field_set and _mentions_tensordict(v)
    )
    if user_init is not None:
        cls.__init__ = _wrap_user_init(user_init)
    else:
        cls.__signature__ = _init_signature(names, defaults)
    from ._core.pytree import register_tensorclass_type  # torch.utils._pytree / vmap see the inner TensorDict

    register_tensorclass_type(cls)
    return cls


def _init_signature(names: list, defaults: dict) -> inspect.Signature:
    """What ``inspect.signature`` reports for a tensor class built by the generated ``__init__``: the
    fields (positional or keyword, in order), then ``batch_size``, ``device`` and ``names`` (keyword
    only, unless a shadowing field takes the name). ``non_blocking`` and ``lock`` are accepted too."""
    params, fields_done = [], False
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    for name in names:
        if name in defaults:
            default, factory = defaults[name]
            value = None if factory is not dataclasses.MISSING else default
            fields_done = True
        elif fields_done:  # a required field after a defaulted one: keyword only
            kind, value = inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.empty
        else:
            value = inspect.Parameter.empty
        params.append(inspect.Parameter(name, kind, default=value))
    for name in ("batch_size", "device", "names"):
        if name not in names:
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None))
    return inspect.Signature(params)


def _resolve_hints(cls: type) -> dict | None:
    """The field annotations of ``cls`` evaluated (``None`` when a name cannot be resolved).

    String annotations naming classes local to a function are looked up in the calling frames.
    """
    localns: dict = {cls.__name__: cls}
    frame = inspect.currentframe()
    try:
        while True:
            try:
                return typing.get_type_hints(cls, localns=localns)
            except NameError:
                frame = frame.f_back if frame is not None else None
                if frame is None:
                    return None
                localns = {**frame.f_locals, **localns}
            except TypeError:
                return None
    finally:
        del frame


def _mentions_tensordict(hint: Any) -> bool:
    """Whether the annotation is (a union with / a generic of) a TensorDictBase class."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(_mentions_tensordict(arg) for arg in typing.get_args(hint))
    hint = origin if origin is not None else hint
    return isinstance(hint, type) and issubclass(hint, TensorDictBase) and not hint._is_non_tensor


def _tensor_only_type(hint: Any) -> bool:
    """Whether ``hint`` is allowed in a ``tensor_only`` class: tensors, collections, None or a union of those."""
    if hint is None or hint is type(None):
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return all(_tensor_only_type(arg) for arg in typing.get_args(hint))
    if origin is not None:
        hint = origin  # TensorDict[str, Tensor]
    if isinstance(hint, _LEGACY_TENSOR_TYPE):  # torch.IntTensor, torch.LongTensor...: not Tensor subclasses
        return True
    return isinstance(hint, type) and (issubclass(hint, torch.Tensor) or getattr(hint, "_is_tensor_collection", False))


_LEGACY_TENSOR_TYPE = type(torch.FloatTensor)  # the metaclass of torch's typed tensor classes


def _wrap_user_init(user_init: Callable) -> Callable:
    """A user ``__init__`` runs on an instance that already has its (empty) inner TensorDict."""

    def __init__(
        self: Any, *args: Any, batch_size: Any = None, device: Any = None, names: Any = None, **kwargs: Any
    ) -> None:
        object.__setattr__(self, "_tensordict", TensorDict(batch_size=batch_size, device=device, names=names))
        user_init(self, *args, **kwargs)
        if type(self)._frozen:
            self._tensordict.lock_()

    __init__._tc_generated = True
    __init__.__wrapped__ = user_init
    return __init__


def tensorclass(
    cls: type | None = None,
    /,
    *,
    autocast: bool = False,
    frozen: bool = False,
    nocast: bool = False,
    shadow: bool = False,
    tensor_only: bool = False,
) -> Any:
    """Decorator: make an annotated class a tensor class (see :class:`TensorClass`).

    The class is modified in place and returned: TensorClass methods the class does not
    define itself are added to it. The keyword options are those of :class:`TensorClass`
    (all ``False`` by default; the decorator does not inherit them from a base class).

    Raises:
        TypeError: an unknown keyword, a non-bool option or exclusive options.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict, tensorclass
        >>> @tensorclass
        ... class Data:
        ...     obs: torch.Tensor
        ...     label: str | None = None
        >>> d = Data(obs=torch.zeros(3, 2), label="cat", batch_size=[3])
        >>> d[0].obs.shape, d.label
        (torch.Size([2]), 'cat')
        >>> TensorDict({"d": d}, batch_size=[3])[1:]["d"].batch_size
        torch.Size([2])
        >>> @tensorclass(nocast=True)
        ... class Raw:
        ...     n: int
        >>> Raw(n=2).n
        2
    """
    options = _check_options(
        dict(autocast=autocast, frozen=frozen, nocast=nocast, shadow=shadow, tensor_only=tensor_only), "tensorclass()"
    )
    if cls is not None and not isinstance(cls, type):
        raise TypeError(f"tensorclass() decorates a class, got {type(cls).__name__} {cls!r}.")

    def decorate(klass: type) -> type:
        if not issubclass(klass, TensorClass):
            own = klass.__dict__
            for name, attr in TensorClass.__dict__.items():
                if name in _NOT_COPIED or (name in own and name != "__init__"):
                    continue
                if name == "__init__" and "__init__" in own:
                    continue  # wrapped by _process_class
                setattr(klass, name, attr)
        return _process_class(klass, options)

    return decorate if cls is None else decorate(cls)
