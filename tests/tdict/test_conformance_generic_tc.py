"""Behaviours matched to tensordict's generic and tensor-class suites: ``split_keys`` pruning,
``stack(contiguous=)``, ``from_modules(expand_identical=True)``, locked ``data``/``grad``,
tensor-class signatures, argument-count errors, ``__post_init__`` on wrapping, and ``tensor_only``
annotations (legacy typed tensors, ``TensorDict[str, Tensor]``)."""

from __future__ import annotations

import inspect
from collections import UserDict

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import tdict
from tdict import TensorClass, TensorDict, tensorclass


# ----------------------------------------------------------------------------------- split_keys
def test_split_keys_inplace_prunes_emptied_subcollections():
    td = TensorDict({"a": 0, "b": {"c": 1}, "d": {"e": 2, "f": 3}, "g": 4})
    td0, td1, rest = td.split_keys([("b", "c")], [("d", "e"), ("d", "f")], inplace=True)
    assert rest is td
    assert set(td.keys()) == {"a", "g"}
    assert td0["b", "c"].item() == 1
    assert td1["d", "e"].item() == 2 and td1["d", "f"].item() == 3


def test_split_keys_reproduce_struct_keeps_empty_subcollections():
    td = TensorDict({"a": 0, "d": {"e": 2}})
    _, rest = td.split_keys([("d", "e")], reproduce_struct=True)
    assert "d" in rest and rest["d"].is_empty()
    assert set(td.keys(True, True)) == {"a", ("d", "e")}  # not in place: td untouched


# ----------------------------------------------------------------------------------- stack
@pytest.mark.parametrize("contiguous", [None, True, False])
def test_stack_accepts_contiguous_and_is_dense(contiguous):
    tds = [TensorDict(a=torch.full((4, 5), float(i)), batch_size=[4, 5]) for i in range(3)]
    out = tdict.stack(tds, 2, contiguous=contiguous)
    assert type(out) is TensorDict
    assert out.batch_size == torch.Size([4, 5, 3])
    assert out["a"][..., 2].eq(2).all()
    assert out.permute(2, 1, 0).batch_size == torch.Size([3, 5, 4])


# ----------------------------------------------------------------------------------- from_modules
def test_from_modules_expand_identical_shares_the_tensor():
    shared = nn.Linear(3, 3)
    modules = [nn.Sequential(shared, nn.Linear(3, 4)) for _ in range(3)]
    params = TensorDict.from_modules(*modules, expand_identical=True)
    w0 = params["0", "weight"]
    assert not isinstance(w0, nn.Parameter)
    assert w0.shape == torch.Size([3, 3, 3])
    assert w0.data_ptr() == shared.weight.data_ptr()
    assert isinstance(params["1", "weight"], nn.Parameter)
    assert params["1", "weight"].shape == torch.Size([3, 4, 3])
    w0.sum().backward()  # the gradient reaches the shared parameter, once per module
    assert torch.equal(shared.weight.grad, torch.full((3, 3), 3.0))


# ----------------------------------------------------------------------------------- data / grad
def test_data_and_grad_are_locked_with_their_source():
    td = TensorDict(
        a=torch.randn(3, 4, requires_grad=True), b={"c": torch.randn(3, 4, 5, requires_grad=True)}, batch_size=[3, 4]
    )
    (td["a"].sum() + td["b", "c"].sum()).backward()
    assert not td.grad.is_locked and not td.data.is_locked
    td.lock_()
    grad, data = td.grad, td.data
    assert grad.is_locked and data.is_locked
    assert grad["b", "c"].shape == torch.Size([3, 4, 5])
    assert torch.equal(grad["a"], torch.ones(3, 4))
    assert data["a"].data_ptr() == td["a"].data_ptr()


def test_grad_is_none_without_gradients_even_when_locked():
    td = TensorDict(a=torch.zeros(2, requires_grad=True), batch_size=[2]).lock_()
    assert td.grad is None


