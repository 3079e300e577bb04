"""Tests for tdict.consolidate: one contiguous storage for all leaves."""

from __future__ import annotations

import io
import json
import multiprocessing as mp
import os
import pickle

import pytest
import torch

import tdict
from tdict import MemoryMappedTensor, TensorDict
from tdict.consolidate import from_consolidated, is_consolidated
from tdict.persistence import MemmapLoadError

try:
    from tdict import NonTensorData
except ImportError:  # pragma: no cover
    NonTensorData = None

needs_non_tensor = pytest.mark.skipif(NonTensorData is None, reason="tdict.non_tensor is not available yet")


def _mixed() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "f16": torch.randn(4, 3, generator=g).half(),
            "i8": torch.randint(-100, 100, (4,), generator=g, dtype=torch.int8),
            "f64": torch.randn(4, 2, generator=g).double(),
            "b": torch.rand(4, 5, generator=g) > 0.5,
            "i64": torch.randint(-(10**12), 10**12, (4,), generator=g),
            "nested": {
                "f32": torch.randn(4, 7, generator=g),
                "deeper": {"c64": torch.randn(4, generator=g, dtype=torch.complex128), "e": torch.zeros(4, 0)},
                "bf16": torch.randn(4, 1, generator=g).bfloat16(),
            },
            "strided": torch.arange(24.0).view(4, 6)[:, ::2],  # non-contiguous source
        },
        batch_size=[4],
        names=["env"],
    )


def _leaves(td):
    """Every tensor leaf, members of lazy stacks included (their keys may differ)."""
    if hasattr(td, "tensordicts"):
        return [leaf for member in td.tensordicts for leaf in _leaves(member)]
    out = []
    for _, v in td._items_raw():
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif not type(v)._is_non_tensor:
            out.extend(_leaves(v))
    return out


def _assert_same(a, b):
    assert a.batch_size == b.batch_size
    assert list(a.keys(True, True)) == list(b.keys(True, True))
    for key, va in a.items(True, True):
        vb = b.get(key)
        if isinstance(va, torch.Tensor):
            assert va.dtype == vb.dtype and va.shape == vb.shape and torch.equal(va, vb), key


def _one_storage(td) -> torch.Tensor:
    storage = td._consolidated["storage"]
    ptr = storage.untyped_storage().data_ptr()
    for leaf in _leaves(td):
        assert leaf.untyped_storage().data_ptr() == ptr
        assert leaf.is_contiguous()
        if leaf.numel():
            assert (leaf.data_ptr() - storage.data_ptr()) % max(8, leaf.dtype.itemsize) == 0  # aligned
    return storage


def test_values_structure_and_one_storage():
    td = _mixed()
    c = td.consolidate()
    _assert_same(c, td)
    assert c.is_consolidated() and is_consolidated(c) and not td.is_consolidated()
    assert c.is_locked and c.names == ["env"]
    storage = _one_storage(c)
    assert storage.dtype == torch.uint8 and storage.dim() == 1
    assert storage.numel() >= sum(v.numel() * v.dtype.itemsize for v in _leaves(td))
    # writes through a leaf land in the storage, and the source is untouched
    c["nested", "f32"][0, 0] = 123.0
    assert td["nested", "f32"][0, 0].item() != 123.0
    assert c.clone().is_consolidated() is False


def test_modified_structure_is_no_longer_consolidated():
    c = _mixed().consolidate()
    c.unlock_()
    c["new"] = torch.ones(4)
    assert not c.is_consolidated()
    back = pickle.loads(pickle.dumps(c))  # falls back to leaf-by-leaf pickling
    assert back["new"].tolist() == [1.0] * 4 and not back.is_consolidated()
    c2 = _mixed().consolidate().unlock_()
    c2["f16"] = torch.zeros(4, 3, dtype=torch.float16)  # replaced, not written in place
    assert not c2.is_consolidated()


def test_pickle_sends_one_storage():
    td = TensorDict({f"k{i}": torch.full((2, 3), float(i)) for i in range(50)}, [2])
    c = td.consolidate()
    state = c.__getstate__()
    tensors = []

    class Spy(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, torch.Tensor):
                tensors.append(obj)
            return None

    Spy(io.BytesIO()).dump(state)
    assert len(tensors) == 1 and tensors[0] is c._consolidated["storage"]
    back = pickle.loads(pickle.dumps(c))
    _assert_same(back, td)
    assert back.is_consolidated() and back.is_locked
    _one_storage(back)


def test_pickle_roundtrip_mixed():
    td = _mixed()
    back = pickle.loads(pickle.dumps(td.consolidate()))
    _assert_same(back, td)
    assert back.names == ["env"] and back.is_consolidated()


