"""TensorDictParams: an nn.Module view of a TensorDict of parameters."""

import copy
import io
from typing import Any

import pytest
import torch
from torch import nn

from tdict import TensorDict, TensorDictBase, lazy_stack
from tdict.nn import TensorDictParams


def _params(**kw) -> Any:
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
    locked = _params(lock=True)  # as tensordict: the wrapped TensorDict is locked, the wrapper is not
    assert not locked.is_locked and locked._param_td.is_locked


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
    assert type(p.double()) is TensorDict  # as tensordict: a cast TensorDict, p is untouched
    assert p["lin", "weight"].dtype == torch.float32
    p._apply(lambda t: t.double() if t.is_floating_point() else t)  # what module.double() does to its children
    assert p["lin", "weight"].dtype == torch.float64
    assert p["lin", "weight"] is dict(p.named_parameters())["lin.weight"]
    assert p["count"].dtype == torch.long
    q = _params()
    q._apply(lambda t: t.double() if t.is_floating_point() else t)
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
    # as tensordict: nothing becomes a parameter, non-parameters are buffers (aliases), also when set later
    w = torch.ones(2)
    p = TensorDictParams(TensorDict(w=w, b=nn.Parameter(torch.zeros(1))), no_convert=True)
    assert isinstance(p["w"], nn.Buffer) and not isinstance(p["w"], nn.Parameter)
    assert p["w"].data_ptr() == w.data_ptr()
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


# ---------------------------------------------------------------------- the TensorDict API
# expected values below were read off tensordict 0.14.3's TensorDictParams


def _batched(**kw) -> Any:
    return TensorDictParams(
        TensorDict(
            {"a": torch.ones(3, 4), "n": {"b": torch.ones(3, 2)}, "i": torch.zeros(3, dtype=torch.long)}, batch_size=[3]
        ),
        **kw,
    )


def _names(module):
    return [n for n, _ in module.named_parameters()], [n for n, _ in module.named_buffers()]


def test_is_a_tensordict_and_a_module_wrapping_the_given_tensordict():
    td = TensorDict(
        a=torch.ones(3),
        i=torch.zeros(3, dtype=torch.long),
        bf=torch.zeros(3, dtype=torch.bfloat16),
        c=torch.zeros(3, dtype=torch.complex64),
    )
    p = TensorDictParams(td)
    assert isinstance(p, TensorDictBase) and isinstance(p, nn.Module)
    assert p._param_td is td and isinstance(td["a"], nn.Parameter)  # converted in place, not copied
    assert _names(p) == (["a"], ["i", "bf", "c"])  # only float16/32/64 become parameters
    assert all(isinstance(p[k], nn.Buffer) for k in ("i", "bf", "c"))
    kw = TensorDictParams(a=0, b=1.0)
    assert isinstance(kw["a"], nn.Buffer) and isinstance(kw["b"], nn.Parameter)
    assert isinstance(TensorDictParams({"w": torch.ones(2)})["w"], nn.Parameter)
    assert TensorDictParams().is_empty() and not p.is_empty()


def test_no_convert_flags_graph_tensors_as_buffers_in_place():
    rg = torch.ones(3, requires_grad=True) * 2
    p = TensorDictParams(TensorDict(rg=rg, pp=nn.Parameter(torch.ones(3))), no_convert=True)
    assert p["rg"] is rg and isinstance(rg, nn.Buffer) and rg.grad_fn is not None
    assert _names(p) == (["pp"], ["rg"])


