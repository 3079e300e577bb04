"""GRPOTrainer against per-completion hand computations (advantages, loss types, clipping, GSPO, KL),
exact accumulation, tempered log-probs, truncated completions, rewards and the command."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from rl_llm import TransformersWrapper  # noqa: E402
from rl_llm.cli import main as cli_main  # noqa: E402
from rl_llm.rewards import RewardModel, exact_match, numeric_match, weighted_sum  # noqa: E402
from rl_llm.trainers import GRPOConfig, GRPOTrainer, grpo_advantages  # noqa: E402

pytestmark = pytest.mark.llm

ROWS = [
    {"prompt": "what is two plus two?", "answer": "4"},
    {"prompt": "what is one plus one?", "answer": "2"},
    {"prompt": "numbers: 1 +", "answer": "3"},
    {"prompt": "the cat", "answer": "1"},
]


def digits_reward(prompts=None, completions=(), completion_ids=(), **kwargs):
    """The share of digit characters in the completion (a dense reward for tests)."""
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def length_reward(prompts=None, completions=(), completion_ids=(), **kwargs):
    return [float(len(ids)) for ids in completion_ids]


def cfg(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=6,
        report_to=[],
        disable_tqdm=True,
        max_steps=2,
        max_grad_norm=None,
        shuffle=False,
        learning_rate=1e-3,
        log_completions=False,
    )
    base.update(kw)
    return GRPOConfig(**base)


def completion_log_probs(model, tok, prompt_ids, completion_ids, temperature):
    """log-probs of one completion's tokens given its prompt, one unpadded row."""
    ids = torch.tensor([prompt_ids + completion_ids])
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1] / temperature
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion_ids)[:, None])[:, 0]


def rows_of(batch, i):
    """The i-th completion's (prompt ids, completion ids)."""
    p = batch["prompt"][i][batch["prompt_mask"][i]].tolist()
    c = batch["completion"][i][batch["valid"][i]].tolist()
    return p, c


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_first_step_loss_equals_a_hand_computation(tok, tiny_model, tmp_path, loss_type):
    """num_iterations=1: the ratio is 1, so each token's loss is -A (plus beta * k3 to a reference)."""
    beta = 0.05
    model, ref = tiny_model(tok, 0), tiny_model(tok, 1)
    trainer = GRPOTrainer(
        model,
        reward_funcs=digits_reward,
        args=cfg(
            tmp_path,
            loss_type=loss_type,
            beta=beta,
            temperature=0.7,
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,
        ),
        train_dataset=ROWS,
        processing_class=tok,
        ref_model=ref,
    )
    batch = trainer._new_round()
    trainer._round, trainer._round_uses = batch, 0
    with torch.no_grad():
        per_seq, sums, counts = [], [], []
        for i in range(8):
            p, c = rows_of(batch, i)
            lp = completion_log_probs(model, tok, p, c, 0.7)
            rlp = completion_log_probs(ref, tok, p, c, 0.7)
            delta = rlp - lp
            token = -batch["advantages"][i] + beta * (delta.exp() - delta - 1)
            per_seq.append(token.mean())
            sums.append(token.sum())
            counts.append(len(c))
        if loss_type == "grpo":
            expected = torch.stack(per_seq).mean()
        elif loss_type == "bnpo":
            expected = (
                torch.stack(sums[:4]).sum() / sum(counts[:4]) + torch.stack(sums[4:]).sum() / sum(counts[4:])
            ) / 2
        elif loss_type == "dapo":
            expected = torch.stack(sums).sum() / sum(counts)
        else:
            expected = torch.stack(sums).sum() / (8 * 6)
    metrics = trainer.step()
    assert metrics["loss"] == pytest.approx(float(expected), rel=1e-4, abs=1e-6)
    assert metrics["clip_ratio"] == 0.0 and metrics["kl"] >= 0


