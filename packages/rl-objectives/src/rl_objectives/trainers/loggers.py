"""Loggers: where the trainer's scalars go (``torchrl.record.loggers`` names).

:class:`CSVLogger` needs nothing beyond the standard library; :class:`TensorboardLogger` needs the
``tensorboard`` package, imported only when the logger is built. WandB and MLflow loggers are not
provided: wrap their clients in a :class:`Logger` subclass (three methods).
"""

from __future__ import annotations

import abc
import json
import os
import uuid
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import torch

from ._atomic import atomic_write
from .trainer import atomic_torch_save

__all__ = ["CSVLogger", "Logger", "TensorboardLogger", "generate_exp_name", "get_logger", "read_csv_scalar"]


def _number(owner: str, name: str, value: Any) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{owner}.log_scalar: {name!r} must be a scalar, got a tensor of shape {tuple(value.shape)}.")
        return float(value.item())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}.log_scalar: {name!r} must be a number or a one-element tensor, got {type(value).__name__}.")
    return float(value)


def _check_name(owner: str, name: Any) -> str:
    """A metric name is a relative path: ``"loss"``, ``"train/reward"`` (sub-folders), never ``..``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{owner}: the metric name must be a non-empty string, got {name!r}.")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\\" in name or "\n" in name or "\0" in name:
        raise ValueError(f"{owner}: invalid metric name {name!r}: use non-empty '/'-separated parts without '.', '..', '\\\\' or newlines.")
    return name


def _atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text), binary=False)


def generate_exp_name(model_name: str, experiment_name: str) -> str:
    """A unique experiment name: ``<model>_<experiment>_<8 hex>_<yy_mm_dd-HH_MM_SS>``.

    Example:
        >>> from rl_objectives.trainers import generate_exp_name
        >>> generate_exp_name("SAC", "pendulum").startswith("SAC_pendulum_")
        True
    """
    return "_".join([model_name, experiment_name, uuid.uuid4().hex[:8], datetime.now().strftime("%y_%m_%d-%H_%M_%S")])


class Logger(abc.ABC):
    """Base class of the loggers: an experiment (``self.experiment``) under ``log_dir``.

    Subclasses implement ``_create_experiment``, :meth:`log_scalar` and :meth:`log_hparams`; videos and
    histograms are optional (the base raises ``NotImplementedError`` naming the logger).

    Args:
        exp_name: the experiment's name.
        log_dir: where the logs go.

    Example:
        >>> from rl_objectives.trainers import Logger
        >>> class PrintLogger(Logger):
        ...     def _create_experiment(self):
        ...         return None
        ...     def log_scalar(self, name, value, step=None):
        ...         print(f"{name}@{step}: {value}")
        ...     def log_hparams(self, cfg):
        ...         print(dict(cfg))
        >>> PrintLogger("exp", log_dir="unused").log_scalar("loss", 0.5, step=10)
        loss@10: 0.5
    """

    def __init__(self, exp_name: str, log_dir: str | os.PathLike) -> None:
        if not isinstance(exp_name, str) or not exp_name or "/" in exp_name or "\\" in exp_name or exp_name in (".", ".."):
            raise ValueError(f"{type(self).__name__}: exp_name must be a non-empty name without path separators, got {exp_name!r}.")
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"{type(self).__name__}: log_dir must be a path, got {type(log_dir).__name__}.")
        self.exp_name = exp_name
        self.log_dir = os.fspath(log_dir)
        self.experiment = self._create_experiment()

    @abc.abstractmethod
    def _create_experiment(self) -> Any:
        """Builds the backend object the logger writes through."""

    @abc.abstractmethod
    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Logs one scalar ``value`` of metric ``name`` at ``step``."""

    @abc.abstractmethod
    def log_hparams(self, cfg: Mapping[str, Any]) -> None:
        """Logs the hyper-parameters of the run."""

    def log_video(self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any) -> None:
        """Logs a video (``[T, C, H, W]`` or ``[B, T, C, H, W]`` uint8 frames)."""
        raise NotImplementedError(f"{type(self).__name__} does not log videos.")

    def log_histogram(self, name: str, data: torch.Tensor, step: int | None = None, **kwargs: Any) -> None:
        """Logs a histogram of ``data``."""
        raise NotImplementedError(f"{type(self).__name__} does not log histograms.")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(exp_name={self.exp_name!r}, log_dir={self.log_dir!r})"


