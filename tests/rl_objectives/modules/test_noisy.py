"""NoisyLinear / NoisyLazyLinear / reset_noise against the factorised-noise formula written here."""

import math

import pytest
import torch
from rl_objectives.modules import MLP, NoisyLazyLinear, NoisyLinear, reset_noise
from tdict.nn import InteractionType, set_interaction_type
from torch import nn


def f(x):
    return x.sign() * x.abs().sqrt()


def noisy_reference(layer, x):
    """The layer's output from its mu, sigma and the noise buffers (epsilon_W = f(e_out) f(e_in)^T)."""
    assert layer.bias_epsilon is not None
    w = layer.weight_mu + layer.weight_sigma * layer.weight_epsilon
    b = layer.bias_mu + layer.bias_sigma * layer.bias_epsilon
    return x @ w.T + b


def test_eval_mode_uses_the_mean_weights():
    layer = NoisyLinear(5, 3, use_exploration_type=False).eval()
    x = torch.randn(4, 5)
    torch.testing.assert_close(layer(x), x @ layer.weight_mu.T + layer.bias_mu)
    assert layer.weight is layer.weight_mu and layer.bias is layer.bias_mu


def test_train_mode_uses_the_factorised_noise():
    layer = NoisyLinear(5, 3, use_exploration_type=False).train()
    x = torch.randn(4, 5)
    torch.testing.assert_close(layer(x), noisy_reference(layer, x))
    # the noise is factorised: a rank-1 outer product of f(e_out) and f(e_in), the bias noise is f(e_out)
    eps, eps_b = layer.weight_epsilon, layer.bias_epsilon
    assert eps_b is not None
    assert torch.linalg.matrix_rank(eps) == 1
    torch.testing.assert_close(eps, torch.outer(eps_b, eps[0] / eps_b[0]))


def test_noise_is_f_of_standard_normals():
    layer = NoisyLinear(4, 3)
    torch.manual_seed(7)
    layer.reset_noise()
    torch.manual_seed(7)
    e_in, e_out = torch.randn(4), torch.randn(3)
    torch.testing.assert_close(layer.weight_epsilon, torch.outer(f(e_out), f(e_in)))
    torch.testing.assert_close(layer.bias_epsilon, f(e_out))


def test_interaction_type_decides_by_default():
    layer = NoisyLinear(5, 3)  # use_exploration_type=True (TorchRL 0.14's default)
    x = torch.randn(4, 5)
    mean = x @ layer.weight_mu.T + layer.bias_mu
    torch.testing.assert_close(layer(x), mean)  # none set: the mean weights, train mode or not
    with set_interaction_type(InteractionType.RANDOM):
        torch.testing.assert_close(layer(x), noisy_reference(layer, x))
    for kind in (InteractionType.DETERMINISTIC, InteractionType.MODE, InteractionType.MEAN):
        with set_interaction_type(kind):
            torch.testing.assert_close(layer(x), mean)


def test_initialisation():
    layer = NoisyLinear(16, 4, std_init=0.2)
    bound = 1 / math.sqrt(16)
    assert layer.weight_mu.abs().max() <= bound and layer.bias_mu.abs().max() <= bound
    torch.testing.assert_close(layer.weight_sigma, torch.full((4, 16), 0.2 / 4))
    torch.testing.assert_close(layer.bias_sigma, torch.full((4,), 0.2 / 2))
    assert NoisyLinear(3, 2).std_init == 0.5  # TorchRL's default
    assert {n for n, _ in layer.named_parameters()} == {"weight_mu", "weight_sigma", "bias_mu", "bias_sigma"}
    assert {n for n, _ in layer.named_buffers()} == {"weight_epsilon", "bias_epsilon"}
    with pytest.raises(ValueError, match="std_init"):
        NoisyLinear(3, 2, std_init=-1.0)