def test_advantages_per_group_batch_or_none():
    r = torch.tensor([1.0, 3.0, 0.0, 0.0, 5.0, 1.0])
    groups = r.view(3, 2)
    centred = (groups - groups.mean(-1, keepdim=True)).flatten()
    torch.testing.assert_close(grpo_advantages(r, 2, "group"), centred / (groups.std(-1).repeat_interleave(2) + 1e-4))
    torch.testing.assert_close(grpo_advantages(r, 2, "batch"), centred / (r.std() + 1e-4))
    torch.testing.assert_close(grpo_advantages(r, 2, "none"), centred)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_later_iterations_clip_the_importance_weight(tok, tiny_model, tmp_path, level):
    """num_iterations=2: the second step reuses the round with the recorded behaviour log-probs."""
    model = tiny_model(tok, 0)
    trainer = GRPOTrainer(
        model,
        reward_funcs=digits_reward,
        args=cfg(
            tmp_path,
            num_iterations=2,
            learning_rate=5e-2,
            epsilon=0.1,
            epsilon_high=0.3,
            importance_sampling_level=level,
        ),
        train_dataset=ROWS,
        processing_class=tok,
    )
    trainer.step()
    batch = trainer._round
    with torch.no_grad():
        sums, count = torch.zeros(()), 0
        for i in range(8):
            p, c = rows_of(batch, i)
            lp = completion_log_probs(model, tok, p, c, 1.0)
            log_ratio = lp - batch["old"][i][: len(c)]
            if level == "sequence":
                log_ratio = log_ratio.mean().expand_as(lp)
            w, a = log_ratio.exp(), batch["advantages"][i]
            sums = sums + (-torch.minimum(w * a, w.clamp(0.9, 1.3) * a)).sum()
            count += len(c)
    metrics = trainer.step()
    assert trainer._round is batch  # no new generation for the second iteration
    assert metrics["loss"] == pytest.approx(float(sums / count), rel=1e-4, abs=1e-6)


def test_gradient_accumulation_is_exact(tok, tiny_model, tmp_path):
    updates, rounds = [], None
    for batch_size, accum in [(8, 1), (2, 4)]:
        model = tiny_model(tok, 0)
        before = [p.detach().clone() for p in model.parameters()]
        trainer = GRPOTrainer(
            model,
            reward_funcs=digits_reward,
            args=cfg(tmp_path, per_device_train_batch_size=batch_size, gradient_accumulation_steps=accum),
            train_dataset=ROWS,
            processing_class=tok,
            optimizers=(torch.optim.SGD(model.parameters(), lr=1.0), None),
        )
        torch.manual_seed(3)
        rounds = trainer._new_round() if rounds is None else rounds  # the same completions for both splits
        trainer._round, trainer._round_uses = rounds, 0
        trainer.step()
        updates.append(torch.cat([(b - p.detach()).flatten() for b, p in zip(before, model.parameters())]))
    torch.testing.assert_close(updates[1], updates[0], rtol=1e-4, atol=1e-7)


def test_recorded_log_probs_follow_the_temperature(tok, tiny_model):
    model = tiny_model(tok, 0).eval()
    policy = TransformersWrapper(model, tokenizer=tok, generate_kwargs={"temperature": 0.7, "max_new_tokens": 5})
    from rl_llm.data import tokenize_prompts

    out = policy(tokenize_prompts(["the cat"], tok))
    c = out["tokens", "response"][0][out["masks", "response_mask"][0]].tolist()
    with torch.no_grad():
        expected = completion_log_probs(model, tok, tok("the cat", add_special_tokens=False)["input_ids"], c, 0.7)
    torch.testing.assert_close(out["log_probs", "response"][0][: len(c)], expected, rtol=1e-5, atol=1e-5)


