"""CompressedListStorage: exact round trips (dtypes, nested TensorDicts, odd shapes), batched reads
stack, custom codecs, bad writes change nothing, and the data really is compressed."""

from __future__ import annotations

import zlib

import pytest
import torch
from rl_replay import CompressedListStorage, ReplayBuffer
from tdict import TensorDict

_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


def _tensor(dtype: torch.dtype, shape: tuple, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.5
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g).to(dtype)


def _nested(n: int, seed: int = 0) -> TensorDict:
    return TensorDict(
        {
            "pixels": _tensor(torch.uint8, (n, 3, 8, 8), seed),
            "half": _tensor(torch.float16, (n, 4), seed + 1),
            "flag": _tensor(torch.bool, (n,), seed + 2),
            "count": _tensor(torch.int64, (n,), seed + 3),
            "empty": torch.zeros(n, 0, 5),
            "next": {
                "reward": _tensor(torch.float32, (n,), seed + 4),
                "deep": TensorDict({"agents": _tensor(torch.int8, (n, 2, 3), seed + 5)}, batch_size=[n, 2]),
            },
        },
        batch_size=[n],
    )


def _assert_td_equal(a: TensorDict, b: TensorDict) -> None:
    assert a.batch_size == b.batch_size
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key, value in b.items(True, True):
        got = a.get(key)
        assert got.dtype == value.dtype and got.shape == value.shape, key
        assert torch.equal(got, value), key
    assert a["next", "deep"].batch_size == b["next", "deep"].batch_size


@pytest.mark.parametrize("dtype", _DTYPES)
def test_tensor_round_trip_every_dtype(dtype):
    s = CompressedListStorage(10)
    x = _tensor(dtype, (5, 3, 2))
    s.set(torch.arange(5), x)
    out = s.get(torch.tensor([4, 0, 4]))
    assert out.dtype == dtype and torch.equal(out, x[[4, 0, 4]])
    single = s.get(2)
    assert single.shape == (3, 2) and torch.equal(single, x[2])
    s.set(7, x[1, 0])  # add() of one item
    assert torch.equal(s.get(7), x[1, 0])


def test_nested_tensordict_round_trip_through_a_buffer():
    data = _nested(12)
    rb = ReplayBuffer(storage=CompressedListStorage(20), batch_size=6, generator=torch.Generator().manual_seed(0))
    rb.extend(data)
    batch, info = rb.sample(return_info=True)
    _assert_td_equal(batch, data[info["index"]])
    _assert_td_equal(rb[3], data[3])
    _assert_td_equal(rb[torch.tensor([0, 11])], data[torch.tensor([0, 11])])


def test_items_written_one_by_one_still_stack():
    data = _nested(4)
    s = CompressedListStorage(10)
    for i in range(4):
        s.set(i, data[i])
    _assert_td_equal(s.get([3, 1]), data[torch.tensor([3, 1])])


def test_wrap_around_overwrites_oldest():
    rb = ReplayBuffer(storage=CompressedListStorage(5))
    rb.extend(torch.arange(4).view(4, 1))
    rb.extend(torch.arange(10, 13).view(3, 1))
    assert len(rb) == 5
    assert rb.storage.get(list(range(5))).view(-1).tolist() == [11, 12, 2, 3, 10]


def test_mixed_structures_come_back_as_a_list():
    s = CompressedListStorage(5)
    s.set([0, 1, 2], [torch.ones(2), "text", {"a": 1}])
    assert s.get([1, 2]) == ["text", {"a": 1}]
    out = s.get([0, 1])
    assert isinstance(out, list) and torch.equal(out[0], torch.ones(2)) and out[1] == "text"


def test_collate_fn_receives_the_items():
    seen = []

    def collate(items):
        seen.append(len(items))
        return torch.cat(items)

    s = CompressedListStorage(5, collate_fn=collate)
    s.set(torch.arange(3), torch.arange(6).view(3, 2))
    assert s.get([2, 0]).tolist() == [4, 5, 0, 1] and seen == [2]


