"""TensorDictParams: a TensorDict of parameters that is also an ``nn.Module``."""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import nn

from ..base import is_tensor_collection
from ..tensordict import TensorDict

__all__ = ["TensorDictParams"]


def _unwrap(value: Any) -> Any:
    """The TensorDict inside a TensorDictParams (TensorDict methods take TensorDicts)."""
    return value._param_td if isinstance(value, TensorDictParams) else value


class TensorDictParams(nn.Module):
    """A TensorDict whose tensors are registered as the parameters and buffers of a module.

    Floating (and complex) leaves become ``nn.Parameter`` s, other leaves buffers; with
    ``no_convert=True`` leaves are registered as they are (``nn.Parameter`` s as parameters, any
    other tensor as a buffer). The registered names are the ``"."``-joined keys, so
    ``named_parameters()``, ``state_dict()`` and ``load_state_dict()`` read like those of the module
    the TensorDict came from. The TensorDict API (``get``, ``set``, ``keys``, ``items``, indexing,
    ``to_module``, ...) is forwarded to the wrapped TensorDict; indexing and other
    TensorDict-returning methods return plain TensorDicts that hold the very parameters, while
    ``clone()`` / ``copy()`` return TensorDictParams (new parameters / the same ones). As in
    tensordict, ``apply`` and ``named_apply`` are the TensorDict methods (not ``nn.Module.apply``),
    ``data`` is a TensorDict of the leaves' ``.data``, in-place value ops (``zero_``, ``fill_``,
    ``copy_``, ``update_``, ``apply_``) write through ``.data`` (no autograd error on leaf
    parameters), and ``pop`` / ``del_`` / ``del td[key]`` / ``rename_key_`` keep the registered
    parameters in sync. ``.to(device/dtype)``, ``zero_grad()`` and ``requires_grad_()`` act as on any
    module, and a module holding a TensorDictParams exposes its parameters to optimizers.

    Args:
        parameters: a TensorDict (or a mapping) of tensors.
        no_convert: register leaves without converting them to parameters.
        lock: lock the wrapped TensorDict (no new keys).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictParams
        >>> params = TensorDictParams(TensorDict(w=torch.ones(3), step=torch.zeros((), dtype=torch.long)))
        >>> [name for name, _ in params.named_parameters()], [name for name, _ in params.named_buffers()]
        (['w'], ['step'])
        >>> opt = torch.optim.SGD(params.parameters(), lr=0.5)
        >>> params["w"].sum().backward()
        >>> opt.step()
        >>> params["w"]
        Parameter containing:
        tensor([0.5000, 0.5000, 0.5000], requires_grad=True)
    """

    def __init__(self, parameters: Any = None, no_convert: bool = False, lock: bool = False, **kwargs: Any) -> None:
        super().__init__()
        if parameters is None:
            parameters = TensorDict(kwargs)
        elif kwargs:
            raise TypeError(f"TensorDictParams: pass parameters or keyword entries, not both (got {sorted(kwargs)}).")
        if isinstance(parameters, TensorDictParams):
            parameters = parameters._param_td
        elif not is_tensor_collection(parameters):
            if not hasattr(parameters, "items"):
                raise TypeError(
                    f"TensorDictParams: parameters must be a TensorDict or a mapping, got {type(parameters).__name__}."
                )
            parameters = TensorDict(parameters)
        self.no_convert = no_convert
        td = parameters.apply(self._convert)
        self.__dict__["_param_td"] = td  # not a submodule: its leaves are registered below
        self.__dict__["_names"] = {}
        for key in td.keys(include_nested=True, leaves_only=True):
            self._register(key if isinstance(key, tuple) else (key,), td.get(key))
        if lock:
            td.lock_()

    # ------------------------------------------------------------------ registration
    def _convert(self, tensor: torch.Tensor) -> torch.Tensor:
        if isinstance(tensor, nn.Parameter) or self.no_convert:
            return tensor
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
            return nn.Parameter(tensor)
        return tensor

    def _register(self, key: tuple, value: Any) -> None:
        if not isinstance(value, torch.Tensor):
            return
        name = ".".join(key)
        self._parameters.pop(name, None)
        self._buffers.pop(name, None)
        if isinstance(value, nn.Parameter):
            self._parameters[name] = value
        else:
            self._buffers[name] = value
        self._names[name] = key

    def _reregister(self) -> None:
        """Register the wrapped TensorDict's leaves afresh (after keys were removed or renamed)."""
        self._parameters.clear()
        self._buffers.clear()
        self._names.clear()
        td = self._param_td
        for key in td.keys(include_nested=True, leaves_only=True):
            self._register(key if isinstance(key, tuple) else (key,), td.get(key))

    def _sync(self) -> None:
        """Point the TensorDict's leaves at the registered tensors (after ``_apply``/assign)."""
        td = self._param_td
        for name, key in self._names.items():
            value = self._parameters.get(name)
            if value is None:
                value = self._buffers.get(name)
            node = td
            for part in key[:-1]:
                node = node._tensordict[part]
            node._tensordict[key[-1]] = value
        if td.device is not None:
            leaves = list(self._parameters.values()) + list(self._buffers.values())
            if leaves:
                first = leaves[0]
                assert first is not None  # only tensors are registered (never None)
                device = first.device
                stack = [td]
                while stack:
                    node = stack.pop()
                    node._device = device
                    stack.extend(v for v in node._tensordict.values() if type(v) is TensorDict)

    def _apply(self, fn: Any, recurse: bool = True) -> "TensorDictParams":
        out = super()._apply(fn, recurse)
        self._sync()
        return out

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        # names hold "." (nn.Module's loader would read them as submodules): load them here
        assign = local_metadata.get("assign_to_params_buffers", False)
        for name, key in self._names.items():
            full = prefix + name
            if full not in state_dict:
                if strict:
                    missing_keys.append(full)
                continue
            value = state_dict[full]
            current = self._parameters.get(name)
            if current is None:
                current = self._buffers[name]
            assert current is not None  # every name is registered, as a parameter or a buffer
            if value.shape != current.shape:
                error_msgs.append(
                    f"size mismatch for {full}: copying a param with shape {tuple(value.shape)}, the shape in current model is {tuple(current.shape)}."
                )
                continue
            if assign:
                if isinstance(current, nn.Parameter) and not isinstance(value, nn.Parameter):
                    value = nn.Parameter(value, requires_grad=current.requires_grad)
                self._register(key, value)
            else:
                with torch.no_grad():
                    current.copy_(value)
        if assign:
            self._sync()
        if strict:
            unexpected_keys.extend(
                k for k in state_dict if k.startswith(prefix) and k[len(prefix) :] not in self._names
            )

    # ------------------------------------------------------------------ TensorDict API
    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("__"):
                raise
            return getattr(self.__dict__["_param_td"], name)

    def set(self, key: Any, value: Any, inplace: bool = False, **kwargs: Any) -> "TensorDictParams":
        """Write ``value`` under ``key`` (converted and registered like the constructor's leaves)."""
        if is_tensor_collection(value):
            value = value.apply(self._convert)
        elif isinstance(value, torch.Tensor):
            value = self._convert(value)
        self._param_td.set(key, value, inplace=inplace, **kwargs)
        key = key if isinstance(key, tuple) else (key,)
        stored = self._param_td.get(key)
        if isinstance(stored, torch.Tensor):
            self._register(key, stored)
        else:
            for sub in stored.keys(include_nested=True, leaves_only=True):
                self._register(key + (sub if isinstance(sub, tuple) else (sub,)), stored.get(sub))
        return self

    def update(self, input_dict_or_td: Any, **kwargs: Any) -> "TensorDictParams":
        """Set every entry of ``input_dict_or_td``."""
        for key, value in input_dict_or_td.items():
            self.set(key, value)
        return self

    # TensorDict methods that nn.Module would shadow
    def apply(self, fn: Any, *others: Any, **kwargs: Any) -> Any:
        """``TensorDict.apply`` on the parameters (a TensorDict; not ``nn.Module.apply``)."""
        return self._param_td.apply(fn, *others, **kwargs)

    def named_apply(self, fn: Any, *others: Any, **kwargs: Any) -> Any:
        """``TensorDict.named_apply`` on the parameters (a TensorDict)."""
        return self._param_td.named_apply(fn, *others, **kwargs)

    def clone(self, recurse: bool = True) -> "TensorDictParams":
        """A TensorDictParams of new parameters (``recurse=False``: of the very same tensors)."""
        if not recurse:
            out = TensorDictParams(self._param_td.copy(), no_convert=True)
        else:

            def fresh(t: torch.Tensor) -> torch.Tensor:
                if isinstance(t, nn.Parameter):
                    return nn.Parameter(t.detach().clone(), requires_grad=t.requires_grad)
                return t.clone()

            out = TensorDictParams(self._param_td.apply(fresh), no_convert=True)
        out.no_convert = self.no_convert
        return out

    def copy(self) -> "TensorDictParams":
        """A shallow copy: a new TensorDictParams holding the same parameters."""
        return self.clone(recurse=False)

    @property
    def data(self) -> Any:
        """The leaves' ``.data`` (no autograd), as a TensorDict sharing their storage."""
        return self._param_td.apply(lambda t: t.data)

    # in-place value ops write through .data: an autograd leaf cannot be modified in place
    def zero_(self) -> "TensorDictParams":
        """Set every leaf to zero in place (through ``.data``: no autograd); returns ``self``."""
        self.data.zero_()
        return self

    def fill_(self, key: Any, value: Any) -> "TensorDictParams":
        """Fill the entry ``key`` with ``value`` in place (through ``.data``); returns ``self``."""
        self.data.fill_(key, value)
        return self

    def copy_(self, tensordict: Any, non_blocking: bool = False) -> "TensorDictParams":
        """Copy ``tensordict``'s leaves into the parameters in place (through ``.data``); returns ``self``."""
        self.data.copy_(_unwrap(tensordict), non_blocking=non_blocking)
        return self

    def update_(self, input_dict_or_td: Any, **kwargs: Any) -> "TensorDictParams":
        """``TensorDict.update_`` on the parameters' ``.data`` (existing keys only, in place); returns ``self``."""
        self.data.update_(_unwrap(input_dict_or_td), **kwargs)
        return self

    def apply_(self, fn: Any, *others: Any, **kwargs: Any) -> "TensorDictParams":
        """``TensorDict.apply_`` on the parameters' ``.data``: ``fn``'s results are written in place; returns ``self``."""
        self.data.apply_(fn, *map(_unwrap, others), **kwargs)
        return self

    # structural edits: the registered parameters follow the keys
    def pop(self, key: Any, *default: Any) -> Any:
        """Remove the entry ``key`` and return it (or ``default`` when absent); the parameters are re-registered."""
        out = self._param_td.pop(key, *default)
        self._reregister()
        return out

    def del_(self, key: Any) -> "TensorDictParams":
        """Remove the entry ``key`` (its parameters are unregistered); returns ``self``."""
        self._param_td.del_(key)
        self._reregister()
        return self

    def __delitem__(self, key: Any) -> None:
        self.del_(key)

    def rename_key_(self, old_key: Any, new_key: Any, safe: bool = False) -> "TensorDictParams":
        """Move the entry ``old_key`` to ``new_key`` (``safe``: refuse to overwrite); returns ``self``."""
        self._param_td.rename_key_(old_key, new_key, safe=safe)
        self._reregister()
        return self

    def __getitem__(self, index: Any) -> Any:
        if index is Ellipsis:
            return self
        return self._param_td[index]

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(key, (str, tuple)) and (isinstance(key, str) or all(isinstance(k, str) for k in key)):
            self.set(key, value)
        else:
            self._param_td[key] = value  # an index: writes through to the registered tensors

    def __iter__(self) -> Iterator:
        return iter(self._param_td)

    def __len__(self) -> int:
        return len(self._param_td)

    def __contains__(self, key: Any) -> bool:
        return key in self._param_td.keys(include_nested=True)

    def extra_repr(self) -> str:
        return f"keys={sorted(self._names)}, batch_size={tuple(self._param_td.batch_size)}"
