"""Padding-free forward passes: the sequences of a batch laid end to end in one row, attention kept
within each sequence.

A padded batch of rows of lengths 40 and 150 costs 2 x 150 positions in every linear layer; laid
end to end it costs 190, with position ids restarting at each sequence. Attention must then stay
inside each sequence: :func:`varlen_attention`, registered with transformers' ``AttentionInterface``
under :data:`ATTENTION_NAME`, runs causal attention on each sequence separately, given the sequence
boundaries ``cu_seq_lens_q`` (cumulative lengths, as flash-attention's varlen kernels take them),
which transformers' decoder models forward to their attention function: one call per sequence, or
one call over the sequences laid out as right-padded rows (for the attention alone), whichever an
estimate of padding against per-call overhead says is cheaper. The log-probs are those of
each sequence run alone (float rounding aside); only the cost changes.

:func:`padding_free_attention` switches a model to this attention for the duration of a ``with``
block (forward and backward, which matters when activation checkpointing recomputes the forward),
and :func:`supports_padding_free` says whether a model can be switched (models that dispatch their
attention through ``AttentionInterface`` without logit soft-capping: GPT-2, Llama, Qwen2/3, Mistral,
Phi-3 and most current decoders in transformers 5).

Examples:
    >>> import torch
    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> from rl_llm.padding_free import padding_free_attention, supports_padding_free
    >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=11)).eval()
    >>> a, b = torch.tensor([[3, 4, 5]]), torch.tensor([[6, 7]])
    >>> packed, cu = torch.cat([a, b], 1), torch.tensor([0, 3, 5], dtype=torch.int32)
    >>> with torch.no_grad(), padding_free_attention(model):
    ...     both = model(packed, position_ids=torch.tensor([[0, 1, 2, 0, 1]]), cu_seq_lens_q=cu, cu_seq_lens_k=cu).logits
    ...     alone = model(b).logits
    >>> supports_padding_free(model), torch.allclose(both[:, 3:], alone, atol=1e-6)
    (True, True)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "ATTENTION_NAME",
    "boundaries",
    "padding_free_attention",
    "padding_free_works",
    "run_padding_free",
    "supports_padding_free",
    "varlen_attention",
]

ATTENTION_NAME = "rl_llm_varlen"
# attention features this function does not implement: refused rather than silently ignored
_UNSUPPORTED = ("softcap", "s_aux", "position_bias", "sinks")
_state = threading.local()  # .calls: attention calls that got sequence boundaries; .forward: inside run_padding_free


def boundaries(lengths: torch.Tensor | list[int], device: torch.device | None = None) -> torch.Tensor:
    """Cumulative sequence lengths ``[0, l0, l0 + l1, ...]`` (int32), as ``cu_seq_lens_q`` takes them.

    Examples:
        >>> from rl_llm.padding_free import boundaries
        >>> boundaries([3, 2]).tolist()
        [0, 3, 5]
    """
    lengths = torch.as_tensor(lengths, dtype=torch.int32, device=device)
    return torch.cat([lengths.new_zeros(1), lengths.cumsum(0, dtype=torch.int32)])


def varlen_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    cu_seq_lens_q: torch.Tensor | None = None,
    cu_seq_lens_k: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Causal attention within each sequence of a padding-free row (transformers' attention-function
    signature: ``query`` ``[B, heads, T, head_dim]``; returns ``[B, T, heads, head_dim]``).

    Without ``cu_seq_lens_q`` (an ordinary padded batch, or generation) it is transformers' SDPA
    attention, so a model switched to it still runs every other call as before.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if cu_seq_lens_q is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    used = [name for name in _UNSUPPORTED if kwargs.get(name) is not None]
    if used:
        raise NotImplementedError(
            f"padding-free attention: the model passes {used}, which it does not implement; "
            "train this model with padding_free=False."
        )
    if not getattr(module, "is_causal", True):
        raise NotImplementedError("padding-free attention: only causal (decoder) attention is supported.")
    if query.shape[0] != 1 or query.shape[2] != key.shape[2]:
        raise ValueError(
            f"padding-free attention: expected one row of queries and keys of equal length, got query "
            f"{tuple(query.shape)} and key {tuple(key.shape)}."
        )
    if cu_seq_lens_k is not None and not torch.equal(cu_seq_lens_k, cu_seq_lens_q):
        raise ValueError("padding-free attention: cu_seq_lens_k must equal cu_seq_lens_q (self-attention).")
    bounds = cu_seq_lens_q.tolist()
    window = kwargs.get("sliding_window")
    if window is not None and max(b - a for a, b in zip(bounds, bounds[1:])) > window:
        raise NotImplementedError(
            f"padding-free attention: a sequence is longer than the sliding window ({window}); "
            "train this model with padding_free=False."
        )
    if bounds[0] != 0 or bounds[-1] != query.shape[2]:
        raise ValueError(
            f"padding-free attention: cu_seq_lens_q must run from 0 to the row length {query.shape[2]}, "
            f"got {bounds[0]}..{bounds[-1]}."
        )
    if key.shape[1] != query.shape[1]:  # grouped-query attention: each key/value head serves several query heads
        key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
        value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
    dropout = dropout if module.training else 0.0
    sizes = [b - a for a, b in zip(bounds, bounds[1:])]
    if _one_call_per_sequence(sizes, query.shape[1] * query.shape[3], query.device):
        # split (not slicing): its backward is one concatenation, where each slice's would fill a full-size zero tensor
        pieces = [
            F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, scale=scaling)
            for q, k, v in zip(query.split(sizes, 2), key.split(sizes, 2), value.split(sizes, 2))
            if q.shape[2]
        ]
        out = torch.cat(pieces, dim=2).transpose(1, 2)
    else:
        # one batched call: the sequences as right-padded rows [S, heads, longest, head_dim], for the attention only
        # (causal attention never looks right, so padding at the end changes no real position)
        lengths = cu_seq_lens_q.diff().long()
        rows = torch.repeat_interleave(torch.arange(len(sizes), device=query.device), lengths)
        cols = torch.arange(query.shape[2], device=query.device) - torch.repeat_interleave(
            cu_seq_lens_q[:-1].long(), lengths
        )

        def padded(x: torch.Tensor) -> torch.Tensor:
            out = x.new_zeros(len(sizes), x.shape[1], max(sizes), x.shape[3])
            out[rows, :, cols] = x[0].transpose(0, 1)
            return out

        attended = F.scaled_dot_product_attention(
            padded(query), padded(key), padded(value), dropout_p=dropout, is_causal=True, scale=scaling
        )
        out = attended[rows, :, cols][None]
    _state.calls = getattr(_state, "calls", 0) + 1
    return out.contiguous(), None


# the cost of one more attention call, in multiply-adds (its fixed overhead: about 50 us on a CPU core, 10 us on a GPU)
_CALL_COST = {"cpu": 1e6, "cuda": 1e9}


def _one_call_per_sequence(sizes: list[int], width: int, device: torch.device) -> bool:
    """Whether attending each sequence in its own call is cheaper than one call over padded rows:
    padding to the longest costs ``(S * longest^2 - sum(L^2)) * heads * head_dim`` extra multiply-adds,
    each further call its fixed overhead."""
    waste = (len(sizes) * max(sizes) ** 2 - sum(n * n for n in sizes)) * width
    return waste > (len(sizes) - 1) * _CALL_COST.get(device.type, 1e9)


def _register() -> None:
    """Point transformers' registries at this module's functions (on every use: cheap, and right even
    when the module is imported twice, as doctest collection can)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def mask(*args: Any, **kwargs: Any) -> torch.Tensor | None:
        # a padding-free row needs no mask (varlen_attention reads the boundaries); other calls get SDPA's
        return None if getattr(_state, "forward", False) else sdpa_mask(*args, **kwargs)

    AttentionInterface.register(ATTENTION_NAME, varlen_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, mask)


