"""Shared pieces of the LLM losses: per-token log-probs of a response, masked reductions, key handling.

The one forward pass every loss and the policy wrapper run is :func:`response_log_probs`: the prompt
(left-padded) and the response (right-padded) are concatenated, the model sees the joint attention mask
and position ids that count only real tokens, and the log-softmax of the logits that *predict* each
response token is gathered at that token. Padding therefore changes nothing: a row's log-probs equal
those of the same row run alone without padding.
"""

from __future__ import annotations


from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
from tdict.nn import TensorKeysMixin
from tdict.validation import check_positive
from torch import nn

from ..padding_free import boundaries, run_padding_free
from .chunked import lm_hidden_and_head, token_log_probs_chunked

if TYPE_CHECKING:
    from ..modules import TransformersWrapper

__all__ = ["LLMLossBase", "aggregate_tokens", "masked_mean", "masked_sum", "response_log_probs", "sequence_log_probs"]


def _check_pair(tokens: torch.Tensor, mask: torch.Tensor, name: str) -> None:
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2:
        raise ValueError(
            f"{name}: expected a [batch, length] tensor of token ids, got {getattr(tokens, 'shape', type(tokens))}."
        )
    if tokens.is_floating_point():
        raise ValueError(f"{name}: expected integer token ids, got dtype {tokens.dtype}.")
    if mask.shape != tokens.shape:
        raise ValueError(f"{name} mask: expected shape {tuple(tokens.shape)} (as the tokens), got {tuple(mask.shape)}.")


