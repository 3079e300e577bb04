"""SFTLoss: supervised fine-tuning, the masked negative log-likelihood of the response tokens only."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict import TensorDict
from torch import nn

from ..data import PROMPT_TEXT, RESPONSE_MASK, RESPONSE_TEXT, get_texts, tokenize_pairs
from ._logprobs import LLMLossBase, masked_mean, masked_sum

__all__ = ["SFTLoss", "sft_loss"]


def sft_loss(log_probs: torch.Tensor, mask: torch.Tensor, normalize_by_seq_length: bool = True) -> torch.Tensor:
    """Mean over sequences of the response NLL: per-token mean (``normalize_by_seq_length``) or sum.

    ``log_probs`` and ``mask``: ``[B, L]``; prompt tokens are not in ``log_probs`` at all, so only
    the response (assistant) tokens are trained.
    """
    if normalize_by_seq_length:
        return -masked_mean(log_probs, mask, dim=-1).mean()
    return -masked_sum(log_probs, mask).mean()


class SFTLoss(LLMLossBase):
    """Negative log-likelihood of the response (assistant) tokens given the prompt.

    Args:
        actor_network: a :class:`~rl_llm.TransformersWrapper` with ``generate=False``.

    Keyword Args:
        tokenizer: when given and the input has text but no tokens (``("text", "prompt")`` and
            ``("text", "response")``), the pairs are tokenized with
            :func:`~rl_llm.data.tokenize_pairs` (an EOS appended to each response) first.
        loss_function: ``"sft"`` (the only one here; TorchRL's ``"minor_sft"`` is not provided).
        normalize_by_seq_length: True: each sequence's NLL is averaged over its response tokens,
            then over sequences; False: summed over tokens, averaged over sequences.

    Returns a TensorDict with ``loss_sft`` and ``nll_per_token`` (detached, mean over all valid tokens).

    Examples:
        >>> import torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> from tdict import TensorDict
        >>> from rl_llm import SFTLoss, TransformersWrapper
        >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=11,
        ...                                    bos_token_id=1, eos_token_id=1, pad_token_id=0))
        >>> td = TensorDict({("tokens", "prompt"): torch.tensor([[5, 6]]),
        ...                  ("masks", "prompt_attention_mask"): torch.tensor([[True, True]]),
        ...                  ("tokens", "response"): torch.tensor([[7, 8, 0]]),
        ...                  ("masks", "response_mask"): torch.tensor([[True, True, False]])}, batch_size=[1])
        >>> out = SFTLoss(TransformersWrapper(model, generate=False))(td)
        >>> out["loss_sft"].backward()
        >>> bool(out["loss_sft"] > 0)
        True
    """

    default_keys: ClassVar[dict[str, Any]] = {
        "response_mask": RESPONSE_MASK,
        "prompt_text": PROMPT_TEXT,
        "response_text": RESPONSE_TEXT,
    }

    def __init__(
        self,
        actor_network: nn.Module,
        *,
        tokenizer: Any = None,
        loss_function: str = "sft",
        normalize_by_seq_length: bool = True,
    ) -> None:
        super().__init__(actor_network)
        if loss_function != "sft":
            raise ValueError(f"SFTLoss: loss_function must be 'sft' (the only one implemented), got {loss_function!r}.")
        self.tokenizer = tokenizer
        self.loss_function = loss_function
        self.normalize_by_seq_length = bool(normalize_by_seq_length)

    def _tokenized(self, tensordict: TensorDict) -> TensorDict:
        keys = self.actor_network.keys
        has_tokens = tensordict.get(keys["response_tokens"], None) is not None
        if has_tokens or self.tokenizer is None or getattr(self.actor_network, "input_mode", "tokens") == "text":
            return tensordict
        prompts = get_texts(tensordict, self.tensor_keys.prompt_text)
        responses = get_texts(tensordict, self.tensor_keys.response_text)
        if prompts is None or responses is None:
            return tensordict  # the actor then names what is missing
        return tokenize_pairs(prompts, responses, self.tokenizer)

    def forward(self, tensordict: TensorDict) -> TensorDict:
        tensordict = self._tokenized(tensordict)
        if tensordict.batch_dims != 1:
            tensordict = tensordict.reshape(-1)
        out = self.actor_network(tensordict.copy())
        keys = self.actor_network.keys
        log_probs = out.get(keys["log_probs"])
        mask = out.get(keys["response_mask"]).bool()
        loss = sft_loss(log_probs, mask, self.normalize_by_seq_length)
        return TensorDict({"loss_sft": loss, "nll_per_token": -masked_mean(log_probs.detach(), mask)}, batch_size=[])
