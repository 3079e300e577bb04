"""Batching helpers: padding, tokenization, GRPO repeats, unpad/pad round trips; docstring examples."""

from __future__ import annotations

import doctest
import importlib

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from rl_llm import TransformersWrapper
from rl_llm.data import (
    left_pad,
    pad_rows,
    repeat_prompts,
    right_pad,
    tokenize_pairs,
    tokenize_prompts,
    unpad_rows,
)
from tdict import TensorDict

rows = st.lists(st.lists(st.integers(1, 50), min_size=1, max_size=6), min_size=1, max_size=5)


@given(rows)
def test_left_and_right_pad_match_a_loop(seqs):
    width = max(map(len, seqs))
    lt, lm = left_pad(seqs, 0)
    rt, rm = right_pad(seqs, 0)
    for i, s in enumerate(seqs):
        assert lt[i].tolist() == [0] * (width - len(s)) + s
        assert rt[i].tolist() == s + [0] * (width - len(s))
        assert lm[i].tolist() == [False] * (width - len(s)) + [True] * len(s)
        assert rm[i].tolist() == [True] * len(s) + [False] * (width - len(s))


@given(rows, rows)
def test_unpad_then_pad_round_trip(prompts, responses):
    n = min(len(prompts), len(responses))
    p, pm = left_pad(prompts[:n], 0)
    r, rm = right_pad(responses[:n], 0)
    td = TensorDict(
        {
            ("tokens", "prompt"): p,
            ("masks", "prompt_attention_mask"): pm,
            ("tokens", "response"): r,
            ("masks", "response_mask"): rm,
            ("log_probs", "response"): torch.where(rm, -r.float(), 0.0),
        },
        batch_size=[n],
    )
    ragged = unpad_rows(td)
    for i in range(n):
        assert ragged[i]["tokens", "prompt"].tolist() == prompts[i]
        assert ragged[i]["tokens", "response"].tolist() == responses[i]
    back = pad_rows(ragged.unbind(0), 0)
    for key in td.keys(True, True):
        assert torch.equal(back[key], td[key]), key


def test_tokenize_and_repeat(tokenizer):
    td = tokenize_pairs(["the cat", "hello"], ["sat", "world how"], tokenizer)
    ids = tokenizer(["the cat", "hello", "sat", "world how"], add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    assert td["tokens", "prompt"].tolist() == [ids[0], [0] + ids[1]]
    assert td["tokens", "response"].tolist() == [ids[2] + [eos, 0], ids[3] + [eos]]
    assert td["text", "response"] == ["sat", "world how"]
    rep = repeat_prompts(td, 3)
    assert rep.batch_size == (6,)
    assert rep["text", "prompt"] == ["the cat"] * 3 + ["hello"] * 3
    assert rep[4]["text", "prompt"] == "hello"
    assert torch.equal(rep["tokens", "prompt"][3:], td["tokens", "prompt"][1:].expand(3, -1))
    with pytest.raises(ValueError, match="list of str"):
        tokenize_prompts([1, 2], tokenizer)
    with pytest.raises(ValueError, match="2 prompts but 1"):
        tokenize_pairs(["a", "b"], ["c"], tokenizer)
    with pytest.raises(ValueError, match="group_size"):
        repeat_prompts(td, 0)


def test_generated_text_on_a_two_dim_batch(model, tokenizer):
    td = repeat_prompts(tokenize_prompts(["the cat", "yes"], tokenizer), 2).reshape(2, 2)
    out = TransformersWrapper(model, tokenizer=tokenizer, generate_kwargs={"max_new_tokens": 3})(td)
    assert out["tokens", "response"].shape[:2] == (2, 2)
    mask = out["masks", "response_mask"][1, 0]
    expected = tokenizer.decode(out["tokens", "response"][1, 0][mask].tolist(), skip_special_tokens=True)
    assert out[1, 0]["text", "response"] == expected


@pytest.mark.parametrize(
    "name",
    [
        "rl_llm.data",
        "rl_llm.modules",
        "rl_llm.losses._logprobs",
        "rl_llm.losses.grpo",
        "rl_llm.losses.sft",
        "rl_llm.losses.dpo",
    ],
)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and not result.failed, f"{name}: {result.failed} of {result.attempted} failed"