def test_truncated_completions_can_be_left_out(tok, tiny_model, tmp_path):
    trainer = GRPOTrainer(
        tiny_model(tok, 0),
        reward_funcs=length_reward,
        args=cfg(tmp_path, mask_truncated_completions=True, max_completion_length=3),
        train_dataset=ROWS,
        processing_class=tok,
    )
    batch = trainer._new_round()
    ended = (batch["completion"] == tok.eos_token_id).any(-1)
    assert torch.equal(batch["mask"].any(-1), ended & batch["valid"].any(-1))
    assert torch.equal(batch["mask"][~ended], torch.zeros_like(batch["mask"][~ended]))


def test_rewards_are_weighted_and_none_skips(tok, tiny_model, tmp_path):
    def sometimes(prompts=None, completions=(), **kw):
        return [None if i % 2 else 1.0 for i in range(len(completions))]

    trainer = GRPOTrainer(
        tiny_model(tok, 0),
        reward_funcs=[length_reward, sometimes],
        train_dataset=ROWS,
        args=cfg(tmp_path, reward_weights=[0.5, 2.0]),
        processing_class=tok,
    )
    batch = trainer._new_round()
    lengths = batch["valid"].sum(-1).float()
    expected = 0.5 * lengths + 2.0 * torch.tensor([0.0 if i % 2 else 1.0 for i in range(8)])
    torch.testing.assert_close(batch["rewards"], expected)
    assert batch["per_func"]["rewards/sometimes"] == 1.0


def test_dataset_columns_reach_the_reward_functions(tok, tiny_model, tmp_path):
    seen = {}

    def spy(prompts=None, completions=(), completion_ids=(), answer=(), **kw):
        seen["answer"], seen["prompts"] = list(answer), list(prompts)
        return [0.0] * len(completions)

    trainer = GRPOTrainer(
        tiny_model(tok, 0), reward_funcs=spy, args=cfg(tmp_path), train_dataset=ROWS, processing_class=tok
    )
    trainer._new_round()
    assert (
        seen["answer"] == ["4"] * 4 + ["2"] * 4 and seen["prompts"] == [ROWS[0]["prompt"]] * 4 + [ROWS[1]["prompt"]] * 4
    )


def test_reward_functions():
    assert exact_match()(completions=[[{"role": "assistant", "content": " 4 "}], "5"], answer=["4", "4"]) == [1.0, 0.0]
    assert numeric_match(last=False)(completions=["3 then 4"], answer=[3]) == [1.0]
    total = weighted_sum([exact_match(), numeric_match()], [1.0, 0.5])
    assert total(completions=["4", "x 4"], answer=["4", "4"]) == [1.5, 0.5]
    with pytest.raises(KeyError, match="no 'answer' column"):
        exact_match()(completions=["4"])


def test_reward_model(tok):
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=1, n_head=2, n_embd=16, vocab_size=len(tok), num_labels=1, pad_token_id=tok.pad_token_id
    )
    rm = transformers.GPT2ForSequenceClassification(config)
    scores = RewardModel(rm, tok, batch_size=2)(prompts=["the cat", "hello"], completions=[" sat", " there yes"])
    with torch.no_grad():
        alone = [float(rm(**tok([t], return_tensors="pt")).logits[0, 0]) for t in ("the cat sat", "hello there yes")]
    assert scores == pytest.approx(alone, rel=1e-4, abs=1e-5)


def test_resume_equals_an_uninterrupted_run(tok, tiny_model, tmp_path):
    full = GRPOTrainer(
        tiny_model(tok, 0),
        reward_funcs=digits_reward,
        args=cfg(tmp_path / "a", max_steps=4, num_iterations=2),
        train_dataset=ROWS,
        processing_class=tok,
    )
    full.train()
    first = GRPOTrainer(
        tiny_model(tok, 0),
        reward_funcs=digits_reward,
        train_dataset=ROWS,
        processing_class=tok,
        args=cfg(tmp_path / "b", max_steps=4, num_iterations=2, save_steps=2),
    )
    first.step()
    with pytest.raises(RuntimeError, match="between generation rounds"):
        first.save_checkpoint()
    first.step()
    first.save_checkpoint()
    resumed = GRPOTrainer(
        tiny_model(tok, 3),
        reward_funcs=digits_reward,
        train_dataset=ROWS,
        processing_class=tok,
        args=cfg(tmp_path / "b", max_steps=4, num_iterations=2, save_steps=2),
    )
    resumed.train(resume_from_checkpoint=True)
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)


