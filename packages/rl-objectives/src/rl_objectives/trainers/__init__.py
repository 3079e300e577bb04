"""rl_objectives.trainers: the Trainer loop, its hooks and loggers (``torchrl.trainers`` names).

The :class:`Trainer` iterates any iterable of TensorDicts (a collector), runs a loss and an optimizer
on every batch, and calls the hooks registered at its stages (:data:`HOOK_STAGES`). Hook objects
register themselves (``hook.register(trainer)``); the ones with state join the trainer's checkpoint.
:class:`AnnealExploration` steps exploration schedules by the frames collected, and
:class:`TargetNetUpdaterHook` counts target-network updates in optimizer steps or in frames.
Around it: :func:`evaluate_episodes` (returns of whole episodes), :class:`ProgressBar` (tqdm),
:func:`write_learning_curve` (matplotlib), the loggers (CSV, TensorBoard, Weights & Biases, MLflow) and
what resuming a run exactly needs (:func:`rng_state`: the global generators, saved in checkpoints;
it, :func:`set_rng_state` and :func:`seed_everything` are :mod:`tdict.seeding`'s, re-exported here).

Examples:
    >>> import torch
    >>> from torch import nn
    >>> from tdict import TensorDict
    >>> from rl_objectives.trainers import CountFramesLog, Trainer
    >>> class Regression(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.lin = nn.Linear(3, 1)
    ...     def forward(self, td):
    ...         return TensorDict(loss=(self.lin(td["x"]).squeeze(-1) - td["y"]).pow(2).mean())
    >>> x = torch.randn(2, 5, 3)
    >>> loss = Regression()
    >>> trainer = Trainer(collector=[TensorDict(x=x, y=x[..., 0], batch_size=[2, 5])] * 4, total_frames=40,
    ...                   optim_steps_per_batch=2, loss_module=loss, optimizer=torch.optim.SGD(loss.parameters(), lr=0.1))
    >>> CountFramesLog().register(trainer)
    >>> trainer.train()
    >>> trainer.state_dict()["count_frames_log"]
    {'frame_count': 40}
"""

from .data_hooks import (
    BatchSubSampler,
    ReplayBufferTrainer,
    RewardNormalizer,
    SelectKeys,
)
from .hooks import (
    ClearCudaCache,
    OptimizerHook,
    TargetNetUpdaterHook,
    TrainerHookBase,
    UpdateWeights,
)
from .exploration_hooks import AnnealExploration
from .evaluation import episode_returns, eval_rollout, evaluate_episodes
from .learning_curve import write_learning_curve
from .log_hooks import CountFramesLog, LogScalar, LogValidationReward
from .loggers import (
    CSVLogger,
    Logger,
    MLFlowLogger,
    TensorboardLogger,
    WandbLogger,
    generate_exp_name,
    get_logger,
    read_csv_histogram,
    read_csv_scalar,
)
from .progress import ProgressBar
from tdict.seeding import rng_state, seed_everything, set_rng_state
from .trainer import HOOK_STAGES, Trainer, atomic_torch_save

__all__ = [
    "HOOK_STAGES",
    "AnnealExploration",
    "BatchSubSampler",
    "CSVLogger",
    "ClearCudaCache",
    "CountFramesLog",
    "LogScalar",
    "LogValidationReward",
    "Logger",
    "MLFlowLogger",
    "OptimizerHook",
    "ProgressBar",
    "ReplayBufferTrainer",
    "RewardNormalizer",
    "SelectKeys",
    "TargetNetUpdaterHook",
    "TensorboardLogger",
    "WandbLogger",
    "Trainer",
    "TrainerHookBase",
    "UpdateWeights",
    "atomic_torch_save",
    "episode_returns",
    "eval_rollout",
    "evaluate_episodes",
    "generate_exp_name",
    "get_logger",
    "read_csv_histogram",
    "read_csv_scalar",
    "rng_state",
    "seed_everything",
    "set_rng_state",
    "write_learning_curve",
]
