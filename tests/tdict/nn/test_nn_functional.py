"""TensorDict.from_module / from_modules / to_module against torch.func.functional_call."""

import pytest
import torch
from torch import nn

from tdict import TensorDict
from tdict.nn import TensorDictParams


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.BatchNorm1d(4), nn.Linear(4, 2)).eval()


def test_from_module_mirrors_the_module_tree():
    m = _net()
    params = TensorDict.from_module(m)
    assert params.batch_size == torch.Size([])
    assert params.is_locked
    keys = set(params.keys(include_nested=True, leaves_only=True))
    assert keys == {tuple(name.split(".")) for name, _ in m.state_dict().items()}
    assert params["0", "weight"] is m[0].weight  # the module's own tensors, no copy
    assert params["2", "running_mean"] is m[2].running_mean
    assert "1" not in params.keys()  # ReLU holds no tensor
    assert not TensorDict.from_module(m, lock=False).is_locked


def test_from_module_use_state_dict_and_as_module():
    m = _net()
    sd = TensorDict.from_module(m, use_state_dict=True)
    assert set(sd.flatten_keys(".").keys()) == set(m.state_dict().keys())
    mod = TensorDict.from_module(m, as_module=True)
    assert isinstance(mod, TensorDictParams)
    assert [n for n, _ in mod.named_parameters()] == [n for n, _ in m.named_parameters()]
    assert [n for n, _ in mod.named_buffers()] == [n for n, _ in m.named_buffers()]


def test_from_modules_stacks_along_dim0():
    mods = [nn.Linear(3, 2) for _ in range(4)]
    params = TensorDict.from_modules(*mods)
    assert params.batch_size == torch.Size([4])
    assert isinstance(params["weight"], nn.Parameter) and params["weight"].is_leaf
    for i, m in enumerate(mods):
        torch.testing.assert_close(params["weight"][i], m.weight.detach())
        torch.testing.assert_close(params["bias"][i], m.bias.detach())
    with pytest.raises(ValueError, match="weight"):
        TensorDict.from_modules(nn.Linear(3, 2), nn.Linear(4, 2))
    shared = nn.Linear(3, 2)
    expanded = TensorDict.from_modules(shared, shared, expand_identical=True)
    assert expanded["weight"].shape == (2, 2, 3) and expanded["weight"].stride()[0] == 0
    lazy = TensorDict.from_modules(*mods, lazy_stack=True)
    assert lazy.batch_size == torch.Size([4])
    torch.testing.assert_close(lazy[2]["weight"], mods[2].weight)


def test_to_module_context_matches_functional_call_and_restores():
    m = _net()
    x = torch.randn(5, 3)
    originals = {n: p for n, p in m.named_parameters()}
    buffers = {n: b for n, b in m.named_buffers()}
    params = TensorDict.from_module(m).apply(lambda t: (t.detach() * 1.5).requires_grad_(t.requires_grad))
    expected = torch.func.functional_call(m, dict(params.flatten_keys(".").items()), x)
    with params.to_module(m):
        assert m[0].weight is params["0", "weight"]
        out = m(x)
    torch.testing.assert_close(out, expected)
    assert not torch.allclose(out, m(x))  # the module's own parameters are back
    assert {n: p for n, p in m.named_parameters()} == originals
    assert all(b is buffers[n] for n, b in m.named_buffers())
    assert [n for n, _ in m.named_buffers()] == list(buffers)  # order kept
    # gradients reach the TensorDict's leaves, as functional_call's reach its dict's leaves
    out.pow(2).sum().backward()
    twins = {k: v.detach().clone().requires_grad_(v.requires_grad) for k, v in params.flatten_keys(".").items()}
    torch.func.functional_call(m, twins, x).pow(2).sum().backward()
    for k, v in params.flatten_keys(".").items():
        if v.requires_grad:
            torch.testing.assert_close(v.grad, twins[k].grad)
    assert m[0].weight.grad is None


def test_to_module_restores_on_exception():
    m = nn.Linear(3, 2)
    w = m.weight
    params = TensorDict.from_module(m).apply(torch.zeros_like)
    with pytest.raises(RuntimeError, match="boom"):
        with params.to_module(m):
            assert torch.equal(m.weight, torch.zeros(2, 3))
            raise RuntimeError("boom")
    assert m.weight is w and isinstance(m.weight, nn.Parameter)
    assert "weight" not in m.__dict__


