"""hold_out_net / hold_out_params: a network's outputs carry no gradient to its parameters."""

import pytest
import torch
from torch import nn

from rl_objectives import hold_out_net, hold_out_params
from tdict import TensorDict


def test_hold_out_net_stops_gradients_to_the_parameters_only():
    torch.manual_seed(0)
    net = nn.Linear(3, 1)
    x = torch.randn(4, 3, requires_grad=True)
    with hold_out_net(net) as held:
        assert held is net
        assert not net(torch.randn(4, 3)).requires_grad
        out = net(x)
    assert net.weight.requires_grad and net.bias.requires_grad
    out.sum().backward()
    assert net.weight.grad is None
    torch.testing.assert_close(x.grad, net.weight.detach().expand(4, 3))  # d(sum xW^T)/dx


def test_hold_out_net_restores_exactly_what_it_switched_off():
    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    net[0].weight.requires_grad_(False)  # frozen by the user: stays frozen
    with hold_out_net(net):
        with hold_out_net(net):  # nested
            assert not any(p.requires_grad for p in net.parameters())
        assert not any(p.requires_grad for p in net.parameters())
    assert [p.requires_grad for p in net.parameters()] == [False, True, True, True]
    with pytest.raises(RuntimeError, match="boom"):
        with hold_out_net(net):
            raise RuntimeError("boom")
    assert [p.requires_grad for p in net.parameters()] == [False, True, True, True]
    with hold_out_net(nn.Sequential()):  # no parameters
        pass

    @hold_out_net(net)
    def forward(x):
        return net(x)

    assert not forward(torch.ones(2)).requires_grad and net[1].weight.requires_grad
    with pytest.raises(TypeError, match="network must be an nn.Module, got list"):
        hold_out_net([1])


def test_hold_out_params_gives_detached_views():
    net = nn.Linear(2, 1)
    with hold_out_params(net.parameters()) as (weight, bias):
        assert not weight.requires_grad and weight.data_ptr() == net.weight.data_ptr()
    params = TensorDict.from_module(net)
    with hold_out_params(params) as held:
        assert not held["weight"].requires_grad and held["weight"].data_ptr() == net.weight.data_ptr()
