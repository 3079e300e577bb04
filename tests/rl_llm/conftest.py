"""A tiny causal LM and a tokenizer trained here on a few sentences: no downloads."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

SENTENCES = [
    "the cat sat on the mat",
    "a dog ran in the park",
    "hello world how are you",
    "yes no maybe so",
    "red green blue yellow",
]


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()  # joins words with spaces
    tok.train_from_iterator(SENTENCES, trainers.WordLevelTrainer(special_tokens=["<pad>", "<eos>", "<unk>"]))
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def build_model(tokenizer, seed: int = 0, n_layer: int = 2):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        n_layer=n_layer,
        n_head=2,
        n_embd=32,
        n_positions=64,
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture
def model(tokenizer):
    return build_model(tokenizer)


@pytest.fixture
def ref_model(tokenizer):
    return build_model(tokenizer, seed=1)


@pytest.fixture
def hand_log_probs():
    return _hand_log_probs


def _hand_log_probs(model, prompt_ids: list[int], response_ids: list[int]) -> torch.Tensor:
    """Reference: the unpadded row alone through the model, log_softmax gathered at the response."""
    ids = torch.tensor([prompt_ids + response_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    out = []
    for j, tok in enumerate(response_ids):
        out.append(logits[len(prompt_ids) + j - 1].log_softmax(-1)[tok])
    return torch.stack(out) if out else torch.zeros(0)


BPE_CORPUS = [
    "what is two plus two? four. five.",
    "what is one plus one? two.",
    "the cat sat on the mat. the dog.",
    "user assistant system hello there yes no",
    "numbers: 0 1 2 3 4 5 6 7 8 9 = + -",
]


def build_bpe_tokenizer():
    """A byte-level BPE tokenizer trained here (every string encodes), ChatML markers as specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<pad>", "<eos>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(
        BPE_CORPUS * 4,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )


def build_lm(tokenizer, seed: int = 0, dropout: float = 0.0):
    """A 2-layer GPT-2 for ``tokenizer`` (in training mode, as a freshly built transformers model)."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        n_layer=2,
        n_head=2,
        n_embd=32,
        n_positions=128,
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
    )
    return transformers.GPT2LMHeadModel(config)


@pytest.fixture(scope="session")
def tok():
    """The byte-level BPE tokenizer of :func:`build_bpe_tokenizer` (every string encodes)."""
    return build_bpe_tokenizer()


@pytest.fixture(scope="session")
def tiny_model():
    """``tiny_model(tokenizer, seed=0)``: a fresh :func:`build_lm` model."""
    return build_lm
