"""Storages with a device: sampled batches land on it and equal a CPU reference buffer fed the same
data with the same generator. The "cuda" cases are marked ``gpu`` (skipped without a CUDA device);
the "cpu" cases run the same checks everywhere."""

from __future__ import annotations

import pytest
import torch
from rl_replay import (
    CompactTensorStorage,
    CompressedListStorage,
    LazyMemmapStorage,
    LazyTensorStorage,
    ReplayBuffer,
)
from tdict import TensorDict

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _data(n: int, start: int = 0) -> TensorDict:
    ids = torch.arange(start, start + n)
    f = ids.float()
    return TensorDict(
        {
            "id": ids,
            "observation": f[:, None] + torch.arange(17.0),
            "action": -f[:, None] - torch.arange(6.0),
            "next": {"observation": f[:, None] + 1 + torch.arange(17.0), "reward": f * 0.5, "done": ids % 9 == 8},
        },
        batch_size=[n],
    )


def _check_same(batch: TensorDict, ref: TensorDict, device: str) -> None:
    assert set(batch.keys(True, True)) == set(ref.keys(True, True))
    for key, value in ref.items(True, True):
        got = batch.get(key)
        assert got.device.type == device, (key, got.device)
        assert got.dtype == value.dtype and torch.equal(got.cpu(), value), key


def _pair(storage, capacity: int = 64, ndim: int = 1):
    rb = ReplayBuffer(storage=storage, batch_size=32, generator=torch.Generator().manual_seed(0), dim_extend=0)
    ref = ReplayBuffer(
        storage=LazyTensorStorage(capacity, ndim=ndim),
        batch_size=32,
        generator=torch.Generator().manual_seed(0),
        dim_extend=0,
    )
    return rb, ref


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["tensor", "memmap", "compact", "compressed"])
def test_sampled_batches_land_on_the_device(kind, device):
    storage = {
        "tensor": lambda: LazyTensorStorage(64, device=device),
        "memmap": lambda: LazyMemmapStorage(64, device=device),
        "compact": lambda: CompactTensorStorage(64, device=device),
        "compressed": lambda: CompressedListStorage(64, device=device),
    }[kind]()
    rb, ref = _pair(storage)
    for start in range(0, 100, 25):  # wraps around the 64 slots
        chunk = _data(25, start)
        # data written from the device when there is one: storages move it where they keep items
        rb.extend(chunk.to(device) if kind != "compressed" else chunk)
        ref.extend(chunk)
    for _ in range(3):
        _check_same(rb.sample(), ref.sample(), device)
    _check_same(rb[torch.arange(10)], ref[torch.arange(10)], device)


@pytest.mark.parametrize("device", DEVICES)
def test_memmap_files_stay_on_cpu(device):
    s = LazyMemmapStorage(8, device=device)
    s.set(torch.arange(4), _data(4).to(device))
    assert all(v.device.type == "cpu" for v in s._storage.values(True, True))
    _check_same(s.get(torch.tensor([3, 0])), _data(4)[torch.tensor([3, 0])], device)


@pytest.mark.parametrize("device", DEVICES)
def test_ndim2_storages_on_the_device(device):
    data = TensorDict(obs=torch.arange(48.0).view(8, 3, 2), batch_size=[8, 3])
    for storage in (LazyTensorStorage(24, device=device, ndim=2), LazyMemmapStorage(24, device=device, ndim=2)):
        rb, ref = _pair(storage, capacity=24, ndim=2)
        rb.extend(data.to(device))
        ref.extend(data)
        _check_same(rb.sample(), ref.sample(), device)
