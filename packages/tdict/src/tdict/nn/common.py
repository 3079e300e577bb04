"""Key-addressed modules: a module reads entries of a TensorDict, computes, and writes entries back.

The call path is the hot path of every policy and loss, so all key parsing happens at construction
(or when the keys change): a call is a few dict lookups around the wrapped module's own call.
"""

from __future__ import annotations

import functools
import inspect
import operator
import warnings
from collections.abc import Mapping, Sequence
from textwrap import indent
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import nn
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks

from .._core.utils import NestedKey, is_tensor_collection, unravel_key
from ..base import NON_TENSOR_CLASSES
from ..tensordict import TensorDict

__all__ = [
    "TensorDictModuleBase",
    "TensorDictModule",
    "TensorDictModuleWrapper",
    "WrapModule",
    "as_tensordict_module",
    "dispatch",
]

_EMPTY_SIZE = torch.Size(())
_Tensor = torch.Tensor


def _parse_key(key: Any, what: str) -> NestedKey:
    """A nested key in its canonical form, or a ValueError naming the bad key."""
    try:
        return unravel_key(key)
    except (TypeError, KeyError) as err:
        raise ValueError(
            f"{what}: {key!r} is not a valid key, a key should be a string or a tuple of strings ({err})"
        ) from None


def _parse_key_list(keys: Any, what: str) -> list:
    """``keys`` (one key or a sequence of keys) as a list of canonical nested keys."""
    if isinstance(keys, (str, tuple)):
        keys = [keys]
    elif not isinstance(keys, Sequence):
        raise ValueError(
            f"{what} must be of type list, str or tuples of str (one key or a list of keys), got {keys!r}."
        )
    out = []
    for key in keys:
        try:
            out.append(unravel_key(key))
        except (TypeError, KeyError) as err:
            raise ValueError(
                f"{what} must be of type list, str or tuples of str: {key!r} in {keys!r} is not a valid key, a key "
                f"should be a string or a tuple of strings ({err})"
            ) from None
    return out


def _payload(value: Any) -> Any:
    """Non-tensor entries reach the module as their Python payload (as in tensordict 0.14)."""
    if value.__class__ in NON_TENSOR_CLASSES:
        return value.tolist() if value._is_lazy else value.data
    return value


def _joined(key: NestedKey, separator: str) -> str:
    return key if type(key) is str else separator.join(key)


