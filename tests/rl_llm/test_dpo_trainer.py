"""DPOTrainer against a per-row hand computation of the DPO losses, exact accumulation, the
reference options (copy, precomputed, PEFT base, soft sync) and the preference rows."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from rl_llm.trainers import DPOConfig, DPOTrainer, dpo_losses, tokenize_preference_row  # noqa: E402

pytestmark = pytest.mark.llm

ROWS = [
    {"prompt": "what is two plus two?", "chosen": " four.", "rejected": " five."},
    {"prompt": "the cat", "chosen": " sat on the mat.", "rejected": " the dog."},
    {"prompt": "hello", "chosen": " there", "rejected": " no"},
    {"prompt": "yes", "chosen": " yes", "rejected": " no no no"},
]


def cfg(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        report_to=[],
        disable_tqdm=True,
        max_steps=3,
        max_grad_norm=None,
        shuffle=False,
        learning_rate=1e-3,
    )
    base.update(kw)
    return DPOConfig(**base)


def answer_log_prob(model, tok, prompt, answer, mean=False):
    """log p(answer + EOS | prompt), one unpadded row at a time."""
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    a = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = torch.tensor([p + a])
    logp = model(input_ids=ids).logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
    picked = logp[len(p) - 1 :]
    return picked.mean() if mean else picked.sum()


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge"])
def test_first_step_loss_equals_a_hand_computation(tok, tmp_path, loss_type, tiny_model):
    policy, ref = tiny_model(tok, 0, dropout=0.1), tiny_model(tok, 1, dropout=0.1)  # the trainer switches dropout off
    policy.eval(), ref.eval()
    beta, ls = 0.2, (0.1 if loss_type == "sigmoid" else 0.0)
    with torch.no_grad():
        expected = []
        for row in ROWS:
            lp = [
                answer_log_prob(m, tok, row["prompt"], row[k], mean=loss_type == "ipo")
                for m in (policy, ref)
                for k in ("chosen", "rejected")
            ]
            z = (lp[0] - lp[2]) - (lp[1] - lp[3])
            if loss_type == "sigmoid":
                expected.append(-(1 - ls) * F.logsigmoid(beta * z) - ls * F.logsigmoid(-beta * z))
            elif loss_type == "ipo":
                expected.append((z - 1 / (2 * beta)) ** 2)
            else:
                expected.append(torch.relu(1 - beta * z))
    trainer = DPOTrainer(
        policy,
        ref_model=ref,
        args=cfg(tmp_path, beta=beta, loss_type=loss_type, label_smoothing=ls),
        train_dataset=ROWS,
        processing_class=tok,
    )
    metrics = trainer.step()
    assert metrics["loss"] == pytest.approx(float(torch.stack(expected).mean()), rel=1e-5)


def test_copied_reference_starts_at_log_two_and_learns(tok, tmp_path, tiny_model):
    trainer = DPOTrainer(
        tiny_model(tok), args=cfg(tmp_path, max_steps=15, learning_rate=3e-3), train_dataset=ROWS, processing_class=tok
    )
    first = trainer.step()
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-6) and first["rewards/margins"] == pytest.approx(
        0.0, abs=1e-6
    )
    last = trainer.train()
    assert last["loss"] < 0.6 and last["rewards/accuracies"] == 1.0
    assert all(not p.requires_grad for p in trainer.reference.model.parameters())


def test_gradient_accumulation_is_exact(tok, tmp_path, tiny_model):
    updates = []
    for batch, accum in [(4, 1), (2, 2), (1, 4)]:
        model = tiny_model(tok)
        before = [p.detach().clone() for p in model.parameters()]
        trainer = DPOTrainer(
            model,
            ref_model=tiny_model(tok, 1),
            args=cfg(tmp_path, per_device_train_batch_size=batch, gradient_accumulation_steps=accum),
            train_dataset=ROWS,
            processing_class=tok,
            optimizers=(torch.optim.SGD(model.parameters(), lr=1.0), None),
        )
        trainer.step()
        updates.append(torch.cat([(b - p.detach()).flatten() for b, p in zip(before, model.parameters())]))
    torch.testing.assert_close(updates[1], updates[0], rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(updates[2], updates[0], rtol=1e-4, atol=1e-7)


def test_precomputed_reference_gives_the_same_losses(tok, tmp_path, tiny_model):
    losses = []
    for pre in (False, True):
        trainer = DPOTrainer(
            tiny_model(tok),
            ref_model=tiny_model(tok, 1),
            args=cfg(tmp_path, precompute_ref_log_probs=pre, per_device_train_batch_size=2),
            train_dataset=ROWS,
            processing_class=tok,
        )
        losses.append([trainer.step()["loss"] for _ in range(3)])
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)


def test_sync_ref_model_mixes_the_policy_in(tok, tmp_path, tiny_model):
    trainer = DPOTrainer(
        tiny_model(tok),
        args=cfg(tmp_path, sync_ref_model=True, ref_model_sync_steps=2, ref_model_mixup_alpha=0.25),
        train_dataset=ROWS,
        processing_class=tok,
    )
    ref0 = [p.clone() for p in trainer.reference.model.parameters()]
    trainer.step()
    assert all(torch.equal(a, b) for a, b in zip(ref0, trainer.reference.model.parameters()))
    trainer.step()
    for old, new, pol in zip(ref0, trainer.reference.model.parameters(), trainer.model.parameters()):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * pol.detach())


def test_peft_trains_only_the_adapter_against_the_base(tok, tmp_path, tiny_model):
    peft = pytest.importorskip("peft")
    model = tiny_model(tok)
    base = [p.detach().clone() for p in model.parameters()]
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], fan_in_fan_out=True)
    trainer = DPOTrainer(
        model,
        args=cfg(tmp_path, save_steps=2, max_steps=2, learning_rate=1e-2),
        train_dataset=ROWS,
        processing_class=tok,
        peft_config=lora,
    )
    assert not trainer.reference.is_copy
    first = trainer.step()  # LoRA's B starts at 0: the policy is the base model
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-6)
    trainer.train()
    trained = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    frozen = [p for n, p in trainer.model.named_parameters() if "lora_" not in n]
    assert all(torch.equal(a, b) for a, b in zip(base, frozen))
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "out" / "checkpoint-2" / "model.safetensors"))
    assert set(saved) == trained


def test_preference_rows(tok):
    args = DPOConfig(max_prompt_length=2, max_length=4)
    prompt, chosen, rejected = tokenize_preference_row(ROWS[0], tok, args)
    full_prompt = tok(ROWS[0]["prompt"], add_special_tokens=False)["input_ids"]
    assert prompt == full_prompt[-2:] and len(chosen) == 2 and len(rejected) == 2
    chat = [{"role": "user", "content": "hello"}]
    row = {
        "chosen": chat + [{"role": "assistant", "content": "there"}],
        "rejected": chat + [{"role": "assistant", "content": "no"}],
    }
    p, c, r = tokenize_preference_row(row, tok, DPOConfig(chat_template="chatml"))
    assert tok.decode(p) == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(c) == "there<|im_end|>\n" and tok.decode(r) == "no<|im_end|>\n"
    with pytest.raises(ValueError, match="share no first message"):
        tokenize_preference_row(
            {"chosen": [{"role": "user", "content": "a"}], "rejected": [{"role": "user", "content": "b"}]},
            tok,
            DPOConfig(),
        )
    with pytest.raises(ValueError, match="'prompt', 'chosen' and 'rejected'"):
        tokenize_preference_row({"prompt": "a", "completion": "b"}, tok, DPOConfig())
    with pytest.raises(ValueError, match="must exceed max_prompt_length"):
        DPOConfig(max_prompt_length=8, max_length=8)
    with pytest.raises(ValueError, match="loss_type must be one of"):
        DPOConfig(loss_type="kto")


def test_dpo_losses_formula():
    c, r = torch.tensor([1.0, -1.0]), torch.tensor([0.0, 0.5])
    zero = torch.zeros(2)
    z = c - r
    torch.testing.assert_close(dpo_losses(c, r, zero, zero, beta=0.5), -F.logsigmoid(0.5 * z))
    torch.testing.assert_close(dpo_losses(c, r, zero, zero, beta=0.5, loss_type="hinge"), torch.relu(1 - 0.5 * z))
    torch.testing.assert_close(dpo_losses(c, r, zero, zero, beta=0.5, loss_type="ipo"), (z - 1.0) ** 2)
