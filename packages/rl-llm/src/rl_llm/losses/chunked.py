"""Log-probs of chosen tokens without the full ``[B, T, V]`` logits: the LM head and the
log-softmax run on chunks of positions, forward and backward.

``token_log_probs_chunked(hidden, weight, bias, targets, chunk_size)`` equals
``(hidden @ weight.T + bias).log_softmax(-1).gather(-1, targets)`` in value and gradients, but holds
one ``[chunk_size, V]`` block at a time: the forward keeps only each position's log-normaliser, the
backward recomputes each block's softmax (``d logits = g * (onehot - softmax)``) and accumulates
the gradients of the hidden states, the weight and the bias. Peak memory drops from a few
``B * T * V`` tensors to ``chunk_size * V`` plus the hidden states.

:func:`lm_hidden_and_head` splits a Hugging Face causal LM into its backbone (which returns the
final hidden states) and its output layer, refusing models whose logits are further transformed
(soft-capping, logit scaling), where the chunked values would differ.

When rl-kernels is installed (``pip install 'rl-llm[kernels]'``) and the tensors are on CUDA,
:func:`token_log_probs_chunked` hands the work to :func:`rl_kernels.chunked_log_probs` (a fused Triton
LM head + log-softmax + gather, the same values and gradients); without it, or on CPU, it runs its own
torch loop below.
"""

from __future__ import annotations

from typing import Any

import torch
from tdict.validation import check_positive, check_positive_int
from torch import nn

__all__ = ["lm_hidden_and_head", "token_log_probs_chunked"]

# The rl_kernels backend to force for every call ("torch", "triton" or "auto"; tests set it to run the
# Triton kernels under Triton's interpreter), or None: rl_kernels for CUDA tensors when it is installed.
_KERNELS_BACKEND: str | None = None


def _kernels_backend(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> str | None:
    """The ``backend`` to call rl_kernels.chunked_log_probs with, or None for this module's torch path."""
    if _KERNELS_BACKEND is None and not hidden.is_cuda:
        return None
    # rl_kernels takes one dtype for all three; under autocast the torch path's matmul would run in the
    # autocast dtype instead, so it keeps those calls
    if weight.dtype != hidden.dtype or (bias is not None and bias.dtype != hidden.dtype):
        return None
    if torch.is_autocast_enabled(hidden.device.type):
        return None
    try:
        import rl_kernels  # noqa: F401
    except ImportError:
        return None
    return _KERNELS_BACKEND or "auto"


class _ChunkedLogProbs(torch.autograd.Function):
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
        n, dtype = hidden.shape[0], _compute_dtype(hidden)
        out = hidden.new_empty(n, dtype=dtype)
        lse = hidden.new_empty(n, dtype=dtype)
        for start in range(0, n, chunk_size):
            stop = min(start + chunk_size, n)
            logits = _logits(hidden[start:stop], weight, bias, temperature)
            lse[start:stop] = logits.logsumexp(-1)
            out[start:stop] = logits.gather(-1, targets[start:stop, None])[:, 0] - lse[start:stop]
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.chunk_size, ctx.temperature = chunk_size, temperature
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple:
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        chunk_size, temperature = ctx.chunk_size, ctx.temperature
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(hidden) if need_h else None
        dtype = lse.dtype
        grad_w = torch.zeros_like(weight, dtype=dtype) if need_w else None
        grad_b = torch.zeros_like(bias, dtype=dtype) if (need_b and bias is not None) else None
        for start in range(0, hidden.shape[0], chunk_size):
            stop = min(start + chunk_size, hidden.shape[0])
            g = grad_out[start:stop].to(dtype)
            logits = _logits(hidden[start:stop], weight, bias, temperature)
            d_logits = -(logits - lse[start:stop, None]).exp() * g[:, None]
            d_logits.scatter_add_(-1, targets[start:stop, None], g[:, None])
            d_logits /= temperature
            if grad_h is not None:
                grad_h[start:stop] = (d_logits.to(weight.dtype) @ weight).to(hidden.dtype)
            if grad_w is not None:
                grad_w += d_logits.T @ hidden[start:stop].to(dtype)
            if grad_b is not None:
                grad_b += d_logits.sum(0)
        cast = lambda t, like: None if t is None else t.to(like.dtype)
        return grad_h, cast(grad_w, weight), (cast(grad_b, bias) if bias is not None else None), None, None, None


def _compute_dtype(hidden: torch.Tensor) -> torch.dtype:
    """float32, or float64 for float64 inputs (half-precision logits are computed in float32)."""
    return torch.promote_types(hidden.dtype, torch.float32)


def _logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float) -> torch.Tensor:
    logits = (hidden @ weight.T if bias is None else torch.addmm(bias, hidden, weight.T)).to(_compute_dtype(hidden))
    return logits / temperature if temperature != 1.0 else logits