def test_sync_ref_model_mixes_the_policy_in(tok, tiny_model, tmp_path):
    trainer = GRPOTrainer(
        tiny_model(tok, 0),
        reward_funcs=digits_reward,
        train_dataset=ROWS,
        processing_class=tok,
        args=cfg(
            tmp_path,
            beta=0.1,
            sync_ref_model=True,
            ref_model_sync_steps=2,
            ref_model_mixup_alpha=0.5,
            learning_rate=1e-2,
        ),
    )
    ref0 = [p.clone() for p in trainer.reference.model.parameters()]
    trainer.step()
    assert all(torch.equal(a, b) for a, b in zip(ref0, trainer.reference.model.parameters()))
    trainer.step()
    for old, new, pol in zip(ref0, trainer.reference.model.parameters(), trainer.model.parameters()):
        torch.testing.assert_close(new, 0.5 * old + 0.5 * pol.detach())
    with pytest.raises(ValueError, match="sync_ref_model needs beta > 0"):
        GRPOConfig(sync_ref_model=True)


def test_config_checks():
    with pytest.raises(ValueError, match="must be a multiple of num_generations"):
        GRPOConfig(per_device_train_batch_size=6, num_generations=4)
    with pytest.raises(ValueError, match="loss_type must be one of"):
        GRPOConfig(loss_type="ppo")
    with pytest.raises(ValueError, match="save_steps .3. must be a multiple of num_iterations .2."):
        GRPOConfig(save_steps=3, num_iterations=2)
    assert (
        GRPOConfig(
            per_device_train_batch_size=3, gradient_accumulation_steps=4, num_generations=6
        ).generation_batch_size
        == 12
    )


def test_command_runs_grpo_with_a_built_in_reward(tok, tiny_model, tmp_path, capsys):
    model_dir = tmp_path / "model"
    tiny_model(tok, 0).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "trained"
    assert (
        cli_main(
            [
                "grpo",
                f"model_name_or_path={model_dir}",
                f"dataset={data}",
                "reward_funcs=[{name: numeric_match}]",
                "per_device_train_batch_size=8",
                "num_generations=4",
                "max_completion_length=4",
                "max_steps=2",
                f"output_dir={out}",
                "disable_tqdm=true",
                "logging_steps=1",
            ]
        )
        == 0
    )
    assert "rl-llm grpo: 2 steps" in capsys.readouterr().out
    assert (out / "model.safetensors").exists()
    lines = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert {row["step"] for row in lines} == {1, 2} and all("reward" in row for row in lines)


