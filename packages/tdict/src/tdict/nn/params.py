"""TensorDictParams: a TensorDict whose leaves are the parameters and buffers of an ``nn.Module``."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Iterator

import torch
from torch import nn

from .._core.arithmetic import _DTYPE_CASTS, ArithmeticMixin
from .._core.vmap import register_vmap_kind
from ..base import TensorDictBase, is_tensor_collection
from ..tensordict import TensorDict

__all__ = ["Buffer", "TensorDictParams"]

# dtypes made nn.Parameters (as tensordict: bfloat16 and complex leaves become buffers)
_PARAM_DTYPES = (torch.float32, torch.float64, torch.float16)


def _is_batched(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a vmap-batched tensor (detaching it would lose the batching)."""
    functorch = getattr(torch._C, "_functorch", None)
    return functorch is not None and bool(functorch.is_batchedtensor(tensor))


def _is_registered_kind(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, nn.Parameter) or bool(getattr(tensor, "_is_buffer", False))


def _mark_buffer(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` itself, flagged as a buffer (it keeps its autograd history)."""
    tensor._is_buffer = True  # type: ignore[attr-defined]  # what makes isinstance(t, nn.Buffer) true
    return tensor


class _BufferMeta(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, torch.Tensor) and bool(getattr(instance, "_is_buffer", False))


class _Buffer(metaclass=_BufferMeta):
    """``torch.nn.Buffer`` for torch 2.4: ``Buffer(t)`` is a detached alias of ``t`` flagged as a
    buffer, and ``isinstance(x, Buffer)`` tells a tensor so flagged."""

    def __new__(cls, data: torch.Tensor | None = None, *, persistent: bool = True) -> Any:  # type: ignore[misc]
        tensor = _mark_buffer((torch.empty(0) if data is None else data).detach())
        tensor.persistent = persistent  # type: ignore[attr-defined]
        return tensor


# what a TensorDictParams registers its non-parameter leaves as (tensordict.nn.utils.Buffer)
Buffer: Any = getattr(nn, "Buffer", _Buffer)


def _buffer(tensor: torch.Tensor) -> torch.Tensor:
    """``Buffer(tensor)``: a detached alias of ``tensor`` flagged as a buffer."""
    return Buffer(tensor)


def _converted(tensor: torch.Tensor, no_convert: bool) -> torch.Tensor:
    """The leaf a TensorDictParams stores for ``tensor`` (tensordict 0.14's rule).

    Parameters and buffers stay as they are. Otherwise ``float16/32/64`` tensors become
    ``nn.Parameter`` s (unless ``no_convert``) and every other tensor a buffer: a detached
    ``nn.Buffer`` alias, or the tensor itself, flagged, when it requires grad (``no_convert``) or
    is batched by vmap.
    """
    if _is_registered_kind(tensor):
        return tensor
    if not no_convert and tensor.dtype in _PARAM_DTYPES:
        return nn.Parameter(tensor)
    if _is_batched(tensor) or (no_convert and tensor.requires_grad):
        return _mark_buffer(tensor)
    return _buffer(tensor)


def _fresh_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A new leaf of the same kind holding a copy of ``tensor``'s values (outside the graph)."""
    if isinstance(tensor, nn.Parameter):
        return nn.Parameter(tensor.data.clone(), requires_grad=tensor.requires_grad)
    return _buffer(tensor.data.clone())


def _map_leaves(td: Any, fn: Callable[[torch.Tensor], Any]) -> TensorDict:
    """A TensorDict of the same structure as ``td`` whose tensor leaves are ``fn(leaf)``."""

    def entry(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return fn(value)
        if isinstance(value, TensorDictParams):
            return _map_leaves(value._param_td, fn)
        if value._is_non_tensor or value._is_lazy:
            return value
        return _map_leaves(value, fn)

    return td._map_entries(entry, td.batch_size, td._maybe_names())


def _lazy_key(value: Any, path: tuple = ()) -> tuple | None:
    """The key of a lazy stack inside ``value`` (a dict or a collection), or ``None``."""
    if isinstance(value, TensorDictParams) or isinstance(value, torch.Tensor):
        return None
    if is_tensor_collection(value):
        if value._is_non_tensor:
            return None
        if value._is_lazy:
            return path
        items: Any = value._items_raw()
    elif isinstance(value, dict):
        items = value.items()
    else:
        return None
    for key, sub in items:
        found = _lazy_key(sub, path + (key,))
        if found is not None:
            return found
    return None


def _lazy_error(key: tuple) -> RuntimeError:
    return RuntimeError(
        f"TensorDictParams cannot hold a LazyStackedTensorDict (at key {key or '<root>'!r}): its leaves are "
        "stacked anew on every read, so they cannot be registered; densify it first (e.g. with .contiguous())."
    )


class TensorDictParams(TensorDictBase, nn.Module):
    """A TensorDict whose tensors are registered as the parameters and buffers of a module.

    It is a :class:`~tdict.TensorDictBase` (the whole TensorDict API: ``td["a"]``, ``set``,
    ``update``, ``apply``, arithmetic, ``torch.stack``...) and an ``nn.Module``: a module holding it
    exposes its leaves to ``parameters()``, ``state_dict()`` and ``.to()``. As in tensordict 0.14:

    * ``float16/32/64`` leaves become ``nn.Parameter`` s, other leaves buffers (``nn.Buffer``);
      with ``no_convert=True`` parameters stay parameters and every other tensor is a buffer.
      The registered names are the ``"."``-joined keys. The TensorDict given is wrapped, not
      copied: its leaves are converted in place.
    * Values written later (``set``, ``td[key] = ...``, ``update``...) are converted the same way
      and registered; ``pop``, ``del_``, ``rename_key_``, ``exclude(..., inplace=True)``... update
      the registration.
    * Methods returning a new collection (indexing, ``select``, ``apply``, ``+``, ``torch.stack``,
      ``detach``...) return plain TensorDicts computed from the parameters (gradients flow back to
      them); a method returning the wrapped TensorDict returns ``self``. ``clone()`` gives a
      TensorDictParams of new parameters, ``copy()`` one holding the same ones, ``data`` the
      leaves' ``.data``, and ``to(...)`` a new TensorDictParams (``self`` when nothing moves).
    * ``zero_``, ``fill_``, ``copy_``, ``update_``, ``set_``, ``set_at_``, ``update_at_``,
      ``apply_`` write through ``.data`` (no autograd error on leaf parameters); other in-place
      math (``add_``...) is refused by autograd as on any parameter.
    * ``lock=True`` locks the wrapped TensorDict only: writes through the TensorDictParams still
      work, while ``lock_()`` forbids them.

    Args:
        parameters: a TensorDict or a dict of tensors (or keyword entries instead).
        no_convert: register the tensors as they are (parameters stay parameters, the rest are buffers).
        lock: lock the wrapped TensorDict.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictParams
        >>> params = TensorDictParams(TensorDict(w=torch.ones(3), step=torch.zeros((), dtype=torch.long)))
        >>> [name for name, _ in params.named_parameters()], [name for name, _ in params.named_buffers()]
        (['w'], ['step'])
        >>> loss = (params * 2)["w"].sum()  # TensorDict ops on the parameters, gradients flow back
        >>> loss.backward()
        >>> params["w"].grad
        tensor([2., 2., 2.])
        >>> opt = torch.optim.SGD(params.parameters(), lr=0.5)
        >>> opt.step()
        >>> params["w"]
        Parameter containing:
        tensor([0., 0., 0.], requires_grad=True)
    """

    def __init__(self, parameters: Any = None, *, no_convert: bool = False, lock: bool = False, **kwargs: Any) -> None:
        nn.Module.__init__(self)
        if not isinstance(no_convert, bool):
            raise TypeError(f"TensorDictParams: no_convert must be a bool, got {type(no_convert).__name__}.")
        if parameters is None:
            parameters = TensorDict(kwargs)
        elif kwargs:
            raise TypeError(
                f"TensorDictParams: pass parameters or keyword entries, not both (got parameters and {sorted(kwargs)})."
            )
        if isinstance(parameters, TensorDictParams):  # the same leaves, in a new structure
            parameters = parameters._param_td.copy()
        elif isinstance(parameters, dict):
            parameters = TensorDict(parameters)
        elif not isinstance(parameters, TensorDict):
            if is_tensor_collection(parameters) and parameters._is_lazy:
                raise _lazy_error(())
            raise TypeError(
                f"TensorDictParams: parameters must be a TensorDict, a dict or None, got {type(parameters).__name__}."
            )
        self.no_convert = no_convert
        self._param_td = parameters
        self._lock_content = bool(lock)
        self._is_locked = False
        self._lock_ops = None
        self._get_post_hooks: list = []
        self._leaf_keys: dict[str, tuple] = {}
        self._refresh()
        if lock:
            parameters._set_lock(True)

    # ------------------------------------------------------------------ registration
    def _refresh(self) -> None:
        """Convert the leaves not yet parameters or buffers (in place) and register every leaf afresh."""
        params: dict[str, Any] = {}
        buffers: dict[str, Any] = {}
        names: dict[str, tuple] = {}
        self._walk(self._param_td, (), params, buffers, names)
        self._parameters.clear()
        self._parameters.update(params)
        self._buffers.clear()
        self._buffers.update(buffers)
        self._leaf_keys = names

    def _walk(self, node: Any, prefix: tuple, params: dict, buffers: dict, names: dict) -> None:
        for key, value in list(node._items_raw()):
            path = prefix + (key,)
            if isinstance(value, torch.Tensor):
                new = _converted(value, self.no_convert)
                if new is not value:
                    node._set_str(key, new, inplace=False, validated=True, ignore_lock=True)
                name = ".".join(path)
                (params if isinstance(new, nn.Parameter) else buffers)[name] = new
                names[name] = path
            elif isinstance(value, TensorDictParams):  # converted by itself: register its leaves here too
                for name, sub in value._leaf_keys.items():
                    full = ".".join(path) + "." + name
                    (params if name in value._parameters else buffers)[full] = value._parameters.get(
                        name, value._buffers.get(name)
                    )
                    names[full] = path + sub
            elif value._is_non_tensor:
                continue
            elif value._is_lazy:
                raise _lazy_error(path)
            else:
                self._walk(value, path, params, buffers, names)

    def _edit(self, name: str, args: tuple, kwargs: dict) -> Any:
        """Run ``TensorDict.<name>`` on the wrapped TensorDict, then convert and register the leaves.

        With ``lock=True`` the wrapped TensorDict is unlocked for the call (unless ``self`` is locked).
        """
        td = self._param_td
        method = getattr(td, name)
        relock = td._is_locked and not self._is_locked
        if relock:
            td._set_lock(False)
        try:
            out = method(*args, **kwargs)
        finally:
            if relock:
                td._set_lock(True)
            self._refresh()
        return self if out is td else out

    def _sync(self) -> None:
        """Point the TensorDict's leaves at the registered tensors (after ``_apply`` or an assigning load)."""
        td = self._param_td
        for name, key in self._leaf_keys.items():
            value = self._parameters.get(name)
            if value is None:
                value = self._buffers.get(name)
            node = td
            for part in key[:-1]:
                node = node._get_str(part, None)
            if node is not None and node._get_str(key[-1], None) is not value:
                node._set_str(key[-1], value, inplace=False, validated=True, ignore_lock=True)
        if td.device is not None:
            leaves = [t for t in (*self._parameters.values(), *self._buffers.values()) if t is not None]
            device = leaves[0].device if leaves else None
            if device is not None and device != td.device:
                stack: list = [td]
                while stack:
                    node = stack.pop()
                    node._device = device
                    stack.extend(v for v in node._tensordict.values() if type(v) is TensorDict)

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) > 1:  # TensorDict._apply (the engine of apply/named_apply), called on a collection
            return self._param_td._apply(fn, *args, **kwargs)
        # nn.Module._apply (.to(), .half(), .cuda() of a module holding self): buffers keep their objects
        buffers = dict(self._buffers)
        out = nn.Module._apply(self, fn, *args, **kwargs)
        for name, old in buffers.items():
            new = self._buffers[name]
            if new is not old and new is not None and old is not None:
                try:
                    old.data = new
                    self._buffers[name] = old
                except RuntimeError:  # an incompatible tensor type: keep the new one, flagged
                    self._buffers[name] = _mark_buffer(new)
        self._sync()
        return out

    def state_dict(
        self, *args: Any, destination: Any = None, prefix: str = "", keep_vars: bool = False, flatten: bool = True
    ) -> Any:  # type: ignore[override]
        """The module state dict (flat, ``"."``-joined keys); ``flatten=False``: ``TensorDict.state_dict``'s nested one."""
        if not flatten:
            return self._param_td.state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars, flatten=False)
        return nn.Module.state_dict(self, *args, destination=destination, prefix=prefix, keep_vars=keep_vars)

    def load_state_dict(
        self, state_dict: Any, strict: bool = True, assign: bool = False, **kwargs: Any
    ) -> "TensorDictParams":  # type: ignore[override]
        """Load a flat (``"."`` keys) or nested state dict into the leaves (``assign``: replace them); returns ``self``."""
        flat: dict = {}

        def flatten(prefix: str, mapping: Any) -> None:
            for key, value in mapping.items():
                if isinstance(key, str) and key.startswith("__"):  # TensorDict.state_dict's batch_size/device
                    continue
                if isinstance(value, dict) or is_tensor_collection(value):
                    flatten(f"{prefix}{key}.", value)
                else:
                    flat[f"{prefix}{key}"] = value

        flatten("", state_dict)
        nn.Module.load_state_dict(self, flat, strict=strict, assign=assign)
        return self

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        # names hold "." (nn.Module's loader would read them as submodules): load them here
        assign = local_metadata.get("assign_to_params_buffers", False)
        for name in self._leaf_keys:
            full = prefix + name
            if full not in state_dict:
                if strict:
                    missing_keys.append(full)
                continue
            value = state_dict[full]
            is_param = name in self._parameters
            current = self._parameters[name] if is_param else self._buffers[name]
            assert current is not None  # every name is registered, as a parameter or a buffer
            if value.shape != current.shape:
                error_msgs.append(
                    f"size mismatch for {full}: copying a param with shape {tuple(value.shape)}, the shape in current model is {tuple(current.shape)}."
                )
                continue
            if assign:
                if is_param:
                    self._parameters[name] = (
                        value if isinstance(value, nn.Parameter) else nn.Parameter(value, current.requires_grad)
                    )
                else:
                    self._buffers[name] = value if _is_registered_kind(value) else _buffer(value)
            else:
                with torch.no_grad():
                    current.copy_(value)
        if assign:
            self._sync()
        if strict:
            unexpected_keys.extend(
                k for k in state_dict if k.startswith(prefix) and k[len(prefix) :] not in self._leaf_keys
            )

    # ------------------------------------------------------------------ TensorDict API
    @property
    def is_locked(self) -> bool:  # type: ignore[override]
        """Whether ``lock_()`` was called (``lock=True`` locks the wrapped TensorDict only)."""
        return self._is_locked

    def _set_lock(self, locked: bool) -> None:
        self._is_locked = locked
        if locked:
            self._param_td._set_lock(True)
        elif not self._lock_content:
            self._param_td._set_lock(False)

    @property
    def data(self) -> TensorDict:
        """A TensorDict of the leaves' ``.data`` (no autograd; same storage)."""
        return _map_leaves(self._param_td, lambda t: t.data)

    def clone(self, recurse: bool = True, *, device: Any = None) -> Any:  # type: ignore[override]
        """A TensorDictParams of new parameters and buffers holding copies of the values, outside the
        graph (tied leaves stay tied); ``recurse=False``: one holding the very same leaves."""
        if not recurse:
            out = self.copy()
        else:
            memo: dict[int, torch.Tensor] = {}

            def fresh(tensor: torch.Tensor) -> torch.Tensor:
                new = memo.get(id(tensor))
                if new is None:
                    new = memo[id(tensor)] = _fresh_copy(tensor)
                return new

            out = TensorDictParams(_map_leaves(self._param_td, fresh), no_convert=self.no_convert)
        return out if device is None else out.to(device)

    def copy(self) -> "TensorDictParams":
        """A TensorDictParams holding the very same leaves (a new structure)."""
        return TensorDictParams(self._param_td.copy(), no_convert=self.no_convert)

    def __copy__(self) -> "TensorDictParams":
        return self.copy()

    def __deepcopy__(self, memo: dict) -> "TensorDictParams":
        # as clone(), sharing ``memo``: a leaf also held elsewhere in a deep-copied module stays shared
        def fresh(tensor: torch.Tensor) -> torch.Tensor:
            new = memo.get(id(tensor))
            if new is None:
                new = memo[id(tensor)] = _fresh_copy(tensor)
            return new

        out = TensorDictParams(_map_leaves(self._param_td, fresh), no_convert=self.no_convert)
        memo[id(self)] = out
        return out

    def to(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """``TensorDict.to`` on the parameters: ``self`` when nothing changes, else a new TensorDictParams."""
        out = self._param_td.to(*args, **kwargs)
        return self if out is self._param_td else TensorDictParams(out)

    def cpu(self, *, non_blocking: bool = False) -> Any:  # type: ignore[override]
        """``self.to("cpu")``."""
        return self.to("cpu", non_blocking=non_blocking)

    def cuda(self, device: Any = None, *, non_blocking: bool = False) -> Any:  # type: ignore[override]
        """``self.to(device)`` (default ``"cuda"``)."""
        return self.to(torch.device("cuda") if device is None else device, non_blocking=non_blocking)

    @classmethod
    def from_dict(cls, *args: Any, **kwargs: Any) -> "TensorDictParams":  # type: ignore[override]
        """``TensorDictParams(TensorDict.from_dict(...))``."""
        return cls(TensorDict.from_dict(*args, **kwargs))

    def map(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "TensorDictParams.map: cannot map over parameters (workers would get copies); call map on "
            "a detached TensorDict instead (params.data or params.to_tensordict())."
        )

    def memmap_(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "TensorDictParams.memmap_: Cannot build a memmap TensorDict in-place from parameters; use memmap() or "
            "memmap_like(), which return a new TensorDict."
        )

    def pin_memory(self, num_threads: int | None = None, inplace: bool = False) -> Any:
        """``TensorDict.pin_memory`` (a new TensorDict); ``inplace=True`` is refused."""
        if inplace:
            raise RuntimeError("Cannot pin_memory in-place with TensorDictParams (use inplace=False).")
        return self._param_td.pin_memory(num_threads)

    def pin_memory_(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("Cannot pin_memory in-place with TensorDictParams (use pin_memory()).")

    def register_get_post_hook(self, hook: Callable[[Any, torch.Tensor], Any]) -> None:
        """Call ``hook(self, leaf)`` on every tensor read through ``get``, indexing, ``values`` and
        ``items``; a non-``None`` result replaces the leaf read."""
        if not callable(hook):
            raise ValueError(f"register_get_post_hook: hook must be callable, got {type(hook).__name__}.")
        self._get_post_hooks.append(hook)

    def _hooked(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            for hook in self._get_post_hooks:
                new = hook(self, value)
                if new is not None:
                    value = new
        return value

    def get(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        out = self._param_td.get(*args, **kwargs)
        return self._hooked(out) if self._get_post_hooks else out

    def __getitem__(self, index: Any) -> Any:
        td = self._param_td
        if index is Ellipsis or (type(index) is tuple and all(i is Ellipsis for i in index)):
            return self  # as tensordict: params[...] is params
        out = td[index]
        if out is td:
            return self
        return self._hooked(out) if self._get_post_hooks else out

    def values(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        out = self._param_td.values(*args, **kwargs)
        return (self._hooked(v) for v in out) if self._get_post_hooks else out

    def items(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        out = self._param_td.items(*args, **kwargs)
        return ((k, self._hooked(v)) for k, v in out) if self._get_post_hooks else out

    def __iter__(self) -> Iterator[Any]:
        return iter(self._param_td)

    def __len__(self) -> int:
        return len(self._param_td)

    def __contains__(self, key: Any) -> bool:
        return key in self._param_td

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"TensorDictParams(params={self._param_td!r})"

    def __getstate__(self) -> dict:
        state = nn.Module.__getstate__(self)
        state["_lock_ops"] = None  # pending undo callables of `with` blocks
        return state

    def __getattr__(self, name: str) -> Any:
        try:
            return nn.Module.__getattr__(self, name)  # registered parameters and buffers: params.w
        except AttributeError:
            if name.startswith("_"):
                raise
            td = self.__dict__.get("_param_td")
            sub = None if td is None else td._get_str(name, None)
            if sub is not None and is_tensor_collection(sub) and not sub._is_non_tensor and not sub._is_lazy:
                return sub if isinstance(sub, TensorDictParams) else TensorDictParams(sub, no_convert=self.no_convert)
            raise AttributeError(f"'TensorDictParams' object has no attribute {name!r}.") from None


# ---------------------------------------------------------------------- the rest of the API
# Every other TensorDict method is TensorDict's, called on the wrapped TensorDict (``self`` is
# returned where it returns that TensorDict). Methods that may add, remove or replace leaves then
# convert and register them; in-place value ops write through ``.data``.

_WRITE_THROUGH_DATA = ("zero_", "fill_", "copy_", "copy_at_", "set_", "set_at_", "update_", "update_at_", "apply_")
_EDITS = {"set", "setdefault", "update", "pop", "popitem", "del_", "clear", "rename_key_", "set_non_tensor"}
_EDITS |= {"__setitem__", "__delitem__", "_set_str", "_set_tuple", "_del_str", "_set_at_index"}
_EDITS_IF_INPLACE = {"apply", "named_apply", "select", "exclude", "flatten_keys", "unflatten_keys", "split_keys"}
_EDITS_IF_INPLACE |= {"pad", "consolidate"}
_PRIMITIVES = ("_items_raw", "_get_str", "_get_tuple", "_index", "_map_entries", "_tensor_leaves", "_maybe_names")
_PRIMITIVES += ("_with_leaves", "_take_rows", "_missing_key_error")
# element-wise math keeps the generic implementation (leaf by leaf through the primitives above):
# TensorDict's fused torch._foreach_* path fails on leaves mixing parameters and integer buffers
_GENERIC = {n for n in ArithmeticMixin.__dict__ if not n.startswith("_") and not n.endswith("_")}
_GENERIC -= {*_DTYPE_CASTS, "type"}  # casts are TensorDict's (a TensorDict, as in tensordict)
_KEEP = {"lock_", "unlock_", "is_locked", "type"} | set(TensorDictParams.__dict__)


def _plain(name: str) -> Callable:
    def method(self: TensorDictParams, *args: Any, **kwargs: Any) -> Any:
        td = self._param_td
        out = getattr(td, name)(*args, **kwargs)
        return self if out is td else out

    return method


def _editing(name: str) -> Callable:
    def method(self: TensorDictParams, *args: Any, **kwargs: Any) -> Any:
        if name in ("set", "setdefault", "update", "__setitem__", "_set_str", "_set_tuple"):  # refuse before writing
            key = args[0] if args and name != "update" else ()
            prefix = key if isinstance(key, tuple) else (key,)
            for value in list(args[1:2] if name != "update" else args[:1]) + list(kwargs.values()):
                found = _lazy_key(value, prefix)
                if found is not None:
                    raise _lazy_error(found)
        out = self._edit(name, args, kwargs)
        if name == "setdefault":  # the stored (converted) entry, not the value given
            return self._param_td.get(args[0] if args else kwargs["key"])
        return out

    return method


def _edit_if_inplace(name: str) -> Callable:
    parameters = inspect.signature(getattr(TensorDict, name)).parameters
    position, kind = list(parameters).index("inplace") - 1, parameters["inplace"].kind
    plain = _plain(name)

    def method(self: TensorDictParams, *args: Any, **kwargs: Any) -> Any:
        inplace = kwargs.get("inplace", False)
        if kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and len(args) > position:
            inplace = args[position]
        return self._edit(name, args, kwargs) if inplace else plain(self, *args, **kwargs)

    return method


def _through_data(name: str) -> Callable:
    def method(self: TensorDictParams, *args: Any, **kwargs: Any) -> TensorDictParams:
        getattr(self.data, name)(*args, **kwargs)
        return self

    return method


def _property(name: str, original: property) -> property:
    def fget(self: TensorDictParams) -> Any:
        td = self._param_td
        out = getattr(td, name)
        return self if out is td else out

    def fset(self: TensorDictParams, value: Any) -> None:
        setattr(self._param_td, name, value)

    return property(fget, fset if original.fset is not None else None, doc=original.__doc__)


def _static(name: str) -> staticmethod:
    def function(*args: Any, **kwargs: Any) -> Any:
        return getattr(TensorDict, name)(*args, **kwargs)

    function.__name__, function.__qualname__ = name, f"TensorDictParams.{name}"
    function.__doc__ = f"``TensorDict.{name}``: builds a TensorDict, as on :class:`~tdict.TensorDict`."
    return staticmethod(function)


def _install() -> None:
    names = [n for n in dir(TensorDict) if not n.startswith("_")] + list(_PRIMITIVES) + ["__setitem__", "__delitem__"]
    for name in names:
        if name in _GENERIC:
            continue
        if name in _KEEP and name != "type":  # nn.Module.type casts in place: TensorDict's returns a TensorDict
            continue
        attr = inspect.getattr_static(TensorDict, name)
        if isinstance(attr, property):
            method: Any = _property(name, attr)
        elif isinstance(attr, (staticmethod, classmethod)):
            method = _static(name)
        elif not callable(attr):
            continue
        elif name in _WRITE_THROUGH_DATA:
            method = _through_data(name)
        elif name in _EDITS or (name.endswith("_") and name not in ("lock_", "unlock_")):
            method = _editing(name)
        elif name in _EDITS_IF_INPLACE:
            method = _edit_if_inplace(name)
        else:
            method = _plain(name)
        if callable(method) and not isinstance(method, staticmethod):
            method.__name__ = name
            method.__qualname__ = f"TensorDictParams.{name}"
            method.__doc__ = f"``TensorDict.{name}`` on the wrapped parameters (see :class:`TensorDictParams`)."
        setattr(TensorDictParams, name, method)


_install()
register_vmap_kind(TensorDictParams, "params")  # torch.vmap(f, in_dims=0)(params) maps its parameters
