"""The learning-curve picture of a run: logged values against frames, drawn with matplotlib."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tdict.files import atomic_write
from .loggers import read_csv_scalar

__all__ = ["write_learning_curve"]


def _points(label: str, source: Any) -> tuple[list[float], list[float]]:
    if isinstance(source, (str, os.PathLike)):
        pairs = read_csv_scalar(source)
    elif isinstance(source, Sequence) and not isinstance(source, (bytes, bytearray)):
        pairs = list(source)
        bad = [p for p in pairs if not (isinstance(p, Sequence) and len(p) == 2)]
        if bad:
            raise ValueError(f"write_learning_curve: curve {label!r} must hold (step, value) pairs, got {bad[0]!r}.")
    else:
        raise TypeError(
            f"write_learning_curve: curve {label!r} must be a CSVLogger scalar file or a list of (step, value) pairs, "
            f"got {type(source).__name__}."
        )
    if not pairs:
        raise ValueError(f"write_learning_curve: curve {label!r} has no points.")
    steps, values = zip(*pairs)
    return [float(s) for s in steps], [float(v) for v in values]


def write_learning_curve(
    path: str | os.PathLike,
    curves: Mapping[str, Any],
    *,
    xlabel: str = "frames",
    ylabel: str = "return",
    title: str | None = None,
    hline: tuple[float, str] | None = None,
    figsize: tuple[float, float] = (6.0, 3.6),
    dpi: int = 100,
) -> Path:
    """Draws one line per curve (a marker at every logged point) and writes the picture atomically.

    Args:
        path: the image file; its suffix picks the format (``.png``, ``.svg``, ``.pdf``, ...).
        curves: label -> points: a :class:`CSVLogger` scalar file (``logger.scalar_path(name)``) or a
            list of ``(step, value)`` pairs (e.g. what a hook logged).
        xlabel, ylabel, title: the axes' labels and the title.
        hline: ``(y, label)``: a dashed reference line (a target return, say).
        figsize, dpi: the picture's size in inches and its resolution.

    Returns:
        ``path`` as a ``Path``.

    Raises:
        ImportError: naming ``matplotlib`` when it is not installed.
        ValueError, TypeError: naming the curve whose points are missing or malformed (before
            anything is written).

    Examples:
        >>> import os, tempfile
        >>> from rl_objectives.trainers import write_learning_curve
        >>> out = write_learning_curve(os.path.join(tempfile.mkdtemp(), "curve.png"),
        ...                            {"evaluation": [(0, -1200.0), (4000, -600.0), (8000, -180.0)]}, hline=(-200.0, "solved"))
        >>> open(out, "rb").read(4)
        b'\\x89PNG'
    """
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError(f"write_learning_curve: curves must be a non-empty mapping label -> points, got {curves!r}.")
    points = {str(label): _points(str(label), source) for label, source in curves.items()}
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if not fmt:
        raise ValueError(
            f"write_learning_curve: path {os.fspath(path)!r} needs a suffix naming the image format (.png, .svg, ...)."
        )
    try:
        from matplotlib.figure import Figure  # the object API: no pyplot state, no GUI backend
    except ImportError as err:
        raise ImportError(
            "write_learning_curve needs the 'matplotlib' package, which is not installed (pip install matplotlib)."
        ) from err
    fig = Figure(figsize=figsize, dpi=dpi, layout="tight")
    ax = fig.subplots()
    for label, (steps, values) in points.items():
        ax.plot(steps, values, marker="o", markersize=4, label=label)
    if hline is not None:
        y, label = hline
        ax.axhline(float(y), color="grey", linestyle="--", linewidth=1, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    atomic_write(path, lambda f: fig.savefig(f, format=fmt))
    return path
