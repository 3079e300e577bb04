"""Reward functions for GRPO, with TRL's calling convention.

A reward function is called as ``f(prompts=[...], completions=[...], completion_ids=[...], **columns)``
(one entry per completion; ``columns`` are the dataset's other columns, repeated for each
completion of a prompt) and returns one float per completion (``None`` where it does not apply:
that completion then gets no score from it). ``completions`` are strings, or for conversational
prompts lists holding one ``{"role": "assistant", "content": ...}`` message; :func:`completion_text`
gives the text either way.

Built here: :func:`exact_match`, :func:`numeric_match`, :func:`format_reward`, :func:`length_penalty`,
:func:`overlong_penalty` (DAPO's soft overlong punishment), :func:`weighted_sum`, and
:class:`RewardModel` (a sequence-classification model's score).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = [
    "RewardModel",
    "completion_text",
    "exact_match",
    "format_reward",
    "length_penalty",
    "numeric_match",
    "overlong_penalty",
    "weighted_sum",
]

_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")


def completion_text(completion: Any) -> str:
    """The text of a completion: the string itself, or the content of its (last) message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"completion_text: expected a string or a list of messages, got {type(completion).__name__}.")


def _answers(kwargs: dict, answer_column: str, n: int) -> list:
    if answer_column not in kwargs:
        raise KeyError(
            f"reward: the dataset has no {answer_column!r} column to check the completions against; "
            f"columns passed: {sorted(k for k in kwargs if k not in ('prompts', 'completions', 'completion_ids'))}."
        )
    answers = list(kwargs[answer_column])
    if len(answers) != n:
        raise ValueError(f"reward: {len(answers)} {answer_column!r} values for {n} completions.")
    return answers


def exact_match(answer_column: str = "answer", *, strip: bool = True) -> Callable[..., list[float]]:
    """1.0 where the completion's text equals the row's ``answer_column`` (whitespace stripped), else 0.

    Examples:
        >>> from rl_llm.rewards import exact_match
        >>> exact_match()(prompts=["1+1="] * 2, completions=[" 2", "3"], answer=["2", "2"])
        [1.0, 0.0]
    """

    def exact(prompts: Any = None, completions: Sequence[Any] = (), **kwargs: Any) -> list[float]:
        answers = _answers(kwargs, answer_column, len(completions))
        out = []
        for completion, answer in zip(completions, answers):
            text, want = completion_text(completion), str(answer)
            out.append(float(text.strip() == want.strip()) if strip else float(text == want))
        return out

    exact.__name__ = f"exact_match_{answer_column}"
    return exact


def numeric_match(
    answer_column: str = "answer", *, tolerance: float = 1e-6, last: bool = True
) -> Callable[..., list[float]]:
    """1.0 where the completion's last (or first) number equals the row's answer within ``tolerance``.

    Examples:
        >>> from rl_llm.rewards import numeric_match
        >>> numeric_match()(completions=["so it is 1,024.", "maybe 7", "none"], answer=[1024, "7.0", 3])
        [1.0, 1.0, 0.0]
    """

    def numeric(prompts: Any = None, completions: Sequence[Any] = (), **kwargs: Any) -> list[float]:
        answers = _answers(kwargs, answer_column, len(completions))
        out = []
        for completion, answer in zip(completions, answers):
            found = _NUMBER.findall(completion_text(completion))
            if not found:
                out.append(0.0)
                continue
            value = float((found[-1] if last else found[0]).replace(",", ""))
            want = float(str(answer).replace(",", ""))
            out.append(float(abs(value - want) <= tolerance))
        return out

    numeric.__name__ = f"numeric_match_{answer_column}"
    return numeric


def format_reward(pattern: str, *, reward: float = 1.0, flags: int = re.DOTALL) -> Callable[..., list[float]]:
    """``reward`` where the whole completion matches the regular expression ``pattern``, else 0.

    Examples:
        >>> from rl_llm.rewards import format_reward
        >>> format_reward(r"<answer>\\d+</answer>")(completions=["<answer>4</answer>", "4"])
        [1.0, 0.0]
    """
    compiled = re.compile(pattern, flags)

    def fmt(prompts: Any = None, completions: Sequence[Any] = (), **kwargs: Any) -> list[float]:
        return [reward if compiled.fullmatch(completion_text(c).strip()) else 0.0 for c in completions]

    fmt.__name__ = "format_reward"
    return fmt


