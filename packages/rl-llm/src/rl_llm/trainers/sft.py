"""SFTTrainer: supervised fine-tuning on text, prompt/completion pairs or conversations (TRL's API).

Each row becomes token ids and a loss mask (:func:`tokenize_sft_row`):

- ``text`` rows: every token is trained (language modelling), an EOS appended;
- ``prompt``/``completion`` rows: the prompt, then the completion and an EOS; only the completion is
  trained unless ``completion_only_loss=False``;
- ``messages`` rows (and conversational prompt/completion rows): rendered with the chat template
  (:mod:`rl_llm.chat`); with ``assistant_only_loss=True`` only the assistant replies are trained.

Rows longer than ``max_length`` tokens are cut to their first ``max_length``. With ``packing=True``
the tokenized rows are packed into rows of at most ``max_length`` tokens by best-fit decreasing
(:func:`pack_best_fit`; TRL's ``"bfd"``); inside a packed row each sequence restarts its positions
and attends only to itself (a block-diagonal causal attention mask), so a packed sequence gets the
log-probs it would get alone. When the model supports it (``padding_free``, the default) each
micro-batch's sequences run end to end in one row instead (:mod:`rl_llm.padding_free`), and the
output layer scores only the trained tokens. One optimisation step takes
``per_device_train_batch_size * gradient_accumulation_steps`` rows (packed rows when packing); the loss is the mean
negative log-likelihood over every trained token of those rows (what transformers' ``labels=``
loss gives for one batch), accumulated exactly: each micro-batch's summed NLL is divided by the
token count of the whole step before its backward pass, so the gradient equals the one-batch
gradient whatever the split.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch

from ..chat import render_chat, render_segments
from ..data_files import dataset_format, is_conversational
from ..losses._logprobs import sequence_log_probs
from ..padding_free import boundaries
from .base import LLMTrainer
from .config import TrainingConfig

__all__ = ["SFTConfig", "SFTTrainer", "pack_best_fit", "tokenize_sft_row"]


@dataclass
class SFTConfig(TrainingConfig):
    """:class:`~rl_llm.trainers.TrainingConfig` plus SFT's options (TRL's ``SFTConfig`` names).

    Examples:
        >>> from rl_llm.trainers import SFTConfig
        >>> SFTConfig(max_length=128, assistant_only_loss=True).learning_rate
        2e-05
    """

    learning_rate: float = 2e-5
    max_length: Optional[int] = 1024  # tokens per row; longer rows are cut (None: no limit)
    dataset_text_field: str = "text"
    completion_only_loss: Optional[bool] = None  # None: True for prompt/completion rows
    assistant_only_loss: bool = False
    chat_template: Optional[str] = None  # None: the tokenizer's own, else ChatML; "chatml"; or a Jinja string
    packing: bool = False  # pack rows into rows of max_length tokens (best-fit decreasing)

    def validate(self) -> None:
        super().validate()
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"SFTConfig: max_length must be >= 2 or None, got {self.max_length!r}.")
        if self.packing and self.max_length is None:
            raise ValueError("SFTConfig: packing=True needs max_length (the packed rows' length).")


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _eos_id(tokenizer: Any) -> int | None:
    return getattr(tokenizer, "eos_token_id", None)


def tokenize_sft_row(row: Mapping[str, Any], tokenizer: Any, args: SFTConfig) -> tuple[list[int], list[bool]]:
    """``(token ids, loss mask)`` of one dataset row (see the module docstring).

    Examples:
        >>> from rl_llm.trainers import SFTConfig, tokenize_sft_row
        >>> class Chars:  # a toy tokenizer: one id per character, EOS = 0
        ...     eos_token_id, chat_template = 0, None
        ...     def __call__(self, text, add_special_tokens=False):
        ...         return {"input_ids": [ord(c) for c in text]}
        >>> ids, mask = tokenize_sft_row({"prompt": "ab", "completion": "c"}, Chars(), SFTConfig())
        >>> ids, mask
        ([97, 98, 99, 0], [False, False, True, True])
    """
    kind = dataset_format(row)
    if kind not in ("language_modeling", "prompt_completion"):
        raise ValueError(
            f"SFTTrainer: rows need 'text', 'messages' or 'prompt' and 'completion'; got columns {sorted(row)}."
        )
    eos = _eos_id(tokenizer)
    template = args.chat_template
    if kind == "language_modeling":
        field = (
            args.dataset_text_field if args.dataset_text_field in row else ("messages" if "messages" in row else "text")
        )
        value = row[field]
        if is_conversational(value):
            pieces = render_segments(value, tokenizer, chat_template=template)
            ids, mask = [], []
            for text, is_reply in pieces:
                part = _encode(tokenizer, text)
                ids += part
                mask += [is_reply or not args.assistant_only_loss] * len(part)
        elif isinstance(value, str):
            ids = _encode(tokenizer, value) + ([eos] if eos is not None else [])
            mask = [True] * len(ids)
        else:
            raise ValueError(
                f"SFTTrainer: column {field!r} must be a string or a list of messages, got {type(value).__name__}."
            )
    else:
        prompt, completion = row["prompt"], row["completion"]
        if is_conversational(prompt) != is_conversational(completion):
            raise ValueError("SFTTrainer: 'prompt' and 'completion' must both be strings or both be lists of messages.")
        if is_conversational(prompt):
            head = render_chat(prompt, tokenizer, chat_template=template, add_generation_prompt=True)
            full = render_chat(list(prompt) + list(completion), tokenizer, chat_template=template)
            if not full.startswith(head):
                raise ValueError(
                    "SFTTrainer: the chat template renders the prompt differently once the completion is added."
                )
            prompt_ids, completion_ids = _encode(tokenizer, head), _encode(tokenizer, full[len(head) :])
        else:
            if not isinstance(prompt, str) or not isinstance(completion, str):
                raise ValueError("SFTTrainer: 'prompt' and 'completion' must be strings (or lists of messages).")
            prompt_ids = _encode(tokenizer, prompt)
            completion_ids = _encode(tokenizer, completion) + ([eos] if eos is not None else [])
        only = True if args.completion_only_loss is None else args.completion_only_loss
        ids = prompt_ids + completion_ids
        mask = [not only] * len(prompt_ids) + [True] * len(completion_ids)
    if args.max_length is not None:
        ids, mask = ids[: args.max_length], mask[: args.max_length]
    return ids, mask


def pack_best_fit(lengths: list[int], capacity: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into bins of total length at most ``capacity``: longest first,
    each into the fullest bin that still has room for it (best-fit decreasing).

    Examples:
        >>> from rl_llm.trainers import pack_best_fit
        >>> pack_best_fit([5, 3, 4, 2, 6], capacity=8)
        [[4, 3], [0, 1], [2]]
    """
    too_long = [i for i, n in enumerate(lengths) if n > capacity]
    if too_long:
        raise ValueError(f"pack_best_fit: items {too_long[:5]} are longer than the capacity {capacity}.")
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda k: (-lengths[k], k)):
        fits = [b for b in range(len(bins)) if room[b] >= lengths[i]]
        if fits:
            best = min(fits, key=lambda b: (room[b], b))
            bins[best].append(i)
            room[best] -= lengths[i]
        else:
            bins.append([i])
            room.append(capacity - lengths[i])
    return bins


