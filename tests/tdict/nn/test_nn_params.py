"""TensorDictParams: an nn.Module view of a TensorDict of parameters."""

import pytest
import torch
from torch import nn

from tdict import TensorDict
from tdict.nn import TensorDictParams


def _params(**kw):
    return TensorDictParams(
        TensorDict(
            {"lin": {"weight": torch.randn(2, 3), "bias": torch.randn(2)}, "count": torch.zeros((), dtype=torch.long)}
        ),
        **kw,
    )


def test_leaves_registered_as_parameters_and_buffers():
    p = _params()
    assert [n for n, _ in p.named_parameters()] == ["lin.weight", "lin.bias"]
    assert [n for n, _ in p.named_buffers()] == ["count"]
    assert isinstance(p["lin", "weight"], nn.Parameter) and p["lin", "weight"].requires_grad
    assert p["lin", "weight"] is dict(p.named_parameters())["lin.weight"]
    assert set(p.state_dict()) == {"lin.weight", "lin.bias", "count"}
    nc = TensorDictParams(TensorDict(a=torch.ones(2), b=nn.Parameter(torch.ones(2))), no_convert=True)
    assert [n for n, _ in nc.named_parameters()] == ["b"] and [n for n, _ in nc.named_buffers()] == ["a"]


def test_tensordict_api_is_forwarded():
    p = _params()
    assert set(p.keys()) == {"lin", "count"}
    assert isinstance(p["lin"], TensorDict)
    assert p.batch_size == torch.Size([])
    assert ("lin", "weight") in p
    flat = dict(p.flatten_keys(".").items())
    assert flat["lin.weight"] is p["lin", "weight"]
    p.set("extra", torch.ones(4))
    assert isinstance(p["extra"], nn.Parameter) and "extra" in dict(p.named_parameters())
    p["more"] = torch.ones(1)
    assert "more" in dict(p.named_parameters())
    locked = _params(lock=True)
    assert locked.is_locked


def test_indexing_returns_tensordicts_holding_the_parameters():
    stacked = TensorDictParams(TensorDict.from_modules(nn.Linear(3, 2), nn.Linear(3, 2)))
    first = stacked[0]
    assert type(first) is TensorDict and first.batch_size == torch.Size([])
    torch.testing.assert_close(first["weight"], stacked["weight"][0])
    first["weight"].sum().backward()  # gradients flow back to the registered parameter
    expected = torch.zeros(2, 2, 3)
    expected[0] = 1
    torch.testing.assert_close(stacked["weight"].grad, expected)


def test_optimizer_step_inside_a_module_changes_values():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.params = TensorDictParams(TensorDict(w=torch.ones(3), b=torch.zeros(())))

        def forward(self, x):
            return x @ self.params["w"] + self.params["b"]

    net = Net()
    assert [n for n, _ in net.named_parameters()] == ["params.w", "params.b"]
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.tensor([1.0, 2.0, 3.0])
    net(x).backward()
    opt.step()
    torch.testing.assert_close(net.params["w"].detach(), torch.ones(3) - 0.1 * x)
    torch.testing.assert_close(net.params["b"].detach(), torch.tensor(-0.1))
    net.zero_grad()
    assert net.params["w"].grad is None or not net.params["w"].grad.any()


def test_to_dtype_state_dict_and_requires_grad():
    p = _params()
    p.to(torch.float64)
    assert p["lin", "weight"].dtype == torch.float64
    assert p["lin", "weight"] is dict(p.named_parameters())["lin.weight"]
    assert p["count"].dtype == torch.long
    q = _params().to(torch.float64)
    q.load_state_dict(p.state_dict())
    torch.testing.assert_close(q["lin", "weight"], p["lin", "weight"])
    new = {k: torch.full_like(v, 7) for k, v in p.state_dict().items()}
    q.load_state_dict(new, assign=True)
    assert torch.equal(q["lin", "bias"].detach(), torch.full((2,), 7.0, dtype=torch.float64))
    assert isinstance(q["lin", "bias"], nn.Parameter) and dict(q.named_parameters())["lin.bias"] is q["lin", "bias"]
    with pytest.raises(RuntimeError, match="Missing key.*lin.bias"):
        q.load_state_dict({"lin.weight": new["lin.weight"]})
    p.requires_grad_(False)
    assert not p["lin", "weight"].requires_grad


def test_params_drive_a_module_through_to_module():
    m = nn.Linear(3, 2)
    p = TensorDict.from_module(m, as_module=True)
    other = TensorDictParams(TensorDict.from_module(nn.Linear(3, 2)))
    x = torch.randn(4, 3)
    with other.to_module(m):
        out = m(x)
    torch.testing.assert_close(out, torch.nn.functional.linear(x, other["weight"], other["bias"]))
    assert m.weight is p["weight"]


