"""Post-train a tiny language model on arithmetic: SFT teaches the format, GRPO raises the accuracy.

Everything is built here, nothing is downloaded: a character-level tokenizer, a 2-layer GPT-2 from a
config, and the data (``a+b=`` with one-digit ``a``, ``b``; the answer is ``a+b``). Steps:

1. SFT (``SFTTrainer``) on a few prompt/completion pairs, briefly: the model learns to answer with
   digits and stop, but is often wrong.
2. GRPO (``GRPOTrainer``) on all prompts with a verifiable reward (``numeric_match``: 1 when the
   answer is the sum); the mean reward of the sampled answers rises.

The run folder (``runs/llm_arithmetic_<time>/``) gets both trainers' ``metrics.csv``, GRPO's
``completions.jsonl``, the final model (safetensors) and ``reward_curve.png``.

    hatch run llm-demo [--grpo-steps 400 --seed 0]
"""

from __future__ import annotations

import argparse
import csv
import random
import time
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from rl_llm.rewards import numeric_match
from rl_llm.trainers import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

CHARS = list("0123456789+= ")


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character of ``CHARS``, plus <pad> and <eos>."""
    vocab = {"<pad>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


def tiny_gpt2(tokenizer: PreTrainedTokenizerFast, seed: int) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=2,
        n_head=4,
        n_embd=64,
        n_positions=32,
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return GPT2LMHeadModel(config)


def problems(max_operand: int) -> list[dict]:
    return [
        {"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(max_operand + 1) for b in range(max_operand + 1)
    ]


def read_metric(path: Path, name: str) -> list[tuple[int, float]]:
    with open(path, newline="") as f:
        return [(int(r["step"]), float(r["value"])) for r in csv.DictReader(f) if r["name"] == name]


def plot(points: list[tuple[int, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([s for s, _ in points], [v for _, v in points], marker=".")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean reward (share of correct sums)")
    ax.set_title("GRPO on one-digit addition (tiny GPT-2, CPU)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sft-steps", type=int, default=40)
    parser.add_argument("--grpo-steps", type=int, default=400)
    parser.add_argument("--max-operand", type=int, default=4)
    parser.add_argument("--sft-pairs", type=int, default=10)
    parser.add_argument("--grpo-lr", type=float, default=1e-3)
    parser.add_argument("--runs-dir", default="runs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    run = Path(args.runs_dir) / f"llm_arithmetic_{time.strftime('%Y%m%d_%H%M%S')}"
    tok, rows = char_tokenizer(), problems(args.max_operand)
    model = tiny_gpt2(tok, args.seed)

    random.Random(args.seed).shuffle(rows)
    sft_rows = [{"prompt": r["prompt"], "completion": r["answer"]} for r in rows[: args.sft_pairs]]
    sft = SFTTrainer(
        model,
        args=SFTConfig(
            output_dir=str(run / "sft"),
            max_steps=args.sft_steps,
            learning_rate=3e-3,
            per_device_train_batch_size=16,
            logging_steps=5,
            seed=args.seed,
            disable_tqdm=True,
            gradient_checkpointing=False,
        ),  # a tiny model: memory is no concern
        train_dataset=sft_rows,
        processing_class=tok,
    )
    sft_loss = sft.train()["loss"]
    print(f"SFT: {args.sft_steps} steps on {len(sft_rows)} pairs, last loss {sft_loss:.3f}", flush=True)

    grpo = GRPOTrainer(
        model,
        reward_funcs=numeric_match("answer"),
        train_dataset=rows,
        processing_class=tok,
        args=GRPOConfig(
            output_dir=str(run / "grpo"),
            max_steps=args.grpo_steps,
            learning_rate=args.grpo_lr,
            per_device_train_batch_size=64,
            num_generations=8,
            max_completion_length=4,
            temperature=1.0,
            logging_steps=1,
            seed=args.seed,
            max_grad_norm=1.0,
            gradient_checkpointing=False,
        ),
    )
    grpo.train()
    model.save_pretrained(run / "model")
    tok.save_pretrained(run / "model")
    rewards = read_metric(run / "grpo" / "metrics.csv", "train/reward")
    plot(rewards, run / "reward_curve.png")
    first, last = sum(v for _, v in rewards[:5]) / 5, sum(v for _, v in rewards[-5:]) / 5
    print(f"run folder {run}/: sft/metrics.csv, grpo/metrics.csv, grpo/completions.jsonl, model/, reward_curve.png")
    print(f"trained in {time.perf_counter() - start:.0f} s")
    print(f"mean reward: first 5 steps {first:.2f}, last 5 steps {last:.2f}", flush=True)


if __name__ == "__main__":
    main()
