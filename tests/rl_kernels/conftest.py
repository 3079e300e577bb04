"""rl-kernels tests: without a GPU, Triton kernels run in Triton's interpreter on small shapes.

``TRITON_INTERPRET=1`` is set by the repository's tests/conftest.py (it must be set before any
kernel module is imported, and collection imports every module); the ``device`` fixture gives the
GPU when there is one, else the CPU.
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def device() -> torch.device:
    """Where kernel tests run: the GPU when there is one, else the CPU (Triton interpreter)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