# ----------------------------------------------------------------------------------- tensor classes
@tensorclass
class _Sig:
    X: torch.Tensor
    y: torch.Tensor
    z: str


def test_tensorclass_signature_lists_fields_then_shape_keywords():
    sig = inspect.signature(_Sig)
    assert list(sig.parameters) == ["X", "y", "z", "batch_size", "device", "names"]
    assert sig.parameters["batch_size"].kind is inspect.Parameter.KEYWORD_ONLY


def test_tensorclass_signature_with_defaults_and_user_init():
    class WithDefaults(TensorClass):
        a: torch.Tensor
        b: torch.Tensor | None = None
        c: torch.Tensor = None

    params = inspect.signature(WithDefaults).parameters
    assert list(params) == ["a", "b", "c", "batch_size", "device", "names"]
    assert params["a"].default is inspect.Parameter.empty and params["b"].default is None

    class Custom(TensorClass):
        a: torch.Tensor

        def __init__(self, value, scale=2):
            self.a = value * scale

    assert list(inspect.signature(Custom).parameters) == ["value", "scale"]
    assert torch.equal(Custom(torch.ones(2)).a, torch.full((2,), 2.0))


@settings(max_examples=20, deadline=None)
@given(n_missing=st.integers(1, 3))
def test_tensorclass_missing_arguments_error(n_missing):
    given_fields = {"X": torch.zeros(2), "y": torch.zeros(2), "z": "s"}
    kwargs = dict(list(given_fields.items())[: 3 - n_missing])
    word = "argument" if n_missing == 1 else "arguments"
    with pytest.raises(TypeError, match=f"missing {n_missing} required positional {word}"):
        _Sig(**kwargs, batch_size=[2])


def test_tensorclass_too_many_positional_arguments_counts_self():
    with pytest.raises(TypeError, match="takes 4 positional arguments but 5 were given"):
        _Sig(torch.zeros(2), torch.zeros(2), "a", "extra", batch_size=[2])


def test_post_init_runs_when_wrapping_a_tensordict():
    calls = []

    @tensorclass
    class Checked:
        X: torch.Tensor

        def __post_init__(self):
            calls.append(self.X.shape)
            assert (self.X > 0).all()

    ok = Checked._from_tensordict(TensorDict(X=torch.ones(3), batch_size=[3]))
    assert ok.X.shape == torch.Size([3]) and calls == [torch.Size([3])]
    with pytest.raises(AssertionError):
        Checked._from_tensordict(TensorDict(X=-torch.ones(2), batch_size=[2]))
    with pytest.raises(AssertionError):
        Checked.from_tensordict(TensorDict(X=-torch.ones(2), batch_size=[2]))


def test_tensor_only_accepts_legacy_typed_tensor_annotations():
    class Typed(TensorClass["tensor_only"]):
        a: torch.IntTensor
        b: torch.LongTensor | None = None

    t = Typed(a=torch.zeros(2, dtype=torch.int32), batch_size=[2])
    assert t.a.dtype == torch.int32 and t.b is None

    with pytest.raises(TypeError, match="tensor_only requires types"):

        class Bad(TensorClass["tensor_only"]):
            a: torch.IntTensor | str


def test_tensordict_generic_alias_and_tensor_only_mapping_fields():
    alias = TensorDict[str, torch.Tensor]
    assert alias.__origin__ is TensorDict

    @tensorclass(tensor_only=True)
    class Generic:
        a: torch.Tensor
        b: TensorDict[str, torch.Tensor]
        c: TensorDict[str, torch.Tensor] | None = None

    g = Generic(a=torch.zeros(()), b=UserDict({"t": torch.ones(())}), c={"t": torch.zeros(3)})
    assert isinstance(g.b, TensorDict) and isinstance(g.c, TensorDict)
    assert g.b["t"].item() == 1.0 and g.c["t"].shape == torch.Size([3])
