"""rl-llm's trainers against TRL's, same run, same machine, one thread.

Both libraries get the same tiny GPT-2 (4 layers, width 128, no dropout, built from a config), the same
tokenizer (byte-level BPE trained here, 2,000 tokens), the same data and the same settings: float32
(``bf16=False``: TRL's own default turns bf16 autocast on, ours does not) and activation checkpointing
as ``--gradient-checkpointing`` says (default ``on``, both libraries' default). ``--library-defaults``
instead leaves both at their own defaults (TRL: bf16 autocast and checkpointing; ours: float32 and
checkpointing), which is what each does out of the box, not the same computation.

- ``grpo``: one GRPO step (generation of 8 completions of up to 64 tokens for one prompt, reward,
  loss, backward, optimizer), TRL's ``GRPOTrainer`` against ours: median seconds per step over
  ``--steps`` steps after one warm-up step (process CPU time), and the growth of peak resident
  memory from the start of training (model and trainer built) to the end (``ru_maxrss``). Each library runs in its own process, ``--repeats`` times.
- ``sft``: SFT tokens per second (non-padding input tokens over wall time of ``--steps`` steps of
  8 rows of up to 256 tokens), TRL's ``SFTTrainer`` against ours, without and with packing.

Each run also times **the model alone**: the same model's forward and backward passes, sampling, clipping
and fused AdamW in a hand-written loop with no trainer (and, for SFT, no padding). It is the floor of
what any library running this model eagerly can reach: its ratio to TRL is the best ratio on offer.

    hatch run bench:llm-trainers grpo|sft [--steps 10 --repeats 3 --gradient-checkpointing on|off | --library-defaults]
        [--compile-generation]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
WORDS = (
    "the cat sat on a mat and the dog ran in the park while one plus two is three and four times five "
    "is twenty so what is the answer to this question please think step by step before you reply"
).split()


def _setup(seed: int = 0):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    torch.set_num_threads(1)
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    corpus = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))]
    raw.train_from_iterator(
        corpus * 20,
        trainers.BpeTrainer(
            vocab_size=2000, special_tokens=["<pad>", "<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(seed)
    # no dropout, as the configs of current open LLMs (Llama, Qwen, Mistral: attention_dropout 0)
    config = GPT2Config(
        n_layer=4,
        n_head=4,
        n_embd=128,
        n_positions=512,
        vocab_size=len(tok),
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return tok, GPT2LMHeadModel(config)


def _prompts(n: int) -> list[dict]:
    return [{"prompt": " ".join(WORDS[i % 20 : i % 20 + 12]), "answer": str(i % 7)} for i in range(n)]


def digit_reward(prompts=None, completions=(), **kwargs):
    return [float(sum(ch.isdigit() for ch in c)) for c in completions]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------------------- GRPO
def _settings(mode: str) -> dict:
    """The precision and checkpointing settings both libraries get (none: each keeps its defaults)."""
    return {} if mode == "defaults" else {"bf16": False, "gradient_checkpointing": mode == "on"}


def _grpo_child(lib: str, steps: int, mode: str, compile_generation: bool = False) -> dict:
    if lib == "model":
        return _grpo_model_alone(steps, mode)
    tok, model = _setup()
    rows, out_dir = _prompts(64), tempfile.mkdtemp()
    common = dict(
        output_dir=out_dir,
        per_device_train_batch_size=8,
        num_generations=8,
        max_completion_length=64,
        learning_rate=1e-6,
        max_steps=steps + 1,
        logging_steps=1000,
        seed=0,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        loss_type="dapo",
        max_grad_norm=1.0,
        **_settings(mode),
    )
    times: list[float] = []
    if lib == "trl":
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer

        class Clock(TrainerCallback):
            def on_train_begin(self, *a, **k):
                self.base = _peak_mb()

            def on_step_begin(self, *a, **k):
                self.t = time.process_time()

            def on_step_end(self, *a, **k):
                times.append(time.process_time() - self.t)

        clock = Clock()
        trainer = GRPOTrainer(
            model,
            reward_funcs=digit_reward,
            train_dataset=Dataset.from_list(rows),
            processing_class=tok,
            args=GRPOConfig(
                **common, use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True, disable_dropout=True
            ),
            callbacks=[clock],
        )
        trainer.train()
        peak = _peak_mb() - clock.base
    else:
        from rl_llm.trainers import GRPOConfig, GRPOTrainer

        trainer = GRPOTrainer(
            model,
            reward_funcs=digit_reward,
            train_dataset=rows,
            processing_class=tok,
            args=GRPOConfig(
                **common, report_to=[], disable_tqdm=True, log_completions=False, compile_generation=compile_generation
            ),
        )
        base = _peak_mb()
        for _ in range(steps + 1):
            t = time.process_time()
            trainer.step()
            times.append(time.process_time() - t)
        peak = _peak_mb() - base
    return {"step_s": statistics.median(times[1:]), "peak_mb": peak}


def _checkpointing(model, mode: str) -> None:
    if mode != "off":  # on, and both libraries' default
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
        model.config.use_cache = False


def _grpo_model_alone(steps: int, mode: str) -> dict:
    """The model's own work in a GRPO step with no trainer: 8 completions of 64 tokens drawn with the KV
    cache (softmax and multinomial, as generate()), one forward and backward of their log-probs, clipping
    and fused AdamW. A library running this model eagerly cannot take less time than this."""
    import torch

    tok, model = _setup()
    rows = _prompts(64)
    _checkpointing(model, mode)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-6, fused=True)
    times: list[float] = []
    base = _peak_mb()
    for i in range(steps + 1):
        enc = tok([rows[i % len(rows)]["prompt"]] * 8, return_tensors="pt")
        t = time.process_time()
        model.eval()
        with torch.no_grad():
            mask = enc["attention_mask"]
            out = model(input_ids=enc["input_ids"], attention_mask=mask, use_cache=True)
            drawn = []
            for k in range(64):
                token = torch.multinomial(torch.softmax(out.logits[:, -1].float(), -1), 1)
                drawn.append(token)
                if k == 63:
                    break
                mask = torch.cat([mask, mask.new_ones(8, 1)], 1)
                out = model(input_ids=token, attention_mask=mask, past_key_values=out.past_key_values, use_cache=True)
        completion = torch.cat(drawn, 1)
        model.train()
        ids = torch.cat([enc["input_ids"], completion], 1)
        full_mask = torch.cat([enc["attention_mask"], torch.ones_like(completion)], 1)
        logits = model(input_ids=ids, attention_mask=full_mask, use_cache=False).logits[
            :, enc["input_ids"].shape[1] - 1 : -1
        ]
        log_probs = logits.float().log_softmax(-1).gather(-1, completion[..., None]).squeeze(-1)
        (-log_probs.mean()).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.process_time() - t)
    return {"step_s": statistics.median(times[1:]), "peak_mb": _peak_mb() - base}


# ---------------------------------------------------------------------------- SFT
def _sft_child(lib: str, steps: int, packing: bool, mode: str) -> dict:
    tok, model = _setup()
    rows = [{"text": " ".join((WORDS * 4)[i % 30 : i % 30 + 40 + (i * 37) % 120])} for i in range(512)]
    out_dir = tempfile.mkdtemp()
    common = dict(
        output_dir=out_dir,
        per_device_train_batch_size=8,
        learning_rate=1e-4,
        max_steps=steps + 1,
        logging_steps=1000,
        seed=0,
        max_length=256,
        packing=packing,
        max_grad_norm=1.0,
        **_settings(mode),
    )
    if lib == "model":
        return _sft_model_alone(tok, model, rows, steps, packing, mode)
    times: list[float] = []
    if lib == "trl":
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import SFTConfig, SFTTrainer

        class Clock(TrainerCallback):
            def on_step_begin(self, *a, **k):
                self.t = time.perf_counter()

            def on_step_end(self, *a, **k):
                times.append(time.perf_counter() - self.t)

        trainer = SFTTrainer(
            model,
            train_dataset=Dataset.from_list(rows),
            processing_class=tok,
            callbacks=[Clock()],
            args=SFTConfig(
                **common,
                use_cpu=True,
                report_to="none",
                save_strategy="no",
                disable_tqdm=True,
                packing_strategy="bfd",
                padding_free=False,
                dataset_num_proc=None,
            ),
        )
        counted: list[int] = []
        collate = trainer.data_collator

        def counting(features):
            batch = collate(features)
            counted.append(
                int(batch["attention_mask"].sum())
                if "attention_mask" in batch
                else int((batch["input_ids"] != tok.pad_token_id).sum())
            )
            return batch

        trainer.data_collator = counting
        trainer.train()
        tokens = counted[1 : steps + 1]
    else:
        from rl_llm.trainers import SFTConfig, SFTTrainer

        trainer = SFTTrainer(
            model, train_dataset=rows, processing_class=tok, args=SFTConfig(**common, report_to=[], disable_tqdm=True)
        )
        tokens = []
        for i in range(steps + 1):
            t = time.perf_counter()
            metrics = trainer.step()
            times.append(time.perf_counter() - t)
            if i:
                tokens.append(int(metrics["num_input_tokens"]))
    return {"tokens_per_s": sum(tokens) / sum(times[1:]), "tokens": sum(tokens)}


def _sft_model_alone(tok, model, rows: list[dict], steps: int, packing: bool, mode: str) -> dict:
    """The model's own work in an SFT step with no trainer and no padding: each step's sequences end to
    end in one row (rl_llm's padding-free attention keeps attention within each), forward, next-token
    cross-entropy, backward, clipping and fused AdamW. Without packing a step takes 8 sequences; with
    packing, as many as fill 8 rows of 256 tokens in data order."""
    import torch
    import torch.nn.functional as F
    from rl_llm.padding_free import boundaries, padding_free_attention, run_padding_free

    _checkpointing(model, mode)
    model.train()
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-4, fused=True)
    sequences = [(tok(r["text"])["input_ids"] + [tok.eos_token_id])[:256] for r in rows]
    batches, row, rows_of_step = [], 0, []
    if not packing:
        batches = [sequences[i : i + 8] for i in range(0, len(sequences), 8)]
    else:
        for seq in sequences:  # greedy packing in data order into 8 rows of at most 256 tokens
            if not rows_of_step or row + len(seq) > 256:
                if len(rows_of_step) == 8:
                    batches.append([s for r in rows_of_step for s in r])
                    rows_of_step = []
                rows_of_step.append([])
                row = 0
            rows_of_step[-1].append(seq)
            row += len(seq)
    times, tokens = [], []
    for i in range(steps + 1):
        seqs = batches[i % len(batches)]
        t = time.perf_counter()
        ids = torch.tensor([[x for s in seqs for x in s]])
        positions = torch.cat([torch.arange(len(s)) for s in seqs])[None]
        keep = positions[0, 1:] != 0  # next-token targets within each sequence
        with padding_free_attention(model):
            logits = run_padding_free(model, model, ids, boundaries([len(s) for s in seqs]), positions).logits[0]
            loss = F.cross_entropy(logits[:-1][keep].float(), ids[0, 1:][keep])
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t)
        tokens.append(ids.shape[1])
    return {"tokens_per_s": sum(tokens[1:]) / sum(times[1:]), "tokens": sum(tokens[1:])}


def _run_child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "_child", *args], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"child {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        kind, lib, steps, mode = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[6]
        result = (
            _grpo_child(lib, steps, mode, sys.argv[7] == "1")
            if kind == "grpo"
            else _sft_child(lib, steps, sys.argv[5] == "1", mode)
        )
        print(json.dumps(result))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["grpo", "sft"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gradient-checkpointing", choices=["on", "off"], default="on")
    parser.add_argument(
        "--library-defaults", action="store_true", help="each library at its own bf16/checkpointing defaults"
    )
    parser.add_argument(
        "--compile-generation",
        action="store_true",
        help="ours samples with GRPOConfig(compile_generation=True) (TRL has no CPU equivalent)",
    )
    args = parser.parse_args()
    mode = "defaults" if args.library_defaults else args.gradient_checkpointing
    compiled = "1" if args.compile_generation else "0"
    result: dict = {
        "command": " ".join(["python", str(Path(__file__).resolve().relative_to(REPO)), *sys.argv[1:]]),
        "settings": {
            "threads": 1,
            **({"each library's defaults": True} if mode == "defaults" else _settings(mode)),
            **({"ours: compile_generation": True} if args.compile_generation else {}),
        },
    }
    variants = [("grpo", "")] if args.what == "grpo" else [("sft", "0"), ("sft", "1")]
    for kind, packing in variants:
        rows: dict = {}
        for _ in range(args.repeats):  # alternate the libraries
            for lib in ("trl", "ours", "model"):
                rows.setdefault(lib, []).append(
                    _run_child([kind, lib, str(args.steps), packing or "-", mode, compiled])
                )
        name = kind + ("" if not packing else ("-packed" if packing == "1" else "-padded"))
        summary = {lib: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for lib, runs in rows.items()}
        if kind == "grpo":
            summary["ratio_step_time"] = summary["ours"]["step_s"] / summary["trl"]["step_s"]
            summary["ratio_peak_memory"] = summary["ours"]["peak_mb"] / summary["trl"]["peak_mb"]
            summary["ratio_model_alone_step_time"] = summary["model"]["step_s"] / summary["trl"]["step_s"]
            print(
                f"GRPO step: ours {summary['ours']['step_s']:.3f} s, TRL {summary['trl']['step_s']:.3f} s "
                f"({summary['ratio_step_time']:.2f}x); peak memory growth ours {summary['ours']['peak_mb']:.0f} MB, "
                f"TRL {summary['trl']['peak_mb']:.0f} MB ({summary['ratio_peak_memory']:.2f}x); the model alone "
                f"{summary['model']['step_s']:.3f} s ({summary['ratio_model_alone_step_time']:.2f}x TRL's time)",
                flush=True,
            )
        else:
            summary["ratio_tokens_per_s"] = summary["ours"]["tokens_per_s"] / summary["trl"]["tokens_per_s"]
            summary["ratio_model_alone_tokens_per_s"] = (
                summary["model"]["tokens_per_s"] / summary["trl"]["tokens_per_s"]
            )
            print(
                f"{name}: tokens/s ours {summary['ours']['tokens_per_s']:.0f}, TRL {summary['trl']['tokens_per_s']:.0f} "
                f"({summary['ratio_tokens_per_s']:.2f}x); the model alone {summary['model']['tokens_per_s']:.0f} "
                f"({summary['ratio_model_alone_tokens_per_s']:.2f}x TRL's)",
                flush=True,
            )
        result[name] = summary
    out = (
        RESULTS
        / f"llm_trainers_{args.what}{ {'on': '', 'off': '_no_checkpointing', 'defaults': '_library_defaults'}[mode] }"
        f"{'_compiled_generation' if args.compile_generation else ''}.json"
    )
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
