"""TypedTensorDict: a TensorDict whose keys are declared as class annotations.

Fields are the annotated names of the class and of its TypedTensorDict bases (not ``_private``
names, not ``ClassVar[...]``); ``NotRequired[T]`` fields are optional, the others required. A field
takes no default, and a name of the TensorDict API needs the ``shadow`` option. The options are
those of :class:`~tdict.TensorClass` (``frozen``, ``shadow``, ``nocast``, ``autocast``,
``tensor_only``, same checks); casts apply where a field is written as a field (constructor,
attribute, ``td[field] = v``, ``td.set(field, v)``).

The entries live in a backing collection, ``obj._source``: a TensorDict built from the fields, or
any collection wrapped without a copy by :meth:`TypedTensorDict.from_tensordict`. Every operation
is the backing collection's, its collection results re-wrapped (``tdict._core.delegation``).
Differences from tensordict are listed in the README's migration section.
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Mapping
from typing import Any, Callable, ClassVar, Sequence

import torch
from torch.utils._pytree import SUPPORTED_NODES, GetAttrKey, register_pytree_node

from ._core.delegation import install_delegation, unwrap
from ._core.utils import _MISSING, NO_DEFAULT
from .base import NON_TENSOR_CLASSES, TensorDictBase, _is_key_index
from .non_tensor import NonTensorData
from .tensorclass import _OPTIONS, _autocast_value, _check_options, _is_ndarray, _tensor_only_type
from .tensordict import TensorDict

__all__ = ["TypedTensorDict"]

# Keywords of the constructor: never field names (a field could not be passed by name).
_CONSTRUCTOR_KEYWORDS = frozenset({"batch_size", "device", "names", "non_blocking", "lock"})
_OPTION_BASES: dict = {}  # (class, options) -> the TypedTensorDict[...] base


class _Field:
    """Data descriptor of one field: reads and writes the entry of the backing collection."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return self
        value = obj._source._get_str(self.name, _MISSING)
        if value is _MISSING:
            raise AttributeError(f"{type(obj).__name__!r} has field {self.name!r} declared but not set.")
        if value.__class__ in NON_TENSOR_CLASSES:
            return value.tolist() if value._is_lazy else value.data
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        TypedTensorDict.set(obj, self.name, value)  # (a shadowing field may be named "set")

    def __delete__(self, obj: Any) -> None:
        obj._source.del_(self.name)


class _RawField(_Field):
    """A field of a ``tensor_only`` class: reads the stored entry as it is."""

    __slots__ = ()

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return self
        value = obj._source._get_str(self.name, _MISSING)
        if value is _MISSING:
            raise AttributeError(f"{type(obj).__name__!r} has field {self.name!r} declared but not set.")
        return value


