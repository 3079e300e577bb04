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
