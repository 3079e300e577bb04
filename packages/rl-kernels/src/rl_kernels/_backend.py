"""Which implementation of an op runs: the pure-torch reference path or a Triton kernel.

Every public op takes ``backend="auto" | "torch" | "triton"``:

- ``"torch"``: the pure-torch path, on any device.
- ``"triton"``: the Triton kernel. It runs on CUDA tensors, or on CPU tensors under Triton's
  interpreter (``TRITON_INTERPRET=1`` set before the kernels are first imported; slow, for tests).
- ``"auto"``: Triton for CUDA tensors when the ``triton`` package imports, torch otherwise.

Kernel modules (``_*_triton.py``) import ``triton`` at their top and are imported only when a
Triton path is chosen, so ``import rl_kernels`` works without Triton installed.

Examples:
    >>> import torch
    >>> from rl_kernels._backend import resolve_backend
    >>> resolve_backend("my_op", "auto", torch.device("cpu"))
    'torch'
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

__all__ = ["BACKENDS", "interpreting", "resolve_backend", "triton_available"]

BACKENDS = ("auto", "torch", "triton")


@functools.cache
def triton_available() -> bool:
    """Whether the ``triton`` package can be imported (checked once, without importing it).

    Examples:
        >>> isinstance(triton_available(), bool)
        True
    """
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``).

    Examples:
        >>> isinstance(interpreting(), bool)
        True
    """
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def resolve_backend(op: str, backend: str, device: torch.device) -> str:
    """``"torch"`` or ``"triton"``: the path that ``op`` takes for tensors on ``device``.

    Raises ``ValueError`` for an unknown ``backend`` and ``RuntimeError`` when ``"triton"`` is asked
    for but cannot run (Triton not installed, or CPU tensors outside the interpreter).

    Examples:
        >>> import torch
        >>> resolve_backend("scan", "torch", torch.device("cpu"))
        'torch'
    """
    if backend not in BACKENDS:
        raise ValueError(f"{op}: backend must be one of {BACKENDS}, got {backend!r}.")
    if backend == "torch":
        return "torch"
    if backend == "auto":
        return "triton" if device.type == "cuda" and triton_available() else "torch"
    if not triton_available():
        raise RuntimeError(
            f"{op}: backend='triton' needs the triton package, which is not installed "
            "(pip install 'rl-kernels[triton]'); use backend='torch' or 'auto'."
        )
    if device.type != "cuda" and not interpreting():
        raise RuntimeError(
            f"{op}: backend='triton' runs on CUDA tensors, or on CPU tensors under Triton's interpreter "
            f"(TRITON_INTERPRET=1 set before the kernels are imported); got tensors on {device}."
        )
    return "triton"
