"""SFTTrainer, its config, the chat templates, the data files and checkpoints: against transformers'
own loss, hand computations and uninterrupted runs."""

from __future__ import annotations

import json
import math

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from rl_llm.chat import render_chat, render_segments  # noqa: E402
from rl_llm.cli import main as cli_main  # noqa: E402
from rl_llm.data_files import dataset_format, load_rows  # noqa: E402
from rl_llm.trainers import SFTConfig, SFTTrainer, TrainingConfig, lr_lambda, tokenize_sft_row  # noqa: E402
from rl_llm.trainers.checkpoint import latest_checkpoint  # noqa: E402

pytestmark = pytest.mark.llm

ROWS = [
    {"prompt": "what is two plus two?", "completion": " four."},
    {"prompt": "what is one plus one?", "completion": " two."},
    {"prompt": "the cat", "completion": " sat on the mat."},
    {"prompt": "hello", "completion": " there"},
]


def args(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2,
        learning_rate=1e-2,
        report_to=[],
        disable_tqdm=True,
        max_steps=4,
        max_grad_norm=None,
        seed=0,
    )
    base.update(kw)
    return SFTConfig(**base)


# ---------------------------------------------------------------------------- rows and templates
def test_rows_of_each_format_tokenize_with_their_masks(tok):
    cfg = SFTConfig()
    ids, mask = tokenize_sft_row({"text": "the cat sat"}, tok, cfg)
    assert ids == tok("the cat sat", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert all(mask)
    ids, mask = tokenize_sft_row({"prompt": "the cat", "completion": " sat"}, tok, cfg)
    n_prompt = len(tok("the cat", add_special_tokens=False)["input_ids"])
    assert ids[n_prompt:] == tok(" sat", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert mask == [False] * n_prompt + [True] * (len(ids) - n_prompt)
    ids2, mask2 = tokenize_sft_row(
        {"prompt": "the cat", "completion": " sat"}, tok, SFTConfig(completion_only_loss=False)
    )
    assert ids2 == ids and all(mask2)
    ids3, mask3 = tokenize_sft_row({"prompt": "the cat", "completion": " sat"}, tok, SFTConfig(max_length=3))
    assert ids3 == ids[:3] and mask3 == mask[:3]


def test_assistant_only_mask_covers_exactly_the_replies(tok):
    chat = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "one plus one?"},
        {"role": "assistant", "content": "two."},
        {"role": "user", "content": "two plus two?"},
        {"role": "assistant", "content": "four."},
    ]
    ids, mask = tokenize_sft_row({"messages": chat}, tok, SFTConfig(assistant_only_loss=True, chat_template="chatml"))
    assert tok.decode(ids) == render_chat(chat, chat_template="chatml")
    trained = [i for i, m in zip(ids, mask) if m]
    assert tok.decode(trained) == "two.<|im_end|>\nfour.<|im_end|>\n"
    _, all_mask = tokenize_sft_row({"messages": chat}, tok, SFTConfig(chat_template="chatml"))
    assert all(all_mask)
    pieces = render_segments(chat, chat_template="chatml")
    assert "".join(text for text, _ in pieces) == render_chat(chat, chat_template="chatml")
    assert [flag for _, flag in pieces] == [False, True, False, True]


def test_tokenizer_template_and_conversational_prompt_completion(tok):
    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}"
    prompt = [{"role": "user", "content": "hello"}]
    completion = [{"role": "assistant", "content": "there"}]
    ids, mask = tokenize_sft_row({"prompt": prompt, "completion": completion}, tok, SFTConfig(chat_template=template))
    assert tok.decode(ids) == "[user] hello\n[assistant] there\n"
    assert tok.decode([i for i, m in zip(ids, mask) if m]) == "there\n"


def test_rewriting_template_is_refused(tok):
    template = "{{ messages | length }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    with pytest.raises(ValueError, match="rewrites earlier turns"):
        render_segments(chat, tok, chat_template=template)


def test_bad_rows_are_refused_naming_the_columns(tok, model_factory=None):
    with pytest.raises(ValueError, match=r"columns \['foo'\]"):
        tokenize_sft_row({"foo": "x"}, tok, SFTConfig())
    with pytest.raises(ValueError, match="both be strings"):
        tokenize_sft_row({"prompt": "x", "completion": [{"role": "assistant", "content": "y"}]}, tok, SFTConfig())


