"""DreamerV3ModelLoss: the world-model loss of DreamerV3 (Hafner et al. 2023), TorchRL's names and keys.

The world model (a TensorDict module, e.g. encoder + ``RSSMRolloutV3`` + decoder and heads) runs on
a batch of replayed sequences ``[*B, T]`` and writes under ``"next"`` the prior and posterior
logits, the reconstructed observations and the reward logits. The loss terms (each a ``[1]``
tensor, weighted by its ``lambda_*``):

- ``loss_model_kl``: :func:`~rl_objectives.functional.dreamer.categorical_kl_balanced` (DreamerV2's
  balance, ``kl_mode="balanced"``), or ``loss_model_dynamic`` and ``loss_model_representation``:
  :func:`~rl_objectives.functional.dreamer.categorical_kl_terms` (DreamerV3's, ``kl_mode="separate"``);
- ``loss_model_reco``: the squared (``"l2"``) or absolute error between observation and
  reconstruction, in symlog space (``reco_symlog``; without it, integer images are scaled to
  [0, 1]), summed over each step's features then averaged (or averaged over everything with
  ``global_average``); several heads (lists of keys) add up;
- ``loss_model_reward``: the two-hot cross-entropy of the reward logits against the true reward
  (``reward_two_hot``), or the squared error of the symlog rewards;
- ``loss_model_continue`` (``lambda_continue > 0``): the binary cross-entropy of the continue
  logits against ``not terminated`` (times ``continue_target_scale``).
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from tdict import TensorDict, TensorDictBase, unravel_key

from .._stack import user_stacklevel as _user_stacklevel
from ..functional.dreamer import (
    categorical_kl_balanced,
    categorical_kl_terms,
    symexp_bins,
    symlog,
    two_hot_cross_entropy,
)
from .common import LossModule

__all__ = ["DreamerV3ModelLoss"]


def _reconstruction_error(
    target: torch.Tensor,
    prediction: torch.Tensor,
    *,
    use_symlog: bool,
    loss: str,
    batch: torch.Size,
    global_average: bool,
) -> torch.Tensor:
    """One head's reconstruction loss, a ``[1]`` tensor (see the module docs)."""
    if use_symlog:
        target, prediction = symlog(target), symlog(prediction)
    else:
        target = target if target.is_floating_point() else target.float() / 255.0
        prediction = prediction.float()
    error = target - prediction
    error = error.square() if loss == "l2" else error.abs()
    if not global_average:
        error = error.reshape(*batch, -1).sum(-1)
    return error.mean().unsqueeze(-1)