class dispatch:
    """Let a TensorDict-in, TensorDict-out method also be called with tensors.

    The decorated function's first argument (after ``self``) must be named ``tensordict``. When it is
    called with a TensorDict, nothing changes. Otherwise, positional tensors and keyword arguments
    (named after the ``source`` keys, tuple keys joined by ``separator``) are gathered into a
    TensorDict, the function runs on it, and the ``dest`` entries come back: one tensor for one key,
    else a tuple in ``dest`` order.

    Args:
        separator: joins the parts of a nested key into a keyword name (default ``"_"``).
        source: the attribute of ``self`` holding the input keys, or the list of keys itself.
        dest: the attribute of ``self`` holding the output keys, or the list of keys itself.
        auto_batch_size: if ``True``, the gathered TensorDict gets the batch dims the inputs
            share; else its batch size is empty.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict.nn import dispatch
        >>> class Add(nn.Module):
        ...     in_keys = ["a", ("nested", "b")]
        ...     out_keys = ["c"]
        ...     @dispatch
        ...     def forward(self, tensordict):
        ...         return tensordict.set("c", tensordict["a"] + tensordict["nested", "b"])
        >>> Add()(a=torch.ones(2), nested_b=torch.ones(2))
        tensor([2., 2.])
    """

    DEFAULT_SEPARATOR = "_"
    DEFAULT_SOURCE = "in_keys"
    DEFAULT_DEST = "out_keys"

    def __new__(
        cls,
        separator: Any = DEFAULT_SEPARATOR,
        source: Any = DEFAULT_SOURCE,
        dest: Any = DEFAULT_DEST,
        auto_batch_size: bool = True,
    ):
        if callable(separator):  # used bare: @dispatch
            self = super().__new__(cls)
            self.__init__(cls.DEFAULT_SEPARATOR, source, dest, auto_batch_size)
            return self(separator)
        return super().__new__(cls)

    def __init__(
        self,
        separator: str = DEFAULT_SEPARATOR,
        source: Any = DEFAULT_SOURCE,
        dest: Any = DEFAULT_DEST,
        auto_batch_size: bool = True,
    ) -> None:
        self.separator = separator
        self.source = source
        self.dest = dest
        self.auto_batch_size = auto_batch_size

    def __call__(self, func: Callable) -> Callable:
        params = list(inspect.signature(func).parameters)
        is_method = bool(params) and params[0] == "self"
        first = params[1] if is_method and len(params) > 1 else (params[0] if params and not is_method else None)
        if first != "tensordict":
            raise RuntimeError(
                f"dispatch: the first argument of {func.__qualname__} must be named 'tensordict', got {first!r}."
            )
        separator, source, dest, auto_bs = self.separator, self.source, self.dest, self.auto_batch_size

        def from_tensors(owner: Any, args: tuple, kwargs: dict) -> Any:
            in_keys = getattr(owner, source) if isinstance(source, str) else source
            out_keys = getattr(owner, dest) if isinstance(dest, str) else dest
            values = {}
            for key in in_keys:
                name = _joined(key, separator)
                if args:
                    if name in kwargs:
                        raise RuntimeError(
                            f"dispatch: Duplicated argument {name!r}, given both positionally and as a keyword argument."
                        )
                    values[key] = args[0]
                    args = args[1:]
                elif name in kwargs:
                    values[key] = kwargs.pop(name)
            td = TensorDict(values, batch_size=_EMPTY_SIZE)
            if auto_bs:
                td.auto_batch_size_()
            out = func(owner, td, *args, **kwargs) if is_method else func(td, *args, **kwargs)
            result = tuple(out.get(key) for key in out_keys if key != "_")
            return result[0] if len(result) == 1 else result

        if is_method:

            @functools.wraps(func)
            def method_wrapper(self_: Any, *args: Any, **kwargs: Any) -> Any:
                if (args and getattr(type(args[0]), "_is_tensor_collection", False)) or "tensordict" in kwargs:
                    return func(self_, *args, **kwargs)
                return from_tensors(self_, args, kwargs)

            return method_wrapper
        else:
            if isinstance(source, str) or isinstance(dest, str):
                raise RuntimeError("dispatch: a plain function needs source and dest given as lists of keys.")

            @functools.wraps(func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if (args and getattr(type(args[0]), "_is_tensor_collection", False)) or "tensordict" in kwargs:
                    return func(*args, **kwargs)
                return from_tensors(None, args, kwargs)

            return wrapper


def _made_for(module: nn.Module, name: Any, parts: tuple, make: Callable[[], Any]) -> Any:
    """``make()``, kept in ``module`` under ``name`` and returned again while ``parts`` are the same
    objects (a plan built from them: the tensor functions of a module's steps, its wrapped callable).
    Copies and pickles of ``module`` keep none (:meth:`TensorDictModuleBase.__getstate__`)."""
    if torch.compiler.is_compiling():  # nothing kept while tracing: a graph guarded on no cache state
        return make()
    made = module.__dict__.setdefault("_made", {})
    held = made.get(name)
    if held is None or len(held[0]) != len(parts) or not all(map(operator.is_, held[0], parts)):
        held = made[name] = (parts, make())
    return held[1]


class TensorDictModuleBase(nn.Module):
    """Base class of modules that read ``in_keys`` from a TensorDict and write ``out_keys`` to it.

    Subclasses implement ``forward(tensordict) -> tensordict``. ``in_keys`` and ``out_keys`` may be
    given as class attributes or set in ``__init__``; they are stored unravelled (``("a",)`` -> ``"a"``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModuleBase
        >>> class Mod(TensorDictModuleBase):
        ...     in_keys = ["a"]
        ...     out_keys = ["b", "c"]
        ...     def forward(self, tensordict):
        ...         b = tensordict["a"] + 1
        ...         return tensordict.set("b", b).set("c", b + 1)
        >>> mod = Mod()
        >>> mod(TensorDict(a=torch.zeros(())))["c"]
        tensor(2.)
        >>> td = mod.select_out_keys("c")(TensorDict(a=torch.zeros(())))
        >>> sorted(td.keys())
        ['a', 'c']
    """

    _in_keys: list = []
    _out_keys: list = []
    _out_keys_apparent: list | None = None

    def __getstate__(self) -> dict:
        # copies and pickles hold no plan made for this object (see _made_for): closures over it
        state = super().__getstate__()
        state.pop("_made", None)
        return state

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # class-attribute keys become the defaults behind the in_keys/out_keys properties
        for name in ("in_keys", "out_keys"):
            value = cls.__dict__.get(name)
            if value is not None and not isinstance(value, property):
                keys = _parse_key_list(value, f"{cls.__name__}.{name}")
                delattr(cls, name)
                setattr(cls, "_" + name, keys)
                if name == "out_keys":
                    cls._out_keys_apparent = keys

    @staticmethod
    def is_tdmodule_compatible(module: Any) -> bool:
        """True when ``module`` declares ``in_keys`` and ``out_keys``."""
        return hasattr(module, "in_keys") and hasattr(module, "out_keys")

    @property
    def in_keys(self) -> list:
        """The keys the module reads (unravelled); assignable."""
        return self._in_keys

    @in_keys.setter
    def in_keys(self, value: Any) -> None:
        self._in_keys = _parse_key_list(value, "in_keys")
        self._keys_changed()

    @property
    def out_keys(self) -> list:
        """The keys the module writes, as :meth:`select_out_keys` left them; assigning sets all of them."""
        apparent = self._out_keys_apparent
        return self._out_keys if apparent is None else apparent

    @out_keys.setter
    def out_keys(self, value: Any) -> None:
        self._out_keys = self._out_keys_apparent = _parse_key_list(value, "out_keys")
        self._keys_changed()

    @property
    def out_keys_source(self) -> list:
        """All the keys the module writes, whatever :meth:`select_out_keys` kept."""
        return self._out_keys

    def _keys_changed(self) -> None:
        """Hook for subclasses that precompute call plans from the keys (the plans :func:`_made_for`
        kept are dropped)."""
        self.__dict__.pop("_made", None)

    def _selecting(self) -> bool:
        apparent = self._out_keys_apparent
        return apparent is not None and apparent != self._out_keys

    def select_out_keys(self, *out_keys: NestedKey) -> "TensorDictModuleBase":
        """Keep only ``out_keys`` among the outputs; the call then also drops the other out-keys.

        As in tensordict, the output keeps the ``in_keys`` and the selected ``out_keys`` only.
        Returns the module itself; :meth:`reset_out_keys` undoes it.

        Raises:
            ValueError: when a key is not one of the module's ``out_keys``.
        """
        keys = [_parse_key(key, "select_out_keys") for key in out_keys]
        for key in keys:
            if key not in self.out_keys:
                raise ValueError(
                    f"select_out_keys: Can't select non existent key {key!r}, it is not one of the out_keys {self.out_keys}."
                )
        self._out_keys_apparent = keys
        self._keys_changed()
        if not getattr(self, "_handles_selection", False) and getattr(self, "_select_hook", None) is None:
            self._select_hook = self.register_forward_hook(_select_hook)
        return self

    def reset_out_keys(self) -> "TensorDictModuleBase":
        """Undo :meth:`select_out_keys`: the module writes all its out-keys again."""
        self._out_keys_apparent = self._out_keys
        self._keys_changed()
        return self

    def reset_parameters_recursive(self, parameters: Any = None) -> Any:
        """Re-initialise every submodule that defines ``reset_parameters``.

        Args:
            parameters: ``None`` resets the module's own parameters in place (returns ``None``); a
                TensorDict shaped like :meth:`TensorDict.from_module`'s output (empty batch size)
                has its tensors re-initialised in place instead (one taken straight from
                ``from_module`` shares the module's storage, a clone does not), and is returned
                detached, requiring grad.
        """
        if parameters is None:
            if not _reset_submodules(self):
                warnings.warn("reset_parameters_recursive found no parameters to reset.", stacklevel=2)
            return None
        if parameters.ndim:
            raise RuntimeError(
                f"reset_parameters_recursive: parameters must have an empty batch size, got {tuple(parameters.batch_size)} "
                "(reset batched parameters slice by slice, or use EnsembleModule.reset_parameters_recursive)."
            )
        fresh = parameters.apply(lambda t: t.detach().requires_grad_(t.is_floating_point() or t.is_complex()))
        with fresh.to_module(self):
            _reset_submodules(self)
        return fresh

    if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise take every type(self).__name__ for it

        @property
        def __name__(self) -> str:
            return type(self).__name__

    def __repr__(self) -> str:
        entries = [f"{name}={child}" for name, child in self.named_children()]
        module = self.__dict__.get("module")
        if module is not None:  # a plain callable is no child
            entries.insert(0, f"module={module}")
        entries.append(f"in_keys={self.in_keys}")
        entries.append(f"out_keys={self.out_keys}")
        body = indent(",\n".join(entries), 4 * " ")
        return f"{type(self).__name__}(\n{body})"


def _reset_submodules(module: nn.Module) -> bool:
    """Call ``reset_parameters`` of every submodule whose class defines it; whether any did."""
    found = False
    with torch.no_grad():
        for sub in module.modules():
            # the class, not the instance: TensorDictModule forwards attributes of the module it wraps
            if callable(getattr(type(sub), "reset_parameters", None)):
                sub.reset_parameters()  # pyright: ignore[reportCallIssue]  (nn.Module.__getattr__ is typed Tensor | Module)
                found = True
    return found


def _select_hook(module: TensorDictModuleBase, args: tuple, output: Any) -> Any:
    # generic select_out_keys for subclasses that do not handle it themselves
    if module._selecting() and is_tensor_collection(output):
        return output.select(*module.in_keys, *module.out_keys, inplace=True, strict=False)
    return output


class TensorDictModule(TensorDictModuleBase):
    """Wrap a module (or any callable) so that it reads and writes TensorDict entries.

    Args:
        module: the callable to wrap, typically an ``nn.Module``. It may return one tensor, a tuple
            of tensors (one per out-key), a dict or a TensorDict holding the out-keys, or ``None``.
        in_keys: the keys read and passed positionally, in order; a single key; or a dict mapping
            keyword-argument names to keys (``{kwarg: key}``; with ``out_to_in_map=False`` it is
            ``{key: kwarg}``), whose values are passed as keyword arguments.
        out_keys: the keys written, one per output; ``"_"`` discards that output.

    Keyword Args:
        out_to_in_map: how a dict ``in_keys`` reads (see above); default ``True``. Given with a
            list of ``in_keys``, it is ignored with a warning (as in tensordict 0.14).
        inplace: ``True`` (default) writes into the input TensorDict and returns it; ``False``
            returns a new TensorDict with an empty batch size holding only the outputs; ``"empty"``
            returns ``input.empty()`` (same batch size and device) filled with the outputs.
        method: call this method of ``module`` instead of ``module(...)``.
        method_kwargs: extra keyword arguments for every call.
        strict: ``True`` (default here, unlike tensordict's ``False``) raises a ``KeyError`` naming a
            missing in-key; ``False`` passes ``None`` in its place, as tensordict does.
        get_kwargs: extra keyword arguments for every ``tensordict.get`` of an in-key, e.g.
            ``{"as_padded_tensor": True}`` to read ragged entries of a lazy stack.

    Calling:
        ``module(td, tensordict_out=None)`` returns the output TensorDict (``tensordict_out`` when
        given). ``module(x, y)`` or ``module(obs=x)`` (nested keys joined by ``"_"``) returns the
        output tensors: one tensor for one out-key, else a tuple.

    Raises:
        ValueError: at construction, for a malformed key or a non-callable module.
        KeyError: at call, naming the missing in-key and the keys the input holds.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> policy = TensorDictModule(nn.Linear(3, 2), in_keys=["obs"], out_keys=[("agent", "action")])
        >>> td = policy(TensorDict(obs=torch.zeros(4, 3), batch_size=[4]))
        >>> td["agent", "action"].shape
        torch.Size([4, 2])
        >>> policy(obs=torch.zeros(4, 3)).shape
        torch.Size([4, 2])
        >>> add = TensorDictModule(lambda x, y: x + y, in_keys={"x": "a", "y": "b"}, out_keys=["c"])
        >>> add(TensorDict(a=torch.ones(()), b=torch.ones(())))["c"]
        tensor(2.)
    """

    _handles_selection = True

    def __init__(
        self,
        module: Callable,
        in_keys: NestedKey | Sequence[NestedKey] | Mapping,
        out_keys: NestedKey | Sequence[NestedKey],
        *,
        out_to_in_map: bool | None = None,
        inplace: bool | str | None = True,
        method: str | None = None,
        method_kwargs: dict | None = None,
        strict: bool = True,
        get_kwargs: dict | None = None,
    ) -> None:
        super().__init__()
        if out_to_in_map is not None and not isinstance(in_keys, Mapping):
            warnings.warn("out_to_in_map is not None but is only used when in_keys is a dictionary.", stacklevel=2)
        if isinstance(in_keys, Mapping):
            if out_to_in_map is None:
                out_to_in_map = True
            # out_to_in_map=True: {kwarg: key}; False: {key: kwarg}
            pairs = list(in_keys.items()) if out_to_in_map else [(kw, key) for key, kw in in_keys.items()]
            for kw, _ in pairs:
                if not isinstance(kw, str):
                    raise ValueError(f"in_keys: keyword-argument names must be strings, got {kw!r} in {in_keys!r}.")
            kwarg_names = [kw for kw, _ in pairs]
            in_keys = [_parse_key(key, "in_keys") for _, key in pairs]
        else:
            kwarg_names = None
            in_keys = _parse_key_list(in_keys, "in_keys")
        out_keys = _parse_key_list(out_keys, "out_keys")
        if isinstance(module, type) or (method is None and not callable(module)):
            raise ValueError(
                f"TensorDictModule: Module {module!r} of type {type(module).__name__} is not callable "
                "(pass an instance, or the name of the method to call with method=...)."
            )
        if method is not None and not callable(getattr(module, method, None)):
            raise ValueError(f"TensorDictModule: module {type(module).__name__} has no method {method!r}.")
        if inplace not in (None, True, False, "empty"):
            raise ValueError(f"TensorDictModule: inplace must be True, False, None or 'empty', got {inplace!r}.")
        if "_" in in_keys:
            warnings.warn('key "_" is for ignoring outputs, it should not be used in in_keys.', stacklevel=2)
        self._kwargs = kwarg_names
        self.strict = bool(strict)
        self.get_kwargs = dict(get_kwargs) if get_kwargs else {}
        self.module = module
        self.inplace = inplace
        self.method = method
        self.method_kwargs = dict(method_kwargs) if method_kwargs else {}
        self._in_keys = in_keys
        self.out_keys = out_keys  # also builds the call plan

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in ("module", "method", "method_kwargs", "inplace", "strict", "get_kwargs"):
            self._keys_changed()

    def _keys_changed(self) -> None:
        # the call plan: everything the hot path needs, as plain tuples in the instance __dict__
        d = self.__dict__
        if "_out_keys" not in d or "inplace" not in d:  # still in __init__
            return
        module = d.get("module", None)
        if module is None:
            module = self._modules.get("module")
        method = d.get("method")
        if method is not None:
            module = getattr(module, method)
        # method_kwargs are merged per call (only when non-empty) so edits to the dict take effect, as in 0.14
        d["_fn"] = module
        d["_made"] = {}  # plans made for the previous keys and settings (see _made_for)
        d["_in_t"] = tuple(self._in_keys)
        out_keys = self._out_keys
        d["_n_out"] = len(out_keys)
        d["_out_plan"] = tuple((i, key) for i, key in enumerate(out_keys) if key != "_")
        d["_kw_t"] = tuple(d["_kwargs"]) if d.get("_kwargs") is not None else None
        d["_select"] = self._selecting()
        # keyword arguments of tensordict.get, or None for the plain (fastest) call
        get_kw = dict(d.get("get_kwargs") or {})
        if not d.get("strict", True):
            get_kw["default"] = None
        d["_get_kw"] = get_kw or None

    def _missing_in_key(self, tensordict: Any) -> KeyError:
        missing = next((key for key in self._in_t if key not in tensordict), None)
        present = list(tensordict.keys(include_nested=True, leaves_only=True))
        return KeyError(
            f"TensorDictModule(in_keys={self.in_keys}, out_keys={self.out_keys}): in_key {missing!r} is missing from "
            f"the input; keys present: {present}."
        )

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: Any, *args: Any, tensordict_out: Any = None, **kwargs: Any) -> Any:
        """Read the in-keys, call the module, write the out-keys (see the class docstring)."""
        if args:
            raise ValueError(f"TensorDictModule got {len(args)} extra positional arguments, expected none.")
        if self.method_kwargs:
            kwargs.update(self.method_kwargs)
        get = tensordict.get
        if self._get_kw is not None:
            get = functools.partial(get, **self._get_kw)
        try:
            if self._kw_t is None:
                keys = self._in_t
                if len(keys) == 1:
                    value = get(keys[0])
                    out = self._fn(value if type(value) is _Tensor else _payload(value), **kwargs)
                else:
                    values = [get(key) for key in keys]
                    out = self._fn(*[v if type(v) is _Tensor else _payload(v) for v in values], **kwargs)
            else:
                for name, key in zip(self._kw_t, self._in_t):
                    value = get(key)
                    kwargs[name] = value if type(value) is _Tensor else _payload(value)
                out = None  # set below, outside the KeyError guard
        except KeyError:
            if all(key in tensordict for key in self._in_t):
                raise  # the module itself raised
            raise self._missing_in_key(tensordict) from None
        if self._kw_t is not None:
            out = self._fn(**kwargs)
        out = self._outputs(out)
        if tensordict_out is None:
            inplace = self.inplace
            if inplace is True:
                tensordict_out = tensordict
            elif inplace == "empty":
                tensordict_out = tensordict.empty()
            else:
                tensordict_out = TensorDict._new_unsafe({}, _EMPTY_SIZE)
        for i, key in self._out_plan:
            tensordict_out.set(key, out[i])
        if self._select:
            tensordict_out.select(*self.in_keys, *self.out_keys, inplace=True, strict=False)
        return tensordict_out

    def _outputs(self, out: Any) -> tuple:
        """What the module returned as a tuple of one value per out-key (length checked)."""
        if type(out) is not tuple:
            if isinstance(out, torch.Tensor):
                out = (out,)
            elif out is None:
                out = ()
            elif isinstance(out, Mapping) or is_tensor_collection(out):
                out = self._from_mapping(out)
            else:
                out = (out,)
        if len(out) != self._n_out:
            raise RuntimeError(
                f"TensorDictModule: the module returned {len(out)} outputs but out_keys={self.out_keys_source} "
                f"expects {self._n_out}."
            )
        return out

    def tensor_function(self, batch_dims: int = 0) -> Callable[..., tuple] | None:
        """The call on tensors: ``f(*inputs)`` takes the in-key entries (plain tensors, in ``in_keys``
        order) and returns the values a call on a TensorDict with ``batch_dims`` batch dims writes,
        one per out-key (``"_"`` positions included), without building or filling a TensorDict.

        ``None`` when a call does more than run the module: keyword in-keys, ``method_kwargs``,
        ``get_kwargs`` or ``strict=False``, :meth:`select_out_keys` in effect, hooks on this module
        (or global forward hooks), or a subclass with its own ``forward`` (a subclass keeps the path
        by also overriding this method). Ask at each use: the answer follows the module's settings.

        Examples:
            >>> import torch
            >>> from tdict.nn import TensorDictModule
            >>> m = TensorDictModule(lambda x, y: (x + y, x * y), in_keys=["x", "y"], out_keys=["s", "p"])
            >>> m.tensor_function()(torch.tensor(2.0), torch.tensor(3.0))
            (tensor(5.), tensor(6.))
            >>> m.select_out_keys("s").tensor_function() is None
            True
        """
        cls = type(self)
        if cls.forward is not TensorDictModule.forward and cls.tensor_function is TensorDictModule.tensor_function:
            return None
        if self._kw_t is not None or self.method_kwargs or self._get_kw is not None or self._select:
            return None
        if self._forward_hooks or self._forward_pre_hooks or self._backward_hooks or self._backward_pre_hooks:
            return None
        if _global_forward_hooks or _global_forward_pre_hooks:
            return None
        # one function per batch_dims, made again when the wrapped callable or the keys change
        fn, outputs = self._fn, self._outputs
        return _made_for(self, ("tensor_function", batch_dims), (fn,), lambda: lambda *inputs: outputs(fn(*inputs)))

    def _from_mapping(self, out: Any) -> tuple:
        if isinstance(out, Mapping):
            out = {unravel_key(key): value for key, value in out.items()}
        missing = [key for key in self._out_keys if key != "_" and key not in out]
        if missing:
            return (out,)  # not a keyed output: one value
        return tuple(None if key == "_" else out[key] for key in self._out_keys)

    @property
    def device(self) -> torch.device:
        """The device of the first parameter (CPU for a module without parameters)."""
        for param in self.parameters():
            return param.device
        return torch.device("cpu")

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_"):
                raise
            module = self.__dict__.get("module")
            if module is None:
                module = self.__dict__.get("_modules", {}).get("module")
            if module is None:
                raise
            return getattr(module, name)


