"""DPOTrainer: direct preference optimisation on (prompt, chosen, rejected) rows (TRL's API).

Rows: ``prompt``, ``chosen``, ``rejected`` as strings (an EOS is appended to each answer) or as
message lists (the prompt rendered with the chat template and its generation prompt, each answer
rendered as what follows it); conversational rows without a ``prompt`` column take the messages
that ``chosen`` and ``rejected`` share as the prompt. Prompts longer than ``max_prompt_length``
keep their last tokens; answers are cut so that prompt + answer fits ``max_length``.

Each step scores chosen and rejected answers in one forward pass of the policy (and one of the
reference, or reads the reference log-probs computed once at the start with
``precompute_ref_log_probs``) and minimises the mean over pairs of the chosen ``loss_type``:

- ``"sigmoid"``: ``-(1 - ls) log s(beta z) - ls log s(-beta z)`` with
  ``z = (pi_c - ref_c) - (pi_r - ref_r)`` on summed log-probs (``ls``: ``label_smoothing``);
- ``"ipo"``: ``(z - 1 / (2 beta))^2`` on log-probs averaged over each answer's tokens (Azar et al.);
- ``"hinge"``: ``relu(1 - beta z)`` (SLiC).

Gradient accumulation is exact: each micro-batch's summed loss is divided by the step's pair count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch
from tdict.validation import check_one_of, check_positive
from torch.nn import functional as F

from ..chat import render_chat
from ..data import left_pad, right_pad
from ..data_files import dataset_format, is_conversational
from ..losses._logprobs import response_log_probs
from .base import LLMTrainer
from .config import TrainingConfig
from .reference import Reference, disable_dropout, sync_reference

__all__ = ["DPOConfig", "DPOTrainer", "dpo_losses", "tokenize_preference_row"]

LOSS_TYPES = ("sigmoid", "ipo", "hinge")


@dataclass
class DPOConfig(TrainingConfig):
    """:class:`~rl_llm.trainers.TrainingConfig` plus DPO's options (TRL's ``DPOConfig`` names)."""

    learning_rate: float = 1e-6
    beta: float = 0.1
    loss_type: str = "sigmoid"
    label_smoothing: float = 0.0
    max_prompt_length: Optional[int] = 512
    max_length: Optional[int] = 1024
    precompute_ref_log_probs: bool = False
    sync_ref_model: bool = False
    ref_model_sync_steps: int = 512
    ref_model_mixup_alpha: float = 0.6
    disable_dropout: bool = True
    chat_template: Optional[str] = None

    def validate(self) -> None:
        super().validate()
        check_positive("DPOConfig", "beta", self.beta)
        check_one_of("DPOConfig", "loss_type", self.loss_type, LOSS_TYPES)
        if not 0.0 <= self.label_smoothing < 0.5:
            raise ValueError(f"DPOConfig: label_smoothing must be in [0, 0.5), got {self.label_smoothing!r}.")
        if self.max_prompt_length is not None and self.max_prompt_length < 1:
            raise ValueError(f"DPOConfig: max_prompt_length must be >= 1 or None, got {self.max_prompt_length!r}.")
        if (
            self.max_length is not None
            and self.max_prompt_length is not None
            and self.max_length <= self.max_prompt_length
        ):
            raise ValueError(
                f"DPOConfig: max_length ({self.max_length}) must exceed max_prompt_length ({self.max_prompt_length})."
            )
        if self.ref_model_sync_steps < 1 or not 0.0 < self.ref_model_mixup_alpha <= 1.0:
            raise ValueError("DPOConfig: ref_model_sync_steps must be >= 1 and ref_model_mixup_alpha in (0, 1].")


def dpo_losses(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    *,
    beta: float,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Per-pair DPO losses from the answers' log-probs (all ``[B]``; see the module docstring).

    Examples:
        >>> import torch
        >>> from rl_llm.trainers import dpo_losses
        >>> z = torch.tensor([0.0])
        >>> float(dpo_losses(z, z, z, z, beta=0.1))  # log 2 at equal margins
        0.6931...
    """
    z = (chosen - ref_chosen) - (rejected - ref_rejected)
    if loss_type == "sigmoid":
        return -(1.0 - label_smoothing) * F.logsigmoid(beta * z) - label_smoothing * F.logsigmoid(-beta * z)
    if loss_type == "ipo":
        return (z - 1.0 / (2.0 * beta)) ** 2
    if loss_type == "hinge":
        return torch.relu(1.0 - beta * z)
    raise ValueError(f"dpo_losses: loss_type must be one of {LOSS_TYPES}, got {loss_type!r}.")


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def tokenize_preference_row(
    row: Mapping[str, Any], tokenizer: Any, args: DPOConfig
) -> tuple[list[int], list[int], list[int]]:
    """``(prompt ids, chosen ids, rejected ids)`` of one row, truncated (see the module docstring)."""
    if dataset_format(row) != "preference":
        raise ValueError(f"DPOTrainer: rows need 'prompt', 'chosen' and 'rejected'; got columns {sorted(row)}.")
    chosen, rejected = row["chosen"], row["rejected"]
    prompt = row.get("prompt")
    if prompt is None:
        if not (is_conversational(chosen) and is_conversational(rejected)):
            raise ValueError(
                "DPOTrainer: rows without 'prompt' must hold conversations in 'chosen' and 'rejected' (their shared first messages are the prompt)."
            )
        shared = 0
        while shared < min(len(chosen), len(rejected)) - 1 and chosen[shared] == rejected[shared]:
            shared += 1
        if shared == 0:
            raise ValueError("DPOTrainer: 'chosen' and 'rejected' share no first message to take as the prompt.")
        prompt, chosen, rejected = list(chosen[:shared]), list(chosen[shared:]), list(rejected[shared:])
    eos = getattr(tokenizer, "eos_token_id", None)
    if is_conversational(prompt):
        if not (is_conversational(chosen) and is_conversational(rejected)):
            raise ValueError(
                "DPOTrainer: with a conversational prompt, 'chosen' and 'rejected' must be message lists too."
            )
        head = render_chat(prompt, tokenizer, chat_template=args.chat_template, add_generation_prompt=True)
        answers = []
        for answer in (chosen, rejected):
            full = render_chat(list(prompt) + list(answer), tokenizer, chat_template=args.chat_template)
            if not full.startswith(head):
                raise ValueError(
                    "DPOTrainer: the chat template renders the prompt differently once an answer is added."
                )
            answers.append(_encode(tokenizer, full[len(head) :]))
        prompt_ids = _encode(tokenizer, head)
    else:
        if not (isinstance(prompt, str) and isinstance(chosen, str) and isinstance(rejected, str)):
            raise ValueError(
                "DPOTrainer: 'prompt', 'chosen' and 'rejected' must all be strings or all be message lists."
            )
        prompt_ids = _encode(tokenizer, prompt)
        answers = [_encode(tokenizer, a) + ([eos] if eos is not None else []) for a in (chosen, rejected)]
    if not prompt_ids:
        raise ValueError("DPOTrainer: a row's prompt tokenizes to nothing; the first answer token needs a context.")
    if args.max_prompt_length is not None:
        prompt_ids = prompt_ids[-args.max_prompt_length :]
    if args.max_length is not None:
        room = args.max_length - len(prompt_ids)
        answers = [a[:room] for a in answers]
    if not answers[0] or not answers[1]:
        raise ValueError("DPOTrainer: a row's chosen or rejected answer is empty (after truncation).")
    return prompt_ids, answers[0], answers[1]


