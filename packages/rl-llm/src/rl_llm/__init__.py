"""LLM post-training on rl-tdict: a causal-LM policy wrapper, prompt/response batching, GRPO/SFT/DPO
losses and their trainers (TRL's names: ``from rl_llm import GRPOConfig, GRPOTrainer``).

It imports only ``tdict`` (distribution ``rl-tdict``), torch, transformers (and safetensors, PyYAML
and tqdm, which transformers installs too) and the standard library, never a sibling ``rl_*``
package; peft and datasets are optional and imported lazily.
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
from .trainers import DPOConfig, DPOTrainer, GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

__all__ = [
    "DPOConfig",
    "DPOLoss",
    "DPOTrainer",
    "GRPOConfig",
    "GRPOLoss",
    "GRPOTrainer",
    "MCAdvantage",
    "SFTConfig",
    "SFTLoss",
    "SFTTrainer",
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
