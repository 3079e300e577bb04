"""ValueNorm, PopArtValueNorm, RunningValueNorm, PercentileValueNorm (TorchRL 0.14.1's value normalisers).

Running statistics over random streams of batches against numpy (exact mean / population variance,
debiased EMAs written out as weighted sums, EMAs of numpy quantiles); batch-shaped values ``[B, T]``
read like TorchRL's ``[B, T, 1]``; PopArt's output-layer rescaling keeps the unnormalised outputs
across updates; bad arguments raise.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_objectives.modules import PercentileValueNorm, PopArtValueNorm, RunningValueNorm, ValueNorm
from torch import nn

SHAPES = [(1,), (2,), (2, 3)]


def stream(seed, tail, n_batches):
    """Batches ``[k, 3, *tail]`` of random sizes, scales and offsets (float64)."""
    rng = np.random.default_rng(seed)
    return [
        rng.normal(rng.uniform(-10, 10), rng.uniform(0.1, 20), size=(int(rng.integers(1, 6)), 3, *tail))
        for _ in range(n_batches)
    ]


def as_tensor(x):
    return torch.as_tensor(x, dtype=torch.float64)


def rows(x, tail):
    return x.reshape(-1, *tail)


@settings(max_examples=25)
@given(st.integers(0, 2**16), st.sampled_from(SHAPES), st.integers(1, 12))
def test_running_norm_is_the_exact_mean_and_population_variance(seed, tail, n_batches):
    norm = RunningValueNorm(shape=tail, epsilon=1e-12).double()
    seen = []
    for x in stream(seed, tail, n_batches):
        norm.update(as_tensor(x))
        seen.append(rows(x, tail))
        data = np.concatenate(seen)
        np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(norm.scale().numpy(), data.std(0), rtol=1e-9, atol=1e-10)
        assert float(norm.count) == len(data)
    y = np.random.default_rng(seed).normal(size=(4, *tail))
    np.testing.assert_allclose(norm.normalize(as_tensor(y)).numpy(), (y - data.mean(0)) / data.std(0), rtol=1e-8)
    np.testing.assert_allclose(norm.denormalize(norm.normalize(as_tensor(y))).numpy(), y, rtol=1e-10, atol=1e-10)


@settings(max_examples=25)
@given(st.integers(0, 2**16), st.sampled_from(SHAPES), st.integers(1, 12), st.sampled_from([0.0, 0.5, 0.9, 0.999]))
def test_popart_is_the_debiased_ema_of_mean_and_mean_of_squares(seed, tail, n_batches, beta):
    norm = PopArtValueNorm(shape=tail, beta=beta, epsilon=1e-12).double()
    means, squares = [], []
    for x in stream(seed, tail, n_batches):
        norm.update(as_tensor(x))
        means.append(rows(x, tail).mean(0))
        squares.append((rows(x, tail) ** 2).mean(0))
        n = len(means)
        weights = np.array([(1 - beta) * beta ** (n - 1 - i) for i in range(n)])  # the EMA of n batch means
        debias = weights.sum()  # = 1 - beta^n
        mean = np.tensordot(weights, np.stack(means), 1) / debias
        var = np.tensordot(weights, np.stack(squares), 1) / debias - mean**2
        std = np.sqrt(np.maximum(var, 1e-12))
        np.testing.assert_allclose(float(norm.debiasing_term), 1 - beta**n, rtol=1e-12)
        np.testing.assert_allclose(norm.scale().numpy(), std, rtol=1e-6, atol=1e-6)
    y = np.random.default_rng(seed).normal(size=(4, *tail))
    np.testing.assert_allclose(norm.normalize(as_tensor(y)).numpy(), (y - mean) / std, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(norm.denormalize(norm.normalize(as_tensor(y))).numpy(), y, rtol=1e-9, atol=1e-9)


def test_popart_first_update_gives_the_batch_statistics_and_fresh_norm_is_identity_like():
    norm = PopArtValueNorm()  # beta 0.99999: debiasing still makes the first update exact
    x = torch.tensor([1.0, 2.0, 3.0, 6.0])
    norm.update(x)
    torch.testing.assert_close(norm.denormalize(torch.zeros(1)), x.mean().reshape(1), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(norm.scale(), x.std(correction=0).reshape(1), rtol=1e-3, atol=1e-3)
    # before any update: debias is floored at epsilon, the statistics read 0 and the variance floor
    fresh = PopArtValueNorm(epsilon=1e-4)
    torch.testing.assert_close(fresh.scale(), torch.tensor([1e-2]))


@settings(max_examples=20)
@given(
    st.integers(0, 2**16),
    st.sampled_from(SHAPES),
    st.integers(1, 8),
    st.sampled_from([0.01, 0.3, 1.0]),
    st.booleans(),
    st.sampled_from([(0.05, 0.95), (0.0, 1.0), (0.25, 0.5)]),
)
def test_percentile_norm_is_an_ema_of_the_batch_quantiles(seed, tail, n_batches, rate, center, quantiles):
    norm = PercentileValueNorm(shape=tail, rate=rate, center=center, quantiles=quantiles, min_scale=0.5).double()
    low, high = np.zeros(tail), np.zeros(tail)
    for x in stream(seed, tail, n_batches):
        norm.update(as_tensor(x))
        q_low, q_high = np.quantile(rows(x, tail), quantiles, axis=0)  # linear interpolation, as torch.quantile
        low, high = low + rate * (q_low - low), high + rate * (q_high - high)
        np.testing.assert_allclose(norm.low.numpy(), low, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(norm.high.numpy(), high, rtol=1e-9, atol=1e-9)
    scale = np.maximum(high - low, 0.5)
    np.testing.assert_allclose(norm.scale().numpy(), scale, rtol=1e-9)
    y = np.random.default_rng(seed).normal(size=(4, *tail)) * 30
    expected = (y - low) / scale if center else y / scale
    np.testing.assert_allclose(norm.normalize(as_tensor(y)).numpy(), expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(norm.denormalize(norm.normalize(as_tensor(y))).numpy(), y, rtol=1e-9, atol=1e-9)


def test_percentile_min_scale_never_amplifies_small_returns():
    norm = PercentileValueNorm(rate=1.0)
    norm.update(torch.linspace(0.0, 0.1, 11))
    assert float(norm.scale()) == 1.0
    torch.testing.assert_close(norm.normalize(torch.tensor([0.05])), torch.tensor([0.05]))


@pytest.mark.parametrize("cls", [PopArtValueNorm, RunningValueNorm, PercentileValueNorm])
def test_batch_shaped_values_read_like_a_trailing_singleton_dim(cls):
    """This library's ``[B, T]`` values give the statistics TorchRL keeps for ``[B, T, 1]``."""
    flat, trailing = cls(), cls()
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        x = torch.randn(4, 7, generator=g) * 3 + 1
        flat.update(x)
        trailing.update(x.unsqueeze(-1))
    torch.testing.assert_close(flat.scale(), trailing.scale())
    y = torch.randn(4, 7, generator=g)
    out = flat.normalize(y)
    assert out.shape == (4, 7)  # the one-element statistics broadcast over the batch shape
    torch.testing.assert_close(out, trailing.normalize(y.unsqueeze(-1)).squeeze(-1))
    flat.update(torch.tensor(2.0))  # a single scalar target is one sample


