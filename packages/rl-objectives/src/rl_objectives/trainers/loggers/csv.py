"""CSVLogger: plain files under ``<log_dir>/<exp_name>``, no dependency (videos need an encoder)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import torch

from tdict.files import atomic_write
from ..trainer import atomic_torch_save
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

__all__ = ["CSVLogger", "read_csv_histogram", "read_csv_scalar"]

HISTOGRAM_HEADER = "step,count,min,max,mean,std,bin_edges,bin_counts"


def _data_lines(path: Path) -> list[str]:
    """The whole lines of ``path`` (a last line without its newline, cut by a crash, is dropped)."""
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def read_csv_scalar(path: str | os.PathLike) -> list[tuple[int, float]]:
    """The ``(step, value)`` pairs of a :class:`CSVLogger` scalar file, in file order.

    A last line without its newline (a write cut by a crash) is ignored, as :class:`CSVLogger` does.

    Raises:
        FileNotFoundError: naming the file.
        ValueError: naming the file and the line number of a line that is not ``step,value``.

    Examples:
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
    out = []
    for number, line in enumerate(_data_lines(path), 1):
        step, sep, value = line.partition(",")
        try:
            if not sep:
                raise ValueError
            out.append((int(step), float(value)))
        except ValueError:
            raise ValueError(
                f"read_csv_scalar: {os.fspath(path)!r} line {number} is not 'step,value': {line!r}."
            ) from None
    return out


def read_csv_histogram(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a :class:`CSVLogger` histogram file, in file order.

    Each row is a dict with ``step``, ``count``, ``min``, ``max``, ``mean``, ``std`` (population),
    ``bin_edges`` (``len(bin_counts) + 1`` floats) and ``bin_counts`` (ints). A last line without its
    newline (a write cut by a crash) is ignored.

    Raises:
        FileNotFoundError: naming the file.
        ValueError: naming the file and the line of a malformed line.

    Examples:
        >>> import tempfile, torch
        >>> from rl_objectives.trainers.loggers import CSVLogger, read_csv_histogram
        >>> logger = CSVLogger("run", log_dir=tempfile.mkdtemp())
        >>> logger.log_histogram("weights", torch.tensor([0.0, 1.0, 1.0, 3.0]), step=5, bins=3)
        >>> row = read_csv_histogram(logger.histogram_path("weights"))[0]
        >>> row["step"], row["count"], row["mean"], row["bin_edges"], row["bin_counts"]
        (5, 4, 1.25, [0.0, 1.0, 2.0, 3.0], [1, 2, 1])
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"read_csv_histogram: no histogram file at {os.fspath(path)!r}.")
    lines = _data_lines(path)
    if not lines:
        return []
    if lines[0] != HISTOGRAM_HEADER:
        raise ValueError(
            f"read_csv_histogram: {os.fspath(path)!r} does not start with the header {HISTOGRAM_HEADER!r}."
        )
    out = []
    for number, line in enumerate(lines[1:], 2):
        fields = line.split(",")
        try:
            if len(fields) != 8:
                raise ValueError
            row = {
                "step": int(fields[0]),
                "count": int(fields[1]),
                **{k: float(v) for k, v in zip(("min", "max", "mean", "std"), fields[2:6])},
                "bin_edges": [float(v) for v in fields[6].split()],
                "bin_counts": [int(v) for v in fields[7].split()],
            }
            if len(row["bin_edges"]) != len(row["bin_counts"]) + 1:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"read_csv_histogram: {os.fspath(path)!r} line {number} is not a histogram row: {line!r}."
            ) from None
        out.append(row)
    return out


