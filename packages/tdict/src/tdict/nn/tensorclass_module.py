"""Modules typed by tensor classes: ``forward(x: In) -> Out`` with ``In``/``Out`` :class:`~tdict.TensorClass` es.

A :class:`TensorClassModuleBase` subclass names its input and output classes as generic parameters
(``class M(TensorClassModuleBase[In, Out])``); :meth:`TensorClassModuleBase.as_td_module` turns it
into a :class:`~tdict.nn.TensorDictModuleBase` whose ``in_keys``/``out_keys`` are the classes' fields
(a field typed by another tensor class contributes its nested keys).

Examples:
    >>> import torch
    >>> from tdict import TensorClass, TensorDict
    >>> from tdict.nn import TensorClassModuleBase
    >>> class In(TensorClass):
    ...     x: torch.Tensor
    >>> class Out(TensorClass):
    ...     y: torch.Tensor
    >>> class Double(TensorClassModuleBase[In, Out]):
    ...     def forward(self, inp):
    ...         return Out(y=inp.x * 2, batch_size=inp.batch_size)
    >>> Double()(In(x=torch.ones(2), batch_size=[2])).y
    tensor([2., 2.])
    >>> td_module = Double().as_td_module()
    >>> td_module.in_keys, td_module.out_keys
    (['x'], ['y'])
    >>> td_module(TensorDict(x=torch.ones(2), batch_size=[2]))["y"]
    tensor([2., 2.])
"""

from __future__ import annotations

import typing
from typing import Any, Generic, TypeVar

from torch import nn

from ..tensorclass import TensorClass
from .common import TensorDictModuleBase

__all__ = ["TensorClassModuleBase", "TensorClassModuleWrapper"]

InputClass = TypeVar("InputClass")
OutputClass = TypeVar("OutputClass")


def _is_tensorclass_type(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, TensorClass)


def _field_keys(cls: type) -> list:
    """The leaf keys of tensor class ``cls``: one per field, nested through fields typed by a tensor class."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # unresolvable string annotations: fall back to the raw ones
        hints = {}
    keys: list = []
    for field in cls.fields():  # pyright: ignore[reportAttributeAccessIssue]  (a TensorClass classmethod)
        hint = hints.get(field.name, field.type)
        if _is_tensorclass_type(hint):
            keys.extend((field.name, *(sub if isinstance(sub, tuple) else (sub,))) for sub in _field_keys(hint))
        else:
            keys.append(field.name)
    return keys


class TensorClassModuleWrapper(TensorDictModuleBase):
    """A :class:`TensorClassModuleBase` called on TensorDicts (built by ``module.as_td_module()``).

    A call reads the input class's fields from the TensorDict, runs the module on an instance of the
    input class, and writes the output instance's entries into the TensorDict, which it returns.

    Args:
        module: the module to wrap; its input and output types must be tensor classes.
    """

    def __init__(self, module: TensorClassModuleBase) -> None:
        super().__init__()
        if not isinstance(module, TensorClassModuleBase):
            raise TypeError(
                f"TensorClassModuleWrapper: module must be a TensorClassModuleBase, got {type(module).__name__}."
            )
        module._check_td_compatible()
        self.tc_module = module
        self.in_keys = _field_keys(module.input_type)
        self.out_keys = _field_keys(module.output_type)

    def forward(self, tensordict: Any, *args: Any, **kwargs: Any) -> Any:
        module = self.tc_module
        missing = [key for key in self.in_keys if key not in tensordict.keys(True)]
        if missing:
            raise KeyError(
                f"TensorClassModuleWrapper({type(module).__name__}): in_keys {missing} are missing from the input; "
                f"keys present: {sorted(map(str, tensordict.keys(True, True)))}."
            )
        inp = module.input_type.from_tensordict(tensordict.select(*self.in_keys))
        out = module(inp, *args, **kwargs)
        if not isinstance(out, module.output_type):
            raise TypeError(
                f"TensorClassModuleWrapper: {type(module).__name__}.forward returned a {type(out).__name__}, "
                f"expected its output type {module.output_type.__name__}."
            )
        result = out.to_tensordict()
        for key in self.out_keys:
            tensordict.set(key, result.get(key))
        return tensordict


class TensorClassModuleBase(nn.Module, Generic[InputClass, OutputClass]):
    """Base of modules mapping a tensor class instance to another: subclass ``TensorClassModuleBase[In, Out]``.

    The generic parameters are stored as :attr:`input_type` and :attr:`output_type` when the subclass
    is defined; ``forward(x: In) -> Out`` is the subclass's.

    Examples:
        >>> import torch
        >>> from tdict import TensorClass
        >>> from tdict.nn import TensorClassModuleBase
        >>> class In(TensorClass):
        ...     a: torch.Tensor
        ...     b: torch.Tensor
        >>> class Sum(TensorClass):
        ...     total: torch.Tensor
        >>> class Add(TensorClassModuleBase[In, Sum]):
        ...     def forward(self, x):
        ...         return Sum(total=x.a + x.b, batch_size=x.batch_size)
        >>> Add.input_type is In, Add.output_type is Sum
        (True, True)
        >>> Add()(In(a=torch.ones(1), b=torch.ones(1), batch_size=[1])).total
        tensor([2.])
    """

    input_type: Any
    output_type: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if typing.get_origin(base) is TensorClassModuleBase:
                args = typing.get_args(base)
                if not any(isinstance(arg, TypeVar) for arg in args):  # an intermediate generic base keeps its TypeVars
                    cls.input_type, cls.output_type = args

    def _check_td_compatible(self) -> None:
        in_type, out_type = getattr(type(self), "input_type", None), getattr(type(self), "output_type", None)
        if not (_is_tensorclass_type(in_type) and _is_tensorclass_type(out_type)):
            name = lambda t: getattr(t, "__name__", repr(t))  # noqa: E731
            raise ValueError(
                "Only TensorClassModuleBase implementations with both input and output type as TensorClass can be "
                f"wrapped as TensorDict modules: {type(self).__name__} has input type {name(in_type)} and output "
                f"type {name(out_type)}."
            )

    def as_td_module(self) -> TensorClassModuleWrapper:
        """This module as a :class:`TensorClassModuleWrapper` (a TensorDict module over the classes' fields).

        Raises:
            ValueError: when the input or the output type is not a tensor class.
        """
        return TensorClassModuleWrapper(self)