def test_state_dict_round_trip_as_a_submodule():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.params = _params()

    a, b = Net(), Net()
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(b.params["lin", "weight"], a.params["lin", "weight"])
    with pytest.raises(RuntimeError, match="Unexpected key.*params.nope"):
        b.load_state_dict({**a.state_dict(), "params.nope": torch.zeros(1)})


def test_nested_leaves_are_parameters_of_the_holding_module():
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.params = TensorDictParams(
                TensorDict(w=torch.ones(2), sub=TensorDict(deep=TensorDict(v=torch.zeros(3))))
            )

    holder = Holder()
    assert [n for n, _ in holder.named_parameters()] == ["params.w", "params.sub.deep.v"]
    assert [p.shape for p in holder.parameters()] == [torch.Size([2]), torch.Size([3])]
    assert list(holder.parameters())[1] is holder.params["sub", "deep", "v"]


def test_no_convert_keeps_tensors_as_they_are():
    # as tensordict: nothing is converted, non-parameters are registered as buffers, also when set later
    w = torch.ones(2)
    p = TensorDictParams(TensorDict(w=w, b=nn.Parameter(torch.zeros(1))), no_convert=True)
    assert p["w"] is w and not isinstance(p["w"], nn.Parameter)
    p.set("later", torch.ones(3))
    p.set("later_param", nn.Parameter(torch.ones(3)))
    assert [n for n, _ in p.named_parameters()] == ["b", "later_param"]
    assert [n for n, _ in p.named_buffers()] == ["w", "later"]


def test_tensordict_methods_that_nn_module_would_shadow():
    p = _params()
    # apply is TensorDict.apply (nn.Module.apply would call fn on the module)
    doubled = p.apply(lambda t: t * 2)
    assert isinstance(doubled, TensorDict)
    torch.testing.assert_close(doubled["lin", "weight"], p["lin", "weight"] * 2)
    named = p.named_apply(lambda key, t: t + 1 if key == "bias" else t)
    torch.testing.assert_close(named["lin", "bias"], p["lin", "bias"] + 1)
    # clone: new parameters, same kinds; copy: the very same ones
    c = p.clone()
    assert isinstance(c, TensorDictParams)
    assert [n for n, _ in c.named_parameters()] == ["lin.weight", "lin.bias"] and [n for n, _ in c.named_buffers()] == [
        "count"
    ]
    assert c["lin", "weight"] is not p["lin", "weight"] and isinstance(c["lin", "weight"], nn.Parameter)
    torch.testing.assert_close(c["lin", "weight"], p["lin", "weight"])
    shallow = p.copy()
    assert isinstance(shallow, TensorDictParams) and shallow["lin", "weight"] is p["lin", "weight"]
    data = p.data
    assert isinstance(data, TensorDict) and not data["lin", "weight"].requires_grad
    assert data["lin", "weight"].data_ptr() == p["lin", "weight"].data_ptr()
    # in-place value ops write through .data (no "leaf Variable ... in-place" error)
    p.zero_()
    assert torch.equal(p["lin", "weight"], torch.zeros(2, 3)) and isinstance(p["lin", "weight"], nn.Parameter)
    p.fill_(("lin", "bias"), 3.0)
    torch.testing.assert_close(p["lin", "bias"], torch.full((2,), 3.0))
    p.copy_(c)
    torch.testing.assert_close(p["lin", "weight"], c["lin", "weight"])
    assert p["lin", "weight"].requires_grad


def test_removing_and_renaming_keys_updates_the_registered_parameters():
    p = _params()
    popped = p.pop(("lin", "bias"))
    assert popped.shape == (2,)
    assert [n for n, _ in p.named_parameters()] == ["lin.weight"]
    p.rename_key_(("lin", "weight"), "w")
    assert [n for n, _ in p.named_parameters()] == ["w"]
    del p["count"]
    assert list(p.named_buffers()) == []
    p.del_("w")
    assert list(p.parameters()) == [] and set(p.state_dict()) == set()
    assert p.pop("missing", None) is None


def test_to_module_round_trip_without_a_context_manager():
    # old = params.to_module(m), then old.to_module(m) puts the module's own parameters back, in order
    m = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    own = dict(m.named_parameters())
    params = TensorDictParams(TensorDict.from_module(m).apply(torch.zeros_like))
    old = params.to_module(m)
    assert m[0].weight is params["0", "weight"]
    torch.testing.assert_close(m(torch.ones(2)), torch.zeros(1))
    old.to_module(m)
    assert [name for name, _ in m.named_parameters()] == list(own)
    assert all(value is own[name] for name, value in m.named_parameters())
