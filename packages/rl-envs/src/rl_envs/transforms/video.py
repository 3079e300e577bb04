"""VideoRecorder: collects the pixels an env produces and writes them as an mp4 or a gif."""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import torch
from tdict import TensorDictBase
from tdict import NestedKey
from tdict.files import atomic_write_to
from tdict.validation import check_positive, check_positive_int

from .base import Transform

__all__ = ["VideoRecorder"]

_EXTRA_HINT = "pip install 'rl-envs[video]' (imageio, imageio-ffmpeg, pillow)"


def _to_hwc(frame: torch.Tensor) -> torch.Tensor:
    """``[..., H, W, C]`` uint8 from HWC, CHW or grayscale input (C made 3)."""
    if frame.ndim >= 3 and frame.shape[-3] in (1, 3) and frame.shape[-1] not in (1, 3):
        frame = frame.movedim(-3, -1)
    if frame.ndim == 2 or frame.shape[-1] not in (1, 3):
        frame = frame.unsqueeze(-1)
    if frame.shape[-1] == 1:
        frame = frame.expand(*frame.shape[:-1], 3)
    if frame.dtype is not torch.uint8:
        frame = (frame.float().clamp(0, 1) * 255).round() if frame.is_floating_point() else frame.clamp(0, 255)
        frame = frame.to(torch.uint8)
    return frame


def _grid(frames: torch.Tensor) -> torch.Tensor:
    """Tiles ``[N, H, W, C]`` frames in a near-square grid: ``[rows*H, cols*W, C]`` (empty tiles black)."""
    n, h, w, c = frames.shape
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    out = torch.zeros(rows * cols, h, w, c, dtype=frames.dtype)
    out[:n] = frames
    return out.reshape(rows, cols, h, w, c).permute(0, 2, 1, 3, 4).reshape(rows * h, cols * w, c)


