"""TensorboardLogger: event files through ``torch.utils.tensorboard.SummaryWriter``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from ._video import _gif_bytes, _require_encoder, _video_frames
from .base import (
    Logger,
    _check_fps,
    _check_hparams,
    _check_name,
    _check_no_kwargs,
    _check_step,
    _flat_hparams,
    _histogram_values,
    _number,
)

__all__ = ["TensorboardLogger"]


class TensorboardLogger(Logger):
    """Logs to TensorBoard event files in ``<log_dir>/<exp_name>`` (needs ``tensorboard``).

    - scalars: ``add_scalar``;
    - histograms: ``add_histogram`` (``bins`` as TensorBoard's: ``"tensorflow"`` by default, an int
      or a numpy rule);
    - videos: an animated GIF in an image summary, shown in the Images tab. That is what
      ``SummaryWriter.add_video`` writes, but it encodes through ``moviepy.editor`` (moviepy < 2) and
      logs an empty summary with a printed warning when moviepy is missing; this logger encodes the
      GIF with Pillow (``pip install 'rl-objectives[tensorboard]'`` brings it), so videos need no
      moviepy. A batch ``[B, T, C, H, W]`` is tiled in a grid, as ``add_video`` does;
    - hyper-parameters: a text summary ``"hparams"`` (one ``key: value`` line each, nested
      mappings flattened to ``outer.inner``) and the HParams dashboard's summaries, in this run.

    ``step=None`` is the step after the highest one logged for that name (0 first).

    Args:
        exp_name: the experiment's folder name.
        log_dir: the parent folder (default ``"tb_logs"``).
        video_fps: frames per second of the videos (``log_video(..., fps=)`` overrides it).

    Raises:
        ImportError: naming the ``tensorboard`` package and the ``rl-objectives[tensorboard]`` extra
            when it is not installed.

    Examples:
        >>> import tempfile
        >>> from rl_objectives.trainers import TensorboardLogger
        >>> try:
        ...     logger = TensorboardLogger("run", log_dir=tempfile.mkdtemp())
        ... except ImportError as err:
        ...     assert "tensorboard" in str(err)
        ... else:
        ...     logger.log_scalar("loss", 0.5, step=10)
        ...     logger.close()
    """

    def __init__(self, exp_name: str, log_dir: str | os.PathLike = "tb_logs", *, video_fps: float = 30) -> None:
        self.video_fps = _check_fps("TensorboardLogger", video_fps)
        super().__init__(exp_name, log_dir)

    def _create_experiment(self) -> Any:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError(
                "TensorboardLogger needs the 'tensorboard' package, which is not installed: "
                "pip install 'rl-objectives[tensorboard]' (or pip install tensorboard); CSVLogger needs nothing extra."
            ) from err
        return SummaryWriter(log_dir=os.path.join(self.log_dir, self.exp_name))

    def _add_summary(self, summary: Any, step: int) -> None:
        # SummaryWriter has no public method for a ready-made summary; add_video/add_hparams use this
        self.experiment._get_file_writer().add_summary(summary, step)

    def log_scalar(self, name: str, value: Any, step: int | None = None) -> None:
        value = _number("TensorboardLogger", name, value)
        step = _check_step("TensorboardLogger.log_scalar", name, step)
        _check_name("TensorboardLogger", name)
        step = self._step("scalar", name, step)
        self.experiment.add_scalar(name, value, global_step=step)
        self._logged("scalar", name, step)

    def log_histogram(
        self,
        name: str,
        data: Any,
        step: int | None = None,
        *,
        bins: Any = "tensorflow",
        max_bins: int | None = None,
        **kwargs: Any,
    ) -> None:
        """``add_histogram`` of ``data`` (a tensor, an array or a sequence of finite numbers)."""
        _check_no_kwargs("TensorboardLogger.log_histogram", kwargs, ["bins", "max_bins"])
        _check_name("TensorboardLogger", name)
        values = _histogram_values("TensorboardLogger", name, data)
        step = _check_step("TensorboardLogger.log_histogram", name, step)
        if not isinstance(bins, (str, int)) or isinstance(bins, bool) or (isinstance(bins, int) and bins < 1):
            raise ValueError(
                f"TensorboardLogger.log_histogram: bins for {name!r} must be 'tensorflow', a numpy rule name or an int >= 1, got {bins!r}."
            )
        step = self._step("histogram", name, step)
        self.experiment.add_histogram(name, values, global_step=step, bins=bins, max_bins=max_bins)
        self._logged("histogram", name, step)

    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, *, fps: float | None = None, **kwargs: Any
    ) -> None:
        """A GIF image summary of ``video`` (uint8 ``[T, C, H, W]`` or ``[B, T, C, H, W]``)."""
        _check_no_kwargs("TensorboardLogger.log_video", kwargs, ["fps"])
        _check_name("TensorboardLogger", name)
        frames = _video_frames("TensorboardLogger", name, video)
        step = _check_step("TensorboardLogger.log_video", name, step)
        fps = self.video_fps if fps is None else _check_fps("TensorboardLogger.log_video", fps)
        _require_encoder("TensorboardLogger.log_video", "gif")
        from tensorboard.compat.proto.summary_pb2 import Summary  # pyright: ignore[reportAttributeAccessIssue]  # (generated protobuf code)

        t, h, w, c = frames.shape
        image = Summary.Image(height=h, width=w, colorspace=c, encoded_image_string=_gif_bytes(frames, fps))
        step = self._step("video", name, step)
        self._add_summary(Summary(value=[Summary.Value(tag=name, image=image)]), step)
        self._logged("video", name, step)

    def log_hparams(self, cfg: Mapping[str, Any]) -> None:
        """A ``"hparams"`` text summary and the HParams dashboard's summaries of ``cfg``."""
        _check_hparams("TensorboardLogger", cfg)
        flat = {k: ("None" if v is None else v) for k, v in _flat_hparams(cfg).items()}
        from torch.utils.tensorboard.summary import hparams

        self.experiment.add_text("hparams", "\n".join(f"{k}: {v}" for k, v in flat.items()))
        for summary in hparams(flat, {}):
            self._add_summary(summary, 0)

    def close(self) -> None:
        """Flushes and closes the event files (a later call opens a new one)."""
        self.experiment.close()
