"""Loggers: where the trainer's scalars, histograms, videos and hyper-parameters go
(``torchrl.record.loggers`` names).

One interface (:class:`Logger`): ``log_scalar(name, value, step=None)``,
``log_histogram(name, data, step=None, **kwargs)``, ``log_video(name, video, step=None, **kwargs)``
(uint8 ``[T, C, H, W]`` or ``[B, T, C, H, W]``: what rl_envs' ``VideoRecorder`` hands its logger),
``log_hparams(cfg)`` and ``close()``; the same checks everywhere (a bad argument raises naming it
before anything is written) and ``step=None`` meaning the step after the highest one logged for
that name (0, 1, 2, ... when no step is given).

- :class:`CSVLogger` (``loggers.csv``): needs nothing; mp4/gif videos need ``rl-objectives[video]``;
- :class:`TensorboardLogger` (``loggers.tensorboard``): ``rl-objectives[tensorboard]``;
- :class:`WandbLogger` (``loggers.wandb``): ``rl-objectives[wandb]``;
- :class:`MLFlowLogger` (``loggers.mlflow``): ``rl-objectives[mlflow]``.

Backends are imported when a logger is built, never when this package is imported; a missing one
raises ``ImportError`` naming the extra to install. :func:`get_logger` builds one by type name.
"""

from .base import Logger, generate_exp_name
from .csv import CSVLogger, read_csv_histogram, read_csv_scalar
from .mlflow import MLFlowLogger
from .tensorboard import TensorboardLogger
from .utils import LOGGER_TYPES, get_logger
from .wandb import WandbLogger

__all__ = [
    "LOGGER_TYPES",
    "CSVLogger",
    "Logger",
    "MLFlowLogger",
    "TensorboardLogger",
    "WandbLogger",
    "generate_exp_name",
    "get_logger",
    "read_csv_histogram",
    "read_csv_scalar",
]
