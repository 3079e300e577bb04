"""GRPO: group-relative advantages (:class:`MCAdvantage`) and the clipped token-level loss (:class:`GRPOLoss`).

Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath) samples ``G`` responses per
prompt, scores each with a scalar reward, and uses as advantage the reward standardised within its
group, ``A_i = (r_i - mean_g r) / (std_g r + eps)``, for every token of response ``i``. The policy
loss is PPO's clipped surrogate per token; an optional KL penalty towards a frozen reference model
uses the k3 estimator ``exp(ref - logp) - (ref - logp) - 1`` (unbiased, always >= 0).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tdict import TensorDict, unravel_key
from tdict.validation import check_positive_int
from torch import nn

from ..data import PROMPT_MASK, PROMPT_TOKENS, RESPONSE_LOG_PROBS, RESPONSE_MASK
from ._logprobs import LLMLossBase, aggregate_tokens, masked_mean

__all__ = ["GRPOLoss", "MCAdvantage", "group_advantages", "grpo_token_loss"]


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    eps: float = 1e-4,
    unbiased: bool = True,
    scale: bool = True,
) -> torch.Tensor:
    """``(r - group mean) / (group std + eps)`` for every sample, groups given by ``group_ids``.

    Args:
        rewards: ``[N]`` float, one scalar reward per response.
        group_ids: ``[N]`` long, samples with equal ids form a group (any ints).
        eps: added to the std (TRL's GRPO default, 1e-4): a group whose rewards are all equal gets
            advantage 0, not NaN.
        unbiased: Bessel-corrected std (``N - 1``), as ``torch.std`` and TRL; needs groups of >= 2.
        scale: divide by the std (False: only centre, Dr. GRPO's choice).

    Examples:
        >>> import torch
        >>> from rl_llm import group_advantages
        >>> adv = group_advantages(torch.tensor([1., 0., 3., 3.]), torch.tensor([0, 0, 1, 1]))
        >>> [round(a, 3) for a in adv.tolist()]
        [0.707, -0.707, 0.0, 0.0]
    """
    if rewards.ndim != 1 or not rewards.is_floating_point():
        raise ValueError(
            f"group_advantages: rewards must be a 1-D float tensor [N], got shape {tuple(rewards.shape)} dtype {rewards.dtype}."
        )
    if group_ids.shape != rewards.shape:
        raise ValueError(
            f"group_advantages: group_ids shape {tuple(group_ids.shape)} != rewards shape {tuple(rewards.shape)}."
        )
    _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    if unbiased and scale and bool((counts < 2).any()):
        raise ValueError(
            f"group_advantages: unbiased std needs groups of >= 2 samples, got group sizes {counts.tolist()}."
        )
    n_groups = counts.shape[0]
    counts_f = counts.to(rewards.dtype)
    mean = rewards.new_zeros(n_groups).index_add_(0, inverse, rewards) / counts_f
    centred = rewards - mean[inverse]
    if not scale:
        return centred
    sq = rewards.new_zeros(n_groups).index_add_(0, inverse, centred.pow(2))
    std = (sq / (counts_f - 1 if unbiased else counts_f)).sqrt()
    return centred / (std[inverse] + eps)


class MCAdvantage(nn.Module):
    """Writes GRPO's group-relative advantage ``(r - mean) / (std + eps)`` for a batch of responses.

    Args:
        grpo_size: responses per prompt (G). The batch ``[N * G]`` must hold whole groups.

    Keyword Args:
        group_by: ``"order"``: groups are consecutive runs of ``grpo_size`` rows (the layout of
            :func:`~rl_llm.data.repeat_prompts`); ``"prompt"``: rows with identical prompt tokens and
            mask form a group, and every group must have ``grpo_size`` rows. A batch shaped
            ``[n_prompts, G]`` is also accepted (groups along the last dim).
        eps, unbiased, scale: as in :func:`group_advantages` (defaults follow TRL: 1e-4, Bessel std).
        reward_key: one scalar reward per response, shaped as the batch (default ``"reward"``).
        advantage_key: where the advantage goes (default ``"advantage"``), same shape.
        prompt_key, prompt_mask_key: read with ``group_by="prompt"``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_llm import MCAdvantage
        >>> td = TensorDict(reward=torch.tensor([1., 0., 0., 0.]), batch_size=[4])
        >>> [round(a, 3) for a in MCAdvantage(grpo_size=2)(td)["advantage"].tolist()]
        [0.707, -0.707, 0.0, 0.0]
    """

    def __init__(
        self,
        grpo_size: int,
        *,
        group_by: str = "order",
        eps: float = 1e-4,
        unbiased: bool = True,
        scale: bool = True,
        reward_key: Any = "reward",
        advantage_key: Any = "advantage",
        prompt_key: Any = PROMPT_TOKENS,
        prompt_mask_key: Any = PROMPT_MASK,
    ) -> None:
        super().__init__()
        check_positive_int("MCAdvantage", "grpo_size", grpo_size)
        if group_by not in ("order", "prompt"):
            raise ValueError(f"MCAdvantage: group_by must be 'order' or 'prompt', got {group_by!r}.")
        if unbiased and scale and grpo_size < 2:
            raise ValueError(
                "MCAdvantage: an unbiased std needs grpo_size >= 2 (or pass unbiased=False / scale=False)."
            )
        self.grpo_size = grpo_size
        self.group_by = group_by
        self.eps = float(eps)
        self.unbiased = bool(unbiased)
        self.scale = bool(scale)
        self.reward_key = unravel_key(reward_key)
        self.advantage_key = unravel_key(advantage_key)
        self.prompt_key = unravel_key(prompt_key)
        self.prompt_mask_key = unravel_key(prompt_mask_key)

    def forward(self, tensordict: TensorDict) -> TensorDict:
        reward = tensordict.get(self.reward_key, None)
        if reward is None:
            raise KeyError(
                f"MCAdvantage: the input lacks the reward {self.reward_key!r}; keys: {sorted(map(str, tensordict.keys(True, True)))}."
            )
        if reward.shape != tensordict.batch_size:
            raise ValueError(
                f"MCAdvantage: {self.reward_key!r} must be one scalar per response, shaped as the batch "
                f"{tuple(tensordict.batch_size)} (no trailing 1), got {tuple(reward.shape)}."
            )
        flat = reward.reshape(-1).float() if not reward.is_floating_point() else reward.reshape(-1)
        n = flat.shape[0]
        g = self.grpo_size
        if self.group_by == "order":
            if n % g:
                raise ValueError(
                    f"MCAdvantage: batch of {n} responses is not a whole number of groups of grpo_size={g}."
                )
            group_ids = torch.arange(n, device=flat.device) // g
        else:
            tokens = tensordict.get(self.prompt_key).reshape(n, -1)
            mask = tensordict.get(self.prompt_mask_key).reshape(n, -1).long()
            rows = torch.cat([tokens * mask, mask], dim=1)  # pads never split a group
            _, group_ids, counts = torch.unique(rows, dim=0, return_inverse=True, return_counts=True)
            if bool((counts != g).any()):
                raise ValueError(
                    f"MCAdvantage: group_by='prompt' found groups of sizes {counts.tolist()}, expected all {g}."
                )
        adv = group_advantages(flat, group_ids, eps=self.eps, unbiased=self.unbiased, scale=self.scale)
        tensordict.set(self.advantage_key, adv.reshape(reward.shape))
        return tensordict


def grpo_token_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantage: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped surrogate ``-min(rho * A, clip(rho, 1 - low, 1 + high) * A)`` and ``rho``.

    ``log_probs``, ``old_log_probs``: ``[B, L]``; ``advantage``: ``[B]`` (broadcast over tokens).
    """
    ratio = (log_probs - old_log_probs).exp()
    adv = advantage.unsqueeze(-1)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv
    return -torch.minimum(unclipped, clipped), ratio


class GRPOLoss(LLMLossBase):
    """GRPO's clipped policy loss per response token, with optional KL-to-reference and entropy terms.

    Args:
        actor_network: a :class:`~rl_llm.TransformersWrapper` with ``generate=False`` (it writes
            the current log-probs of the stored responses, with gradients).

    Keyword Args:
        clip_epsilon: ratio clip; a float ``e`` clips to ``[1 - e, 1 + e]``, a pair ``(low, high)``
            to ``[1 - low, 1 + high]`` (DAPO's asymmetric clip).
        kl_to_ref_coeff: weight of the KL penalty to the reference log-probs (read from
            ``("ref_log_probs", "response")``); None: no penalty (and the key is not read).
        entropy_coeff: weight of an entropy bonus (``loss_entropy = -coeff * entropy``); needs an
            actor built with ``return_entropy=True``.
        aggregation: how per-token terms become scalars: ``"token_mean"`` (default), ``"sequence_mean"``
            or ``"sum"`` (see :func:`~rl_llm.losses.aggregate_tokens`).

    Reads ``("tokens", "prompt")``, its mask, ``("tokens", "response")``, ``("masks", "response_mask")``,
    the behaviour log-probs ``("log_probs", "response")`` recorded at sampling, ``"advantage"`` ``[B]``
    and, for the KL, ``("ref_log_probs", "response")``. The actor's fresh log-probs are written to a
    copy, so the stored behaviour log-probs are never overwritten.

    Returns a TensorDict with ``loss_objective``, ``loss_kl_to_ref`` (when used), ``loss_entropy``
    (when used) and the detached diagnostics ``clip_fraction`` (share of valid tokens whose ratio
    was clipped), ``kl_approx`` (k3 estimate of KL(behaviour || current) per token),
    ``kl_to_ref`` (when used), ``entropy`` (when used) and ``ESS`` (the normalised effective sample
    size of the token ratios, ``(sum rho)^2 / (n * sum rho^2)`` in (0, 1]).

    Examples:
        >>> import torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> from tdict import TensorDict
        >>> from rl_llm import GRPOLoss, MCAdvantage, TransformersWrapper
        >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=11, bos_token_id=1,
        ...                                    eos_token_id=1, pad_token_id=0)).eval()  # no dropout
        >>> sampler = TransformersWrapper(model, generate_kwargs={"max_new_tokens": 3})
        >>> td = TensorDict({("tokens", "prompt"): torch.tensor([[5, 6]] * 4),
        ...                  ("masks", "prompt_attention_mask"): torch.ones(4, 2, dtype=torch.bool)}, batch_size=[4])
        >>> td = sampler(td)
        >>> td["reward"] = (td["tokens", "response"] == 7).float().mean(-1)
        >>> td = MCAdvantage(grpo_size=4)(td)
        >>> loss = GRPOLoss(TransformersWrapper(model, generate=False))
        >>> out = loss(td)
        >>> out["loss_objective"].backward()
        >>> round(float(out["ESS"]), 4)  # no update yet: every ratio is 1
        1.0
    """

    default_keys: ClassVar[dict[str, Any]] = {
        "response_mask": RESPONSE_MASK,
        "sample_log_prob": RESPONSE_LOG_PROBS,
        "ref_log_probs": ("ref_log_probs", "response"),  # TorchRL's GRPOLoss key name
        "advantage": "advantage",
    }
    deprecated_key_names: ClassVar[dict[str, str]] = {"ref_log_prob": "ref_log_probs"}

    def __init__(
        self,
        actor_network: nn.Module,
        *,
        clip_epsilon: float | tuple[float, float] = 0.2,
        kl_to_ref_coeff: float | None = None,
        entropy_coeff: float | None = None,
        aggregation: str = "token_mean",
    ) -> None:
        super().__init__(actor_network)
        if isinstance(clip_epsilon, (tuple, list)):
            if len(clip_epsilon) != 2:
                raise ValueError(f"GRPOLoss: clip_epsilon pair must be (low, high), got {clip_epsilon!r}.")
            low, high = (float(c) for c in clip_epsilon)
        else:
            low = high = float(clip_epsilon)
        if not (0.0 <= low < 1.0) or high < 0.0:
            raise ValueError(f"GRPOLoss: clip_epsilon must give 0 <= low < 1 and high >= 0, got {clip_epsilon!r}.")
        if aggregation not in ("token_mean", "sequence_mean", "sum"):
            raise ValueError(
                f"GRPOLoss: aggregation must be 'token_mean', 'sequence_mean' or 'sum', got {aggregation!r}."
            )
        if entropy_coeff is not None and not getattr(actor_network, "return_entropy", False):
            raise ValueError(
                "GRPOLoss: entropy_coeff needs an actor that writes entropies (TransformersWrapper(..., return_entropy=True))."
            )
        self.clip_low, self.clip_high = low, high
        self.kl_to_ref_coeff = None if kl_to_ref_coeff is None else float(kl_to_ref_coeff)
        self.entropy_coeff = None if entropy_coeff is None else float(entropy_coeff)
        self.aggregation = aggregation

    def _current(self, tensordict: TensorDict) -> TensorDict:
        # a shallow copy: the actor's writes must not replace the stored behaviour log-probs
        return self.actor_network(tensordict.copy())

    def forward(self, tensordict: TensorDict) -> TensorDict:
        if tensordict.batch_dims != 1:
            tensordict = tensordict.reshape(-1)
        mask = self._get(tensordict, "response_mask").bool()
        old = self._get(tensordict, "sample_log_prob")
        advantage = self._get(tensordict, "advantage")
        if old.shape != mask.shape:
            raise ValueError(
                f"GRPOLoss: behaviour log-probs shape {tuple(old.shape)} != response mask shape {tuple(mask.shape)}."
            )
        if advantage.shape != mask.shape[:1]:
            raise ValueError(
                f"GRPOLoss: {self.tensor_keys.advantage!r} must be one scalar per response, shape {tuple(mask.shape[:1])} "
                f"(no trailing 1), got {tuple(advantage.shape)}."
            )
        ref = None
        if self.kl_to_ref_coeff is not None:
            ref = self._get(tensordict, "ref_log_probs")
            if ref.shape != mask.shape:
                raise ValueError(
                    f"GRPOLoss: reference log-probs shape {tuple(ref.shape)} != response mask shape {tuple(mask.shape)}."
                )
        current = self._current(tensordict)
        log_probs = current.get(self.actor_network.keys["log_probs"])
        token_loss, ratio = grpo_token_loss(log_probs, old.detach(), advantage.detach(), self.clip_low, self.clip_high)
        agg = self.aggregation
        out = {"loss_objective": aggregate_tokens(token_loss, mask, agg)}
        with torch.no_grad():
            clipped = (ratio < 1.0 - self.clip_low) | (ratio > 1.0 + self.clip_high)
            out["clip_fraction"] = masked_mean(clipped.float(), mask)
            log_ratio = log_probs - old
            out["kl_approx"] = masked_mean(ratio - 1.0 - log_ratio, mask)
            w = torch.where(mask, ratio, ratio.new_zeros(()))
            n = mask.sum().clamp(min=1)
            out["ESS"] = w.sum().pow(2) / (n * w.pow(2).sum()).clamp(min=1e-12)
        if ref is not None and self.kl_to_ref_coeff is not None:  # both set or both None
            delta = ref.detach() - log_probs
            k3 = delta.exp() - delta - 1.0
            kl = aggregate_tokens(k3, mask, agg)
            out["loss_kl_to_ref"] = self.kl_to_ref_coeff * kl
            out["kl_to_ref"] = masked_mean(k3, mask).detach()
        if self.entropy_coeff is not None:
            entropy = current.get(self.actor_network.keys["entropy"])
            ent = aggregate_tokens(entropy, mask, agg)
            out["loss_entropy"] = -self.entropy_coeff * ent
            out["entropy"] = masked_mean(entropy, mask).detach()
        return TensorDict(out, batch_size=[])
