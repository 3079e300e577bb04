"""DuelingMlpDQNet / DuelingCnnDQNet: Q = V + A - mean(A) from the heads, shapes, defaults."""

import torch
from rl_objectives.modules import ConvNet, DuelingCnnDQNet, DuelingMlpDQNet, MLP, NoisyLinear, QValueActor
from tdict import TensorDict
from tdict.specs import OneHot
from torch import nn


def by_hand(net, x):
    h = net.features(x)
    a, v = net.advantage(h), net.value(h)
    return v + a - a.mean(-1, keepdim=True), a, v


def test_mlp_dueling_combines_the_heads():
    net = DuelingMlpDQNet(
        4, mlp_kwargs_feature={"num_cells": [16], "out_features": 8}, mlp_kwargs_output={"num_cells": 8}
    )
    x = torch.randn(5, 3)
    q = net(x)
    expected, a, v = by_hand(net, x)
    assert q.shape == (5, 4) and a.shape == (5, 4) and v.shape == (5, 1)
    torch.testing.assert_close(q, expected)
    # the advantages are centred: the mean Q over actions is V
    torch.testing.assert_close(q.mean(-1, keepdim=True), v)


def test_mlp_dueling_defaults_follow_torchrl():
    net = DuelingMlpDQNet(6)
    assert isinstance(net.features, MLP) and net.features.num_cells == [256, 256]
    assert net.advantage.num_cells == [512] and net.value.num_cells == [512]
    assert any(isinstance(m, nn.ELU) for m in net.features) and isinstance(net.features[-1], nn.ELU)
    assert net(torch.randn(2, 7, 3)).shape == (2, 7, 6)  # lazy first layers, any leading dims
    assert net.out_features == 6 and net.out_features_value == 1


def test_cnn_dueling_combines_the_heads():
    net = DuelingCnnDQNet(
        5, cnn_kwargs={"num_cells": [4, 4], "kernel_sizes": 3, "strides": 2}, mlp_kwargs={"num_cells": 16}
    )
    x = torch.randn(2, 3, 3, 12, 12)  # two leading dims
    q = net(x)
    expected, a, v = by_hand(net, x)
    assert q.shape == (2, 3, 5) and v.shape == (2, 3, 1)
    torch.testing.assert_close(q, expected)
    torch.testing.assert_close(q.mean(-1, keepdim=True), v)


def test_cnn_dueling_defaults_follow_torchrl():
    net = DuelingCnnDQNet(3)
    assert isinstance(net.features, ConvNet) and net.features.num_cells == [32, 64, 64]
    assert net(torch.randn(1, 4, 84, 84)).shape == (1, 3)  # lazy first conv: 4 input channels
    convs = [m for m in net.features if isinstance(m, nn.Conv2d)]
    assert [c.stride for c in convs] == [(4, 4), (2, 2), (1, 1)]
    assert [c.kernel_size for c in convs] == [(8, 8), (4, 4), (3, 3)]


def test_value_head_width_and_zero_biases():
    net = DuelingMlpDQNet(
        4,
        out_features_value=4,
        mlp_kwargs_feature={"in_features": 3, "num_cells": [8], "out_features": 8},
        mlp_kwargs_output={"in_features": 8, "num_cells": 8},
    )
    biases = [m.bias for m in net.modules() if isinstance(m, nn.Linear)]
    assert biases and all(torch.equal(b, torch.zeros_like(b)) for b in biases)  # TorchRL zeroes them
    x = torch.randn(3, 3)
    expected, _, v = by_hand(net, x)
    assert v.shape == (3, 4)
    torch.testing.assert_close(net(x), expected)


def test_noisy_dueling_in_a_q_value_actor():
    net = DuelingMlpDQNet(
        2,
        mlp_kwargs_feature={"in_features": 3, "num_cells": [8], "out_features": 8},
        mlp_kwargs_output={"in_features": 8, "num_cells": 8, "layer_class": NoisyLinear},
    )
    actor = QValueActor(net, spec=OneHot(2))
    td = actor(TensorDict(observation=torch.randn(4, 3), batch_size=[4]))
    assert td["action"].shape == (4, 2) and td["chosen_action_value"].shape == (4,)
    torch.testing.assert_close(td["action_value"], net(td["observation"]))


def test_compiled_forward_equals_eager():
    torch.manual_seed(0)
    mlp = DuelingMlpDQNet(
        4, mlp_kwargs_feature={"num_cells": [16], "out_features": 8}, mlp_kwargs_output={"num_cells": 8}
    )
    cnn = DuelingCnnDQNet(
        5, cnn_kwargs={"num_cells": [4, 4], "kernel_sizes": 3, "strides": 2}, mlp_kwargs={"num_cells": 16}
    )
    for net, x in ((mlp, torch.randn(5, 3)), (cnn, torch.randn(2, 3, 16, 16))):
        expected = net(x)  # (materialises the lazy layers first)
        torch.testing.assert_close(torch.compile(net, fullgraph=True, backend="eager")(x), expected)
    torch.compiler.reset()
