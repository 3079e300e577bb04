"""The error raised when MuJoCo cannot render offscreen (no OpenGL context for ``MUJOCO_GL``)."""

from __future__ import annotations

import os

__all__ = ["render_error"]


def render_error(owner: str, err: BaseException) -> RuntimeError:
    """A ``RuntimeError`` saying that ``owner(from_pixels=True)`` could not render, why, and what to set.

    ``MUJOCO_GL`` is read when mujoco is first imported: the hint says to set it before that.
    """
    return RuntimeError(
        f"{owner}(from_pixels=True): MuJoCo could not render with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r} "
        f"({type(err).__name__}: {err}). Set MUJOCO_GL=egl or osmesa before mujoco is first imported, or use "
        "from_pixels=False."
    )