def length_penalty(target: int, *, scale: float = 1.0) -> Callable[..., list[float]]:
    """``-scale * |tokens - target| / target``: a penalty growing with the distance to ``target`` tokens."""
    if target < 1:
        raise ValueError(f"length_penalty: target must be >= 1, got {target!r}.")

    def length(
        prompts: Any = None,
        completions: Sequence[Any] = (),
        completion_ids: Sequence[Sequence[int]] = (),
        **kwargs: Any,
    ) -> list[float]:
        return [-scale * abs(len(ids) - target) / target for ids in completion_ids]

    length.__name__ = "length_penalty"
    return length


def overlong_penalty(max_completion_length: int, soft_cache_length: int) -> Callable[..., list[float]]:
    """DAPO's soft overlong punishment: 0 up to ``max - cache`` tokens, then falling linearly to -1
    at ``max_completion_length`` (and -1 beyond).

    Examples:
        >>> from rl_llm.rewards import overlong_penalty
        >>> overlong_penalty(10, 4)(completion_ids=[[0] * 6, [0] * 8, [0] * 10])
        [0.0, -0.5, -1.0]
    """
    if not 0 < soft_cache_length < max_completion_length:
        raise ValueError(
            f"overlong_penalty: need 0 < soft_cache_length < max_completion_length, got {soft_cache_length}, {max_completion_length}."
        )
    start = max_completion_length - soft_cache_length

    def overlong(
        prompts: Any = None, completions: Any = (), completion_ids: Sequence[Sequence[int]] = (), **kwargs: Any
    ) -> list[float]:
        return [max(-1.0, min(0.0, (start - len(ids)) / soft_cache_length)) for ids in completion_ids]

    overlong.__name__ = "overlong_penalty"
    return overlong


def weighted_sum(
    funcs: Sequence[Callable[..., list]], weights: Sequence[float] | None = None
) -> Callable[..., list[float]]:
    """One reward function summing ``funcs`` with ``weights`` (``None`` entries count as 0)."""
    weights = [1.0] * len(funcs) if weights is None else list(weights)
    if len(weights) != len(funcs):
        raise ValueError(f"weighted_sum: {len(weights)} weights for {len(funcs)} functions.")

    def total(**kwargs: Any) -> list[float]:
        columns = [f(**kwargs) for f in funcs]
        return [sum(w * (v or 0.0) for w, v in zip(weights, values)) for values in zip(*columns)]

    total.__name__ = "weighted_sum"
    return total


class RewardModel:
    """A sequence-classification model (``AutoModelForSequenceClassification`` with one label) as a
    reward function: the score of prompt + completion text, in batches of ``batch_size``."""

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 8, max_length: int | None = None) -> None:
        if tokenizer.pad_token_id is None:
            raise ValueError("RewardModel: the tokenizer needs a pad token (set tokenizer.pad_token).")
        self.model, self.tokenizer, self.batch_size, self.max_length = model.eval(), tokenizer, batch_size, max_length
        self.__name__ = f"reward_model_{type(model).__name__}"

    @torch.no_grad()
    def __call__(self, prompts: Sequence[Any] = (), completions: Sequence[Any] = (), **kwargs: Any) -> list[float]:
        texts = []
        for prompt, completion in zip(prompts, completions):
            head = prompt if isinstance(prompt, str) else "".join(m["content"] for m in prompt)
            texts.append(head + completion_text(completion))
        device = next(self.model.parameters()).device
        out: list[float] = []
        for k in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(
                texts[k : k + self.batch_size],
                return_tensors="pt",
                padding=True,
                truncation=self.max_length is not None,
                max_length=self.max_length,
            )
            logits = self.model(**{n: t.to(device) for n, t in enc.items()}).logits
            out += logits[:, 0].float().tolist()
        return out
