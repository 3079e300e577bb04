"""The :class:`Logger` interface every backend implements, and the argument checks they share."""

from __future__ import annotations

import abc
import enum
import math
import numbers
import os
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import torch
from tdict.validation import check_non_negative_int

__all__ = ["Logger", "generate_exp_name"]


# ---------------------------------------------------------------------------------------------- checks
def _check_name(owner: str, name: Any) -> str:
    """A metric name is a relative path: ``"loss"``, ``"train/reward"`` (sub-folders), never ``..``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{owner}: the metric name must be a non-empty string, got {name!r}.")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\\" in name or "\n" in name or "\r" in name or "\0" in name:
        raise ValueError(
            f"{owner}: invalid metric name {name!r}: use non-empty '/'-separated parts without '.', '..', '\\\\' or newlines."
        )
    return name


def _number(owner: str, name: str, value: Any) -> float:
    """``value`` as a float: a real number (not a bool) or a one-element tensor."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"{owner}.log_scalar: {name!r} must be a scalar, got a tensor of shape {tuple(value.shape)}."
            )
        if value.is_complex():
            raise TypeError(f"{owner}.log_scalar: {name!r} must be real, got a complex tensor.")
        return float(value.detach().reshape(()).item())
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{owner}.log_scalar: {name!r} must be a number or a one-element tensor, got {type(value).__name__}."
        )
    return float(value)


def _check_step(owner: str, name: str, step: Any) -> int | None:
    """``step``: ``None`` or an integer >= 0 (a Python or numpy int, or a one-element integer tensor)."""
    if step is None:
        return None
    if (
        isinstance(step, torch.Tensor)
        and step.numel() == 1
        and not step.is_floating_point()
        and not step.is_complex()
        and step.dtype is not torch.bool
    ):
        step = int(step.item())
    return check_non_negative_int(owner, f"step for {name!r}", step)


def _check_fps(owner: str, fps: Any) -> float:
    if isinstance(fps, bool) or not isinstance(fps, numbers.Real) or not math.isfinite(fps) or fps <= 0:
        raise ValueError(f"{owner}: fps must be a positive number, got {fps!r}.")
    return float(fps)


def _check_no_kwargs(owner: str, kwargs: Mapping[str, Any], accepted: Sequence[str]) -> None:
    if kwargs:
        raise TypeError(f"{owner}: unexpected keyword argument(s) {sorted(kwargs)}; accepted: {sorted(accepted)}.")


def _histogram_values(owner: str, name: str, data: Any) -> torch.Tensor:
    """``data`` flattened to a float64 CPU tensor: numbers only, at least one, all finite."""
    if isinstance(data, torch.Tensor):
        values = data.detach()
    else:
        if isinstance(data, (str, bytes, Mapping)) or data is None:
            raise TypeError(
                f"{owner}.log_histogram: data for {name!r} must be a tensor, an array or a sequence of numbers, got {type(data).__name__}."
            )
        try:
            values = torch.as_tensor(data)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(
                f"{owner}.log_histogram: data for {name!r} must be a tensor, an array or a sequence of numbers, got {type(data).__name__} ({err})."
            ) from None
    if values.is_complex() or not (
        values.is_floating_point() or values.dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
    ):
        raise TypeError(f"{owner}.log_histogram: data for {name!r} must hold real numbers, got dtype {values.dtype}.")
    values = values.to("cpu", torch.float64).reshape(-1)
    if values.numel() == 0:
        raise ValueError(f"{owner}.log_histogram: data for {name!r} is empty.")
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"{owner}.log_histogram: data for {name!r} contains NaN or infinite values.")
    return values


def _check_bins(owner: str, name: str, bins: Any, max_bins: int | None = None) -> int | torch.Tensor:
    """``bins``: a number of equal-width bins (>= 1) or the increasing edges of the bins."""
    if isinstance(bins, numbers.Integral) and not isinstance(bins, bool):
        if bins < 1 or (max_bins is not None and int(bins) > max_bins):
            raise ValueError(
                f"{owner}.log_histogram: bins for {name!r} must be in [1, {max_bins or 'inf'}], got {bins}."
            )
        return int(bins)
    if isinstance(bins, (str, bytes)) or not isinstance(bins, (Sequence, torch.Tensor)):
        raise TypeError(
            f"{owner}.log_histogram: bins for {name!r} must be an int or a sequence of bin edges, got {type(bins).__name__}."
        )
    edges = torch.as_tensor(bins, dtype=torch.float64).reshape(-1)
    if edges.numel() < 2 or not bool(torch.isfinite(edges).all()) or not bool((edges[1:] > edges[:-1]).all()):
        raise ValueError(
            f"{owner}.log_histogram: bin edges for {name!r} must be at least 2 finite, increasing numbers."
        )
    if max_bins is not None and edges.numel() - 1 > max_bins:
        raise ValueError(f"{owner}.log_histogram: at most {max_bins} bins for {name!r}, got {edges.numel() - 1}.")
    return edges


def _histogram(values: torch.Tensor, bins: int | torch.Tensor) -> dict[str, Any]:
    """Summary statistics and bin counts of ``values`` (float64, 1-D, finite).

    ``std`` is the population standard deviation; with a number of bins, the bins span ``[min, max]``
    (``[v - 0.5, v + 0.5]`` when every value is ``v``); values outside given edges are not counted.
    """
    counts, edges = torch.histogram(values, bins=bins)
    return {
        "count": values.numel(),
        "min": float(values.min()),
        "max": float(values.max()),
        "mean": float(values.mean()),
        "std": float(values.std(correction=0)),
        "bin_edges": [float(e) for e in edges],
        "bin_counts": [int(c) for c in counts],
    }