class VideoRecorder(Transform):
    """Keeps the frames seen at ``in_keys`` during resets and steps, and writes them with :meth:`dump`.

    Frames may be ``[H, W, 3]``, ``[3, H, W]`` or grayscale, uint8 or float in ``[0, 1]``. A batched env
    gives one frame per step tiled in a grid (``make_grid=True``) or one frame per sub-env in turn.
    :meth:`dump` writes the collected frames to ``path`` (mp4 through imageio + imageio-ffmpeg, gif
    through Pillow) by writing a temporary file next to it and renaming it (a crash never leaves a
    half-written video), then clears the buffer. With a ``logger`` that has ``log_video(tag, video)``,
    dump also hands it the ``[1, T, C, H, W]`` uint8 video, as TorchRL does. Observations pass through
    unchanged.

    Args:
        logger: optional logger with ``log_video(tag, video, **kwargs)``.
        tag: the video's name for the logger (and default file stem).
        in_keys: the pixel entries (default ``["pixels"]``; the first one is recorded).
        skip: record one call in ``skip`` (default 1).
        center_crop: crop frames to a centred ``center_crop x center_crop`` square.
        make_grid: tile the frames of a batched env in one image.
        out_keys: accepted for TorchRL compatibility (frames are not modified).
        fps: frames per second of the written video.
        max_frames: stop collecting after this many frames.
        dump_on_done: call :meth:`dump` when every sub-env is done.
        path: the output file (``.mp4`` or ``.gif``).
        format: ``"mp4"`` or ``"gif"`` (default: from ``path``'s suffix, else mp4).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> rec = VideoRecorder(path="unused.gif")
        >>> _ = rec(TensorDict(pixels=torch.zeros(4, 4, 3, dtype=torch.uint8)))
        >>> len(rec.obs), tuple(rec.obs[0].shape)
        (1, (4, 4, 3))
    """

    def __init__(
        self,
        logger: Any = None,
        tag: str | None = "video",
        in_keys: Sequence[NestedKey] | None = None,
        skip: int | None = None,
        center_crop: int | None = None,
        make_grid: bool = True,
        out_keys: Sequence[NestedKey] | None = None,
        fps: int = 30,
        max_frames: int | None = None,
        dump_on_done: bool = False,
        *,
        path: str | os.PathLike | None = None,
        format: str | None = None,
    ) -> None:
        super().__init__(in_keys=["pixels"] if in_keys is None else in_keys, out_keys=out_keys)
        check_positive_int("VideoRecorder", "skip", skip, allow_none=True)
        check_positive_int("VideoRecorder", "max_frames", max_frames, allow_none=True)
        check_positive("VideoRecorder", "fps", fps)
        if format is None:
            suffix = os.path.splitext(os.fspath(path))[1].lower() if path is not None else ""
            format = "gif" if suffix == ".gif" else "mp4"
        if format not in ("mp4", "gif"):
            raise ValueError(f"VideoRecorder: format must be 'mp4' or 'gif', got {format!r}.")
        self.logger, self.tag = logger, tag
        self.skip = 1 if skip is None else int(skip)
        self.center_crop, self.make_grid = center_crop, make_grid
        self.fps, self.max_frames, self.dump_on_done = fps, max_frames, dump_on_done
        self.path = None if path is None else os.fspath(path)
        self.format = format
        self.obs: list[torch.Tensor] = []
        self.count = 0

    # ------------------------------------------------------------------ collecting
    def _record(self, pixels: torch.Tensor) -> None:
        self.count += 1
        if self.count % self.skip:
            return
        if self.max_frames is not None and len(self.obs) >= self.max_frames:
            return
        frame = _to_hwc(pixels.detach().to("cpu"))
        if self.center_crop:
            h, w = frame.shape[-3], frame.shape[-2]
            size = self.center_crop
            top, left = max((h - size) // 2, 0), max((w - size) // 2, 0)
            frame = frame[..., top : top + size, left : left + size, :]
        if frame.ndim > 3:
            frames = frame.reshape(-1, *frame.shape[-3:])
            if self.make_grid:
                self.obs.append(_grid(frames).contiguous())
            else:
                room = len(frames) if self.max_frames is None else self.max_frames - len(self.obs)
                self.obs.extend(f.contiguous() for f in frames[:room])
        else:
            self.obs.append(frame.contiguous())

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        pixels = next_tensordict.get(self.in_keys[0], None)
        if pixels is None:
            if self._missing_tolerance:
                return next_tensordict
            raise KeyError(
                f"VideoRecorder: pixel key {self.in_keys[0]!r} not found; the tensordict has "
                f"{sorted(map(str, next_tensordict.keys(True, True)))}."
            )
        self._record(pixels)
        return next_tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        self._call(next_tensordict)
        if self.dump_on_done:
            done = next_tensordict.get("done", None)
            if done is not None and bool(done.all()):
                self.dump()
        return next_tensordict

    # ------------------------------------------------------------------ writing
    def dump(self, path: str | os.PathLike | None = None, suffix: str | None = None) -> str | None:
        """Writes the collected frames (to ``path`` or the constructor's path), clears them, returns the path.

        Returns ``None`` when there is nothing to write. ``suffix`` is accepted for TorchRL compatibility.
        """
        frames, self.obs = self.obs, []
        if not frames:
            return None
        if self.logger is not None and hasattr(self.logger, "log_video"):
            video = torch.stack(frames).permute(0, 3, 1, 2).unsqueeze(0)
            self.logger.log_video(self.tag, video, fps=self.fps)
        target = os.fspath(path) if path is not None else self.path
        if target is None:
            if self.logger is not None:
                return None
            raise ValueError("VideoRecorder.dump: no path (pass path= here or to the constructor).")
        shapes = {tuple(f.shape) for f in frames}
        if len(shapes) > 1:
            raise ValueError(f"VideoRecorder.dump: frames of different shapes {sorted(shapes)}.")
        arrays = [f.numpy() for f in frames]
        write = self._write_gif if self.format == "gif" else self._write_mp4
        atomic_write_to(os.path.abspath(target), lambda tmp: write(tmp, arrays), suffix=f".{self.format}")
        return target

    def _write_mp4(self, tmp: str, arrays: list) -> None:
        try:
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401
        except ImportError as err:
            raise ImportError(f"VideoRecorder: writing mp4 needs imageio and imageio-ffmpeg: {_EXTRA_HINT}.") from err
        h, w = arrays[0].shape[:2]
        if h % 2 or w % 2:
            raise ValueError(f"VideoRecorder: mp4 (H.264) needs even frame sizes, got {h}x{w}; use format='gif'.")
        writer = imageio.get_writer(
            tmp,
            format="FFMPEG",
            mode="I",
            fps=self.fps,
            codec="libx264",
            macro_block_size=1,
            pixelformat="yuv420p",
            quality=8,
        )
        try:
            for a in arrays:
                writer.append_data(a)
        finally:
            writer.close()

    def _write_gif(self, tmp: str, arrays: list) -> None:
        try:
            from PIL import Image
        except ImportError as err:
            raise ImportError(f"VideoRecorder: writing gif needs Pillow: {_EXTRA_HINT}.") from err
        images = [Image.fromarray(a) for a in arrays]
        # Pillow merges a frame identical to the previous one into it (its duration adds up)
        images[0].save(
            tmp,
            format="GIF",
            save_all=True,
            append_images=images[1:],
            duration=max(int(round(1000 / self.fps)), 1),
            loop=0,
        )

    def __repr__(self) -> str:
        return f"VideoRecorder(in_keys={self.in_keys}, path={self.path!r}, format={self.format!r}, fps={self.fps})"
