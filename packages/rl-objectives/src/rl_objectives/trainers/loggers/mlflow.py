"""MLFlowLogger: an MLflow run (``mlflow`` or ``mlflow-skinny`` imported when the logger is built)."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ._video import _check_format, _require_encoder, _video_frames, _write_video
from .base import (
    Logger,
    _check_bins,
    _check_fps,
    _check_hparams,
    _check_name,
    _check_no_kwargs,
    _check_step,
    _flat_hparams,
    _histogram,
    _histogram_values,
    _number,
)

__all__ = ["MLFlowLogger"]

# MLflow's rule for metric and parameter names
_MLFLOW_NAME = re.compile(r"^[/\w.\- :]*$")
_BATCH = 100  # MLflow takes at most 100 parameters per log_batch


def _check_mlflow_name(owner: str, name: str) -> str:
    _check_name(owner, name)
    if not _MLFLOW_NAME.match(name):
        raise ValueError(
            f"{owner}: invalid MLflow name {name!r}: use letters, digits, '_', '-', '.', ' ', ':' and '/'."
        )
    return name


def _sqlite_artifacts(tracking_uri: str) -> str | None:
    """``file:`` URI of ``<folder of the database>/mlartifacts`` for a ``sqlite:///path`` URI."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    db = tracking_uri[len("sqlite:///") :]
    if not db or db == ":memory:":
        return None
    return Path(os.path.abspath(db)).parent.joinpath("mlartifacts").as_uri()