@pytest.mark.parametrize("cls", [PopArtValueNorm, RunningValueNorm, PercentileValueNorm])
def test_statistics_are_buffers_in_the_state_dict_and_updates_carry_no_gradient(cls):
    norm = cls(shape=2)
    x = torch.randn(5, 2, requires_grad=True)
    norm.update(x)
    assert all(not b.requires_grad for b in norm.buffers())
    clone = cls(shape=2)
    clone.load_state_dict(norm.state_dict())
    torch.testing.assert_close(clone.scale(), norm.scale())
    y = torch.randn(3, 2, requires_grad=True)
    norm.normalize(y).sum().backward()  # normalize is differentiable in its input
    torch.testing.assert_close(y.grad, (1 / norm.scale()).expand(3, 2))


# ---------------------------------------------------------------------------- PopArt's output rescaling
@settings(max_examples=20)
@given(st.integers(0, 2**16), st.sampled_from([(1,), (3,)]), st.sampled_from([0.0, 0.5, 0.99]))
def test_popart_output_layer_preserves_unnormalised_outputs_across_updates(seed, tail, beta):
    torch.manual_seed(seed)
    out = int(np.prod(tail))
    head = nn.Linear(8, out)
    critic = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), head).double()  # float64: a tight tolerance
    norm = PopArtValueNorm(shape=tail, beta=beta, output_layer=head).double()
    assert "output_layer" not in dict(norm.named_modules())  # the critic owns it
    x = torch.randn(16, 4, dtype=torch.float64)
    for target in stream(seed, tail, 6):
        with torch.no_grad():
            before = norm.denormalize(critic(x))
            hidden = critic[:-1](x)
        old_mean, old_std = norm.denormalize(torch.zeros(out)), norm.scale().clone()
        norm.update(as_tensor(target))
        with torch.no_grad():
            after = norm.denormalize(critic(x))
        # the first update moves the scale from sqrt(epsilon) to ~10: errors relative to the larger one
        torch.testing.assert_close(
            after, before, rtol=1e-10, atol=1e-10 * float(max(old_std.max(), norm.scale().max()))
        )
        # the rescaled layer is the formula: normalised outputs y' = (sigma * y + mu - mu') / sigma'
        new_mean, new_std = norm.denormalize(torch.zeros(out)), norm.scale()
        with torch.no_grad():
            y_old = (before - old_mean) / old_std
            expected = (old_std * y_old + old_mean - new_mean) / new_std
            torch.testing.assert_close(head(hidden), expected, rtol=1e-8, atol=1e-8)


