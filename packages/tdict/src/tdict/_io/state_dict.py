"""State dicts of tensor collections, in tensordict 0.14's layout, which ``torch.load(weights_only=True)`` reads.

``td.state_dict()`` is an ``OrderedDict`` of the tensors (dotted keys, ``"a.b"``; with
``flatten=False`` nested ``OrderedDict`` s) whose ``_metadata`` attribute holds, per level (``""`` for
the root, ``"a"`` below it), the batch size, the device, the non-tensor payloads (``"_non_tensor"``)
and a tensor class's type (``"_type"``), as ``nn.Module.state_dict`` keeps its own metadata.
``td.load_state_dict(sd)`` reads that layout, the legacy one (``"__batch_size"`` / ``"__device"``
entries per level, and a tensor class's ``"_tensordict"`` / ``"_non_tensordict"``), and plain dicts of
tensors; it checks every key, shape and batch size before the first write.

Examples:
    >>> import torch
    >>> from tdict import TensorDict
    >>> td = TensorDict({"a": torch.arange(3.0), "n": {"b": torch.ones(3)}, "tag": "x"}, [3])
    >>> sd = td.state_dict()
    >>> list(sd), sd._metadata["n"]["batch_size"], sd._metadata[""]["_non_tensor"]
    (['a', 'n.b'], torch.Size([3]), {'tag': 'x'})
    >>> target = td.clone().zero_()
    >>> _ = target.load_state_dict(sd)
    >>> target["a"].tolist()
    [0.0, 1.0, 2.0]
"""

from __future__ import annotations

import collections
from typing import Any

import torch

from .._core.entries import _is_lazy_stack
from .._core.utils import content_of, parse_batch_size, parse_device
from ..base import is_tensor_collection
from ..errors import LOCKED
from ..memmap import MemoryMappedTensor
from .memmap_layout import _class_path
from ..unbatched import UNBATCHED_TYPES

__all__ = ["load_state_dict", "state_dict"]


def _is_non_tensor(obj: Any) -> bool:
    return not isinstance(obj, torch.Tensor) and is_tensor_collection(obj) and type(obj)._is_non_tensor


_SENTINELS = ("__batch_size", "__device")
_SAFE_SCALARS = (str, int, float, bool, type(None))


def _state_payload(value: Any, key: str) -> Any:
    data = value.tolist() if getattr(value, "_is_lazy", False) else value.data
    if _weights_only_safe(data):
        return data
    raise TypeError(
        f"state_dict: key {key!r} holds a {type(data).__name__} (non-tensor data); a state dict holds tensors "
        "and str/int/float/bool/None values (and lists of those) only. Exclude the key first."
    )


def _weights_only_safe(x: Any) -> bool:
    if isinstance(x, _SAFE_SCALARS):
        return True
    return type(x) in (list, tuple) and all(_weights_only_safe(v) for v in x)


def state_dict(
    td: Any, destination: dict | None = None, prefix: str = "", keep_vars: bool = False, flatten: bool = True
) -> dict:
    """An ``OrderedDict`` of ``td``'s tensors with the batch sizes, devices and non-tensor payloads in
    its ``_metadata`` attribute (see the module docstring).

    Nested collections give dotted keys, or nested ``OrderedDict`` s (each with its own ``_metadata``)
    with ``flatten=False``. Tensors are detached unless ``keep_vars``; memory-mapped leaves come out
    as plain tensors sharing the data, so ``torch.save`` stores values, not file names. Non-tensor
    payloads must be str/int/float/bool/None or lists of them.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> sd = TensorDict({"a": torch.zeros(2), "b": {"c": torch.ones(2)}}, [2]).state_dict()
        >>> list(sd), list(sd._metadata)
        (['a', 'b.c'], ['', 'b'])
        >>> nested = TensorDict({"b": {"c": torch.ones(2)}}, [2]).state_dict(flatten=False)
        >>> list(nested["b"]), nested["b"]._metadata[""]["batch_size"]
        (['c'], torch.Size([2]))
    """
    out = _with_metadata(collections.OrderedDict())
    _state_dict_into(td, out, out._metadata, prefix, keep_vars, flatten, ())
    if destination is None:
        return out
    destination.update(out)
    try:
        destination._metadata = getattr(destination, "_metadata", None) or collections.OrderedDict()  # type: ignore[attr-defined]
        destination._metadata.update(out._metadata)  # type: ignore[attr-defined]
    except AttributeError:  # a destination that takes no attributes (a plain dict) keeps the tensors only
        pass
    return destination


def _with_metadata(d: Any) -> Any:
    d._metadata = collections.OrderedDict()
    return d