def supports_padding_free(model: nn.Module) -> bool:
    """Whether ``model`` dispatches its attention through transformers' ``AttentionInterface`` and
    uses no attention feature :func:`varlen_attention` lacks (so :func:`padding_free_attention` can
    switch it)."""
    try:
        from transformers import AttentionInterface  # noqa: F401
        from transformers.masking_utils import AttentionMaskInterface  # noqa: F401
    except ImportError:  # transformers too old
        return False
    config = getattr(model, "config", None)
    if getattr(config, "attn_logit_softcapping", None) is not None:  # Gemma 2: not implemented here
        return False
    return bool(getattr(model, "_supports_attention_backend", False)) and hasattr(config, "_attn_implementation")


@contextmanager
def padding_free_attention(model: nn.Module) -> Iterator[nn.Module]:
    """Run ``model`` with :func:`varlen_attention` inside the block; its own attention is restored after.

    Raises:
        ValueError: the model does not dispatch attention through ``AttentionInterface``.
    """
    if not supports_padding_free(model):
        raise ValueError(
            f"padding-free attention: {type(model).__name__} does not dispatch its attention through "
            "transformers' AttentionInterface; use padded batches (padding_free=False)."
        )
    _register()
    config: Any = model.config  # a transformers PretrainedConfig
    previous = config._attn_implementation
    if previous == ATTENTION_NAME:  # nested: the outer block restores
        yield model
        return
    config._attn_implementation = ATTENTION_NAME
    try:
        yield model
    finally:
        config._attn_implementation = previous


