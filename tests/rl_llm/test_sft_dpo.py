"""SFTLoss and DPOLoss against hand-written references, gradients, and tiny learning runs."""

from __future__ import annotations

import math

import pytest
import torch
from rl_llm import DPOLoss, SFTLoss, TransformersWrapper
from rl_llm.data import make_preference_batch, set_texts, tokenize_pairs
from tdict import TensorDict


def _pairs(tokenizer):
    return tokenize_pairs(["the cat", "hello world how"], ["sat on the mat", "are"], tokenizer)


@pytest.mark.parametrize("normalize", [True, False])
def test_sft_matches_reference(model, tokenizer, hand_log_probs, normalize):
    td = _pairs(tokenizer)
    out = SFTLoss(TransformersWrapper(model, generate=False), normalize_by_seq_length=normalize)(td)
    per_seq = []
    for prompt, response in (("the cat", "sat on the mat"), ("hello world how", "are")):
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        r = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        lp = hand_log_probs(model, p, r)  # prompt tokens are never scored
        per_seq.append(-(lp.mean() if normalize else lp.sum()).item())
    assert out["loss_sft"].item() == pytest.approx(sum(per_seq) / 2, rel=1e-5)
    out["loss_sft"].backward()
    assert model.transformer.wte.weight.grad is not None


def test_sft_from_text_with_tokenizer(model, tokenizer):
    td = TensorDict(batch_size=[2])
    set_texts(td, ("text", "prompt"), ["the cat", "hello world how"])
    set_texts(td, ("text", "response"), ["sat on the mat", "are"])
    a = SFTLoss(TransformersWrapper(model, generate=False), tokenizer=tokenizer)(td)["loss_sft"]
    b = SFTLoss(TransformersWrapper(model, generate=False))(_pairs(tokenizer))["loss_sft"]
    torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="loss_function"):
        SFTLoss(TransformersWrapper(model, generate=False), loss_function="minor_sft")


def test_sft_learns_a_fixed_continuation(model, tokenizer):
    td = tokenize_pairs(["the cat", "a dog"], ["sat on the mat", "ran in the park"], tokenizer)
    loss = SFTLoss(TransformersWrapper(model, generate=False))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(40):
        opt.zero_grad()
        loss(td)["loss_sft"].backward()
        opt.step()
    greedy = TransformersWrapper(model, tokenizer=tokenizer, generate_kwargs={"max_new_tokens": 6, "do_sample": False})
    out = greedy(td.select(("tokens", "prompt"), ("masks", "prompt_attention_mask")))
    assert out["text", "response"] == ["sat on the mat", "ran in the park"]
    assert torch.equal(
        out["tokens", "response"][:, :5][out["masks", "response_mask"][:, :5]],
        td["tokens", "response"][td["masks", "response_mask"]],
    )


def _sequence_lp(model, hand_log_probs, tokenizer, prompt, response):
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return hand_log_probs(model, p, r).sum().item()


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_dpo_matches_reference_with_ref_network(model, ref_model, tokenizer, hand_log_probs, label_smoothing):
    prompts, chosen, rejected = ["the cat", "yes"], ["sat on", "no maybe"], ["ran", "blue"]
    td = make_preference_batch(prompts, chosen, rejected, tokenizer)
    loss = DPOLoss(
        TransformersWrapper(model, generate=False),
        beta=0.5,
        ref_network=TransformersWrapper(ref_model, generate=False),
        label_smoothing=label_smoothing,
    )
    out = loss(td)
    losses, margins = [], []
    for p, c, r in zip(prompts, chosen, rejected):
        pc, pr = (_sequence_lp(model, hand_log_probs, tokenizer, p, x) for x in (c, r))
        rc, rr = (_sequence_lp(ref_model, hand_log_probs, tokenizer, p, x) for x in (c, r))
        z = 0.5 * ((pc - rc) - (pr - rr))
        ls = lambda x: -math.log1p(math.exp(-x))
        losses.append(-(1 - label_smoothing) * ls(z) - label_smoothing * ls(-z))
        margins.append(z)
    assert out["loss_dpo"].item() == pytest.approx(sum(losses) / 2, rel=1e-5)
    assert out["reward_margin"].item() == pytest.approx(sum(margins) / 2, abs=1e-5)
    assert out["reward_accuracy"].item() == pytest.approx(sum(m > 0 for m in margins) / 2)
    out["loss_dpo"].backward()
    assert model.transformer.wte.weight.grad is not None
    assert all(p.grad is None for p in ref_model.parameters())
    assert not any(p is q for p in loss.parameters() for q in ref_model.parameters())


def test_dpo_stored_reference_equals_ref_network(model, ref_model, tokenizer):
    td = make_preference_batch(["the cat"], ["sat on"], ["ran"], tokenizer)
    ref = TransformersWrapper(ref_model, generate=False, keys={"log_probs": ("ref_log_probs", "response")})
    with torch.no_grad():
        td["chosen"] = ref(td["chosen"])
        td["rejected"] = ref(td["rejected"])
    a = DPOLoss(TransformersWrapper(model, generate=False))(td)["loss_dpo"]
    b = DPOLoss(TransformersWrapper(model, generate=False), ref_network=TransformersWrapper(ref_model, generate=False))(
        td
    )["loss_dpo"]
    torch.testing.assert_close(a, b)
    del td["chosen", "ref_log_probs"]
    with pytest.raises(KeyError, match="ref_log_probs"):
        DPOLoss(TransformersWrapper(model, generate=False))(td)
    with pytest.raises(ValueError, match="beta"):
        DPOLoss(TransformersWrapper(model, generate=False), beta=0.0)


def test_dpo_increases_the_margin(model, ref_model, tokenizer):
    td = make_preference_batch(
        ["the cat", "hello world"], ["sat on the mat", "how are you"], ["ran in", "red blue"], tokenizer
    )
    ref_model.load_state_dict(model.state_dict())  # the usual set-up: reference = initial policy
    loss = DPOLoss(
        TransformersWrapper(model, generate=False), beta=0.1, ref_network=TransformersWrapper(ref_model, generate=False)
    )
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    first = loss(td)
    assert first["reward_margin"].item() == pytest.approx(0.0, abs=1e-6)
    assert first["loss_dpo"].item() == pytest.approx(math.log(2), rel=1e-5)
    for _ in range(15):
        opt.zero_grad()
        loss(td)["loss_dpo"].backward()
        opt.step()
    last = loss(td)
    assert last["reward_margin"].item() > 0.5
    assert last["reward_accuracy"].item() == 1.0
    assert last["loss_dpo"].item() < 0.5 * math.log(2)