def read_csv_scalar(path: str | os.PathLike) -> list[tuple[int, float]]:
    """The ``(step, value)`` pairs of a :class:`CSVLogger` scalar file, in file order.

    A last line without its newline (a write cut by a crash) is ignored, as :class:`CSVLogger` does.

    Raises:
        FileNotFoundError: naming the file.
        ValueError: naming the file and the line number of a line that is not ``step,value``.

    Example:
        >>> import tempfile
        >>> from rl_objectives.trainers import CSVLogger, read_csv_scalar
        >>> logger = CSVLogger("run", log_dir=tempfile.mkdtemp())
        >>> logger.log_scalar("return", -1200.0, step=0); logger.log_scalar("return", -180.5, step=4000)
        >>> read_csv_scalar(logger.scalar_path("return"))
        [(0, -1200.0), (4000, -180.5)]
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"read_csv_scalar: no scalar file at {os.fspath(path)!r}.")
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")[:-1]  # the piece after the last newline is empty or half-written
    out = []
    for number, line in enumerate(lines, 1):
        step, sep, value = line.partition(",")
        try:
            if not sep:
                raise ValueError
            out.append((int(step), float(value)))
        except ValueError:
            raise ValueError(f"read_csv_scalar: {os.fspath(path)!r} line {number} is not 'step,value': {line!r}.") from None
    return out


class CSVLogger(Logger):
    """Logs every scalar to ``<log_dir>/<exp_name>/scalars/<name>.csv``, one ``step,value`` line per call.

    Crash-safe appends: each call writes one whole line and flushes it (``fsync=True`` also syncs
    it to disk), so a killed process loses at most the line being written; a logger opened on an
    existing file drops such a partial last line before appending. ``step=None`` numbers the values
    of a name 0, 1, 2, ... (continuing after the lines already in its file). Hyper-parameters go to
    ``hparams.json`` and videos to ``videos/<name>_<step>.pt`` (``torch.save``), both written
    atomically.

    Args:
        exp_name: the experiment's folder name.
        log_dir: the parent folder (default ``"csv_logs"``).
        video_format: only ``"pt"``.
        video_fps: kept with the logger for video consumers.
        fsync: ``os.fsync`` after every line (survives a power loss; slower).

    Example:
        >>> import tempfile
        >>> from rl_objectives.trainers import CSVLogger
        >>> logger = CSVLogger("run", log_dir=tempfile.mkdtemp())
        >>> logger.log_scalar("loss", 0.5, step=10)
        >>> logger.log_scalar("loss", 0.25, step=20)
        >>> print(open(logger.scalar_path("loss")).read(), end="")
        10,0.5
        20,0.25
        >>> logger.close()
    """

    def __init__(self, exp_name: str, log_dir: str | os.PathLike | None = None, video_format: str = "pt", video_fps: int = 30, fsync: bool = False) -> None:
        if video_format != "pt":
            raise ValueError(f"CSVLogger: video_format must be 'pt' (mp4 encoding is not bundled), got {video_format!r}.")
        self.video_format = video_format
        self.video_fps = video_fps
        self.fsync = bool(fsync)
        self._files: dict[str, IO[str]] = {}
        self._counts: dict[str, int] = {}
        super().__init__(exp_name, "csv_logs" if log_dir is None else log_dir)

    def _create_experiment(self) -> Path:
        root = Path(self.log_dir) / self.exp_name
        root.mkdir(parents=True, exist_ok=True)
        return root

    def scalar_path(self, name: str) -> Path:
        """The CSV file of metric ``name``."""
        return self.experiment / "scalars" / f"{_check_name('CSVLogger', name)}.csv"

    def _open(self, name: str) -> IO[str]:
        path = self.scalar_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        count = 0
        if path.exists():
            with open(path, "rb+") as f:  # drop a line a crash left half-written
                data = f.read()
                keep = data.rfind(b"\n") + 1
                if keep != len(data):
                    f.truncate(keep)
                count = data.count(b"\n")
        self._counts[name] = count
        handle = open(path, "a", encoding="utf-8")  # noqa: SIM115  (kept open across calls; closed by close())
        self._files[name] = handle
        return handle

    def log_scalar(self, name: str, value: Any, step: int | None = None) -> None:
        value = _number("CSVLogger", name, value)
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise TypeError(f"CSVLogger.log_scalar: step for {name!r} must be an int or None, got {type(step).__name__}.")
        handle = self._files.get(name) or self._open(name)
        if step is None:
            step = self._counts[name]
        handle.write(f"{step},{value!r}\n")  # one write per line: a crash never interleaves two lines
        handle.flush()
        if self.fsync:
            os.fsync(handle.fileno())
        self._counts[name] += 1

    def log_hparams(self, cfg: Mapping[str, Any]) -> None:
        if not isinstance(cfg, Mapping):
            raise TypeError(f"CSVLogger.log_hparams: cfg must be a mapping, got {type(cfg).__name__}.")
        _atomic_write_text(self.experiment / "hparams.json", json.dumps(dict(cfg), indent=2, sort_keys=True, default=str))

    def log_video(self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any) -> None:
        if not isinstance(video, torch.Tensor) or video.ndim not in (4, 5):
            got = tuple(video.shape) if isinstance(video, torch.Tensor) else type(video).__name__
            raise ValueError(f"CSVLogger.log_video: {name!r} must be a [T, C, H, W] or [B, T, C, H, W] tensor, got {got}.")
        _check_name("CSVLogger", name)
        atomic_torch_save(video.detach().cpu(), self.experiment / "videos" / f"{name}_{0 if step is None else step}.pt")

    def close(self) -> None:
        """Closes the open CSV files (a later ``log_scalar`` reopens them)."""
        for handle in self._files.values():
            handle.close()
        self._files.clear()

    def __del__(self) -> None:
        files = getattr(self, "_files", None)
        if files:
            self.close()


class TensorboardLogger(Logger):
    """Logs to TensorBoard through ``torch.utils.tensorboard.SummaryWriter`` (needs ``tensorboard``).

    Events go to ``<log_dir>/<exp_name>``. Hyper-parameters are logged as text (``"hparams"``, one
    ``key: value`` line each).

    Args:
        exp_name: the experiment's folder name.
        log_dir: the parent folder (default ``"tb_logs"``).

    Raises:
        ImportError: naming the ``tensorboard`` package when it is not installed.

    Example:
        >>> from rl_objectives.trainers import TensorboardLogger
        >>> try:
        ...     logger = TensorboardLogger("run", log_dir="unused")
        ... except ImportError as err:
        ...     assert "tensorboard" in str(err)
    """

    def __init__(self, exp_name: str, log_dir: str | os.PathLike = "tb_logs") -> None:
        super().__init__(exp_name, log_dir)

    def _create_experiment(self) -> Any:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError(
                "TensorboardLogger needs the 'tensorboard' package, which is not installed (pip install tensorboard); "
                "CSVLogger needs nothing extra."
            ) from err
        return SummaryWriter(log_dir=os.path.join(self.log_dir, self.exp_name))

    def log_scalar(self, name: str, value: Any, step: int | None = None) -> None:
        self.experiment.add_scalar(_check_name("TensorboardLogger", name), _number("TensorboardLogger", name, value), global_step=step)

    def log_hparams(self, cfg: Mapping[str, Any]) -> None:
        if not isinstance(cfg, Mapping):
            raise TypeError(f"TensorboardLogger.log_hparams: cfg must be a mapping, got {type(cfg).__name__}.")
        self.experiment.add_text("hparams", "\n".join(f"{k}: {v}" for k, v in cfg.items()))

    def log_video(self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any) -> None:
        if not isinstance(video, torch.Tensor) or video.ndim not in (4, 5):
            got = tuple(video.shape) if isinstance(video, torch.Tensor) else type(video).__name__
            raise ValueError(f"TensorboardLogger.log_video: {name!r} must be a [T, C, H, W] or [B, T, C, H, W] tensor, got {got}.")
        video = video.unsqueeze(0) if video.ndim == 4 else video  # SummaryWriter wants [B, T, C, H, W]
        kwargs.setdefault("fps", 30)
        self.experiment.add_video(name, video, global_step=step, **kwargs)

    def log_histogram(self, name: str, data: torch.Tensor, step: int | None = None, **kwargs: Any) -> None:
        self.experiment.add_histogram(name, data, global_step=step, **kwargs)

    def close(self) -> None:
        """Flushes and closes the event files."""
        self.experiment.close()


_LOGGERS = {"csv": CSVLogger, "tensorboard": TensorboardLogger}


def get_logger(logger_type: str | None, logger_name: str | os.PathLike, experiment_name: str, **kwargs: Any) -> Logger | None:
    """Builds a logger by type: ``"csv"`` or ``"tensorboard"`` (``""``/``None``: no logger).

    Args:
        logger_type: the backend.
        logger_name: the log folder (``log_dir``).
        experiment_name: the experiment's name (``exp_name``).
        **kwargs: passed to the logger class.

    Raises:
        ValueError: for another type (``"wandb"`` and ``"mlflow"`` are not provided here).

    Example:
        >>> import tempfile
        >>> from rl_objectives.trainers import get_logger
        >>> get_logger("csv", tempfile.mkdtemp(), "run").exp_name
        'run'
        >>> get_logger(None, "logs", "run") is None
        True
    """
    if logger_type in ("", None):
        return None
    if logger_type in ("wandb", "mlflow"):
        raise ValueError(f"get_logger: logger_type={logger_type!r} is not provided by rl_objectives; wrap its client in a Logger subclass, or use one of {sorted(_LOGGERS)}.")
    if logger_type not in _LOGGERS:
        raise ValueError(f"get_logger: unknown logger_type={logger_type!r}; choose one of {sorted(_LOGGERS)} or None.")
    return _LOGGERS[logger_type](exp_name=experiment_name, log_dir=logger_name, **kwargs)
