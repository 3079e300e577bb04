"""GRPOTrainer: group relative policy optimisation with verifiable rewards (TRL's API).

One generation round takes ``generation_batch_size // num_generations`` prompts, samples
``num_generations`` completions for each (``temperature``, ``top_p``, ``top_k``, at most
``max_completion_length`` tokens), scores them with the reward functions (weighted sum), and turns
the rewards into advantages: ``r - mean(group)``, divided by the std of the group
(``scale_rewards="group"``), of the whole batch (``"batch"``) or by nothing (``"none"``, Dr. GRPO).
Then ``num_iterations`` optimisation steps run on that round (each over all its completions, split
into micro-batches of ``per_device_train_batch_size``; groups may straddle micro-batches).

The loss per completion token is the clipped surrogate ``-min(w A, clip(w, 1 - epsilon, 1 +
epsilon_high) A)``, plus ``beta * k3`` towards the reference policy when ``beta > 0``, with
``k3 = exp(ref - logp) - (ref - logp) - 1`` (times ``w`` with ``use_bias_correction_kl``). ``w`` is
the ratio of the current to the behaviour probability: per token, or per sequence
(``importance_sampling_level="sequence"``, GSPO: the exponentiated mean log-ratio over the
completion). All log-probs are those of the tempered distribution that sampling draws from. With
``num_iterations=1`` the behaviour log-probs are the current ones, detached (``w = 1``; no extra
forward pass); otherwise they are recorded once, right after sampling. The reference (``beta > 0``):
see :mod:`rl_llm.trainers.reference`; ``sync_ref_model`` mixes the policy into it every
``ref_model_sync_steps`` steps.

``loss_type`` reduces token losses to the step's loss (exactly across micro-batches):
``"grpo"`` each completion's token mean, averaged over completions; ``"bnpo"`` the token mean of each
micro-batch, averaged over micro-batches; ``"dapo"`` the token mean over the whole round;
``"dr_grpo"`` the token sum divided by ``completions * max_completion_length``.
``mask_truncated_completions`` leaves completions that hit the length limit without an EOS out of
the loss.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
from tdict.validation import check_one_of

from ..chat import render_chat
from ..data import left_pad
from ..data_files import dataset_format, is_conversational
from ..generation import sample_completions, supports_static_cache
from ..losses._logprobs import response_log_probs
from .base import LLMTrainer
from .config import TrainingConfig
from .reference import Reference, disable_dropout, sync_reference

__all__ = ["GRPOConfig", "GRPOTrainer", "grpo_advantages", "grpo_token_losses"]

LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")
SCALES = ("group", "batch", "none")


@dataclass
class GRPOConfig(TrainingConfig):
    """:class:`~rl_llm.trainers.TrainingConfig` plus GRPO's options (TRL's ``GRPOConfig`` names).

    ``per_device_train_batch_size * gradient_accumulation_steps`` completions make one generation
    round (``generation_batch_size``), which must be a multiple of ``num_generations``.
    """

    learning_rate: float = 1e-6
    num_generations: int = 8
    max_prompt_length: Optional[int] = 512
    max_completion_length: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k truncation
    # sample through a static KV cache with the decode step compiled by torch.compile (rl_llm.generation):
    # the same draws as without it, about twice as fast on small models once compiled (seconds, once)
    compile_generation: bool = False
    beta: float = 0.0  # weight of the KL penalty to the reference (0: no reference model is kept)
    use_bias_correction_kl: bool = False
    epsilon: float = 0.2
    epsilon_high: Optional[float] = None  # None: epsilon (clip-higher, DAPO: e.g. 0.28)
    num_iterations: int = 1
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    importance_sampling_level: str = "token"
    mask_truncated_completions: bool = False
    reward_weights: Optional[list] = None
    sync_ref_model: bool = False  # TR-DPO's soft update of the reference every ref_model_sync_steps (needs beta > 0)
    ref_model_sync_steps: int = 512
    ref_model_mixup_alpha: float = 0.6
    disable_dropout: bool = True
    chat_template: Optional[str] = None
    log_completions: bool = True  # write a few completions per logged step to <output_dir>/completions.jsonl
    num_completions_to_print: int = 4

    def validate(self) -> None:
        super().validate()
        if self.num_generations < 2:
            raise ValueError(
                f"GRPOConfig: num_generations must be >= 2 (advantages compare completions of a prompt), got {self.num_generations!r}."
            )
        if self.generation_batch_size % self.num_generations:
            raise ValueError(
                f"GRPOConfig: per_device_train_batch_size * gradient_accumulation_steps = {self.generation_batch_size} completions per "
                f"round must be a multiple of num_generations = {self.num_generations}."
            )
        for name, allowed in (
            ("loss_type", LOSS_TYPES),
            ("scale_rewards", SCALES),
            ("importance_sampling_level", ("token", "sequence")),
        ):
            check_one_of("GRPOConfig", name, getattr(self, name), allowed)
        if self.max_completion_length < 1 or not self.temperature > 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError(
                "GRPOConfig: need max_completion_length >= 1, temperature > 0, 0 < top_p <= 1 and top_k >= 0."
            )
        if self.sync_ref_model and (
            self.beta <= 0 or self.ref_model_sync_steps < 1 or not 0 < self.ref_model_mixup_alpha <= 1
        ):
            raise ValueError(
                "GRPOConfig: sync_ref_model needs beta > 0, ref_model_sync_steps >= 1 and ref_model_mixup_alpha in (0, 1]."
            )
        if self.save_steps % self.num_iterations:
            raise ValueError(
                f"GRPOConfig: save_steps ({self.save_steps}) must be a multiple of num_iterations ({self.num_iterations}): "
                "checkpoints are written between generation rounds."
            )
        if (
            self.beta < 0
            or self.epsilon < 0
            or (self.epsilon_high is not None and self.epsilon_high < 0)
            or self.num_iterations < 1
        ):
            raise ValueError("GRPOConfig: beta, epsilon and epsilon_high must be >= 0, num_iterations >= 1.")

    @property
    def generation_batch_size(self) -> int:
        """Completions per generation round: ``per_device_train_batch_size * gradient_accumulation_steps``."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps


