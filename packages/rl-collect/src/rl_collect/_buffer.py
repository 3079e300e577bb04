"""Writing collected batches into a replay buffer (whole, or one time step at a time)."""

from __future__ import annotations

from typing import Any

from tdict import TensorDictBase


def on_buffer_device(batch: TensorDictBase, buffer: Any) -> TensorDictBase:
    """``batch`` with the device of the buffer's storage when it has none (a postproc that cleared it):
    the buffer then holds data on its declared device."""
    if batch.device is not None:
        return batch
    device = getattr(getattr(buffer, "storage", None), "device", None)
    return batch if device is None else batch.to(device)


def write(buffer: Any, batch: TensorDictBase, whole: bool = True) -> None:
    """Writes ``batch`` into ``buffer``: one ``extend`` (``whole``), or one item per time step (the
    last batch dim), TorchRL's ``extend_buffer=False``."""
    batch = on_buffer_device(batch, buffer)
    if whole or batch.ndim == 0:
        buffer.extend(batch)
        return
    for t in range(batch.batch_size[-1]):
        buffer.add(batch[..., t])
