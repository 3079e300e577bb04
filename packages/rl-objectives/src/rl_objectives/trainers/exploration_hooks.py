"""Trainer hook that anneals exploration: steps ``EGreedyModule`` & co by the frames collected.

The annealed exploration modules of :mod:`rl_objectives.modules` (``EGreedyModule``,
``AdditiveGaussianModule``, ``OrnsteinUhlenbeckProcessModule``) count steps with ``step(frames)``;
:class:`AnnealExploration` makes that call once per collected batch, so a recipe needs no hand call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..modules.exploration import _Annealed
from .hooks import TrainerHookBase, _batch_frames, _trainer_frame_skip

__all__ = ["AnnealExploration"]


def _annealed_in(module: Any) -> list[_Annealed]:
    if isinstance(module, _Annealed):
        return [module]
    if isinstance(module, nn.Module):
        return [m for m in module.modules() if isinstance(m, _Annealed)]
    return []


class AnnealExploration(TrainerHookBase):
    """Steps annealed exploration modules by the frames of every collected batch.

    Registered at ``"batch_process"`` (once per collected batch, warm-up included), it calls
    ``module.step(batch.numel() * trainer.frame_skip)`` on each module, so after ``F`` collected
    frames the factor (``eps``, or ``sigma``) is ``max(end, init - F * (init - end) / annealing_num_steps)``.
    That is SB3's linear exploration schedule over env frames (``exploration_initial_eps`` to
    ``exploration_final_eps`` over ``exploration_fraction * total_timesteps`` frames, counted over all
    envs), taken at batch boundaries: the collector collects each batch with the value reached at its
    start. Register it before any ``"batch_process"`` op that changes the batch's size. The modules'
    step counters join the trainer's checkpoint (``{"anneal_counts": [...]}``). The factor is a
    buffer of the module, so a multi-process collector's policy copies get it with the weights
    (:class:`UpdateWeights`).

    Args:
        *modules: annealed exploration modules, or modules holding some (an exploration policy such
            as ``TensorDictSequential(policy, EGreedyModule(...))``): each annealed module found is
            stepped once per batch.

    Raises:
        TypeError: an argument is neither an annealed exploration module nor a module holding one.
        ValueError: no module is given.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from tdict.specs import Categorical
        >>> from rl_objectives.modules import EGreedyModule
        >>> from rl_objectives.trainers import AnnealExploration, Trainer
        >>> egreedy = EGreedyModule(Categorical(2), eps_init=1.0, eps_end=0.05, annealing_num_steps=1000)
        >>> batches = [TensorDict(batch_size=[4, 25])] * 3  # 3 batches of 4 envs x 25 steps
        >>> trainer = Trainer(collector=batches, total_frames=300, optim_steps_per_batch=0, loss_module=lambda td: td)
        >>> AnnealExploration(egreedy).register(trainer)
        >>> trainer.train()
        >>> round(float(egreedy.eps), 6)  # 1 - 300 * 0.95 / 1000
        0.715
        >>> trainer.state_dict()["anneal_exploration"]
        {'anneal_counts': [300]}
    """

    def __init__(self, *modules: Any) -> None:
        if not modules:
            raise ValueError(
                "AnnealExploration: give at least one exploration module (EGreedyModule, AdditiveGaussianModule, ...)."
            )
        found: list[_Annealed] = []
        for i, module in enumerate(modules):
            annealed = _annealed_in(module)
            if not annealed:
                raise TypeError(
                    f"AnnealExploration: modules[{i}] must be an annealed exploration module (EGreedyModule, "
                    f"AdditiveGaussianModule, OrnsteinUhlenbeckProcessModule) or a module holding one, "
                    f"got {type(module).__name__}."
                )
            found.extend(m for m in annealed if all(m is not seen for seen in found))
        self.modules = found
        self.frame_skip = 1
        self._trainer = None  # the trainer registered with, whose batch_frames count the frames

    def __call__(self, batch: Any) -> None:
        frames = _batch_frames("AnnealExploration", batch, self.frame_skip, self._trainer)
        for module in self.modules:
            module.step(frames)

    def state_dict(self) -> dict[str, Any]:
        return {"anneal_counts": [int(m._anneal_count) for m in self.modules]}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if not isinstance(state_dict, Mapping) or "anneal_counts" not in state_dict:
            got = sorted(state_dict) if isinstance(state_dict, Mapping) else type(state_dict).__name__
            raise KeyError(f"AnnealExploration.load_state_dict: expected a mapping with 'anneal_counts', got {got}.")
        counts = state_dict["anneal_counts"]
        if isinstance(counts, torch.Tensor):
            counts = counts.tolist()
        if not isinstance(counts, (list, tuple)) or len(counts) != len(self.modules):
            raise ValueError(
                f"AnnealExploration.load_state_dict: 'anneal_counts' must be a list of {len(self.modules)} ints "
                f"(one per module), got {counts!r}."
            )
        bad = [c for c in counts if isinstance(c, bool) or not isinstance(c, int) or c < 0]
        if bad:
            raise ValueError(
                f"AnnealExploration.load_state_dict: 'anneal_counts' must hold non-negative ints, got {counts!r}."
            )
        for module, count in zip(self.modules, counts):
            module._set_anneal_count(count)

    def register(self, trainer: Any, name: str = "anneal_exploration") -> None:
        frame_skip = _trainer_frame_skip("AnnealExploration", trainer)
        trainer.register_module(name, self)
        self.frame_skip, self._trainer = frame_skip, trainer
        trainer.register_op("batch_process", self)
