"""TensorAttrs: a leaf's device, dtype and shape, recorded by ``td.attrs()`` and applied by ``td.to(attrs)``.

``td.attrs()`` gives a batch-less, device-less TensorDict shaped like ``td`` whose leaves are
:class:`TensorAttrs`; ``other.to(attrs)`` casts each leaf of ``other`` to the device and dtype
recorded at its key (leaves without a record, or whose record has neither, pass through). It
moves TensorDicts whose leaves live on several devices, which ``to(device)`` cannot express.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ._core.utils import NestedKey, is_tensor_collection
from .tensorclass import TensorClass
from .tensordict import TensorDict

__all__ = ["TensorAttrs", "cast_to_attrs", "record_attrs"]

_FIELDS = ("device", "dtype", "shape")


class TensorAttrs(TensorClass):
    """The attributes of one tensor: ``tgt_device``, ``tgt_dtype`` and ``tgt_shape`` (``None`` when
    not recorded), prefixed so as not to shadow a tensor class's own ``device`` and ``shape``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> td = TensorDict(a=torch.zeros(3), b=torch.zeros(3, dtype=torch.int32), batch_size=[3])
        >>> attrs = td.attrs()
        >>> attrs["b"].tgt_dtype, attrs["b"].tgt_shape
        (torch.int32, torch.Size([3]))
        >>> TensorDict(a=torch.zeros(3), b=torch.zeros(3), batch_size=[3]).to(attrs)["b"].dtype
        torch.int32
    """

    tgt_device: Any = None
    tgt_dtype: Any = None
    tgt_shape: Any = None

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor, *, fields: Sequence[str] = _FIELDS) -> "TensorAttrs":
        """The attributes of ``tensor`` named in ``fields`` (``"device"``, ``"dtype"``, ``"shape"``)."""
        fields = _check_fields(fields)
        return cls(
            tgt_device=tensor.device if "device" in fields else None,
            tgt_dtype=tensor.dtype if "dtype" in fields else None,
            tgt_shape=torch.Size(tensor.shape) if "shape" in fields else None,
            batch_size=(),
        )


def _check_fields(fields: Sequence[str]) -> tuple:
    if isinstance(fields, str):
        fields = (fields,)
    bad = [f for f in fields if f not in _FIELDS]
    if bad:
        raise ValueError(f"attrs: fields must be among {_FIELDS}, got {bad}.")
    return tuple(fields)


def record_attrs(td: Any, fields: Sequence[str] = _FIELDS) -> TensorDict:
    """``td.attrs(fields=...)``: a TensorDict (no batch size, no device) holding a
    :class:`TensorAttrs` at the key of each tensor leaf of ``td``."""
    fields = _check_fields(fields)
    out = TensorDict()
    for key, value in td.items(include_nested=True, leaves_only=True):
        if isinstance(value, torch.Tensor):
            out.set(key, TensorAttrs.from_tensor(value, fields=fields))
    return out


def _record_at(attrs_td: Any, key: NestedKey) -> Any:
    record = attrs_td.get(key, None)
    return record if isinstance(record, TensorAttrs) else None


def cast_to_attrs(td: Any, attrs_td: Any, extra_args: tuple, kwargs: dict) -> Any:
    """``td.to(attrs_td, non_blocking=..., inplace=...)``: each tensor leaf cast to the device and
    dtype of the :class:`TensorAttrs` at its key in ``attrs_td``; the others unchanged. The result
    keeps ``td``'s device when every leaf stays on it, else it has none."""
    owner = type(td).__name__
    if not is_tensor_collection(attrs_td):
        raise TypeError(f"{owner}.to: expected an attrs TensorDict (td.attrs()), got {type(attrs_td).__name__}.")
    if extra_args:
        raise TypeError(
            f"{owner}.to(attrs): does not accept additional positional arguments after the attrs TensorDict, "
            f"got {extra_args!r} (the device and dtype of each leaf come from its TensorAttrs)."
        )
    if kwargs.pop("non_blocking_pin", False):
        raise NotImplementedError(f"{owner}.to(attrs): non_blocking_pin is not supported with an attrs TensorDict.")
    non_blocking = bool(kwargs.pop("non_blocking", False))
    inplace = bool(kwargs.pop("inplace", False))
    kwargs.pop("num_threads", None)
    if kwargs:
        raise TypeError(f"{owner}.to(attrs): unexpected keyword arguments {sorted(kwargs)}.")
    moved = {}
    for key, value in td.items(include_nested=True, leaves_only=True):
        record = _record_at(attrs_td, key)
        if not isinstance(value, torch.Tensor) or record is None:
            continue
        if record.tgt_device is None and record.tgt_dtype is None:
            continue
        moved[key] = value.to(device=record.tgt_device, dtype=record.tgt_dtype, non_blocking=non_blocking)
    out = td if inplace else td.copy()
    if td.device is not None and any(v.device != td.device for v in moved.values()):
        out.clear_device_()
    for key, value in moved.items():
        out.set(key, value, inplace=False)
    return out