def test_bad_arguments_are_refused_with_clear_errors():
    with pytest.raises(TypeError, match="parameters must be a TensorDict, a dict or None, got list"):
        TensorDictParams([1, 2])
    with pytest.raises(TypeError, match="not both"):
        TensorDictParams({"a": torch.ones(2)}, b=torch.ones(2))
    with pytest.raises(TypeError, match="no_convert must be a bool, got str"):
        TensorDictParams(TensorDict(), no_convert="yes")  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError):
        TensorDictParams(TensorDict(), True)  # pyright: ignore[reportCallIssue]  # no_convert is keyword-only, as in tensordict
    lazy = lazy_stack([TensorDict(a=torch.ones(2)), TensorDict(a=torch.ones(2))])
    with pytest.raises(RuntimeError, match="cannot hold a LazyStackedTensorDict"):
        TensorDictParams(lazy)
    p = _batched()
    with pytest.raises(RuntimeError, match=r"cannot hold a LazyStackedTensorDict \(at key \('sub',\)\)"):
        p.set("sub", lazy_stack([TensorDict(a=torch.ones(2))] * 3))
    assert "sub" not in p.keys()
    with pytest.raises(RuntimeError, match="Cannot call map|cannot map over parameters"):
        p.map(lambda x: x)
    with pytest.raises(RuntimeError, match="Cannot build a memmap TensorDict in-place"):
        p.memmap_()
    with pytest.raises(RuntimeError, match="Cannot pin_memory in-place with TensorDictParams"):
        p.pin_memory(inplace=True)
    with pytest.raises(RuntimeError, match="in-place operation"):
        p.add_(1)  # autograd refuses in-place math on leaf parameters (tensordict: the same)
    with pytest.raises(ValueError, match="hook must be callable"):
        p.register_get_post_hook(3)  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize(
    "op, grad",
    [
        (lambda p: p + 1, 1.0),
        (lambda p: 1 + p, 1.0),
        (lambda p: p * 3, 3.0),
        (lambda p: p.mul(p.data * 2), 2.0),
        (lambda p: p - p.data, 1.0),
        (lambda p: p.apply(lambda t: t * 2), 2.0),
        (lambda p: torch.stack([p, p]), 2.0),
        (lambda p: torch.cat([p, p]), 2.0),
        (lambda p: p.expand(2, 3), 2.0),
        (lambda p: p.select("a", "n"), 1.0),
        (lambda p: p.flatten_keys().unflatten_keys(), 1.0),
    ],
)
def test_new_collections_are_tensordicts_with_gradients_to_the_parameters(op, grad):
    p = _batched()
    out = op(p)
    assert type(out) is TensorDict
    out["a"].sum().backward()
    torch.testing.assert_close(p["a"].grad, torch.full((3, 4), grad))
    assert p["i"].dtype == torch.long  # integer buffers go along (TensorDict's fused path would fail on them)


def test_indexing_unbind_and_reads():
    p = _batched()
    assert p[...] is p and len(p) == 3 and p.batch_size == torch.Size([3]) and p.batch_dims == 1
    assert [type(x) for x in p] == [TensorDict] * 3
    assert type(p[0]) is TensorDict and p[0].batch_size == torch.Size([])
    assert type(p["n"]) is TensorDict and isinstance(p["n", "b"], nn.Parameter)
    assert p.get(("n", "b")) is p["n", "b"] and p.get("zz", None) is None
    parts = p.unbind(0)
    assert len(parts) == 3 and all(type(t) is TensorDict for t in parts)
    parts[1]["a"].sum().backward()
    assert p["a"].grad.sum().item() == 4.0
    assert list(p.keys(True, True)) == ["a", ("n", "b"), "i"]
    kinds = [type(v) for v in p.values()]
    assert kinds == [nn.Parameter, TensorDict, torch.Tensor] and isinstance(p["i"], nn.Buffer)
    assert ("n", "b") in p and "zz" not in p
    d = p.to_dict()
    assert isinstance(d["a"], nn.Parameter) and isinstance(d["n"], dict)
    assert p.requires_grad and p.numel() == 3
    assert type(p.n) is TensorDictParams and p.n["b"] is p["n", "b"]  # attribute access to a sub-collection
    with pytest.raises(AttributeError, match="has no attribute 'zzz'"):
        p.zzz  # noqa: B018


def test_equality_with_tensordicts():
    p = _batched()
    assert type(p == p) is TensorDict and (p == p).all()
    assert (p == p.data.clone()).all() and (p.data.clone() == p).all()
    assert not (p != p.data).any()
    assert (p == 1)["a"].all()
    assert (p == "z") is False
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(p)


def test_set_update_and_setdefault_convert_and_register():
    p = _batched()
    assert p.set("c", torch.ones(3)) is p and isinstance(p["c"], nn.Parameter)
    p.set("ci", torch.ones(3, dtype=torch.long))
    p["d"] = torch.ones(3)
    p.set(("n", "e"), torch.ones(3))
    p.set("sub", TensorDict(x=torch.ones(3), batch_size=[3]))
    assert p.update({"u": torch.ones(3)}) is p
    assert isinstance(p.setdefault("z", torch.ones(3)), nn.Parameter)
    assert _names(p) == (["a", "n.b", "n.e", "c", "d", "sub.x", "u", "z"], ["i", "ci"])
    grad_carrying = torch.ones(3, requires_grad=True) * 2
    p.set("x", grad_carrying)  # a new leaf parameter, cut from the graph (tensordict: the same)
    assert isinstance(p["x"], nn.Parameter) and p["x"].grad_fn is None
    q = _batched(no_convert=True)
    q.set("c", torch.ones(3))
    q.set("cp", nn.Parameter(torch.ones(3)))
    assert _names(q) == (["cp"], ["a", "n.b", "i", "c"])