def test_to_module_returns_swap_and_swaps_back():
    m = nn.Linear(3, 2)
    w, b = m.weight, m.bias
    new = TensorDict(weight=nn.Parameter(torch.ones(2, 3)), bias=nn.Parameter(torch.zeros(2)))
    swap = new.to_module(m)
    assert swap["weight"] is w and swap["bias"] is b
    assert m.weight is new["weight"] and [p for p in m.parameters()] == [new["weight"], new["bias"]]
    torch.testing.assert_close(m(torch.ones(1, 3)), torch.full((1, 2), 3.0))
    swap.to_module(m, return_swap=False)
    assert m.weight is w and m.bias is b
    assert new.to_module(m, return_swap=False) is None
    swap.to_module(m)
    dest = TensorDict()
    out = new.to_module(m, swap_dest=dest)
    assert out is dest and dest["weight"] is w
    swap.to_module(m)


def test_to_module_inplace_copies_values():
    m = nn.Linear(3, 2)
    w = m.weight
    before = w.detach().clone()
    new = TensorDict.from_module(m).apply(lambda t: torch.full_like(t, 2.0))
    with new.to_module(m, inplace=True) as old:
        assert m.weight is w
        torch.testing.assert_close(m.weight.detach(), torch.full((2, 3), 2.0))
        torch.testing.assert_close(old["weight"], before)
    assert m.weight is w
    torch.testing.assert_close(m.weight.detach(), before)


def test_to_module_unknown_key_raises_and_leaves_module_untouched():
    m = nn.Sequential(nn.Linear(3, 2))
    w = m[0].weight
    bad = TensorDict({"0": {"weight": torch.zeros(2, 3), "nope": torch.zeros(1)}})
    with pytest.raises(KeyError, match="nope"):
        bad.to_module(m)
    assert m[0].weight is w


def test_to_module_use_state_dict():
    m = nn.Linear(3, 2)
    w = m.weight
    new = TensorDict(weight=torch.ones(2, 3), bias=torch.zeros(2))
    with new.to_module(m, use_state_dict=True):
        torch.testing.assert_close(m(torch.ones(1, 3)), torch.full((1, 2), 3.0))
    assert m.weight is w


def test_to_module_under_vmap():
    mods = [nn.Linear(3, 2) for _ in range(3)]
    params = TensorDict.from_modules(*mods)
    m = nn.Linear(3, 2)
    x = torch.randn(4, 3)

    def call(p, x):
        with p.to_module(m):
            return m(x)

    out = torch.vmap(call, (0, None))(params, x)
    for i, mod in enumerate(mods):
        torch.testing.assert_close(out[i], mod(x))


def test_to_module_round_trip_of_tensordict_params_keeps_buffers_in_their_slot():
    # TensorDictParams holds BatchNorm's running stats as Parameters; swapped in, they stay buffers
    # (plain tensors on the same storage); swapping back without a context manager must leave every
    # tensor object and every slot as it was.
    m = _net()
    before = m.state_dict(keep_vars=True)
    params = TensorDictParams(TensorDict.from_module(m).clone())
    old = params.to_module(m)
    assert not isinstance(m[2].running_mean, nn.Parameter) and "running_mean" in m[2]._buffers
    assert m[2].running_mean.data_ptr() == params["2", "running_mean"].data_ptr()
    assert list(m.state_dict(keep_vars=True)) == list(before)
    old.to_module(m)
    after = m.state_dict(keep_vars=True)
    assert list(after) == list(before)
    assert all(after[k] is before[k] for k in before)
    assert [n for n, _ in m.named_buffers()] == ["2.running_mean", "2.running_var", "2.num_batches_tracked"]


def test_from_module_keeps_empty_submodules_on_request():
    net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.Dropout(), nn.Linear(3, 1)))
    kept = TensorDict.from_module(net, filter_empty=False)
    assert kept["1"].is_empty() and kept["2", "0"].is_empty()  # ReLU and Dropout hold no tensor
    assert kept["2", "1", "weight"] is net[2][1].weight
    default = TensorDict.from_module(net)
    assert "1" not in default.keys() and ("2", "0") not in default.keys(include_nested=True)
    params = TensorDict.from_module(net, as_module=True, filter_empty=False)
    assert set(params.parameters()) == set(net.parameters())
