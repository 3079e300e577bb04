"""MetaData: a non-tensor leaf that describes the whole batch.

:class:`MetaData` is a :class:`~tdict.NonTensorData` (one Python object, a batch size, ``td["key"]``
gives the object) that stays one object through batch ops: indexing, reshaping, unbind, split
and expand keep a MetaData, and stacking or concatenating MetaData that hold *the same object*
(identity, ``is``) gives one MetaData with the bigger batch size. A NonTensorData stacks the
same way only when the objects are equal; MetaData holding different objects (equal or not)
stack into a :class:`~tdict.NonTensorStack`, as NonTensorData do.

``MetaData[T]`` is a subclass (one per ``T``, cached) whose payload must be an instance of ``T``.

Differences from tensordict 0.14: MetaData is a subclass of NonTensorData here (a sibling there);
``torch.cat`` of MetaData holding different objects gives a NonTensorStack (tensordict keeps the
first object); a MetaData and a NonTensorData stack into a NonTensorStack (tensordict raises).
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

import torch

from .base import NON_TENSOR_CLASSES
from .non_tensor import NonTensorData

__all__ = ["MetaData"]

_TYPED: dict[Any, type] = {}  # MetaData[T] classes, by T


def _type_name(item: Any) -> str:
    if isinstance(item, tuple):
        return "(" + ", ".join(_type_name(i) for i in item) + ")"
    return getattr(item, "__name__", str(item))


class MetaData(NonTensorData):
    """Data about the whole batch (a config, a tokenizer name, a string of notes): a non-tensor
    leaf that batch ops keep as one object.

    Args:
        data: the payload (an instance of ``T`` for ``MetaData[T]``).
        batch_size: the batch dims (default ``[]``; a collection broadcasts an empty one to its own).
        device: the device of the enclosing collection (recorded, the payload is not moved).
        names: optional names of the batch dims.

    Examples:
        >>> import torch
        >>> from tdict import MetaData, TensorDict
        >>> td = TensorDict(obs=torch.zeros(4, 3), batch_size=[4])
        >>> td["info"] = MetaData[str]("collected with seed 0")
        >>> td.get("info").batch_size, td[1:3]["info"]
        (torch.Size([4]), 'collected with seed 0')
        >>> type(torch.stack([td, td]).get("info")).__name__
        'MetaData[str]'
        >>> MetaData[int]("a")
        Traceback (most recent call last):
            ...
        TypeError: MetaData[int]: Expected data of type int, got str.
    """

    __slots__ = ()
    _expected_type: Any = None  # T of MetaData[T]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        NON_TENSOR_CLASSES.add(cls)  # td[key] gives the payload, as for NonTensorData

    def __class_getitem__(cls, item: Any) -> type:
        """``MetaData[T]``: the MetaData subclass whose payload must be an instance of ``T``."""
        if cls is not MetaData:
            raise TypeError(f"Cannot specify type for {cls.__name__}: only MetaData[T] is allowed.")
        typed = _TYPED.get(item)
        if typed is None:
            try:
                isinstance(None, item)
            except TypeError:
                raise TypeError(
                    f"MetaData[T]: T must be a class or a tuple of classes (usable with isinstance), got {item!r}."
                ) from None
            name = f"MetaData[{_type_name(item)}]"
            typed = type(name, (MetaData,), {"__slots__": (), "_expected_type": item, "__module__": __name__})
            typed.__qualname__ = name
            _TYPED[item] = typed
        return typed

    def __init__(
        self,
        data: Any = None,
        batch_size: Any = None,
        device: Any = None,
        names: Any = None,
        non_blocking: bool | None = None,
        **kwargs: Any,
    ) -> None:
        self._check_payload(data.data if isinstance(data, NonTensorData) else data)
        super().__init__(data, batch_size, device, names, non_blocking, **kwargs)

    def _check_payload(self, data: Any) -> None:
        expected = type(self)._expected_type
        if expected is not None and not isinstance(data, expected):
            raise TypeError(
                f"{type(self).__name__}: Expected data of type {_type_name(expected)}, got {type(data).__name__}."
            )

    def update_(self, input_dict_or_td: Any, clone: bool = False, *, keys_to_update: Any = None) -> "MetaData":
        self._check_payload(input_dict_or_td.data if isinstance(input_dict_or_td, NonTensorData) else input_dict_or_td)
        return super().update_(input_dict_or_td, clone, keys_to_update=keys_to_update)  # type: ignore[return-value]

    # ---- stacking: one object for the whole batch when every item holds the same one
    @classmethod
    def _shared(cls, items: Sequence) -> "MetaData | None":
        """The first item when every item is a MetaData holding the very same object, else None."""
        first = items[0]
        if not isinstance(first, MetaData):
            return None
        payload = first.data
        for item in items:
            if not isinstance(item, MetaData) or item.data is not payload:
                return None
        return first

    @classmethod
    def _stack_impl(cls, items: Sequence, dim: int, out: Any = None) -> Any:
        first = cls._shared(items)
        if first is None or any(item.batch_size != first.batch_size for item in items):
            return NonTensorData._stack_impl(items, dim, out)  # a NonTensorStack (or the error naming the item)
        from .non_tensor_stack import _write_out

        bs = list(first.batch_size)
        bs.insert(dim, len(items))
        return _write_out(type(first)._new(first.data, torch.Size(bs), first.device), out, "stack")

    @classmethod
    def _cat_impl(cls, items: Sequence, dim: int, out: Any = None) -> Any:
        first = cls._shared(items)
        shape = items[0].batch_size
        if first is None or any(
            len(item.batch_size) != len(shape)
            or item.batch_size[:dim] + item.batch_size[dim + 1 :] != shape[:dim] + shape[dim + 1 :]
            for item in items
        ):
            return NonTensorData._cat_impl(items, dim, out)  # a NonTensorStack (or the error naming the item)
        from .non_tensor_stack import _write_out

        bs = shape[:dim] + (sum(item.batch_size[dim] for item in items),) + shape[dim + 1 :]
        return _write_out(type(first)._new(first.data, torch.Size(bs), first.device), out, "cat")

    def __reduce__(self) -> tuple:
        # MetaData[T] classes are built on demand: pickle T, not the class
        return (_rebuild, (type(self)._expected_type, self.__getstate__()))


NON_TENSOR_CLASSES.add(MetaData)


def _metadata_class(item: Any) -> type:
    return MetaData if item is None else MetaData[item]


def _rebuild(item: Any, state: dict) -> MetaData:
    out = object.__new__(_metadata_class(item))
    out.__setstate__(state)
    return out


# ---- saving: the class of a MetaData as JSON ({"type": None | "module:qualname" | [...]})
def _metadata_tag(value: Any, where: str = "") -> dict | None:
    """What identifies ``value``'s class on disk: None for a NonTensorData, else ``{"type": T's path}``.

    Raises ``TypeError`` naming ``where`` (before anything is written) when ``T`` is not a module-level class.
    """
    if not isinstance(value, MetaData):
        return None
    item = type(value)._expected_type
    return {"type": None if item is None else _type_path(item, where)}


def _type_path(item: Any, where: str) -> Any:
    if isinstance(item, tuple):
        return [_type_path(i, where) for i in item]
    if not isinstance(item, type) or "<locals>" in item.__qualname__:
        raise TypeError(
            f"{where}: cannot save a MetaData[{_type_name(item)}]: its type must be a module-level class, to be found "
            "when loading."
        )
    return f"{item.__module__}:{item.__qualname__}"


def _class_from_tag(tag: Any) -> type:
    """The MetaData class a :func:`_metadata_tag` names; ``ValueError`` for a malformed or unknown one.

    Types are looked up in already imported modules only (a file never makes tdict import a module).
    """
    if type(tag) is not dict or "type" not in tag:
        raise ValueError(f"malformed MetaData tag {tag!r}.")
    path = tag["type"]
    return MetaData if path is None else MetaData[_resolve_type(path)]


def _resolve_type(path: Any) -> Any:
    if type(path) is list and path:
        return tuple(_resolve_type(p) for p in path)
    if type(path) is not str or ":" not in path:
        raise ValueError(f"malformed MetaData type {path!r}.")
    module_name, _, qualname = path.partition(":")
    module = sys.modules.get(module_name)
    if module is None:
        raise ValueError(
            f"the saved MetaData holds a {path!r}, but module {module_name!r} is not imported; import it before loading."
        )
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not isinstance(obj, type):
        raise ValueError(f"the saved MetaData type {path!r} is not a class of the imported module {module_name!r}.")
    return obj