def token_log_probs_chunked(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    chunk_size: int = 1024,
    temperature: float = 1.0,
) -> torch.Tensor:
    """``log_softmax(hidden @ weight.T + bias)`` at ``targets``, ``chunk_size`` positions at a time.

    Args:
        hidden: ``[..., H]`` final hidden states; weight: ``[V, H]`` the output layer's; bias: ``[V]`` or None.
        targets: ``[...]`` token ids (the hidden state's leading shape).
        chunk_size: positions per block (peak extra memory ``chunk_size * V`` floats).
        temperature: the logits are divided by it.

    Returns ``[...]`` log-probs (float32; float64 for float64 inputs), differentiable w.r.t. ``hidden``, ``weight`` and ``bias``.

    Examples:
        >>> import torch
        >>> from rl_llm.losses import token_log_probs_chunked
        >>> h, w, t = torch.randn(2, 5, 4), torch.randn(7, 4), torch.randint(0, 7, (2, 5))
        >>> full = (h @ w.T).log_softmax(-1).gather(-1, t[..., None])[..., 0]
        >>> torch.allclose(token_log_probs_chunked(h, w, None, t, chunk_size=3), full, atol=1e-6)
        True
    """
    check_positive_int("token_log_probs_chunked", "chunk_size", chunk_size)
    check_positive("token_log_probs_chunked", "temperature", temperature)
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(
            f"token_log_probs_chunked: targets {tuple(targets.shape)} must match hidden's leading shape {tuple(hidden.shape[:-1])}."
        )
    if weight.ndim != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"token_log_probs_chunked: weight must be [V, {hidden.shape[-1]}], got {tuple(weight.shape)}.")
    flat_hidden, flat_targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1).long()
    backend = _kernels_backend(flat_hidden, weight, bias)
    if backend is not None:
        import rl_kernels

        flat = rl_kernels.chunked_log_probs(
            flat_hidden, weight, flat_targets, chunk_size, bias=bias, temperature=float(temperature), backend=backend
        )
    else:
        flat = _ChunkedLogProbs.apply(flat_hidden, weight, bias, flat_targets, chunk_size, float(temperature))
    return flat.reshape(targets.shape)


def lm_hidden_and_head(model: nn.Module) -> tuple[nn.Module, nn.Linear]:
    """``(backbone, head)`` of a Hugging Face causal LM: ``backbone(input_ids=..., attention_mask=...,
    position_ids=...)[0]`` are the final hidden states and ``head`` the ``nn.Linear`` producing logits.

    Raises:
        ValueError: the model has no such split, or transforms its logits after the head.
    """
    # a PEFT model: its adapters sit inside the wrapped model's layers, so that model's own backbone runs them
    get_base_model = getattr(model, "get_base_model", None)
    inner: Any = get_base_model() if callable(get_base_model) else model  # a transformers PreTrainedModel
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    backbone = getattr(inner, "base_model", None)
    if not isinstance(head, nn.Linear) or backbone is None or backbone is inner:
        raise ValueError(
            f"chunked log-probs: {type(model).__name__} does not expose a backbone and a linear output layer; "
            "use the full-logits path (logprob_chunk_size=None)."
        )
    config = getattr(model, "config", None)
    for attr in ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale"):
        value = getattr(config, attr, None)
        if value not in (None, 1, 1.0):
            raise ValueError(
                f"chunked log-probs: {type(model).__name__} transforms its logits ({attr}={value}); "
                "use the full-logits path (logprob_chunk_size=None)."
            )
    return backbone, head
