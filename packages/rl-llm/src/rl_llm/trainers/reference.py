"""The reference policy of DPO and GRPO: a frozen copy, or the base model under a PEFT adapter.

- ``ref_model`` given: it is used as is, frozen (``requires_grad`` off, dropout off);
- a PEFT model without ``ref_model``: the base model, i.e. the same model with its adapter disabled
  (no second copy of the weights);
- otherwise: a frozen deep copy of the model in memory, taken when the trainer is built (TRL reloads
  the model from its saved path; a model built or changed in memory has none).

:func:`sync_reference` moves a copied reference towards the policy (TR-DPO's soft update,
``ref <- alpha * policy + (1 - alpha) * ref``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["Reference", "disable_dropout", "sync_reference"]


def disable_dropout(model: nn.Module) -> None:
    """Set every dropout probability of ``model`` to 0 (scores then do not depend on the mode)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


def _is_peft(model: nn.Module) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


class Reference:
    """What scores the reference log-probs: ``with reference.scoring() as ref_model: ...``."""

    def __init__(self, model: nn.Module, ref_model: nn.Module | None = None) -> None:
        self.policy = model
        if ref_model is not None:
            self.model: nn.Module | None = ref_model
        elif _is_peft(model):
            self.model = None  # the policy with its adapter disabled
        else:
            self.model = copy.deepcopy(model)
        if self.model is not None:
            self.model.requires_grad_(False)
            disable_dropout(self.model)
            self.model.eval()

    @property
    def is_copy(self) -> bool:
        """Whether the reference is a separate model (a copy or the ``ref_model`` given), not the PEFT policy with its adapter off."""
        return self.model is not None

    @contextmanager
    def scoring(self) -> Iterator[nn.Module]:
        """The reference model under ``torch.no_grad`` (the policy with its adapter off, for PEFT)."""
        with torch.no_grad():
            if self.model is not None:
                yield self.model
            else:
                with self.policy.disable_adapter():  # pyright: ignore[reportCallIssue]  # a peft model's method
                    yield self.policy


@torch.no_grad()
def sync_reference(reference: Reference, alpha: float) -> None:
    """``ref <- alpha * policy + (1 - alpha) * ref`` for every parameter (a copied reference only)."""
    if reference.model is None:
        raise ValueError("sync_reference: the reference is the PEFT base model; there is no copy to update.")
    ref = dict(reference.model.named_parameters())
    for name, param in reference.policy.named_parameters():
        if name in ref:
            ref[name].lerp_(param.detach().to(ref[name].dtype), alpha)
