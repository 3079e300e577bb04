"""Argument checks, the one implementation every package uses.

Each check takes ``(owner, name, value)``, returns the value when it is accepted and otherwise
raises an error that names ``owner: name``, says what was expected and shows what arrived. A
``bool`` is never accepted where a number is expected (``True`` is an ``int`` in Python, almost
always by mistake here).

A value of the wrong type raises :class:`ArgumentTypeError`, which is both a ``TypeError`` and a
``ValueError``; a number out of range raises ``ValueError``.

Examples:
    >>> from tdict.validation import check_positive_int
    >>> check_positive_int("Collector", "frames_per_batch", 64)
    64
    >>> check_positive_int("Collector", "frames_per_batch", 0)
    Traceback (most recent call last):
    ...
    ValueError: Collector: frames_per_batch must be a positive int, got 0.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Collection
from typing import Any, TypeGuard, TypeVar

__all__ = [
    "ArgumentTypeError",
    "check_int",
    "check_non_negative",
    "check_non_negative_int",
    "check_one_of",
    "check_positive",
    "check_positive_int",
    "check_unit_interval",
]

_T = TypeVar("_T")
_MAX_SHOWN = 100  # characters of a value's repr shown in a message


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type (a ``bool`` or a ``str`` where an int is expected).

    Also a ``ValueError``, so code that caught the ``ValueError`` of the older checks still does.

    Examples:
        >>> issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentTypeError, ValueError)
        True
    """


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _message(owner: str, name: str, expected: str, value: Any, allow_none: bool = False) -> str:
    return f"{owner}: {name} must be {expected}{' or None' if allow_none else ''}, got {_shown(value)}."


def _is_int(value: Any) -> TypeGuard[numbers.Integral]:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> TypeGuard[float]:  # any numbers.Real (float stands for its comparisons)
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_int(owner: str, name: str, value: Any, *, minimum: int | None = None, allow_none: bool = False) -> Any:
    """``value`` as a Python ``int``, checked to be an integer (not a bool) ``>= minimum``.

    Args:
        owner: who checks (a class or function name), the start of the message.
        name: the argument's name.
        value: what was given; any integral number (a numpy int too) is accepted.
        minimum: the smallest value accepted; ``None``: no bound.
        allow_none: accept ``None`` (returned as is).

    Raises:
        ArgumentTypeError: ``value`` is not an integer, or is a bool.
        ValueError: ``value < minimum``.

    Examples:
        >>> check_int("Trainer", "log_interval", 3, minimum=2)
        3
        >>> check_int("Trainer", "log_interval", True)
        Traceback (most recent call last):
        ...
        tdict.validation.ArgumentTypeError: Trainer: log_interval must be an int, got True.
    """
    if value is None and allow_none:
        return None
    if minimum == 1:
        expected = "a positive int"
    elif minimum == 0:
        expected = "a non-negative int"
    else:
        expected = "an int" if minimum is None else f"an int >= {minimum}"
    if not _is_int(value):
        raise ArgumentTypeError(_message(owner, name, expected, value, allow_none))
    if minimum is not None and value < minimum:
        raise ValueError(_message(owner, name, expected, value, allow_none))
    return operator.index(value)


def check_positive_int(owner: str, name: str, value: Any, *, allow_none: bool = False) -> Any:
    """``value`` as an ``int >= 1`` (see :func:`check_int`).

    Examples:
        >>> check_positive_int("VmasEnv", "max_steps", None, allow_none=True) is None
        True
        >>> check_positive_int("VmasEnv", "max_steps", 2.0, allow_none=True)
        Traceback (most recent call last):
        ...
        tdict.validation.ArgumentTypeError: VmasEnv: max_steps must be a positive int or None, got 2.0.
    """
    return check_int(owner, name, value, minimum=1, allow_none=allow_none)


def check_non_negative_int(owner: str, name: str, value: Any, *, allow_none: bool = False) -> Any:
    """``value`` as an ``int >= 0`` (see :func:`check_int`).

    Examples:
        >>> check_non_negative_int("SoftUpdate.step", "n", 0)
        0
        >>> check_non_negative_int("SoftUpdate.step", "n", -2)
        Traceback (most recent call last):
        ...
        ValueError: SoftUpdate.step: n must be a non-negative int, got -2.
    """
    return check_int(owner, name, value, minimum=0, allow_none=allow_none)