class TypedTensorDict(TensorDictBase):
    """A TensorDict with declared fields: ``class State(TypedTensorDict): obs: torch.Tensor``.

    Args:
        source: optional mapping (or collection) of field values, checked like keyword fields.
        batch_size: the leading dims every entry shares (default ``[]``).
        device: if given, every tensor is moved to it.
        names: optional names of the batch dims.
        non_blocking: passed to the device moves.
        lock: lock the instance right away (``frozen`` classes always are).
        **fields: the field values; every field not declared ``NotRequired`` is required.

    Raises:
        TypeError: a required field is missing, or a keyword names no field.

    Examples:
        >>> import torch
        >>> from typing_extensions import NotRequired
        >>> from tdict import TypedTensorDict
        >>> class State(TypedTensorDict):
        ...     obs: torch.Tensor
        ...     reward: torch.Tensor
        ...     info: NotRequired[torch.Tensor]
        >>> s = State(obs=torch.zeros(4, 3), reward=torch.ones(4), batch_size=[4])
        >>> s.obs.shape, type(s[1:3]).__name__, s[1:3].batch_size
        (torch.Size([4, 3]), 'State', torch.Size([2]))
        >>> s.reward = s.reward * 2
        >>> type(torch.stack([s, s])).__name__, sorted(s.keys())
        ('State', ['obs', 'reward'])
        >>> class Done(State):
        ...     done: torch.Tensor
        >>> d = Done(**s, done=torch.zeros(4, dtype=torch.bool), batch_size=[4])
        >>> sorted(Done.__required_keys__), sorted(Done.__optional_keys__)
        (['done', 'obs', 'reward'], ['info'])
        >>> class Frozen(TypedTensorDict["frozen"]):
        ...     x: torch.Tensor
        >>> Frozen(x=torch.zeros(2), batch_size=[2]).is_locked
        True
    """

    __slots__ = ("_source",)

    _source: TensorDictBase
    __expected_keys__: ClassVar[frozenset[str]] = frozenset()
    __required_keys__: ClassVar[frozenset[str]] = frozenset()
    __optional_keys__: ClassVar[frozenset[str]] = frozenset()
    _ttd_fields: ClassVar[tuple[str, ...]] = ()
    _type_hints: ClassVar[dict | None] = {}  # field -> annotated class or None (autocast casts)
    _casts: ClassVar[bool] = False  # autocast or nocast: field writes convert values
    _autocast: ClassVar[bool] = False
    _nocast: ClassVar[bool] = False
    _frozen: ClassVar[bool] = False
    _shadow: ClassVar[bool] = False
    _tensor_only: ClassVar[bool] = False

    def __init_subclass__(cls, **options: Any) -> None:
        super().__init_subclass__()
        where = f"class {cls.__name__}"
        given = _check_options(options, where)
        _setup_class(cls, _check_options({o: given.get(o, getattr(cls, "_" + o)) for o in _OPTIONS}, where))

    def __class_getitem__(cls, item: Any) -> Any:
        """A base class with the named options on: ``TypedTensorDict["shadow", "frozen"]``.

        Raises:
            ValueError: an item is not an option name.
            TypeError: the options exclude each other (``autocast`` with ``nocast``...).
        """
        items = item if type(item) is tuple else (item,)
        bad = [i for i in items if not isinstance(i, str) or i not in _OPTIONS]
        if bad or not items:
            raise ValueError(
                f"Unknown TypedTensorDict option(s) {list(bad or items)!r}; the options are {list(_OPTIONS)}."
            )
        key = (cls, items)
        base = _OPTION_BASES.get(key)
        if base is None:
            options = {opt: getattr(cls, "_" + opt) or opt in items for opt in _OPTIONS}
            _check_options(options, f"{cls.__name__}[...]")
            name = f"{cls.__name__}_{'_'.join(items)}"
            namespace: dict[str, Any] = {"__module__": cls.__module__, "__qualname__": name}
            namespace.update({"_" + opt: value for opt, value in options.items()})
            base = _OPTION_BASES[key] = type(cls)(name, (cls,), namespace)
        return base

    # ------------------------------------------------------------------ construction
    def __init__(
        self,
        source: Mapping | TensorDictBase | None = None,
        /,
        *,
        batch_size: Sequence[int] | torch.Size | int | None = None,
        device: Any = None,
        names: Sequence[str | None] | None = None,
        non_blocking: bool | None = None,
        lock: bool = False,
        **fields: Any,
    ) -> None:
        cls = type(self)
        if source is not None:
            fields = _merge_source(cls, source, fields)
        expected = cls.__expected_keys__
        missing = [k for k in cls._ttd_fields if k not in fields and k in cls.__required_keys__]
        if missing:
            raise TypeError(
                f"{cls.__name__}() missing required field(s): {', '.join(missing)} (got: {', '.join(fields) or 'none'})."
            )
        extra = [k for k in fields if k not in expected]
        if extra:
            raise TypeError(
                f"{cls.__name__}() got unexpected field(s): {', '.join(extra)} "
                f"(declared fields: {', '.join(cls._ttd_fields) or 'none'})."
            )
        if cls._casts:
            td = TensorDict(batch_size=batch_size, device=device, names=names, non_blocking=non_blocking)
            for key, value in fields.items():
                td.set(key, _cast_field(cls, key, value, td))
        else:
            td = TensorDict(fields, batch_size=batch_size, device=device, names=names, non_blocking=non_blocking)
        if lock or cls._frozen:
            td.lock_()
        object.__setattr__(self, "_source", td)

    @classmethod
    def _from_source(cls, source: Any) -> Any:
        """Wrap ``source`` as it is: no copy, no check (results of operations)."""
        self = object.__new__(cls)
        object.__setattr__(self, "_source", source)
        return self

    @classmethod
    def from_tensordict(cls, td: TensorDictBase, *, check: bool = True) -> Any:
        """Wrap ``td`` (any collection: TensorDict, lazy stack, memory-mapped...) without a copy.

        Writes through the result reach ``td`` and the other way round. Keys that are not
        fields are kept.

        Args:
            td: the backing collection (a TypedTensorDict's own backing collection is used).
            check: raise when a required field is absent from ``td``; ``False`` wraps an empty or
                partial collection (reading an absent field then raises ``AttributeError``).

        Raises:
            TypeError: ``td`` is not a tensor collection, or a required field is absent.

        Examples:
            >>> import torch
            >>> from tdict import TensorDict, TypedTensorDict
            >>> class Obs(TypedTensorDict):
            ...     x: torch.Tensor
            >>> td = TensorDict(x=torch.zeros(3), batch_size=[3])
            >>> obs = Obs.from_tensordict(td)
            >>> obs.x += 1
            >>> td["x"]
            tensor([1., 1., 1.])
        """
        if isinstance(td, TypedTensorDict):
            td = td._source
        elif not isinstance(td, TensorDictBase) or td._is_non_tensor:
            raise TypeError(f"{cls.__name__}.from_tensordict expects a TensorDict, got {type(td).__name__}.")
        if check:
            missing = [k for k in cls._ttd_fields if k in cls.__required_keys__ and k not in td]
            if missing:
                raise TypeError(
                    f"{cls.__name__}.from_tensordict() missing required field(s): {', '.join(missing)} "
                    f"(keys: {', '.join(map(str, td.keys())) or 'none'})."
                )
        return cls._from_source(td)

    @classmethod
    def from_dict(
        cls,
        input_dict: Any,
        batch_size: Any = None,
        device: Any = None,
        batch_dims: int | None = None,
        names: Any = None,
        auto_batch_size: bool | None = None,
    ) -> Any:
        """Like :meth:`tdict.TensorDict.from_dict` (batch size inferred when not given), checked like
        :meth:`from_tensordict`."""
        td = TensorDict.from_dict(
            input_dict,
            batch_size=batch_size,
            device=device,
            batch_dims=batch_dims,
            names=names,
            auto_batch_size=auto_batch_size,
        )
        return cls.from_tensordict(td)

    @classmethod
    def load_memmap(cls, prefix: Any, device: Any = None, non_blocking: bool = False, *, out: Any = None) -> Any:
        """Open a collection saved with ``memmap_`` / ``save`` as this class (checked like
        :meth:`from_tensordict`)."""
        from .persistence import load_memmap

        loaded = load_memmap(prefix, device=device, non_blocking=non_blocking, out=_unwrap(out))
        if out is not None:
            return out
        return loaded if isinstance(loaded, cls) else cls.from_tensordict(loaded)

    @classmethod
    def load(cls, prefix: Any, device: Any = None, non_blocking: bool = False, *, out: Any = None) -> Any:
        """Same as :meth:`load_memmap`."""
        return cls.load_memmap(prefix, device=device, non_blocking=non_blocking, out=out)

    # ------------------------------------------------------------------ attributes
    def __getattr__(self, name: str) -> Any:
        # Reached only for names the class does not define: the backing collection's private
        # state (``_device``, ``_tensordict``...) reads through, so core code that reaches into a
        # collection works on the wrapper too.
        if name[:1] != "_" or name == "_source" or name[:2] == "__":
            if name in type(self).__expected_keys__:  # the field's descriptor found no entry
                raise AttributeError(f"{type(self).__name__!r} has field {name!r} declared but not set.")
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        try:
            return getattr(self._source, name)
        except AttributeError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_source" or hasattr(getattr(type(self), name, None), "__set__"):  # fields, properties
            object.__setattr__(self, name, value)
            return
        if name[:1] == "_":  # the backing collection's private state, else the instance's own
            source = self._source
            if hasattr(source, name):
                setattr(source, name, value)
            else:
                object.__setattr__(self, name, value)
            return
        cls = type(self)
        raise AttributeError(
            f"Cannot set attribute {name!r} on {cls.__name__}: it is not a declared field "
            f"(fields: {', '.join(cls._ttd_fields) or 'none'}); write undeclared keys with td[{name!r}] = value."
        )

    def __getstate__(self) -> dict:
        return {"_source": self._source}

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "_source", state["_source"])

    @property
    def batch_size(self) -> torch.Size:
        """The leading dims every entry shares (assignable)."""
        return self._source.batch_size

    @batch_size.setter
    def batch_size(self, new: Any) -> None:
        source: Any = self._source  # a TensorDict's batch size is assignable, a lazy stack's too
        source.batch_size = new

    @property
    def device(self) -> torch.device | None:
        """The device of the backing collection, or ``None``."""
        return self._source.device

    @device.setter
    def device(self, value: Any) -> None:
        source: Any = self._source  # the backing collection decides (a TensorDict raises)
        source.device = value

    @property
    def names(self) -> list:
        """The batch dim names, one per dim (``None`` for an unnamed dim); assignable."""
        return self._source.names

    @names.setter
    def names(self, value: Any) -> None:
        self._source.names = value

    @property
    def _is_locked(self) -> bool:
        return self._source._is_locked

    @_is_locked.setter
    def _is_locked(self, value: bool) -> None:
        self._source._is_locked = value

    @property
    def _is_memmap(self) -> bool:  # tensordict's attribute name
        return self._source.is_memmap()

    # ------------------------------------------------------------------ entries
    def get(self, key: Any, default: Any = NO_DEFAULT) -> Any:
        """The entry at ``key`` (see :meth:`tdict.TensorDict.get`)."""
        return self._source.get(key, default)

    def set(self, key: Any, item: Any, inplace: bool = False, *, non_blocking: bool = False) -> Any:
        """Write ``item`` under ``key`` (a field or any other key); returns ``self``."""
        if type(self)._casts and type(key) is str and key in type(self).__expected_keys__:
            item = _cast_field(type(self), key, item, self._source)
        self._source.set(key, item, inplace=inplace, non_blocking=non_blocking)
        return self

    def __getitem__(self, index: Any) -> Any:
        out = self._source[index]
        if type(index) is str or _is_key_index(index):
            return out
        return type(self)._from_source(out)

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is str:
            self.set(index, value)
            return
        self._source[index] = value._source if isinstance(value, TypedTensorDict) else value

    def _set_str(self, key: str, value: Any, *, inplace: bool, validated: bool, ignore_lock: bool = False) -> None:
        if type(self)._casts and key in type(self).__expected_keys__:
            value = _cast_field(type(self), key, value, self._source)
            validated = False
        self._source._set_str(key, value, inplace=inplace, validated=validated, ignore_lock=ignore_lock)

    def _set_tuple(self, key: tuple, item: Any, *, inplace: bool) -> None:
        if len(key) == 1:
            self._set_str(key[0], item, inplace=inplace, validated=False)
        else:
            self._source._set_tuple(key, item, inplace=inplace)

    def _apply(self, fn: Callable, others: Any, *args: Any) -> Any:
        out = self._source._apply(fn, [_unwrap(o) for o in others], *args)
        return out if out is None else self if out is self._source else type(self)._from_source(out)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        return self._source.__exit__(exc_type, exc, tb)

    # ------------------------------------------------------------------ torch functions
    @classmethod
    def _stack_impl(cls, items: Sequence, dim: int, out: Any = None) -> Any:
        from ._core.torch_function import stack

        result = stack([_unwrap(item) for item in items], dim, out=_unwrap(out))
        return out if out is not None else cls._from_source(result)

    @classmethod
    def _cat_impl(cls, items: Sequence, dim: int, out: Any = None) -> Any:
        from ._core.torch_function import cat

        result = cat([_unwrap(item) for item in items], dim, out=_unwrap(out))
        return out if out is not None else cls._from_source(result)


