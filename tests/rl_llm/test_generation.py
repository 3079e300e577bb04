"""rl_llm.generation.sample_completions against transformers' own generate(): the same tokens for the
same seed (left-padded prompts, every sampling warper, EOS handling), and the compiled decode step
equal to the eager one, also after the weights change; GRPOTrainer's compile_generation."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from rl_llm.generation import PROMPT_BUCKET, sample_completions, supports_static_cache  # noqa: E402
from rl_llm.trainers import GRPOConfig, GRPOTrainer  # noqa: E402

pytestmark = pytest.mark.llm

EOS, PAD = 1, 0


def _model(seed: int = 0, eos_bias: float = 0.0):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=60, bos_token_id=EOS, eos_token_id=EOS, pad_token_id=PAD
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    if eos_bias:  # make EOS likely, so that rows end at different steps
        model.lm_head = torch.nn.Linear(32, 60, bias=True)
        with torch.no_grad():
            model.lm_head.weight.copy_(model.transformer.wte.weight)
            model.lm_head.bias.zero_()
            model.lm_head.bias[EOS] = eos_bias
    return model


# left-padded prompts of lengths 2, 4 and 3
PROMPT = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10], [0, 11, 12, 13]])
MASK = (torch.arange(4) >= torch.tensor([[2], [0], [1]])).long()


def _generate(model, seed, max_new_tokens=12, eos=EOS, **kw):
    torch.manual_seed(seed)
    out = model.generate(
        input_ids=PROMPT,
        attention_mask=MASK,
        do_sample=True,
        max_new_tokens=max_new_tokens,
        pad_token_id=PAD,
        eos_token_id=eos,
        temperature=kw.get("temperature", 1.0),
        top_k=kw.get("top_k", 0),
        top_p=kw.get("top_p", 1.0),
    )
    return out[:, PROMPT.shape[1] :]


def _ours(model, seed, max_new_tokens=12, eos=EOS, **kw):
    torch.manual_seed(seed)
    return sample_completions(
        model, PROMPT, MASK, max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=PAD, **kw
    )


@pytest.mark.parametrize(
    "warpers", [{}, {"temperature": 0.7}, {"top_k": 5}, {"top_p": 0.8, "temperature": 1.3}, {"top_k": 7, "top_p": 0.9}]
)
@pytest.mark.parametrize("seed", [0, 1])
def test_same_tokens_as_generate_for_the_same_seed(warpers, seed):
    model = _model()
    expected = _generate(model, seed, **warpers)
    got = _ours(model, seed, **warpers)
    assert got.shape == expected.shape == (3, 12)
    assert torch.equal(got, expected)


def test_rows_end_at_their_eos_and_sampling_stops_when_all_have_ended():
    model = _model(eos_bias=3.0)
    for seed in range(4):
        expected, got = _generate(model, seed, max_new_tokens=20), _ours(model, seed, max_new_tokens=20)
        assert torch.equal(got, expected)
        assert got.shape[1] < 20  # every row ended before the limit
        for row in got.tolist():
            end = row.index(EOS)
            assert all(t == PAD for t in row[end + 1 :])
    # without an EOS id every row runs to the limit
    assert _ours(model, 0, max_new_tokens=20, eos=None).shape == (3, 20)


def test_compiled_decode_equals_eager_also_after_the_weights_change():
    model = _model()
    eager = _ours(model, 0, top_k=1)  # greedy: no draw can flip on a last-bit difference
    compiled = _ours(model, 0, top_k=1, compile=True)  # prompt padded up to PROMPT_BUCKET on the left
    assert PROMPT.shape[1] % PROMPT_BUCKET != 0
    assert torch.equal(compiled, eager)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    eager = _ours(model, 0, top_k=1)
    assert torch.equal(_ours(model, 0, top_k=1, compile=True), eager)


def test_bad_input_is_refused():
    model = _model()
    with pytest.raises(ValueError, match=r"prompt and prompt_mask must both be \[B, P\]"):
        sample_completions(model, PROMPT, MASK[:, :2], max_new_tokens=3, eos_token_id=EOS, pad_token_id=PAD)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1, got 0"):
        sample_completions(model, PROMPT, MASK, max_new_tokens=0, eos_token_id=EOS, pad_token_id=PAD)

    class NoStaticCache(torch.nn.Module):
        _can_compile_fullgraph = False

    assert supports_static_cache(model) and not supports_static_cache(NoStaticCache())
    with pytest.raises(ValueError, match="compile=True needs a model that supports transformers' StaticCache"):
        sample_completions(
            NoStaticCache(), PROMPT, MASK, max_new_tokens=3, eos_token_id=EOS, pad_token_id=PAD, compile=True
        )


def test_a_model_without_static_cache_samples_through_generate():
    model = _model()
    model._can_compile_fullgraph = False  # as transformers marks models that cannot use a StaticCache
    assert not supports_static_cache(model)
    assert torch.equal(_ours(model, 0, top_k=5), _generate(model, 0, top_k=5))


def test_grpo_trainer_compile_generation_samples_the_same_completions(tok, tiny_model, tmp_path):
    rows = [{"prompt": "what is two plus two?"}, {"prompt": "the cat"}]

    def reward(prompts=None, completions=(), **kwargs):
        return [float(len(c)) for c in completions]

    def first_round(compile_generation: bool) -> torch.Tensor:
        args = GRPOConfig(
            output_dir=str(tmp_path / str(compile_generation)),
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=5,
            top_k=1,  # greedy, so that compiled and eager logits cannot pick different tokens
            report_to=[],
            disable_tqdm=True,
            max_steps=1,
            shuffle=False,
            log_completions=False,
            compile_generation=compile_generation,
            seed=0,
        )
        trainer = GRPOTrainer(
            tiny_model(tok, 0), reward_funcs=reward, train_dataset=rows, processing_class=tok, args=args
        )
        trainer.step()
        assert trainer._round is not None
        return trainer._round["completion"]

    assert torch.equal(first_round(True), first_round(False))

    class Plain(torch.nn.Module):  # a model transformers cannot decode with a static cache
        _can_compile_fullgraph = False

        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

    with pytest.raises(ValueError, match="compile_generation=True needs a model that supports"):
        GRPOTrainer(
            Plain(),
            reward_funcs=reward,
            train_dataset=rows,
            processing_class=tok,
            args=GRPOConfig(
                output_dir=str(tmp_path / "x"), report_to=[], compile_generation=True, gradient_checkpointing=False
            ),
        )
