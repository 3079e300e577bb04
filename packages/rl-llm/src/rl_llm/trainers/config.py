"""TrainingConfig: the dataclass every trainer's config extends, loadable from YAML with overrides.

The fields and their defaults follow Hugging Face's ``TrainingArguments`` as TRL's configs use them
(``learning_rate``, ``per_device_train_batch_size``, ``gradient_accumulation_steps``,
``num_train_epochs``, ``max_steps``, ``lr_scheduler_type``, ``warmup_steps``/``warmup_ratio``,
``max_grad_norm``, ``logging_steps``, ``save_steps``, ``seed``, ...), so that a TRL config ports by
changing its import. A config is built in code, or from a YAML file plus ``key=value`` overrides
(what the ``rl-llm`` command does); every value is checked against the field's type, and an unknown
key is refused with the list of known ones.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import yaml
from tdict.validation import check_non_negative, check_one_of, check_positive_int

__all__ = ["OPTIMIZERS", "SCHEDULERS", "TrainingConfig"]

SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup")
OPTIMIZERS = ("adamw_torch_fused", "adamw_torch")


@dataclass
class TrainingConfig:
    """What every rl-llm trainer reads: optimisation, schedule, logging and checkpointing.

    Examples:
        >>> from rl_llm.trainers import TrainingConfig
        >>> cfg = TrainingConfig.from_overrides(["learning_rate=1e-4", "max_steps=10"])
        >>> cfg.learning_rate, cfg.max_steps, cfg.gradient_accumulation_steps
        (0.0001, 10, 1)
    """

    output_dir: str = "rl-llm-output"
    learning_rate: float = 5e-5
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    optim: str = "adamw_torch_fused"  # torch's AdamW, fused kernel (transformers' default on torch >= 2.8) or not
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    num_train_epochs: float = 3.0
    max_steps: int = -1  # > 0: stop after this many optimisation steps (overrides num_train_epochs)
    lr_scheduler_type: str = "linear"
    warmup_steps: int = 0
    warmup_ratio: float = 0.0  # used when warmup_steps is 0: this share of the total steps
    max_grad_norm: Optional[float] = 1.0  # None or 0: no clipping
    logging_steps: int = 10
    save_steps: int = 0  # > 0: write a checkpoint every this many steps (and at the end)
    seed: int = 42
    shuffle: bool = True
    bf16: bool = False  # autocast to bfloat16 (CUDA with bf16 support, or CPU)
    gradient_checkpointing: bool = True  # recompute activations in the backward pass (TRL's default)
    logprob_chunk_size: Optional[int] = None  # compute log-probs this many positions at a time (never the full logits)
    # run each micro-batch's sequences end to end, attention within each (rl_llm.padding_free): no compute on
    # padding; None: when the model supports it (attention through transformers' AttentionInterface; checked by a probe)
    padding_free: Optional[bool] = None
    disable_tqdm: bool = False
    report_to: list = field(default_factory=lambda: ["csv"])  # "csv" writes <output_dir>/metrics.csv

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Raise ``ValueError`` naming the field whose value is out of range."""
        name = type(self).__name__
        positive = ("per_device_train_batch_size", "gradient_accumulation_steps", "logging_steps")
        for key in positive:
            if getattr(self, key) < 1:
                raise ValueError(f"{name}: {key} must be >= 1, got {getattr(self, key)!r}.")
        check_non_negative(name, "learning_rate", self.learning_rate, finite=True)
        if self.num_train_epochs <= 0 and self.max_steps <= 0:
            raise ValueError(
                f"{name}: give num_train_epochs > 0 or max_steps > 0 (got {self.num_train_epochs!r} and {self.max_steps!r})."
            )
        check_one_of(name, "lr_scheduler_type", self.lr_scheduler_type, SCHEDULERS)
        if self.optim not in OPTIMIZERS:
            raise ValueError(
                f"{name}: optim must be one of {OPTIMIZERS} (or pass optimizers= to the trainer), got {self.optim!r}."
            )
        if self.warmup_steps < 0 or not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(
                f"{name}: warmup_steps must be >= 0 and warmup_ratio in [0, 1), got {self.warmup_steps!r} and {self.warmup_ratio!r}."
            )
        check_non_negative(name, "max_grad_norm", self.max_grad_norm, allow_none=True)
        check_positive_int(name, "logprob_chunk_size", self.logprob_chunk_size, allow_none=True)
        if self.save_steps < 0:
            raise ValueError(f"{name}: save_steps must be >= 0, got {self.save_steps!r}.")
        unknown = [r for r in self.report_to if r not in ("csv", "none")]
        if unknown:
            raise ValueError(
                f"{name}: report_to entries must be 'csv' or 'none' (pass logger objects to the trainer), got {unknown}."
            )

    # ------------------------------------------------------------------ building
    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainingConfig:
        """A config from a mapping; each value is converted to its field's type (``ValueError``
        names a key that is unknown or a value that does not fit)."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown option(s) {unknown}; known: {sorted(fields)}.")
        hints = typing.get_type_hints(cls)
        return cls(**{key: _convert(cls.__name__, key, value, hints[key]) for key, value in values.items()})

    @classmethod
    def from_overrides(cls, overrides: Sequence[str], base: Mapping[str, Any] | None = None) -> TrainingConfig:
        """A config from ``base`` (a mapping) updated by ``key=value`` strings (values parsed as YAML)."""
        values = dict(base or {})
        for item in overrides:
            key, sep, text = item.partition("=")
            if not sep or not key:
                raise ValueError(f"{cls.__name__}: an override must read key=value, got {item!r}.")
            values[key.strip()] = yaml.safe_load(text) if text.strip() else None
        return cls.from_dict(values)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: Sequence[str] = ()) -> TrainingConfig:
        """A config from a YAML file (a mapping of options), then ``key=value`` overrides."""
        with open(path, encoding="utf-8") as f:
            loaded = yaml.safe_load(f) or {}
        if not isinstance(loaded, Mapping):
            raise ValueError(f"{cls.__name__}: {path} must hold a mapping of options, got {type(loaded).__name__}.")
        return cls.from_overrides(overrides, base=loaded)

    def to_dict(self) -> dict[str, Any]:
        """The fields and their values as a plain dict (``dataclasses.asdict``)."""
        return dataclasses.asdict(self)


def _convert(owner: str, key: str, value: Any, hint: Any) -> Any:
    """``value`` as the type ``hint`` names (int, float, bool, str, list, Optional[...])."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        hint = args[0] if len(args) == 1 else Any
        origin = typing.get_origin(hint)
    if hint is Any:
        return value
    target = origin or hint
    if target is bool:
        if isinstance(value, bool):
            return value
    elif target is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif target is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML reads 1e-5 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif target is str:
        if isinstance(value, str):
            return value
    elif target in (list, tuple):
        if isinstance(value, (list, tuple)):
            return list(value)
        if isinstance(value, str):
            return [value]
    elif target is dict:
        if isinstance(value, Mapping):
            return dict(value)
    else:
        return value
    raise ValueError(f"{owner}: option {key!r} expects {getattr(hint, '__name__', hint)}, got {value!r}.")