def grpo_advantages(
    rewards: torch.Tensor, num_generations: int, scale_rewards: str = "group", eps: float = 1e-4
) -> torch.Tensor:
    """Advantages of ``[N]`` rewards laid out as consecutive groups of ``num_generations``.

    Examples:
        >>> import torch
        >>> from rl_llm.trainers import grpo_advantages
        >>> grpo_advantages(torch.tensor([1.0, 0.0, 2.0, 2.0]), 2).tolist()
        [0.7070..., -0.7070..., 0.0, 0.0]
    """
    groups = rewards.view(-1, num_generations)
    centred = (groups - groups.mean(-1, keepdim=True)).reshape(-1)
    if scale_rewards == "group":
        return centred / (groups.std(-1).repeat_interleave(num_generations) + eps)
    if scale_rewards == "batch":
        return centred / (rewards.std() + eps)
    return centred


def grpo_token_losses(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float,
    epsilon_high: float,
    level: str = "token",
    ref_log_probs: torch.Tensor | None = None,
    beta: float = 0.0,
    bias_correction: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(per-token loss [B, L], importance weight [B, L] or [B, 1])`` (see the module docstring)."""
    log_ratio = log_probs - old_log_probs
    if level == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)).unsqueeze(-1)
    weight = log_ratio.exp()
    adv = advantages.unsqueeze(-1)
    loss = -torch.minimum(weight * adv, weight.clamp(1 - epsilon_low, 1 + epsilon_high) * adv)
    if beta:
        if ref_log_probs is None:
            raise ValueError("grpo_token_losses: beta > 0 needs ref_log_probs.")
        delta = ref_log_probs - log_probs
        kl = delta.exp() - delta - 1
        loss = loss + beta * (kl * weight if bias_correction else kl)
    return loss, weight


class GRPOTrainer(LLMTrainer):
    """GRPO (TRL's ``GRPOTrainer`` call shape).

    ``GRPOTrainer(model, reward_funcs=[...], args=GRPOConfig(...), train_dataset=rows,
    processing_class=tok)``; rows have a ``prompt`` (string or messages) and any other columns, which
    the reward functions receive (see :mod:`rl_llm.rewards`). ``reward_funcs``: a callable, a
    sequence-classification ``PreTrainedModel`` (scored through :class:`rl_llm.rewards.RewardModel`
    with ``processing_class``), or a list of those (weighted by ``reward_weights``). ``.step()``
    returns ``{"loss", "reward", "reward_std", "rewards/<name>", "completion_length", "clip_ratio",
    "kl" (beta > 0), "grad_norm"}``.
    """

    config_class = GRPOConfig
    args: GRPOConfig

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: GRPOConfig | None = None,
        train_dataset: Any = None,
        processing_class: Any = None,
        *,
        ref_model: Any = None,
        **kwargs: Any,
    ) -> None:
        if processing_class is None:
            raise ValueError("GRPOTrainer: processing_class (the tokenizer) is required.")
        if reward_funcs is None:
            raise ValueError("GRPOTrainer: reward_funcs is required (a function, a reward model, or a list of them).")
        super().__init__(model, args, train_dataset, processing_class, **kwargs)
        if self.args.compile_generation and not supports_static_cache(self.model):
            raise ValueError(
                f"GRPOTrainer: compile_generation=True needs a model that supports transformers' StaticCache; "
                f"{type(self.model).__name__} does not (leave compile_generation False: it samples with generate())."
            )
        self.reward_funcs = self._reward_functions(reward_funcs)
        weights = self.args.reward_weights
        if weights is not None and len(weights) != len(self.reward_funcs):
            raise ValueError(
                f"GRPOTrainer: {len(weights)} reward_weights for {len(self.reward_funcs)} reward functions."
            )
        self.reward_weights = torch.tensor(weights if weights is not None else [1.0] * len(self.reward_funcs))
        bad = [
            i
            for i in range(len(self.rows))
            if dataset_format(self.rows[i]) not in ("prompt_only", "prompt_completion", "preference")
        ]
        if bad:
            raise ValueError(f"GRPOTrainer: rows need a 'prompt' column; row {bad[0]} has {sorted(self.rows[bad[0]])}.")
        if self.args.disable_dropout:
            disable_dropout(self.model)
        self.model.train()
        tok = processing_class
        self.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        self.eos_token_id = tok.eos_token_id
        if self.pad_token_id is None:
            raise ValueError("GRPOTrainer: the tokenizer has neither a pad nor an EOS token.")
        self.reference = Reference(self.model, ref_model) if self.args.beta > 0 else None
        if self.args.sync_ref_model and (self.reference is None or not self.reference.is_copy):
            raise ValueError(
                "GRPOTrainer: sync_ref_model needs a copied reference; a PEFT model's reference is its base (adapter off)."
            )
        self._round: dict[str, Any] | None = None  # the current generation round, reused num_iterations times
        self._round_uses = 0

    def _rows_per_step(self) -> int:
        return self.args.generation_batch_size // self.args.num_generations

    def _total_steps(self) -> int:
        if self.args.max_steps > 0:
            return self.args.max_steps
        rounds = math.ceil(self.args.num_train_epochs * len(self.rows) / self._rows_per_step())
        return max(1, rounds) * self.args.num_iterations

    def _reward_functions(self, funcs: Any) -> list[Callable[..., Any]]:
        from ..rewards import RewardModel

        out = []
        for f in funcs if isinstance(funcs, (list, tuple)) else [funcs]:
            if isinstance(f, torch.nn.Module):
                f = RewardModel(f, self.processing_class)
            if not callable(f):
                raise TypeError(
                    f"GRPOTrainer: a reward function must be callable or a reward model, got {type(f).__name__}."
                )
            out.append(f)
        return out

    # ------------------------------------------------------------------ generation round
    def _prompt_ids(self, prompt: Any) -> list[int]:
        text = (
            render_chat(
                prompt, self.processing_class, chat_template=self.args.chat_template, add_generation_prompt=True
            )
            if is_conversational(prompt)
            else prompt
        )
        if not isinstance(text, str):
            raise ValueError(
                f"GRPOTrainer: a prompt must be a string or a list of messages, got {type(prompt).__name__}."
            )
        ids = list(self.processing_class(text, add_special_tokens=False)["input_ids"])
        if not ids:
            raise ValueError("GRPOTrainer: a prompt tokenizes to nothing.")
        limit = self.args.max_prompt_length
        return ids[-limit:] if limit is not None else ids  # long prompts keep their end

    @torch.no_grad()
    def _generate(
        self, prompt: torch.Tensor, prompt_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        args = self.args
        # sampled in eval mode: no dropout, and the KV cache (activation checkpointing turns it off in train mode)
        self.model.eval()
        try:
            completion = sample_completions(  # generate()'s draws, through a static-cache loop where it can
                self.model,
                prompt,
                prompt_mask,
                max_new_tokens=args.max_completion_length,
                eos_token_id=self.eos_token_id,
                pad_token_id=self.pad_token_id,
                temperature=args.temperature,
                top_k=args.top_k,
                top_p=args.top_p,
                compile=args.compile_generation,
            )
        finally:
            self.model.train()
        if self.eos_token_id is None:
            mask = torch.ones_like(completion, dtype=torch.bool)
            ended = torch.zeros(completion.shape[0], dtype=torch.bool, device=completion.device)
        else:
            is_eos = completion == self.eos_token_id
            mask = (is_eos.long().cumsum(-1) - is_eos.long()) == 0  # up to and including the first EOS
            ended = is_eos.any(-1)
        completion = torch.where(mask, completion, torch.full_like(completion, self.pad_token_id))
        return completion, mask, ended

    def _new_round(self) -> dict[str, Any]:
        args, g = self.args, self.args.num_generations
        rows = self._next_rows(self._rows_per_step())
        prompts = [self._prompt_ids(row["prompt"]) for row in rows]
        device = next(self.model.parameters()).device
        prompt, prompt_mask = left_pad([p for p in prompts for _ in range(g)], self.pad_token_id)
        prompt, prompt_mask = prompt.to(device), prompt_mask.to(device)
        completion, mask, ended = self._generate(prompt, prompt_mask)
        texts = self.processing_class.batch_decode(
            [c[m].tolist() for c, m in zip(completion, mask)], skip_special_tokens=True
        )
        rewards, per_func = self._rewards(rows, texts, [c[m].tolist() for c, m in zip(completion, mask)])
        advantages = grpo_advantages(rewards, g, args.scale_rewards)
        loss_mask = mask & ended.unsqueeze(-1) if args.mask_truncated_completions else mask
        batch = {
            "prompt": prompt,
            "prompt_mask": prompt_mask,
            "completion": completion,
            "valid": mask,
            "mask": loss_mask,
            "advantages": advantages.to(device),
            "rewards": rewards,
            "per_func": per_func,
            "texts": texts,
            "rows": rows,
        }
        size = args.per_device_train_batch_size
        if args.num_iterations > 1:  # behaviour log-probs, recorded once for the round's repeated steps
            with torch.no_grad():
                batch["old"] = torch.cat(
                    [self._log_probs(self.model, batch, k, k + size) for k in range(0, len(texts), size)]
                )
        if args.beta > 0:
            assert self.reference is not None  # kept whenever beta > 0
            with self.reference.scoring() as ref:
                batch["ref"] = torch.cat([self._log_probs(ref, batch, k, k + size) for k in range(0, len(texts), size)])
        return batch

    def _rewards(self, rows: list, texts: list[str], ids: list[list[int]]) -> tuple[torch.Tensor, dict[str, float]]:
        g = self.args.num_generations
        conversational = [is_conversational(row["prompt"]) for row in rows]
        completions = [
            [{"role": "assistant", "content": t}] if conversational[i // g] else t for i, t in enumerate(texts)
        ]
        columns = {key: [row.get(key) for row in rows for _ in range(g)] for key in rows[0] if key != "prompt"}
        prompts = [row["prompt"] for row in rows for _ in range(g)]
        table = torch.zeros(len(texts), len(self.reward_funcs))
        per_func = {}
        for j, func in enumerate(self.reward_funcs):
            values = func(prompts=prompts, completions=completions, completion_ids=ids, **columns)
            if len(values) != len(texts):
                raise ValueError(
                    f"GRPOTrainer: reward function {getattr(func, '__name__', j)!r} returned {len(values)} values for {len(texts)} completions."
                )
            table[:, j] = torch.tensor([float("nan") if v is None else float(v) for v in values])
            per_func[f"rewards/{getattr(func, '__name__', f'func{j}')}"] = float(torch.nanmean(table[:, j]))
        # a function returning None for a completion gives it no score (TRL's nansum)
        rewards = (table * self.reward_weights).nansum(-1)
        return rewards, per_func

    # ------------------------------------------------------------------ optimisation
    def _log_probs(self, model: Any, batch: dict, start: int, stop: int) -> torch.Tensor:
        with self._autocast():
            lp, _ = response_log_probs(
                model,
                batch["prompt"][start:stop],
                batch["prompt_mask"][start:stop],
                batch["completion"][start:stop],
                batch["valid"][start:stop],
                temperature=self.args.temperature,
                chunk_size=self.args.logprob_chunk_size,
                padding_free=self.padding_free,
            )
        return lp

    def _micro_step(
        self, batch: dict, start: int, stop: int, tokens_all: int, num_micro: int
    ) -> tuple[float, float, float]:
        """Forward and backward of completions ``start:stop`` of the round; returns (loss, clipped tokens, summed KL)."""
        args, n, sl = self.args, len(batch["texts"]), slice(start, stop)
        mask = batch["mask"][sl]
        log_probs = self._log_probs(self.model, batch, start, stop)
        old = batch["old"][sl] if "old" in batch else log_probs.detach()
        ref = batch["ref"][sl] if "ref" in batch else None
        eps_high = args.epsilon if args.epsilon_high is None else args.epsilon_high
        token_loss, weight = grpo_token_losses(
            log_probs,
            old,
            batch["advantages"][sl],
            mask,
            epsilon_low=args.epsilon,
            epsilon_high=eps_high,
            level=args.importance_sampling_level,
            ref_log_probs=ref,
            beta=args.beta,
            bias_correction=args.use_bias_correction_kl,
        )
        masked = token_loss * mask
        if args.loss_type == "grpo":
            loss = (masked.sum(-1) / mask.sum(-1).clamp(min=1)).sum() / n
        elif args.loss_type == "bnpo":
            loss = masked.sum() / mask.sum().clamp(min=1) / num_micro
        elif args.loss_type == "dapo":
            loss = masked.sum() / max(tokens_all, 1)
        else:  # dr_grpo
            loss = masked.sum() / (n * args.max_completion_length)
        loss.backward()
        with torch.no_grad():
            w = weight.expand_as(mask)
            clipped = float((((w < 1 - args.epsilon) | (w > 1 + eps_high)) & mask).sum())
            kl_sum = 0.0
            if ref is not None:
                delta = ref - log_probs
                kl_sum = float(((delta.exp() - delta - 1) * mask).sum())
        return float(loss.detach()), clipped, kl_sum

    def step(self) -> dict[str, float]:
        args = self.args
        if self._round is None or self._round_uses >= args.num_iterations:
            self._round, self._round_uses = self._new_round(), 0
        batch = self._round
        self._round_uses += 1
        n, size = len(batch["texts"]), args.per_device_train_batch_size
        tokens_all = int(batch["mask"].sum())
        micro = list(range(0, n, size))
        total, clipped, kl_sum = 0.0, 0.0, 0.0
        for k in micro:
            with self._padding_free_block():
                total_k, clipped_k, kl_k = self._micro_step(batch, k, k + size, tokens_all, len(micro))
            total, clipped, kl_sum = total + total_k, clipped + clipped_k, kl_sum + kl_k
        grad_norm = self._apply_gradients()
        if args.sync_ref_model and self.global_step % args.ref_model_sync_steps == 0:
            assert self.reference is not None  # GRPOConfig.validate: sync_ref_model needs beta > 0
            sync_reference(self.reference, args.ref_model_mixup_alpha)
        rewards = batch["rewards"]
        metrics = {
            "loss": total,
            "reward": float(rewards.mean()),
            "reward_std": float(rewards.std()),
            **batch["per_func"],
            "completion_length": float(batch["valid"].sum(-1).float().mean()),
            "clip_ratio": clipped / max(tokens_all, 1),
            "grad_norm": grad_norm,
        }
        if args.beta > 0:
            metrics["kl"] = kl_sum / max(tokens_all, 1)
        if args.log_completions and self._round_uses == 1 and self.global_step % args.logging_steps == 0:
            self._write_completions(batch)
        return metrics

    def _write_completions(self, batch: dict) -> None:
        """A few (prompt, completion, reward) rows of the round, appended to completions.jsonl."""
        path = Path(self.args.output_dir) / "completions.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        g = self.args.num_generations
        with open(path, "a", encoding="utf-8") as f:
            for i in range(min(self.args.num_completions_to_print, len(batch["texts"]))):
                prompt = batch["rows"][i // g]["prompt"]
                f.write(
                    json.dumps(
                        {
                            "step": self.global_step,
                            "prompt": prompt,
                            "completion": batch["texts"][i],
                            "reward": float(batch["rewards"][i]),
                            "advantage": float(batch["advantages"][i]),
                        }
                    )
                    + "\n"
                )

    def _trainer_state(self) -> dict[str, Any]:
        if self._round is not None and self._round_uses < self.args.num_iterations:
            raise RuntimeError(
                "GRPOTrainer: a checkpoint can only be written between generation rounds (after a multiple of num_iterations steps)."
            )
        return super()._trainer_state()
