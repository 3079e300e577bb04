"""LLM post-training on rl-tdict: a causal-LM policy wrapper, prompt/response batching, GRPO/SFT/DPO.

It imports only ``tdict`` (distribution ``rl-tdict``), torch, transformers and the standard library,
never a sibling ``rl_*`` package.
"""

__version__ = "0.1.0"

from . import data
from .data import (
    make_preference_batch,
    repeat_prompts,
    tokenize_pairs,
    tokenize_prompts,
)
from .losses import (
    DPOLoss,
    GRPOLoss,
    MCAdvantage,
    SFTLoss,
    group_advantages,
    response_log_probs,
)
from .modules import TransformersWrapper

__all__ = [
    "DPOLoss",
    "GRPOLoss",
    "MCAdvantage",
    "SFTLoss",
    "TransformersWrapper",
    "__version__",
    "data",
    "group_advantages",
    "make_preference_batch",
    "repeat_prompts",
    "response_log_probs",
    "tokenize_pairs",
    "tokenize_prompts",
]
