"""LLMTrainer: what the SFT, DPO and GRPO trainers share — the optimizer and its schedule, the data
order, exact gradient accumulation, logging, checkpoints and the training loop.

A subclass implements :meth:`LLMTrainer.step` (one optimisation step, returning its metrics) on top of
:meth:`LLMTrainer._next_rows` (the next rows of the dataset, epoch after epoch, shuffled) and
:meth:`LLMTrainer._apply_gradients` (clip, step, schedule); :meth:`train` runs steps until the
budget, with logging, a progress bar and checkpoints, resuming from a checkpoint when asked.

Data order: epoch ``e`` visits the rows in ``torch.randperm`` drawn from a generator seeded with
``seed + e`` (or in file order with ``shuffle=False``); the position in that order is saved in the
checkpoint, so a resumed run sees the same rows as an uninterrupted one.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from tdict.seeding import seed_everything
from torch import nn

from ..data_files import load_rows
from ..padding_free import padding_free_attention, padding_free_works, supports_padding_free
from . import checkpoint as ckpt
from .config import TrainingConfig

__all__ = ["CSVMetrics", "LLMTrainer", "lr_lambda"]


def lr_lambda(kind: str, warmup: int, total: int) -> Callable[[int], float]:
    """The learning-rate factor at each step: linear warm-up over ``warmup`` steps, then ``kind``
    (``"linear"`` to 0 at ``total``, ``"cosine"`` to 0 at ``total``, ``"constant"`` /
    ``"constant_with_warmup"``: 1), as transformers' schedulers of those names.

    Examples:
        >>> from rl_llm.trainers import lr_lambda
        >>> f = lr_lambda("linear", 2, 10)
        >>> [round(f(s), 3) for s in (0, 1, 2, 6, 10)]
        [0.0, 0.5, 1.0, 0.5, 0.0]
    """

    def factor(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup)
        if kind in ("constant", "constant_with_warmup"):
            return 1.0
        progress = (step - warmup) / max(1, total - warmup)
        if kind == "linear":
            return max(0.0, 1.0 - progress)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))

    return factor


class CSVMetrics:
    """Appends ``step,name,value`` lines to a CSV file (a header first), flushed after each call."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._file = open(self.path, "a", newline="", encoding="utf-8")
        self._writer = csv.writer(self._file)
        if new:
            self._writer.writerow(["step", "name", "value"])

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Appends one ``step,name,value`` line and flushes the file."""
        self._writer.writerow([step, name, repr(float(value))])
        self._file.flush()

    def close(self) -> None:
        """Closes the file."""
        self._file.close()


class LLMTrainer:
    """Base of the rl-llm trainers (see the module docstring).

    Args:
        model: a Hugging Face causal LM (``PreTrainedModel``), in memory.
        args: the trainer's config (a :class:`~rl_llm.trainers.TrainingConfig` subclass); default:
            the subclass's config with its defaults.
        train_dataset: rows (see :func:`rl_llm.data_files.load_rows`: a ``datasets`` object, a JSONL
            or Parquet path, or a list of dicts).
        processing_class: the tokenizer.
        loggers: objects with ``log_scalar(name, value, step)`` (e.g. the loggers of
            ``rl_objectives.trainers``); a CSV file is written too when ``"csv"`` is in ``args.report_to``.
        optimizers: ``(optimizer, scheduler)``; ``None`` for either builds the default (AdamW over the
            trainable parameters; the schedule of ``args``).
        peft_config: a ``peft`` config (e.g. ``LoraConfig``; needs ``pip install rl-llm[peft]``): the
            model is wrapped with ``get_peft_model`` and only the adapter's parameters are trained
            (and checkpointed).
    """

    config_class: type[TrainingConfig] = TrainingConfig

    def __init__(
        self,
        model: nn.Module,
        args: TrainingConfig | None = None,
        train_dataset: Any = None,
        processing_class: Any = None,
        *,
        loggers: Sequence[Any] = (),
        optimizers: tuple = (None, None),
        peft_config: Any = None,
    ) -> None:
        name = type(self).__name__
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"{name}: model must be a loaded transformers model (an nn.Module), got {type(model).__name__}; "
                "load it first, e.g. AutoModelForCausalLM.from_pretrained(path)."
            )
        args = self.config_class() if args is None else args
        if not isinstance(args, self.config_class):
            raise TypeError(f"{name}: args must be a {self.config_class.__name__}, got {type(args).__name__}.")
        if train_dataset is None:
            raise ValueError(f"{name}: train_dataset is required.")
        bad = [lg for lg in loggers if not callable(getattr(lg, "log_scalar", None))]
        if bad:
            raise TypeError(
                f"{name}: loggers need a log_scalar(name, value, step) method; {type(bad[0]).__name__} has none."
            )
        if peft_config is not None:
            try:
                from peft import get_peft_model
            except ImportError:
                raise ImportError(f"{name}: peft_config needs the peft library (pip install 'rl-llm[peft]').") from None
            model = get_peft_model(model, peft_config)
        self.args = args
        self.model = model
        self.processing_class = processing_class
        self.rows = load_rows(train_dataset)
        self.loggers = list(loggers)
        if "csv" in args.report_to:
            self.loggers.append(CSVMetrics(Path(args.output_dir) / "metrics.csv"))
        self.global_step = 0
        self._epoch, self._position = 0, 0  # the data order's epoch and the next index within it
        self._order: list[int] | None = None
        if args.gradient_checkpointing:
            # transformers 5 renamed it activation checkpointing; 4.x has only the old name
            enable = getattr(model, "activation_checkpointing_enable", None) or getattr(
                model, "gradient_checkpointing_enable", None
            )
            if enable is None:
                raise ValueError(
                    f"{name}: gradient_checkpointing=True but {type(model).__name__} cannot checkpoint activations."
                )
            enable()
            if hasattr(model, "config"):
                model.config.use_cache = False  # pyright: ignore[reportAttributeAccessIssue, reportArgumentType]  # a transformers config
        if args.padding_free and not supports_padding_free(model):
            raise ValueError(
                f"{name}: padding_free=True but {type(model).__name__} does not dispatch its attention through "
                "transformers' AttentionInterface; set padding_free=False (or leave it None)."
            )
        # None: padding-free when a probe forward shows the model runs it
        self.padding_free = padding_free_works(model) if args.padding_free is None else args.padding_free
        seed_everything(args.seed)  # the trainer is the program's entry point: it owns the global generators
        optimizer, scheduler = optimizers
        params = [p for p in model.parameters() if p.requires_grad]
        if not params and optimizer is None:
            raise ValueError(f"{name}: the model has no trainable parameters.")
        # the fused kernel needs floating-point parameters on CPU or CUDA
        fused = args.optim == "adamw_torch_fused" and all(
            p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params
        )
        self.optimizer = optimizer or torch.optim.AdamW(
            params,
            lr=args.learning_rate,
            betas=(args.adam_beta1, args.adam_beta2),
            eps=args.adam_epsilon,
            weight_decay=args.weight_decay,
            **({"fused": True} if fused else {}),
        )
        self.total_steps = self._total_steps()
        warmup = args.warmup_steps or math.ceil(args.warmup_ratio * self.total_steps)
        self.scheduler = scheduler or torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(args.lr_scheduler_type, warmup, self.total_steps)
        )
        self._last_metrics: dict[str, float] = {}

    # ------------------------------------------------------------------ budget and data order
    def rows_per_step(self) -> int:
        """Dataset rows one optimisation step consumes."""
        return self.args.per_device_train_batch_size * self.args.gradient_accumulation_steps

    def _num_units(self) -> int:
        """How many items the data order runs over (dataset rows; SFT's packed rows when packing)."""
        return len(self.rows)

    def _total_steps(self) -> int:
        if self.args.max_steps > 0:
            return self.args.max_steps
        return max(1, math.ceil(self.args.num_train_epochs * self._num_units() / self.rows_per_step()))

    def _epoch_order(self, epoch: int) -> list[int]:
        if not self.args.shuffle:
            return list(range(self._num_units()))
        generator = torch.Generator().manual_seed(self.args.seed + epoch)
        return torch.randperm(self._num_units(), generator=generator).tolist()

    def _next_indices(self, count: int) -> list[int]:
        """The next ``count`` row indices in the data order (crossing into the next epoch as needed)."""
        out = []
        while len(out) < count:
            if self._order is None:
                self._order = self._epoch_order(self._epoch)
            take = self._order[self._position : self._position + count - len(out)]
            out += take
            self._position += len(take)
            if self._position >= len(self._order):
                self._epoch, self._position, self._order = self._epoch + 1, 0, None
        return out

    def _next_rows(self, count: int) -> list[Any]:
        return [self.rows[i] for i in self._next_indices(count)]

    # ------------------------------------------------------------------ one step
    def step(self) -> dict[str, float]:  # pragma: no cover - abstract
        """Run one optimisation step and return its metrics (at least ``"loss"``)."""
        raise NotImplementedError

    def _autocast(self) -> Any:
        if not self.args.bf16:
            return nullcontext()
        device = next(self.model.parameters()).device
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise RuntimeError(f"{type(self).__name__}: bf16=True but this CUDA device has no bfloat16 support.")
        return torch.autocast(device.type, dtype=torch.bfloat16)

    def _padding_free_block(self) -> Any:
        """The model switched to padding-free attention for a forward and its backward (when
        ``padding_free``): activation checkpointing recomputes the forward during the backward."""
        return padding_free_attention(self.model) if self.padding_free else nullcontext()

    def _apply_gradients(self) -> float:
        """Clip (``max_grad_norm``), step the optimizer and the schedule, clear the gradients.
        Returns the gradient norm before clipping."""
        params = [p for group in self.optimizer.param_groups for p in group["params"] if p.grad is not None]
        clip = self.args.max_grad_norm
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip else float("inf")) if params else torch.zeros(())
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.global_step += 1
        return float(norm)

    # ------------------------------------------------------------------ loop
    def log(self, metrics: dict[str, float]) -> None:
        """Sends each metric to every logger as ``train/<name>`` at the current step."""
        for logger in self.loggers:
            for key, value in metrics.items():
                logger.log_scalar(f"train/{key}", float(value), step=self.global_step)

    def train(self, resume_from_checkpoint: bool | str | None = None) -> dict[str, float]:
        """Run steps until ``total_steps``; returns the last step's metrics.

        ``resume_from_checkpoint``: a checkpoint folder, or ``True`` for the latest one under
        ``output_dir`` (nothing to resume from raises ``FileNotFoundError``).
        """
        if resume_from_checkpoint:
            folder = (
                ckpt.latest_checkpoint(self.args.output_dir)
                if resume_from_checkpoint is True
                else resume_from_checkpoint
            )
            if folder is None:
                raise FileNotFoundError(
                    f"{type(self).__name__}.train: no checkpoint under {self.args.output_dir} to resume from."
                )
            self.load_checkpoint(folder)
        for logger in self.loggers:  # the run's config, to loggers that record hyper-parameters
            if callable(getattr(logger, "log_hparams", None)):
                logger.log_hparams(self.args.to_dict())
        bar = self._progress_bar()
        metrics: dict[str, float] = {}
        try:
            while self.global_step < self.total_steps:
                metrics = self.step()
                self._last_metrics = metrics
                if self.global_step % self.args.logging_steps == 0 or self.global_step == self.total_steps:
                    self.log({**metrics, "learning_rate": float(self.scheduler.get_last_lr()[0])})
                if self.args.save_steps and (
                    self.global_step % self.args.save_steps == 0 or self.global_step == self.total_steps
                ):
                    self.save_checkpoint()
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix({k: f"{v:.4g}" for k, v in metrics.items() if k in ("loss", "reward")})
        finally:
            if bar is not None:
                bar.close()
        return metrics

    def _progress_bar(self) -> Any:
        if self.args.disable_tqdm:
            return None
        from tqdm.auto import tqdm

        return tqdm(total=self.total_steps, initial=self.global_step, desc=type(self).__name__, dynamic_ncols=True)

    # ------------------------------------------------------------------ checkpoints
    def _model_tensors(self) -> dict[str, torch.Tensor]:
        """The tensors a checkpoint stores for the model: every trainable parameter (by name)."""
        return {name: p for name, p in self.model.named_parameters() if p.requires_grad}

    def _trainer_state(self) -> dict[str, Any]:
        return {
            "global_step": self.global_step,
            "epoch": self._epoch,
            "position": self._position,
            "scheduler": self.scheduler.state_dict(),
            "config": self.args.to_dict(),
            "python_random": _random_state(),
        }

    def save_checkpoint(self, folder: str | Path | None = None) -> Path:
        """Write a checkpoint (default ``<output_dir>/checkpoint-<step>``); see :mod:`.checkpoint`."""
        folder = Path(folder) if folder is not None else Path(self.args.output_dir) / f"{ckpt.PREFIX}{self.global_step}"
        rng = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            for i, state in enumerate(torch.cuda.get_rng_state_all()):
                rng[f"cuda{i}"] = state
        return ckpt.write_checkpoint(
            folder, model_tensors=self._model_tensors(), optimizer=self.optimizer, rng=rng, state=self._trainer_state()
        )

    def load_checkpoint(self, folder: str | Path) -> None:
        """Restore weights, optimizer, schedule, RNG and data position from a checkpoint folder."""
        parts = ckpt.read_checkpoint(folder)
        own = dict(self.model.named_parameters())
        missing = sorted(set(self._model_tensors()) - set(parts["model"]))
        if missing:
            raise KeyError(f"{type(self).__name__}.load_checkpoint: {folder} lacks weights for {missing[:5]}.")
        with torch.no_grad():
            for key, value in parts["model"].items():
                if key not in own:
                    raise KeyError(
                        f"{type(self).__name__}.load_checkpoint: {folder} holds {key!r}, which the model does not have."
                    )
                own[key].copy_(value)
        self.optimizer.load_state_dict(parts["optimizer"])
        state = parts["state"]
        self.scheduler.load_state_dict(state["scheduler"])
        self.global_step, self._epoch, self._position = state["global_step"], state["epoch"], state["position"]
        self._order = None if self._position == 0 else self._epoch_order(self._epoch)
        torch.set_rng_state(parts["rng"]["torch"])
        for key, value in parts["rng"].items():
            if key.startswith("cuda") and torch.cuda.is_available():
                torch.cuda.set_rng_state(value, int(key[4:]))
        _set_random_state(state["python_random"])


def _random_state() -> list:
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def _set_random_state(value: list) -> None:
    version, internal, gauss = value
    random.setstate((version, tuple(internal), gauss))