# ---------------------------------------------------------------------------- the loss
@pytest.mark.parametrize("padding_free", [False, True])
def test_loss_equals_transformers_labels_loss(tok, tmp_path, tiny_model, padding_free):
    """One step's reported loss is transformers' own token-mean loss with -100 on untrained tokens
    (on padded rows), whether the trainer runs them padded or padding-free."""
    model = tiny_model(tok)
    trainer = SFTTrainer(
        model,
        args=args(tmp_path, per_device_train_batch_size=4, shuffle=False, padding_free=padding_free),
        train_dataset=ROWS,
        processing_class=tok,
    )
    assert trainer.padding_free is padding_free
    padded = SFTTrainer(model, args=args(tmp_path, padding_free=False), train_dataset=ROWS, processing_class=tok)
    ids, attention, mask, _, _ = padded._collate(trainer.examples)
    labels = torch.where(mask, ids, torch.full_like(ids, -100))
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=attention, labels=labels).loss
    metrics = trainer.step()
    assert metrics["loss"] == pytest.approx(float(expected), rel=1e-5)
    assert metrics["num_tokens"] == int(mask.sum())


@pytest.mark.parametrize("split", [(1, 4), (2, 2)])
def test_gradient_accumulation_is_exact(tok, tmp_path, split, tiny_model):
    """The step's gradient does not depend on how its rows are split into micro-batches (SGD with
    lr 1 makes the update the gradient itself)."""
    updates = []
    for batch, accum in [(4, 1), split]:
        model = tiny_model(tok)
        before = [p.detach().clone() for p in model.parameters()]
        trainer = SFTTrainer(
            model,
            args=args(tmp_path, per_device_train_batch_size=batch, gradient_accumulation_steps=accum, shuffle=False),
            train_dataset=ROWS,
            processing_class=tok,
            optimizers=(torch.optim.SGD(model.parameters(), lr=1.0), None),
        )
        trainer.step()
        updates.append(torch.cat([(b - p.detach()).flatten() for b, p in zip(before, model.parameters())]))
    torch.testing.assert_close(updates[1], updates[0], rtol=1e-4, atol=1e-6)
    # the naive rule (each micro-batch's own token mean, averaged) gives another gradient here
    model = tiny_model(tok)
    trainer = SFTTrainer(
        model,
        args=args(tmp_path, per_device_train_batch_size=split[0], shuffle=False, padding_free=False),
        train_dataset=ROWS,
        processing_class=tok,
    )
    naive = []
    for k in range(0, 4, split[0]):
        ids, attention, mask, _, _ = trainer._collate(trainer.examples[k : k + split[0]])
        labels = torch.where(mask, ids, torch.full_like(ids, -100))
        naive.append(model(input_ids=ids, attention_mask=attention, labels=labels).loss / split[1])
    torch.stack(naive).sum().backward()
    naive_update = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert not torch.allclose(naive_update, updates[0], rtol=1e-3, atol=1e-6)


def test_training_lowers_the_loss_and_follows_the_schedule(tok, tmp_path, tiny_model):
    model = tiny_model(tok)
    cfg = args(
        tmp_path, max_steps=30, warmup_steps=5, lr_scheduler_type="cosine", learning_rate=5e-3, max_grad_norm=1.0
    )
    trainer = SFTTrainer(model, args=cfg, train_dataset=ROWS, processing_class=tok)
    first = trainer.step()
    last = trainer.train()
    assert trainer.global_step == 30 and last["loss"] < 0.5 * first["loss"]
    assert trainer.scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)
    f = lr_lambda("cosine", 5, 30)
    assert f(3) == pytest.approx(3 / 5) and f(5) == 1.0
    assert f(17) == pytest.approx(0.5 * (1 + math.cos(math.pi * 12 / 25)))
    assert lr_lambda("constant_with_warmup", 4, 10)(9) == 1.0


def test_epochs_set_the_budget_and_cover_every_row(tok, tmp_path, tiny_model):
    cfg = args(tmp_path, max_steps=-1, num_train_epochs=2, per_device_train_batch_size=3, shuffle=True)
    trainer = SFTTrainer(tiny_model(tok), args=cfg, train_dataset=ROWS, processing_class=tok)
    assert trainer.total_steps == math.ceil(2 * 4 / 3)
    seen = trainer._next_indices(8)
    assert sorted(seen[:4]) == [0, 1, 2, 3] and sorted(seen[4:]) == [0, 1, 2, 3]