class DreamerV3ModelLoss(LossModule):
    """DreamerV3's world-model loss (see the module docs for the terms).

    ``forward`` returns ``(losses, tensordict)``: the loss terms and the batch as the world model
    left it (detached unless ``detach_output=False``), with the true reward moved to
    ``("next", "true_reward")`` and the model's prediction at ``("next", "reward")``.

    Args:
        world_model: the model run on the batch.

    Keyword Args:
        lambda_kl / lambda_reco / lambda_reward / lambda_continue: the terms' weights (the continue
            term is off at 0, the default).
        kl_mode: ``"balanced"`` (``kl_alpha``, ``free_bits`` per categorical) or ``"separate"``
            (dynamics and representation terms, ``free_bits`` on their sum, ``unimix``).
        lambda_dynamic / lambda_representation: the separate terms' weights.
        unimix: the uniform share mixed into the categoricals (``"separate"``).
        continue_target_scale: multiplies the continue target of non-terminal steps, in (0, 1].
        kl_alpha / free_bits: the balanced KL's parameters.
        reco_loss: ``"l2"`` or ``"l1"``.
        reco_symlog: compare in symlog space (one flag, or one per head).
        reward_two_hot: the reward head writes logits over ``num_reward_bins`` (else a value).
        num_reward_bins: the reward support's size.
        global_average: average the reconstruction over every element instead of summing each step's.
        detach_output: return the world model's output detached.

    Keys (``set_keys``): ``reward`` / ``reward_logits`` / ``true_reward``, ``prior_logits`` /
    ``posterior_logits``, ``pixels`` / ``reco_pixels`` (a key or a list of keys, one per head),
    ``continue_pred``, ``done``, ``terminated``; all read under ``"next"``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> class WorldModel(torch.nn.Module):  # a stand-in writing what a DreamerV3 model writes
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.latents, self.reward, self.decoder = (torch.nn.LazyLinear(16), torch.nn.LazyLinear(16),
        ...                                                    torch.nn.LazyLinear(12))
        ...     def forward(self, td):
        ...         x = torch.cat([td["state"], td["belief"]], -1)
        ...         td.set(("next", "prior_logits"), self.latents(x).unflatten(-1, (4, 4)))
        ...         td.set(("next", "posterior_logits"), self.latents(x).unflatten(-1, (4, 4)).detach())
        ...         td.set(("next", "reco_pixels"), self.decoder(x))
        ...         td.set(("next", "reward_logits"), self.reward(x))
        ...         return td
        >>> loss = DreamerV3ModelLoss(WorldModel(), num_reward_bins=16, free_bits=0.1)
        >>> td = TensorDict({"state": torch.zeros(2, 3, 16), "belief": torch.zeros(2, 3, 8),
        ...                  "next": {"pixels": torch.rand(2, 3, 12), "reward": torch.randn(2, 3, 1)}}, [2, 3])
        >>> losses, _ = loss(td)
        >>> sorted(losses.keys()), losses["loss_model_reco"].shape
        (['loss_model_kl', 'loss_model_reco', 'loss_model_reward'], torch.Size([1]))
    """

    default_keys: ClassVar[dict] = {
        "reward": "reward",
        "reward_logits": "reward_logits",
        "true_reward": "true_reward",
        "prior_logits": "prior_logits",
        "posterior_logits": "posterior_logits",
        "pixels": "pixels",
        "reco_pixels": "reco_pixels",
        "continue_pred": "continue_pred",
        "done": "done",
        "terminated": "terminated",
    }
    reward_bins: torch.Tensor

    def __init__(
        self,
        world_model: Any,
        *,
        lambda_kl: float = 1.0,
        lambda_reco: float = 1.0,
        lambda_reward: float = 1.0,
        lambda_continue: float = 0.0,
        kl_mode: str = "balanced",
        lambda_dynamic: float = 1.0,
        lambda_representation: float = 0.1,
        unimix: float = 0.0,
        continue_target_scale: float = 1.0,
        kl_alpha: float = 0.8,
        free_bits: float = 1.0,
        reco_loss: str = "l2",
        reco_symlog: bool | list[bool] = True,
        reward_two_hot: bool = True,
        num_reward_bins: int = 255,
        global_average: bool = False,
        detach_output: bool = True,
    ) -> None:
        owner = type(self).__name__
        if kl_mode not in ("balanced", "separate"):
            raise ValueError(f"{owner}: kl_mode must be 'balanced' or 'separate', got {kl_mode!r}.")
        if reco_loss not in ("l1", "l2"):
            raise ValueError(f"{owner}: reco_loss must be 'l1' or 'l2', got {reco_loss!r}.")
        if not 0.0 < continue_target_scale <= 1.0:
            raise ValueError(f"{owner}: continue_target_scale must be in (0, 1], got {continue_target_scale!r}.")
        super().__init__()
        self.world_model = world_model
        self.lambda_kl, self.lambda_reco, self.lambda_reward = lambda_kl, lambda_reco, lambda_reward
        self.lambda_continue, self.kl_mode = lambda_continue, kl_mode
        self.lambda_dynamic, self.lambda_representation, self.unimix = lambda_dynamic, lambda_representation, unimix
        self.continue_target_scale, self.kl_alpha, self.free_bits = continue_target_scale, kl_alpha, free_bits
        self.reco_loss, self.reco_symlog, self.reward_two_hot = reco_loss, reco_symlog, reward_two_hot
        self.num_reward_bins, self.global_average, self.detach_output = num_reward_bins, global_average, detach_output
        self.register_buffer("reward_bins", symexp_bins(num_reward_bins))

    def _heads(self) -> list[tuple[Any, Any, bool]]:
        """(observation key, reconstruction key, symlog) of every reconstruction head."""
        keys = self.tensor_keys
        targets = keys.pixels if isinstance(keys.pixels, list) else [keys.pixels]
        predictions = keys.reco_pixels if isinstance(keys.reco_pixels, list) else [keys.reco_pixels]
        flags = [self.reco_symlog] * len(targets) if isinstance(self.reco_symlog, bool) else list(self.reco_symlog)
        if not targets or not len(targets) == len(predictions) == len(flags):
            raise ValueError(
                f"{type(self).__name__}: pixels ({targets}), reco_pixels ({predictions}) and reco_symlog ({flags}) "
                "must describe the same non-zero number of reconstruction heads."
            )
        return list(zip(targets, predictions, flags))

    def forward(self, tensordict: TensorDictBase) -> tuple[TensorDict, TensorDictBase]:
        keys = self.tensor_keys
        # new containers around the same tensors: the model writes into them, not into the caller's
        tensordict = tensordict.select(*tensordict.keys(True, True))
        tensordict.rename_key_(("next", keys.reward), ("next", keys.true_reward))
        tensordict = self.world_model(tensordict)

        def get(key: Any) -> torch.Tensor:
            return tensordict.get(unravel_key(("next", key)))

        losses = TensorDict.unchecked({}, torch.Size([]), None)
        posterior, prior = get(keys.posterior_logits), get(keys.prior_logits)
        if self.kl_mode == "separate":
            dynamic, representation = categorical_kl_terms(
                posterior, prior, free_nats=self.free_bits, unimix=self.unimix
            )
            losses.set("loss_model_dynamic", self.lambda_kl * self.lambda_dynamic * dynamic.unsqueeze(-1))
            losses.set(
                "loss_model_representation", self.lambda_kl * self.lambda_representation * representation.unsqueeze(-1)
            )
        else:
            kl = categorical_kl_balanced(posterior, prior, alpha=self.kl_alpha, free_bits=self.free_bits)
            losses.set("loss_model_kl", self.lambda_kl * kl.unsqueeze(-1))

        reco = sum(
            _reconstruction_error(
                get(target).contiguous(),
                get(prediction).contiguous(),
                use_symlog=flag,
                loss=self.reco_loss,
                batch=tensordict.batch_size,
                global_average=self.global_average,
            )
            for target, prediction, flag in self._heads()
        )
        losses.set("loss_model_reco", self.lambda_reco * reco)
        losses.set("loss_model_reward", self.lambda_reward * self._reward_loss(tensordict, get(keys.true_reward)))

        if self.lambda_continue > 0:
            continue_pred = tensordict.get(unravel_key(("next", keys.continue_pred)), None)
            ended = tensordict.get(unravel_key(("next", keys.terminated)), None)
            if ended is None:
                ended = tensordict.get(unravel_key(("next", keys.done)), None)
            if continue_pred is not None and ended is not None:
                target = (~ended).to(continue_pred.dtype) * self.continue_target_scale
                bce = F.binary_cross_entropy_with_logits(continue_pred.squeeze(-1), target.squeeze(-1))
                losses.set("loss_model_continue", self.lambda_continue * bce.unsqueeze(-1))
        return losses, tensordict.detach() if self.detach_output else tensordict

    def _reward_loss(self, tensordict: TensorDictBase, true_reward: torch.Tensor) -> torch.Tensor:
        keys = self.tensor_keys
        if not self.reward_two_hot:
            prediction = tensordict.get(unravel_key(("next", keys.reward)))
            return (symlog(true_reward) - symlog(prediction)).square().squeeze(-1).mean().unsqueeze(-1)
        logits = tensordict.get(unravel_key(("next", keys.reward_logits)), None)
        if logits is None:  # TorchRL's deprecated place for the logits
            logits = tensordict.get(unravel_key(("next", keys.reward)))
            warnings.warn(
                f"{type(self).__name__}: reading the reward logits at the decoded reward's key ('next', {keys.reward!r}) "
                "is deprecated (TorchRL removes it in 0.16); write them at the reward_logits key.",
                DeprecationWarning,
                stacklevel=_user_stacklevel(),
            )
        if logits.shape[-1] != self.num_reward_bins:
            raise ValueError(
                f"{type(self).__name__}: reward_two_hot=True expects reward logits over {self.num_reward_bins} bins, got a "
                f"last dim of {logits.shape[-1]}."
            )
        return two_hot_cross_entropy(logits, true_reward, self.reward_bins).mean().unsqueeze(-1)