class DPOTrainer(LLMTrainer):
    """Direct preference optimisation (TRL's ``DPOTrainer`` call shape).

    ``DPOTrainer(model, ref_model=None, args=DPOConfig(...), train_dataset=..., processing_class=tok)``;
    ``.step()`` returns ``{"loss", "rewards/chosen", "rewards/rejected", "rewards/margins",
    "rewards/accuracies", "grad_norm"}`` (rewards: ``beta * (pi - ref)`` of summed log-probs, means
    over the step's pairs). The reference: see :mod:`rl_llm.trainers.reference`.
    """

    config_class = DPOConfig
    args: DPOConfig

    def __init__(
        self,
        model: Any,
        ref_model: Any = None,
        args: DPOConfig | None = None,
        train_dataset: Any = None,
        processing_class: Any = None,
        **kwargs: Any,
    ) -> None:
        if processing_class is None:
            raise ValueError("DPOTrainer: processing_class (the tokenizer) is required.")
        super().__init__(model, args, train_dataset, processing_class, **kwargs)
        if self.args.disable_dropout:
            disable_dropout(self.model)
        self.model.train()
        pad = getattr(processing_class, "pad_token_id", None)
        self.pad_token_id = pad if pad is not None else (getattr(processing_class, "eos_token_id", None) or 0)
        self.examples = [tokenize_preference_row(row, processing_class, self.args) for row in self.rows]
        if self.args.sync_ref_model and (ref_model is not None or self.args.precompute_ref_log_probs):
            raise ValueError(
                "DPOTrainer: sync_ref_model updates the trainer's own reference copy; it excludes ref_model= and precompute_ref_log_probs."
            )
        self.reference: Reference | None = Reference(self.model, ref_model)
        if self.args.sync_ref_model and not self.reference.is_copy:
            raise ValueError(
                "DPOTrainer: sync_ref_model needs a copied reference; a PEFT model's reference is its base (adapter off)."
            )
        self.ref_log_probs: torch.Tensor | None = None
        if self.args.precompute_ref_log_probs:
            self.ref_log_probs = self._precompute()
            if self.reference.is_copy and ref_model is None:
                self.reference = None  # the copy is no longer needed

    def _batch(self, indices: list[int]) -> tuple[torch.Tensor, ...]:
        """Prompt (left-padded) and answers (right-padded) of chosen rows then rejected rows."""
        prompts = [self.examples[i][0] for i in indices]
        answers = [self.examples[i][1] for i in indices] + [self.examples[i][2] for i in indices]
        prompt, prompt_mask = left_pad(prompts + prompts, self.pad_token_id)
        answer, answer_mask = right_pad(answers, self.pad_token_id)
        device = next(self.model.parameters()).device
        return prompt.to(device), prompt_mask.to(device), answer.to(device), answer_mask.to(device)

    def _scores(self, model: Any, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """``[2n]``: each answer's summed log-prob (IPO: averaged over its tokens)."""
        prompt, prompt_mask, answer, answer_mask = batch
        with self._autocast():
            log_probs, _ = response_log_probs(
                model,
                prompt,
                prompt_mask,
                answer,
                answer_mask,
                chunk_size=self.args.logprob_chunk_size,
                padding_free=self.padding_free,
            )
        total = log_probs.sum(-1)
        return total / answer_mask.sum(-1) if self.args.loss_type == "ipo" else total

    def _precompute(self) -> torch.Tensor:
        size = self.args.per_device_train_batch_size
        out = []
        assert self.reference is not None  # called from __init__, before the reference may be dropped
        with self.reference.scoring() as ref:
            for k in range(0, len(self.examples), size):
                indices = list(range(k, min(k + size, len(self.examples))))
                scores = self._scores(ref, self._batch(indices))
                out.append(torch.stack(scores.chunk(2)))  # [2, n]: chosen, rejected
        return torch.cat(out, dim=1).cpu()

    def step(self) -> dict[str, float]:
        indices = self._next_indices(self.rows_per_step())
        size = self.args.per_device_train_batch_size
        pairs = len(indices)
        sums = {"loss": 0.0, "chosen": 0.0, "rejected": 0.0, "accuracy": 0.0}
        for k in range(0, pairs, size):
            part = indices[k : k + size]
            batch = self._batch(part)
            with self._padding_free_block():  # the policy's forward and backward
                chosen, rejected = self._scores(self.model, batch).chunk(2)
                if self.ref_log_probs is not None:
                    ref_chosen, ref_rejected = self.ref_log_probs[:, part].to(chosen.device)
                else:
                    assert self.reference is not None  # dropped only once ref_log_probs are precomputed
                    with self.reference.scoring() as ref:
                        ref_chosen, ref_rejected = self._scores(ref, batch).chunk(2)
                losses = dpo_losses(
                    chosen,
                    rejected,
                    ref_chosen,
                    ref_rejected,
                    beta=self.args.beta,
                    loss_type=self.args.loss_type,
                    label_smoothing=self.args.label_smoothing,
                )
                (losses.sum() / pairs).backward()
            with torch.no_grad():
                reward_c, reward_r = self.args.beta * (chosen - ref_chosen), self.args.beta * (rejected - ref_rejected)
                sums["loss"] += float(losses.sum())
                sums["chosen"] += float(reward_c.sum())
                sums["rejected"] += float(reward_r.sum())
                sums["accuracy"] += float((reward_c > reward_r).float().sum())
        grad_norm = self._apply_gradients()
        if self.args.sync_ref_model and self.global_step % self.args.ref_model_sync_steps == 0:
            assert self.reference is not None  # sync_ref_model excludes precompute_ref_log_probs
            sync_reference(self.reference, self.args.ref_model_mixup_alpha)
        mean = {k: v / pairs for k, v in sums.items()}
        return {
            "loss": mean["loss"],
            "rewards/chosen": mean["chosen"],
            "rewards/rejected": mean["rejected"],
            "rewards/margins": mean["chosen"] - mean["rejected"],
            "rewards/accuracies": mean["accuracy"],
            "grad_norm": grad_norm,
        }
