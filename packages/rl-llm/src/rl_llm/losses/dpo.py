"""DPOLoss: Direct Preference Optimization on (chosen, rejected) response pairs (Rafailov et al. 2023)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
from tdict import TensorDict, TensorDictBase
from tdict.validation import check_positive
from torch import nn
from torch.nn import functional as F

from ._logprobs import LLMLossBase, masked_sum

if TYPE_CHECKING:
    from ..modules import TransformersWrapper

__all__ = ["DPOLoss", "dpo_loss"]


def dpo_loss(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float,
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-pair DPO loss and logits from sequence log-probs (all ``[B]``).

    ``logits = beta * ((chosen - ref_chosen) - (rejected - ref_rejected))``;
    ``loss = -(1 - ls) * log sigmoid(logits) - ls * log sigmoid(-logits)`` (``ls`` = label smoothing,
    the conservative DPO of TRL's ``sigmoid`` loss; 0 gives the original DPO).
    """
    logits = beta * ((chosen - ref_chosen) - (rejected - ref_rejected))
    loss = -(1.0 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)
    return loss, logits


class DPOLoss(LLMLossBase):
    """``-log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r)))`` on summed response log-probs.

    The input is a batch ``[B]`` with two sub-TensorDicts ``"chosen"`` and ``"rejected"`` (see
    :func:`~rl_llm.data.make_preference_batch`), each in the prompt/response layout the actor reads.

    Args:
        actor_network: a :class:`~rl_llm.TransformersWrapper` with ``generate=False``.

    Keyword Args:
        beta: inverse temperature of the implicit reward (0.1 as in the paper and TRL).
        ref_network: a frozen reference scorer (another ``TransformersWrapper(generate=False)``);
            its log-probs are computed under ``no_grad``. None: read stored reference log-probs at
            ``("chosen", "ref_log_probs", "response")`` / ``("rejected", ...)``, per token ``[B, L]``.
        label_smoothing: probability that a label is flipped (conservative DPO), in [0, 0.5).

    Returns a TensorDict with ``loss_dpo`` and detached diagnostics ``rewards_chosen``,
    ``rewards_rejected`` (``beta * (pi - ref)``, batch means), ``reward_margin`` and
    ``reward_accuracy`` (share of pairs whose chosen reward is higher).

    Examples:
        >>> import torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> from tdict import TensorDict, TensorDictBase
        >>> from rl_llm import DPOLoss, TransformersWrapper
        >>> model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=11,
        ...                                    bos_token_id=1, eos_token_id=1, pad_token_id=0))
        >>> def pair(response):
        ...     return TensorDict({("tokens", "prompt"): torch.tensor([[5, 6]]),
        ...                        ("masks", "prompt_attention_mask"): torch.tensor([[True, True]]),
        ...                        ("tokens", "response"): torch.tensor([response]),
        ...                        ("masks", "response_mask"): torch.tensor([[True, True]]),
        ...                        ("ref_log_probs", "response"): torch.full((1, 2), -2.4)}, batch_size=[1])
        >>> td = TensorDict(chosen=pair([7, 8]), rejected=pair([9, 3]), batch_size=[1])
        >>> out = DPOLoss(TransformersWrapper(model, generate=False), beta=0.1)(td)
        >>> out["loss_dpo"].backward()
        >>> sorted(out.keys())
        ['loss_dpo', 'reward_accuracy', 'reward_margin', 'rewards_chosen', 'rewards_rejected']
    """

    default_keys: ClassVar[dict[str, Any]] = {
        "chosen": "chosen",
        "rejected": "rejected",
        "ref_log_prob": ("ref_log_probs", "response"),
    }
    ref_network: TransformersWrapper | None  # kept in __dict__, out of the module tree (see __init__)

    def __init__(
        self,
        actor_network: nn.Module,
        *,
        beta: float = 0.1,
        ref_network: nn.Module | None = None,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(actor_network)
        check_positive("DPOLoss", "beta", beta)
        if not 0.0 <= label_smoothing < 0.5:
            raise ValueError(f"DPOLoss: label_smoothing must be in [0, 0.5), got {label_smoothing!r}.")
        if ref_network is not None and getattr(ref_network, "generate", False):
            raise ValueError("DPOLoss: ref_network must score responses (TransformersWrapper(generate=False)).")
        self.beta = float(beta)
        self.label_smoothing = float(label_smoothing)
        # kept out of the module tree: the reference is frozen and must not reach an optimizer
        self.__dict__["ref_network"] = ref_network

    def _sequence_log_probs(self, side: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        keys = self.actor_network.keys
        out = self.actor_network(side.copy())
        mask = out.get(keys["response_mask"]).bool()
        policy = masked_sum(out.get(keys["log_probs"]), mask)
        if self.ref_network is not None:
            with torch.no_grad():
                ref_out = self.ref_network(side.copy())
                ref_tokens = ref_out.get(self.ref_network.keys["log_probs"])
        else:
            ref_tokens = side.get(self.tensor_keys.ref_log_prob, None)
            if ref_tokens is None:
                raise KeyError(
                    f"DPOLoss: no ref_network and no stored reference log-probs {self.tensor_keys.ref_log_prob!r}; "
                    f"keys present: {sorted(map(str, side.keys(True, True)))}."
                )
            if ref_tokens.shape != mask.shape:
                raise ValueError(
                    f"DPOLoss: reference log-probs shape {tuple(ref_tokens.shape)} != response mask shape {tuple(mask.shape)}."
                )
        return policy, masked_sum(ref_tokens.detach(), mask)

    def forward(self, tensordict: TensorDict) -> TensorDict:
        chosen = self._get(tensordict, "chosen")
        rejected = self._get(tensordict, "rejected")
        if not isinstance(chosen, TensorDict) or not isinstance(rejected, TensorDict):
            raise TypeError("DPOLoss: 'chosen' and 'rejected' must be sub-TensorDicts in the prompt/response layout.")
        # _get is typed for tensor entries; these two are sub-TensorDicts (checked above)
        chosen_td, rejected_td = cast(TensorDictBase, chosen), cast(TensorDictBase, rejected)
        if chosen_td.batch_dims != 1:
            chosen_td, rejected_td = chosen_td.reshape(-1), rejected_td.reshape(-1)
        pi_c, ref_c = self._sequence_log_probs(chosen_td)
        pi_r, ref_r = self._sequence_log_probs(rejected_td)
        loss, _ = dpo_loss(pi_c, pi_r, ref_c, ref_r, self.beta, self.label_smoothing)
        with torch.no_grad():
            reward_c = self.beta * (pi_c - ref_c)
            reward_r = self.beta * (pi_r - ref_r)
        return TensorDict(
            {
                "loss_dpo": loss.mean(),
                "rewards_chosen": reward_c.mean(),
                "rewards_rejected": reward_r.mean(),
                "reward_margin": (reward_c - reward_r).mean(),
                "reward_accuracy": (reward_c > reward_r).float().mean(),
            },
            batch_size=[],
        )
