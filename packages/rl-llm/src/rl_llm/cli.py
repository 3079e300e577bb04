"""The ``rl-llm`` command: ``rl-llm sft|dpo|grpo --config FILE [key=value ...]``.

The YAML file (and the overrides) hold the trainer's config options plus what the command loads:

- ``model_name_or_path`` (required): a folder saved with ``save_pretrained`` (or a Hub name, when
  the Hub is reachable);
- ``tokenizer_name_or_path``: default ``model_name_or_path``;
- ``dataset``: a ``.jsonl``/``.json``/``.parquet`` file, or a ``datasets`` name (``dataset_config``,
  ``dataset_split``, default ``"train"``);
- ``reward_funcs`` (GRPO): a list whose entries are built-in rewards of :mod:`rl_llm.rewards` given
  as a mapping (``{name: numeric_match, answer_column: answer}``: the factory called with the other
  keys) or ``"module:function"`` paths of your own reward functions.

At the end the trained model and its tokenizer are saved to ``output_dir`` (safetensors weights).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from .trainers import DPOConfig, DPOTrainer, GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

__all__ = ["main"]

TRAINERS = {"dpo": (DPOConfig, DPOTrainer), "grpo": (GRPOConfig, GRPOTrainer), "sft": (SFTConfig, SFTTrainer)}
RUN_KEYS = (
    "model_name_or_path",
    "tokenizer_name_or_path",
    "dataset",
    "dataset_config",
    "dataset_split",
    "reward_funcs",
)
BUILT_IN_REWARDS = ("exact_match", "numeric_match", "format_reward", "length_penalty", "overlong_penalty")


def _options(config_file: str | None, overrides: Sequence[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if config_file is not None:
        with open(config_file, encoding="utf-8") as f:
            loaded = yaml.safe_load(f) or {}
        if not isinstance(loaded, dict):
            raise SystemExit(f"rl-llm: {config_file} must hold a mapping of options, got {type(loaded).__name__}.")
        options.update(loaded)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"rl-llm: an override must read key=value, got {item!r}.")
        options[key.strip()] = yaml.safe_load(text) if text.strip() else None
    return options


def _dataset(options: dict[str, Any]) -> Any:
    source = options.get("dataset")
    if source is None:
        raise SystemExit("rl-llm: set dataset=<file or datasets name> (in the config file or as an override).")
    if Path(str(source)).suffix.lower() in (".jsonl", ".json", ".parquet"):
        return str(source)
    try:
        import datasets
    except ImportError:
        raise SystemExit(
            f"rl-llm: dataset={source!r} is not a .jsonl/.json/.parquet file, and loading it by name needs "
            "the datasets library (pip install 'rl-llm[data]')."
        ) from None
    return datasets.load_dataset(
        str(source), options.get("dataset_config"), split=options.get("dataset_split") or "train"
    )


def _reward_funcs(spec: Any) -> list:
    if not spec:
        raise SystemExit("rl-llm grpo: set reward_funcs (a list of built-in rewards or module:function paths).")
    from . import rewards

    out = []
    for entry in spec if isinstance(spec, list) else [spec]:
        if isinstance(entry, dict):
            kwargs = dict(entry)
            name = kwargs.pop("name", None)
            if name not in BUILT_IN_REWARDS:
                raise SystemExit(
                    f"rl-llm: reward {name!r} is not built in; built-in: {list(BUILT_IN_REWARDS)} (or give 'module:function')."
                )
            out.append(getattr(rewards, name)(**kwargs))
        elif isinstance(entry, str) and ":" in entry:
            module_name, _, attr = entry.partition(":")
            try:
                out.append(getattr(importlib.import_module(module_name), attr))
            except (ImportError, AttributeError) as err:
                raise SystemExit(f"rl-llm: cannot load reward {entry!r}: {err}") from None
        else:
            raise SystemExit(
                f"rl-llm: a reward_funcs entry must be a mapping with 'name' or a 'module:function' path, got {entry!r}."
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """The ``rl-llm`` command: ``rl-llm {sft,dpo,grpo} [--config FILE] [key=value ...]``.

    Builds the trainer's config from the YAML file and the overrides, loads the model and tokenizer
    (``model_name_or_path``), trains, saves both to ``output_dir`` and returns 0.

    Raises:
        SystemExit: ``model_name_or_path`` is missing or an option is invalid.
    """
    parser = argparse.ArgumentParser(prog="rl-llm", description="Fine-tune a causal language model.")
    parser.add_argument("trainer", choices=sorted(TRAINERS), help="the algorithm")
    parser.add_argument("--config", help="a YAML file of options")
    parser.add_argument("overrides", nargs="*", help="key=value options (override the file's)")
    args = parser.parse_intermixed_args(argv)
    options = _options(args.config, args.overrides)
    run = {key: options.pop(key) for key in RUN_KEYS if key in options}
    if "model_name_or_path" not in run:
        raise SystemExit("rl-llm: set model_name_or_path=<folder> (in the config file or as an override).")
    config_class, trainer_class = TRAINERS[args.trainer]
    try:
        config = config_class.from_dict(options)
    except ValueError as err:
        raise SystemExit(f"rl-llm: {err}") from None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run.get("tokenizer_name_or_path") or run["model_name_or_path"])
    model = AutoModelForCausalLM.from_pretrained(run["model_name_or_path"])
    extra = {"reward_funcs": _reward_funcs(run.get("reward_funcs"))} if args.trainer == "grpo" else {}
    trainer = trainer_class(model, args=config, train_dataset=_dataset(run), processing_class=tokenizer, **extra)
    metrics = trainer.train()
    model.save_pretrained(config.output_dir)
    tokenizer.save_pretrained(config.output_dir)
    shown = ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
    print(f"rl-llm {args.trainer}: {trainer.global_step} steps; last step {shown}; model saved to {config.output_dir}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
