"""Delegation: a collection class whose instances wrap a backing collection, ``obj._source``.

:func:`install_delegation` gives such a wrapper class the methods of a template class (every
public method of :class:`~tdict.TensorDict`, the operator dunders and the collection primitives):
each one runs on the backing collection, so the wrapper behaves exactly as what it wraps, with
wrapper arguments unwrapped first. Results are re-wrapped:

- the backing collection itself (in-place methods, ``lock_``...) comes back as the wrapper;
- a backing collection of a wrapper argument (``out=``) comes back as that argument;
- any other collection (``clone``, indexing, ``apply``, shape ops), and tuples or lists of
  collections (``unbind``, ``split``), come back wrapped in the instance's class, through the
  class's ``_from_source``;
- entries, conversions, reductions and comparisons (:data:`NO_WRAP`) come back as they are.

Methods the wrapper class defines itself are left alone. Used by :class:`tdict.TypedTensorDict`.
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable

from ..base import TensorDictBase

__all__ = ["NO_WRAP", "install_delegation", "unwrap"]

# Results returned as the backing collection gives them, as in tensordict's TypedTensorDict.
NO_WRAP = frozenset(
    # entries, conversions, introspection
    "get get_at get_non_tensor pop popitem setdefault keys values items non_tensor_items to_dict to_tensordict "
    "to_namedtuple to_pytree to_padded_tensor to_lazystack tolist numpy state_dict data_ptr entry_class to_module "
    # reductions
    "sum nansum mean nanmean std var prod max min amax amin norm logsumexp quantile cummax cummin all any allclose "
    # comparisons
    "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __and__ __or__ __xor__".split()
)
_DUNDERS = tuple(
    "__add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __floordiv__ __mod__ __pow__ "
    "__rpow__ __neg__ __abs__ __invert__ __iadd__ __isub__ __imul__ __itruediv__ __ipow__ __eq__ __ne__ __lt__ "
    "__le__ __gt__ __ge__ __and__ __or__ __xor__ __delitem__ __contains__ __len__".split()
)
# Collection primitives, answered by the backing collection as they are.
_DIRECT = tuple(
    "_items_raw _get_str _get_tuple _del_str _tensor_leaves _maybe_names _set_lock _push_op _pop_op "
    "_missing_key_error".split()
)
# Primitives whose collection results are re-wrapped.
_PRIVATE_WRAPPED = ("_index", "_map_entries", "_set_at_index")


def unwrap(value: Any, wrapper: type) -> Any:
    """The backing collection of a ``wrapper`` instance (also inside a list or tuple); else ``value``."""
    if isinstance(value, wrapper):
        return value._source
    if type(value) in (list, tuple) and any(isinstance(v, wrapper) for v in value):
        return type(value)(v._source if isinstance(v, wrapper) else v for v in value)
    return value


def install_delegation(wrapper: type, template: type) -> None:
    """Give ``wrapper`` the methods of ``template``, run on ``obj._source`` (see the module docstring)."""

    def unwrap_args(args: tuple, kwargs: dict, pairs: list) -> tuple[tuple, dict]:
        if any(isinstance(a, (wrapper, list, tuple)) for a in args):
            new_args = []
            for a in args:
                u = unwrap(a, wrapper)
                if u is not a and isinstance(a, wrapper):
                    pairs.append((u, a))
                new_args.append(u)
            args = tuple(new_args)
        if kwargs:
            new_kwargs = {}
            for k, v in kwargs.items():
                u = unwrap(v, wrapper)
                if u is not v and isinstance(v, wrapper):
                    pairs.append((u, v))
                new_kwargs[k] = u
            kwargs = new_kwargs
        return args, kwargs

    def is_plain(out: Any) -> bool:
        return isinstance(out, TensorDictBase) and not out._is_non_tensor and not isinstance(out, wrapper)

    def rewrap(self: Any, out: Any, pairs: list) -> Any:
        source = self._source
        if out is source:
            return self
        for inner, outer in pairs:
            if out is inner:
                return outer
        if is_plain(out):
            return type(self)._from_source(out)
        if type(out) in (tuple, list) and out and all(is_plain(o) for o in out):
            return type(out)(self if o is source else type(self)._from_source(o) for o in out)
        return out

    def forwarder(name: str, wrap: bool) -> Callable:
        if wrap:

            def method(self: Any, *args: Any, **kwargs: Any) -> Any:
                pairs: list = []
                if args or kwargs:
                    args, kwargs = unwrap_args(args, kwargs, pairs)
                return rewrap(self, getattr(self._source, name)(*args, **kwargs), pairs)

        else:

            def method(self: Any, *args: Any, **kwargs: Any) -> Any:
                if args or kwargs:
                    args, kwargs = unwrap_args(args, kwargs, [])
                out = getattr(self._source, name)(*args, **kwargs)
                return self if out is self._source else out

        method.__name__ = name
        method.__qualname__ = f"{wrapper.__name__}.{name}"
        method.__doc__ = f"Like :meth:`{template.__module__}.{template.__name__}.{name}`, on the backing collection."
        return method

    def direct(name: str) -> Callable:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return getattr(self._source, name)(*args, **kwargs)

        method.__name__ = name
        method.__qualname__ = f"{wrapper.__name__}.{name}"
        return method

    own = wrapper.__dict__
    for name in dir(template):
        if (
            name[:1] != "_"
            and name not in own
            and isinstance(inspect.getattr_static(template, name), types.FunctionType)
        ):
            setattr(wrapper, name, forwarder(name, name not in NO_WRAP))
    for name in _DUNDERS:
        if name not in own and hasattr(template, name):
            setattr(wrapper, name, forwarder(name, name not in NO_WRAP))
    for name in _PRIVATE_WRAPPED:
        if name not in own:
            setattr(wrapper, name, forwarder(name, True))
    for name in _DIRECT:
        if name not in own:
            setattr(wrapper, name, direct(name))
