"""Device paths of the container, on a real CUDA device (skipped without one)."""

import pytest
import torch

from tdict import TensorDict, lazy_stack

pytestmark = pytest.mark.gpu


def make(device=None):
    return TensorDict(
        {"obs": torch.arange(24.0).view(4, 3, 2), "next": {"reward": torch.arange(12.0).view(4, 3)}, "tag": "cartpole"},
        batch_size=[4, 3],
        device=device,
    )


def test_to_cuda_and_back_keeps_values_and_structure():
    td = make()
    gpu = td.to("cuda")
    assert gpu.device == torch.device("cuda", torch.cuda.current_device())
    assert gpu["obs"].is_cuda and gpu["next", "reward"].is_cuda and gpu["tag"] == "cartpole"
    back = gpu.cpu()
    assert torch.equal(back["obs"], td["obs"]) and back.device == torch.device("cpu")
    assert torch.equal(td.cuda()["next", "reward"].cpu(), td["next", "reward"])


def test_device_argument_moves_leaves_on_write():
    td = TensorDict({"a": torch.zeros(3)}, [3], device="cuda")
    td["b"] = torch.ones(3)
    td["c"] = {"d": torch.ones(3, 2)}
    assert td["b"].is_cuda and td["c", "d"].is_cuda and td["c"].device == td.device


def test_cuda_indices_and_masks_with_non_tensor_entries():
    td = make("cuda")
    mask = torch.tensor([True, False, True, False], device="cuda")
    sub = td[mask]
    assert sub.batch_size == torch.Size([2, 3]) and torch.equal(sub["obs"].cpu(), make()["obs"][mask.cpu()])
    idx = torch.tensor([3, 0], device="cuda")
    assert torch.equal(td[idx]["next", "reward"].cpu(), make()["next", "reward"][[3, 0]])
    td[idx] = td[idx] * 0
    assert torch.all(td["obs"][[0, 3]] == 0)


def test_stack_cat_apply_arithmetic_on_cuda():
    tds = [make("cuda").exclude("tag") for _ in range(3)]
    st = torch.stack(tds, 1)
    assert st.batch_size == torch.Size([4, 3, 3]) and st["obs"].is_cuda
    assert torch.cat(tds, 0).batch_size == torch.Size([12, 3])
    out = (tds[0] + tds[1]).apply(lambda x: x * 2)
    assert torch.equal(out["obs"].cpu(), make()["obs"] * 4)
    assert torch.equal(
        (tds[0] * torch.arange(3.0, device="cuda"))["obs"].cpu(), make()["obs"] * torch.arange(3.0).view(3, 1)
    )
    lz = lazy_stack([tds[0], tds[1].exclude("obs")], 0)
    assert lz["next", "reward"].is_cuda


def test_consolidated_move_and_pinned_memory():
    td = make().exclude("tag")
    c = td.consolidate(pin_memory=True)
    assert c["obs"].is_pinned()
    g = c.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(g["next", "reward"].cpu(), td["next", "reward"])
    assert td.pin_memory()["obs"].is_pinned()


def test_memmap_loaded_to_cuda(tmp_path):
    td = make()
    td.memmap(tmp_path)
    loaded = TensorDict.load_memmap(tmp_path, device="cuda")
    assert loaded["obs"].is_cuda and torch.equal(loaded["obs"].cpu(), td["obs"]) and loaded["tag"] == "cartpole"


def test_cuda_index_writes_and_reads_non_tensor_stacks():
    td = TensorDict({"x": torch.zeros(4), "s": "a"}, [4], device="cuda")
    idx = torch.tensor([1, 2], device="cuda")
    td[idx] = TensorDict({"x": torch.ones(2), "s": "b"}, [2], device="cuda")
    assert td["s"] == ["a", "b", "b", "a"] and td["x"].tolist() == [0.0, 1.0, 1.0, 0.0]
    mask = torch.tensor([True, False, True, True], device="cuda")
    assert td[mask]["s"] == ["a", "b", "a"]