@needs_non_tensor
def test_non_tensor_entries():
    td = TensorDict(
        {"a": torch.arange(3), "text": "hello", "n": {"obj": NonTensorData({"k": (1, 2)}, batch_size=[3])}}, [3]
    )
    td["stack"] = torch.stack([NonTensorData("x"), NonTensorData("y"), NonTensorData("x")])
    c = td.consolidate()
    assert c["text"] == "hello" and c["n", "obj"] == {"k": (1, 2)} and c["stack"] == ["x", "y", "x"]
    back = pickle.loads(pickle.dumps(c))
    assert back["text"] == "hello" and back["stack"] == ["x", "y", "x"] and back.is_consolidated()


def test_to_device_moves_one_storage():
    c = _mixed().consolidate()
    moved = c.to("cpu")
    assert moved.device == torch.device("cpu") and moved.is_consolidated()
    _assert_same(moved, c)
    assert moved._consolidated["storage"].data_ptr() == c._consolidated["storage"].data_ptr()  # same device: no copy


@pytest.mark.gpu
def test_to_cuda_moves_one_storage():  # pragma: no cover - needs a GPU
    c = _mixed().consolidate()
    g = c.to("cuda")
    assert g.is_consolidated() and g._consolidated["storage"].is_cuda
    _assert_same(g.cpu(), c)
    assert pickle.loads(pickle.dumps(g)).is_consolidated()


def test_share_memory():
    c = _mixed().consolidate(share_memory=True)
    assert c._consolidated["storage"].is_shared() and c.is_shared()
    _one_storage(c)


def test_filename_variant_and_from_consolidated(tmp_path):
    td = _mixed()
    path = tmp_path / "sub" / "td.bin"
    c = td.consolidate(filename=path)
    assert isinstance(c._consolidated["storage"], MemoryMappedTensor) and c._consolidated["storage"].filename == str(
        path
    )
    assert [f for f in os.listdir(path.parent)] == ["td.bin"]  # no temp file left
    _assert_same(c, td)
    c["i8"][0] = 42  # writes go to the file
    for opened in (from_consolidated(path), tdict.from_consolidated(str(path))):
        assert opened["i8"][0].item() == 42 and opened.names == ["env"]
        assert opened.is_consolidated() and opened.is_locked
        _one_storage(opened)
    blob = pickle.dumps(c)
    assert len(blob) < 4000  # the file name and the structure, not the data
    back = pickle.loads(blob)
    back["i8"][1] = -5
    assert c["i8"][1].item() == -5  # same file


@needs_non_tensor
def test_filename_refuses_non_json_payload_before_writing(tmp_path):
    class Opaque:
        pass

    td = TensorDict({"a": torch.zeros(2), "o": NonTensorData(Opaque(), batch_size=[2])}, [2])
    with pytest.raises(TypeError, match="'o'"):
        td.consolidate(filename=tmp_path / "x.bin")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("damage", ["truncate", "magic", "json", "version", "offset"])
def test_from_consolidated_detects_damage(tmp_path, damage):
    path = tmp_path / "td.bin"
    TensorDict({"a": torch.arange(4.0)}, [4]).consolidate(filename=path)
    raw = path.read_bytes()
    n = int.from_bytes(raw[-16:-8], "little")
    header = json.loads(raw[-16 - n : -16])
    if damage == "truncate":
        raw = raw[:-3]
    elif damage == "magic":
        raw = raw[:-8] + b"XXXXXXXX"
    elif damage == "json":
        raw = raw[: -16 - n] + b"\x80" * n + raw[-16:]
    else:
        if damage == "version":
            header["version"] = 7
        else:
            header["root"]["entries"][0][1]["offset"] = 8
        body = json.dumps(header).encode()
        raw = raw[: -16 - n] + body + len(body).to_bytes(8, "little") + raw[-8:]
    path.write_bytes(raw)
    with pytest.raises(MemmapLoadError, match=str(path)):
        from_consolidated(path)


def test_lazy_stack_inside():
    from tdict import lazy_stack

    a = TensorDict(obs=torch.zeros(3, 2), batch_size=[3])
    b = TensorDict(obs=torch.ones(3, 4), extra=torch.ones(3), batch_size=[3])
    td = TensorDict({"s": lazy_stack([a, b], 1), "x": torch.arange(3)}, [3])
    c = td.consolidate()
    assert c.is_consolidated() and c["s"].tensordicts[1]["extra"].tolist() == [1.0, 1.0, 1.0]
    _one_storage(c)
    back = pickle.loads(pickle.dumps(c))
    assert back.is_consolidated() and back["s"].stack_dim == 1