class CSVLogger(Logger):
    """Logs to plain files under ``<log_dir>/<exp_name>/``; nothing to install beyond torch.

    - scalars: ``scalars/<name>.csv``, one ``step,value`` line per call (:func:`read_csv_scalar`);
    - histograms: ``histograms/<name>.csv``, a header then one line per call with the step, the
      count, min, max, mean and (population) std of the values, the bin edges and the bin counts
      (space-separated lists; :func:`read_csv_histogram` reads them back);
    - videos: ``videos/<name>_<step>.<mp4|gif|pt>`` (``video_format``); mp4 needs ``imageio-ffmpeg``
      and gif ``pillow`` (``pip install 'rl-objectives[video]'``), "pt" is ``torch.save`` of the
      tensor as given; a batch ``[B, T, C, H, W]`` is tiled in a grid in mp4/gif;
    - hyper-parameters: ``hparams.json`` (every ``log_hparams`` call of this logger merged in).

    Crash-safe appends: each call writes one whole line and flushes it (``fsync=True`` also syncs
    it to disk), so a killed process loses at most the line being written; a logger opened on an
    existing file drops such a partial last line before appending. Videos and ``hparams.json`` are
    written to a temporary file and renamed into place. ``step=None`` is the step after the highest
    one of that name so far, 0 first, counting what the files already hold (the lines of a scalar
    or histogram file, the step numbers of a video's files).

    Args:
        exp_name: the experiment's folder name.
        log_dir: the parent folder (default ``"csv_logs"``).
        video_format: ``"mp4"`` (default), ``"gif"`` or ``"pt"``. TorchRL's default is ``"pt"``
            (its :func:`get_logger` uses ``"mp4"``).
        video_fps: frames per second of the written videos (``log_video(..., fps=)`` overrides it).
        fsync: ``os.fsync`` after every line (survives a power loss; slower).

    Examples:
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

    def __init__(
        self,
        exp_name: str,
        log_dir: str | os.PathLike | None = None,
        video_format: str = "mp4",
        video_fps: float = 30,
        fsync: bool = False,
    ) -> None:
        self.video_format = _check_format("CSVLogger", video_format, ("mp4", "gif", "pt"))
        self.video_fps = _check_fps("CSVLogger", video_fps)
        self.fsync = bool(fsync)
        self._files: dict[tuple[str, str], IO[str]] = {}
        self._needs_header: set[tuple[str, str]] = set()
        self._hparams: dict[str, Any] = {}
        super().__init__(exp_name, "csv_logs" if log_dir is None else log_dir)

    def _create_experiment(self) -> Path:
        root = Path(self.log_dir) / self.exp_name
        root.mkdir(parents=True, exist_ok=True)
        return root

    # ------------------------------------------------------------------------------------- paths
    def scalar_path(self, name: str) -> Path:
        """The CSV file of metric ``name``."""
        return self.experiment / "scalars" / f"{_check_name('CSVLogger', name)}.csv"

    def histogram_path(self, name: str) -> Path:
        """The CSV file of the histograms of ``name``."""
        return self.experiment / "histograms" / f"{_check_name('CSVLogger', name)}.csv"

    def video_path(self, name: str, step: int) -> Path:
        """The file of video ``name`` at ``step``."""
        return self.experiment / "videos" / f"{_check_name('CSVLogger', name)}_{step}.{self.video_format}"

    # ----------------------------------------------------------------------------- line appends
    def _handle(self, kind: str, name: str) -> IO[str]:
        """The open file of ``(kind, name)``; opening it repairs a torn last line and reads the highest
        step already there (for the next ``step=None``)."""
        handle = self._files.get((kind, name))
        if handle is not None:
            return handle
        header = HISTOGRAM_HEADER if kind == "histogram" else None
        path = self.histogram_path(name) if kind == "histogram" else self.scalar_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        lines: list[bytes] = []
        if path.exists():
            with open(path, "rb+") as f:  # drop a line a crash left half-written
                data = f.read()
                keep = data.rfind(b"\n") + 1
                if keep != len(data):
                    f.truncate(keep)
                lines = data[:keep].split(b"\n")[:-1]
        steps = [
            int(s)
            for line in lines[1 if header is not None else 0 :]
            if (s := line.partition(b",")[0].strip()).isdigit()
        ]
        self._auto_steps[(kind, name)] = max(steps) + 1 if steps else 0
        if header is not None and not lines:
            self._needs_header.add((kind, name))
        handle = open(path, "a", encoding="utf-8")  # noqa: SIM115  (kept open across calls; closed by close())
        self._files[(kind, name)] = handle
        return handle

    def _append(self, kind: str, name: str, line: str) -> None:
        handle = self._handle(kind, name)
        if (kind, name) in self._needs_header:  # header and first row in one write
            line = f"{HISTOGRAM_HEADER}\n{line}"
        handle.write(line)  # one write per line: a crash never interleaves two lines
        handle.flush()
        if self.fsync:
            os.fsync(handle.fileno())
        self._needs_header.discard((kind, name))

    # ---------------------------------------------------------------------------------- logging
    def log_scalar(self, name: str, value: Any, step: int | None = None) -> None:
        """Appends ``step,value`` to ``scalars/<name>.csv``."""
        value = _number("CSVLogger", name, value)
        step = _check_step("CSVLogger.log_scalar", name, step)
        _check_name("CSVLogger", name)
        self._handle("scalar", name)
        step = self._step("scalar", name, step)
        self._append("scalar", name, f"{step},{value!r}\n")
        self._logged("scalar", name, step)

    def log_histogram(self, name: str, data: Any, step: int | None = None, *, bins: Any = 64, **kwargs: Any) -> None:
        """Appends the summary and the bin counts of ``data`` to ``histograms/<name>.csv``.

        Args:
            name: the histogram's name.
            data: a tensor, an array or a sequence of finite numbers (flattened).
            step: the step (``None``: the one after the highest so far, 0 first).
            bins: a number of equal-width bins over ``[min, max]`` (default 64) or the bin edges.
        """
        _check_no_kwargs("CSVLogger.log_histogram", kwargs, ["bins"])
        _check_name("CSVLogger", name)
        values = _histogram_values("CSVLogger", name, data)
        bins = _check_bins("CSVLogger", name, bins)
        step = _check_step("CSVLogger.log_histogram", name, step)
        h = _histogram(values, bins)
        self._handle("histogram", name)
        step = self._step("histogram", name, step)
        edges = " ".join(repr(e) for e in h["bin_edges"])
        counts = " ".join(str(c) for c in h["bin_counts"])
        line = f"{step},{h['count']},{h['min']!r},{h['max']!r},{h['mean']!r},{h['std']!r},{edges},{counts}\n"
        self._append("histogram", name, line)
        self._logged("histogram", name, step)

    def _next_video_step(self, name: str) -> int:
        if ("video", name) not in self._auto_steps:  # continue after the videos already there
            path = self.video_path(name, 0)
            pattern = re.compile(
                re.escape(path.name[: -len(f"0.{self.video_format}")]) + r"(\d+)\." + re.escape(self.video_format) + "$"
            )
            taken = [
                int(m.group(1))
                for p in (path.parent.iterdir() if path.parent.is_dir() else ())
                if (m := pattern.match(p.name))
            ]
            self._auto_steps[("video", name)] = max(taken) + 1 if taken else 0
        return self._auto_steps[("video", name)]

    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, *, fps: float | None = None, **kwargs: Any
    ) -> None:
        """Writes ``videos/<name>_<step>.<video_format>``.

        Args:
            name: the video's name.
            video: uint8 ``[T, C, H, W]`` or ``[B, T, C, H, W]`` (``C`` 1 or 3).
            step: the step in the file name (``None``: the one after the highest of the files there).
            fps: frames per second (default: the logger's ``video_fps``).

        Raises:
            ImportError: naming ``imageio-ffmpeg`` (mp4) or ``pillow`` (gif) when missing, before
                anything is written.
        """
        _check_no_kwargs("CSVLogger.log_video", kwargs, ["fps"])
        _check_name("CSVLogger", name)
        frames = _video_frames("CSVLogger", name, video)
        step = _check_step("CSVLogger.log_video", name, step)
        fps = self.video_fps if fps is None else _check_fps("CSVLogger.log_video", fps)
        if self.video_format != "pt":
            _require_encoder("CSVLogger.log_video", self.video_format)
        following = self._next_video_step(name)  # (scans the folder once per name)
        step = following if step is None else step
        path = self.video_path(name, step)
        if self.video_format == "pt":
            atomic_torch_save(video.detach().cpu(), path)
        else:
            _write_video(path, frames, fps, self.video_format)
        self._logged("video", name, step)

    def log_hparams(self, cfg: Mapping[str, Any]) -> None:
        """Writes ``hparams.json``: this logger's hyper-parameters so far (later calls update it)."""
        _check_hparams("CSVLogger", cfg)
        merged = {**self._hparams, **_plain_hparams(cfg)}
        text = json.dumps(merged, indent=2, sort_keys=True, default=str)

        def write(f: IO[Any]) -> None:
            f.write(text)

        atomic_write(self.experiment / "hparams.json", write, binary=False)
        self._hparams = merged

    def close(self) -> None:
        """Closes the open CSV files (a later call reopens them)."""
        for handle in self._files.values():
            handle.close()
        self._files.clear()

    def __del__(self) -> None:
        files = getattr(self, "_files", None)
        if files:
            self.close()
