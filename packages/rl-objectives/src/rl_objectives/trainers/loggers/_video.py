"""Video checks and encoders shared by the loggers.

A logged video is a uint8 tensor ``[T, C, H, W]`` or ``[B, T, C, H, W]`` (``C`` 1 or 3). The ``B``
videos of a batch are tiled in a near-square grid (black tiles fill the last row), so every backend
stores one ``T``-frame video. mp4 files are H.264 (yuv420p) through ``imageio-ffmpeg`` (the ffmpeg
binary comes with it): an odd height or width gets one black row or column added, as H.264 needs even
sizes. GIFs are written by Pillow, which stores a frame identical to the previous one once, with the
durations added (the animation plays the same).
"""

from __future__ import annotations

import io
import math
import os
from typing import Any

import torch
from tdict.files import atomic_write_to
from tdict.validation import check_one_of

from .base import _check_fps

VIDEO_FORMATS = ("mp4", "gif")
_HINT = "pip install 'rl-objectives[video]'"


def _video_frames(owner: str, name: str, video: Any) -> torch.Tensor:
    """``video`` checked and turned into ``[T, H, W, 3]`` uint8 CPU frames (a batch tiled in a grid)."""
    if not isinstance(video, torch.Tensor):
        raise TypeError(
            f"{owner}.log_video: video for {name!r} must be a uint8 torch.Tensor [T, C, H, W] or [B, T, C, H, W], got {type(video).__name__}."
        )
    if video.ndim not in (4, 5):
        raise ValueError(
            f"{owner}.log_video: {name!r} must be a [T, C, H, W] or [B, T, C, H, W] tensor, got {tuple(video.shape)}."
        )
    if video.shape[-3] not in (1, 3):
        raise ValueError(
            f"{owner}.log_video: {name!r} must have 1 or 3 channels at dim -3 ([..., C, H, W]), got shape {tuple(video.shape)}."
        )
    if video.dtype is not torch.uint8:
        raise TypeError(f"{owner}.log_video: {name!r} must be uint8 (0-255), got {video.dtype}.")
    if video.numel() == 0:
        raise ValueError(f"{owner}.log_video: {name!r} is empty, got shape {tuple(video.shape)}.")
    video = video.detach().to("cpu")
    if video.ndim == 5:
        b, t, c, h, w = video.shape
        cols = math.ceil(math.sqrt(b))
        rows = math.ceil(b / cols)
        grid = torch.zeros(rows * cols, t, c, h, w, dtype=torch.uint8)
        grid[:b] = video
        # [rows, cols, T, C, H, W] -> [T, C, rows, H, cols, W]
        video = grid.reshape(rows, cols, t, c, h, w).permute(2, 3, 0, 4, 1, 5).reshape(t, c, rows * h, cols * w)
    frames = video.permute(0, 2, 3, 1)
    if frames.shape[-1] == 1:
        frames = frames.expand(*frames.shape[:-1], 3)
    return frames.contiguous()


def _check_format(owner: str, fmt: Any, formats: tuple[str, ...] = VIDEO_FORMATS) -> str:
    return check_one_of(owner, "video format", fmt, formats)


def _require_encoder(owner: str, fmt: str) -> None:
    """Raises the ImportError naming the package before anything is written."""
    if fmt == "mp4":
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError as err:
            raise ImportError(
                f"{owner}: writing mp4 videos needs the 'imageio-ffmpeg' package: {_HINT} (or pip install imageio-ffmpeg)."
            ) from err
    elif fmt == "gif":
        try:
            import PIL.Image  # noqa: F401
        except ImportError as err:
            raise ImportError(
                f"{owner}: writing GIF videos needs the 'pillow' package: {_HINT} (or pip install pillow)."
            ) from err


def _write_mp4(path: str, frames: torch.Tensor, fps: float) -> None:
    import imageio_ffmpeg

    t, h, w, _ = frames.shape
    if h % 2 or w % 2:  # H.264 in yuv420p needs even sizes: pad with black
        frames = torch.nn.functional.pad(frames, (0, 0, 0, w % 2, 0, h % 2))
        h, w = h + h % 2, w + w % 2
    writer = imageio_ffmpeg.write_frames(
        path,
        (w, h),
        fps=fps,  # pyright: ignore[reportArgumentType]  # (imageio-ffmpeg takes a float; its annotation says int)
        codec="libx264",
        pix_fmt_in="rgb24",
        pix_fmt_out="yuv420p",
        quality=8,
        macro_block_size=1,
        ffmpeg_log_level="error",
        output_params=["-f", "mp4"],
    )
    writer.send(None)  # starts ffmpeg
    try:
        for frame in frames:
            writer.send(frame.numpy().tobytes())
    finally:
        writer.close()


def _gif_bytes(frames: torch.Tensor, fps: float) -> bytes:
    from PIL import Image

    images = [Image.fromarray(f.numpy()) for f in frames]
    out = io.BytesIO()
    images[0].save(
        out, format="GIF", save_all=True, append_images=images[1:], duration=max(int(round(1000 / fps)), 1), loop=0
    )
    return out.getvalue()


def _write_video(path: str | os.PathLike, frames: torch.Tensor, fps: float, fmt: str) -> None:
    """Writes ``frames`` to ``path`` atomically (a temporary file in the same folder, then a rename)."""
    fps = _check_fps("video", fps)

    def write(tmp: str) -> None:
        if fmt == "mp4":
            _write_mp4(tmp, frames, fps)
        else:
            with open(tmp, "wb") as f:
                f.write(_gif_bytes(frames, fps))

    atomic_write_to(os.path.abspath(os.fspath(path)), write, suffix=f".{fmt}")
