"""rl-kernels tests: without a GPU, Triton kernels run in Triton's interpreter on small shapes.

``TRITON_INTERPRET`` must be set before any kernel module is imported (``triton.jit`` reads it when
a kernel is defined), so it is set here, when pytest collects this folder, before any test runs.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def device() -> torch.device:
    """Where kernel tests run: the GPU when there is one, else the CPU (Triton interpreter)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
