"""Misspelt or unsupported keyword arguments raise a TypeError naming them instead of being dropped;
the keywords tensordict documents for these methods are accepted and do what they say."""

from __future__ import annotations

import pytest
import torch

from tdict import LazyStackedTensorDict, NonTensorData, NonTensorStack, TensorDict, tensorclass
from tdict.nn import TensorDictParams


@tensorclass
class Pair:
    x: torch.Tensor
    y: torch.Tensor


def _td() -> TensorDict:
    return TensorDict(a=torch.arange(3.0), sub=TensorDict(b=torch.zeros(3, 2), batch_size=[3]), batch_size=[3])


def _collections() -> dict:
    return {
        "TensorDict": _td(),
        "LazyStackedTensorDict": LazyStackedTensorDict.lazy_stack([_td(), _td()]),
        "tensorclass": Pair(x=torch.zeros(3), y=torch.ones(3), batch_size=[3]),
        "TensorDictParams": TensorDictParams(TensorDict(w=torch.zeros(3)), no_convert=True),
    }


@pytest.mark.parametrize("kind", list(_collections()))
def test_set_with_a_misspelt_keyword_raises_and_writes_nothing(kind: str) -> None:
    td = _collections()[kind]
    key = "x" if kind == "tensorclass" else "a"
    before = td.get(key).clone() if kind != "TensorDictParams" else None
    with pytest.raises(TypeError, match="inpalce"):
        td.set(key, torch.full_like(td.get(key) if before is not None else torch.zeros(3), 7.0), inpalce=True)
    if before is not None:
        assert torch.equal(td.get(key), before)


@pytest.mark.parametrize("kind", ["TensorDict", "LazyStackedTensorDict", "tensorclass"])
def test_clone_takes_recurse_and_device_only(kind: str) -> None:
    td = _collections()[kind]
    with pytest.raises(TypeError, match="recures"):
        td.clone(recures=False)
    copy = td.clone(device="cpu")
    assert copy.device == torch.device("cpu") and copy.batch_size == td.batch_size
    leaf = "x" if kind == "tensorclass" else "a"

    def storage(c):  # a lazy stack's get() stacks its members: look at the first member's tensor
        return (c.tensordicts[0] if kind == "LazyStackedTensorDict" else c).get(leaf).data_ptr()

    assert torch.equal(copy.get(leaf), td.get(leaf)) and storage(copy) != storage(td)
    assert storage(td.clone(False)) == storage(td)


def test_device_moves_and_storage_calls_refuse_unknown_keywords(tmp_path) -> None:
    td = _td()
    with pytest.raises(TypeError, match="non_blockin"):
        td.cpu(non_blockin=True)
    assert td.cpu(non_blocking=False).device == torch.device("cpu")
    with pytest.raises(TypeError, match="exist_ok"):
        td.memmap(tmp_path / "a", exist_ok=True)
    with pytest.raises(TypeError, match="exist_ok"):
        td.save(tmp_path / "b", exist_ok=True)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    saved = td.memmap(tmp_path / "c", robust_key=True, share_non_tensor=False)
    assert torch.equal(saved["a"], td["a"])
    pair = Pair(x=torch.zeros(3), y=torch.ones(3), batch_size=[3])
    with pytest.raises(TypeError, match="exist_ok"):
        pair.memmap(tmp_path / "d", exist_ok=True)


def test_non_tensor_update_and_clone_keywords() -> None:
    data = NonTensorData("hello", batch_size=[2])
    with pytest.raises(TypeError, match="ignore_lok"):
        data.update(NonTensorData("bye", batch_size=[2]), ignore_lok=True)
    assert data.data == "hello"
    data.lock_()
    data.update(NonTensorData("bye", batch_size=[2]), ignore_lock=True)
    assert data.data == "bye"
    assert data.clone(device="cpu").device == torch.device("cpu")
    stack = NonTensorStack(NonTensorData("a"), NonTensorData("b"))
    with pytest.raises(TypeError, match="ignore_lok"):
        stack.update(NonTensorStack(NonTensorData("c"), NonTensorData("d")), ignore_lok=True)
    assert stack.tolist() == ["a", "b"]
    stack.update(NonTensorStack(NonTensorData("c"), NonTensorData("d")))
    assert stack.tolist() == ["c", "d"] and stack.clone(device="cpu").tolist() == ["c", "d"]


