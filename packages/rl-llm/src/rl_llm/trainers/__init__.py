"""rl-llm's trainers: one config dataclass and one trainer per algorithm, TRL's call shapes.

``SFTTrainer(model, args=SFTConfig(...), train_dataset=..., processing_class=tokenizer).train()``;
each trainer's ``.step()`` runs one optimisation step and returns its metrics. Configs load from
YAML with ``key=value`` overrides (``SFTConfig.from_yaml(path, ["learning_rate=1e-4"])``), which is
what the ``rl-llm`` command does.
"""

from .base import CSVMetrics, LLMTrainer, lr_lambda
from .config import TrainingConfig
from .sft import SFTConfig, SFTTrainer, tokenize_sft_row

__all__ = ["CSVMetrics", "LLMTrainer", "SFTConfig", "SFTTrainer", "TrainingConfig", "lr_lambda", "tokenize_sft_row"]
