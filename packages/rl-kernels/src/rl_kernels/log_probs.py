"""Log-probabilities of chosen tokens under an LM head, without the ``[N, V]`` logits.

:func:`chunked_log_probs` equals ``(hidden @ weight.T + bias).log_softmax(-1).gather(-1, targets)`` in value
and in its gradients w.r.t. ``hidden``, ``weight`` and ``bias``, but never holds the logits of all rows:

- ``backend="torch"``: rows are processed ``chunk_size`` at a time, so at most a ``[chunk_size, V]`` block
  of logits lives; the forward keeps only each row's log-normaliser and the backward recomputes each
  block's softmax to form ``d logits = g * (onehot - softmax)``.
- ``backend="triton"`` (:mod:`rl_kernels._log_probs_triton`): cuBLAS forms ``chunk_size`` rows of float32
  logits at a time and one Triton program per row folds its row into an online log-sum-exp (forward)
  or turns it into ``d logits`` for two more matmuls (backward); on CUDA torch releases that cannot
  multiply half inputs into float32 (< 2.8), the logits are formed tile by tile inside the kernels.

Half-precision inputs are computed with float32 accumulation and the result is float32 (float64 for
float64 inputs).

Examples:
    >>> import torch
    >>> from rl_kernels import chunked_log_probs
    >>> h, w, t = torch.randn(6, 4), torch.randn(9, 4), torch.randint(0, 9, (6,))
    >>> full = (h @ w.T).log_softmax(-1).gather(-1, t[:, None])[:, 0]
    >>> torch.allclose(chunked_log_probs(h, w, t, 4, backend="torch"), full, atol=1e-5)
    True
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ._backend import resolve_backend

__all__ = ["chunked_log_probs"]

_OP = "chunked_log_probs"
_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32, or float64 for float64 inputs (half-precision logits are formed in float32)."""
    return torch.promote_types(dtype, torch.float32)


def _chunk_logits(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float
) -> torch.Tensor:
    logits = hidden @ weight.T if bias is None else torch.addmm(bias, hidden, weight.T)
    logits = logits.to(_compute_dtype(hidden.dtype))
    return logits / temperature if temperature != 1.0 else logits