def test_tensorclass_consolidates():
    from tdict import TensorClass

    class Pair(TensorClass):
        x: torch.Tensor
        y: torch.Tensor

    p = Pair(x=torch.arange(3.0), y=torch.ones(3, 2, dtype=torch.int8), batch_size=[3])
    c = p.consolidate()
    assert type(c) is Pair and c.is_consolidated()
    assert c.x.untyped_storage().data_ptr() == c.y.untyped_storage().data_ptr()


def test_errors():
    with pytest.raises(ValueError, match="mutually exclusive"):
        _mixed().consolidate(filename="x.bin", share_memory=True)
    with pytest.raises(TypeError, match="dense"):
        TensorDict({"s": torch.zeros(3, 3).to_sparse()}, [3]).consolidate()


def test_spawn_child_gets_a_consolidated_td_and_writes_into_it():
    c = _mixed().consolidate(share_memory=True)
    update = TensorDict({"i64": torch.full((4,), 7), "nested": {"f32": torch.full((4, 7), -1.0)}}, [4])
    # the target (a bound method of the consolidated td) pickles the td itself: the child
    # rebuilds it from the one shared storage and writes into the views
    proc = mp.get_context("spawn").Process(target=c.update_, args=(update,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert c["i64"].tolist() == [7] * 4 and bool((c["nested", "f32"] == -1.0).all())


def test_forking_pickler_shares_the_one_storage():
    from multiprocessing.reduction import ForkingPickler

    c = _mixed().consolidate()
    back = pickle.loads(ForkingPickler.dumps(c))
    assert back.is_consolidated() and c._consolidated["storage"].is_shared()  # torch moved it to shared memory
    back["i8"][0] = 99
    assert c["i8"][0].item() == 99  # same memory


def test_consolidated_record_and_zeroed_padding():
    td = TensorDict({"a": torch.ones(3, dtype=torch.int8), "b": torch.full((3,), 2.0, dtype=torch.float64)}, [3])
    c = td.consolidate()
    storage = c._consolidated["storage"]
    assert storage.dtype == torch.uint8 and storage.numel() == 8 + 24  # "b" starts at the next 8-byte boundary
    assert storage[3:8].tolist() == [0] * 5  # alignment bytes are zeroed: equal collections, equal storages
    assert torch.equal(storage, td.consolidate()._consolidated["storage"])
    storage.zero_()  # the leaves are views of it
    assert c["a"].tolist() == [0, 0, 0] and c["b"].tolist() == [0.0, 0.0, 0.0]


def test_unlock_ends_the_consolidation():
    c = _mixed().consolidate()
    with c.unlock_():
        assert not c.is_consolidated() and getattr(c, "_consolidated", None) is None
    assert c.is_locked and not c.is_consolidated()


def test_file_variant_lives_on_cpu_and_opens_through_the_classmethod(tmp_path):
    td = TensorDict({"a": torch.arange(4.0), "n": {"b": torch.ones(4, 2)}}, [4])
    assert td.device is None
    c = td.consolidate(filename=tmp_path / "td.bin")
    assert c.device == torch.device("cpu")
    opened = TensorDict.from_consolidated(tmp_path / "td.bin")
    assert opened.device == torch.device("cpu") and opened.is_consolidated()
    assert opened["a"].tolist() == [0.0, 1.0, 2.0, 3.0] and opened["n", "b"].shape == (4, 2)


def _jagged() -> torch.Tensor:
    return torch.nested.nested_tensor_from_jagged(torch.arange(5.0), torch.tensor([0, 2, 5]))


@pytest.mark.parametrize("use_file", [False, True])
def test_nested_jagged_leaves(tmp_path, use_file):
    td = TensorDict({"j": _jagged(), "x": torch.arange(2)}, [2])
    c = td.consolidate(filename=tmp_path / "j.bin") if use_file else td.consolidate()
    assert c.is_consolidated()
    assert [t.tolist() for t in c["j"].unbind()] == [[0.0, 1.0], [2.0, 3.0, 4.0]]
    assert c["j"].offsets().tolist() == [0, 2, 5]
    c._consolidated["storage"].zero_()  # values and offsets are views of the storage
    assert c["j"].values().tolist() == [0.0] * 5 and c["j"].offsets().tolist() == [0, 0, 0]
    back = pickle.loads(pickle.dumps(td.consolidate()))
    assert back.is_consolidated() and [t.tolist() for t in back["j"].unbind()] == [[0.0, 1.0], [2.0, 3.0, 4.0]]
    if use_file:
        opened = from_consolidated(tmp_path / "j.bin")
        assert opened["j"].offsets().tolist() == [0, 0, 0] and opened["x"].tolist() == [0, 0]