class as_tensordict_module:
    """Decorator turning a function (or a method) into a :class:`TensorDictModule` call.

    The decorated callable takes a TensorDict: it reads ``in_keys`` (passed positionally, after
    ``self`` for a method), and writes its outputs at ``out_keys``, returning the TensorDict.

    Args:
        in_keys: the keys read (one key or a list of keys).
        out_keys: the keys written (one key or a list of keys).

    Examples:
        >>> from tdict import TensorDict
        >>> from tdict.nn import as_tensordict_module
        >>> @as_tensordict_module(in_keys="c", out_keys="d")
        ... def plus_one(c):
        ...     return c + 1
        >>> plus_one(TensorDict(c=0))["d"]
        tensor(1)
        >>> class Scaler:
        ...     factor = 3
        ...     @as_tensordict_module(in_keys=["x"], out_keys=["y"])
        ...     def scale(self, x):
        ...         return x * self.factor
        >>> Scaler().scale(TensorDict(x=2))["y"]
        tensor(6)
    """

    def __init__(self, *, in_keys: Any, out_keys: Any) -> None:
        self.in_keys = _parse_key_list(in_keys, "as_tensordict_module: in_keys")
        self.out_keys = _parse_key_list(out_keys, "as_tensordict_module: out_keys")

    def __call__(self, func: Callable) -> Any:
        if not callable(func):
            raise TypeError(f"as_tensordict_module: expected a function to decorate, got {type(func).__name__}.")
        return _TensorDictFunction(func, self.in_keys, self.out_keys)


class _TensorDictFunction:
    """What :class:`as_tensordict_module` returns: a TensorDict-taking callable; on a class, a method."""

    def __init__(self, func: Callable, in_keys: list, out_keys: list) -> None:
        self.func = func
        self.in_keys = in_keys
        self.out_keys = out_keys
        self._module: TensorDictModule | None = None
        functools.update_wrapper(self, func)

    def _td_module(self, func: Callable) -> TensorDictModule:
        return TensorDictModule(func, in_keys=self.in_keys, out_keys=self.out_keys)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module = self._module
        if module is None:
            module = self._module = self._td_module(self.func)
        return module(*args, **kwargs)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        # a method: bound to the instance, wrapped afresh (the module holds the bound method)
        return self._td_module(self.func.__get__(instance, owner))


from .wrappers import TensorDictModuleWrapper, WrapModule  # noqa: E402  (re-exported: their historical home)