class SFTTrainer(LLMTrainer):
    """Supervised fine-tuning (TRL's ``SFTTrainer`` call shape).

    ``SFTTrainer(model, args=SFTConfig(...), train_dataset=..., processing_class=tokenizer)``, then
    ``.train()``; ``.step()`` runs one optimisation step and returns ``{"loss", "num_tokens"
    (trained tokens), "num_input_tokens", "grad_norm"}``. See :class:`~rl_llm.trainers.base.LLMTrainer` for the shared arguments.

    Examples:
        >>> import torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> from rl_llm.trainers import SFTConfig, SFTTrainer
        >>> class Chars:
        ...     eos_token_id, pad_token_id, chat_template = 1, 0, None
        ...     def __call__(self, text, add_special_tokens=False):
        ...         return {"input_ids": [2 + ord(c) % 20 for c in text]}
        >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=16, vocab_size=22))
        >>> rows = [{"prompt": "1+1=", "completion": "2"}, {"prompt": "2+2=", "completion": "4"}]
        >>> args = SFTConfig(output_dir="/tmp/sft-doc", per_device_train_batch_size=2, max_steps=3,
        ...                  learning_rate=1e-2, report_to=[], disable_tqdm=True)
        >>> trainer = SFTTrainer(model, args=args, train_dataset=rows, processing_class=Chars())
        >>> first = trainer.step()["loss"]
        >>> last = trainer.train()["loss"]
        >>> trainer.global_step, last < first
        (3, True)
    """

    config_class = SFTConfig
    args: SFTConfig

    def __init__(
        self,
        model: Any,
        args: SFTConfig | None = None,
        train_dataset: Any = None,
        processing_class: Any = None,
        **kwargs: Any,
    ) -> None:
        if processing_class is None:
            raise ValueError("SFTTrainer: processing_class (the tokenizer) is required.")
        self._examples: list | None = None
        super().__init__(model, args, train_dataset, processing_class, **kwargs)
        pad = getattr(processing_class, "pad_token_id", None)
        self.pad_token_id = pad if pad is not None else (_eos_id(processing_class) or 0)
        self.model.train()

    @property
    def examples(self) -> list[tuple[list[int], list[bool], list[int]]]:
        """The training items: ``(token ids, loss mask, sequence lengths)``, one per row, or per
        packed row with ``packing`` (tokenized, and packed, on first use)."""
        if self._examples is None:
            rows = [tokenize_sft_row(row, self.processing_class, self.args) for row in self.rows]
            empty = [i for i, (ids, _) in enumerate(rows) if len(ids) < 2]
            if empty:
                raise ValueError(f"SFTTrainer: rows {empty[:5]} tokenize to fewer than 2 tokens; nothing to predict.")
            if self.args.packing:
                assert self.args.max_length is not None  # SFTConfig.validate: packing needs max_length
                bins = pack_best_fit([len(ids) for ids, _ in rows], self.args.max_length)
                self._examples = [
                    (
                        [t for i in b for t in rows[i][0]],
                        [m for i in b for m in rows[i][1]],
                        [len(rows[i][0]) for i in b],
                    )
                    for b in bins
                ]
            else:
                self._examples = [(ids, mask, [len(ids)]) for ids, mask in rows]
        return self._examples

    def _num_units(self) -> int:
        return len(self.examples)

    def _collate(
        self, examples: list[tuple[list[int], list[bool], list[int]]]
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``(input_ids, attention, loss_mask, position_ids, cu_seq_lens)`` on the model's device.

        Padding-free (``self.padding_free``): every sequence of ``examples`` end to end in one
        ``[1, N]`` row, ``attention`` None, ``cu_seq_lens`` the sequence boundaries. Otherwise
        right-padded rows, ``cu_seq_lens`` None, and ``attention`` ``[B, T]`` (1 on real tokens) for
        plain rows or, for packed rows, a ``[B, 1, T, T]`` bool mask letting each position see the
        earlier positions of its own sequence only. The first token of every sequence is never
        trained (nothing predicts it)."""
        device = next(self.model.parameters()).device
        if self.padding_free:
            lengths = torch.tensor([n for _, _, seqs in examples for n in seqs])
            ids = torch.tensor([t for tokens, _, _ in examples for t in tokens])
            loss_mask = torch.tensor([m for _, mask, _ in examples for m in mask], dtype=torch.bool)
            starts = lengths.cumsum(0) - lengths
            loss_mask[starts] = False
            positions = torch.arange(len(ids)) - torch.repeat_interleave(starts, lengths)
            return (
                ids[None].to(device),
                None,
                loss_mask[None].to(device),
                positions[None].to(device),
                boundaries(lengths).to(device),
            )
        width = max(len(ids) for ids, _, _ in examples)
        n = len(examples)
        ids = torch.full((n, width), int(self.pad_token_id), dtype=torch.long)
        loss_mask = torch.zeros((n, width), dtype=torch.bool)
        positions = torch.zeros((n, width), dtype=torch.long)
        segment = torch.full((n, width), -1, dtype=torch.long)  # which sequence of the row; -1 on padding
        for row, (tokens, mask, lengths) in enumerate(examples):
            ids[row, : len(tokens)] = torch.tensor(tokens)
            loss_mask[row, : len(tokens)] = torch.tensor(mask)
            start = 0
            for k, length in enumerate(lengths):
                positions[row, start : start + length] = torch.arange(length)
                segment[row, start : start + length] = k
                loss_mask[row, start] = False
                start += length
        if not self.args.packing:
            return ids.to(device), (segment >= 0).long().to(device), loss_mask.to(device), None, None
        causal = torch.ones(width, width, dtype=torch.bool).tril()
        attention = (segment[:, :, None] == segment[:, None, :]) & causal & (segment[:, None, :] >= 0)
        attention |= torch.eye(width, dtype=torch.bool)  # padding attends to itself only (no empty rows)
        attention &= (segment[:, :, None] >= 0) | torch.eye(width, dtype=torch.bool)
        return ids.to(device), attention[:, None].to(device), loss_mask.to(device), positions.to(device), None

    def step(self) -> dict[str, float]:
        indices = self._next_indices(self.rows_per_step())
        size = self.args.per_device_train_batch_size
        batches = [
            self._collate([self.examples[i] for i in indices[k : k + size]]) for k in range(0, len(indices), size)
        ]
        tokens = sum(int(mask.sum()) for _, _, mask, _, _ in batches)
        inputs = sum(len(self.examples[i][0]) for i in indices)
        total = 0.0
        for ids, attention, mask, positions, cu_seq_lens in batches:
            with self._padding_free_block():
                with self._autocast():
                    log_probs = sequence_log_probs(
                        self.model,
                        ids,
                        attention,
                        positions,
                        chunk_size=self.args.logprob_chunk_size,
                        cu_seq_lens=cu_seq_lens,
                        needed=None if cu_seq_lens is None else mask,
                    )
                nll = -(log_probs * mask).sum()
                (nll / max(tokens, 1)).backward()
            total += float(nll.detach())
        grad_norm = self._apply_gradients()
        return {
            "loss": total / max(tokens, 1),
            "num_tokens": float(tokens),
            "num_input_tokens": float(inputs),
            "grad_norm": grad_norm,
        }