# ---------------------------------------------------------------------------- class set-up
def _special_form(annotation: Any) -> str | None:
    """``"ClassVar"``, ``"NotRequired"`` or ``"Required"`` for such annotations (also unresolved strings)."""
    if isinstance(annotation, str):
        head = annotation.split("[", 1)[0].strip().rsplit(".", 1)[-1]
        return head if head in ("ClassVar", "NotRequired", "Required") else None
    origin = typing.get_origin(annotation)
    if origin is ClassVar:
        return "ClassVar"
    name = getattr(origin, "_name", None) if origin is not None else None
    if name in ("NotRequired", "Required"):
        return name
    text = repr(annotation)  # typing_extensions' forms on Python 3.10
    for form in ("NotRequired", "Required", "ClassVar"):
        if text.startswith((f"typing.{form}[", f"typing_extensions.{form}[")):
            return form
    return None


def _annotations(cls: type) -> dict:
    """The annotations of ``cls`` and of its TypedTensorDict bases (base first), evaluated where possible."""
    merged: dict = {}
    for klass in reversed(cls.__mro__):
        if klass is TypedTensorDict or not (isinstance(klass, type) and issubclass(klass, TypedTensorDict)):
            continue
        own = inspect.get_annotations(klass)
        module = sys.modules.get(klass.__module__)
        globalns = dict(vars(module)) if module is not None else {}
        for name, annotation in own.items():
            if isinstance(annotation, str):
                try:
                    annotation = eval(annotation, globalns, {klass.__name__: klass, **_typing_names()})  # noqa: S307
                except Exception:  # a name local to a function, a typo: kept as text
                    pass
            merged.pop(name, None)  # a redeclared field moves to its new place
            merged[name] = annotation
    return merged


