"""Raw bytes of a tensor without numpy (rl-replay depends on torch and rl-tdict only)."""

from __future__ import annotations

import ctypes

import torch

__all__ = ["tensor_bytes"]


def tensor_bytes(x: torch.Tensor) -> bytes:
    """A copy of the memory of ``x`` (moved to the CPU and made contiguous first), as ``bytes``.

    Examples:
        >>> tensor_bytes(torch.tensor([1, 2], dtype=torch.uint8))
        b'\\x01\\x02'
    """
    x = x.detach()
    if x.device.type != "cpu":
        x = x.cpu()
    x = x.contiguous()
    nbytes = x.numel() * x.element_size()
    return ctypes.string_at(x.data_ptr(), nbytes) if nbytes else b""
