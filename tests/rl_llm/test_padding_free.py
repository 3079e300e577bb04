"""Padding-free forward passes (rl_llm.padding_free): each sequence of a row gets what it gets alone,
log-probs and gradients equal the padded pass, and what cannot be done is refused."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from rl_llm.losses import response_log_probs, sequence_log_probs  # noqa: E402
from rl_llm.padding_free import (
    ATTENTION_NAME,
    boundaries,
    padding_free_attention,
    run_padding_free,
    supports_padding_free,
)  # noqa: E402
from rl_llm.trainers import DPOConfig, DPOTrainer, GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer  # noqa: E402

pytestmark = pytest.mark.llm
VOCAB = 23


def gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            n_layer=2,
            n_head=2,
            n_embd=16,
            n_positions=64,
            vocab_size=VOCAB,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
    )


def llama_gqa() -> torch.nn.Module:  # grouped-query attention: 4 query heads share 2 key/value heads
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            num_hidden_layers=2,
            hidden_size=16,
            intermediate_size=32,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=VOCAB,
            max_position_embeddings=64,
        )
    )


MODELS = {"gpt2": gpt2, "llama-gqa": llama_gqa}


@pytest.fixture(params=["one call per sequence", "one padded call"])
def attention_path(request, monkeypatch):
    """Force either way varlen_attention can attend (it picks the cheaper by an estimate)."""
    import rl_llm.padding_free as pf

    monkeypatch.setattr(pf, "_CALL_COST", {"cpu": 0.0 if request.param == "one call per sequence" else float("inf")})
    return request.param


def drops_boundaries() -> torch.nn.Module:
    """A GPT-2 whose backbone drops the sequence boundaries instead of passing them to its attention."""

    class Dropping(transformers.GPT2Model):
        def forward(self, *args, cu_seq_lens_q=None, cu_seq_lens_k=None, **kwargs):
            return super().forward(*args, **kwargs)

    model = gpt2()
    model.transformer = Dropping(model.config)
    return model


def ragged(lengths: list[int], seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (n,), generator=generator) for n in lengths]


def grads(model: torch.nn.Module) -> list[torch.Tensor]:
    out = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("name", MODELS)
def test_each_sequence_gets_the_logits_it_gets_alone(name, attention_path):
    model = MODELS[name]().eval()
    seqs = ragged([1, 5, 9, 3])
    lengths = torch.tensor([len(s) for s in seqs])
    cu = boundaries(lengths)
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    before = model.config._attn_implementation
    with torch.no_grad():
        packed = run_padding_free(model, model, torch.cat(seqs)[None], cu, positions).logits[0]
        for seq, a, b in zip(seqs, cu[:-1].tolist(), cu[1:].tolist()):
            torch.testing.assert_close(packed[a:b], model(seq[None]).logits[0], atol=2e-5, rtol=1e-4)
    assert model.config._attn_implementation == before != ATTENTION_NAME
    assert cu.tolist() == [0, 1, 6, 15, 18] and cu.dtype == torch.int32


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("chunk_size", [None, 4])
def test_response_log_probs_and_gradients_equal_the_padded_pass(name, chunk_size, attention_path):
    model = MODELS[name]().train()
    prompts, responses = ragged([3, 1, 4], seed=1), ragged([5, 2, 0], seed=2)
    prompt = torch.zeros(3, 4, dtype=torch.long)
    prompt_mask = torch.zeros(3, 4, dtype=torch.bool)
    response = torch.zeros(3, 6, dtype=torch.long)
    response_mask = torch.zeros(3, 6, dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        prompt[i, 4 - len(p) :], prompt_mask[i, 4 - len(p) :] = p, True
        response[i, : len(r)], response_mask[i, : len(r)] = r, True
    weights = torch.linspace(-1, 1, 18).reshape(3, 6)
    results = []
    for padding_free in (False, True):
        lp, entropy = response_log_probs(
            model,
            prompt,
            prompt_mask,
            response,
            response_mask,
            temperature=0.7,
            chunk_size=chunk_size,
            return_entropy=chunk_size is None,
            padding_free=padding_free,
        )
        (lp * weights).sum().backward()
        results.append((lp.detach(), entropy, grads(model)))
    (lp_pad, ent_pad, g_pad), (lp_free, ent_free, g_free) = results
    torch.testing.assert_close(lp_free, lp_pad, atol=2e-5, rtol=1e-4)
    assert bool((lp_free[~response_mask] == 0).all()) and bool((lp_free[response_mask] < 0).all())
    if chunk_size is None:
        torch.testing.assert_close(ent_free, ent_pad, atol=2e-5, rtol=1e-4)
    for a, b in zip(g_free, g_pad):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("lengths", [[2], [7, 2, 5], [3, 3, 3, 3]])
def test_sequence_log_probs_equal_each_sequence_alone(lengths):
    model = gpt2().eval()
    seqs = ragged(lengths, seed=3)
    with torch.no_grad():
        out = sequence_log_probs(model, torch.cat(seqs)[None], None, cu_seq_lens=boundaries(lengths))[0]
        start = 0
        for seq in seqs:
            alone = sequence_log_probs(model, seq[None], torch.ones(1, len(seq), dtype=torch.long))[0]
            torch.testing.assert_close(out[start : start + len(seq)], alone, atol=2e-5, rtol=1e-4)
            assert float(out[start]) == 0.0  # a sequence's first token has no context
            start += len(seq)


def test_activation_checkpointing_needs_the_block_and_is_exact_inside_it():
    seqs = ragged([4, 6], seed=4)
    ids, cu = torch.cat(seqs)[None], boundaries([4, 6])
    plain = gpt2().train()
    sequence_log_probs(plain, ids, None, cu_seq_lens=cu).sum().backward()
    expected = grads(plain)
    model = gpt2().train()
    (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    with pytest.raises(ValueError, match="checkpoints activations"):
        sequence_log_probs(model, ids, None, cu_seq_lens=cu)
    with padding_free_attention(model):  # the recomputed forward in backward() attends within each sequence too
        sequence_log_probs(model, ids, None, cu_seq_lens=cu).sum().backward()
    for a, b in zip(grads(model), expected):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_what_cannot_run_padding_free_is_refused():
    dropping = drops_boundaries()
    with pytest.raises(RuntimeError, match="did not pass the sequence boundaries"):
        sequence_log_probs(dropping, torch.tensor([[1, 2, 3, 4]]), None, cu_seq_lens=boundaries([2, 2]))
    assert not supports_padding_free(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="AttentionInterface"):
        with padding_free_attention(torch.nn.Linear(2, 2)):
            pass
    model = gpt2()
    with pytest.raises(ValueError, match="attention_mask=None"):
        sequence_log_probs(model, torch.tensor([[1, 2, 3]]), torch.ones(1, 3), cu_seq_lens=boundaries([3]))
    with pytest.raises(ValueError, match="rise from 0 to 3"):
        sequence_log_probs(model, torch.tensor([[1, 2, 3]]), None, cu_seq_lens=boundaries([2]))
    holes = torch.tensor([[True, False, True]])  # a response mask that is not a prefix
    with pytest.raises(ValueError, match="prefix"):
        response_log_probs(
            model, torch.tensor([[1]]), torch.tensor([[True]]), torch.tensor([[2, 3, 4]]), holes, padding_free=True
        )


# ---------------------------------------------------------------------------- the trainers
class NoBackend(transformers.GPT2LMHeadModel):
    _supports_attention_backend = False


def test_trainers_pick_padding_free_when_the_model_supports_it(tok, tmp_path):
    rows = [{"text": "the cat sat"}]
    common = dict(output_dir=str(tmp_path), report_to=[], disable_tqdm=True, max_steps=1)
    assert SFTTrainer(gpt2(), args=SFTConfig(**common), train_dataset=rows, processing_class=tok).padding_free
    other = NoBackend(gpt2().config)
    assert not SFTTrainer(other, args=SFTConfig(**common), train_dataset=rows, processing_class=tok).padding_free
    with pytest.raises(ValueError, match="padding_free=True but NoBackend"):
        SFTTrainer(other, args=SFTConfig(**common, padding_free=True), train_dataset=rows, processing_class=tok)

    # claims the attention backend but loses the keyword: the probe finds out
    assert not SFTTrainer(
        drops_boundaries(), args=SFTConfig(**common), train_dataset=rows, processing_class=tok
    ).padding_free


def _first_step(trainer_cls, config, rows, tok, tiny_model, **kwargs):
    model = tiny_model(tok)
    trainer = trainer_cls(
        model,
        args=config,
        train_dataset=rows,
        processing_class=tok,
        optimizers=(torch.optim.SGD(model.parameters(), lr=1.0), None),
        **kwargs,
    )
    before = [p.detach().clone() for p in model.parameters()]
    metrics = trainer.step()
    return metrics, torch.cat([(b - p.detach()).flatten() for b, p in zip(before, model.parameters())])


@pytest.mark.parametrize("gradient_checkpointing", [False, True])
def test_grpo_and_dpo_steps_equal_their_padded_steps(tok, tiny_model, tmp_path, gradient_checkpointing):
    """The same first step (loss and SGD update) padded or padding-free, with and without checkpointing."""
    grpo_rows = [{"prompt": "what is two plus two?"}, {"prompt": "the cat"}]
    dpo_rows = [
        {"prompt": "what is two plus two?", "chosen": " four.", "rejected": " five five."},
        {"prompt": "hello", "chosen": " there", "rejected": " no"},
    ]

    def length(completions=(), **kwargs):
        return [float(len(c)) for c in completions]

    for padding_free in (False, True):
        common = dict(
            output_dir=str(tmp_path / str(padding_free)),
            report_to=[],
            disable_tqdm=True,
            max_steps=1,
            seed=3,
            max_grad_norm=None,
            padding_free=padding_free,
            gradient_checkpointing=gradient_checkpointing,
        )
        grpo = _first_step(
            GRPOTrainer,
            GRPOConfig(
                **common,
                per_device_train_batch_size=4,
                num_generations=4,
                max_completion_length=6,
                beta=0.1,
                log_completions=False,
            ),
            grpo_rows,
            tok,
            tiny_model,
            reward_funcs=length,
        )
        dpo = _first_step(DPOTrainer, DPOConfig(**common, per_device_train_batch_size=2), dpo_rows, tok, tiny_model)
        if not padding_free:
            expected = grpo, dpo
    for (metrics, update), (want_metrics, want_update) in zip((grpo, dpo), expected):
        assert metrics["loss"] == pytest.approx(want_metrics["loss"], rel=1e-5, abs=1e-7)
        torch.testing.assert_close(update, want_update, atol=1e-6, rtol=1e-4)


def test_the_output_layer_runs_only_where_a_response_token_is_predicted():
    """As transformers' logits_to_keep: prompt positions never reach the [positions, vocab] product."""
    model = gpt2().eval()
    rows = []
    model.lm_head.register_forward_hook(lambda module, args, out: rows.append(args[0].shape[0]))
    prompt, prompt_mask = (
        torch.tensor([[0, 3, 4, 5], [6, 7, 8, 9]]),
        torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.bool),
    )
    response, response_mask = (
        torch.tensor([[10, 11, 0], [12, 13, 14]]),
        torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool),
    )
    with torch.no_grad():
        free, _ = response_log_probs(model, prompt, prompt_mask, response, response_mask, padding_free=True)
        padded, _ = response_log_probs(model, prompt, prompt_mask, response, response_mask)
    assert rows[0] == 5 == int(response_mask.sum())  # then the padded pass: every position of the [2, 7] batch
    torch.testing.assert_close(free, padded, atol=2e-5, rtol=1e-4)


def test_sequence_log_probs_score_only_the_needed_tokens():
    model = gpt2().eval()
    rows = []
    model.lm_head.register_forward_hook(lambda module, args, out: rows.append(args[0].shape[0]))
    ids, cu = torch.tensor([[3, 4, 5, 6, 7, 8, 9]]), boundaries([4, 3])
    needed = torch.tensor([[False, False, True, True, False, True, True]])
    with torch.no_grad():
        some = sequence_log_probs(model, ids, None, cu_seq_lens=cu, needed=needed)
        every = sequence_log_probs(model, ids, None, cu_seq_lens=cu)
    assert rows == [4, 5]  # the needed tokens, then every token but the two sequence starts
    torch.testing.assert_close(some[needed], every[needed])
    assert bool((some[~needed] == 0).all())
    with pytest.raises(ValueError, match="shaped like input_ids"):
        sequence_log_probs(model, ids, None, cu_seq_lens=cu, needed=needed[:, :3])
