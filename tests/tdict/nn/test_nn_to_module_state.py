"""TensorDict.to_module(preserve_module_state=...): what stays registered, what gradients reach."""

import warnings

import pytest
import torch
from torch import nn

from tdict import TensorDict
from tdict.nn import TensorDictParams


def _linear():
    torch.manual_seed(0)
    m = nn.Linear(3, 2)
    m.weight.requires_grad_(False)
    return m


def test_default_keeps_parameters_registered_with_their_requires_grad():
    m = _linear()
    keys = list(m.state_dict())
    new_w, new_b = torch.full((2, 3), 2.0), torch.full((2,), -1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TensorDict(weight=new_w, bias=new_b).to_module(m)
    assert list(m.state_dict()) == keys
    assert isinstance(m.weight, nn.Parameter) and isinstance(m.bias, nn.Parameter)
    assert m.weight.requires_grad is False and m.bias.requires_grad is True  # the module's, not the tensors'
    assert m.weight.data_ptr() == new_w.data_ptr()  # wrapped, not copied
    x = torch.ones(4, 3)
    torch.testing.assert_close(m(x), torch.full((4, 2), 2.0 * 3 - 1.0))


def test_false_swaps_the_very_tensors_in():
    m = _linear()
    new_w, new_b = torch.zeros(2, 3), torch.zeros(2)
    TensorDict(weight=new_w, bias=new_b).to_module(m, preserve_module_state=False)
    assert m.weight is new_w and m.bias is new_b
    assert "weight" not in m.state_dict() and list(m.parameters()) == []


def test_none_is_deprecated_and_behaves_like_false():
    m = _linear()
    new_w = torch.zeros(2, 3)
    with pytest.warns(FutureWarning, match=r"preserve_module_state=None\) is deprecated"):
        TensorDict(weight=new_w).to_module(m, preserve_module_state=None)
    assert m.weight is new_w


def test_bad_preserve_module_state_names_the_argument():
    with pytest.raises(TypeError, match=r"preserve_module_state must be True, False or None, got 'yes'"):
        TensorDict(weight=torch.zeros(2, 3)).to_module(_linear(), preserve_module_state="yes")


def test_a_tensor_requiring_grad_is_not_wrapped_so_gradients_reach_it():
    m = nn.Linear(3, 2)
    params = TensorDict.from_module(m).apply(lambda t: t.detach().clone().requires_grad_())
    x = torch.arange(12.0).reshape(4, 3)
    with params.to_module(m):
        assert m.weight is params["weight"]
        m(x).sum().backward()
    # d(sum(x @ W.T + b))/dW = ones(2, 1) * x.sum(0); /db = 4
    torch.testing.assert_close(params["weight"].grad, x.sum(0).expand(2, 3))
    torch.testing.assert_close(params["bias"].grad, torch.full((2,), 4.0))
    assert m.weight.grad is None


def test_a_parameter_swapped_into_a_buffer_slot_stays_a_buffer_on_the_same_storage():
    m = nn.Module()
    m.register_buffer("stat", torch.ones(3))
    value = nn.Parameter(torch.zeros(3))
    with TensorDict(stat=value).to_module(m):
        assert not isinstance(m.stat, nn.Parameter)
        assert [n for n, _ in m.named_buffers()] == ["stat"] and list(m.parameters()) == []
        assert m.stat.data_ptr() == value.data_ptr()
        torch.testing.assert_close(m.stat, torch.zeros(3))
    torch.testing.assert_close(m.stat, torch.ones(3))


def test_context_manager_restores_the_original_objects():
    m = _linear()
    weight, bias = m.weight, m.bias
    with TensorDict(weight=torch.zeros(2, 3), bias=torch.zeros(2)).to_module(m):
        assert m.weight is not weight
    assert m.weight is weight and m.bias is bias
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]


def test_to_module_into_tensordict_params_swaps_its_whole_content():
    params = TensorDictParams(TensorDict(a=torch.ones(3), b=TensorDict(c=torch.ones(2))))
    zeros = TensorDict(a=torch.zeros(3), b=TensorDict(c=torch.zeros(2)))
    with zeros.to_module(params):
        torch.testing.assert_close(params["a"], torch.zeros(3))
        torch.testing.assert_close(params["b", "c"], torch.zeros(2))
    torch.testing.assert_close(params["a"], torch.ones(3))
    # nested in a module: from_module hands back the TensorDictParams itself, which follows the swap
    holder = nn.Module()
    holder.params = params
    tree = TensorDict.from_module(holder)
    assert tree["params"] is params
    with TensorDict(params=zeros).to_module(holder):
        torch.testing.assert_close(tree["params", "a"], torch.zeros(3))
    torch.testing.assert_close(tree["params", "a"], torch.ones(3))
