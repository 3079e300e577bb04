"""rl-llm's trainers: one config dataclass and one trainer per algorithm, TRL's call shapes.

``SFTTrainer(model, args=SFTConfig(...), train_dataset=..., processing_class=tokenizer).train()``;
each trainer's ``.step()`` runs one optimisation step and returns its metrics. Configs load from
YAML with ``key=value`` overrides (``SFTConfig.from_yaml(path, ["learning_rate=1e-4"])``), which is
what the ``rl-llm`` command does.
"""

from .base import CSVMetrics, LLMTrainer, lr_lambda
from .config import TrainingConfig
from .dpo import DPOConfig, DPOTrainer, dpo_losses, tokenize_preference_row
from .grpo import GRPOConfig, GRPOTrainer, grpo_advantages, grpo_token_losses
from .reference import Reference, disable_dropout, sync_reference
from .sft import SFTConfig, SFTTrainer, pack_best_fit, tokenize_sft_row

__all__ = [
    "CSVMetrics",
    "DPOConfig",
    "DPOTrainer",
    "GRPOConfig",
    "GRPOTrainer",
    "LLMTrainer",
    "Reference",
    "SFTConfig",
    "SFTTrainer",
    "TrainingConfig",
    "disable_dropout",
    "dpo_losses",
    "grpo_advantages",
    "grpo_token_losses",
    "lr_lambda",
    "pack_best_fit",
    "sync_reference",
    "tokenize_preference_row",
    "tokenize_sft_row",
]
