"""TensorDictModule / TensorDictModuleBase: values against calling the wrapped module directly."""

import warnings

import pytest
import torch
from torch import nn

from tdict import TensorDict
from tdict.nn import TensorDictModule, TensorDictModuleBase, WrapModule, dispatch


def _td(**entries):
    return TensorDict(entries, batch_size=[4])


def test_linear_matches_direct_call():
    lin = nn.Linear(3, 2)
    mod = TensorDictModule(lin, in_keys=["obs"], out_keys=["action"])
    td = _td(obs=torch.randn(4, 3))
    out = mod(td)
    assert out is td
    torch.testing.assert_close(td["action"], lin(td["obs"]))
    assert td["action"].shape == (4, 2)


def test_single_key_and_nested_keys():
    mod = TensorDictModule(
        lambda x, y: (x + y, x - y), in_keys=[("a", "x"), "y"], out_keys=[("out", "sum"), ("out", ("diff",))]
    )
    assert mod.in_keys == [("a", "x"), "y"]
    assert mod.out_keys == [("out", "sum"), ("out", "diff")]
    td = _td(a={"x": torch.ones(4)}, y=torch.full((4,), 3.0))
    mod(td)
    torch.testing.assert_close(td["out", "sum"], torch.full((4,), 4.0))
    torch.testing.assert_close(td["out", "diff"], torch.full((4,), -2.0))
    single = TensorDictModule(torch.neg, in_keys="y", out_keys=("n", "y"))
    assert single.in_keys == ["y"] and single.out_keys == [("n", "y")]
    torch.testing.assert_close(single(td)["n", "y"], -td["y"])


def test_tuple_output_and_discard():
    mod = TensorDictModule(lambda x: (x + 1, x + 2, x + 3), in_keys=["x"], out_keys=["a", "_", "c"])
    td = mod(_td(x=torch.zeros(4)))
    assert "_" not in td and "a" in td
    torch.testing.assert_close(td["c"], torch.full((4,), 3.0))


def test_dict_output_and_none_output():
    mod = TensorDictModule(lambda x: {"c": x * 2, "d": x * 3}, in_keys=["x"], out_keys=["d"])
    torch.testing.assert_close(mod(_td(x=torch.ones(4)))["d"], torch.full((4,), 3.0))
    nothing = TensorDictModule(lambda x: None, in_keys=["x"], out_keys=[])
    assert set(nothing(_td(x=torch.ones(4))).keys()) == {"x"}


def test_output_count_mismatch_names_keys():
    mod = TensorDictModule(lambda x: (x, x), in_keys=["x"], out_keys=["a"])
    with pytest.raises(RuntimeError, match=r"2 outputs.*\['a'\]"):
        mod(_td(x=torch.ones(4)))


def test_dict_in_keys_semantics():
    td = _td(a=torch.full((4,), 5.0), b=torch.ones(4))
    # default (out_to_in_map=True): {kwarg: key}
    mod = TensorDictModule(lambda x, *, y: x - y, in_keys={"x": "a", "y": "b"}, out_keys=["c"])
    torch.testing.assert_close(mod(td)["c"], torch.full((4,), 4.0))
    # out_to_in_map=False: {key: kwarg}
    mod = TensorDictModule(lambda x, *, y: x - y, in_keys={"a": "y", "b": "x"}, out_keys=["c"], out_to_in_map=False)
    torch.testing.assert_close(mod(td)["c"], torch.full((4,), -4.0))
    # one key feeding two kwargs
    mod = TensorDictModule(lambda x, y, z: x + y + z, in_keys={"x": "a", "y": "b", "z": "b"}, out_keys=["t"])
    torch.testing.assert_close(mod(td)["t"], torch.full((4,), 7.0))
    assert mod.in_keys == ["a", "b", "b"]


def test_out_to_in_map_with_list_warns():
    with pytest.warns(UserWarning, match="out_to_in_map"):
        TensorDictModule(torch.neg, in_keys=["a"], out_keys=["b"], out_to_in_map=False)


def test_missing_in_key_error_names_key_and_present_keys():
    mod = TensorDictModule(lambda x, y: x + y, in_keys=["x", ("sub", "y")], out_keys=["z"])
    td = _td(x=torch.ones(4), other=torch.ones(4))
    with pytest.raises(KeyError) as info:
        mod(td)
    message = str(info.value)
    assert "('sub', 'y')" in message and "'x'" in message and "'other'" in message
    assert "z" not in td  # nothing written
    kw = TensorDictModule(lambda x: x, in_keys={"x": "missing"}, out_keys=["z"])
    with pytest.raises(KeyError, match="missing"):
        kw(td)


def test_module_own_key_error_is_not_rewritten():
    def boom(x):
        raise KeyError("inner")

    with pytest.raises(KeyError, match="inner"):
        TensorDictModule(boom, in_keys=["x"], out_keys=["y"])(_td(x=torch.ones(4)))


