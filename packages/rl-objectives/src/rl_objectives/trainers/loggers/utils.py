"""get_logger: a logger by its type name (TorchRL's ``torchrl.record.loggers.get_logger``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .base import Logger, generate_exp_name
from .csv import CSVLogger
from .mlflow import MLFlowLogger
from .tensorboard import TensorboardLogger
from .wandb import WandbLogger

__all__ = ["LOGGER_TYPES", "generate_exp_name", "get_logger"]

LOGGER_TYPES = ("csv", "tensorboard", "wandb", "mlflow")


def _mlflow_uri(logger_name: str | os.PathLike) -> str:
    """A URI is kept; a folder becomes ``sqlite:///<folder>/mlflow.db`` (MLflow >= 3.10 refuses the
    plain file store)."""
    if (
        isinstance(logger_name, str)
        and ":" in logger_name
        and not os.path.isabs(logger_name)
        and len(logger_name.split(":", 1)[0]) > 1
    ):
        return logger_name
    folder = Path(os.path.abspath(logger_name))
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder.joinpath('mlflow.db').as_posix()}"


def get_logger(
    logger_type: str | None, logger_name: str | os.PathLike, experiment_name: str, **kwargs: Any
) -> Logger | None:
    """Builds a logger by type: ``"csv"``, ``"tensorboard"``, ``"wandb"`` or ``"mlflow"`` (``""`` or
    ``None``: no logger).

    ``logger_name`` is where the logs go: the ``log_dir`` of the CSV and TensorBoard loggers, the
    ``save_dir`` of the W&B one, and for MLflow a tracking URI, or a folder that gets the database
    ``<folder>/mlflow.db`` (``sqlite:///``; TorchRL uses the file store there, which MLflow >= 3.10
    refuses by default) with the artifacts in ``<folder>/mlartifacts``.

    Args:
        logger_type: the backend.
        logger_name: the log folder (or MLflow tracking URI).
        experiment_name: the experiment's name (``exp_name``).
        **kwargs: passed to the logger class. As in TorchRL, ``wandb_kwargs={...}`` and
            ``mlflow_kwargs={...}`` are unpacked for their logger (and dropped for the others).

    Raises:
        ValueError: for another type, naming the ones there are.
        ImportError: naming the package (and the ``rl-objectives[...]`` extra) a backend needs.

    Examples:
        >>> import tempfile
        >>> from rl_objectives.trainers import get_logger
        >>> get_logger("csv", tempfile.mkdtemp(), "run").exp_name
        'run'
        >>> get_logger(None, "logs", "run") is None
        True
    """
    if logger_type in ("", None):
        return None
    if logger_type not in LOGGER_TYPES:
        raise ValueError(
            f"get_logger: unknown logger_type={logger_type!r}; choose one of {list(LOGGER_TYPES)} or None."
        )
    per_type = {t: kwargs.pop(f"{t}_kwargs", None) or {} for t in ("wandb", "mlflow")}
    kwargs = {**kwargs, **per_type.get(logger_type, {})}
    if logger_type == "csv":
        return CSVLogger(exp_name=experiment_name, log_dir=logger_name, **kwargs)
    if logger_type == "tensorboard":
        return TensorboardLogger(exp_name=experiment_name, log_dir=logger_name, **kwargs)
    if logger_type == "wandb":
        return WandbLogger(exp_name=experiment_name, save_dir=logger_name, **kwargs)
    return MLFlowLogger(exp_name=experiment_name, tracking_uri=_mlflow_uri(logger_name), **kwargs)