def test_gradient_checkpointing_runs_and_gives_the_same_loss(tok, tmp_path, tiny_model):
    losses = []
    for flag in (False, True):
        model = tiny_model(tok)
        trainer = SFTTrainer(
            model,
            args=args(tmp_path, gradient_checkpointing=flag, shuffle=False),
            train_dataset=ROWS,
            processing_class=tok,
        )
        checkpointing = getattr(model, "is_activation_checkpointing", None)
        assert (
            model.training and (checkpointing if checkpointing is not None else model.is_gradient_checkpointing) == flag
        )
        losses.append(trainer.step()["loss"])
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)


def test_bf16_autocast_runs_close_to_float32(tok, tmp_path, tiny_model):
    losses = []
    for bf16 in (False, True):
        trainer = SFTTrainer(
            tiny_model(tok), args=args(tmp_path, bf16=bf16, shuffle=False), train_dataset=ROWS, processing_class=tok
        )
        losses.append(trainer.step()["loss"])
    assert math.isfinite(losses[1]) and losses[1] == pytest.approx(losses[0], rel=2e-2)
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())  # autocast leaves the weights in float32


# ---------------------------------------------------------------------------- checkpoints
def test_resume_equals_an_uninterrupted_run_bit_for_bit(tok, tmp_path, tiny_model):
    full = SFTTrainer(
        tiny_model(tok),
        args=args(tmp_path / "a", max_steps=6, per_device_train_batch_size=3),
        train_dataset=ROWS,
        processing_class=tok,
    )
    full.train()
    first = SFTTrainer(
        tiny_model(tok),
        args=args(tmp_path / "b", max_steps=6, per_device_train_batch_size=3, save_steps=3),
        train_dataset=ROWS,
        processing_class=tok,
    )
    for _ in range(3):
        first.step()
    first.save_checkpoint()
    (tmp_path / "b" / "out" / "checkpoint-9.tmp").mkdir()  # a write killed half-way is ignored
    assert latest_checkpoint(tmp_path / "b" / "out").name == "checkpoint-3"
    resumed = SFTTrainer(
        tiny_model(tok, seed=5),
        args=args(tmp_path / "b", max_steps=6, per_device_train_batch_size=3),
        train_dataset=ROWS,
        processing_class=tok,
    )
    resumed.train(resume_from_checkpoint=True)
    assert resumed.global_step == 6
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    files = sorted(p.name for p in (tmp_path / "b" / "out" / "checkpoint-3").iterdir())
    assert files == [
        "model.safetensors",
        "optimizer.json",
        "optimizer.safetensors",
        "rng.safetensors",
        "trainer_state.json",
    ]


def test_resume_without_a_checkpoint_says_so(tok, tmp_path, tiny_model):
    trainer = SFTTrainer(tiny_model(tok), args=args(tmp_path), train_dataset=ROWS, processing_class=tok)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        trainer.train(resume_from_checkpoint=True)


