"""Sampling completions with a static KV cache, the decode step optionally compiled.

:func:`sample_completions` draws the same tokens as ``model.generate(do_sample=True, ...)`` (the
same logits warpers in the same order, the same ``torch.multinomial`` draws, pad after EOS), but it
runs its own decode loop over a :class:`transformers.StaticCache`: every decode step then has the
same shapes, so ``compile=True`` can hand it to ``torch.compile`` once and reuse the compiled step
for every later token and call. On small and medium models, where a decode step is mostly Python
and operator overhead, that makes sampling about twice as fast on CPU (see benchmarks/). The first
compiled call pays the compilation (seconds); prompt lengths are rounded up to a multiple of
``PROMPT_BUCKET`` (by extra left padding) so that few shapes, hence few compilations, occur.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional, cast

import torch
from transformers import StaticCache
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

__all__ = ["PROMPT_BUCKET", "sample_completions", "supports_static_cache"]

PROMPT_BUCKET = 32


def supports_static_cache(model: Any) -> bool:
    """Whether ``model`` can decode with a :class:`transformers.StaticCache` (transformers says so
    through ``_can_compile_fullgraph``)."""
    return bool(getattr(model, "_can_compile_fullgraph", False))


def _warpers(temperature: float, top_k: int, top_p: float) -> LogitsProcessorList:
    # generate()'s sampling warpers, in its order, each skipped where it would change nothing
    warpers = LogitsProcessorList()
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return warpers


# transformers 4.x allocates the cache up front (it needs the batch size, device and dtype); 5.x on first use
_CACHE_NEEDS_BATCH = "batch_size" in inspect.signature(StaticCache.__init__).parameters


def _static_cache(model: Any, batch: int, length: int, device: torch.device, dtype: torch.dtype) -> Any:
    if _CACHE_NEEDS_BATCH:
        return StaticCache(config=model.config, batch_size=batch, max_cache_len=length, device=device, dtype=dtype)
    return StaticCache(config=model.config, max_cache_len=length)


def _decode_step(
    model: Any, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any, cache_position: torch.Tensor
) -> torch.Tensor:
    out = model(
        input_ids=ids,
        position_ids=positions,
        attention_mask=mask,
        past_key_values=cache,
        cache_position=cache_position,
        use_cache=True,
    )
    return out.logits[:, -1].float()


@functools.cache
def _compiled_step() -> Callable:
    """The decode step, compiled once per process (torch.compile guards on the model and the shapes)."""
    return torch.compile(_decode_step, dynamic=False)


@torch.no_grad()
def sample_completions(
    model: Any,
    prompt: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_token_id: Optional[int],
    pad_token_id: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    compile: bool = False,
) -> torch.Tensor:
    """Samples up to ``max_new_tokens`` tokens after each left-padded prompt row.

    Only ``temperature``, ``top_k`` and ``top_p`` shape the distribution: the model's own
    ``generation_config`` (a repetition penalty, say) is not applied, as in TRL's GRPO. A model without
    static-cache support (:func:`supports_static_cache`) samples through its own ``generate`` instead
    (which does apply its ``generation_config``).

    Args:
        model: a causal LM (put it in eval mode).
        prompt: ``[B, P]`` token ids, padded on the left.
        prompt_mask: ``[B, P]``, true (or 1) on real prompt tokens.
        max_new_tokens: the completion length limit.
        eos_token_id: a row ends at its first EOS (later positions hold ``pad_token_id``); ``None``:
            every row runs ``max_new_tokens`` steps.
        temperature, top_k, top_p: as ``generate``'s (``top_k=0`` and ``top_p=1`` switch them off).
        compile: run the decode step through ``torch.compile``.

    Returns:
        ``[B, T]`` sampled ids, ``T <= max_new_tokens`` (sampling stops when every row has ended).

    Raises:
        ValueError: the shapes or limits are wrong, or ``compile=True`` for a model without static-cache support.

    Examples:
        >>> import torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=60, bos_token_id=1,
        ...     eos_token_id=1)).eval()
        >>> prompt, mask = torch.tensor([[0, 5, 6], [7, 8, 9]]), torch.tensor([[0, 1, 1], [1, 1, 1]])
        >>> out = sample_completions(model, prompt, mask, max_new_tokens=4, eos_token_id=None, pad_token_id=0)
        >>> out.shape
        torch.Size([2, 4])
    """
    if prompt.dim() != 2 or prompt_mask.shape != prompt.shape:
        raise ValueError(
            f"sample_completions: prompt and prompt_mask must both be [B, P], got {list(prompt.shape)} and "
            f"{list(prompt_mask.shape)}."
        )
    if max_new_tokens < 1:
        raise ValueError(f"sample_completions: max_new_tokens must be >= 1, got {max_new_tokens}.")
    if not supports_static_cache(model):
        if compile:
            raise ValueError(
                f"sample_completions: compile=True needs a model that supports transformers' StaticCache; "
                f"{type(model).__name__} does not."
            )
        out = model.generate(
            input_ids=prompt,
            attention_mask=prompt_mask.long(),
            do_sample=True,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            max_new_tokens=max_new_tokens,
            pad_token_id=pad_token_id,
            eos_token_id=eos_token_id,
            use_cache=True,
        )
        return (out if isinstance(out, torch.Tensor) else out.sequences)[:, prompt.shape[1] :]
    batch, device = prompt.shape[0], prompt.device
    mask = prompt_mask.long()
    extra = -prompt.shape[1] % PROMPT_BUCKET if compile else 0  # left padding up to the bucket
    if extra:
        prompt = torch.cat([prompt.new_full((batch, extra), pad_token_id), prompt], 1)
        mask = torch.cat([mask.new_zeros(batch, extra), mask], 1)
    length = prompt.shape[1]
    total = length + max_new_tokens
    dtype = next(model.parameters()).dtype
    cache = _static_cache(model, batch, total, device, dtype)
    full_mask = torch.cat([mask, mask.new_zeros(batch, max_new_tokens)], 1)
    # generate()'s positions for left-padded rows: counted over real tokens only
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    next_position = positions[:, -1:] + 1
    logits = _decode_step(model, prompt, positions, full_mask[:, :length], cache, torch.arange(length, device=device))
    step = _compiled_step() if compile else _decode_step
    warpers = _warpers(temperature, top_k, top_p)
    unfinished = torch.ones(batch, dtype=torch.long, device=device)
    tokens = []
    for t in range(max_new_tokens):
        scores = warpers(cast(torch.LongTensor, prompt), logits) if warpers else logits
        token = torch.multinomial(torch.softmax(scores, -1), num_samples=1).squeeze(1)
        if eos_token_id is not None:
            token = token * unfinished + pad_token_id * (1 - unfinished)
            unfinished = unfinished & (token != eos_token_id).long()
        tokens.append(token)
        if t == max_new_tokens - 1 or (eos_token_id is not None and not bool(unfinished.any())):
            break
        full_mask[:, length + t] = 1
        cache_position = torch.tensor([length + t], device=device)
        logits = step(model, token[:, None], next_position + t, full_mask, cache, cache_position)
    return torch.stack(tokens, 1)