def _state_dict_into(td: Any, out: Any, meta: dict, prefix: str, keep_vars: bool, flatten: bool, path: tuple) -> None:
    content = content_of(td)
    info: dict = {"batch_size": td.batch_size, "device": td.device}
    if getattr(type(td), "_is_tensorclass", False):
        info["_type"] = _class_path(type(td))  # module:qualname, as the memmap metadata records it
    meta[prefix[:-1] if prefix.endswith(".") else prefix] = info
    payloads: dict = {}
    for key, value in content._items_raw():
        if key in _SENTINELS:
            raise KeyError(
                f"state_dict: key {path + (key,)!r} is reserved for the legacy metadata entries {_SENTINELS}."
            )
        if flatten and "." in key:
            raise KeyError(f"state_dict(flatten=True): key {path + (key,)!r} contains '.', the flattening separator.")
        name = prefix + key
        if isinstance(value, torch.Tensor):
            if type(value) is MemoryMappedTensor:
                value = value.as_subclass(torch.Tensor)
            out[name] = value if keep_vars else value.detach()
        elif _is_non_tensor(value):
            payloads[key] = _state_payload(value, name)
        elif flatten:
            _state_dict_into(value, out, meta, name + ".", keep_vars, True, path + (key,))
        else:
            sub = _with_metadata(collections.OrderedDict())
            _state_dict_into(value, sub, sub._metadata, "", keep_vars, False, path + (key,))
            out[name] = sub
    if payloads:
        info["_non_tensor"] = payloads


def _unflatten(sd: dict) -> dict:
    out: dict = {}
    for key, value in sd.items():
        parts = key.split(".") if isinstance(key, str) else [key]
        node = out
        for i, part in enumerate(parts[:-1]):
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise KeyError(
                    f"load_state_dict: key {'.'.join(parts[: i + 1])!r} is both a value and a prefix of {key!r}."
                )
            node = nxt
        if parts[-1] in node and isinstance(node[parts[-1]], dict):
            raise KeyError(f"load_state_dict: key {key!r} is both a value and a prefix of other keys.")
        node[parts[-1]] = value
    return out


def load_state_dict(td: Any, sd: dict, strict: bool = True, assign: bool = False, from_flatten: bool = False) -> Any:
    """Load a dict made by :func:`state_dict` (nested or flat) into ``td``; returns ``td``.

    Every key, shape and batch size is checked before the first write. Without ``assign``
    tensors are copied into the existing leaves (shapes must match exactly); with ``assign``
    they replace them. ``strict`` requires the same keys (empty sub-collections aside).
    Flat dicts are detected (dotted keys that ``td`` does not have) or forced by ``from_flatten``.
    The ``_metadata`` attribute written by tensordict 0.14's ``state_dict`` is understood too.
    """
    if not isinstance(sd, dict):
        raise TypeError(f"load_state_dict expects a dict, got {type(sd).__name__}.")
    content = content_of(td)
    sd = _from_legacy_tensorclass(td, _from_metadata_attr(sd))
    if from_flatten or any(isinstance(k, str) and "." in k and content._get_str(k, None) is None for k in sd):
        sd = _unflatten(sd)
    actions: list = []
    _plan_load(td, sd, strict, assign, (), actions)
    for action in actions:
        action()
    return td


def _from_metadata_attr(sd: dict) -> dict:
    """The legacy form of ``sd`` (``"__batch_size"`` / ``"__device"`` entries, non-tensor payloads as
    entries) from a ``_metadata`` attribute (``{"": {...}, "sub": {...}}``), nested dicts included."""
    out = {k: _from_metadata_attr(v) if isinstance(v, dict) else v for k, v in sd.items()}
    meta = getattr(sd, "_metadata", None)
    if not isinstance(meta, dict) or "__batch_size" in sd:
        return out
    for level, info in meta.items():
        if not (isinstance(level, str) and isinstance(info, dict)):
            continue
        dotted = level + "." if level else ""
        if info.get("batch_size") is not None:
            out[dotted + "__batch_size"] = info["batch_size"]
            out[dotted + "__device"] = info.get("device")
        for key, payload in (info.get("_non_tensor") or {}).items():
            out[dotted + key] = payload
    return out


def _from_legacy_tensorclass(td: Any, sd: dict) -> dict:
    """A tensor class's legacy state dict (``{"_tensordict": {...}, "_non_tensordict": {...}}``) as one level."""
    if getattr(type(td), "_is_tensorclass", False) and set(sd) <= {"_tensordict", "_non_tensordict"} and sd:
        inner = sd.get("_tensordict")
        if isinstance(inner, dict):
            return {**_from_metadata_attr(inner), **dict(sd.get("_non_tensordict") or {})}
    return sd