# ---------------------------------------------------------------------------- config, data, command
def test_config_from_yaml_with_overrides_and_errors(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("learning_rate: 1e-4\nmax_length: 64\nreport_to: [csv]\n")
    cfg = SFTConfig.from_yaml(path, ["max_steps=5", "assistant_only_loss=true", "max_grad_norm=null"])
    assert (cfg.learning_rate, cfg.max_length, cfg.max_steps, cfg.assistant_only_loss, cfg.max_grad_norm) == (
        1e-4,
        64,
        5,
        True,
        None,
    )
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['lerning_rate'\]"):
        SFTConfig.from_overrides(["lerning_rate=1"])
    with pytest.raises(ValueError, match="'max_steps' expects int, got 'ten'"):
        SFTConfig.from_overrides(["max_steps=ten"])
    with pytest.raises(ValueError, match="lr_scheduler_type must be one of"):
        TrainingConfig(lr_scheduler_type="step")
    with pytest.raises(ValueError, match="must read key=value"):
        SFTConfig.from_overrides(["max_steps"])


def test_data_files(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n" + json.dumps(ROWS[1]) + "\n")
    rows = load_rows(path)
    assert list(rows) == ROWS[:2] and dataset_format(rows[0]) == "prompt_completion"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n{oops\n")
    with pytest.raises(ValueError, match="bad.jsonl, line 2"):
        load_rows(bad)
    with pytest.raises(ValueError, match="suffix '.txt'"):
        (tmp_path / "x.txt").write_text("")
        load_rows(tmp_path / "x.txt")
    with pytest.raises(ValueError, match="empty"):
        load_rows([])
    assert dataset_format({"prompt": "p"}) == "prompt_only"


def test_parquet_and_datasets_objects(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "rows.parquet")
    assert list(load_rows(tmp_path / "rows.parquet")) == ROWS
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(ROWS)
    assert load_rows(ds)[2] == ROWS[2]
    assert load_rows(datasets.DatasetDict(train=ds, test=ds), split="test")[1] == ROWS[1]


def test_command_trains_and_saves(tok, tmp_path, capsys, tiny_model):
    model_dir = tmp_path / "model"
    tiny_model(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(
        f"model_name_or_path: {model_dir}\ndataset: {data}\nper_device_train_batch_size: 2\nlearning_rate: 0.01\n"
        "disable_tqdm: true\n"
    )
    out = tmp_path / "trained"
    assert cli_main(["sft", "--config", str(cfg), "max_steps=3", f"output_dir={out}", "logging_steps=1"]) == 0
    assert "rl-llm sft: 3 steps" in capsys.readouterr().out
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    lines = (out / "metrics.csv").read_text().splitlines()
    assert lines[0] == "step,name,value" and sum(line.startswith("3,train/loss,") for line in lines) == 1
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert reloaded.config.n_layer == 2
    with pytest.raises(SystemExit, match="model_name_or_path"):
        cli_main(["sft", f"dataset={data}"])


# ---------------------------------------------------------------------------- packing
def test_best_fit_packing():
    from rl_llm.trainers import pack_best_fit

    lengths = [7, 3, 5, 1, 4, 2, 6]
    bins = pack_best_fit(lengths, capacity=8)
    assert sorted(i for b in bins for i in b) == list(range(7))
    assert all(sum(lengths[i] for i in b) <= 8 for b in bins) and len(bins) == 4  # 28 tokens need 4 bins of 8
    with pytest.raises(ValueError, match="longer than the capacity"):
        pack_best_fit([9], capacity=8)


def test_packed_rows_train_as_the_unpacked_ones(tok, tmp_path, tiny_model):
    """The same rows in one step: packed (attention kept within each sequence, positions restarting)
    or padded, the loss and the gradient are the same."""
    updates, losses = [], []
    for packing, batch in ((False, 4), (True, 1)):
        model = tiny_model(tok)
        before = [p.detach().clone() for p in model.parameters()]
        trainer = SFTTrainer(
            model,
            args=args(tmp_path, packing=packing, max_length=64, per_device_train_batch_size=batch, shuffle=False),
            train_dataset=ROWS,
            processing_class=tok,
            optimizers=(torch.optim.SGD(model.parameters(), lr=1.0), None),
        )
        if packing:
            assert len(trainer.examples) == 1 and trainer.examples[0][2] == sorted(trainer.examples[0][2], reverse=True)
        losses.append(trainer.step()["loss"])
        updates.append(torch.cat([(b - p.detach()).flatten() for b, p in zip(before, model.parameters())]))
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    torch.testing.assert_close(updates[1], updates[0], rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="packing=True needs max_length"):
        SFTConfig(packing=True, max_length=None)


def test_duck_typed_loggers_get_the_metrics_and_the_config(tok, tmp_path, tiny_model):
    """Any object with log_scalar receives train/<metric> every logging_steps (and at the end);
    one with log_hparams also receives the config once; others are refused when the trainer is built."""

    class Recorder:
        def __init__(self):
            self.scalars, self.hparams = [], []

        def log_scalar(self, name, value, step=None):
            self.scalars.append((step, name, value))

        def log_hparams(self, cfg):
            self.hparams.append(cfg)

    class ScalarsOnly:
        def __init__(self):
            self.names = []

        def log_scalar(self, name, value, step=None):
            self.names.append(name)

    recorder, plain = Recorder(), ScalarsOnly()
    trainer = SFTTrainer(
        tiny_model(tok),
        args=args(tmp_path, max_steps=5, logging_steps=2, learning_rate=1e-3),
        train_dataset=ROWS,
        processing_class=tok,
        loggers=[recorder, plain],
    )
    last = trainer.train()
    assert [cfg["max_steps"] for cfg in recorder.hparams] == [5] and recorder.hparams[0]["logging_steps"] == 2
    losses = [(step, value) for step, name, value in recorder.scalars if name == "train/loss"]
    assert [step for step, _ in losses] == [2, 4, 5] and losses[-1][1] == pytest.approx(last["loss"])
    assert {"train/loss", "train/grad_norm", "train/learning_rate", "train/num_tokens"} <= set(plain.names)
    with pytest.raises(TypeError, match="log_scalar"):
        SFTTrainer(tiny_model(tok), args=args(tmp_path), train_dataset=ROWS, processing_class=tok, loggers=[object()])
