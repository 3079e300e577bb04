"""Reset-aware reverse linear scan ``y[..., t] = x[..., t] + c[..., t] * y[..., t + 1]`` over ``[*B, T]``.

``c = discount * (1 - done)``, and ``y`` is zero after the last step. GAE, TD(lambda) and V-trace
(:mod:`rl_kernels.value`) are this scan on per-step terms.

Paths (``backend``, see :mod:`rl_kernels._backend`):

- ``"triton"``: a chunked scan over T (``tl.associative_scan`` inside a chunk, a carry between chunks),
  rows in parallel (:mod:`rl_kernels._scan_triton`).
- ``"torch"`` on CPU: a sequential C++ loop over T, built once per machine with the system's C++
  compiler and called through ctypes (:mod:`rl_kernels._cpu_scan`). Measured (one thread,
  benchmarks/bench_kernels_scan.py --candidates) at ``[64, 1000]``: 0.11 ms, against 0.6-1.4 ms for
  the doubling scan, 0.23 ms for Inductor's ``associative_scan`` (which also recompiles, 10-14 s, for
  every new shape) and 6.7 ms for a Python loop over T on ``[B]`` vectors; at ``[8, 64]``: 0.003 ms
  against 0.13 / 0.07 / 0.39 ms.
- ``"torch"`` otherwise (other devices, half precision without a C++ compiler, inside
  ``torch.compile``, tensor subclasses): the doubling scan, ``ceil(log2 T)`` tensor ops over the whole
  rollout.

The compiled and Triton paths are differentiable through an autograd function whose backward is the
same scan run forward in time (gradients for ``x`` and for a tensor ``discount``); the doubling scan
is plain autograd.
"""

from __future__ import annotations

import os

import torch

from ._backend import resolve_backend
from ._cpu_scan import RawScan, cpu_kernel

__all__ = ["discounted_reverse_scan"]

_Tensor = torch.Tensor

_FAST_DTYPES = (torch.float32, torch.float64)


def discounted_reverse_scan(
    x: _Tensor,
    discount: float | _Tensor,
    done: _Tensor | None = None,
    backend: str = "auto",
) -> _Tensor:
    """``y[..., t] = x[..., t] + discount[..., t] * (1 - done[..., t]) * y[..., t + 1]`` along the last dim.

    ``y`` is zero after the last step, so ``y[..., T - 1] = x[..., T - 1]``; a ``done`` step does not
    look past itself (its ``y`` is its ``x``).

    Args:
        x: floating tensor ``[*B, T]`` (time last).
        discount: a number, or a floating tensor shaped like ``x`` (or broadcastable to it).
        done: bool tensor shaped like ``x`` (``None``: no resets).
        backend: ``"auto"``, ``"torch"`` or ``"triton"`` (see :mod:`rl_kernels._backend`).

    Returns:
        ``y``, shaped like ``x``, in the promoted dtype of ``x`` and ``discount``.

    Examples:
        >>> import torch
        >>> done = torch.tensor([False, True, False, False])
        >>> discounted_reverse_scan(torch.ones(4), 0.5, done, backend="torch")
        tensor([1.5000, 1.0000, 1.5000, 1.0000])
    """
    fn = "discounted_reverse_scan"
    _check_scan_inputs(fn, x, discount, done)
    path = resolve_backend(fn, backend, x.device)
    return _scan(x, discount, done, path)