@pytest.mark.parametrize(
    "in_keys, out_keys",
    [([1], ["a"]), (["a"], [("b", 2)]), (["a", ()], ["b"]), (5, ["b"]), (["a"], None)],
)
def test_malformed_keys_raise_at_construction(in_keys, out_keys):
    with pytest.raises(ValueError, match="key"):
        TensorDictModule(torch.neg, in_keys=in_keys, out_keys=out_keys)


def test_non_callable_and_bad_inplace_raise():
    with pytest.raises(ValueError, match="not callable"):
        TensorDictModule(nn.Linear, in_keys=["a"], out_keys=["b"])
    with pytest.raises(ValueError, match="inplace"):
        TensorDictModule(torch.neg, in_keys=["a"], out_keys=["b"], inplace="yes")
    with pytest.raises(ValueError, match="no method"):
        TensorDictModule(nn.Linear(2, 2), in_keys=["a"], out_keys=["b"], method="nope")


def test_underscore_in_keys_warns():
    with pytest.warns(UserWarning, match='"_"'):
        TensorDictModule(torch.neg, in_keys=["_"], out_keys=["b"])


def test_select_and_reset_out_keys():
    mod = TensorDictModule(lambda x, y: (x + 2, y + 2), in_keys=["a", "b"], out_keys=["c", "d"])
    assert mod.select_out_keys("d") is mod
    assert mod.out_keys == ["d"] and mod.out_keys_source == ["c", "d"]
    td = _td(a=torch.zeros(4), b=torch.ones(4), extra=torch.ones(4))
    out = mod(td)
    # as tensordict 0.14: the result keeps in_keys and the selected out_keys only
    assert sorted(out.keys()) == ["a", "b", "d"]
    torch.testing.assert_close(out["d"], torch.full((4,), 3.0))
    torch.testing.assert_close(mod(torch.zeros(4), torch.ones(4)), torch.full((4,), 3.0))
    with pytest.raises(ValueError, match="'zz'"):
        mod.select_out_keys("zz")
    assert mod.reset_out_keys() is mod
    assert mod.out_keys == ["c", "d"]
    assert sorted(mod(_td(a=torch.zeros(4), b=torch.ones(4))).keys()) == ["a", "b", "c", "d"]


def test_tensordict_out():
    mod = TensorDictModule(torch.neg, in_keys=["a"], out_keys=["b"])
    td = _td(a=torch.ones(4))
    dest = TensorDict({}, batch_size=[4])
    assert mod(td, tensordict_out=dest) is dest
    assert "b" not in td
    torch.testing.assert_close(dest["b"], -torch.ones(4))


def test_inplace_false_and_empty():
    td = _td(a=torch.ones(4))
    new = TensorDictModule(torch.neg, in_keys=["a"], out_keys=["b"], inplace=False)(td)
    assert new is not td and list(new.keys()) == ["b"] and new.batch_size == torch.Size([])
    assert "b" not in td
    empty = TensorDictModule(torch.neg, in_keys=["a"], out_keys=["b"], inplace="empty")(td)
    assert empty is not td and list(empty.keys()) == ["b"] and empty.batch_size == torch.Size([4])


def test_call_with_tensors_and_kwargs():
    lin = nn.Linear(3, 2)
    mod = TensorDictModule(lin, in_keys=["obs"], out_keys=["action"])
    x = torch.randn(5, 3)
    torch.testing.assert_close(mod(obs=x), lin(x))
    torch.testing.assert_close(mod(x), lin(x))
    two = TensorDictModule(lambda x, y: (x + y, x * y), in_keys=[("a", "x"), "y"], out_keys=["s", "p"])
    s, p = two(a_x=torch.full((2,), 2.0), y=torch.full((2,), 3.0))
    torch.testing.assert_close(s, torch.full((2,), 5.0))
    torch.testing.assert_close(p, torch.full((2,), 6.0))
    with pytest.raises(RuntimeError, match="both"):
        two(torch.ones(2), a_x=torch.ones(2))


def test_dispatch_on_a_custom_module():
    class Add(nn.Module):
        in_keys = ["a", "b"]
        out_keys = ["c"]

        @dispatch(auto_batch_size=True)
        def forward(self, tensordict):
            return tensordict.set("c", tensordict["a"] + tensordict["b"])

    add = Add()
    torch.testing.assert_close(add(a=torch.ones(3), b=torch.ones(3)), torch.full((3,), 2.0))
    td = TensorDict(a=torch.ones(3), b=torch.ones(3), batch_size=[3])
    assert add(td) is td
    with pytest.raises(RuntimeError, match="tensordict"):
        dispatch(lambda x: x)


