"""The interaction type: how probabilistic modules turn a distribution into a value.

One of the two process-global switches the design allows (the other is the exploration type).
"""

from __future__ import annotations

import enum
import functools
from typing import Any, Callable

__all__ = ["InteractionType", "interaction_type", "set_interaction_type"]


class InteractionType(str, enum.Enum):
    """How a distribution is turned into a value (tensordict 0.14 names and values).

    MODE, MEDIAN and MEAN read the attribute of that name; RANDOM samples (``rsample`` when it exists);
    DETERMINISTIC reads ``deterministic_sample`` and falls back to the mean. Lookup by value ignores case.

    Examples:
        >>> from tdict.nn import InteractionType
        >>> InteractionType("Mode") is InteractionType.MODE
        True
        >>> InteractionType.from_str("RANDOM")
        <InteractionType.RANDOM: 'random'>
    """

    MODE = "mode"
    MEDIAN = "median"
    MEAN = "mean"
    RANDOM = "random"
    DETERMINISTIC = "deterministic"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def from_str(cls, type_str: str) -> "InteractionType":
        """The member whose value is ``type_str`` (case insensitive)."""
        return cls(type_str.lower())

    @classmethod
    def _missing_(cls, value: object) -> "InteractionType | None":
        if isinstance(value, str):
            lowered = value.lower()
            for member in cls:
                if member.value == lowered:
                    return member
        return None


class ScopedSwitch:
    """A process-wide setting that a ``with`` block (or a decorated call) changes and restores.

    The base of ``set_interaction_type`` (and of rl-objectives' ``set_recurrent_mode``): subclass it,
    one class per setting. The current value lives on the concrete class (``_current``, read it
    through a function of yours); entering pushes the previous value, leaving pops it back, also
    when the block raises. One instance can be re-entered.

    Examples:
        >>> class set_verbose(ScopedSwitch):
        ...     _current = False
        >>> with set_verbose(True):
        ...     inside = set_verbose._current
        >>> inside, set_verbose._current
        (True, False)
    """

    _current: Any = None

    def __init__(self, value: Any) -> None:
        self.value = value
        self._saved: list = []

    def __enter__(self) -> Any:
        cls = type(self)
        self._saved.append(cls._current)
        cls._current = self.value
        return self

    def __exit__(self, *exc: Any) -> None:
        type(self)._current = self._saved.pop()

    def __call__(self, func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return wrapper


def interaction_type() -> InteractionType | None:
    """The current interaction type (``None`` until one is set with :class:`set_interaction_type`).

    Examples:
        >>> from tdict.nn import interaction_type
        >>> interaction_type() is None
        True
    """
    return set_interaction_type._current


class set_interaction_type(ScopedSwitch):
    """Set the interaction type inside a ``with`` block or a decorated function.

    The previous value comes back on exit, also when the block raises.

    Args:
        type: an :class:`InteractionType`, its value as a string (any case), or ``None``.
            Defaults to ``InteractionType.DETERMINISTIC``.

    Raises:
        ValueError: when ``type`` names no interaction type (raised at construction).

    Examples:
        >>> from tdict.nn import InteractionType, interaction_type, set_interaction_type
        >>> with set_interaction_type("mode"):
        ...     interaction_type()
        <InteractionType.MODE: 'mode'>
        >>> @set_interaction_type(InteractionType.RANDOM)
        ... def act():
        ...     return interaction_type()
        >>> act()
        <InteractionType.RANDOM: 'random'>
        >>> interaction_type() is None
        True
    """

    def __init__(self, type: InteractionType | str | None = InteractionType.DETERMINISTIC) -> None:
        if type is not None and not isinstance(type, InteractionType):
            if not isinstance(type, str):
                raise ValueError(f"set_interaction_type: expected an InteractionType, a string or None, got {type!r}.")
            try:
                type = InteractionType(type)
            except ValueError:
                raise ValueError(
                    f"set_interaction_type: {type!r} is not an interaction type; expected one of {[m.value for m in InteractionType]}."
                ) from None
        super().__init__(type)
        self.type = type

    def __repr__(self) -> str:
        return f"set_interaction_type({self.type!r})"
