"""Which results inherit the lock of a locked collection (tensordict 0.14's rule).

Shape ops (reshape, view, permute, unsqueeze, expand, split...), moves and casts (``to``,
``float``, ``detach``...), ``*_like``, element-wise arithmetic (``+``, ``exp``, ``maximum``,
``lerp``...), ``norm`` and the ``data``/``grad`` collections give a locked result when their input is locked. Copies (``clone``,
``copy``), indexing, ``unbind``, structure ops (``select``, ``exclude``, ``apply``), comparisons,
``clamp`` and the other reductions do not.

Where tensordict 0.14 is not consistent we are: ``view(dtype)`` and ``type()`` lock like ``to(dtype)``,
arithmetic with a tensor operand like with a number, a lazy stack's ``expand`` like a TensorDict's.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from .utils import is_tensor_collection


def keep_lock(source: Any, result: Any) -> Any:
    """``result`` (a collection or a tuple of them), locked when ``source`` is."""
    if source.is_locked:
        if type(result) is tuple:
            for part in result:
                keep_lock(source, part)
        elif result is not source and is_tensor_collection(result) and not result.is_locked:
            result._set_lock(True)
    return result


def keeps_lock(method: Callable) -> Callable:
    """Decorate an op whose result inherits ``self``'s lock (see the module docstring)."""

    @functools.wraps(method)
    def op(self: Any, *args: Any, **kwargs: Any) -> Any:
        return keep_lock(self, method(self, *args, **kwargs))

    return op