# ---------------------------------------------------------------------------- chunked log-probs
@pytest.mark.parametrize("bias,temperature", [(False, 1.0), (True, 0.7)])
def test_chunked_log_probs_equal_the_full_ones_with_gradients(bias, temperature):
    from rl_llm.losses import token_log_probs_chunked

    torch.manual_seed(0)
    h = torch.randn(3, 7, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    b = torch.randn(50, dtype=torch.float64, requires_grad=True) if bias else None
    t = torch.randint(0, 50, (3, 7))
    g = torch.randn(3, 7, dtype=torch.float64)
    full = ((h @ w.T + (b if bias else 0)) / temperature).log_softmax(-1).gather(-1, t[..., None])[..., 0]
    grads_full = torch.autograd.grad((full * g).sum(), [h, w] + ([b] if bias else []))
    chunked = token_log_probs_chunked(h, w, b, t, chunk_size=4, temperature=temperature)
    grads_chunked = torch.autograd.grad((chunked * g).sum(), [h, w] + ([b] if bias else []))
    torch.testing.assert_close(chunked, full, rtol=1e-10, atol=1e-12)
    for a, c in zip(grads_full, grads_chunked):
        torch.testing.assert_close(c, a, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda h_, w_: token_log_probs_chunked(h_, w_, None, t[:1], chunk_size=5),
        (h.detach()[:1].requires_grad_(), w.detach().requires_grad_()),
    )


def test_chunked_path_through_a_model_and_the_trainers(tok, tiny_model, tmp_path):
    from rl_llm.losses import response_log_probs, sequence_log_probs

    model = tiny_model(tok, 0)
    prompt, pmask = torch.tensor([[0, 5, 6], [7, 8, 9]]), torch.tensor([[0, 1, 1], [1, 1, 1]])
    resp, rmask = torch.tensor([[10, 11, 12, 0], [13, 14, 0, 0]]), torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    full, _ = response_log_probs(model, prompt, pmask, resp, rmask, temperature=0.8)
    grads_full = torch.autograd.grad(full.sum(), list(model.parameters()))
    chunked, _ = response_log_probs(model, prompt, pmask, resp, rmask, temperature=0.8, chunk_size=3)
    grads_chunked = torch.autograd.grad(chunked.sum(), list(model.parameters()))
    torch.testing.assert_close(chunked, full, rtol=1e-5, atol=1e-6)
    for a, c in zip(grads_full, grads_chunked):
        torch.testing.assert_close(c, a, rtol=1e-4, atol=1e-6)
    ids, att = torch.tensor([[3, 4, 5, 0]]), torch.tensor([[1, 1, 1, 0]])
    torch.testing.assert_close(
        sequence_log_probs(model, ids, att, chunk_size=2), sequence_log_probs(model, ids, att), rtol=1e-5, atol=1e-6
    )
    losses = []
    for chunk in (None, 5):
        trainer = GRPOTrainer(
            tiny_model(tok, 0),
            reward_funcs=digits_reward,
            args=cfg(tmp_path, logprob_chunk_size=chunk),
            train_dataset=ROWS,
            processing_class=tok,
        )
        torch.manual_seed(1)
        losses.append(trainer.step()["loss"])
    assert losses[0] == pytest.approx(losses[1], rel=1e-5, abs=1e-7)


def test_chunked_path_through_a_peft_model(tok, tiny_model):
    """With LoRA adapters the backbone is the wrapped model's own (the adapters live in its layers):
    chunked log-probs and the adapters' gradients equal the full path's."""
    peft = pytest.importorskip("peft")
    from rl_llm.losses import response_log_probs

    torch.manual_seed(0)
    model = peft.get_peft_model(
        tiny_model(tok, 0),
        peft.LoraConfig(r=2, target_modules=["c_attn"], fan_in_fan_out=True, init_lora_weights=False),
    )
    adapters = [p for p in model.parameters() if p.requires_grad]
    prompt, pmask = torch.tensor([[0, 5, 6], [7, 8, 9]]), torch.tensor([[0, 1, 1], [1, 1, 1]])
    resp, rmask = torch.tensor([[10, 11, 12, 0], [13, 14, 0, 0]]), torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    full, _ = response_log_probs(model, prompt, pmask, resp, rmask)
    grads_full = torch.autograd.grad(full.sum(), adapters)
    for padding_free in (False, True):
        chunked, _ = response_log_probs(model, prompt, pmask, resp, rmask, chunk_size=3, padding_free=padding_free)
        torch.testing.assert_close(chunked, full, rtol=1e-5, atol=1e-6)
        for a, c in zip(grads_full, torch.autograd.grad(chunked.sum(), adapters)):
            torch.testing.assert_close(c, a, rtol=1e-4, atol=1e-6)


def test_grpo_token_losses_with_beta_needs_the_reference_log_probs():
    from rl_llm.trainers.grpo import grpo_token_losses

    lp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="beta > 0 needs ref_log_probs"):
        grpo_token_losses(
            lp, lp, torch.ones(2), torch.ones(2, 3, dtype=torch.bool), epsilon_low=0.2, epsilon_high=0.2, beta=0.1
        )