def response_log_probs(
    model: nn.Module,
    prompt_tokens: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_tokens: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    return_entropy: bool = False,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    padding_free: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (and entropies) of ``response_tokens`` given ``prompt_tokens``, in one pass.

    Args:
        model: a causal LM returning ``.logits`` of shape ``[B, L, vocab]`` (any Hugging Face
            ``*ForCausalLM``).
        prompt_tokens: ``[B, Lp]`` token ids, LEFT-padded (every row's last column is a real token).
        prompt_mask: ``[B, Lp]`` bool/int, true on real prompt tokens.
        response_tokens: ``[B, Lr]`` token ids, RIGHT-padded.
        response_mask: ``[B, Lr]`` bool/int, true on real response tokens (a prefix of each row).
        return_entropy: also return the entropy of the model's next-token distribution at each
            response position.
        temperature: the logits are divided by it first: the log-probs of the distribution that
            sampling at this temperature draws from.
        chunk_size: compute the output layer and log-softmax ``chunk_size`` positions at a time
            (:func:`~rl_llm.losses.token_log_probs_chunked`): the same values and gradients without
            ever holding the ``[B, Lr, vocab]`` logits. ``None``: one pass over full logits.
        padding_free: run the rows' real tokens end to end in one row, attention kept within each
            row (:mod:`rl_llm.padding_free`): the same log-probs without computing on padding.
            The model must dispatch its attention through transformers' ``AttentionInterface``.

    Returns:
        ``(log_probs, entropy)``, both ``[B, Lr]`` float, 0 where ``response_mask`` is false
        (``entropy`` is ``None`` unless asked for). Gradients flow to the model's parameters.

    Examples:
        >>> import torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> from rl_llm.losses import response_log_probs
        >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=11,
        ...                                    bos_token_id=1, eos_token_id=1, pad_token_id=0))
        >>> lp, _ = response_log_probs(model, torch.tensor([[0, 3, 4]]), torch.tensor([[0, 1, 1]]),
        ...                            torch.tensor([[5, 6, 0]]), torch.tensor([[1, 1, 0]]))
        >>> lp.shape, bool(lp[0, 2] == 0), bool((lp[0, :2] < 0).all())
        (torch.Size([1, 3]), True, True)
    """
    _check_pair(prompt_tokens, prompt_mask, "prompt_tokens")
    _check_pair(response_tokens, response_mask, "response_tokens")
    if prompt_tokens.shape[0] != response_tokens.shape[0]:
        raise ValueError(
            f"response_log_probs: prompt batch {prompt_tokens.shape[0]} != response batch {response_tokens.shape[0]}."
        )
    prompt_mask = prompt_mask.bool()
    response_mask = response_mask.bool()
    if prompt_tokens.shape[1] == 0 or not bool(prompt_mask[:, -1].all()):
        raise ValueError(
            "prompt_tokens must be LEFT-padded with at least one real token per row (prompt_mask[:, -1] all true): "
            "the last prompt position predicts the first response token."
        )
    lp_len = prompt_tokens.shape[1]
    r_len = response_tokens.shape[1]
    input_ids = torch.cat([prompt_tokens, response_tokens], dim=1)
    attention = torch.cat([prompt_mask, response_mask], dim=1)
    # positions count real tokens only, so left padding does not shift them (as generate() does)
    position_ids = (attention.long().cumsum(-1) - 1).clamp(min=0)
    if padding_free:
        if bool((prompt_mask.long().diff(dim=1) < 0).any()) or bool((response_mask.long().diff(dim=1) > 0).any()):
            raise ValueError(
                "response_log_probs(padding_free=True): prompt_mask must be a suffix of each row (left padding) "
                "and response_mask a prefix (right padding)."
            )
        # each row's real tokens are contiguous once the padding is dropped: prompt, then response
        is_response = torch.cat([torch.zeros_like(prompt_mask), response_mask], dim=1)[attention]
        flat_lp, flat_entropy = _padding_free_log_probs(
            model,
            input_ids[attention][None],
            attention.sum(1),
            chunk_size=chunk_size,
            temperature=temperature,
            return_entropy=return_entropy,
            needed=is_response,
        )
        zero = flat_lp.new_zeros(attention.shape)
        log_probs = zero.masked_scatter(attention, flat_lp)[:, lp_len:]
        entropy = None if flat_entropy is None else zero.masked_scatter(attention, flat_entropy)[:, lp_len:]
        return log_probs, entropy
    if chunk_size is not None:
        if return_entropy:
            raise ValueError("response_log_probs: return_entropy needs the full logits; pass chunk_size=None.")
        backbone, head = lm_hidden_and_head(model)
        hidden = backbone(input_ids=input_ids, attention_mask=attention.long(), position_ids=position_ids)[0]
        log_probs = token_log_probs_chunked(
            hidden[:, lp_len - 1 : lp_len - 1 + r_len],
            head.weight,
            head.bias,
            response_tokens,
            chunk_size=chunk_size,
            temperature=temperature,
        )
        return torch.where(response_mask, log_probs, log_probs.new_zeros(())), None
    logits = model(input_ids=input_ids, attention_mask=attention.long(), position_ids=position_ids).logits
    # logits at position t predict token t + 1: the response is predicted by positions Lp-1 .. Lp+Lr-2
    logits = logits[:, lp_len - 1 : lp_len - 1 + r_len].float()
    if temperature != 1.0:
        check_positive("response_log_probs", "temperature", temperature)
        logits = logits / temperature
    log_softmax = logits.log_softmax(-1)
    log_probs = log_softmax.gather(-1, response_tokens.unsqueeze(-1)).squeeze(-1)
    zero = log_probs.new_zeros(())
    log_probs = torch.where(response_mask, log_probs, zero)
    entropy = None
    if return_entropy:
        entropy = -(log_softmax.exp() * log_softmax).sum(-1)
        entropy = torch.where(response_mask, entropy, zero)
    return log_probs, entropy


def sequence_log_probs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None = None,
    *,
    chunk_size: int | None = None,
    cu_seq_lens: torch.Tensor | None = None,
    needed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log-prob of each token given the ones before it, for right-padded sequences: ``[B, T]``
    with column 0 (no context) and padded positions set to 0.

    For rows that pack several sequences, pass ``position_ids`` restarting at each sequence and a
    ``[B, 1, T, T]`` bool ``attention_mask`` (true where a position may attend: same sequence, not
    later); padded positions are then not zeroed (weight the result with your loss mask).
    ``chunk_size`` as in :func:`response_log_probs`.

    Padding-free (:mod:`rl_llm.padding_free`): ``input_ids`` ``[1, N]`` holding sequences end to end,
    ``cu_seq_lens`` their boundaries (``[0, l0, l0 + l1, ..., N]``), ``attention_mask=None``; every
    sequence's first column is 0 and ``position_ids`` (derived when None) restart at each sequence.
    ``needed`` (``[1, N]`` bool, padding-free only): the tokens whose log-probs are wanted (e.g. the
    trained ones); the output layer skips the others, which come out 0.

    Examples:
        >>> import torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> from rl_llm.losses import sequence_log_probs
        >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=11))
        >>> with torch.no_grad():
        ...     lp = sequence_log_probs(model, torch.tensor([[3, 4, 5, 0]]), torch.tensor([[1, 1, 1, 0]]))
        >>> lp.shape, float(lp[0, 0]), float(lp[0, 3]), bool((lp[0, 1:3] < 0).all())
        (torch.Size([1, 4]), 0.0, 0.0, True)
    """
    if cu_seq_lens is not None:
        if attention_mask is not None or input_ids.ndim != 2 or input_ids.shape[0] != 1:
            raise ValueError(
                f"sequence_log_probs: with cu_seq_lens, pass input_ids [1, N] and attention_mask=None; got input_ids "
                f"{tuple(input_ids.shape)} and attention_mask {None if attention_mask is None else tuple(attention_mask.shape)}."
            )
        cu = cu_seq_lens.long()
        if cu.ndim != 1 or int(cu[0]) != 0 or int(cu[-1]) != input_ids.shape[1] or bool((cu.diff() < 0).any()):
            raise ValueError(
                f"sequence_log_probs: cu_seq_lens must rise from 0 to {input_ids.shape[1]}, got {cu_seq_lens.tolist()}."
            )
        if needed is not None and needed.shape != input_ids.shape:
            raise ValueError(
                f"sequence_log_probs: needed must be shaped like input_ids {tuple(input_ids.shape)}, got {tuple(needed.shape)}."
            )
        out, _ = _padding_free_log_probs(
            model,
            input_ids,
            cu.diff(),
            chunk_size=chunk_size,
            position_ids=position_ids,
            needed=None if needed is None else needed[0],
        )
        return out[None]
    if needed is not None:
        raise ValueError("sequence_log_probs: needed applies to padding-free rows (with cu_seq_lens) only.")
    if attention_mask is None:
        raise ValueError("sequence_log_probs: attention_mask is required (None only with cu_seq_lens).")
    if attention_mask.ndim == 4:  # [B, 1, T, T] bool: which positions each one attends to (packed rows)
        if (
            attention_mask.shape != (input_ids.shape[0], 1, input_ids.shape[1], input_ids.shape[1])
            or attention_mask.dtype != torch.bool
        ):
            raise ValueError(
                f"sequence_log_probs: a 4-D attention_mask must be bool [B, 1, T, T], got {attention_mask.dtype} {tuple(attention_mask.shape)}."
            )
        mask, model_mask = None, attention_mask
    else:
        _check_pair(input_ids, attention_mask, "input_ids")
        mask, model_mask = attention_mask.bool(), attention_mask.long()
    kwargs = {} if position_ids is None else {"position_ids": position_ids}
    if chunk_size is not None:
        backbone, head = lm_hidden_and_head(model)
        hidden = backbone(input_ids=input_ids, attention_mask=model_mask, **kwargs)[0][:, :-1]
        picked = token_log_probs_chunked(hidden, head.weight, head.bias, input_ids[:, 1:], chunk_size=chunk_size)
    else:
        logits = model(input_ids=input_ids, attention_mask=model_mask, **kwargs).logits[:, :-1].float()
        picked = logits.log_softmax(-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    out = torch.cat([picked.new_zeros(picked.shape[0], 1), picked], dim=1)
    return out if mask is None else torch.where(mask, out, out.new_zeros(()))


def _padding_free_log_probs(
    model: nn.Module,
    input_ids: torch.Tensor,
    lengths: torch.Tensor,
    *,
    chunk_size: int | None = None,
    temperature: float = 1.0,
    return_entropy: bool = False,
    position_ids: torch.Tensor | None = None,
    needed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Sequences of ``lengths`` laid end to end in ``input_ids`` ``[1, N]``: ``[N]`` log-probs of each
    token given the earlier tokens of its sequence, and the entropies of the distributions that
    predicted them (or None); 0 at each sequence's first token and where ``needed`` (``[N]`` bool)
    is false. The output layer runs only at the positions predicting needed tokens (as
    ``logits_to_keep`` does in transformers), unless the model transforms its logits after it."""
    check_positive("response_log_probs", "temperature", temperature)
    if chunk_size is not None and return_entropy:
        raise ValueError("response_log_probs: return_entropy needs the full logits; pass chunk_size=None.")
    device, n = input_ids.device, input_ids.shape[1]
    lengths = lengths.to(device)
    offsets = lengths.cumsum(0) - lengths
    wanted = torch.ones(n, dtype=torch.bool, device=device) if needed is None else needed.to(device).bool().clone()
    wanted[offsets[lengths > 0]] = False  # a sequence's first token has no context
    index = wanted.nonzero()[:, 0]  # the tokens scored; index - 1 are the positions predicting them
    if position_ids is None:
        position_ids = (torch.arange(n, device=device) - torch.repeat_interleave(offsets, lengths))[None]
    cu, targets = boundaries(lengths, device=device), input_ids[0, index]
    try:
        backbone, head = lm_hidden_and_head(model)
    except ValueError:
        if chunk_size is not None:
            raise
        backbone = head = None  # logits transformed after the output layer: the model's own forward computes them
    entropy = None
    if head is not None:
        assert backbone is not None  # lm_hidden_and_head returns both or raises
        hidden = run_padding_free(model, backbone, input_ids, cu, position_ids)[0][0, index - 1]
    if chunk_size is not None:
        assert head is not None  # without a head, the ValueError above was re-raised
        picked = token_log_probs_chunked(
            hidden, head.weight, head.bias, targets, chunk_size=chunk_size, temperature=temperature
        )
    else:
        if head is not None:
            logits = head(hidden).float()
        else:
            logits = run_padding_free(model, model, input_ids, cu, position_ids).logits[0, index - 1].float()
        log_softmax = (logits / temperature if temperature != 1.0 else logits).log_softmax(-1)
        picked = log_softmax.gather(-1, targets[:, None])[:, 0]
        if return_entropy:
            entropy = picked.new_zeros(n).index_put((index,), -(log_softmax.exp() * log_softmax).sum(-1))
    return picked.new_zeros(n).index_put((index,), picked), entropy


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is true, along ``dim``."""
    return torch.where(mask.bool(), values, values.new_zeros(())).sum(dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` over the true entries of ``mask`` (all dims when ``dim`` is None).

    An all-false mask gives 0 rather than NaN (a batch without response tokens contributes nothing).
    """
    mask = mask.bool()
    masked = torch.where(mask, values, values.new_zeros(()))
    if dim is None:
        return masked.sum() / mask.sum().clamp(min=1)
    return masked.sum(dim) / mask.sum(dim).clamp(min=1)


AGGREGATIONS = ("token_mean", "sequence_mean", "sum")


def aggregate_tokens(values: torch.Tensor, mask: torch.Tensor, aggregation: str) -> torch.Tensor:
    """Reduce per-token ``values`` ``[B, L]`` to a scalar.

    ``"token_mean"``: mean over every valid token of the batch (long responses weigh more, as in DAPO
    and TRL's default); ``"sequence_mean"``: mean over tokens within each sequence, then over
    sequences (the original GRPO paper); ``"sum"``: sum over valid tokens.
    """
    if aggregation == "token_mean":
        return masked_mean(values, mask)
    if aggregation == "sequence_mean":
        return masked_mean(values, mask, dim=-1).mean()
    if aggregation == "sum":
        return masked_sum(values, mask).sum()
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}.")


class LLMLossBase(TensorKeysMixin, nn.Module):
    """Base of the LLM losses: a policy wrapper under ``actor_network`` and renamable keys
    (``tensor_keys`` and ``set_keys``, from :class:`~tdict.nn.TensorKeysMixin`).

    The actor's own ``nn.Parameter`` s are the loss's parameters (no functional copies: LLM losses
    need no target networks), so ``torch.optim.AdamW(loss.parameters())`` trains the model.
    ``forward`` returns a TensorDict whose ``"loss_*"`` entries are the scalars to sum.
    """

    default_keys: ClassVar[Mapping[str, Any]] = {}
    # the documented contract (its ``keys`` name the entries it writes); only nn.Module is checked at runtime
    actor_network: TransformersWrapper
    # old key names still accepted by set_keys (with a DeprecationWarning): {old: current}
    deprecated_key_names: ClassVar[Mapping[str, str]] = {}

    def __init__(self, actor_network: nn.Module) -> None:
        super().__init__()
        if not isinstance(actor_network, nn.Module):
            raise TypeError(
                f"{type(self).__name__}: actor_network must be an nn.Module, got {type(actor_network).__name__}."
            )
        if getattr(actor_network, "generate", False):
            raise ValueError(
                f"{type(self).__name__}: actor_network must score given responses (TransformersWrapper(generate=False)), "
                "got a wrapper with generate=True."
            )
        self.actor_network = cast("TransformersWrapper", actor_network)

    def _get(self, tensordict: Any, name: str) -> torch.Tensor:
        key = getattr(self.tensor_keys, name)
        value = tensordict.get(key, None)
        if value is None:
            raise KeyError(
                f"{type(self).__name__}: the input lacks {key!r} ({name}); keys present: "
                f"{sorted(map(str, tensordict.keys(True, True)))}."
            )
        return value
