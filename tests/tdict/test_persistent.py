"""PersistentTensorDict: an HDF5-backed TensorDict, checked against in-memory TensorDicts and h5py."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
import torch

h5py = pytest.importorskip("h5py")

from tdict import MemoryMappedTensor, NonTensorData, PersistentTensorDict, TensorDict, stack  # noqa: E402


def _source() -> TensorDict:
    torch.manual_seed(0)
    return TensorDict(
        {
            "a": torch.randn(4, 3, 5),
            "b": torch.randint(10, (4, 3), dtype=torch.int64),
            "mask": torch.rand(4, 3) > 0.5,
            "nested": TensorDict({"c": torch.randn(4, 3, 2, 7), "d": torch.arange(24.0).view(4, 3, 2)}, [4, 3, 2]),
        },
        [4, 3],
    )


@pytest.fixture
def pair(tmp_path):
    td = _source()
    ptd = td.to_h5(tmp_path / "data.h5")
    yield td, ptd
    ptd.close()


def _assert_same(ptd, td) -> None:
    assert ptd.batch_size == td.batch_size
    assert set(ptd.keys(True, True)) == set(td.keys(True, True))
    for key in td.keys(True, True):
        got, want = ptd.get(key), td.get(key)
        assert got.dtype == want.dtype, key
        assert got.shape == want.shape, key
        assert torch.equal(got, want), key


# --------------------------------------------------------------------------------------------- #
# writing a file, reading it back
# --------------------------------------------------------------------------------------------- #


def test_to_h5_round_trip_matches_memory_and_h5py(pair, tmp_path):
    td, ptd = pair
    assert isinstance(ptd, PersistentTensorDict)
    _assert_same(ptd, td)
    assert ptd["nested"].batch_size == torch.Size([4, 3, 2])
    assert list(ptd.keys()) == list(td.keys())  # insertion order kept
    with h5py.File(tmp_path / "data.h5", "r") as f:
        assert torch.equal(torch.from_numpy(f["a"][()]), td["a"])
        assert torch.equal(torch.from_numpy(f["nested/d"][()]), td["nested", "d"])
        assert f["mask"].dtype == bool


def test_from_h5_uses_stored_batch_sizes_and_names(tmp_path):
    td = TensorDict({"a": torch.zeros(3, 4), "n": TensorDict({"x": torch.zeros(3, 4, 5)}, [3, 4, 5])}, [3])
    td.names = ["t"]
    td.to_h5(tmp_path / "f.h5").close()
    back = TensorDict.from_h5(tmp_path / "f.h5")
    assert back.batch_size == torch.Size([3])  # not [3, 4]: the stored batch size wins
    assert back["n"].batch_size == torch.Size([3, 4, 5])
    assert back.names == ["t"]
    assert back["n"].names == ["t", None, None]
    back.close()


def test_from_h5_infers_batch_sizes_of_foreign_files(tmp_path):
    with h5py.File(tmp_path / "raw.h5", "w") as f:
        f["obs"] = torch.arange(24.0).view(6, 4).numpy()
        f["rew"] = torch.arange(6.0).numpy()
        g = f.create_group("info")
        g["steps"] = torch.arange(6 * 3).view(6, 3).numpy()
    ptd = PersistentTensorDict.from_h5(tmp_path / "raw.h5")
    assert ptd.batch_size == torch.Size([6])
    assert ptd["info"].batch_size == torch.Size([6, 3])
    assert torch.equal(ptd["obs"], torch.arange(24.0).view(6, 4))
    ptd.close()
    ptd = PersistentTensorDict.from_h5(tmp_path / "raw.h5", batch_size=[])
    assert ptd.batch_size == torch.Size([])
    ptd.close()


def test_constructor_checks_the_batch_size(tmp_path):
    with h5py.File(tmp_path / "raw.h5", "w") as f:
        f["obs"] = torch.zeros(6, 4).numpy()
    with pytest.raises(ValueError, match=r"'obs'.*\[6, 4\].*\[5\]"):
        PersistentTensorDict(filename=tmp_path / "raw.h5", batch_size=[5])
    with pytest.raises(ValueError, match="exactly one of filename= and group="):
        PersistentTensorDict(batch_size=[6])
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['compresion'\\]"):
        PersistentTensorDict(filename=tmp_path / "raw.h5", compresion="gzip")
    ptd = PersistentTensorDict(filename=tmp_path / "raw.h5", batch_size=[6, 4])
    assert ptd["obs"].shape == torch.Size([6, 4])
    ptd.close()


def test_from_dict_of_a_dict_sizes_the_batch(tmp_path):
    ptd = PersistentTensorDict.from_dict({"a": torch.zeros(2, 3), "b": {"c": torch.ones(2, 3, 4)}}, tmp_path / "d.h5")
    assert ptd.batch_size == torch.Size([2, 3])
    assert ptd["b"].batch_size == torch.Size([2, 3, 4])
    ptd.close()
    ptd = PersistentTensorDict.from_dict({"a": torch.zeros(2, 3)}, tmp_path / "e.h5", batch_size=[2])
    assert ptd.batch_size == torch.Size([2])
    ptd.close()


def test_create_dataset_kwargs_reach_nested_datasets(tmp_path):
    td = TensorDict({"a": torch.zeros(16, 3), "b": {"c": {"d": torch.zeros(16, 2)}}, "s": torch.zeros(16)}, [16])
    ptd = td.to_h5(tmp_path / "z.h5", compression="gzip", compression_opts=4)
    ptd.set("scalar_batchless", torch.zeros(16))
    ptd.close()
    with h5py.File(tmp_path / "z.h5", "r") as f:
        for key in ("a", "b/c/d", "s", "scalar_batchless"):
            assert f[key].compression == "gzip", key
            assert f[key].compression_opts == 4, key


def test_bfloat16_and_scalar_entries(tmp_path):
    td = TensorDict({"w": torch.randn(3, 2).bfloat16(), "t": torch.tensor(2.5)}, [])
    ptd = td.to_h5(tmp_path / "bf.h5")
    assert ptd["w"].dtype == torch.bfloat16
    assert torch.equal(ptd["w"], td["w"])
    assert torch.equal(ptd["t"], torch.tensor(2.5))
    ptd.set_("w", torch.ones(3, 2))
    assert ptd["w"].dtype == torch.bfloat16 and (ptd["w"] == 1).all()
    ptd.close()


def test_from_dict_is_atomic(tmp_path):
    """A write that fails half-way leaves the previous file and no temporary file behind."""
    path = tmp_path / "data.h5"
    TensorDict(a=torch.ones(2), batch_size=[2]).to_h5(path).close()
    bad = TensorDict({"a": torch.zeros(2), "z": NonTensorData(object(), batch_size=[2])}, [2])
    with pytest.raises(TypeError, match="'z'"):
        bad.to_h5(path)
    assert os.listdir(tmp_path) == ["data.h5"]
    with h5py.File(path, "r") as f:
        assert list(f.keys()) == ["a"] and (f["a"][()] == 1).all()


# --------------------------------------------------------------------------------------------- #
# indexing: views over the file
# --------------------------------------------------------------------------------------------- #

INDICES = [
    0,
    -1,
    slice(1, 3),
    slice(None, None, 2),
    (slice(None), 1),
    (Ellipsis, 2),
    (1, slice(0, 3, 2)),
    torch.tensor([3, 0, 0, 2]),
    [1, 3],
    torch.tensor([[0, 1], [3, 2]]),
    (torch.tensor([0, 3]), torch.tensor([2, 1])),
    None,
    (slice(1, 4), None),
]


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_index_reads_like_memory(pair, index):
    td, ptd = pair
    view = ptd[index]
    assert isinstance(view, PersistentTensorDict)
    _assert_same(view, td[index])
    assert view["nested"].batch_size == td[index]["nested"].batch_size


def test_bool_mask_index(pair):
    td, ptd = pair
    mask = td["mask"]
    _assert_same(ptd[mask], td[mask])
    row_mask = torch.tensor([True, False, False, True])
    _assert_same(ptd[row_mask], td[row_mask])


@pytest.mark.parametrize(
    "first,second",
    [
        (slice(1, 4), 1),
        (slice(None, None, 2), slice(1, None)),
        (1, slice(None, None, 2)),
        (torch.tensor([3, 1, 2]), slice(0, 2)),
        (slice(0, 3), torch.tensor([2, 0])),
        (torch.tensor([2, 0, 3]), (torch.tensor([1, 1]), 0)),
    ],
    ids=repr,
)
def test_index_of_a_view_composes(pair, first, second):
    td, ptd = pair
    _assert_same(ptd[first][second], td[first][second])
    _assert_same(ptd["nested"][first][second], td["nested"][first][second])


def test_index_errors(pair):
    _, ptd = pair
    with pytest.raises(IndexError):
        ptd[4]
    with pytest.raises(IndexError):
        ptd[0, 0, 0]


def test_iteration_and_len(pair):
    td, ptd = pair
    assert len(ptd) == 4
    rows = list(ptd)
    assert len(rows) == 4
    _assert_same(rows[2], td[2])


# --------------------------------------------------------------------------------------------- #
# writing
# --------------------------------------------------------------------------------------------- #


def test_set_new_and_replaced_entries(pair, tmp_path):
    td, ptd = pair
    ptd.set("new", torch.ones(4, 3, 6))
    ptd["nested", "e"] = torch.full((4, 3, 2), 7)
    ptd.set("a", torch.zeros(4, 3, 5))  # same shape and dtype: written in place
    ptd.set("b", torch.zeros(4, 3, 9, dtype=torch.float64))  # a new dataset replaces it
    with h5py.File(tmp_path / "data.h5", "r") as f:
        assert f["new"].shape == (4, 3, 6)
        assert (f["nested/e"][()] == 7).all()
        assert (f["a"][()] == 0).all()
        assert f["b"].dtype == "float64" and f["b"].shape == (4, 3, 9)
    assert ptd["b"].dtype == torch.float64


def test_set_errors_name_the_key_and_change_nothing(pair):
    td, ptd = pair
    with pytest.raises(RuntimeError, match="'bad'.*does not start with the batch size"):
        ptd.set("bad", torch.zeros(3, 3))
    with pytest.raises(RuntimeError, match="requires_grad=True"):
        ptd.set("grad", torch.zeros(4, 3, requires_grad=True))
    with pytest.raises(KeyError, match="without '/'"):
        ptd.set("a/b", torch.zeros(4, 3))
    with pytest.raises(TypeError, match="'obj'.*cannot store a object"):
        ptd.set("obj", object())
    assert set(ptd.keys()) == set(td.keys())


def test_set_inplace_requires_the_key(pair):
    td, ptd = pair
    with pytest.raises(KeyError, match="nope"):
        ptd.set_("nope", torch.zeros(4, 3))
    ptd.set_("a", torch.ones(5))  # broadcast into the entry
    assert (ptd["a"] == 1).all()
    with pytest.raises(RuntimeError, match="in-place write of shape"):
        ptd.set_("a", torch.ones(2, 5))


def test_update_merges_and_checks_everything_first(pair):
    td, ptd = pair
    before = ptd.to_tensordict()
    bad = TensorDict(
        {"a": torch.ones(4, 3, 5), "nested": {"c": torch.ones(4, 3, 2, 7), "z": torch.ones(4, 3, 2, 9)}}, [4, 3]
    )
    bad.set("g", torch.ones(4, 3, requires_grad=True))
    with pytest.raises(RuntimeError, match="'g'"):
        ptd.update(bad)
    _assert_same(ptd, before)  # nothing written
    bad.del_("g")
    ptd.update(bad)
    assert (ptd["a"] == 1).all() and (ptd["nested", "c"] == 1).all()
    assert ptd["nested", "z"].shape == torch.Size([4, 3, 2, 9])
    assert torch.equal(ptd["nested", "d"], before["nested", "d"])  # merged, not replaced


def test_update_with_nested_dict_keys(pair):
    td, ptd = pair
    ptd.update({"x": {"y": torch.ones(4, 3)}, ("x", "z"): torch.full((4, 3), 2.0), ("q", "r"): torch.zeros(4, 3, 2)})
    assert torch.equal(ptd["x", "y"], torch.ones(4, 3))
    assert torch.equal(ptd["x", "z"], torch.full((4, 3), 2.0))
    assert ptd["q", "r"].shape == torch.Size([4, 3, 2])


def test_update_inplace_and_update_(pair):
    td, ptd = pair
    ptd.update_({"b": torch.tensor(5), "nested": {"d": torch.zeros(2)}})
    assert (ptd["b"] == 5).all() and (ptd["nested", "d"] == 0).all()
    with pytest.raises(KeyError, match="missing"):
        ptd.update_({"missing": torch.zeros(4, 3)})
    ptd.update({"a": torch.full((4, 3, 5), 2.0)}, inplace=True)
    assert (ptd["a"] == 2).all()


@pytest.mark.parametrize("index", [1, slice(0, 4, 2), torch.tensor([2, 0]), (Ellipsis, 1)], ids=repr)
def test_setitem_at_index_writes_the_file(pair, index):
    td, ptd = pair
    value = td[index].apply(lambda x: torch.full_like(x, 3))
    ptd[index] = value
    td[index] = value
    _assert_same(ptd, td)


def test_setitem_number_and_mask(pair):
    td, ptd = pair
    mask = td["mask"].clone()  # not the entry itself, which the write changes
    ptd[mask] = 0
    td[mask] = 0
    _assert_same(ptd, td)


def test_setitem_dict(pair):
    td, ptd = pair
    ptd[:, :2] = td[:, :2].apply(torch.zeros_like).to_dict()
    assert (ptd[:, :2].to_tensordict() == 0).all()
    assert torch.equal(ptd[:, 2]["a"], td[:, 2]["a"])


def test_view_writes_reach_the_file(pair):
    td, ptd = pair
    view = ptd[1:3]
    view["a"] = torch.zeros(2, 3, 5)
    view["nested", "d"] = torch.ones(2, 3, 2)
    view.set("fresh", torch.ones(2, 3))  # a new key through a view: zeros elsewhere
    td[1:3]["a"].zero_()
    td[1:3]["nested", "d"].fill_(1)
    _assert_same(ptd.to_tensordict().exclude("fresh"), td)
    assert torch.equal(ptd["fresh"], torch.tensor([[0.0] * 3, [1.0] * 3, [1.0] * 3, [0.0] * 3]))
    rows = ptd[torch.tensor([3, 0])]
    rows.set_("b", torch.full((2, 3), -1))
    assert (ptd["b"][[0, 3]] == -1).all()


def test_inplace_math_is_written_back(pair):
    td, ptd = pair
    del td["mask"], ptd["mask"]  # bool entries refuse arithmetic
    ptd.add_(1)
    td.add_(1)
    ptd.apply_(lambda x: x * 2)
    td.apply_(lambda x: x * 2)
    ptd[0].mul_(0)
    td[0].mul_(0)
    _assert_same(ptd, td)
    ptd.zero_()
    assert all((v == 0).all() for v in ptd.values(True, True))
    ptd.fill_("nested", 4)
    assert (ptd["nested", "c"] == 4).all() and (ptd["a"] == 0).all()


def test_delete_and_rename(pair, tmp_path):
    td, ptd = pair
    del ptd["b"]
    ptd.rename_key_("a", ("nested", "moved"))
    ptd.rename_key_(("nested", "c"), "c")
    assert "b" not in ptd and "a" not in ptd
    assert torch.equal(ptd["nested", "moved"], td["a"])
    assert torch.equal(ptd["c"], td["nested", "c"])
    with pytest.raises(KeyError, match="already present"):
        ptd.rename_key_("c", "mask", safe=True)
    with h5py.File(tmp_path / "data.h5", "r") as f:
        assert "nested/moved" in f and "b" not in f


def test_lock(pair):
    td, ptd = pair
    ptd.lock_()
    assert ptd.is_locked and ptd["nested"].is_locked and ptd[0].is_locked
    with pytest.raises(RuntimeError, match="locked"):
        ptd.set("new", torch.zeros(4, 3))
    with pytest.raises(RuntimeError, match="locked"):
        ptd.set("a", torch.zeros(4, 3, 5))
    with pytest.raises(RuntimeError, match="locked"):
        del ptd["a"]
    ptd.set_("a", torch.zeros(4, 3, 5))  # in place is fine
    assert (ptd["a"] == 0).all()
    with ptd.unlock_():
        ptd.set("new", torch.zeros(4, 3))
    assert ptd.is_locked and "new" in ptd


# --------------------------------------------------------------------------------------------- #
# non-tensor data
# --------------------------------------------------------------------------------------------- #


def test_non_tensor_entries(tmp_path):
    td = TensorDict({"x": torch.zeros(5)}, [5])
    td.set("s", NonTensorData("a string!", batch_size=[5]))
    ptd = td.to_h5(tmp_path / "nt.h5")
    ptd.set("n", NonTensorData(3, batch_size=[5]))
    ptd.set("cfg", NonTensorData({"lr": 0.1, "layers": [2, 3]}, batch_size=[5]))
    ptd["text"] = "plain"
    assert ptd["s"] == b"a string!"  # h5py reads strings as bytes
    assert ptd["n"] == 3
    assert ptd["cfg"] == {"lr": 0.1, "layers": [2, 3]}
    assert ptd.get("s").batch_size == torch.Size([5])
    assert ptd[1:3].get("s").batch_size == torch.Size([2])
    assert set(ptd.keys()) == {"x", "s", "n", "cfg", "text"}
    assert set(ptd.keys(leaves_only=True)) == {"x"}
    dense = ptd.to_tensordict()
    assert dense["text"] == b"plain"
    with pytest.raises(RuntimeError, match="set_non_tensor is not compatible"):
        ptd.set_non_tensor("y", "no")
    ptd.close()


# --------------------------------------------------------------------------------------------- #
# copies, devices, conversions
# --------------------------------------------------------------------------------------------- #


def test_clone_variants(pair, tmp_path):
    td, ptd = pair
    dense = ptd.clone()
    assert type(dense) is TensorDict
    _assert_same(dense, td)
    dense["a"].zero_()
    assert torch.equal(ptd["a"], td["a"])  # independent of the file
    same_file = ptd.clone(recurse=False)
    assert isinstance(same_file, PersistentTensorDict) and same_file.filename == ptd.filename
    assert same_file["nested"].batch_size == torch.Size([4, 3, 2])
    copy = ptd[1:].clone(newfile=tmp_path / "copy.h5")
    assert isinstance(copy, PersistentTensorDict) and copy.filename.endswith("copy.h5")
    _assert_same(copy, td[1:])
    copy.set_("a", torch.zeros(3, 3, 5))
    assert torch.equal(ptd["a"], td["a"])
    copy.close()


def test_to_device_and_dtype(pair):
    td, ptd = pair
    moved = ptd.to("cpu")
    assert isinstance(moved, PersistentTensorDict) and moved.device == torch.device("cpu")
    assert moved["nested"].device == torch.device("cpu")
    assert ptd.device is None
    cast = ptd.to(torch.float64)
    assert type(cast) is TensorDict and cast["a"].dtype == torch.float64
    with pytest.raises(TypeError, match="inplace=True"):
        ptd.to("cpu", inplace=True)


def test_to_tensordict_and_ops_return_memory(pair):
    td, ptd = pair
    dense = ptd.to_tensordict()
    assert type(dense) is TensorDict and type(dense["nested"]) is TensorDict
    _assert_same(dense, td)
    assert (ptd == td).all()
    assert torch.allclose((ptd + 1)["a"], td["a"] + 1)
    assert torch.equal(ptd.reshape(-1)["b"], td.reshape(-1)["b"])
    assert torch.equal(stack([ptd, ptd], 0)["a"], stack([td, td], 0)["a"])
    assert torch.allclose(ptd.sum(dim=1)["a"], td.sum(dim=1)["a"])


def test_memmap_export(pair, tmp_path):
    td, ptd = pair
    out = ptd.memmap(tmp_path / "mm")
    assert type(out) is TensorDict and isinstance(out["a"], MemoryMappedTensor)
    _assert_same(out, td)
    back = TensorDict.load_memmap(tmp_path / "mm")
    _assert_same(back, td)
    with pytest.raises(RuntimeError, match="Cannot build a memmap TensorDict in-place"):
        ptd.memmap_(tmp_path / "mm2")


def test_unsupported_operations_raise(pair):
    _, ptd = pair
    with pytest.raises(NotImplementedError, match="Cannot call select"):
        ptd.select("a")
    with pytest.raises(NotImplementedError, match="Cannot call exclude"):
        ptd.exclude("a")
    with pytest.raises(RuntimeError, match="Cannot call `view`"):
        ptd.view(-1)
    for op in (lambda: ptd.permute(1, 0), lambda: ptd.unsqueeze(0), lambda: ptd.transpose(0, 1)):
        with pytest.raises(RuntimeError, match="Make it dense"):
            op()
    with pytest.raises(ValueError, match="flatten_keys in_place"):
        ptd.flatten_keys(inplace=True)
    with pytest.raises(RuntimeError, match="Cannot pin memory"):
        ptd.pin_memory()


def test_flatten_keys_context_writes_back(pair):
    td, ptd = pair
    with ptd.flatten_keys(".") as flat:
        flat["nested.d"] = torch.full((4, 3, 2), 9.0)
    assert (ptd["nested", "d"] == 9).all()


def test_batch_size_and_names(pair):
    td, ptd = pair
    ptd.batch_size = [4]
    assert ptd.batch_size == torch.Size([4]) and ptd["nested"].batch_size == torch.Size([4, 3, 2])
    with pytest.raises(RuntimeError, match="the Tensor a has shape"):
        ptd.batch_size = [5]
    assert ptd.batch_size == torch.Size([4])
    ptd.batch_size = [4, 3]
    ptd.names = ["x", "y"]
    assert ptd["nested"].names == ["x", "y", None]
    assert ptd[0].names == ["y"]
    assert ptd.rename(y="z").names == ["x", "z"] and ptd.names == ["x", "y"]
    with pytest.raises(RuntimeError, match="view"):
        ptd[0].batch_size = [3]
    ptd.auto_batch_size_()
    assert ptd.batch_size == torch.Size([4, 3])


# --------------------------------------------------------------------------------------------- #
# files, processes, optional dependency
# --------------------------------------------------------------------------------------------- #


def test_from_any_of_an_open_file(pair):
    td, ptd = pair
    out = TensorDict.from_any({"data": ptd.file})
    assert isinstance(out["data"], PersistentTensorDict)
    assert out["data"].batch_size == torch.Size([4, 3])  # inferred from the datasets
    assert torch.equal(out["data", "nested", "c"], td["nested", "c"])


def test_tensorclass_over_a_file(tmp_path):
    from tdict import tensorclass

    @tensorclass
    class Obs:
        x: torch.Tensor
        y: torch.Tensor

    ptd = TensorDict(x=torch.arange(6.0).view(3, 2), y=torch.zeros(3), batch_size=[3]).to_h5(tmp_path / "tc.h5")
    obs = Obs.from_tensordict(ptd)
    row = obs[1]
    assert isinstance(row, Obs) and torch.equal(row.x, torch.tensor([2.0, 3.0]))
    obs[0] = Obs(x=torch.ones(2), y=torch.ones(()), batch_size=[])
    assert torch.equal(ptd["x"][0], torch.ones(2))
    ptd.close()


def test_pickle_reopens_the_file(tmp_path):
    td = _source()
    td.to_h5(tmp_path / "p.h5").close()
    ptd = PersistentTensorDict.from_h5(tmp_path / "p.h5")
    view = pickle.loads(pickle.dumps(ptd[torch.tensor([2, 0])]))
    assert isinstance(view, PersistentTensorDict)
    _assert_same(view, td[torch.tensor([2, 0])])
    nested = pickle.loads(pickle.dumps(ptd["nested"]))
    assert nested.batch_size == torch.Size([4, 3, 2])
    _assert_same(nested, td["nested"])


def test_close(pair):
    _, ptd = pair
    sub = ptd["nested"]
    ptd.close()
    assert not ptd.file.id.valid
    with pytest.raises(Exception):
        sub["c"]


def test_repr_reads_no_data(pair, monkeypatch):
    _, ptd = pair
    from tdict._persistent import h5 as _h5

    def no_reads(*args, **kwargs):
        raise AssertionError("repr read a dataset")

    monkeypatch.setattr(_h5, "decode", no_reads)
    text = repr(ptd[1:])
    assert "PersistentTensorDict(" in text and "shape=torch.Size([3, 3, 5])" in text
    assert set(ptd.keys(True, True)) == {"a", "b", "mask", ("nested", "c"), ("nested", "d")}
    assert ("nested", "c") in ptd and ("nested", "zz") not in ptd and "nested" not in ptd.keys(leaves_only=True)


def test_import_without_h5py(tmp_path):
    code = (
        "import sys; sys.modules['h5py'] = None\n"
        "import tdict\n"
        "try:\n"
        "    tdict.PersistentTensorDict.from_h5('x.h5')\n"
        "except ImportError as err:\n"
        "    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert "pip install rl-tdict[h5]" in out.stdout