def _typing_names() -> dict:
    names = {"ClassVar": ClassVar, "Any": Any}
    for module in ("typing", "typing_extensions"):
        mod = sys.modules.get(module)
        if mod is not None:
            for form in ("NotRequired", "Required"):
                if hasattr(mod, form):
                    names.setdefault(form, getattr(mod, form))
    return names


def _inner_type(annotation: Any) -> Any:
    """``T`` for ``NotRequired[T]`` / ``Required[T]``; the annotation otherwise."""
    if _special_form(annotation) in ("NotRequired", "Required") and not isinstance(annotation, str):
        args = typing.get_args(annotation) or getattr(annotation, "__args__", ())
        return args[0] if args else Any
    return annotation


_RESERVED: frozenset | None = None


def _reserved_names() -> frozenset:
    global _RESERVED
    if _RESERVED is None:
        _RESERVED = frozenset(dir(TypedTensorDict)) | frozenset(dir(TensorDict))
    return _RESERVED


def _setup_class(cls: Any, options: dict) -> None:
    """Collect the fields of ``cls``, check them, then install their descriptors (nothing changes on error)."""
    annotations = _annotations(cls)
    fields: list[str] = []
    required: set[str] = set()
    hints: dict[str, Any] = {}
    for name, annotation in annotations.items():
        form = _special_form(annotation)
        if name[:1] == "_" or form == "ClassVar":
            continue
        fields.append(name)
        if form != "NotRequired":
            required.add(name)
        hints[name] = _inner_type(annotation)
    own = cls.__dict__
    for name in fields:
        if name in _CONSTRUCTOR_KEYWORDS:
            raise TypeError(f"{cls.__name__}: field name {name!r} is a keyword of the constructor; rename the field.")
        if name in own and not isinstance(own[name], _Field):
            raise TypeError(
                f"{cls.__name__}: field {name!r} has a class attribute {own[name]!r}; TypedTensorDict fields take "
                "no default (declare it NotRequired[...] to make it optional, or ClassVar[...] for a class constant)."
            )
        if not options["shadow"] and name in _reserved_names():
            raise AttributeError(
                f"{cls.__name__}: field {name!r} shadows a TensorDictBase attribute; "
                "allow it with TypedTensorDict['shadow'] (the field then hides that attribute on instances)."
            )
    if options["tensor_only"]:
        for name in fields:
            hint = hints[name]
            if not isinstance(hint, str) and not _tensor_only_type(hint):
                raise TypeError(
                    f"{cls.__name__}: tensor_only requires tensor or collection annotations; "
                    f"field {name!r} is annotated {hint!r}."
                )
    for opt, value in options.items():
        setattr(cls, "_" + opt, value)
    cls._casts = options["autocast"] or options["nocast"]
    cls._ttd_fields = tuple(fields)
    cls.__expected_keys__ = frozenset(fields)
    cls.__required_keys__ = frozenset(required)
    cls.__optional_keys__ = frozenset(fields) - frozenset(required)
    cls._type_hints = {k: v if isinstance(v, type) and v is not Any else None for k, v in hints.items()}
    descriptor = _RawField if options["tensor_only"] else _Field
    for name in fields:
        setattr(cls, name, descriptor(name))
    _register_pytree(cls)


