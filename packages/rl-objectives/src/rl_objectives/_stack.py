"""Where a warning raised inside this package should point: the user's call."""

from __future__ import annotations

import functools
import os
import sys

import torch.nn

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_SKIPPED_DIRS = (_PACKAGE_DIR, os.path.dirname(os.path.abspath(torch.nn.modules.module.__file__)))


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning raised by the caller point at the first frame outside
    this package (the user's constructor call, however deep the ``super().__init__`` chain), or of
    ``torch.nn.Module.__call__`` that runs a forward of ours (the user's ``loss(td)``)."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and _skipped(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


@functools.lru_cache(maxsize=1024)
def _skipped(filename: str) -> bool:
    """Whether a frame of ``filename`` belongs to this package or to ``torch.nn``'s module call."""
    return os.path.abspath(filename).startswith(_SKIPPED_DIRS)