def test_structure_edits_update_the_registration():
    p = _batched()
    assert isinstance(p.pop("a"), nn.Parameter) and _names(p) == (["n.b"], ["i"])
    assert p.popitem()[0] == "i" and _names(p) == (["n.b"], [])
    p = _batched()
    assert p.select("a", inplace=True) is p and _names(p) == (["a"], [])
    p = _batched()
    assert p.exclude("a", inplace=True) is p and _names(p) == (["n.b"], ["i"])
    p = _batched()
    assert p.flatten_keys(".", inplace=True) is p and _names(p) == (["a", "n.b"], ["i"])
    assert list(p.keys()) == ["a", "n.b", "i"]
    p = _batched()
    assert p.clear() is p and _names(p) == ([], [])
    p = _batched()
    flat = p.flatten_keys()  # not in place: a TensorDict of the very parameters
    assert type(flat) is TensorDict and flat["n.b"] is p["n", "b"]
    assert type(p.exclude("a")) is TensorDict and type(p.select("a")) is TensorDict


def test_in_place_value_ops_write_through_data():
    p = _batched()
    ptr = p["a"].data_ptr()
    assert p.zero_() is p and p["a"].abs().sum().item() == 0.0 and p["a"].data_ptr() == ptr
    assert isinstance(p["a"], nn.Parameter) and p["a"].requires_grad
    assert p.fill_("a", 2.0) is p and p["a"].sum().item() == 24.0
    assert p.copy_(_batched()) is p and p["a"].sum().item() == 12.0
    assert p.update_({"n": {"b": torch.zeros(3, 2)}}) is p and p["n", "b"].sum().item() == 0.0
    assert p.set_("a", torch.zeros(3, 4)) is p and p["a"].sum().item() == 0.0
    assert p.set_at_("a", torch.ones(4), 0) is p and p["a"].sum().item() == 4.0
    assert p.apply_(lambda t: t + 1) is p and p["a"].sum().item() == 16.0
    data = p.data
    assert type(data) is TensorDict and not data["a"].requires_grad and data["a"].data_ptr() == ptr
    detached = p.detach()
    assert type(detached) is TensorDict and not detached["a"].requires_grad
    assert p.requires_grad_(False) is p and not p["a"].requires_grad and isinstance(p["a"], nn.Parameter)


def test_lock_semantics():
    p = _batched()
    assert p.lock_() is p and p.is_locked and p._param_td.is_locked
    with pytest.raises(RuntimeError, match="locked"):
        p.set("new", torch.ones(3))
    with pytest.raises(RuntimeError, match="locked"):
        p.del_("a")
    assert p.zero_() is p  # values can still change
    with p.unlock_():
        p.set("new", torch.ones(3))
    assert p.is_locked and "new" in dict(p.named_parameters())
    assert p.unlock_() is p and not p.is_locked and not p._param_td.is_locked
    q = _batched(lock=True)
    assert not q.is_locked and q._param_td.is_locked
    q.set("new", torch.ones(3))  # writes through the wrapper are allowed; the content stays locked
    assert "new" in dict(q.named_parameters()) and q._param_td.is_locked
    assert q.lock_().is_locked and not q.unlock_().is_locked and q._param_td.is_locked


def test_clone_copy_and_deepcopy():
    shared = nn.Parameter(torch.ones(2))
    p = TensorDictParams(TensorDict(a={"c": shared}, c=shared, f=torch.zeros(2, dtype=torch.long)), no_convert=True)
    c = p.clone()
    assert type(c) is TensorDictParams and c.no_convert
    assert _names(c) == (["a.c"], ["f"])  # nn.Module lists a tied parameter once
    assert c["c"] is c["a", "c"] and c["c"] is not shared  # tying kept, new leaves
    assert isinstance(c["c"], nn.Parameter) and c["c"].requires_grad and isinstance(c["f"], nn.Buffer)
    assert torch.equal(c["c"], shared) and c["c"].data_ptr() != shared.data_ptr()
    c["c"].sum().backward()
    assert shared.grad is None  # out of the graph
    cp = p.copy()
    assert type(cp) is TensorDictParams and cp["c"] is shared
    assert p.clone(recurse=False)["c"] is shared

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.params = TensorDictParams(TensorDict.from_module(self.lin), no_convert=True)

    h = copy.deepcopy(Holder())
    assert h.params["weight"] is h.lin.weight  # shared with the deep-copied module, not copied twice
    assert type(copy.copy(p)) is TensorDictParams and copy.copy(p)["c"] is shared