def run_padding_free(
    model: nn.Module, module: nn.Module, input_ids: torch.Tensor, cu_seq_lens: torch.Tensor, position_ids: torch.Tensor
) -> Any:
    """``module(input_ids, position_ids=..., cu_seq_lens_q=..., cu_seq_lens_k=...)`` with ``model``
    (the causal LM that ``module`` is, or is the backbone of) switched to padding-free attention.

    Raises:
        ValueError: the model checkpoints activations and no enclosing :func:`padding_free_attention`
            block covers the backward pass (its recomputed forward would attend across sequences).
        RuntimeError: the boundaries never reached the attention (a model that drops the keyword).
    """
    nested = getattr(getattr(model, "config", None), "_attn_implementation", None) == ATTENTION_NAME
    # transformers 5 calls it activation checkpointing; 4.x has only the old name
    checkpointing = getattr(model, "is_activation_checkpointing", None)
    if checkpointing is None:
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if not nested and torch.is_grad_enabled() and checkpointing:
        raise ValueError(
            "padding-free forward: the model checkpoints activations, so the backward pass recomputes the "
            "forward; run forward and backward inside `with padding_free_attention(model):`."
        )
    before = getattr(_state, "calls", 0)
    with padding_free_attention(model):
        _state.forward = True
        try:
            # an all-ones mask: no padding (it also keeps transformers from warning about pad ids without one)
            out = module(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                position_ids=position_ids,
                cu_seq_lens_q=cu_seq_lens,
                cu_seq_lens_k=cu_seq_lens,
            )
        finally:
            _state.forward = False
    if getattr(_state, "calls", 0) == before:
        raise RuntimeError(
            f"padding-free forward: {type(model).__name__} did not pass the sequence boundaries (cu_seq_lens_q) "
            "to its attention; use padded batches (padding_free=False)."
        )
    return out


def padding_free_works(model: nn.Module) -> bool:
    """Whether ``model`` runs padding-free: :func:`supports_padding_free`, then a probe forward of two
    2-token sequences whose boundaries must reach the attention (no gradients; a few milliseconds)."""
    if not supports_padding_free(model):
        return False
    device = next(model.parameters()).device
    ids = torch.zeros(1, 4, dtype=torch.long, device=device)
    positions = torch.tensor([[0, 1, 0, 1]], device=device)
    try:
        with torch.no_grad():
            run_padding_free(model, model, ids, boundaries([2, 2], device=device), positions)
    except (RuntimeError, NotImplementedError):  # boundaries dropped, or an attention feature varlen_attention lacks
        return False
    return True
