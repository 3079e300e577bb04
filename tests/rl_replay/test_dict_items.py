"""Buffers extended with lists of dicts (a dataset of samples), as in TorchRL 0.14.1.

Expected values were read from TorchRL 0.14.1 (``torchrl.data.ReplayBuffer`` with the same storages
and ``torch.manual_seed(0)`` before sampling) and are written here literally.
"""

from __future__ import annotations

import pytest
import torch
from rl_replay import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
)
from tdict import TensorDict

STORAGES = {"tensor": LazyTensorStorage, "memmap": LazyMemmapStorage, "list": ListStorage}


def _samples(y_as_tensor: bool = True) -> list:
    return [{"x": torch.tensor([float(i), i + 0.5]), "y": torch.tensor(i) if y_as_tensor else i} for i in range(4)]


def _plain(value):
    """Dicts of tensors as nested dicts of (dtype, shape, values), to compare with literals."""
    if isinstance(value, torch.Tensor):
        return (str(value.dtype), list(value.shape), value.tolist())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


X4 = ("torch.float32", [4, 2], [[0.0, 0.5], [1.0, 1.5], [2.0, 2.5], [3.0, 3.5]])
ALL = {"x": X4, "y": ("torch.int64", [4], [0, 1, 2, 3])}
ROW1 = {"x": ("torch.float32", [2], [1.0, 1.5]), "y": ("torch.int64", [], 1)}
SAMPLE = {"x": ("torch.float32", [3, 2], [[0.0, 0.5], [3.0, 3.5], [1.0, 1.5]]), "y": ("torch.int64", [3], [0, 3, 1])}


@pytest.mark.parametrize("kind", STORAGES)
def test_replay_buffer_list_of_dicts_as_torchrl(kind):
    rb = ReplayBuffer(storage=STORAGES[kind](10), batch_size=3)
    index = rb.extend(_samples())
    assert index.tolist() == [0, 1, 2, 3] and len(rb) == 4
    everything = rb[:]
    assert type(everything) is dict and _plain(everything) == ALL
    assert _plain(rb[1]) == ROW1
    torch.manual_seed(0)
    batch = rb.sample()
    assert type(batch) is dict and _plain(batch) == SAMPLE


@pytest.mark.parametrize("kind", ["tensor", "memmap"])
def test_python_numbers_become_tensors(kind):
    # TorchRL 0.14.1 refuses Python numbers in tensor storages; they are stored as tensors here
    rb = ReplayBuffer(storage=STORAGES[kind](10))
    rb.extend([{"x": torch.zeros(2), "y": i, "w": i + 0.5, "ok": i % 2 == 0} for i in range(3)])
    out = rb[:]
    assert _plain(out["y"]) == ("torch.int64", [3], [0, 1, 2])
    assert _plain(out["w"]) == ("torch.float32", [3], [0.5, 1.5, 2.5])
    assert _plain(out["ok"]) == ("torch.bool", [3], [True, False, True])


def test_list_storage_keeps_each_dict_and_collates():
    rb = ReplayBuffer(storage=ListStorage(10), batch_size=2)
    rb.extend([{"x": torch.tensor([float(i)]), "y": i, "text": f"s{i}"} for i in range(3)])
    assert rb.storage.get(1) == {"x": torch.tensor([1.0]), "y": 1, "text": "s1"}
    assert _plain(rb[:]) == {
        "x": ("torch.float32", [3, 1], [[0.0], [1.0], [2.0]]),
        "y": ("torch.int64", [3], [0, 1, 2]),
        "text": ["s0", "s1", "s2"],
    }


@pytest.mark.parametrize("kind", STORAGES)
def test_nested_dicts(kind):
    rb = ReplayBuffer(storage=STORAGES[kind](10))
    rb.extend([{"x": torch.tensor([float(i)]), "sub": {"z": torch.tensor(i)}} for i in range(4)])
    assert _plain(rb[:]) == {
        "x": ("torch.float32", [4, 1], [[0.0], [1.0], [2.0], [3.0]]),
        "sub": {"z": ("torch.int64", [4], [0, 1, 2, 3])},
    }
    assert _plain(rb[1]) == {"x": ("torch.float32", [1], [1.0]), "sub": {"z": ("torch.int64", [], 1)}}


@pytest.mark.parametrize("kind", ["tensor", "memmap"])
def test_add_one_dict_then_extend(kind):
    rb = ReplayBuffer(storage=STORAGES[kind](10))
    assert rb.add({"x": torch.zeros(2), "y": torch.tensor(1)}) == 0
    assert rb.extend([{"x": torch.ones(2), "y": torch.tensor(2)}]).tolist() == [1]
    assert _plain(rb[:]) == {
        "x": ("torch.float32", [2, 2], [[0.0, 0.0], [1.0, 1.0]]),
        "y": ("torch.int64", [2], [1, 2]),
    }


