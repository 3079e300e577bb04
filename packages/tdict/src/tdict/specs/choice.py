"""Choice: a value drawn among a list of specs, or among fixed non-tensor values."""

from __future__ import annotations

from typing import Any

import torch

from ..non_tensor import is_non_tensor
from .base import TensorSpec, _device

__all__ = ["Choice"]


def _same(a: Any, b: Any) -> bool:
    """Whether two choices (specs, or non-tensor data) are equal."""
    if isinstance(a, TensorSpec):
        return a == b
    try:
        eq = a == b
        return bool(eq.all()) if isinstance(eq, torch.Tensor) else bool(eq)
    except Exception:
        return False


class Choice(TensorSpec):
    """One of several specs, or one of several fixed non-tensor values, picked at random by ``rand``.

    Every choice has the same type, shape, dtype and device (the spec takes them from the first).
    ``rand`` picks a choice uniformly and draws from it (a non-tensor choice is returned as it is),
    ``zero`` uses the first choice and ``one`` the second (the first when there is one), ``is_in``
    accepts what any choice accepts (non-tensor data must equal a choice). Shape ops and ``to``
    apply to every choice.

    Args:
        choices: a list of specs, or of :class:`~tdict.NonTensorData` / :class:`~tdict.NonTensorStack`.

    Raises:
        TypeError: ``choices`` is not a non-empty list, holds something else, or mixes types.
        ValueError: the choices differ in shape, dtype or device.

    Examples:
        >>> import torch
        >>> from tdict.specs import Bounded, Choice
        >>> spec = Choice([Bounded(0.0, 1.0, shape=()), Bounded(10.0, 11.0, shape=())])
        >>> x = spec.rand()
        >>> spec.is_in(x), spec.is_in(torch.tensor(5.0)), spec.num_choices
        (True, False, 2)
        >>> from tdict import NonTensorData
        >>> words = Choice([NonTensorData("a"), NonTensorData("b")])
        >>> words.rand().data in ("a", "b"), words.is_in(NonTensorData("c"))
        (True, False)
    """

    _has_device = False

    def __init__(self, choices: list) -> None:
        if not isinstance(choices, list) or not choices:
            raise TypeError(f"Choice: 'choices' must be a list of specs or non-tensor data, got {choices!r}")
        first = choices[0]
        if not (isinstance(first, TensorSpec) or is_non_tensor(first)):
            raise TypeError(
                "Choice: each choice must be either a TensorSpec, NonTensorData, or NonTensorStack, "
                f"got {type(first).__name__}"
            )
        for i, c in enumerate(choices[1:], 1):
            if not isinstance(c, type(first)):
                raise TypeError(
                    f"Choice: all choices must be the same type, got {type(first).__name__} and "
                    f"{type(c).__name__} (choice {i})"
                )
        for attr in ("shape", "dtype", "device"):
            values = [getattr(c, attr, None) for c in choices]
            if any(v != values[0] for v in values[1:]):
                raise ValueError(f"Choice: all choices must have the same {attr}, got {values}")
        self._choices = [c.clone() for c in choices]
        self._data = not isinstance(first, TensorSpec)
        self.shape = torch.Size(first.shape)
        self.dtype = getattr(first, "dtype", None)
        self.device = _device(getattr(first, "device", None))
        self._tensors = {}

    @property
    def num_choices(self) -> int:
        """The number of choices."""
        return len(self._choices)

    @property
    def choices(self) -> list:
        """The choices (copies of those given)."""
        return list(self._choices)

    def _pick(self, i: int, method: str, shape: Any, **kwargs: Any) -> Any:
        choice = self._choices[i]
        if not self._data:
            return getattr(choice, method)(shape, **kwargs)
        lead = torch.Size(shape) if shape else torch.Size(())
        return choice.expand(lead + choice.shape) if lead else choice

    def rand(self, shape: Any = (), *, generator: torch.Generator | None = None) -> Any:
        """A draw from a choice picked uniformly (a non-tensor choice itself, expanded to ``shape``)."""
        i = int(
            torch.randint(0, len(self._choices), (), generator=generator, device=getattr(generator, "device", None))
        )
        if self._data:
            return self._pick(i, "rand", shape)
        return self._pick(i, "rand", shape, generator=generator)

    def zero(self, shape: Any = ()) -> Any:
        """The first choice's :meth:`~TensorSpec.zero` (a non-tensor first choice itself)."""
        return self._pick(0, "zero", shape)

    def one(self, shape: Any = ()) -> Any:
        """The second choice's :meth:`~TensorSpec.one` (the first's when there is a single choice)."""
        return self._pick(min(1, len(self._choices) - 1), "one", shape)

    def _violation(self, val: Any) -> str | None:
        if self._data:
            if any(_same(c, val) for c in self._choices):
                return None
            return "value equals none of the choices"
        if any(c.is_in(val) for c in self._choices):
            return None
        return "value lies in none of the choices"

    def _project(self, val: Any) -> Any:
        raise NotImplementedError("Choice: project is not supported (which choice to project onto is undefined)")

    def encode(self, val: Any, *, ignore_device: bool = False) -> Any:
        """Encode with the first choice's :meth:`~TensorSpec.encode` (a non-tensor value is returned as it is)."""
        if self._data:
            return val
        return self._choices[0].encode(val, ignore_device=ignore_device)

    def _each(self, method: str, *args: Any) -> Choice:
        return Choice([getattr(c, method)(*args) for c in self._choices])

    def expand(self, *shape: Any) -> Choice:
        """Every choice expanded to ``shape``."""
        return self._each("expand", *shape)

    def reshape(self, *shape: Any) -> Choice:
        """Every choice reshaped to ``shape``."""
        return self._each("reshape", *shape)

    view = reshape

    def unsqueeze(self, dim: int) -> Choice:
        """Every choice with a singleton dim inserted at ``dim``."""
        return self._each("unsqueeze", dim)

    def squeeze(self, dim: int | None = None) -> Choice:
        """Every choice with its singleton dims (or ``dim``) removed."""
        return self._each("squeeze", *(() if dim is None else (dim,)))

    def __getitem__(self, index: Any) -> Choice:
        return Choice([c[index] for c in self._choices])

    def unbind(self, dim: int = 0) -> tuple[Choice, ...]:
        """One Choice per index along ``dim``."""
        parts = [c.unbind(dim) for c in self._choices]
        return tuple(Choice(list(p)) for p in zip(*parts))

    def clone(self) -> Choice:
        """A copy of every choice."""
        return Choice(self._choices)

    def to(self, dest: Any) -> Choice:
        """Every choice moved to the device ``dest`` (or, for spec choices, cast to the dtype ``dest``)."""
        if dest is None:
            return self
        if isinstance(dest, torch.dtype) and self._data:
            return self
        return Choice([c.to(dest) for c in self._choices])

    def cardinality(self) -> int | float:
        """The number of non-tensor choices, or the sum of the spec choices' cardinalities (``inf`` for a
        continuous one, as in TorchRL)."""
        if self._data:
            return len(self._choices)
        total: int | float = 0
        for c in self._choices:
            try:
                total += c.cardinality()
            except NotImplementedError:
                return float("inf")
        return total

    def enumerate(self) -> list:
        """Every value of every choice, as a list."""
        if self._data:
            return list(self._choices)
        return [v for c in self._choices for v in c.enumerate()]

    def index(self, index: Any, tensor_to_index: Any) -> Any:
        """Not supported for Choice specs: always raises ``NotImplementedError``."""
        raise NotImplementedError("`index` is not implemented for Choice specs.")

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Choice) or len(self._choices) != len(other._choices):
            return False
        return all(_same(a, b) for a, b in zip(self._choices, other._choices))

    __hash__ = None  # pyright: ignore[reportAssignmentType]  (mutable, like TensorSpec)

    def __repr__(self) -> str:
        return f"Choice(shape={tuple(self.shape)}, device={self.device}, dtype={self.dtype}, choices={self._choices})"