def _check_hparams(owner: str, cfg: Any, prefix: str = "") -> None:
    if not isinstance(cfg, Mapping):
        what = "cfg" if not prefix else f"cfg[{prefix!r}]"
        raise TypeError(f"{owner}.log_hparams: {what} must be a mapping, got {type(cfg).__name__}.")
    for key, value in cfg.items():
        if not isinstance(key, str) or not key:
            raise TypeError(
                f"{owner}.log_hparams: hyper-parameter names must be non-empty strings, got {key!r}"
                + (f" in {prefix!r}." if prefix else ".")
            )
        if isinstance(value, Mapping):
            _check_hparams(owner, value, f"{prefix}.{key}" if prefix else key)


def _plain(value: Any) -> Any:
    """``value`` made of JSON types: one-element tensors become numbers, containers are converted
    recursively, enums give their name, anything else its ``str``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.detach().reshape(()).item()
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def _plain_hparams(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A nested dict of JSON types (see :func:`_plain`)."""
    return {k: _plain(v) for k, v in cfg.items()}


def _flat_hparams(cfg: Mapping[str, Any], sep: str = ".") -> dict[str, Any]:
    """Nested mappings flattened to ``"outer.inner"`` keys; values are numbers, strings, bools,
    ``None``, or the ``str`` of anything else (lists included)."""
    out: dict[str, Any] = {}

    def visit(mapping: Mapping[str, Any], prefix: str) -> None:
        for key, value in mapping.items():
            full = f"{prefix}{sep}{key}" if prefix else key
            if isinstance(value, Mapping):
                visit(value, full)
                continue
            value = _plain(value)
            out[full] = value if value is None or isinstance(value, (bool, int, float, str)) else str(value)

    visit(cfg, "")
    return out


# ------------------------------------------------------------------------------------------ the base
def generate_exp_name(model_name: str, experiment_name: str) -> str:
    """A unique experiment name: ``<model>_<experiment>_<8 hex>_<yy_mm_dd-HH_MM_SS>``.

    Examples:
        >>> from rl_objectives.trainers import generate_exp_name
        >>> generate_exp_name("SAC", "pendulum").startswith("SAC_pendulum_")
        True
    """
    return "_".join([model_name, experiment_name, uuid.uuid4().hex[:8], datetime.now().strftime("%y_%m_%d-%H_%M_%S")])


class Logger(abc.ABC):
    """Base class of the loggers: an experiment (``self.experiment``) under ``log_dir``.

    Subclasses implement ``_create_experiment``, :meth:`log_scalar` and :meth:`log_hparams`; videos and
    histograms are optional (the base raises ``NotImplementedError`` naming the logger). The built-in
    loggers (:class:`CSVLogger`, :class:`TensorboardLogger`, :class:`WandbLogger`,
    :class:`MLFlowLogger`) implement all of them, with the same arguments and the same checks: a bad
    argument raises naming it before anything is written. ``step=None`` takes the step after the
    highest one logged for that name (and kind) so far, 0 for the first: 0, 1, 2, ... when no step
    is ever given.

    A logger is a context manager: ``with CSVLogger(...) as logger:`` closes it on exit.

    Args:
        exp_name: the experiment's name.
        log_dir: where the logs go.

    Examples:
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
        if (
            not isinstance(exp_name, str)
            or not exp_name
            or "/" in exp_name
            or "\\" in exp_name
            or exp_name in (".", "..")
        ):
            raise ValueError(
                f"{type(self).__name__}: exp_name must be a non-empty name without path separators, got {exp_name!r}."
            )
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"{type(self).__name__}: log_dir must be a path, got {type(log_dir).__name__}.")
        self.exp_name = exp_name
        self.log_dir = os.fspath(log_dir)
        self._auto_steps: dict[tuple[str, str], int] = {}
        self.experiment = self._create_experiment()

    @abc.abstractmethod
    def _create_experiment(self) -> Any:
        """Builds the backend object the logger writes through."""

    @abc.abstractmethod
    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Logs one scalar ``value`` of metric ``name`` at ``step``."""

    @abc.abstractmethod
    def log_hparams(self, cfg: Mapping[str, Any]) -> None:
        """Logs the hyper-parameters of the run (a mapping; nested mappings allowed)."""

    def log_video(self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any) -> None:
        """Logs a video (``[T, C, H, W]`` or ``[B, T, C, H, W]`` uint8 frames, ``C`` 1 or 3)."""
        raise NotImplementedError(f"{type(self).__name__} does not log videos.")

    def log_histogram(self, name: str, data: torch.Tensor, step: int | None = None, **kwargs: Any) -> None:
        """Logs a histogram of ``data``."""
        raise NotImplementedError(f"{type(self).__name__} does not log histograms.")

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Logs several scalars at ``step`` (each through :meth:`log_scalar`); all are checked first."""
        owner = type(self).__name__
        if not isinstance(metrics, Mapping):
            raise TypeError(
                f"{owner}.log_metrics: metrics must be a mapping of names to numbers, got {type(metrics).__name__}."
            )
        for name, value in metrics.items():
            _check_name(owner, name)
            _number(owner, name, value)
        _check_step(owner, "metrics", step)
        for name, value in metrics.items():
            self.log_scalar(name, value, step=step)

    def close(self) -> None:
        """Flushes and releases what the logger holds (the built-in loggers implement it)."""

    def __enter__(self) -> Logger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ``step=None``: one per (kind, name), the step after the highest one logged so far.
    def _step(self, kind: str, name: str, step: int | None) -> int:
        return self._auto_steps.get((kind, name), 0) if step is None else step

    def _logged(self, kind: str, name: str, step: int) -> None:
        self._auto_steps[(kind, name)] = max(self._auto_steps.get((kind, name), 0), step + 1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(exp_name={self.exp_name!r}, log_dir={self.log_dir!r})"
