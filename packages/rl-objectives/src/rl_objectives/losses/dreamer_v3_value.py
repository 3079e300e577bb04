"""DreamerV3ValueLoss: DreamerV3's critic loss (Hafner et al. 2023), TorchRL's names and keys.

On imagined trajectories (``forward``) the critic regresses the lambda-returns the actor loss
computed (``"lambda_target"``): ``(symlog(v) - symlog(R))^2`` (``"symlog_mse"``) or the two-hot
cross-entropy of its logits against ``R`` (``"two_hot"``), each step weighted by the imagination's
cumulative discount (``"discount_weight"`` when the data has it, else ``gamma^t``). With
``slow_critic_regularization > 0`` a target copy of the critic (update it with ``SoftUpdate``) adds
the same loss against its own predictions.

On replayed sequences (:meth:`replay_value_loss`) the target of state ``t`` is the lambda-return
over the replayed rewards of ``t + 1...``, bootstrapped with each state's first imagined return
(``"bootstrap"``), discount ``1 - 1 / horizon``.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import torch
from tdict import TensorDict, TensorDictBase, unravel_key

from .._stack import user_stacklevel as _user_stacklevel
from ..functional.dreamer import symexp_bins, symlog, two_hot_cross_entropy, two_hot_decode
from ..functional.value import vec_td_lambda_return_estimate
from .common import LossModule
from .utils import _check_reduction, _reduce

__all__ = ["DreamerV3ValueLoss", "replay_value_target"]


@torch.no_grad()
def replay_value_target(
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    bootstrap: torch.Tensor,
    horizon: float,
    lmbda: float,
) -> torch.Tensor:
    """Lambda-returns along replayed sequences (every input ``[*B, T]``): ``[*B, T - 1]``.

    Element ``t`` is the return of replay state ``t``: the rewards of steps ``t + 1...`` and the
    bootstraps of their states, discount ``1 - 1 / horizon``, cut at episode ends.

    Examples:
        >>> import torch
        >>> never = torch.zeros(1, 3, dtype=torch.bool)
        >>> replay_value_target(torch.ones(1, 3), never, never, torch.zeros(1, 3), horizon=2.0, lmbda=1.0)
        tensor([[1.5000, 1.0000]])
    """
    return vec_td_lambda_return_estimate(
        1.0 - 1.0 / horizon, lmbda, bootstrap[..., 1:], reward[..., 1:], done[..., 1:], terminated[..., 1:]
    )


class DreamerV3ValueLoss(LossModule):
    """DreamerV3's critic loss (see the module docs).

    ``forward`` returns ``(losses, data)``: ``loss_value`` and the detached ``value_slow_loss``,
    and the imagined data detached.

    Args:
        value_model: the critic (writes ``"state_value"``, and ``"state_value_logits"`` for
            ``"two_hot"``).
        value_loss: ``"symlog_mse"`` or ``"two_hot"``.
        discount_loss: weight the steps by ``gamma^t`` when the data holds no ``"discount_weight"``.
        gamma: that discount (read from ``actor_loss`` 's value estimator when one is given).
        num_value_bins: the two-hot support's size.
        actor_loss: the ``DreamerV3ActorLoss`` whose ``gamma`` to follow.
        slow_critic_regularization: the weight of the loss against the target critic (> 0 keeps
            target parameters).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Keys (``set_keys``): ``value``, ``value_logits``, ``discount_weight`` and, for the replay loss,
    ``reward`` / ``done`` / ``terminated`` (under ``"next"``) and ``bootstrap``.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.nn import TensorDictModule
        >>> from rl_objectives.modules import MLP
        >>> critic = TensorDictModule(MLP(4, 1, depth=1, num_cells=8), in_keys=["state"], out_keys=["state_value"])
        >>> loss = DreamerV3ValueLoss(critic)
        >>> losses, _ = loss(TensorDict(state=torch.randn(8, 4), lambda_target=torch.randn(8, 1), batch_size=[8]))
        >>> losses["loss_value"].shape
        torch.Size([])
    """

    default_keys: ClassVar[dict] = {
        "value": "state_value",
        "value_logits": "state_value_logits",
        "discount_weight": "discount_weight",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
        "bootstrap": "bootstrap",
    }
    value_bins: torch.Tensor

    def __init__(
        self,
        value_model: Any,
        value_loss: str = "symlog_mse",
        discount_loss: bool = True,
        gamma: float = 0.99,
        num_value_bins: int = 255,
        actor_loss: Any = None,
        slow_critic_regularization: float = 0.0,
        reduction: str | None = None,
    ) -> None:
        owner = type(self).__name__
        reduction = "mean" if reduction is None else reduction
        _check_reduction(owner, reduction)
        if value_loss not in ("symlog_mse", "two_hot"):
            raise ValueError(f"{owner}: value_loss must be 'symlog_mse' or 'two_hot', got {value_loss!r}.")
        if slow_critic_regularization < 0:
            raise ValueError(f"{owner}: slow_critic_regularization must be >= 0, got {slow_critic_regularization!r}.")
        super().__init__()
        self.convert_to_functional(value_model, "value_model", create_target_params=bool(slow_critic_regularization))
        self.value_loss, self.discount_loss, self.gamma = value_loss, discount_loss, gamma
        self.slow_critic_regularization, self.reduction = slow_critic_regularization, reduction
        self.__dict__["_actor_loss"] = actor_loss  # read, not owned: its parameters are not ours
        self.register_buffer("value_bins", symexp_bins(num_value_bins))

    def _resolved_gamma(self) -> float:
        actor_loss = self.__dict__.get("_actor_loss")
        gamma = self.gamma if actor_loss is None else actor_loss.value_estimator.gamma
        return float(gamma)

    def sync_gamma_with_actor_loss(self, actor_loss: Any) -> None:
        """Takes ``gamma`` from ``actor_loss`` 's value estimator (or pass ``actor_loss=`` when building)."""
        self.gamma = float(actor_loss.value_estimator.gamma)

    def _predict(self, data: TensorDictBase, *, target: bool = False) -> TensorDictBase:
        inputs = data.select(*self.value_model.in_keys, strict=False)
        if target:
            with torch.no_grad():
                return self.call_network("value_model", inputs, target=True)
        return self.call_network("value_model", inputs)

    def _step_loss(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Per step: the two-hot cross-entropy of logits, or the squared symlog error of values."""
        if self.value_loss == "two_hot":
            return two_hot_cross_entropy(prediction, target, self.value_bins)
        return (symlog(prediction) - symlog(target)).square()

    def _prediction(self, out: TensorDictBase) -> torch.Tensor:
        """The critic's logits (``"two_hot"``) or its value without the trailing dim."""
        keys = self.tensor_keys
        if self.value_loss != "two_hot":
            return out.get(keys.value).squeeze(-1)
        logits = out.get(keys.value_logits, None)
        if logits is None:  # TorchRL's deprecated place for the logits
            logits = out.get(keys.value)
            warnings.warn(
                f"{type(self).__name__}: reading the value logits at the decoded value's key {unravel_key(keys.value)!r} "
                "is deprecated (TorchRL removes it in 0.16); write them at the value_logits key.",
                DeprecationWarning,
                stacklevel=_user_stacklevel(),
            )
        if logits.shape[-1] != self.value_bins.shape[0]:
            raise ValueError(
                f"{type(self).__name__}: value_loss='two_hot' expects logits over {self.value_bins.shape[0]} bins, got a "
                f"last dim of {logits.shape[-1]}."
            )
        return logits

    def _slow_target(self, data: TensorDictBase) -> torch.Tensor:
        """The target critic's value of each step (decoded from its logits for ``"two_hot"``)."""
        value = self._predict(data, target=True).get(self.tensor_keys.value)
        if self.value_loss == "two_hot" and value.shape[-1] == self.value_bins.shape[0]:
            return two_hot_decode(value, self.value_bins)
        return value.squeeze(-1)

    def forward(self, fake_data: TensorDictBase) -> tuple[TensorDict, TensorDictBase]:
        target = fake_data.get("lambda_target").squeeze(-1)
        prediction = self._prediction(self._predict(fake_data))
        weight = fake_data.get(self.tensor_keys.discount_weight, None)
        if weight is not None:
            discount = weight.squeeze(-1)
        elif self.discount_loss and target.ndim >= 2:  # gamma^t along the imagined time (last) dim
            steps = torch.arange(target.shape[-1], device=target.device, dtype=target.dtype)
            discount = torch.full_like(steps, self._resolved_gamma()).pow(steps).expand_as(target)
        else:
            discount = torch.ones_like(target)
        loss = self._step_loss(prediction, target)
        slow = torch.zeros_like(loss)
        if self.slow_critic_regularization:
            slow = self._step_loss(prediction, self._slow_target(fake_data))
            loss = loss + self.slow_critic_regularization * slow
        losses = TensorDict.unchecked(
            {
                "loss_value": _reduce(discount * loss, self.reduction),
                "value_slow_loss": _reduce(discount * slow, self.reduction).detach(),
            },
            torch.Size([]),
            None,
        )
        return losses, fake_data.detach()

    def replay_value_loss(
        self, tensordict: TensorDictBase, *, horizon: float = 333.0, lmbda: float = 0.95
    ) -> TensorDict:
        """The critic loss on replayed sequences ``[*B, T]`` (see the module docs): ``loss_replay_value``.

        The last step (no next state) and the steps that end an episode do not count. Gradients
        reach the critic's inputs too, so this loss can train the representation.
        """
        keys, steps = self.tensor_keys, tensordict.batch_size

        def per_step(key: Any) -> torch.Tensor:  # [*B, T] (a trailing dim of 1 dropped)
            return tensordict.get(key).reshape(steps)

        done = per_step(("next", keys.done))
        target = replay_value_target(
            per_step(("next", keys.reward)),
            done,
            per_step(("next", keys.terminated)),
            per_step(keys.bootstrap),
            horizon,
            lmbda,
        )
        out = self._predict(tensordict)
        prediction = (
            self._prediction(out)[..., :-1, :] if self.value_loss == "two_hot" else self._prediction(out)[..., :-1]
        )
        loss = self._step_loss(prediction, target)
        if self.slow_critic_regularization:
            loss = loss + self.slow_critic_regularization * self._step_loss(
                prediction, self._slow_target(tensordict)[..., :-1]
            )
        keep = ~done[..., :-1]
        return TensorDict.unchecked(
            {"loss_replay_value": _reduce(keep.to(loss.dtype) * loss, self.reduction)}, torch.Size([]), None
        )