def _check_real(owner: str, name: str, value: Any, bound: str, allow_none: bool, finite: bool = False) -> Any:
    """``value`` a real number (not a bool) satisfying ``bound`` (``"> 0"``, ``">= 0"`` or ``"in [0, 1]"``)."""
    if value is None and allow_none:
        return None
    expected = f"a {'finite ' if finite else ''}number {bound}" if bound[0] in "<>" else bound
    if not _is_real(value):
        raise ArgumentTypeError(_message(owner, name, expected, value, allow_none))
    if bound == "> 0":
        ok = value > 0
    elif bound == ">= 0":
        ok = value >= 0
    else:
        ok = 0 <= value <= 1
    if not ok or (finite and not math.isfinite(value)):  # NaN fails every comparison
        raise ValueError(_message(owner, name, expected, value, allow_none))
    return value


def check_positive(owner: str, name: str, value: Any, *, allow_none: bool = False, finite: bool = False) -> Any:
    """``value``, checked to be a real number (int or float, not a bool) ``> 0``; returned unchanged.

    With ``finite=True`` infinity is refused too.

    Raises:
        ArgumentTypeError: not a real number. ValueError: ``<= 0`` or NaN (or infinite, when refused).

    Examples:
        >>> check_positive("DPOLoss", "beta", 0.1)
        0.1
        >>> check_positive("DPOLoss", "beta", 0)
        Traceback (most recent call last):
        ...
        ValueError: DPOLoss: beta must be a number > 0, got 0.
    """
    return _check_real(owner, name, value, "> 0", allow_none, finite)


def check_non_negative(owner: str, name: str, value: Any, *, allow_none: bool = False, finite: bool = False) -> Any:
    """``value``, checked to be a real number (not a bool) ``>= 0``; returned unchanged.

    With ``finite=True`` infinity is refused too.

    Raises:
        ArgumentTypeError: not a real number. ValueError: ``< 0`` or NaN (or infinite, when refused).

    Examples:
        >>> check_non_negative("TD3Loss", "policy_noise", 0.2)
        0.2
        >>> check_non_negative("TD3Loss", "policy_noise", float("nan"))
        Traceback (most recent call last):
        ...
        ValueError: TD3Loss: policy_noise must be a number >= 0, got nan.
        >>> check_non_negative("PrioritizedSampler", "alpha", float("inf"), finite=True)
        Traceback (most recent call last):
        ...
        ValueError: PrioritizedSampler: alpha must be a finite number >= 0, got inf.
    """
    return _check_real(owner, name, value, ">= 0", allow_none, finite)


def check_unit_interval(owner: str, name: str, value: Any) -> Any:
    """``value``, checked to be a real number (not a bool) in ``[0, 1]`` (a probability, a discount).

    Raises:
        ArgumentTypeError: not a real number. ValueError: outside ``[0, 1]`` or NaN.

    Examples:
        >>> check_unit_interval("NormalizeReward", "gamma", 0.99)
        0.99
        >>> check_unit_interval("NormalizeReward", "gamma", 1.5)
        Traceback (most recent call last):
        ...
        ValueError: NormalizeReward: gamma must be in [0, 1], got 1.5.
    """
    return _check_real(owner, name, value, "in [0, 1]", False)


def check_one_of(owner: str, name: str, value: _T, choices: Collection[Any]) -> _T:
    """``value``, checked to be one of ``choices`` (compared with ``==``).

    Raises:
        ValueError: listing the choices.

    Examples:
        >>> check_one_of("LogScalar", "reduction", "mean", ("mean", "sum"))
        'mean'
        >>> check_one_of("LogScalar", "reduction", "max", ("mean", "sum"))
        Traceback (most recent call last):
        ...
        ValueError: LogScalar: reduction must be one of ['mean', 'sum'], got 'max'.
    """
    try:
        ok = value in choices
    except TypeError:  # an unhashable value against a set or a dict
        ok = False
    if not ok:
        raise ValueError(_message(owner, name, f"one of {list(choices)}", value))
    return value