# --------------------------------------------------------------------------- checks
def _check_scan_inputs(fn: str, x: object, discount: object, done: object) -> None:
    """Raise ``TypeError`` / ``ValueError`` naming the argument unless the inputs fit the scan."""
    if not isinstance(x, _Tensor):
        raise TypeError(f"{fn}: x must be a torch.Tensor, got {type(x).__name__}.")
    if not x.is_floating_point():
        raise TypeError(f"{fn}: x must be a floating-point tensor, got dtype {x.dtype}.")
    if x.ndim == 0:
        raise ValueError(f"{fn}: x must have a time axis (shape [*B, T]), got a 0-d tensor.")
    if isinstance(discount, _Tensor):
        if not discount.is_floating_point():
            raise TypeError(f"{fn}: discount must be a number or a floating-point tensor, got dtype {discount.dtype}.")
        if discount.device != x.device:
            raise ValueError(f"{fn}: discount is on {discount.device} but x is on {x.device}.")
        try:
            ok = torch.broadcast_shapes(discount.shape, x.shape) == x.shape
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"{fn}: discount of shape {tuple(discount.shape)} must be shaped like x {tuple(x.shape)} "
                "(or broadcast to it)."
            )
    elif isinstance(discount, bool) or not isinstance(discount, (int, float)):
        raise TypeError(f"{fn}: discount must be a number or a tensor, got {type(discount).__name__}.")
    if done is not None:
        if not isinstance(done, _Tensor):
            raise TypeError(f"{fn}: done must be a bool torch.Tensor or None, got {type(done).__name__}.")
        if done.dtype is not torch.bool:
            raise TypeError(f"{fn}: done must be a bool tensor, got dtype {done.dtype}.")
        if done.shape != x.shape:
            raise ValueError(f"{fn}: done has shape {tuple(done.shape)} but x has shape {tuple(x.shape)}.")
        if done.device != x.device:
            raise ValueError(f"{fn}: done is on {done.device} but x is on {x.device}.")


# --------------------------------------------------------------------------- dispatch
def _scan(x: _Tensor, discount: float | _Tensor, done: _Tensor | None, path: str) -> _Tensor:
    """The scan on checked inputs, by ``path`` (``"torch"`` or ``"triton"``)."""
    dtype = torch.promote_types(x.dtype, discount.dtype) if isinstance(discount, _Tensor) else x.dtype
    if x.shape[-1] == 0 or x.numel() == 0:
        return torch.zeros(x.shape, dtype=dtype, device=x.device)
    raw: RawScan | None = None
    if path == "triton":
        from . import _scan_triton  # needs triton: imported only on this path

        raw = _scan_triton.reverse_scan
    elif _compiled_path_applies(x, discount, done):
        raw = cpu_kernel(dtype if dtype in _FAST_DTYPES else torch.float32)
    if raw is None:
        return _doubling_scan(x.to(dtype), discount, done)
    return _run_raw(raw, x, discount, done, dtype)


def _compiled_path_applies(x: _Tensor, discount: float | _Tensor, done: _Tensor | None) -> bool:
    if x.device.type != "cpu" or os.environ.get("RL_KERNELS_CPU_SCAN", "compiled") != "compiled":
        return False
    if torch.compiler.is_compiling():
        return False
    tensors = [t for t in (x, discount, done) if isinstance(t, _Tensor)]
    return all(type(t) is _Tensor and not _is_wrapped(t) for t in tensors)


def _is_wrapped(t: _Tensor) -> bool:
    """Whether ``t`` is a functorch (vmap / grad) wrapper, which has no data pointer of its own."""
    is_wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)  # pyright: ignore[reportAttributeAccessIssue]  # private torch API
    return bool(is_wrapped(t)) if is_wrapped is not None else False


def _run_raw(raw: RawScan, x: _Tensor, discount: float | _Tensor, done: _Tensor | None, dtype: torch.dtype) -> _Tensor:
    """Flatten to ``[R, T]`` contiguous rows in a dtype the kernel takes, scan, restore shape and dtype."""
    shape, steps = x.shape, x.shape[-1]
    work = dtype if dtype in _FAST_DTYPES else torch.float32
    x2 = x.to(work).reshape(-1, steps).contiguous()
    if isinstance(discount, _Tensor) and discount.numel() > 1:
        coef = discount.to(work).broadcast_to(shape).reshape(-1, steps).contiguous()
    elif isinstance(discount, _Tensor):
        coef = discount.to(work).reshape(1).clone()
    else:  # a fill, not a host-to-device copy: capturable in a CUDA graph
        coef = torch.full((1,), float(discount), dtype=work, device=x.device)
    done2 = None if done is None else done.reshape(-1, steps).contiguous()
    if torch.is_grad_enabled() and (x2.requires_grad or coef.requires_grad):
        y = _ReverseScan.apply(x2, coef, done2, raw)
    else:
        y = raw(x2, coef, done2)
    return y.reshape(shape).to(dtype)


