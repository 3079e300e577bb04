"""TensorDictModuleWrapper, reset_parameters_recursive (module and ensemble), strict / get_kwargs."""

import pytest
import torch
from torch import nn

from tdict import TensorDict, lazy_stack
from tdict.nn import EnsembleModule, TensorDictModule, TensorDictModuleWrapper, TensorDictSequential


def policy():
    return TensorDictModule(nn.Linear(3, 2), in_keys=["obs"], out_keys=["action"])


def test_wrapper_forwards_call_and_attributes():
    inner = policy()
    wrapped = TensorDictModuleWrapper(inner)
    td = TensorDict(obs=torch.randn(4, 3), batch_size=[4])
    expected = inner.module(td["obs"])
    out = wrapped(td.clone())
    assert torch.allclose(out["action"], expected)
    assert torch.allclose(wrapped(obs=td["obs"]), expected)  # the kwargs call form goes through too
    assert wrapped.in_keys == ["obs"] and wrapped.out_keys == ["action"] and wrapped.out_keys_source == ["action"]
    assert wrapped.module is inner.module and wrapped.inplace is True  # attribute access is forwarded
    assert wrapped.weight is inner.module.weight  # two levels: wrapper -> TensorDictModule -> Linear
    assert [p.data_ptr() for p in wrapped.parameters()] == [p.data_ptr() for p in inner.parameters()]
    with pytest.raises(AttributeError):
        wrapped.not_an_attribute
    seq = TensorDictSequential(wrapped, TensorDictModule(lambda a: a * 2, in_keys=["action"], out_keys=["double"]))
    assert seq.in_keys == ["obs"] and torch.allclose(seq(td.clone())["double"], expected * 2)


def test_wrapper_subclass_overrides_and_keys():
    class AddNoise(TensorDictModuleWrapper):
        def forward(self, tensordict):
            tensordict = self.td_module(tensordict)
            return tensordict.set("action", tensordict["action"] + 100.0)

    inner = TensorDictModule(lambda x: (x, x + 1), in_keys=["obs"], out_keys=["action", "other"])
    wrapped = AddNoise(inner)
    out = wrapped(TensorDict(obs=torch.zeros(2)))
    assert out["action"].tolist() == [100.0, 100.0] and out["other"].tolist() == [1.0, 1.0]
    wrapped.select_out_keys("action")
    assert wrapped.out_keys == ["action"] and inner.out_keys == ["action"]
    assert "other" not in wrapped(TensorDict(obs=torch.zeros(2))).keys()
    wrapped.reset_out_keys()
    assert wrapped.out_keys == ["action", "other"]
    with pytest.raises(TypeError):
        TensorDictModuleWrapper(lambda td: td)


def test_module_reset_parameters_recursive():
    mod = TensorDictModule(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)), in_keys=["a"], out_keys=["b"])
    old = [p.clone() for p in mod.parameters()]
    assert mod.reset_parameters_recursive() is None
    assert all((o != p).all() for o, p in zip(old, mod.parameters()))
    params = TensorDict.from_module(mod).detach().clone()
    snapshot = params.clone()
    kept = [p.clone() for p in mod.parameters()]
    fresh = mod.reset_parameters_recursive(params)
    assert (fresh["module", "0", "weight"] != snapshot["module", "0", "weight"]).all()
    assert torch.equal(fresh["module", "0", "weight"], params["module", "0", "weight"])  # reset in place
    assert fresh["module", "0", "weight"].requires_grad
    assert all(torch.equal(k, p) for k, p in zip(kept, mod.parameters()))  # the module is untouched
    with pytest.raises(RuntimeError, match="empty batch size"):
        mod.reset_parameters_recursive(TensorDict.from_modules(mod, mod))
    with pytest.warns(UserWarning, match="no parameters"):
        TensorDictModule(lambda a: a, in_keys=["a"], out_keys=["b"]).reset_parameters_recursive()


def test_ensemble_reset_parameters_recursive_independent_copies():
    ens = EnsembleModule(policy(), num_copies=3)
    w = ens.params_td["module", "weight"]
    before = w.detach().clone()
    out = ens.reset_parameters_recursive()
    assert out is ens.params_td
    after = ens.params_td["module", "weight"]
    assert after is w and isinstance(after, nn.Parameter)  # reset in place: optimizers keep their tensors
    assert (after != before).all()
    assert not torch.equal(after[0], after[1]) and not torch.equal(after[1], after[2])
    # the new values are the ones the forward uses
    td = TensorDict(obs=torch.randn(5, 3), batch_size=[5])
    bias = ens.params_td["module", "bias"]
    ref = torch.stack([td["obs"] @ after[i].detach().T + bias[i].detach() for i in range(3)])
    assert torch.allclose(ens(td)["action"], ref, atol=1e-6)
    # an external parameter TensorDict is reset copy by copy
    ext = TensorDict.from_modules(policy(), policy(), policy()).detach().clone()
    snapshot = ext.clone()
    assert ens.reset_parameters_recursive(ext) is ext
    assert (ext["module", "weight"] != snapshot["module", "weight"]).all()
    assert not torch.equal(ext["module", "weight"][0], ext["module", "weight"][1])


def test_strict_and_get_kwargs():
    mod = TensorDictModule(lambda a, b: a if b is None else a + b, in_keys=["a", "b"], out_keys=["c"], strict=False)
    assert mod(TensorDict(a=torch.ones(2), batch_size=[2]))["c"].tolist() == [1.0, 1.0]
    assert mod(TensorDict(a=torch.ones(2), b=torch.ones(2), batch_size=[2]))["c"].tolist() == [2.0, 2.0]
    strict = TensorDictModule(lambda a, b: a, in_keys=["a", "b"], out_keys=["c"])
    with pytest.raises(KeyError, match="'b' is missing"):
        strict(TensorDict(a=torch.ones(2), batch_size=[2]))
    ragged = lazy_stack([TensorDict(x=torch.ones(2)), TensorDict(x=torch.ones(3))])
    padded = TensorDictModule(lambda x: x.sum(-1), in_keys=["x"], out_keys=["s"], get_kwargs={"as_padded_tensor": True})
    assert padded(ragged)["s"].tolist() == [2.0, 3.0]
    padded.get_kwargs = {"as_padded_tensor": True, "padding_value": 1.0}  # attribute edits rebuild the call plan
    assert padded(ragged)["s"].tolist() == [3.0, 3.0]