def _merge_source(cls: type, source: Any, fields: dict) -> dict:
    """The field values of a positional ``source`` (a mapping or a collection) and the keywords."""
    if isinstance(source, TypedTensorDict):
        source = source._source
    if isinstance(source, TensorDictBase):
        items = source._items_raw()
    elif isinstance(source, Mapping):
        items = source.items()
    else:
        raise TypeError(
            f"{cls.__name__}(): the positional source must be a mapping or a TensorDict, got {type(source).__name__}."
        )
    merged = dict(items)
    for key in fields:
        if key in merged:
            raise TypeError(f"{cls.__name__}() got field {key!r} both in the source and as a keyword.")
    merged.update(fields)
    return merged


def _cast_field(cls: Any, name: str, value: Any, td: Any) -> Any:
    """``value`` converted for field ``name`` of an ``autocast`` or ``nocast`` class."""
    if value is None or name not in cls.__expected_keys__:
        return value
    if cls._autocast:
        return _autocast_value(cls, name, value, td)
    if isinstance(value, (int, float)) or _is_ndarray(value):  # nocast (bool is an int)
        return NonTensorData._new(value, td.batch_size, td.device)
    return value


def _unwrap(value: Any) -> Any:
    return unwrap(value, TypedTensorDict)


def _register_pytree(cls: type) -> None:
    """An instance flattens into one child, its backing collection (which flattens further)."""
    if cls in SUPPORTED_NODES:
        return

    def flatten(obj: Any) -> tuple[list, type]:
        return [obj._source], cls

    def flatten_with_keys(obj: Any) -> tuple[list, type]:
        return [(GetAttrKey("_source"), obj._source)], cls

    def unflatten(values: Any, klass: type) -> Any:
        (source,) = values
        return klass._from_source(source)  # type: ignore[attr-defined]

    register_pytree_node(cls, flatten, unflatten, flatten_with_keys_fn=flatten_with_keys)


_register_pytree(TypedTensorDict)


install_delegation(TypedTensorDict, TensorDict)