def test_reshape_and_view_take_size_as_keyword():
    td = TensorDict(a=torch.arange(12.0).view(3, 4, 1), batch_size=[3, 4])
    for out in (td.reshape(size=(4, 3)), td.view(size=[4, 3]), td.reshape(size=(-1,))):
        ref = td["a"].reshape(*out.batch_size, 1)
        assert out["a"].shape == ref.shape and torch.equal(out["a"], ref)
    assert td.reshape(size=(-1,)).batch_size == torch.Size([12])
    with pytest.raises(TypeError, match="positionally or as size="):
        td.reshape(12, size=(12,))


def test_view_dtype_with_a_new_batch_size():
    td = TensorDict(a=torch.zeros(2, 3), b=torch.ones(2, 1), batch_size=[2])
    out = td.view(torch.uint8, batch_size=[])
    assert out.batch_size == torch.Size([]) and out["a"].dtype == torch.uint8
    assert out["a"].shape == (2, 12) and out["b"].shape == (2, 4)  # float32 -> 4 bytes each
    assert out["b"].view(torch.float32).eq(1).all()


def test_to_other_takes_device_and_common_dtype():
    td = TensorDict(a=torch.zeros(2), b=torch.ones(2), batch_size=[2])
    half = TensorDict(x=torch.zeros(1, dtype=torch.half), device="cpu")
    out = td.to(other=half)
    assert out.device == torch.device("cpu") and out["a"].dtype == torch.half and out["b"].dtype == torch.half
    mixed = TensorDict(x=torch.zeros(1, dtype=torch.half), y=torch.zeros(1, dtype=torch.int64), device="cpu")
    assert td.to(other=mixed)["a"].dtype == torch.float32  # no common dtype: only the device
    assert td.to(other=torch.zeros(1, dtype=torch.float64))["b"].dtype == torch.float64


def test_memmap_return_early_gives_a_future_of_the_result(tmp_path):
    td = TensorDict(a=torch.arange(4.0), sub=TensorDict(b=torch.ones(4, 2), batch_size=[4]), batch_size=[4])
    future = td.memmap(tmp_path / "copy", return_early=True)
    out = future.result(timeout=60)
    assert out.is_memmap() and not td.is_memmap()
    assert torch.equal(out["a"], td["a"]) and torch.equal(out["sub", "b"], td["sub", "b"])
    same = td.memmap_(tmp_path / "inplace", return_early=True).result(timeout=60)
    assert same is td and td.is_memmap()
    with pytest.raises(NotImplementedError, match="return_early"):
        td.memmap_like(tmp_path / "like", return_early=True)


def test_memmap_return_early_surfaces_the_write_error(tmp_path):
    td = TensorDict(a=torch.arange(4.0), batch_size=[4])
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    future = td.memmap(blocker, return_early=True)
    with pytest.raises(Exception):
        future.result(timeout=60)


def test_to_inplace_rebinds_the_leaves_and_returns_self():
    td = TensorDict(a=torch.zeros(3), sub=TensorDict(b=torch.ones(3, 2), batch_size=[3]), batch_size=[3], names=["n"])
    out = td.to(torch.float64, inplace=True, num_threads=2, non_blocking_pin=False)
    assert out is td and td["a"].dtype == torch.float64 and td["sub", "b"].dtype == torch.float64
    assert td.names == ["n"] and td["sub", "b"].tolist() == [[1.0, 1.0]] * 3
    plain = td.to(torch.float32)
    assert plain is not td and td["a"].dtype == torch.float64  # not inplace: a new TensorDict
    td.lock_()
    with pytest.raises(RuntimeError, match="locked.*inplace=True"):
        td.to(torch.float32, inplace=True)
    assert td["a"].dtype == torch.float64
    cpu = TensorDict(a=torch.zeros(2), batch_size=[2], device="cpu").lock_()
    assert cpu.to("cpu", inplace=True) is cpu  # nothing to move: allowed on a locked TensorDict
