"""TensorDictSequential: key inference, steps, selection, indexing, partial tolerance."""

import collections
import sys

import pytest
import torch
from torch import nn

from tdict import TensorDict, lazy_stack
from tdict.nn import TensorDictModule as Mod, TensorDictSequential as Seq, WrapModule


def _chain():
    l1, l2 = nn.Linear(3, 4), nn.Linear(4, 2)
    seq = Seq(Mod(l1, in_keys=["obs"], out_keys=["hidden"]), Mod(l2, in_keys=["hidden"], out_keys=["action"]))
    return seq, l1, l2


def test_values_match_direct_calls():
    seq, l1, l2 = _chain()
    td = TensorDict(obs=torch.randn(5, 3), batch_size=[5])
    assert seq(td) is td
    torch.testing.assert_close(td["hidden"], l1(td["obs"]))
    torch.testing.assert_close(td["action"], l2(l1(td["obs"])))
    assert seq.in_keys == ["obs"] and seq.out_keys == ["hidden", "action"]
    torch.testing.assert_close(seq(obs=td["obs"]), (td["hidden"], td["action"]))


def test_key_inference_with_callables_and_repeats():
    seq = Seq(
        Mod(lambda x: x + 1, in_keys=["x"], out_keys=["y"]),
        lambda td: td.set("z", td["y"] * 10),
        Mod(lambda y, z, w: y + z + w, in_keys=["y", "z", ("n", "w")], out_keys=["y"]),
    )
    assert isinstance(seq[1], WrapModule)
    assert seq.in_keys == ["x", "z", ("n", "w")]
    assert seq.out_keys == ["y"]
    td = seq(TensorDict(x=torch.ones(()), n={"w": torch.ones(())}))
    assert td["z"] == 20 and td["y"] == 2 + 20 + 1


def test_ordered_dict_and_list_inputs():
    steps = collections.OrderedDict(
        a=Mod(torch.neg, in_keys=["x"], out_keys=["y"]), b=Mod(torch.abs, in_keys=["y"], out_keys=["z"])
    )
    seq = Seq(steps)
    assert seq["a"] is steps["a"]
    assert list(seq[1:].module.keys()) == ["b"]
    assert seq(TensorDict(x=torch.ones(())))["z"] == 1
    listed = Seq(list(steps.values()))
    assert len(listed) == 2 and listed[0] is steps["a"]


def test_indexing_len_iteration():
    mods = [Mod(lambda x, i=i: x + i, in_keys=[f"k{i}"], out_keys=[f"k{i + 1}"]) for i in range(3)]
    seq = Seq(*mods)
    assert len(seq) == 3 and list(seq) == mods and seq[0] is mods[0] and seq[-1] is mods[2]
    tail = seq[1:]
    assert type(tail) is Seq and list(tail) == mods[1:] and tail.in_keys == ["k1"]
    assert tail(TensorDict(k1=torch.zeros(())))["k3"] == 3
    with pytest.raises(TypeError):
        seq[1.5]


def test_missing_key_error_names_step():
    seq, _, _ = _chain()
    with pytest.raises(KeyError, match="'obs'") as info:
        seq(TensorDict(other=torch.zeros(2), batch_size=[2]))
    assert "other" in str(info.value)
    if sys.version_info >= (3, 11):
        assert any("module 0" in note for note in info.value.__notes__)


def test_partial_tolerant():
    seq = Seq(
        Mod(lambda x: x + 1, in_keys=["a"], out_keys=["b"]),
        Mod(lambda x: x + 1, in_keys=["y"], out_keys=["q"]),
        partial_tolerant=True,
    )
    td = seq(TensorDict(a=torch.zeros(())))
    assert td["b"] == 1 and "q" not in td
    strict = Seq(*seq, partial_tolerant=False)
    with pytest.raises(KeyError, match="'y'"):
        strict(TensorDict(a=torch.zeros(())))
    stack = lazy_stack([TensorDict(a=torch.zeros(()), y=torch.zeros(())), TensorDict(a=torch.zeros(()))])
    seq(stack)
    assert stack.tensordicts[0]["q"] == 1 and "q" not in stack.tensordicts[1]


