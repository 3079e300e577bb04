"""Prompt/response batching: token lists and text into padded TensorDicts, and back.

Layout (the one :class:`~rl_llm.TransformersWrapper` and the losses read and write), for a batch of
``B`` samples:

==================================  =============  ===========================================
key                                 shape / dtype  meaning
==================================  =============  ===========================================
``("tokens", "prompt")``            [B, Lp] long   prompt ids, LEFT-padded with the pad id
``("masks", "prompt_attention_mask")``  [B, Lp] bool   true on real prompt tokens
``("tokens", "response")``          [B, Lr] long   response ids, RIGHT-padded with the pad id
``("masks", "response_mask")``      [B, Lr] bool   true on real response tokens (a prefix)
``("log_probs", "response")``       [B, Lr] float  log-prob of each response token, 0 on padding
``("text", "prompt")`` / ``("text", "response")``  list of str  optional text
==================================  =============  ===========================================

Prompts are left-padded so that every row's last prompt column is a real token: generation then
appends all responses at the same column and the logits at column ``Lp - 1`` predict the first
response token of every row. Responses are right-padded so that a response mask is a prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tdict import NonTensorStack, TensorDict, is_leaf_nontensor, lazy_stack
from tdict.validation import check_positive_int

__all__ = [
    "PROMPT_MASK",
    "PROMPT_TEXT",
    "PROMPT_TOKENS",
    "RESPONSE_LOG_PROBS",
    "RESPONSE_MASK",
    "RESPONSE_TEXT",
    "RESPONSE_TOKENS",
    "get_texts",
    "left_pad",
    "make_preference_batch",
    "pad_rows",
    "repeat_prompts",
    "right_pad",
    "set_texts",
    "tokenize_pairs",
    "tokenize_prompts",
    "unpad_rows",
]

PROMPT_TOKENS = ("tokens", "prompt")
PROMPT_MASK = ("masks", "prompt_attention_mask")
PROMPT_TEXT = ("text", "prompt")
RESPONSE_TOKENS = ("tokens", "response")
RESPONSE_MASK = ("masks", "response_mask")
RESPONSE_TEXT = ("text", "response")
RESPONSE_LOG_PROBS = ("log_probs", "response")


def _as_rows(seqs: Sequence[Any], name: str) -> list[torch.Tensor]:
    if isinstance(seqs, (str, bytes)) or not isinstance(seqs, Sequence) or len(seqs) == 0:
        raise ValueError(
            f"{name}: expected a non-empty sequence of token-id lists or 1-D tensors, got {type(seqs).__name__}."
        )
    rows = []
    for i, seq in enumerate(seqs):
        row = seq if isinstance(seq, torch.Tensor) else torch.as_tensor(list(seq), dtype=torch.long)
        if row.ndim != 1 or row.is_floating_point():
            raise ValueError(
                f"{name}[{i}]: expected a 1-D sequence of integer ids, got shape {tuple(row.shape)} dtype {row.dtype}."
            )
        rows.append(row.long())
    return rows


def _pad(seqs: Sequence[Any], pad_token_id: int, left: bool, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    rows = _as_rows(seqs, name)
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), int(pad_token_id), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, row in enumerate(rows):
        n = len(row)
        if n == 0:
            continue
        cols = slice(width - n, width) if left else slice(0, n)
        tokens[i, cols] = row
        mask[i, cols] = True
    return tokens, mask


def left_pad(seqs: Sequence[Any], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack variable-length id sequences into ``[N, max_len]``, padding on the LEFT (prompts).

    Returns:
        ``(tokens, mask)``: long ids and a bool mask true on real tokens.

    Examples:
        >>> from rl_llm.data import left_pad
        >>> tokens, mask = left_pad([[5, 6, 7], [8]], pad_token_id=0)
        >>> tokens.tolist(), mask.sum(-1).tolist()
        ([[5, 6, 7], [0, 0, 8]], [3, 1])
    """
    return _pad(seqs, pad_token_id, left=True, name="left_pad")


