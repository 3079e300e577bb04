"""DreamerV3's math (rl_objectives.functional.dreamer, SymExpTwoHot) against formulas and loops
written here: symlog/symexp, the two-hot support and codec, unimix, straight-through samples and the
KL terms with their stop-gradients."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_objectives.functional.dreamer import (
    categorical_kl_balanced,
    categorical_kl_terms,
    straight_through_categorical,
    symexp,
    symexp_bins,
    symlog,
    two_hot_cross_entropy,
    two_hot_decode,
    two_hot_encode,
    unimix_probs,
)
from rl_objectives.modules.two_hot import SymExpTwoHot

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, min_size=1, max_size=16))
def test_symlog_symexp_formulas_and_round_trip(values):
    x = torch.tensor(values, dtype=torch.float64)
    expected = torch.tensor([math.copysign(math.log1p(abs(v)), v) if v else 0.0 for v in values], dtype=torch.float64)
    torch.testing.assert_close(symlog(x), expected)
    torch.testing.assert_close(symexp(symlog(x)), x, rtol=1e-9, atol=1e-9)


def test_symlog_has_slope_one_at_zero():
    x = torch.tensor([0.0, 1.0, -3.0], requires_grad=True)
    symlog(x).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, torch.tensor([1.0, 0.5, 0.25]))  # 1 / (1 + |x|)


@pytest.mark.parametrize("num_bins", [2, 5, 6, 255])
def test_symexp_bins_are_symexp_of_an_even_grid_and_symmetric(num_bins):
    bins = symexp_bins(num_bins, dtype=torch.float64)
    grid = [-20.0 + 40.0 * k / (num_bins - 1) for k in range(num_bins)]
    expected = torch.tensor([math.copysign(math.expm1(abs(g)), g) for g in grid], dtype=torch.float64)
    torch.testing.assert_close(bins, expected, rtol=1e-12, atol=1e-12)
    assert torch.equal(bins, -bins.flip(0))  # exactly symmetric
    assert (bins[1:] > bins[:-1]).all()
    if num_bins % 2:
        assert bins[num_bins // 2] == 0.0
    assert symexp_bins(7).dtype == torch.get_default_dtype()
    with pytest.raises(ValueError, match="num_bins must be an int >= 2"):
        symexp_bins(1)


def _encode_loop(values, bins):
    """Two-hot weights written out one value at a time."""
    out = torch.zeros(len(values), len(bins), dtype=torch.float64)
    for row, v in enumerate(values):
        v = min(max(v, bins[0]), bins[-1])
        for k in range(len(bins) - 1):
            if bins[k] <= v <= bins[k + 1]:
                w = (v - bins[k]) / (bins[k + 1] - bins[k])
                out[row, k], out[row, k + 1] = 1 - w, w
                break
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(min_value=-50, max_value=50, allow_nan=False), min_size=1, max_size=12))
def test_two_hot_encode_against_a_loop(values):
    bins = symexp_bins(9, limit=3.0, dtype=torch.float64)
    encoded = two_hot_encode(torch.tensor(values, dtype=torch.float64), bins)
    reference = _encode_loop(values, bins.tolist())
    # a value exactly on a support point may be split either way between two neighbours: compare expectations
    torch.testing.assert_close(encoded.sum(-1), torch.ones(len(values), dtype=torch.float64))
    torch.testing.assert_close((encoded * bins).sum(-1), (reference * bins).sum(-1))
    assert ((encoded > 0).sum(-1) <= 2).all() and (encoded >= 0).all()
    clamped = torch.tensor(values, dtype=torch.float64).clamp(float(bins[0]), float(bins[-1]))
    torch.testing.assert_close((encoded * bins).sum(-1), clamped)


def test_two_hot_values_on_and_off_the_support():
    bins = torch.tensor([-1.0, 0.0, 1.0])
    encoded = two_hot_encode(torch.tensor([[0.25, -1.0], [1.0, 7.0]]), bins)
    assert encoded.shape == (2, 2, 3)
    torch.testing.assert_close(encoded[0, 0], torch.tensor([0.0, 0.75, 0.25]))
    torch.testing.assert_close(encoded[0, 1], torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(encoded[1, 0], torch.tensor([0.0, 0.0, 1.0]))
    torch.testing.assert_close(encoded[1, 1], torch.tensor([0.0, 0.0, 1.0]))  # saturated


def test_two_hot_decode_and_cross_entropy_formulas():
    torch.manual_seed(0)
    bins = symexp_bins(11, limit=4.0)
    logits = torch.randn(5, 11)
    probs = torch.softmax(logits, -1)
    torch.testing.assert_close(two_hot_decode(logits, bins), (probs * bins).sum(-1))
    symmetric = torch.randn(11)
    symmetric = (symmetric + symmetric.flip(0)) / 2  # a distribution symmetric around 0
    assert two_hot_decode(symmetric, bins) == 0.0
    target = torch.randn(5) * 10
    expected = -(two_hot_encode(target, bins) * torch.log_softmax(logits, -1)).sum(-1)
    torch.testing.assert_close(two_hot_cross_entropy(logits, target, bins), expected)
    torch.testing.assert_close(two_hot_cross_entropy(logits, target.unsqueeze(-1), bins), expected)
    with pytest.raises(ValueError, match=r"target must have shape \[5\]"):
        two_hot_cross_entropy(logits, torch.zeros(4), bins)
    with pytest.raises(ValueError, match="last dim"):
        two_hot_decode(torch.zeros(5, 10), bins)


def test_sym_exp_two_hot_module_round_trip_and_gradient():
    head = SymExpTwoHot(num_bins=255)
    target = torch.tensor([-300.0, -1.5, 0.0, 2.0, 1e4])
    decoded = head.decode(head.encode(target).clamp_min(1e-12).log())
    torch.testing.assert_close(decoded, target, rtol=1e-3, atol=1e-3)
    logits = torch.zeros(5, 255, requires_grad=True)
    head.loss(logits, target).sum().backward()
    assert logits.grad is not None
    torch.testing.assert_close(logits.grad, torch.softmax(logits.detach(), -1) - head.encode(target))
    assert head(logits).shape == (5, 1) and "bins" in dict(head.named_buffers())


def test_unimix_floors_every_class():
    logits = torch.tensor([[10.0, -10.0, -10.0, -10.0]])
    probs = unimix_probs(logits, 0.01)
    expected = 0.99 * torch.softmax(logits, -1) + 0.01 / 4
    torch.testing.assert_close(probs, expected)
    assert probs.min() >= 0.01 / 4 and torch.allclose(probs.sum(-1), torch.ones(1))
    assert torch.equal(unimix_probs(logits, 0.0), torch.softmax(logits, -1))
    with pytest.raises(ValueError, match="unimix must be in"):
        unimix_probs(logits, 1.0)


def test_straight_through_samples_are_one_hot_with_the_probabilities_gradient():
    gen = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(2000, 3), -1).requires_grad_(True)
    sample = straight_through_categorical(probs, generator=gen)
    assert torch.equal(sample.detach().sum(-1), torch.ones(2000))
    assert set(sample.detach().unique().tolist()) == {0.0, 1.0}
    weights = torch.randn(3)
    (sample * weights).sum().backward()
    assert probs.grad is not None
    torch.testing.assert_close(probs.grad, weights.expand(2000, 3))
    # draws follow the probabilities: a fixed categorical, 20,000 draws
    fixed = torch.tensor([0.2, 0.5, 0.3]).expand(20000, 3)
    freq = straight_through_categorical(fixed, generator=gen).mean(0)
    torch.testing.assert_close(freq, torch.tensor([0.2, 0.5, 0.3]), atol=0.015, rtol=0)


def test_straight_through_draws_follow_unnormalised_probabilities_and_skip_empty_classes():
    gen = torch.Generator().manual_seed(1)
    # unnormalised, with empty classes first, inside and last: those are never drawn
    weights = torch.tensor([0.0, 2.0, 0.0, 1.0, 5.0, 0.0])
    freq = straight_through_categorical(weights.expand(30000, 6), generator=gen).mean(0)
    assert freq[[0, 2, 5]].eq(0).all()
    torch.testing.assert_close(freq, weights / weights.sum(), atol=0.012, rtol=0)
    # a degenerate categorical is an error, not a silent draw
    for bad in (torch.zeros(2, 3), torch.tensor([[0.5, float("nan"), 0.5]]), torch.tensor([[1.0, float("inf"), 0.0]])):
        with pytest.raises(ValueError, match="finite, positive total"):
            straight_through_categorical(bad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_straight_through_draw_is_the_count_of_cumulative_values_below_the_uniform(dtype):
    # the class drawn is the number of normalised cumulative probabilities at or below one uniform
    # draw per categorical, written out here with the same generator state
    probs = torch.rand(7, 5, 9, generator=torch.Generator().manual_seed(2)).to(dtype)
    probs[..., ::4] = 0.0  # empty classes, first and last included
    sample = straight_through_categorical(probs, generator=torch.Generator().manual_seed(3))
    cdf = probs.cumsum(-1)
    uniform = torch.rand(7, 5, 1, generator=torch.Generator().manual_seed(3), dtype=dtype)
    expected = (cdf / cdf[..., -1:] <= uniform).sum(-1)
    assert sample.dtype == dtype and sample.shape == probs.shape
    assert torch.equal(sample.argmax(-1), expected) and torch.equal(sample.sum(-1), torch.ones(7, 5, dtype=dtype))


def _kl_loop(q, p):
    """KL(q || p) of every categorical, written out: [..., G]."""
    out = torch.zeros(q.shape[:-1], dtype=q.dtype)
    for index in itertools.product(*(range(n) for n in q.shape[:-1])):
        out[index] = sum(q[index][c] * (math.log(q[index][c]) - math.log(p[index][c])) for c in range(q.shape[-1]))
    return out


def test_kl_terms_against_a_loop_with_free_nats_and_stop_gradients():
    torch.manual_seed(1)
    post = (torch.randn(3, 4, 5, dtype=torch.float64) * 2).requires_grad_(True)
    prior = (torch.randn(3, 4, 5, dtype=torch.float64) * 2).requires_grad_(True)
    q, p = unimix_probs(post.detach(), 0.01), unimix_probs(prior.detach(), 0.01)
    kl = _kl_loop(q, p).sum(-1)  # summed over the categoricals: [3]
    for free in (0.0, float(kl.median())):
        dynamics, representation = categorical_kl_terms(post, prior, free_nats=free, unimix=0.01)
        expected = kl.clamp_min(free).mean() if free else kl.mean()
        torch.testing.assert_close(dynamics, expected)
        torch.testing.assert_close(representation, expected)
    dynamics, representation = categorical_kl_terms(post, prior, free_nats=0.0)
    (dynamics_grad_post, dynamics_grad_prior) = torch.autograd.grad(dynamics, (post, prior), allow_unused=True)
    assert dynamics_grad_post is None or not dynamics_grad_post.any()  # the dynamics loss trains the prior only
    assert dynamics_grad_prior is not None and dynamics_grad_prior.abs().sum() > 0
    rep_grad_post, rep_grad_prior = torch.autograd.grad(representation, (post, prior), allow_unused=True)
    assert rep_grad_prior is None or not rep_grad_prior.any()  # the representation loss trains the posterior only
    assert rep_grad_post is not None and rep_grad_post.abs().sum() > 0
    with pytest.raises(ValueError, match="same shape"):
        categorical_kl_terms(post, prior[:, :2])


@pytest.mark.parametrize("unimix", [0.0, 0.01])
def test_kl_terms_gradients_equal_the_written_out_losses_each_alone_and_under_transforms(unimix):
    """With gradients the two KL terms are computed in closed form: each term's gradient (taken
    alone, the other never differentiated) equals autograd's through the losses written out here,
    and so do torch.func.grad and vmap."""
    torch.manual_seed(2)
    post = (torch.randn(4, 3, 5, 6, dtype=torch.float64) * 2).requires_grad_(True)
    prior = (torch.randn(4, 3, 5, 6, dtype=torch.float64) * 2).requires_grad_(True)

    def written_out(post, prior, free):
        q = torch.softmax(post, -1) * (1 - unimix) + unimix / 6
        p = torch.softmax(prior, -1) * (1 - unimix) + unimix / 6
        dynamics = (q.detach() * (q.detach().log() - p.log())).sum((-2, -1))
        representation = (q * (q.log() - p.detach().log())).sum((-2, -1))
        return dynamics.clamp_min(free).mean(), representation.clamp_min(free).mean()

    for free in (0.0, 0.3):
        dynamics, representation = categorical_kl_terms(post, prior, free_nats=free, unimix=unimix)
        want_dynamics, want_representation = written_out(post, prior, free)
        torch.testing.assert_close(dynamics, want_dynamics)
        torch.testing.assert_close(representation, want_representation)
        (got,) = torch.autograd.grad(dynamics, prior)  # one term alone; the other never differentiated
        torch.testing.assert_close(got, torch.autograd.grad(want_dynamics, prior)[0])
        (got,) = torch.autograd.grad(representation, post)
        torch.testing.assert_close(got, torch.autograd.grad(want_representation, post)[0])

    def total(kl_terms):
        return lambda post, prior: sum(w * t for w, t in zip((0.5, 0.1), kl_terms(post, prior), strict=True))

    ours = total(lambda a, b: categorical_kl_terms(a, b, free_nats=0.3, unimix=unimix))
    reference = total(lambda a, b: written_out(a, b, 0.3))
    got = torch.func.grad(ours, argnums=(0, 1))(post.detach(), prior.detach())
    want = torch.autograd.grad(reference(post, prior), (post, prior))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
    batched = torch.vmap(torch.func.grad(ours, argnums=(0, 1)))(post.detach(), prior.detach())
    for i in range(4):
        for a, b in zip(batched, torch.autograd.grad(reference(post[i], prior[i]), (post, prior)), strict=True):
            torch.testing.assert_close(a[i], b[i])
    with torch.no_grad():  # values only
        for a, b in zip(categorical_kl_terms(post, prior, 0.3, unimix), written_out(post, prior, 0.3), strict=True):
            torch.testing.assert_close(a, b)


def test_kl_balanced_against_a_loop():
    torch.manual_seed(2)
    post = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    prior = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    q, p = torch.softmax(post.detach(), -1), torch.softmax(prior.detach(), -1)
    kl = _kl_loop(q, p)  # per categorical [2, 3]
    free = float(kl.median())
    expected = 0.8 * kl.clamp_min(free).mean() + 0.2 * kl.clamp_min(free).mean()
    loss = categorical_kl_balanced(post, prior, alpha=0.8, free_bits=free)
    torch.testing.assert_close(loss, expected)
    only_prior = categorical_kl_balanced(post, prior, alpha=1.0, free_bits=0.0)
    grad_post, grad_prior = torch.autograd.grad(only_prior, (post, prior), allow_unused=True)
    assert grad_post is None or not grad_post.any()
    assert grad_prior is not None and grad_prior.abs().sum() > 0


def test_the_math_compiles_to_the_same_values():
    bins = symexp_bins(31, limit=5.0)
    logits, target = torch.randn(6, 31), torch.randn(6) * 30
    post, prior = torch.randn(6, 4, 8), torch.randn(6, 4, 8)

    def losses(logits, target, post, prior):
        return (two_hot_cross_entropy(logits, target, bins), *categorical_kl_terms(post, prior))

    compiled = torch.compile(losses, fullgraph=True, backend="eager")
    for eager, graph in zip(losses(logits, target, post, prior), compiled(logits, target, post, prior)):
        torch.testing.assert_close(graph, eager)
