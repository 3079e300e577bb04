"""Test helpers: compare two collections leaf by leaf.

Examples:
    >>> import torch
    >>> from tdict import TensorDict
    >>> from tdict.testing import assert_close
    >>> assert_close(TensorDict(a=torch.zeros(2)), TensorDict(a=torch.zeros(2)))
    True
"""

from __future__ import annotations

from typing import Any

import torch

from ._core.utils import is_tensor_collection, unravel_key
from .lazy import LazyStackedTensorDict

__all__ = ["assert_allclose_td", "assert_close"]


def assert_allclose_td(
    actual: Any,
    expected: Any,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = True,
    intersection: bool = False,
    msg: str = "",
) -> bool:
    """Assert that two collections hold the same keys and close values (``torch.testing.assert_close``
    per leaf; non-tensor payloads must be equal). ``intersection`` compares the common keys only.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict, assert_allclose_td
        >>> assert_allclose_td(TensorDict(a=torch.ones(2)), TensorDict(a=torch.ones(2) + 1e-9))
        True
    """
    for name, td in (("actual", actual), ("expected", expected)):
        if not is_tensor_collection(td):
            raise TypeError(f"assert_allclose_td: {name} must be a tensor collection, got {type(td).__name__}.")
    _assert_close(actual, expected, rtol, atol, equal_nan, intersection, msg, ())
    return True


assert_close = assert_allclose_td


def _assert_close(
    actual: Any, expected: Any, rtol: Any, atol: Any, equal_nan: bool, intersection: bool, msg: str, prefix: tuple
) -> None:
    actual, expected = getattr(actual, "_tensordict", actual), getattr(expected, "_tensordict", expected)
    if (
        isinstance(actual, LazyStackedTensorDict)
        and isinstance(expected, LazyStackedTensorDict)
        and actual.stack_dim == expected.stack_dim
        and len(actual.tensordicts) == len(expected.tensordicts)
    ):
        for a, e in zip(actual.tensordicts, expected.tensordicts):
            _assert_close(a, e, rtol, atol, equal_nan, intersection, msg, prefix)
        return
    keys_a, keys_e = set(actual.keys()), set(expected.keys())
    if not intersection and keys_a != keys_e:
        raise AssertionError(
            f"{msg + ': ' if msg else ''}keys differ at {unravel_key(prefix) if prefix else 'the root'}: "
            f"only in actual {sorted(keys_a - keys_e)}, only in expected {sorted(keys_e - keys_a)}."
        )
    for key in sorted(keys_a & keys_e):
        a, e = actual.get(key), expected.get(key)
        where = unravel_key(prefix + (key,))
        if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor):
            if a.is_nested or e.is_nested:  # offsets(): jagged nested tensors only (not in torch's stubs)
                a, e = (
                    torch.cat([a.values().flatten(), a.offsets().to(a.dtype)]),  # pyright: ignore[reportAttributeAccessIssue]
                    torch.cat([e.values().flatten(), e.offsets().to(e.dtype)]),  # pyright: ignore[reportAttributeAccessIssue]
                )
            torch.testing.assert_close(
                a,
                e,
                rtol=rtol,
                atol=atol,
                equal_nan=equal_nan,
                msg=lambda m, w=where: f"{msg + ': ' if msg else ''}key {w!r}: {m}",
            )
        elif (
            not isinstance(a, torch.Tensor)  # (a tensor is no collection: this only tells the type checker)
            and not isinstance(e, torch.Tensor)
            and is_tensor_collection(a)
            and is_tensor_collection(e)
            and a._is_non_tensor == e._is_non_tensor
        ):
            if not a._is_non_tensor:
                _assert_close(a, e, rtol, atol, equal_nan, intersection, msg, prefix + (key,))
            elif a.batch_size != e.batch_size or not bool((a == e).all()):
                raise AssertionError(
                    f"{msg + ': ' if msg else ''}key {where!r}: non-tensor data differ: {a.tolist()!r} vs {e.tolist()!r}."
                )
        else:
            raise AssertionError(
                f"{msg + ': ' if msg else ''}key {where!r}: actual holds a {type(a).__name__}, expected a {type(e).__name__}."
            )