def right_pad(seqs: Sequence[Any], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack variable-length id sequences into ``[N, max_len]``, padding on the RIGHT (responses).

    Examples:
        >>> from rl_llm.data import right_pad
        >>> right_pad([[5, 6, 7], [8]], pad_token_id=0)[0].tolist()
        [[5, 6, 7], [8, 0, 0]]
    """
    return _pad(seqs, pad_token_id, left=False, name="right_pad")


def set_texts(tensordict: TensorDict, key: Any, texts: Sequence[str]) -> None:
    """Store one string per row (a ``NonTensorStack``: indexing a row gives that row's string)."""
    tensordict.set(key, NonTensorStack.from_list(list(texts)))


def get_texts(tensordict: TensorDict, key: Any) -> list | None:
    """The strings stored at ``key`` as a list (None when missing)."""
    if tensordict.get(key, None) is None:
        return None
    value = tensordict[key]
    if isinstance(value, str):
        return [value]
    return value.tolist() if hasattr(value, "tolist") else list(value)


def _pad_id(tokenizer: Any) -> int:
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = getattr(tokenizer, "eos_token_id", None)
    if pad is None:
        raise ValueError("tokenizer has neither a pad_token_id nor an eos_token_id: set tokenizer.pad_token.")
    return int(pad)


def _check_texts(texts: Any, name: str) -> list[str]:
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, Sequence) or not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError(f"{name}: expected a non-empty list of str, got {texts!r:.80}.")
    return list(texts)


def _encode(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def tokenize_prompts(texts: Sequence[str] | str, tokenizer: Any) -> TensorDict:
    """Tokenize prompts into a batch ``[N]`` TensorDict (left-padded), keeping the text.

    Examples:
        >>> from rl_llm.data import tokenize_prompts
        >>> class Tok:  # any Hugging Face tokenizer works; a toy one keeps the example standalone
        ...     pad_token_id = 0
        ...     def __call__(self, texts, add_special_tokens=False):
        ...         return {"input_ids": [[len(w) for w in t.split()] for t in texts]}
        >>> td = tokenize_prompts(["a bb ccc", "dddd"], Tok())
        >>> td["tokens", "prompt"].tolist()
        [[1, 2, 3], [0, 0, 4]]
    """
    texts = _check_texts(texts, "tokenize_prompts: texts")
    tokens, mask = left_pad(_encode(tokenizer, texts), _pad_id(tokenizer))
    if not bool(mask[:, -1].all()):
        raise ValueError("tokenize_prompts: a prompt tokenized to no tokens; every prompt needs at least one.")
    td = TensorDict({PROMPT_TOKENS: tokens, PROMPT_MASK: mask}, batch_size=[len(texts)])
    set_texts(td, PROMPT_TEXT, texts)
    return td


def tokenize_pairs(
    prompts: Sequence[str] | str,
    responses: Sequence[str] | str,
    tokenizer: Any,
    *,
    append_eos: bool = True,
) -> TensorDict:
    """Tokenize (prompt, response) pairs: left-padded prompts, right-padded responses (+ EOS).

    Args:
        prompts: N prompt strings.
        responses: N response strings (the tokens a loss scores).
        tokenizer: a Hugging Face tokenizer (``pad_token_id``, ``eos_token_id``).
        append_eos: end each response with ``tokenizer.eos_token_id`` so the model learns to stop.

    Examples:
        >>> from rl_llm.data import tokenize_pairs
        >>> class Tok:
        ...     pad_token_id, eos_token_id = 0, 9
        ...     def __call__(self, texts, add_special_tokens=False):
        ...         return {"input_ids": [[len(w) for w in t.split()] for t in texts]}
        >>> td = tokenize_pairs(["a bb", "ccc"], ["dd", "e f"], Tok())
        >>> td["tokens", "response"].tolist(), td["masks", "response_mask"].sum(-1).tolist()
        ([[2, 9, 0], [1, 1, 9]], [2, 3])
    """
    prompts = _check_texts(prompts, "tokenize_pairs: prompts")
    responses = _check_texts(responses, "tokenize_pairs: responses")
    if len(prompts) != len(responses):
        raise ValueError(f"tokenize_pairs: {len(prompts)} prompts but {len(responses)} responses.")
    td = tokenize_prompts(prompts, tokenizer)
    ids = _encode(tokenizer, responses)
    if append_eos:
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos is None:
            raise ValueError("tokenize_pairs: append_eos=True but the tokenizer has no eos_token_id.")
        ids = [row + [int(eos)] for row in ids]
    tokens, mask = right_pad(ids, _pad_id(tokenizer))
    td.set(RESPONSE_TOKENS, tokens)
    td.set(RESPONSE_MASK, mask)
    set_texts(td, RESPONSE_TEXT, responses)
    return td


def make_preference_batch(
    prompts: Sequence[str] | str,
    chosen: Sequence[str] | str,
    rejected: Sequence[str] | str,
    tokenizer: Any,
    *,
    append_eos: bool = True,
) -> TensorDict:
    """A DPO batch ``[N]``: sub-TensorDicts ``"chosen"`` and ``"rejected"``, each a prompt/response pair.

    Examples:
        >>> from rl_llm.data import make_preference_batch
        >>> class Tok:
        ...     pad_token_id, eos_token_id = 0, 9
        ...     def __call__(self, texts, add_special_tokens=False):
        ...         return {"input_ids": [[len(w) for w in t.split()] for t in texts]}
        >>> td = make_preference_batch(["a"], ["bb"], ["c c"], Tok())
        >>> td["chosen", "tokens", "response"].tolist(), td["rejected", "tokens", "response"].tolist()
        ([[2, 9]], [[1, 1, 9]])
    """
    good = tokenize_pairs(prompts, chosen, tokenizer, append_eos=append_eos)
    bad = tokenize_pairs(prompts, rejected, tokenizer, append_eos=append_eos)
    return TensorDict({"chosen": good, "rejected": bad}, batch_size=good.batch_size)


def repeat_prompts(tensordict: TensorDict, group_size: int) -> TensorDict:
    """Repeat every sample ``group_size`` times in a row (GRPO groups: ``[N] -> [N * group_size]``).

    Text entries are repeated too. Sample ``i`` becomes rows ``i * group_size ... (i + 1) * group_size - 1``,
    the layout :class:`~rl_llm.MCAdvantage` expects.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_llm.data import repeat_prompts
        >>> td = TensorDict({("tokens", "prompt"): torch.tensor([[1], [2]])}, batch_size=[2])
        >>> repeat_prompts(td, 3)["tokens", "prompt"].flatten().tolist()
        [1, 1, 1, 2, 2, 2]
    """
    check_positive_int("repeat_prompts", "group_size", group_size)
    if tensordict.batch_dims != 1:
        raise ValueError(
            f"repeat_prompts: expected a batch of one dim [N], got batch_size {tuple(tensordict.batch_size)}."
        )
    n = tensordict.batch_size[0]
    index = torch.arange(n).repeat_interleave(group_size)
    out = TensorDict(batch_size=[n * group_size])
    for key in tensordict.keys(True, True, is_leaf=is_leaf_nontensor):
        value = tensordict.get(key)
        if isinstance(value, torch.Tensor):
            out.set(key, value[index])
        else:  # text: one str per sample
            items = get_texts(tensordict, key)
            assert items is not None  # key is one of the present keys
            set_texts(out, key, [items[i] for i in index.tolist()])
    return out


def unpad_rows(tensordict: TensorDict) -> Any:
    """Turn a padded batch ``[N]`` into a lazy stack of N rows with their real tokens only.

    Prompt entries keep the columns where the prompt mask is true, response entries (tokens,
    log-probs and anything else shaped like the response) those where the response mask is true;
    masks are kept (all true). :func:`pad_rows` is the inverse.
    """
    if tensordict.batch_dims != 1:
        raise ValueError(f"unpad_rows: expected a batch of one dim [N], got {tuple(tensordict.batch_size)}.")
    p_mask = tensordict.get(PROMPT_MASK).bool()
    r_mask = tensordict.get(RESPONSE_MASK, None)
    r_mask = r_mask.bool() if r_mask is not None else None
    rows = []
    for i in range(tensordict.batch_size[0]):
        row = TensorDict(batch_size=[])
        for key in tensordict.keys(True, True, is_leaf=is_leaf_nontensor):
            value = tensordict.get(key)
            if not isinstance(value, torch.Tensor):
                texts = get_texts(tensordict, key)
                assert texts is not None  # key is one of the present keys
                row.set(key, texts[i])
            elif _is_prompt(key) and value.shape == p_mask.shape:
                row.set(key, value[i][p_mask[i]])
            elif r_mask is not None and value.shape[:2] == r_mask.shape:
                row.set(key, value[i][r_mask[i]])
            else:
                row.set(key, value[i])
        rows.append(row)
    return lazy_stack(rows)


def _is_prompt(key: Any) -> bool:
    return isinstance(key, tuple) and "prompt" in key[-1]


def pad_rows(rows: Any, pad_token_id: int) -> TensorDict:
    """Pad a stack of variable-length rows (e.g. :func:`unpad_rows`' output) into a dense batch.

    Prompt-shaped entries (last key part containing ``"prompt"``) are left-padded, every other 1-D
    entry is right-padded (token entries with ``pad_token_id``, floats with 0, masks with False).
    """
    rows = list(rows)
    if not rows:
        raise ValueError("pad_rows: got no rows.")
    out = TensorDict(batch_size=[len(rows)])
    for key in rows[0].keys(True, True, is_leaf=is_leaf_nontensor):
        values = [row.get(key) for row in rows]
        if not isinstance(values[0], torch.Tensor):
            set_texts(out, key, [row[key] for row in rows])
            continue
        if values[0].ndim == 0:
            out.set(key, torch.stack(values))
            continue
        left = _is_prompt(key)
        width = max(v.shape[0] for v in values)
        fill = pad_token_id if not values[0].is_floating_point() and values[0].dtype != torch.bool else 0
        dense = values[0].new_full((len(values), width, *values[0].shape[1:]), fill)
        for i, v in enumerate(values):
            n = v.shape[0]
            if n and left:
                dense[i, width - n :] = v
            elif n:
                dense[i, :n] = v
        out.set(key, dense)
    return out
