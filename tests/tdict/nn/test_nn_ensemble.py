"""EnsembleModule: the vmapped call equals a Python loop over the stacked parameter sets."""

import pytest
import torch
from torch import nn

from tdict import TensorDict
from tdict.nn import EnsembleModule, TensorDictModule


def _mlp():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def test_tensordict_module_ensemble_matches_loop():
    torch.manual_seed(0)
    ens = EnsembleModule(TensorDictModule(_mlp(), in_keys=["obs"], out_keys=["action"]), num_copies=3)
    assert ens.in_keys == ["obs"] and ens.out_keys == ["action"]
    assert ens.params_td.batch_size == torch.Size([3])
    td = TensorDict(obs=torch.randn(5, 4), batch_size=[5])
    out = ens(td)
    assert out.batch_size == torch.Size([3, 5]) and out["action"].shape == (3, 5, 2)
    ref = _mlp()
    for i in range(3):
        with ens.params_td[i]["module"].to_module(ref):
            torch.testing.assert_close(out["action"][i], ref(td["obs"]))
    assert not torch.allclose(out["action"][0], out["action"][1])  # copies are re-initialised


def test_plain_module_expand_input_false_and_grads():
    torch.manual_seed(0)
    ens = EnsembleModule(nn.Linear(4, 2), num_copies=3, expand_input=False)
    x = torch.randn(3, 5, 4)
    y = ens(x)
    w, b = ens.params_td["weight"], ens.params_td["bias"]
    for i in range(3):
        torch.testing.assert_close(y[i], x[i] @ w[i].T + b[i])
    y.pow(2).sum().backward()
    gw = torch.stack([torch.autograd.grad((x[i] @ w[i].T + b[i]).pow(2).sum(), w)[0][i] for i in range(3)])
    torch.testing.assert_close(w.grad, gw)
    with pytest.raises(ValueError, match="leading dim of 3"):
        ens(torch.randn(2, 5, 4))


def test_ensemble_parameters_are_trainable_and_template_is_hidden():
    ens = EnsembleModule(nn.Linear(4, 2), num_copies=2)
    names = [n for n, _ in ens.named_parameters()]
    assert names == ["params_td.weight", "params_td.bias"]
    assert ens.module.weight.device.type == "meta"
    opt = torch.optim.SGD(ens.parameters(), lr=1.0)
    before = ens.params_td["weight"].detach().clone()
    ens(torch.randn(3, 4)).sum().backward()
    opt.step()
    assert not torch.equal(before, ens.params_td["weight"].detach())
    with pytest.raises(ValueError, match="num_copies"):
        EnsembleModule(nn.Linear(4, 2), num_copies=0)
