"""Optional Triton kernels for the rl-* packages, each with a pure-torch reference.

Ops (each takes ``backend="auto" | "torch" | "triton"``; see :mod:`rl_kernels._backend`):

- :func:`discounted_reverse_scan` and, on it, :func:`gae`, :func:`td_lambda_return`, :func:`vtrace`:
  reset-aware reverse linear scans over ``[*B, T]``;
- :func:`lstm_with_resets`, :func:`gru_with_resets`: recurrent layers over ``[B, T]`` whose state is
  zeroed where ``is_init`` is set, forward and backward fused over time;
- :class:`SumTree`, :class:`MinTree`: segment trees with batched updates and prefix-sum sampling,
  for prioritized replay on GPU storages;
- :func:`chunked_log_probs`: ``log_softmax(hidden @ weight.T).gather(targets)`` without the
  ``[N, V]`` logits.

The sibling packages dispatch to these when rl-kernels is installed (``rl-objectives[kernels]``,
...) and keep their own torch paths otherwise; :func:`triton_available` and :func:`interpreting`
tell them whether the Triton paths can run. Names are imported on first use, so
``import rl_kernels`` is cheap and needs no Triton.

Examples:
    >>> import torch, rl_kernels
    >>> rl_kernels.discounted_reverse_scan(torch.ones(3), 0.5, torch.zeros(3, dtype=torch.bool))
    tensor([1.7500, 1.5000, 1.0000])
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module (in this package) that defines it
_WHERE = {
    "discounted_reverse_scan": "scan",
    "gae": "value",
    "td_lambda_return": "value",
    "vtrace": "value",
    "lstm_with_resets": "recurrent",
    "gru_with_resets": "recurrent",
    "SumTree": "trees",
    "MinTree": "trees",
    "chunked_log_probs": "log_probs",
    "triton_available": "_backend",
    "interpreting": "_backend",
}

__all__ = [
    "MinTree",
    "SumTree",
    "__version__",
    "chunked_log_probs",
    "discounted_reverse_scan",
    "gae",
    "gru_with_resets",
    "interpreting",
    "lstm_with_resets",
    "td_lambda_return",
    "triton_available",
    "vtrace",
]

if TYPE_CHECKING:
    from ._backend import interpreting, triton_available
    from .log_probs import chunked_log_probs
    from .recurrent import gru_with_resets, lstm_with_resets
    from .scan import discounted_reverse_scan
    from .trees import MinTree, SumTree
    from .value import gae, td_lambda_return, vtrace


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rl_kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