def test_to_returns_a_new_tensordictparams_and_a_module_moves_its_leaves():
    p = _batched()
    moved = p.to(torch.float64)
    assert type(moved) is TensorDictParams and moved["a"].dtype == torch.float64
    assert isinstance(moved["a"], nn.Parameter) and p["a"].dtype == torch.float32

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.params = _batched()

    h = Holder()
    weight, count = h.params["a"], h.params["i"]
    h.double()
    assert h.params["a"] is weight and weight.dtype == torch.float64  # parameters and buffers keep their objects
    assert h.params["i"] is count and count.dtype == torch.long


def test_module_holding_params_optimises_them_and_reports_them():
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.params = _batched()
            self.params.set("inner", TensorDictParams(TensorDict(w=torch.ones(3), batch_size=[3])))

    h = Holder()
    assert [n for n, _ in h.named_parameters()] == ["params.a", "params.n.b", "params.inner.w"]
    opt = torch.optim.SGD(h.parameters(), lr=1.0)
    (h.params["inner", "w"].sum() + (h.params * 2)["a"].sum()).backward()
    opt.step()
    assert h.params["inner", "w"].sum().item() == 0.0 and h.params["a"].sum().item() == -12.0
    assert set(h.state_dict()) == {"params.a", "params.n.b", "params.i", "params.inner.w"}


def test_nested_state_dict_and_get_post_hook():
    p = _batched()
    assert (
        p.load_state_dict({"a": torch.zeros(3, 4), "n": {"b": torch.zeros(3, 2)}, "i": torch.ones(3, dtype=torch.long)})
        is p
    )
    assert p["a"].sum().item() == 0.0 and p["i"].sum().item() == 3
    p.register_get_post_hook(lambda params, leaf: leaf.data)
    assert not p["a"].requires_grad and not p.get(("n", "b")).requires_grad
    assert not any(v.requires_grad for v in p.values(True, True))
    assert all(isinstance(v, nn.Parameter) for v in p._param_td.values(True, True) if v.is_floating_point())


def test_repr_and_pickling():
    p = TensorDictParams(TensorDict(a=torch.ones(2)))
    assert repr(p).startswith("TensorDictParams(params=TensorDict(")
    buf = io.BytesIO()
    torch.save(p, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert type(loaded) is TensorDictParams and _names(loaded) == (["a"], [])
    assert loaded["a"] is dict(loaded.named_parameters())["a"]


def test_vmap_over_stacked_params_maps_each_parameter_set_and_grads_reach_them():
    """torch.vmap(f, in_dims=(None, 0))(x, params) runs f once per parameter set (the function sees a
    TensorDict of the mapped parameters); equal to a loop, the module's own parameters untouched."""
    module = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 5))
    base = TensorDict.from_module(module)
    stacked = TensorDictParams(base.data.expand(6).clone().apply(lambda t: t + torch.randn_like(t)))

    def call(x, params):
        with params.to_module(module, preserve_module_state=False):
            return module(x)

    x = torch.randn(2, 3)
    out = torch.vmap(call, (None, 0))(x, stacked)
    loop = torch.stack([call(x, stacked.data[i]) for i in range(6)])
    assert out.shape == (6, 2, 5)
    torch.testing.assert_close(out, loop)
    assert (TensorDict.from_module(module) == base).all()
    out.sum().backward()
    loop_grads = torch.autograd.grad(
        torch.stack([call(x, stacked[i]) for i in range(6)]).sum(), [stacked["0", "weight"]]
    )[0]
    torch.testing.assert_close(stacked["0", "weight"].grad, loop_grads)


def test_state_dict_flat_by_default_nested_on_request():
    params = TensorDictParams(TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(3)}}, []))
    assert set(params.state_dict()) == {"a", "n.b"}
    nested = params.state_dict(flatten=False)
    assert set(nested) == {"a", "n"} and set(nested["n"]) == {"b"}
