"""TransformersWrapper: exact log-probs, generation shapes and masks with left padding, modes, errors."""

from __future__ import annotations

import pytest
import torch
from rl_llm import TransformersWrapper
from rl_llm.data import left_pad, right_pad, tokenize_prompts
from tdict import TensorDict, lazy_stack

PROMPTS = [[3, 7], [5, 6, 8, 9, 10], [11]]
RESPONSES = [[12, 13, 14], [15], [16, 17, 1]]


def _batch(prompts=PROMPTS, responses=RESPONSES):
    p, pm = left_pad(prompts, 0)
    r, rm = right_pad(responses, 0)
    return TensorDict(
        {
            ("tokens", "prompt"): p,
            ("masks", "prompt_attention_mask"): pm,
            ("tokens", "response"): r,
            ("masks", "response_mask"): rm,
        },
        batch_size=[len(prompts)],
    )


def test_scoring_matches_hand_computation_per_row(model, hand_log_probs):
    scorer = TransformersWrapper(model, generate=False)
    td = scorer(_batch())
    lp = td["log_probs", "response"]
    assert lp.shape == (3, 3) and lp.dtype == torch.float32
    for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES)):
        ref = hand_log_probs(model, p, r)
        torch.testing.assert_close(lp[i, : len(r)], ref, atol=1e-5, rtol=1e-5)
        assert (lp[i, len(r) :] == 0).all()  # masked positions are exactly 0


def test_scoring_ignores_pad_token_values(model):
    """What sits under a false mask (pad ids or garbage) changes nothing."""
    scorer = TransformersWrapper(model, generate=False)
    a = scorer(_batch())["log_probs", "response"]
    td = _batch()
    td["tokens", "prompt"][1 - 1, 0] = 22  # row 0 has 3 pad columns
    td["tokens", "response"][1, 2] = 19
    b = scorer(td)["log_probs", "response"]
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_scoring_has_gradients_and_entropy(model):
    scorer = TransformersWrapper(model, generate=False, return_entropy=True)
    td = scorer(_batch())
    lp, ent = td["log_probs", "response"], td["entropy", "response"]
    assert lp.requires_grad and ent.requires_grad
    mask = td["masks", "response_mask"]
    ids = torch.tensor([PROMPTS[0] + RESPONSES[0]])
    with torch.no_grad():
        logp = model(input_ids=ids).logits[0, len(PROMPTS[0]) - 1 : -1].log_softmax(-1)
    torch.testing.assert_close(ent[0], -(logp.exp() * logp).sum(-1), atol=1e-5, rtol=1e-5)
    assert (ent[~mask] == 0).all()
    lp.sum().backward()
    assert model.transformer.wte.weight.grad is not None


def test_generation_left_padded_prompts_of_different_lengths(model, tokenizer, hand_log_probs):
    policy = TransformersWrapper(model, tokenizer=tokenizer, generate_kwargs={"max_new_tokens": 6})
    td = _batch().exclude(("tokens", "response"), ("masks", "response_mask"))
    out = policy(td)
    resp, mask, lp = out["tokens", "response"], out["masks", "response_mask"], out["log_probs", "response"]
    assert resp.shape[0] == 3 and resp.shape[1] <= 6 and mask.dtype == torch.bool
    assert lp.shape == resp.shape and not lp.requires_grad
    eos = tokenizer.eos_token_id
    for i, p in enumerate(PROMPTS):
        n = int(mask[i].sum())
        assert mask[i, :n].all() and not mask[i, n:].any()  # a prefix
        row = resp[i, :n].tolist()
        assert eos not in row[:-1]  # the first EOS ends the response, and is kept
        if n < resp.shape[1]:
            assert row[-1] == eos and (resp[i, n:] == tokenizer.pad_token_id).all()
        # exact: equal to a hand computation on the unpadded row
        torch.testing.assert_close(lp[i, :n], hand_log_probs(model, p, row), atol=1e-5, rtol=1e-5)
    assert isinstance(out["text", "response"], list) and len(out["text", "response"]) == 3


def test_generation_then_scoring_round_trip_and_generate_scores(model):
    """The recorded log-probs equal a re-score, and generate()'s own scores (no warping by default)."""
    policy = TransformersWrapper(model, generate_kwargs={"max_new_tokens": 5})
    td = _batch().exclude(("tokens", "response"), ("masks", "response_mask"))
    out = policy(td)
    rescored = TransformersWrapper(model, generate=False)(out.copy())["log_probs", "response"]
    torch.testing.assert_close(rescored, out["log_probs", "response"], atol=1e-5, rtol=1e-5)
    # generate()'s per-step scores: with top_k=0, top_p=1, temperature=1 they are the raw logits
    p, pm = td["tokens", "prompt"], td["masks", "prompt_attention_mask"]
    gen = model.generate(
        input_ids=p,
        attention_mask=pm.long(),
        max_new_tokens=4,
        min_new_tokens=4,
        do_sample=True,
        top_k=0,
        top_p=1.0,
        temperature=1.0,
        output_scores=True,
        return_dict_in_generate=True,
        pad_token_id=0,
        eos_token_id=None,
    )
    response = gen.sequences[:, p.shape[1] :]
    from_scores = torch.stack(gen.scores, 1).log_softmax(-1).gather(-1, response.unsqueeze(-1)).squeeze(-1)
    td2 = td.copy()
    td2["tokens", "response"] = response
    td2["masks", "response_mask"] = torch.ones_like(response, dtype=torch.bool)
    ours = TransformersWrapper(model, generate=False)(td2)["log_probs", "response"]
    torch.testing.assert_close(ours, from_scores, atol=1e-4, rtol=1e-4)