class MLFlowLogger(Logger):
    """Logs to an MLflow run through ``MlflowClient`` (needs ``mlflow`` or ``mlflow-skinny``:
    ``pip install 'rl-objectives[mlflow]'``).

    The run is made in the experiment named ``exp_name`` (created when missing) and driven through a
    client, not through ``mlflow``'s process-global active run, so several loggers (and the user's
    own ``mlflow.start_run``) do not interfere. :meth:`close` marks the run ``FINISHED``.

    - scalars: ``log_metric`` with the step (``step=None``: the step after the highest one logged
      for that name, 0 first);
    - histograms: the summary as metrics at the step: ``<name>/count``, ``/min``, ``/max``,
      ``/mean``, ``/std`` (population), plotted by MLflow's UI, and the bin counts as a JSON artifact
      ``histograms/<name>_<step>.json`` (``step``, ``count``, ``min``, ``max``, ``mean``, ``std``,
      ``bin_edges``, ``bin_counts``; ``bins``: a number of bins over ``[min, max]``, 64 by default,
      or the bin edges);
    - videos: artifacts ``videos/<name>_<step>.mp4`` (``imageio-ffmpeg``) or ``.gif`` (``pillow``);
      a batch ``[B, T, C, H, W]`` is tiled in a grid;
    - hyper-parameters: ``log_params`` (nested mappings flattened to ``outer.inner``; values as
      strings). MLflow parameters cannot change: logging a name again with another value raises
      MLflow's error.

    Tracking stores: MLflow >= 3.10 refuses the file store (a ``file:`` URI or a folder) unless the
    ``MLFLOW_ALLOW_FILE_STORE=true`` environment variable is set, and recommends a database:
    ``sqlite:///path/to/mlflow.db`` (needs ``sqlalchemy`` and ``alembic``, which the
    ``rl-objectives[mlflow]`` extra installs). With a sqlite URI and no ``artifact_location``, new
    experiments keep their artifacts in ``mlartifacts/`` next to the database (MLflow's default is
    the current folder). :func:`get_logger` ``("mlflow", folder, name)`` uses
    ``sqlite:///<folder>/mlflow.db``.

    Args:
        exp_name: the MLflow experiment's name.
        tracking_uri: the tracking store (``sqlite:///...``, ``http://...``, ``file:...``).
        tags: tags of the run (and of the experiment when it is created here).
        artifact_location: where a new experiment keeps its artifacts.
        run_name: the run's name (MLflow picks one when ``None``).
        video_fps: frames per second of the videos (``log_video(..., fps=)`` overrides it).
        video_format: ``"mp4"`` (default) or ``"gif"``.

    Raises:
        ImportError: naming ``mlflow-skinny`` and the ``rl-objectives[mlflow]`` extra when MLflow is
            not installed.

    Example::

        logger = MLFlowLogger("sac-pendulum", tracking_uri="sqlite:///runs/mlflow.db")
        logger.log_hparams({"lr": 3e-4, "optim": {"name": "adam"}})  # params lr, optim.name
        logger.log_scalar("train/loss", 0.5, step=1000)
        logger.log_video("eval", frames, step=1000)  # artifact videos/eval_1000.mp4
        logger.close()
    """

    def __init__(
        self,
        exp_name: str,
        tracking_uri: str,
        tags: Mapping[str, Any] | None = None,
        *,
        artifact_location: str | None = None,
        run_name: str | None = None,
        video_fps: float = 30,
        video_format: str = "mp4",
        **kwargs: Any,
    ) -> None:
        _check_no_kwargs("MLFlowLogger", kwargs, ["tags", "artifact_location", "run_name", "video_fps", "video_format"])
        if isinstance(tracking_uri, os.PathLike):
            tracking_uri = Path(os.path.abspath(tracking_uri)).as_uri()
        if not isinstance(tracking_uri, str) or not tracking_uri:
            raise TypeError(f"MLFlowLogger: tracking_uri must be a non-empty string, got {tracking_uri!r}.")
        if tags is not None and not isinstance(tags, Mapping):
            raise TypeError(f"MLFlowLogger: tags must be a mapping or None, got {type(tags).__name__}.")
        self.tracking_uri = tracking_uri
        self.tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self.artifact_location = artifact_location if artifact_location is not None else _sqlite_artifacts(tracking_uri)
        self.run_name = run_name
        self.video_fps = _check_fps("MLFlowLogger", video_fps)
        self.video_format = _check_format("MLFlowLogger", video_format)
        self._closed = False
        super().__init__(exp_name, tracking_uri)

    def _create_experiment(self) -> Any:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError as err:
            raise ImportError(
                "MLFlowLogger needs the 'mlflow' (or 'mlflow-skinny') package, which is not installed: "
                "pip install 'rl-objectives[mlflow]' (or pip install mlflow-skinny)."
            ) from err
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        experiment = self.client.get_experiment_by_name(self.exp_name)
        if experiment is None:
            self.id = self.client.create_experiment(
                self.exp_name, artifact_location=self.artifact_location, tags=self.tags or None
            )
        elif experiment.lifecycle_stage != "active":
            raise ValueError(
                f"MLFlowLogger: the MLflow experiment {self.exp_name!r} is deleted; restore it or use another exp_name."
            )
        else:
            self.id = experiment.experiment_id
        run = self.client.create_run(self.id, tags=self.tags or None, run_name=self.run_name)
        self.run_id = run.info.run_id
        return run

    # ---------------------------------------------------------------------------------- logging
    def log_scalar(self, name: str, value: Any, step: int | None = None) -> None:
        value = _number("MLFlowLogger", name, value)
        step = _check_step("MLFlowLogger.log_scalar", name, step)
        _check_mlflow_name("MLFlowLogger", name)
        step = self._step("scalar", name, step)
        self.client.log_metric(self.run_id, name, value, step=step)
        self._logged("scalar", name, step)

    def log_histogram(self, name: str, data: Any, step: int | None = None, *, bins: Any = 64, **kwargs: Any) -> None:
        """Summary metrics ``<name>/count|min|max|mean|std`` and the artifact ``histograms/<name>_<step>.json``."""
        _check_no_kwargs("MLFlowLogger.log_histogram", kwargs, ["bins"])
        _check_mlflow_name("MLFlowLogger", name)
        values = _histogram_values("MLFlowLogger", name, data)
        bins = _check_bins("MLFlowLogger", name, bins)
        step = _check_step("MLFlowLogger.log_histogram", name, step)
        h = _histogram(values, bins)
        step = self._step("histogram", name, step)
        from mlflow.entities import Metric

        stamp = _now_ms()
        metrics = [Metric(f"{name}/{k}", float(h[k]), stamp, step) for k in ("count", "min", "max", "mean", "std")]
        self.client.log_batch(self.run_id, metrics=metrics)
        self.client.log_dict(self.run_id, {"step": step, **h}, f"histograms/{name}_{step}.json")
        self._logged("histogram", name, step)

    def log_video(
        self,
        name: str,
        video: torch.Tensor,
        step: int | None = None,
        *,
        fps: float | None = None,
        format: str | None = None,
        **kwargs: Any,
    ) -> None:
        """The artifact ``videos/<name>_<step>.<mp4|gif>`` of ``video`` (uint8 ``[T, C, H, W]`` or
        ``[B, T, C, H, W]``).

        Raises:
            ImportError: naming ``imageio-ffmpeg`` (mp4) or ``pillow`` (gif) when missing.
        """
        _check_no_kwargs("MLFlowLogger.log_video", kwargs, ["fps", "format"])
        _check_name("MLFlowLogger", name)
        frames = _video_frames("MLFlowLogger", name, video)
        step = _check_step("MLFlowLogger.log_video", name, step)
        fps = self.video_fps if fps is None else _check_fps("MLFlowLogger.log_video", fps)
        fmt = self.video_format if format is None else _check_format("MLFlowLogger.log_video", format)
        _require_encoder("MLFlowLogger.log_video", fmt)
        step = self._step("video", name, step)
        folder, _, base = name.rpartition("/")
        with tempfile.TemporaryDirectory(prefix="rl-mlflow-video-") as tmp:
            path = os.path.join(tmp, f"{base}_{step}.{fmt}")
            _write_video(path, frames, fps, fmt)
            self.client.log_artifact(self.run_id, path, "videos" + (f"/{folder}" if folder else ""))
        self._logged("video", name, step)

    def log_hparams(self, cfg: Mapping[str, Any]) -> None:
        """``log_params`` of ``cfg`` flattened (``{"optim": {"lr": 0.1}}`` gives ``optim.lr``)."""
        _check_hparams("MLFlowLogger", cfg)
        flat = _flat_hparams(cfg)
        for key in flat:
            _check_mlflow_name("MLFlowLogger.log_hparams", key)
        from mlflow.entities import Param

        params = [Param(k, str(v)) for k, v in flat.items()]
        for i in range(0, len(params), _BATCH):
            self.client.log_batch(self.run_id, params=params[i : i + _BATCH])

    def close(self) -> None:
        """Marks the run ``FINISHED`` (once)."""
        if self._closed:
            return
        self._closed = True
        self.client.set_terminated(self.run_id, "FINISHED")

    def __repr__(self) -> str:
        return f"MLFlowLogger(exp_name={self.exp_name!r}, tracking_uri={self.tracking_uri!r}, run_id={self.run_id!r})"


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
