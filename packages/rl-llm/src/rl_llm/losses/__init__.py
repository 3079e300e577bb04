"""LLM losses: GRPO (+ group advantages), SFT, DPO, and the shared log-prob pass."""

from ._logprobs import (
    LLMLossBase,
    aggregate_tokens,
    masked_mean,
    masked_sum,
    response_log_probs,
    sequence_log_probs,
)
from .chunked import lm_hidden_and_head, token_log_probs_chunked
from .dpo import DPOLoss, dpo_loss
from .grpo import GRPOLoss, MCAdvantage, group_advantages, grpo_token_loss
from .sft import SFTLoss, sft_loss

__all__ = [
    "DPOLoss",
    "GRPOLoss",
    "LLMLossBase",
    "MCAdvantage",
    "SFTLoss",
    "aggregate_tokens",
    "dpo_loss",
    "group_advantages",
    "grpo_token_loss",
    "lm_hidden_and_head",
    "masked_mean",
    "masked_sum",
    "response_log_probs",
    "sequence_log_probs",
    "sft_loss",
    "token_log_probs_chunked",
]