def test_eos_masking_rule(model):
    """Tokens after the first EOS are masked and replaced by the pad id (forced with a biased head)."""
    with torch.no_grad():
        model.lm_head.weight.zero_()  # tied with wte: zero logits everywhere...
    policy = TransformersWrapper(model, generate_kwargs={"max_new_tokens": 8, "do_sample": False})
    td = _batch().exclude(("tokens", "response"), ("masks", "response_mask"))
    out = policy(td)
    # all logits equal: greedy picks id 0 (pad) forever, never EOS -> the whole response is valid
    assert out["masks", "response_mask"].all()
    assert torch.allclose(
        out["log_probs", "response"], torch.full_like(out["log_probs", "response"], -torch.log(torch.tensor(26.0)))
    )


def test_batch_of_two_dims_is_flattened_and_restored(model):
    scorer = TransformersWrapper(model, generate=False)
    flat = scorer(_batch())["log_probs", "response"]
    td = _batch(PROMPTS * 2, RESPONSES * 2).reshape(2, 3)
    out = scorer(td)
    assert out["log_probs", "response"].shape == (2, 3, 3)
    torch.testing.assert_close(out["log_probs", "response"][1], flat, atol=1e-5, rtol=1e-5)


def test_text_mode(model, tokenizer, hand_log_probs):
    policy = TransformersWrapper(model, tokenizer=tokenizer, input_mode="text", generate_kwargs={"max_new_tokens": 3})
    td = TensorDict(batch_size=[2])
    td.set(("text", "prompt"), ["the cat", "hello world how"])
    out = policy(td)
    expected = tokenize_prompts(["the cat", "hello world how"], tokenizer)
    assert torch.equal(out["tokens", "prompt"], expected["tokens", "prompt"])
    assert out["tokens", "response"].shape[0] == 2
    scorer = TransformersWrapper(model, tokenizer=tokenizer, input_mode="text", generate=False)
    td2 = TensorDict(batch_size=[1])
    td2.set(("text", "prompt"), ["the cat"])
    td2.set(("text", "response"), ["sat on"])
    lp = scorer(td2)["log_probs", "response"]
    ids = tokenizer(["the cat", "sat on"], add_special_tokens=False)["input_ids"]
    torch.testing.assert_close(lp[0], hand_log_probs(model, ids[0], ids[1]), atol=1e-5, rtol=1e-5)


def test_pad_output_false_gives_unpadded_rows_and_accepts_them(model):
    scorer = TransformersWrapper(model, generate=False, pad_output=False)
    rows = scorer(_batch())
    assert rows[1]["tokens", "prompt"].tolist() == PROMPTS[1]
    assert rows[0]["tokens", "response"].tolist() == RESPONSES[0]
    assert rows[1]["log_probs", "response"].shape == (1,)
    # a lazy stack of ragged rows is padded back on input
    ragged = lazy_stack(
        [
            TensorDict(
                {
                    ("tokens", "prompt"): torch.tensor(p),
                    ("masks", "prompt_attention_mask"): torch.ones(len(p), dtype=torch.bool),
                    ("tokens", "response"): torch.tensor(r),
                    ("masks", "response_mask"): torch.ones(len(r), dtype=torch.bool),
                }
            )
            for p, r in zip(PROMPTS, RESPONSES)
        ]
    )
    dense = TransformersWrapper(model, generate=False)(ragged)
    torch.testing.assert_close(
        dense["log_probs", "response"], TransformersWrapper(model, generate=False)(_batch())["log_probs", "response"]
    )


def test_renamed_log_prob_key_for_a_reference_model(model, ref_model):
    ref = TransformersWrapper(ref_model, generate=False, keys={"log_probs": ("ref_log_probs", "response")})
    td = ref(_batch())
    assert ("ref_log_probs", "response") in td.keys(True) and ("log_probs", "response") not in td.keys(True)
    assert ("ref_log_probs", "response") in ref.out_keys


def test_errors(model):
    with pytest.raises(ValueError, match="input_mode"):
        TransformersWrapper(model, input_mode="chat")
    with pytest.raises(ValueError, match="tokenizer"):
        TransformersWrapper(model, input_mode="text")
    with pytest.raises(ValueError, match="unknown key"):
        TransformersWrapper(model, keys={"logprobs": "x"})
    scorer = TransformersWrapper(model, generate=False)
    td = _batch()
    td["masks", "prompt_attention_mask"] = td["masks", "prompt_attention_mask"].flip(-1)  # right-padded
    with pytest.raises(ValueError, match="LEFT-padded"):
        scorer(td)
    with pytest.raises(KeyError, match="response"):
        scorer(_batch().exclude(("tokens", "response")))
    with pytest.raises(KeyError, match="prompt mask"):
        scorer(_batch().exclude(("masks", "prompt_attention_mask")))