def test_is_compressed_with_zlib_and_level():
    frames = torch.zeros(20, 3, 64, 64, dtype=torch.uint8)
    frames[:, :, 10:20, 10:20] = 200
    fast = CompressedListStorage(20, compression_level=1)
    small = CompressedListStorage(20, compression_level=9)
    fast.set(torch.arange(20), frames)
    small.set(torch.arange(20), frames)
    raw = frames.numel()
    assert small.bytes() <= fast.bytes() < raw / 50
    blob = small._items[0][2]
    assert zlib.decompress(blob) == frames[0].numpy().tobytes()  # raw bytes, no pickle


def test_custom_codec():
    calls = {"c": 0, "d": 0}

    def compress(t):
        calls["c"] += 1
        return t.flatten().numpy().tobytes()[::-1]

    def decompress(blob, meta):
        calls["d"] += 1
        return torch.frombuffer(bytearray(blob[::-1]), dtype=meta["dtype"]).reshape(meta["shape"])

    s = CompressedListStorage(10, compression_fn=compress, decompression_fn=decompress)
    data = TensorDict(a=torch.arange(6.0).view(3, 2), b=torch.arange(3, dtype=torch.int32), batch_size=[3])
    s.set(torch.arange(3), data)
    assert calls["c"] == 6  # each item's leaf
    out = s.get(torch.tensor([2, 1]))
    assert torch.equal(out["a"], data["a"][[2, 1]]) and torch.equal(out["b"], data["b"][[2, 1]])
    assert calls["d"] == 4


def test_argument_errors():
    with pytest.raises(ValueError, match="both"):
        CompressedListStorage(4, compression_fn=lambda t: t)
    with pytest.raises(ValueError, match="compression_level"):
        CompressedListStorage(4, compression_level=22)


def test_bad_writes_change_nothing():
    rb = ReplayBuffer(storage=CompressedListStorage(6))
    rb.extend(torch.arange(8).view(4, 2))
    before = rb.storage.get(list(range(4)))
    with pytest.raises(ValueError, match="2 indices for data whose first dim is 3"):
        rb.storage.set(torch.tensor([4, 5]), torch.zeros(3, 2))
    with pytest.raises(IndexError, match="outside"):
        rb.storage.set(torch.tensor([5, 6]), torch.zeros(2, 2))

    def broken(t):
        if t.sum() > 0:
            raise RuntimeError("codec failure")
        return t.numpy().tobytes()

    rb.storage.compression_fn, rb.storage.decompression_fn = broken, lambda b, m: torch.zeros(m["shape"])
    with pytest.raises(RuntimeError, match="codec failure"):
        rb.extend(torch.tensor([[0, 0], [1, 1]]))
    assert len(rb) == 4 and rb.writer._cursor == 4
    rb.storage.compression_fn = rb.storage.decompression_fn = None
    assert torch.equal(rb.storage.get(list(range(4))), before)


def test_device_argument_cpu():
    s = CompressedListStorage(4, device="cpu")
    s.set(torch.arange(2), torch.ones(2, 2))
    assert s.get([0, 1]).device.type == "cpu"


def test_non_tensor_entries_are_kept():
    td = TensorDict(a=torch.arange(3), batch_size=[3])
    td.set_non_tensor("tag", "hello")
    s = CompressedListStorage(5)
    s.set(torch.arange(3), td)
    out = s.get([0, 2])
    assert out["a"].tolist() == [0, 2] and out["tag"] == "hello"


def test_checkpoint_round_trip_keeps_items_compressed(tmp_path):
    data = _nested(9)
    rb = ReplayBuffer(storage=CompressedListStorage(12), generator=torch.Generator().manual_seed(0))
    rb.extend(data[:5])
    rb.add(data[5])
    rb.extend(torch.arange(4).view(2, 2))  # a second structure
    rb.storage.set(8, {"json": [1, 2]})
    state = rb.storage._checkpoint_state()
    assert state["blobs"].dtype == torch.uint8 and state["blobs"].numel() == rb.storage.bytes()
    rb.dumps(tmp_path / "ckpt")
    restored = ReplayBuffer(storage=CompressedListStorage(12), generator=torch.Generator())
    restored.loads(tmp_path / "ckpt")
    assert len(restored) == 9 and restored.storage.bytes() == rb.storage.bytes()
    _assert_td_equal(restored.storage.get(list(range(6))), data[:6])
    assert torch.equal(restored.storage.get([6, 7]), torch.arange(4).view(2, 2))
    assert restored.storage.get(8) == {"json": [1, 2]}