def test_extend_with_a_dict_of_batches():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    assert rb.extend({"x": torch.zeros(3, 2), "y": torch.arange(3)}).tolist() == [0, 1, 2]
    assert _plain(rb[:]) == {"x": ("torch.float32", [3, 2], [[0.0, 0.0]] * 3), "y": ("torch.int64", [3], [0, 1, 2])}
    with pytest.raises(ValueError, match=r"a dict given to extend is a batch .*got a float32 tensor of shape \[\]"):
        rb.extend({"x": torch.tensor(1.0)})
    assert len(rb) == 3
    with pytest.raises(TypeError, match="ListStorage takes a list of items, got a dict"):
        ReplayBuffer(storage=ListStorage(10)).extend({"x": torch.zeros(3)})


def test_tensordicts_in_give_tensordicts_out():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(TensorDict(x=torch.zeros(2, 2), y=torch.arange(2), batch_size=[2]))
    rb.extend(_samples()[:1])
    assert isinstance(rb[:], TensorDict) and rb[:]["y"].tolist() == [0, 1, 0]
    rb.empty()  # the next first write decides again
    rb.extend(_samples())
    assert type(rb[:]) is dict


@pytest.mark.parametrize("kind", STORAGES)
def test_tensordict_replay_buffer_list_of_dicts(kind):
    rb = TensorDictReplayBuffer(storage=STORAGES[kind](10), batch_size=3)
    assert rb.extend(_samples(y_as_tensor=False)).tolist() == [0, 1, 2, 3]
    everything = rb[:]
    assert isinstance(everything, TensorDict) and everything.batch_size == torch.Size([4])
    assert everything["x"].tolist() == X4[2] and everything["y"].tolist() == [0, 1, 2, 3]
    assert everything["index"].tolist() == [0, 1, 2, 3]
    torch.manual_seed(0)
    batch = rb.sample()
    assert batch["y"].tolist() == [0, 3, 1] and batch["index"].tolist() == [0, 3, 1]
    assert rb.add({"x": torch.tensor([9.0, 9.5]), "y": 9}) == 4
    assert rb[4]["x"].tolist() == [9.0, 9.5]


# ---------------------------------------------------------------------------------- mismatched dicts
@pytest.mark.parametrize("kind", STORAGES)
@pytest.mark.parametrize("buffer", [ReplayBuffer, TensorDictReplayBuffer])
@pytest.mark.parametrize(
    "bad, error, match",
    [
        ({"x": torch.zeros(2)}, KeyError, r"item 2 has other keys than item 0: missing \['y'\], unexpected \[\]"),
        ({"x": torch.zeros(2), "y": torch.tensor(0), "z": 1}, KeyError, r"item 2 .*missing \[\], unexpected \['z'\]"),
        (
            {"x": torch.zeros(3), "y": torch.tensor(0)},
            ValueError,
            r"key 'x' of item 2 is a float32 tensor of shape \[3\], expected a float32 tensor of shape \[2\] as in item 0",
        ),
        (
            {"x": torch.zeros(2, dtype=torch.float64), "y": torch.tensor(0)},
            ValueError,
            r"key 'x' of item 2 is a float64 tensor",
        ),
        (
            {"x": torch.zeros(2), "y": 0},
            ValueError,
            r"key 'y' of item 2 is an int, expected an int64 tensor of shape \[\]",
        ),
        ("not a dict", TypeError, r"item 2 is a str, expected a dict like item 0"),
    ],
)
def test_mismatched_dicts_name_the_key_and_the_index(kind, buffer, bad, error, match):
    rb = buffer(storage=STORAGES[kind](10))
    rb.extend(_samples()[:1])
    before = len(rb)
    items = _samples()[:2] + [bad]
    with pytest.raises(error, match=match):
        rb.extend(items)
    assert len(rb) == before == 1 and rb.writer.state_dict()["_cursor"] == 1


def test_nested_mismatch_names_the_nested_key():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    with pytest.raises(ValueError, match=r"key \('sub', 'z'\) of item 1 is a float32 tensor of shape \[2\]"):
        rb.extend([{"sub": {"z": torch.zeros(1)}}, {"sub": {"z": torch.zeros(2)}}])
    assert len(rb) == 0 and rb.storage._storage is None


@pytest.mark.parametrize("kind", ["tensor", "memmap"])
def test_objects_refused_by_tensor_storages(kind):
    rb = ReplayBuffer(storage=STORAGES[kind](10))
    with pytest.raises(TypeError, match="key 'text' of item 0 is a str; a tensor storage holds tensors and numbers"):
        rb.extend([{"x": torch.zeros(1), "text": "a"}])
    assert len(rb) == 0


def test_checkpoint_keeps_dict_items(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(10), generator=torch.Generator().manual_seed(0))
    rb.extend(_samples())
    rb.dumps(tmp_path / "ck")
    restored = ReplayBuffer(storage=LazyTensorStorage(10), generator=torch.Generator())
    restored.loads(tmp_path / "ck")
    assert type(restored[:]) is dict and _plain(restored[:]) == ALL