def test_reset_noise_changes_the_noise_and_the_output():
    layer = NoisyLinear(5, 3, use_exploration_type=False)
    x = torch.randn(4, 5)
    assert layer.bias_epsilon is not None
    before_w, before_b, before_y = layer.weight_epsilon.clone(), layer.bias_epsilon.clone(), layer(x)
    torch.testing.assert_close(layer(x), before_y)  # the noise is fixed between resets
    layer.reset_noise()
    assert not torch.equal(layer.weight_epsilon, before_w) and not torch.equal(layer.bias_epsilon, before_b)
    assert not torch.allclose(layer(x), before_y)


def test_reset_noise_helper_reaches_every_noisy_layer():
    net = MLP(3, 2, num_cells=[8, 8], layer_class=NoisyLinear)
    noisy = [m for m in net.modules() if isinstance(m, NoisyLinear)]
    assert len(noisy) == 3
    before = [m.weight_epsilon.clone() for m in noisy]
    reset_noise(net)
    assert all(not torch.equal(b, m.weight_epsilon) for b, m in zip(before, noisy))
    before = [m.weight_epsilon.clone() for m in noisy]
    net.apply(reset_noise)  # TorchRL's usage
    assert all(not torch.equal(b, m.weight_epsilon) for b, m in zip(before, noisy))
    reset_noise(nn.Linear(2, 2))  # no noisy layer: nothing to do


def test_gradients_reach_mu_and_sigma():
    layer = NoisyLinear(5, 3, use_exploration_type=False)
    layer(torch.randn(4, 5)).pow(2).sum().backward()
    for name in ("weight_mu", "weight_sigma", "bias_mu", "bias_sigma"):
        grad = getattr(layer, name).grad
        assert grad is not None and grad.abs().sum() > 0, name
    # the sigma gradient is the mu gradient times the noise (d w / d sigma = epsilon)
    mu_grad = layer.weight_mu.grad
    assert mu_grad is not None
    torch.testing.assert_close(layer.weight_sigma.grad, mu_grad * layer.weight_epsilon)
    assert not layer.weight_epsilon.requires_grad


def test_no_bias():
    layer = NoisyLinear(5, 3, bias=False, use_exploration_type=False)
    x = torch.randn(2, 5)
    assert layer.bias is None and layer.bias_epsilon is None
    torch.testing.assert_close(layer(x), x @ (layer.weight_mu + layer.weight_sigma * layer.weight_epsilon).T)
    layer.reset_noise()


def test_lazy_layer_materialises_into_noisy_linear():
    layer = NoisyLazyLinear(3, std_init=0.3, use_exploration_type=False)
    reset_noise(layer)  # before materialisation: a no-op
    x = torch.randn(4, 6)
    y = layer(x)
    assert type(layer) is NoisyLinear and layer.in_features == 6 and y.shape == (4, 3)
    torch.testing.assert_close(y, noisy_reference(layer, x))
    torch.testing.assert_close(layer.weight_sigma, torch.full((3, 6), 0.3 / math.sqrt(6)))
    assert layer.weight_epsilon.abs().sum() > 0
    no_bias = NoisyLazyLinear(2, bias=False)
    assert no_bias(torch.randn(1, 4)).shape == (1, 2) and no_bias.bias is None


def test_state_dict_round_trip():
    a, b = NoisyLinear(4, 2), NoisyLinear(4, 2)
    b.load_state_dict(a.state_dict())
    x = torch.randn(3, 4)
    with set_interaction_type(InteractionType.RANDOM):
        torch.testing.assert_close(a(x), b(x))


def test_compiled_forward_equals_eager():
    torch.manual_seed(0)
    layer = NoisyLinear(5, 3)
    x = torch.randn(4, 5)
    compiled = torch.compile(layer, fullgraph=True, backend="eager")
    for mode in (True, False):  # factorised noise in training, the mean weights in evaluation
        layer.train(mode)
        torch.testing.assert_close(compiled(x), layer(x))
    torch.compiler.reset()
