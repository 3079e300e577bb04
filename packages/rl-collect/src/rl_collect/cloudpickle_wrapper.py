"""``CloudpickleWrapper``: a callable that pickles by value (lambdas, closures, bound methods)."""

from __future__ import annotations

import pickle
from typing import Any, Callable

__all__ = ["CloudpickleWrapper"]


class CloudpickleWrapper:
    """Wraps ``fn`` so that it reaches worker processes even when plain pickle cannot send it.

    Calling the wrapper calls ``fn(*args, **kwargs, **bound)`` (``bound``: the keyword arguments given
    at construction; those of the call win). Pickling uses cloudpickle (install ``cloudpickle``)
    and falls back to pickle when it is missing. Wrapping a wrapper returns it unchanged.

    Args:
        fn: the callable to wrap.
        **kwargs: keyword arguments passed on every call.

    Examples:
        >>> import pickle
        >>> from rl_collect import CloudpickleWrapper
        >>> add = CloudpickleWrapper(lambda x, y=1: x + y, y=10)
        >>> pickle.loads(pickle.dumps(add))(5), CloudpickleWrapper(add) is add
        (15, True)
    """

    def __new__(cls, fn: Any = None, **kwargs: Any) -> "CloudpickleWrapper":
        if isinstance(fn, cls) and not kwargs:
            return fn
        return super().__new__(cls)

    def __init__(self, fn: Callable, **kwargs: Any) -> None:
        if fn is self:  # __new__ returned the wrapper it was given
            return
        if not callable(fn):
            raise TypeError(f"CloudpickleWrapper: fn must be callable, got {type(fn).__name__}.")
        self.fn = fn
        self.kwargs = kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **{**self.kwargs, **kwargs})

    def __getstate__(self) -> dict:
        try:
            import cloudpickle
        except ImportError:
            return {"how": "pickle", "payload": pickle.dumps((self.fn, self.kwargs))}
        return {"how": "cloudpickle", "payload": cloudpickle.dumps((self.fn, self.kwargs))}

    def __setstate__(self, state: dict) -> None:
        self.fn, self.kwargs = pickle.loads(state["payload"])  # cloudpickle's output loads with pickle

    def __getattr__(self, name: str) -> Any:
        if name in ("fn", "kwargs") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.fn, name)

    def __repr__(self) -> str:
        return f"CloudpickleWrapper({self.fn!r})"