def grad_buffers(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    needs: tuple[bool, bool, bool],
    dtype: torch.dtype,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """The gradients' buffers (None where not needed): ``d hidden`` in the input dtype, ``d W`` and
    ``d bias`` accumulators in ``dtype`` (zeroed); shared by the torch and Triton paths."""
    v, d = weight.shape
    need_h, need_w, need_b = needs
    grad_h = torch.empty_like(hidden, memory_format=torch.contiguous_format) if need_h else None
    grad_w = torch.zeros(v, d, device=weight.device, dtype=dtype) if need_w else None
    grad_b = torch.zeros(v, device=weight.device, dtype=dtype) if need_b and bias is not None else None
    return grad_h, grad_w, grad_b


def in_input_dtypes(
    grads: tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None],
    weight: torch.Tensor,
    bias: torch.Tensor | None,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """The gradients in the dtypes of what they differentiate (the accumulators may be wider)."""
    grad_h, grad_w, grad_b = grads
    return (
        grad_h,
        None if grad_w is None else grad_w.to(weight.dtype),
        None if grad_b is None or bias is None else grad_b.to(bias.dtype),
    )


class _TorchChunkedLogProbs(torch.autograd.Function):
    """The reference path: ``chunk_size`` rows of logits at a time, forward and backward."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        chunk_size: int,
        temperature: float,
    ) -> torch.Tensor:
        n = hidden.shape[0]
        dtype = _compute_dtype(hidden.dtype)
        out = torch.empty(n, device=hidden.device, dtype=dtype)
        lse = torch.empty(n, device=hidden.device, dtype=dtype)
        for start in range(0, n, chunk_size):
            stop = min(start + chunk_size, n)
            logits = _chunk_logits(hidden[start:stop], weight, bias, temperature)
            torch.logsumexp(logits, -1, out=lse[start:stop])
            out[start:stop] = logits.gather(-1, targets[start:stop, None])[:, 0] - lse[start:stop]
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.chunk_size, ctx.temperature = chunk_size, temperature
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple:
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        chunk_size, temperature = ctx.chunk_size, ctx.temperature
        dtype = lse.dtype
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2])
        grad_h, grad_w, grad_b = grad_buffers(hidden, weight, bias, needs, dtype)
        for start in range(0, hidden.shape[0], chunk_size):
            stop = min(start + chunk_size, hidden.shape[0])
            g = grad_out[start:stop].to(dtype)[:, None]
            # d logits = g * (onehot - softmax) / T, built in place in the logits' block
            d_logits = _chunk_logits(hidden[start:stop], weight, bias, temperature)
            d_logits.sub_(lse[start:stop, None]).exp_().mul_(-g)
            d_logits.scatter_add_(-1, targets[start:stop, None], g)
            if temperature != 1.0:
                d_logits.div_(temperature)
            if grad_h is not None:
                grad_h[start:stop] = d_logits.to(weight.dtype) @ weight
            if grad_w is not None:
                grad_w.addmm_(d_logits.T, hidden[start:stop].to(dtype))
            if grad_b is not None:
                grad_b += d_logits.sum(0)
        return (*in_input_dtypes((grad_h, grad_w, grad_b), weight, bias), None, None, None)


def _describe(x: object) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)} on {x.device}"
    return f"{type(x).__name__} {x!r}"


def _check(
    hidden: object,
    weight: object,
    targets: object,
    chunk_size: object,
    bias: object,
    temperature: object,
) -> None:
    if not isinstance(hidden, torch.Tensor) or hidden.ndim != 2 or not hidden.is_floating_point():
        raise ValueError(f"{_OP}: hidden must be a floating [N, D] tensor, got {_describe(hidden)}.")
    n, d = hidden.shape
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2 or weight.shape[1] != d or weight.shape[0] == 0:
        raise ValueError(
            f"{_OP}: weight must be a [V, {d}] tensor (nn.Linear layout, V >= 1, D as hidden's), got {_describe(weight)}."
        )
    if weight.dtype != hidden.dtype or weight.device != hidden.device:
        raise ValueError(
            f"{_OP}: weight must have hidden's dtype and device ({hidden.dtype}, {hidden.device}), "
            f"got {weight.dtype} on {weight.device}."
        )
    v = weight.shape[0]
    if (
        not isinstance(targets, torch.Tensor)
        or targets.shape != (n,)
        or targets.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8)
    ):
        raise ValueError(f"{_OP}: targets must be an integer [{n}] tensor of token ids, got {_describe(targets)}.")
    if targets.device != hidden.device:
        raise ValueError(f"{_OP}: targets must be on hidden's device {hidden.device}, got {targets.device}.")
    if bias is not None and (
        not isinstance(bias, torch.Tensor)
        or bias.shape != (v,)
        or bias.dtype != hidden.dtype
        or bias.device != hidden.device
    ):
        raise ValueError(
            f"{_OP}: bias must be None or a [{v}] tensor of dtype {hidden.dtype} on {hidden.device}, "
            f"got {_describe(bias)}."
        )
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"{_OP}: chunk_size must be a positive int, got {_describe(chunk_size)}.")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or temperature <= 0
    ):
        raise ValueError(f"{_OP}: temperature must be a finite number > 0, got {_describe(temperature)}.")
    if n > 0 and bool(((targets < 0) | (targets >= v)).any()):
        bad = targets[(targets < 0) | (targets >= v)]
        raise ValueError(
            f"{_OP}: targets must lie in [0, {v}) (the vocabulary size, weight.shape[0]), "
            f"got {bad.numel()} outside it, e.g. {int(bad[0])}."
        )


def chunked_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_size: int = 1024,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    backend: str = "auto",
) -> torch.Tensor:
    """``log_softmax((hidden @ weight.T + bias) / temperature)`` at ``targets``, without the ``[N, V]`` logits.

    Args:
        hidden: ``[N, D]`` floating hidden states (flatten batch and time first).
        weight: ``[V, D]`` output layer weight (``nn.Linear`` layout), hidden's dtype and device.
        targets: ``[N]`` integer token ids in ``[0, V)``.
        chunk_size: rows per block: at most ``chunk_size * V`` logits (torch path) or backward
            ``d logits`` (Triton path) live at once.
        bias: ``[V]`` output layer bias, or None.
        temperature: the logits are divided by it (> 0).
        backend: ``"auto"`` (Triton for CUDA half/float32 tensors when installed), ``"torch"`` or ``"triton"``.

    Returns:
        ``[N]`` log-probabilities, float32 (float64 for float64 inputs), differentiable w.r.t. ``hidden``,
        ``weight`` and ``bias``.

    Raises:
        ValueError: bad shapes, dtypes, devices, out-of-range targets or arguments (before any work);
            ``backend="triton"`` with float64 inputs.
        RuntimeError: ``backend="triton"`` where Triton cannot run (see :func:`rl_kernels._backend.resolve_backend`).

    Examples:
        >>> import torch
        >>> from rl_kernels import chunked_log_probs
        >>> h = torch.randn(5, 3, requires_grad=True)
        >>> w, b, t = torch.randn(7, 3), torch.randn(7), torch.tensor([0, 6, 2, 2, 5])
        >>> lp = chunked_log_probs(h, w, t, 2, bias=b, temperature=0.7, backend="torch")
        >>> full = ((h @ w.T + b) / 0.7).log_softmax(-1).gather(-1, t[:, None])[:, 0]
        >>> lp.shape, lp.dtype, torch.allclose(lp, full, atol=1e-5)
        (torch.Size([5]), torch.float32, True)
        >>> lp.sum().backward()
        >>> h.grad.shape
        torch.Size([5, 3])
    """
    _check(hidden, weight, targets, chunk_size, bias, temperature)
    temperature = float(temperature)
    path = resolve_backend(_OP, backend, hidden.device)
    if path == "triton" and hidden.dtype not in _TRITON_DTYPES:
        if backend == "triton":
            raise ValueError(f"{_OP}: backend='triton' takes {_TRITON_DTYPES} inputs, got {hidden.dtype}.")
        path = "torch"
    targets = targets.long()
    if path == "torch" or hidden.shape[0] == 0:
        out = _TorchChunkedLogProbs.apply(hidden, weight, bias, targets, chunk_size, temperature)
        return out  # pyright: ignore[reportReturnType]  # autograd.Function.apply is untyped
    from ._log_probs_triton import chunked_log_probs_triton

    return chunked_log_probs_triton(hidden, weight, bias, targets, chunk_size, temperature)
