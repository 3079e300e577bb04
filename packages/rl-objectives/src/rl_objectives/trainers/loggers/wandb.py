"""WandbLogger: a Weights & Biases run (``wandb`` imported when the logger is built)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
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
    _histogram,
    _histogram_values,
    _number,
    _plain_hparams,
)

__all__ = ["WandbLogger"]


def _is_step_key(name: str) -> bool:
    return name == "step" or name.endswith("/step")


def _step_key(name: str) -> str:
    """The x-axis metric of ``name``: ``"<group>/step"`` for ``"<group>/<metric>"``, else ``"step"``."""
    group, sep, _ = name.rpartition("/")
    return f"{group}/step" if sep else "step"


class WandbLogger(Logger):
    """Logs to a Weights & Biases run (needs ``wandb``: ``pip install 'rl-objectives[wandb]'``).

    Each value is logged with its step in the payload, under the step metric of its group
    (``"train/step"`` for ``"train/loss"``, ``"step"`` for ``"loss"``; declared with
    ``define_metric``, as TorchRL does), so metrics logged at unrelated steps never collide on
    W&B's own monotonic ``_step``. ``step=None`` is the step after the highest one logged for that
    name (0 first).

    - scalars: ``run.log``;
    - histograms: ``wandb.Histogram`` of bin counts computed here (``bins``: a number of bins over
      ``[min, max]``, 64 by default and at most 512, or the bin edges);
    - videos: encoded here to mp4 (``imageio-ffmpeg``) or gif (``pillow``), then ``wandb.Video`` of
      the file, so wandb's moviepy path is not needed; a batch ``[B, T, C, H, W]`` is tiled in a grid;
    - hyper-parameters: ``run.config.update`` (nested mappings kept; values W&B cannot store are
      logged as their ``str``).

    Offline runs (``offline=True``, or the ``WANDB_MODE=offline`` environment variable) never touch
    the network: they are written to ``<save_dir>/wandb/offline-run-*`` for ``wandb sync``.
    :meth:`close` finishes the run and, when no other W&B run is active in the process, stops W&B's
    background service process (``wandb.teardown``), so nothing lingers.

    Args:
        exp_name: the run's name.
        offline: log locally only (``mode="offline"`` for ``wandb.init``; no environment variable is
            set).
        save_dir: the folder of W&B's files (``wandb.init(dir=)``; created when missing). ``log_dir``
            is accepted as another name for it, as in TorchRL.
        id: the run's id (to resume a run).
        project: the W&B project.
        video_fps: frames per second of the videos (``log_video(..., fps=)`` overrides it).
        video_format: ``"mp4"`` (default) or ``"gif"``.
        **kwargs: more arguments of ``wandb.init`` (``entity``, ``group``, ``tags``, ``config``,
            ``settings``, ...).

    Raises:
        ImportError: naming the ``wandb`` package and the ``rl-objectives[wandb]`` extra when it is
            not installed.

    Example::

        logger = WandbLogger("sac-pendulum", offline=True, save_dir="runs", project="rl")
        logger.log_hparams({"lr": 3e-4, "optim": {"betas": [0.9, 0.999]}})
        logger.log_scalar("train/loss", 0.5, step=1000)
        logger.log_histogram("actor/weights", actor.weight, step=1000)
        logger.log_video("eval", frames, step=1000, fps=30)  # uint8 [T, C, H, W]
        logger.close()
    """

    def __init__(
        self,
        exp_name: str,
        offline: bool = False,
        save_dir: str | os.PathLike | None = None,
        id: str | None = None,
        project: str | None = None,
        *,
        video_fps: float = 30,
        video_format: str = "mp4",
        **kwargs: Any,
    ) -> None:
        log_dir = kwargs.pop("log_dir", None)
        if save_dir is not None and log_dir is not None:
            raise ValueError("WandbLogger: save_dir and log_dir name the same folder; pass one of them.")
        save_dir = save_dir if save_dir is not None else log_dir
        if save_dir is not None and not isinstance(save_dir, (str, os.PathLike)):
            raise TypeError(f"WandbLogger: save_dir must be a path or None, got {type(save_dir).__name__}.")
        if offline and kwargs.get("mode", "offline") != "offline":
            raise ValueError(f"WandbLogger: offline=True contradicts mode={kwargs['mode']!r}.")
        self.offline = bool(offline)
        self.save_dir = None if save_dir is None else os.fspath(save_dir)
        self.id = id
        self.project = project
        self.video_fps = _check_fps("WandbLogger", video_fps)
        self.video_format = _check_format("WandbLogger", video_format)
        self._wandb_kwargs = {"name": exp_name, "dir": self.save_dir, "id": id, "project": project, **kwargs}
        if self.offline:
            self._wandb_kwargs["mode"] = "offline"
        if id is not None:
            self._wandb_kwargs.setdefault("resume", "allow")
        self._defined: set[str] = set()
        self._closed = False
        super().__init__(exp_name, self.save_dir if self.save_dir is not None else os.getcwd())

    def _create_experiment(self) -> Any:
        try:
            import wandb
        except ImportError as err:
            raise ImportError(
                "WandbLogger needs the 'wandb' package, which is not installed: pip install 'rl-objectives[wandb]' (or pip install wandb)."
            ) from err
        self._wandb = wandb
        if self.save_dir is not None:
            os.makedirs(self.save_dir, exist_ok=True)
        return wandb.init(**self._wandb_kwargs)

    # ------------------------------------------------------------------------------------ steps
    def _log(self, name: str, value: Any, step: int) -> None:
        payload = {name: value}
        if not _is_step_key(name):
            key = _step_key(name)
            if key not in self._defined:
                self.experiment.define_metric(key)
                self._defined.add(key)
            if name not in self._defined:
                self.experiment.define_metric(name, step_metric=key)
                self._defined.add(name)
            payload[key] = step
        self.experiment.log(payload)

    # ---------------------------------------------------------------------------------- logging
    def log_scalar(self, name: str, value: Any, step: int | None = None) -> None:
        value = _number("WandbLogger", name, value)
        step = _check_step("WandbLogger.log_scalar", name, step)
        _check_name("WandbLogger", name)
        step = self._step("scalar", name, step)
        self._log(name, value, step)
        self._logged("scalar", name, step)

    def log_histogram(self, name: str, data: Any, step: int | None = None, *, bins: Any = 64, **kwargs: Any) -> None:
        """``wandb.Histogram`` of ``data`` (a tensor, an array or a sequence of finite numbers)."""
        _check_no_kwargs("WandbLogger.log_histogram", kwargs, ["bins"])
        _check_name("WandbLogger", name)
        values = _histogram_values("WandbLogger", name, data)
        bins = _check_bins("WandbLogger", name, bins, max_bins=512)
        step = _check_step("WandbLogger.log_histogram", name, step)
        h = _histogram(values, bins)
        hist = self._wandb.Histogram(np_histogram=(h["bin_counts"], h["bin_edges"]))
        step = self._step("histogram", name, step)
        self._log(name, hist, step)
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
        """``wandb.Video`` of ``video`` (uint8 ``[T, C, H, W]`` or ``[B, T, C, H, W]``).

        Raises:
            ImportError: naming ``imageio-ffmpeg`` (mp4) or ``pillow`` (gif) when missing.
        """
        _check_no_kwargs("WandbLogger.log_video", kwargs, ["fps", "format"])
        _check_name("WandbLogger", name)
        frames = _video_frames("WandbLogger", name, video)
        step = _check_step("WandbLogger.log_video", name, step)
        fps = self.video_fps if fps is None else _check_fps("WandbLogger.log_video", fps)
        fmt = self.video_format if format is None else _check_format("WandbLogger.log_video", format)
        _require_encoder("WandbLogger.log_video", fmt)
        step = self._step("video", name, step)
        with tempfile.TemporaryDirectory(prefix="rl-wandb-video-") as folder:
            path = os.path.join(folder, f"{name.replace('/', '_')}_{step}.{fmt}")
            _write_video(path, frames, fps, fmt)
            # (fmt is one of wandb's formats, checked by _check_format; its annotation is a Literal)
            self._log(name, self._wandb.Video(path, format=fmt), step)  # pyright: ignore[reportArgumentType]  # wandb copies the file into the run
        self._logged("video", name, step)

    def log_hparams(self, cfg: Mapping[str, Any]) -> None:
        """``run.config.update(cfg)`` (later calls may change values)."""
        _check_hparams("WandbLogger", cfg)
        self.experiment.config.update(_plain_hparams(cfg), allow_val_change=True)

    def close(self) -> None:
        """Finishes the run and stops W&B's service process when no other run is active."""
        if self._closed:
            return
        self._closed = True
        self.experiment.finish()
        if self._wandb.run is None:
            self._wandb.teardown()

    def __repr__(self) -> str:
        return f"WandbLogger(exp_name={self.exp_name!r}, project={self.project!r}, save_dir={self.save_dir!r}, offline={self.offline})"