def test_method_and_method_kwargs():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.tensor(2.0))

        def shifted(self, x, *, shift):
            return x * self.scale + shift

    net = Net()
    mod = TensorDictModule(net, in_keys=["x"], out_keys=["y"], method="shifted", method_kwargs={"shift": 1.0})
    td = mod(_td(x=torch.ones(4)))
    torch.testing.assert_close(td["y"], torch.full((4,), 3.0))
    assert list(mod.parameters())[0] is net.scale
    mod.method_kwargs["shift"] = 10.0  # read per call, as in tensordict 0.14
    torch.testing.assert_close(mod(x=torch.ones(2)), torch.full((2,), 12.0))
    import copy

    dup = copy.deepcopy(mod)
    with torch.no_grad():
        dup.module.scale.fill_(0.0)
    torch.testing.assert_close(dup(x=torch.ones(2)), torch.full((2,), 10.0))
    torch.testing.assert_close(mod(x=torch.ones(2)), torch.full((2,), 12.0))


def test_lazy_linear():
    lazy = nn.LazyLinear(5)
    mod = TensorDictModule(lazy, in_keys=["x"], out_keys=["y"])
    td = mod(_td(x=torch.randn(4, 7)))
    assert td["y"].shape == (4, 5)
    assert lazy.weight.shape == (5, 7)
    torch.testing.assert_close(td["y"], lazy(td["x"]))


def test_state_dict_and_parameters_are_the_wrapped_modules():
    lin = nn.Linear(3, 2)
    mod = TensorDictModule(lin, in_keys=["a"], out_keys=["b"])
    assert [p for p in mod.parameters()] == [p for p in lin.parameters()]
    assert set(mod.state_dict()) == {"module." + k for k in lin.state_dict()}
    other = TensorDictModule(nn.Linear(3, 2), in_keys=["a"], out_keys=["b"])
    other.load_state_dict(mod.state_dict())
    td = _td(a=torch.randn(4, 3))
    torch.testing.assert_close(other(td.clone())["b"], mod(td)["b"])
    assert mod.weight is lin.weight  # attribute fallback to the wrapped module
    assert mod.device == torch.device("cpu")


def test_swapping_module_updates_call():
    mod = TensorDictModule(torch.neg, in_keys=["a"], out_keys=["b"])
    mod.module = torch.abs
    torch.testing.assert_close(mod(_td(a=-torch.ones(4)))["b"], torch.ones(4))


def test_deepcopy_is_independent():
    import copy

    lin = nn.Linear(2, 2)
    mod = TensorDictModule(lin, in_keys=["a"], out_keys=["b"])
    dup = copy.deepcopy(mod)
    with torch.no_grad():
        dup.module.weight.zero_()
        dup.module.bias.zero_()
    assert torch.equal(dup(_td(a=torch.ones(4, 2)))["b"], torch.zeros(4, 2))
    assert not torch.equal(mod(_td(a=torch.ones(4, 2)))["b"], torch.zeros(4, 2))


def test_repr():
    mod = TensorDictModule(nn.Linear(2, 3), in_keys=["a"], out_keys=[("n", "b")])
    assert repr(mod) == (
        "TensorDictModule(\n    module=Linear(in_features=2, out_features=3, bias=True),\n"
        "    in_keys=['a'],\n    out_keys=[('n', 'b')])"
    )
    assert "module=<function" in repr(TensorDictModule(lambda x: x, in_keys=["a"], out_keys=["b"]))


def test_module_base_class_attribute_keys_and_select():
    class Mod(TensorDictModuleBase):
        in_keys = ["a"]
        out_keys = ["b", ("c", "d")]

        def forward(self, tensordict):
            return tensordict.set("b", tensordict["a"] + 1).set(("c", "d"), tensordict["a"] + 2)

    mod = Mod()
    assert mod.in_keys == ["a"] and mod.out_keys == ["b", ("c", "d")]
    td = mod(TensorDict(a=torch.zeros(())))
    assert td["c", "d"] == 2
    mod.select_out_keys(("c", "d"))
    td = mod(TensorDict(a=torch.zeros(()), e=torch.zeros(())))
    assert set(td.keys(include_nested=True, leaves_only=True)) == {"a", ("c", "d")}
    mod.reset_out_keys()
    assert "b" in mod(TensorDict(a=torch.zeros(())))


def test_wrap_module():
    wrapped = WrapModule(lambda td: TensorDict(y=td["x"] + 1), inplace=True)
    td = wrapped(TensorDict(x=torch.ones(())))
    assert td["y"] == 2 and td["x"] == 1
    with pytest.raises(ValueError, match="not callable"):
        WrapModule(3)


def test_no_warnings_on_plain_use():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TensorDictModule(torch.neg, in_keys={"input": "a"}, out_keys=["b"])(_td(a=torch.ones(4)))