def _plan_load(td: Any, sd: dict, strict: bool, assign: bool, path: tuple, actions: list) -> None:
    content = content_of(td)
    sd = dict(sd)
    batch_size = sd.pop("__batch_size", None)
    device = sd.pop("__device", None)
    batch_size = td.batch_size if batch_size is None else parse_batch_size(batch_size)
    if device is not None and td.device is not None and parse_device(device) != td.device:
        raise RuntimeError(
            f"load_state_dict: {path or '<root>'!r} was saved on {device}, the destination is on {td.device}."
        )
    own = dict(content._items_raw())
    if strict:
        extra_sd = [k for k in sd if k not in own and not (isinstance(sd[k], dict) and _dict_is_empty(sd[k]))]
        extra_td = [
            k
            for k in own
            if k not in sd and not (is_tensor_collection(own[k]) and not _is_non_tensor(own[k]) and own[k].is_empty())
        ]
        if extra_sd or extra_td:
            raise RuntimeError(
                f"load_state_dict (strict): key sets differ at {path or '<root>'!r}: keys only in the state dict "
                f"{sorted(map(str, extra_sd))}, keys only in the collection {sorted(map(str, extra_td))}."
            )
    n = len(batch_size)
    new_keys = [k for k in sd if k not in own]
    if new_keys and td.is_locked:
        raise RuntimeError(
            f"{LOCKED}: load_state_dict cannot add keys {new_keys} at {path or '<root>'!r}; unlock_() it first."
        )
    for key, value in sd.items():
        full = path + (key,)
        dest = own.get(key)
        if isinstance(value, dict):
            sub_bs = value.get("__batch_size")
            if sub_bs is not None and tuple(sub_bs)[:n] != tuple(batch_size):
                raise RuntimeError(
                    f"load_state_dict: key {full!r} has batch size {list(sub_bs)}, which does not start with {list(batch_size)}."
                )
            if dest is None:
                from ..tensordict import TensorDict

                dest = TensorDict(batch_size=value.get("__batch_size", batch_size), device=td.device)
                actions.append(_setter(content, key, dest))
            elif isinstance(dest, torch.Tensor) or _is_non_tensor(dest):
                raise RuntimeError(
                    f"load_state_dict: key {full!r} is a sub-collection in the state dict but a leaf in the collection."
                )
            _plan_load(dest, value, strict, assign, full, actions)
            continue
        if isinstance(value, torch.Tensor):
            if value.shape[:n] != batch_size and type(value) not in UNBATCHED_TYPES:
                raise RuntimeError(
                    f"load_state_dict: key {full!r} has shape {list(value.shape)}, which does not start with the batch size {list(batch_size)}."
                )
            if dest is not None and not isinstance(dest, torch.Tensor):
                raise RuntimeError(
                    f"load_state_dict: key {full!r} is a tensor in the state dict but a {type(dest).__name__} in the collection."
                )
            if assign or dest is None:
                actions.append(_setter(content, key, value))
            else:
                if dest.shape != value.shape:
                    raise RuntimeError(
                        f"load_state_dict: key {full!r} has shape {list(value.shape)} in the state dict, {list(dest.shape)} in the collection."
                    )
                # a lazy stack's leaf is a stacked copy: its members take their slices in place
                actions.append(_member_copier(content, key, value) if _is_lazy_stack(content) else _copier(dest, value))
            continue
        if dest is not None and (isinstance(dest, torch.Tensor) or not _is_non_tensor(dest)):
            raise RuntimeError(
                f"load_state_dict: key {full!r} is non-tensor data in the state dict but a {type(dest).__name__} in the collection."
            )
        actions.append(_non_tensor_setter(content, key, value, batch_size, td.device))
    if batch_size != td.batch_size:
        for key, dest in own.items():
            if key not in sd and not _is_non_tensor(dest) and type(dest) not in UNBATCHED_TYPES:
                shape = dest.shape if isinstance(dest, torch.Tensor) else dest.batch_size
                if shape[:n] != batch_size:
                    raise RuntimeError(
                        f"load_state_dict: batch size {list(batch_size)} does not fit key {path + (key,)!r} of shape {list(shape)}."
                    )
        # leaves are set first on an empty batch size (always compatible), then the final one
        actions.insert(0, _batch_setter(td, torch.Size(())))
        actions.append(_batch_setter(td, batch_size))


def _dict_is_empty(d: dict) -> bool:
    return all(k in _SENTINELS or (isinstance(v, dict) and _dict_is_empty(v)) for k, v in d.items())


def _setter(content, key, value):
    return lambda: content._set_str(key, value, inplace=False, validated=False, ignore_lock=True)


def _copier(dest, value):
    def run():
        with torch.no_grad():
            dest.copy_(value)

    return run


def _member_copier(stack, key, value):
    def run():
        with torch.no_grad():
            stack._set_str(key, value, inplace=True, validated=False, ignore_lock=True)

    return run


def _non_tensor_setter(content, key, value, batch_size, device):
    def run():
        from ..non_tensor import NonTensorData

        content._set_str(
            key,
            NonTensorData(data=value, batch_size=batch_size, device=device),
            inplace=False,
            validated=True,
            ignore_lock=True,
        )

    return run


def _batch_setter(td, batch_size):
    def run():
        td.batch_size = batch_size

    return run