class _ReverseScan(torch.autograd.Function):
    """The scan with a backward that is the same scan run forward in time.

    With ``c_t = discount_t * (1 - done_t)`` and ``y_t = x_t + c_t * y_{t+1}``: ``dL/dx_t = g_t +
    c_{t-1} * dL/dx_{t-1}`` (a reverse scan of the flipped gradient with shifted coefficients) and
    ``dL/dc_t = dL/dx_t * y_{t+1}``. The backward calls this function again, so it is differentiable.
    """

    @staticmethod
    def forward(ctx, x: _Tensor, coef: _Tensor, done: _Tensor | None, raw: RawScan) -> _Tensor:  # pyright: ignore[reportIncompatibleMethodOverride]  # autograd.Function's untyped signature
        y = raw(x, coef, done)
        ctx.raw = raw
        ctx.save_for_backward(coef, y, done)
        return y

    @staticmethod
    def backward(ctx, grad: _Tensor) -> tuple[_Tensor | None, _Tensor | None, None, None]:  # pyright: ignore[reportIncompatibleMethodOverride]  # autograd.Function's untyped signature
        coef, y, done = ctx.saved_tensors
        c = coef.expand_as(y)
        if done is not None:
            c = torch.where(done, torch.zeros_like(c), c)
        shifted = torch.cat([torch.zeros_like(c[:, :1]), c[:, :-1]], 1)  # c_{t-1}
        flipped = (grad.flip(1).contiguous(), shifted.flip(1).contiguous())
        if torch.is_grad_enabled() and any(t.requires_grad for t in flipped):
            gx = _ReverseScan.apply(*flipped, None, ctx.raw).flip(1)
        else:
            gx = ctx.raw(*flipped, None).flip(1)
        gcoef = None
        if ctx.needs_input_grad[1]:
            following = torch.cat([y[:, 1:], torch.zeros_like(y[:, :1])], 1)  # y_{t+1}
            gcoef = gx * following
            if done is not None:
                gcoef = torch.where(done, torch.zeros_like(gcoef), gcoef)
            if coef.shape != y.shape:
                gcoef = gcoef.sum().reshape(coef.shape)
        return (gx if ctx.needs_input_grad[0] else None), gcoef, None, None


# --------------------------------------------------------------------------- doubling scan (any device)
def _doubling_scan(x: _Tensor, discount: float | _Tensor, done: _Tensor | None) -> _Tensor:
    """The scan in ``ceil(log2 T)`` rounds of whole-tensor ops (pure torch, differentiable).

    After the round with stride ``s``, ``(a_t, b_t)`` maps ``y_{t+s}`` to ``y_t``; two such maps make
    one of stride ``2s``. Values past the end are zero, so the last round leaves ``y_t = a_t``.
    """
    steps = x.shape[-1]
    b = discount if isinstance(discount, _Tensor) else torch.full_like(x, float(discount))
    b = b.expand_as(x)
    if done is not None:
        b = torch.where(done, torch.zeros_like(b), b)
    a = x
    stride = 1
    while stride < steps:
        a = torch.cat([a[..., :-stride] + b[..., :-stride] * a[..., stride:], a[..., -stride:]], -1)
        if 2 * stride < steps:
            b = torch.cat([b[..., :-stride] * b[..., stride:], torch.zeros_like(b[..., -stride:])], -1)
        stride *= 2
    return a