def test_select_out_keys_and_selected_out_keys():
    mods = [Mod(lambda x: x + 1, in_keys=["a"], out_keys=["b"]), Mod(lambda x: x + 1, in_keys=["b"], out_keys=["c"])]
    seq = Seq(*mods, selected_out_keys=["c"])
    td = seq(TensorDict(a=torch.zeros(()), e=torch.zeros(())))
    assert sorted(td.keys()) == ["a", "c", "e"] and td["c"] == 2
    assert seq(a=torch.zeros(())) == 2
    seq.reset_out_keys()
    assert sorted(seq(TensorDict(a=torch.zeros(()))).keys()) == ["a", "b", "c"]
    assert seq.select_out_keys("b") is seq and seq.out_keys == ["b"]
    assert sorted(seq(TensorDict(a=torch.zeros(()))).keys()) == ["a", "b"]
    with pytest.raises(ValueError, match="'zz'"):
        seq.select_out_keys("zz")
    with pytest.raises(ValueError, match="'zz'"):
        Seq(*mods, selected_out_keys=["zz"])


def test_inplace_and_tensordict_out():
    mods = [Mod(lambda x: x + 1, in_keys=["a"], out_keys=["b"]), Mod(lambda x: x + 1, in_keys=["b"], out_keys=["c"])]
    td = TensorDict(a=torch.zeros(3), batch_size=[3])
    new = Seq(*mods, inplace=False)(td)
    assert sorted(new.keys()) == ["b", "c"] and "b" not in td and new.batch_size == torch.Size([])
    empty = Seq(*mods, inplace="empty")(td)
    assert sorted(empty.keys()) == ["b", "c"] and empty.batch_size == torch.Size([3])
    dest = TensorDict({}, batch_size=[3])
    assert Seq(*mods)(td, tensordict_out=dest) is dest and "b" not in td
    torch.testing.assert_close(dest["c"], torch.full((3,), 2.0))


def test_select_subsequence():
    m = [
        Mod(abs, in_keys=["a"], out_keys=["b"]),
        Mod(abs, in_keys=["b"], out_keys=["c"]),
        Mod(abs, in_keys=["c"], out_keys=["d"]),
        Mod(abs, in_keys=["a"], out_keys=["e"]),
    ]
    seq = Seq(*m)
    assert list(seq.select_subsequence(in_keys=["c"])) == [m[2]]
    assert list(seq.select_subsequence(out_keys=["c"])) == m[:2]
    assert list(seq.select_subsequence(out_keys=["e"])) == [m[3]]
    nested = Seq(m[0], Seq(m[1], m[2]), m[3])
    sub = nested.select_subsequence(in_keys=["b"])
    assert len(sub) == 1 and list(sub[0]) == [m[1], m[2]]
    with pytest.raises(ValueError, match="no module left"):
        seq.select_subsequence(in_keys=["zz"])


def test_kwargs_rejected_and_parameters_shared():
    seq, l1, l2 = _chain()
    with pytest.raises(RuntimeError, match="keyword"):
        seq(TensorDict(obs=torch.zeros(3)), foo=1)
    assert set(map(id, seq.parameters())) == set(map(id, [*l1.parameters(), *l2.parameters()]))


def test_hooks_on_steps_still_run():
    seq, _, _ = _chain()
    calls = []
    seq[1].register_forward_hook(lambda mod, args, out: calls.append(1))
    seq(TensorDict(obs=torch.zeros(2, 3), batch_size=[2]))
    assert calls == [1]


def test_repr_lists_steps():
    seq, _, _ = _chain()
    text = repr(seq)
    assert text.startswith("TensorDictSequential(\n    module=ModuleList(") and "in_keys=['obs']" in text


def test_overhead_ratio():
    """A 3-step sequence of identities costs at most ~3x one identity module (loose bound for CI noise)."""
    import timeit

    ident = lambda x: x  # noqa: E731
    one = Mod(ident, in_keys=["a"], out_keys=["b"])
    three = Seq(
        Mod(ident, in_keys=["a"], out_keys=["b"]),
        Mod(ident, in_keys=["b"], out_keys=["c"]),
        Mod(ident, in_keys=["c"], out_keys=["d"]),
    )
    td = TensorDict(a=torch.zeros(2), batch_size=[2])
    t1 = min(timeit.repeat(lambda: one(td), number=2000, repeat=5))
    t3 = min(timeit.repeat(lambda: three(td), number=2000, repeat=5))
    assert t3 < 4.5 * t1