def test_overhead_is_small():
    """A generous bound (loaded 2-core box): the call adds a few µs over the wrapped module."""
    import timeit

    ident = lambda x: x  # noqa: E731
    mod = TensorDictModule(ident, in_keys=["obs"], out_keys=["out"])
    td = _td(obs=torch.randn(4, 8))
    per_call = min(timeit.repeat(lambda: mod(td), number=2000, repeat=3)) / 2000
    assert per_call < 50e-6


def test_non_tensor_inputs_arrive_as_payload():
    mod = TensorDictModule(lambda x, tag: x * len(tag), in_keys=["x", "tag"], out_keys=["y"])
    td = TensorDict(x=torch.ones(2), tag="abc", batch_size=[2])
    torch.testing.assert_close(mod(td)["y"], torch.full((2,), 3.0))
    single = TensorDictModule(lambda tag: torch.tensor(len(tag)), in_keys=["tag"], out_keys=["n"])
    assert single(TensorDict(tag="abcd"))["n"] == 4


def test_no_in_keys_and_tensordict_keyword():
    make = TensorDictModule(lambda: torch.arange(3.0), in_keys=[], out_keys=["x"])
    td = make(TensorDict())
    torch.testing.assert_close(td["x"], torch.arange(3.0))
    neg = TensorDictModule(torch.neg, in_keys=["x"], out_keys=["y"])
    assert neg(tensordict=td) is td
    torch.testing.assert_close(td["y"], -torch.arange(3.0))


def test_tensor_function_returns_what_a_call_writes():
    lin = nn.Linear(3, 2)
    mod = TensorDictModule(lambda x, y: (lin(x), x.sum(-1) + y), in_keys=["x", ("n", "y")], out_keys=["a", "_"])
    td = _td(x=torch.randn(4, 3), n={"y": torch.randn(4)})
    a, discarded = mod.tensor_function(1)(td["x"], td["n", "y"])
    assert torch.equal(a, mod(td.clone())["a"])
    torch.testing.assert_close(discarded, td["x"].sum(-1) + td["n", "y"])
    # one tensor returned: a 1-tuple, as the call's out-keys
    assert TensorDictModule(torch.neg, in_keys=["x"], out_keys=["y"]).tensor_function()(torch.ones(2))[0].tolist() == [
        -1,
        -1,
    ]
    with pytest.raises(RuntimeError, match="returned 1 outputs but out_keys"):
        TensorDictModule(torch.neg, in_keys=["x"], out_keys=["y", "z"]).tensor_function()(torch.ones(2))


def test_tensor_function_is_none_when_a_call_does_more():
    def plain():
        return TensorDictModule(nn.Linear(3, 2), in_keys=["x"], out_keys=["y"])

    assert plain().tensor_function() is not None
    assert TensorDictModule(lambda x: x, in_keys={"x": "a"}, out_keys=["y"]).tensor_function() is None  # keywords
    assert TensorDictModule(nn.Linear(3, 2), in_keys=["x"], out_keys=["y"], strict=False).tensor_function() is None
    two = TensorDictModule(lambda x: (x, -x), in_keys=["x"], out_keys=["y", "z"])
    assert two.select_out_keys("y").tensor_function() is None  # the call also drops entries
    hooked = plain()
    handle = hooked.register_forward_hook(lambda *args: None)
    assert hooked.tensor_function() is None
    handle.remove()
    assert hooked.tensor_function() is not None  # asked again: the hook is gone

    class Doubling(TensorDictModule):
        def forward(self, tensordict):
            return super().forward(tensordict).apply(lambda t: 2 * t)

    assert Doubling(nn.Linear(3, 2), in_keys=["x"], out_keys=["y"]).tensor_function() is None


def test_tensor_function_follows_the_module_through_changes_copies_and_pickles():
    import copy
    import pickle

    mod = TensorDictModule(nn.Linear(3, 2), in_keys=["x"], out_keys=["y"])
    run = mod.tensor_function(1)
    assert mod.tensor_function(1) is run  # kept while nothing changes
    x = torch.randn(4, 3)
    clone = copy.deepcopy(mod)
    with torch.no_grad():
        clone.module.weight.add_(1.0)
    # the copy runs its own network, not the original's
    torch.testing.assert_close(clone.tensor_function(1)(x)[0], clone.module(x))
    assert not torch.allclose(clone.tensor_function(1)(x)[0], run(x)[0])
    restored = pickle.loads(pickle.dumps(mod))  # a closure is never pickled
    torch.testing.assert_close(restored.tensor_function(1)(x)[0], mod.module(x))
    other = nn.Linear(3, 2)
    mod.module = other  # a new wrapped network: a new function
    torch.testing.assert_close(mod.tensor_function(1)(x)[0], other(x))