def test_popart_output_layer_float32_preserves_outputs_to_float_tolerance():
    torch.manual_seed(0)
    layer = nn.Linear(3, 1)
    norm = PopArtValueNorm(beta=0.9, output_layer=layer)
    norm.update(torch.randn(64) * 5 + 3)  # leave the sqrt(epsilon) start behind
    x = torch.randn(32, 3)
    for step in range(20):
        with torch.no_grad():
            before = norm.denormalize(layer(x))
        norm.update(torch.randn(64) * (5 + step) + step)
        with torch.no_grad():
            torch.testing.assert_close(norm.denormalize(layer(x)), before, rtol=1e-5, atol=1e-5 * float(norm.scale()))


def test_popart_without_output_layer_leaves_the_network_alone():
    layer = nn.Linear(2, 1)
    weight = layer.weight.detach().clone()
    PopArtValueNorm().update(torch.randn(10) * 100)
    assert torch.equal(layer.weight, weight)


# ---------------------------------------------------------------------------- the base class and errors
def test_subclass_without_scale_warns_and_raises_when_called():
    class NoScale(ValueNorm):
        def update(self, value_target):
            pass

        def normalize(self, value_target):
            return value_target

        def denormalize(self, normalised_value):
            return normalised_value

    with pytest.warns(DeprecationWarning, match="does not implement scale"):
        norm = NoScale()
    with pytest.raises(NotImplementedError, match="scale"):
        norm.scale()
    with pytest.raises(TypeError):  # abstract: update, normalize and denormalize are required
        ValueNorm()  # pyright: ignore[reportAbstractUsage]


@pytest.mark.parametrize("cls", [PopArtValueNorm, RunningValueNorm, PercentileValueNorm])
def test_bad_arguments_raise(cls):
    for shape in (0, (2, 0), -1, 1.5, "1", True):
        with pytest.raises(ValueError, match="shape must be"):
            cls(shape=shape)
    with pytest.raises(ValueError, match="epsilon must be a number > 0"):
        cls(epsilon=0.0)
    norm = cls(shape=(2,))
    with pytest.raises(ValueError, match=r"shape=\(2,\).*trailing dims are \(3,\)"):
        norm.update(torch.zeros(4, 3))
    with pytest.raises(ValueError, match="empty value target"):
        norm.update(torch.zeros(0, 2))


def test_bad_popart_and_percentile_arguments_raise():
    for beta in (1.0, -0.1, 2):
        with pytest.raises(ValueError, match=r"beta must be in \[0, 1\)"):
            PopArtValueNorm(beta=beta)
    with pytest.raises(TypeError, match="beta must be a number"):
        PopArtValueNorm(beta="0.9")  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError, match="output_layer must be an nn.Linear with a bias"):
        PopArtValueNorm(output_layer=nn.Linear(2, 1, bias=False))
    with pytest.raises(ValueError, match="output_layer has 2 outputs"):
        PopArtValueNorm(output_layer=nn.Linear(3, 2))
    for quantiles in ((0.9, 0.1), (0.5, 0.5), (-0.1, 0.5), (0.1, 1.5), (0.1,)):
        with pytest.raises(ValueError, match="quantiles"):
            PercentileValueNorm(quantiles=quantiles)  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\]"):
        PercentileValueNorm(rate=1.5)
    with pytest.raises(ValueError, match="min_scale must be a number > 0"):
        PercentileValueNorm(min_scale=0.0)
    with pytest.raises(TypeError, match="center must be a bool"):
        PercentileValueNorm(center=1)  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize("cls", [RunningValueNorm, PopArtValueNorm, PercentileValueNorm])
def test_compiled_update_and_normalisation_equal_eager(cls):
    values = torch.randn(6, 4, 1) * 3 + 1
    eager, compiled_norm = cls(shape=1), cls(shape=1)

    def step(norm, x):
        norm.update(x)
        return norm.normalize(x), norm.denormalize(x), norm.scale()

    compiled = torch.compile(step, fullgraph=True, backend="eager")
    for _ in range(3):
        for got, expected in zip(compiled(compiled_norm, values), step(eager, values)):
            torch.testing.assert_close(got, expected)
    torch.compiler.reset()