def test_setitem_delitem_recompute_keys():
    seq = Seq(Mod(torch.neg, in_keys=["a"], out_keys=["b"]), Mod(torch.neg, in_keys=["b"], out_keys=["c"]))
    seq[1] = Mod(torch.abs, in_keys=["b"], out_keys=["d"])
    assert seq.out_keys == ["b", "d"]
    assert seq(TensorDict(a=torch.ones(())))["d"] == 1
    del seq[0]
    assert len(seq) == 1 and seq.in_keys == ["b"] and seq.out_keys == ["d"]
    named = Seq({"x": Mod(torch.neg, in_keys=["a"], out_keys=["b"])})
    named["y"] = lambda td: td.set("z", td["b"] * 2)
    assert named(TensorDict(a=torch.ones(())))["z"] == -2


def test_tensor_function_chains_the_steps_like_a_call():
    l1, l2 = nn.Linear(3, 4), nn.Linear(4, 2)
    seq = Seq(
        Mod(l1, in_keys=["x"], out_keys=["h"]),
        Mod(lambda h, x: (l2(h), h.sum(-1) + x.sum(-1)), in_keys=["h", "x"], out_keys=["y", "_"]),
        Mod(torch.neg, in_keys=["y"], out_keys=[("out", "neg")]),
    )
    td = TensorDict(x=torch.randn(5, 3), batch_size=[5])
    expected = seq(td.clone())
    values = seq.tensor_function(1)(td["x"])
    assert seq.out_keys == ["h", "y", "_", ("out", "neg")]
    assert len(values) == 4
    for key, value in zip(seq.out_keys, values):
        if key != "_":
            assert torch.equal(value, expected[key]), key
    torch.testing.assert_close(values[2], l1(td["x"]).sum(-1) + td["x"].sum(-1))  # the discarded output
    torch.testing.assert_close(values[3], -l2(l1(td["x"])))


def test_tensor_function_of_a_sequence_is_none_when_a_call_does_more():
    def seq(**kwargs):
        return Seq(
            Mod(torch.neg, in_keys=["x"], out_keys=["y"]), Mod(torch.exp, in_keys=["y"], out_keys=["z"]), **kwargs
        )

    assert seq().tensor_function() is not None
    assert seq(partial_tolerant=True).tensor_function() is None
    assert seq(selected_out_keys=["z"]).tensor_function() is None
    hooked = seq()
    handle = hooked[1].register_forward_hook(lambda *args: None)  # a step's hook
    assert hooked.tensor_function() is None
    handle.remove()
    handle = hooked.register_forward_pre_hook(lambda *args: None)  # the sequence's own
    assert hooked.tensor_function() is None
    handle.remove()
    assert hooked.tensor_function() is not None
    assert (
        Seq(Mod(torch.neg, in_keys=["x"], out_keys=["y"]), lambda td: td).tensor_function() is None
    )  # a plain callable step


def test_tensor_function_of_a_sequence_follows_its_steps():
    first = Mod(lambda x: x + 1, in_keys=["x"], out_keys=["y"])
    seq = Seq(first, Mod(lambda y: 2 * y, in_keys=["y"], out_keys=["z"]))
    run = seq.tensor_function()
    assert seq.tensor_function() is run
    assert run(torch.tensor(1.0)) == (torch.tensor(2.0), torch.tensor(4.0))
    first.module = lambda x: x - 1  # a step changed: the chain is made again
    assert seq.tensor_function()(torch.tensor(1.0)) == (torch.tensor(0.0), torch.tensor(0.0))


def test_pickles_and_copies_run_as_the_original():
    # the fast path keeps each step's undecorated forward, which pickle cannot name: a pickle leaves
    # them out and the loaded sequence finds them again
    import copy
    import pickle

    seq, _, _ = _chain()
    td = TensorDict(obs=torch.randn(5, 3), batch_size=[5])
    expected = seq(td.clone())["action"]
    for twin in (pickle.loads(pickle.dumps(seq)), copy.deepcopy(seq)):
        assert twin._raw == seq._raw and all(raw is not None for raw in twin._raw)
        torch.testing.assert_close(twin(td.clone())["action"], expected)
