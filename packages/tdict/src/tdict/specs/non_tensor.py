"""NonTensor: a spec for non-numeric entries (strings, Python objects)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..non_tensor import NonTensorData, is_non_tensor
from .base import TensorSpec

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is new in 3.11

__all__ = ["NonTensor"]


class NonTensor(TensorSpec):
    """A non-tensor entry (text, Python object): generated values are :class:`tdict.NonTensorData`.

    Args:
        shape: the batch shape of the entry (default ``()``).
        device: the device recorded on generated values.
        example_data: the payload ``rand``/``zero`` return (default ``None``).

    Examples:
        >>> from tdict.specs import NonTensor
        >>> spec = NonTensor(shape=(2,), example_data="hi")
        >>> x = spec.rand((3,))
        >>> x.batch_size, x.data, spec.is_in(x)
        (torch.Size([3, 2]), 'hi', True)
    """

    _promotable = True  # Composite.set gives it the Composite's shape when it has fewer dims
    _has_device = False  # non-tensor data may live nowhere: the device stays None unless given

    def __init__(self, shape: Any = None, device: Any = None, dtype: Any = None, example_data: Any = None) -> None:
        super().__init__(shape, device, None)
        self.example_data = example_data

    def cardinality(self) -> int:
        """Raises ``NotImplementedError``: non-tensor values cannot be enumerated."""
        raise NotImplementedError("Cannot enumerate a NonTensor spec.")

    def enumerate(self) -> Any:
        """Raises ``NotImplementedError``: non-tensor values cannot be enumerated."""
        raise NotImplementedError("Cannot enumerate a NonTensor spec.")

    def _cast(self, dtype: Any) -> Self:
        """Non-tensor data has no dtype: ``to(dtype)`` leaves the spec as it is (``dtype`` stays ``None``)."""
        return self

    def _extra_eq(self, other: Any) -> bool:
        try:
            return bool(self.example_data == other.example_data)
        except Exception:
            return self.example_data is other.example_data

    def rand(self, shape: Any = (), *, generator: Any = None) -> NonTensorData:
        return NonTensorData(self.example_data, batch_size=self._full(shape), device=self.device)

    def zero(self, shape: Any = ()) -> NonTensorData:
        return self.rand(shape)

    def one(self, shape: Any = ()) -> NonTensorData:
        """Same as :meth:`rand`: the example data, with batch size ``shape + self.shape``."""
        return self.rand(shape)

    def _violation(self, val: Any) -> str | None:
        if not is_non_tensor(val):
            return f"expected non-tensor data, got {type(val).__name__}"
        bs = val.batch_size
        n = len(self.shape)
        if len(bs) < n or bs[len(bs) - n :] != self.shape:
            return f"batch size {tuple(bs)} does not end with the spec shape {tuple(self.shape)}"
        return None

    def _project(self, val: Any) -> Any:
        return val

    def encode(self, val: Any, *, ignore_device: bool = False) -> NonTensorData:
        if is_non_tensor(val):
            return val
        return NonTensorData(val, batch_size=self.shape, device=None if ignore_device else self.device)

    def to_numpy(self, val: Any, safe: bool | None = None) -> Any:
        if safe:
            self.assert_is_in(val)
        return val.data if hasattr(val, "data") else val

    def _repr_extra(self) -> str:
        return f", example_data={self.example_data!r}"
