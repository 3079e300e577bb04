"""Module wrappers: a TensorDict module behind another one, and a plain TensorDict function as a module."""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

from .._core.utils import NestedKey
from .common import TensorDictModuleBase, _parse_key_list

__all__ = ["TensorDictModuleWrapper", "WrapModule"]


class TensorDictModuleWrapper(TensorDictModuleBase):
    """Wrap a TensorDict module: calls and attribute reads go to it, except what a subclass overrides.

    Subclass it to change one behaviour of a module (e.g. an exploration wrapper that edits the
    action after the policy ran) while keeping its keys, parameters and attributes.

    Args:
        td_module: the module to wrap (any :class:`TensorDictModuleBase`).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule, TensorDictModuleWrapper
        >>> policy = TensorDictModule(nn.Linear(3, 2), in_keys=["obs"], out_keys=["action"])
        >>> class Clamp(TensorDictModuleWrapper):
        ...     def forward(self, tensordict):
        ...         tensordict = self.td_module(tensordict)
        ...         return tensordict.set("action", tensordict["action"].clamp(-0.1, 0.1))
        >>> wrapped = Clamp(policy)
        >>> td = wrapped(TensorDict(obs=torch.randn(4, 3) * 100, batch_size=[4]))
        >>> bool(td["action"].abs().max() <= 0.1), wrapped.in_keys, wrapped.out_keys
        (True, ['obs'], ['action'])
        >>> wrapped.module is policy.module  # attributes come from the wrapped module
        True
    """

    def __init__(self, td_module: TensorDictModuleBase) -> None:
        super().__init__()
        if not isinstance(td_module, nn.Module):
            raise TypeError(f"TensorDictModuleWrapper: td_module must be an nn.Module, got {type(td_module).__name__}.")
        self.td_module = td_module

    @property
    def in_keys(self) -> list:
        return self.td_module.in_keys

    @in_keys.setter
    def in_keys(self, value: Any) -> None:
        self.td_module.in_keys = value

    @property
    def out_keys(self) -> list:
        return self.td_module.out_keys

    @out_keys.setter
    def out_keys(self, value: Any) -> None:
        self.td_module.out_keys = value

    @property
    def out_keys_source(self) -> list:
        return self.td_module.out_keys_source

    def select_out_keys(self, *out_keys: NestedKey) -> "TensorDictModuleWrapper":
        """Select outputs of the wrapped module (see :meth:`TensorDictModuleBase.select_out_keys`)."""
        self.td_module.select_out_keys(*out_keys)
        return self

    def reset_out_keys(self) -> "TensorDictModuleWrapper":
        self.td_module.reset_out_keys()
        return self

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            modules = self.__dict__.get("_modules")
            if name.startswith("__") or not modules or "td_module" not in modules:
                raise
            return getattr(modules["td_module"], name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.td_module(*args, **kwargs)


class WrapModule(TensorDictModuleBase):
    """Wrap a plain callable ``TensorDict -> TensorDict`` as a module (a step of a sequence).

    Args:
        func: the callable.

    Keyword Args:
        inplace: if ``True`` and ``func`` returns another TensorDict, it is merged into the input.
        in_keys: the keys ``func`` reads (informative, for :class:`~tdict.nn.TensorDictSequential`).
        out_keys: the keys ``func`` writes (informative).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import WrapModule
        >>> double = WrapModule(lambda td: td.set("y", td["x"] * 2), in_keys=["x"], out_keys=["y"])
        >>> double(TensorDict(x=torch.ones(())))["y"]
        tensor(2.)
    """

    _handles_selection = False

    def __init__(self, func: Callable, *, inplace: bool = False, in_keys: Any = None, out_keys: Any = None) -> None:
        super().__init__()
        if not callable(func):
            raise ValueError(f"WrapModule: {func!r} is not callable.")
        self.func = func
        self.inplace = inplace
        self._in_keys = [] if in_keys is None else _parse_key_list(in_keys, "in_keys")
        self._out_keys = self._out_keys_apparent = [] if out_keys is None else _parse_key_list(out_keys, "out_keys")

    def forward(self, data: Any) -> Any:
        result = self.func(data)
        if self.inplace and result is not data:
            return data.update(result)
        return result

    def __repr__(self) -> str:
        return f"WrapModule(\n    func={self.func},\n    in_keys={self.in_keys},\n    out_keys={self.out_keys})"
