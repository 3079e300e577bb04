"""TanhNormal, TanhDelta, IndependentNormal, MaskedCategorical against references written here."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_objectives.modules import (
    ReparamGradientStrategy,
    Delta,
    IndependentNormal,
    MaskedCategorical,
    NormalParamExtractor,
    OneHotCategorical,
    TanhDelta,
    TanhNormal,
    TruncatedNormal,
)
from torch import distributions as D

BATCHES = [(), (4,), (2, 3)]


def _tanh_normal_ref(y, loc, scale, low, high):
    """log p(y) by change of variables y = c + h * tanh(x), x ~ N(loc, scale); summed over the last dim."""
    c, h = (high + low) / 2, (high - low) / 2
    x = torch.atanh((y - c) / h)
    log_det = torch.log(h * (1 - torch.tanh(x) ** 2))  # |dy/dx|
    normal = -((x - loc) ** 2) / (2 * scale**2) - torch.log(scale) - 0.5 * math.log(2 * math.pi)
    return (normal - log_det).sum(-1)


def test_reexports_are_tdict_classes():
    import tdict.nn as tnn

    assert Delta is tnn.Delta and NormalParamExtractor is tnn.NormalParamExtractor
    # TorchRL's modules.OneHotCategorical / TruncatedNormal take more arguments than tensordict's:
    # ours extend the tdict.nn classes (grad_method; upscale, tanh_loc and the event dim)
    assert issubclass(OneHotCategorical, tnn.OneHotCategorical)
    assert isinstance(TruncatedNormal(torch.zeros(2), torch.ones(2)).base_dist, tnn.TruncatedNormal)


def test_one_hot_categorical_expand_keeps_the_gradient_strategy():
    d = OneHotCategorical(logits=torch.randn(3, 4), grad_method=ReparamGradientStrategy.RelaxedOneHot)
    e = d.expand((2, 3))
    assert type(e) is OneHotCategorical and e.batch_shape == (2, 3) and e.grad_method is d.grad_method
    assert e.rsample().shape == (2, 3, 4) and e.sample().dtype == torch.int64


class TestTanhNormal:
    def test_draws_and_scores_are_torch_normal_s_squashed(self):
        # rsample draws the Normal exactly as torch.distributions.Normal does (same seed, same x),
        # and the draw's log-density is Normal.log_prob(x) minus the tanh and scale Jacobians
        torch.manual_seed(0)
        loc, scale = torch.randn(4, 2), torch.rand(4, 2) + 0.1
        low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
        d = TanhNormal(loc, scale, low=low, high=high)
        torch.manual_seed(3)
        y, lp = d.rsample_and_log_prob((5,))
        torch.manual_seed(3)
        x = D.Normal(loc, scale).rsample((5,))
        center, half = (high + low) / 2, (high - low) / 2
        eps = torch.finfo(x.dtype).eps
        assert torch.equal(y, center + half * torch.tanh(x).clamp(-1 + eps, 1 - eps))
        expected = (D.Normal(loc, scale).log_prob(x) - torch.log1p(-(torch.tanh(x) ** 2)) - half.log()).sum(-1)
        torch.testing.assert_close(lp, expected, rtol=1e-5, atol=1e-4)
        assert lp.shape == (5, 4)

    def test_tensor_bounds_are_compared_unless_validation_is_off(self):
        low, high = torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.5])
        with pytest.raises(ValueError, match="low must be smaller than high everywhere"):
            TanhNormal(torch.zeros(2), torch.ones(2), low=low, high=high)
        # validate_args=False spares the comparison (a device sync per construction)
        TanhNormal(torch.zeros(2), torch.ones(2), low=low, high=high, validate_args=False)
        with pytest.raises(ValueError, match="low must be smaller than high"):  # numbers: always checked
            TanhNormal(torch.zeros(2), torch.ones(2), low=1.0, high=0.0, validate_args=False)

    @pytest.mark.parametrize("batch", BATCHES)
    def test_log_prob_matches_change_of_variables(self, batch):
        torch.manual_seed(0)
        loc = torch.randn(*batch, 3, dtype=torch.float64)
        scale = torch.rand(*batch, 3, dtype=torch.float64) + 0.2
        low, high = (
            torch.tensor([-1.0, 0.0, -3.0], dtype=torch.float64),
            torch.tensor([1.0, 2.0, 5.0], dtype=torch.float64),
        )
        d = TanhNormal(loc, scale, low=low, high=high)
        y = d.sample((7,))
        assert y.shape == (7, *batch, 3)
        lp = d.log_prob(y)
        assert lp.shape == (7, *batch)
        torch.testing.assert_close(lp, _tanh_normal_ref(y, loc, scale, low, high))
        assert d.batch_shape == batch and d.event_shape == (3,)

    def test_density_integrates_to_one(self):
        d = TanhNormal(
            torch.tensor([0.7], dtype=torch.float64), torch.tensor([0.9], dtype=torch.float64), low=-2.0, high=3.0
        )
        y = torch.linspace(-2.0, 3.0, 200001, dtype=torch.float64)[1:-1].unsqueeze(-1)
        total = torch.trapezoid(d.log_prob(y).exp(), y.squeeze(-1))
        assert abs(total.item() - 1.0) < 1e-3

    @pytest.mark.parametrize("loc_value", [-60.0, 60.0])
    def test_saturated_samples_stay_inside_and_log_prob_finite(self, loc_value):
        d = TanhNormal(torch.full((1000, 2), loc_value), torch.ones(1000, 2), low=-2.0, high=0.5)
        s = d.sample()
        assert ((s >= -2.0) & (s <= 0.5)).all()
        assert torch.isfinite(d.log_prob(s)).all()
        # exactly at and beyond the bounds: clamped, finite
        edge = torch.tensor([[-2.0, 0.5], [-5.0, 9.0]])
        assert torch.isfinite(TanhNormal(torch.zeros(2), torch.ones(2), low=-2.0, high=0.5).log_prob(edge)).all()

    def test_own_draws_are_scored_from_the_normal_draw_even_when_saturated(self):
        loc, scale = torch.full((500, 1), 40.0, dtype=torch.float64), torch.full((500, 1), 1e-3, dtype=torch.float64)
        d = TanhNormal(loc, scale, low=-2.0, high=2.0)
        torch.manual_seed(3)
        x = loc + scale * torch.randn(500, 1, dtype=torch.float64)  # the draw rsample makes with this seed
        torch.manual_seed(3)
        y = d.rsample()
        # log(1 - tanh(x)^2) = log 4 - 2|x| - 2 log(1 + exp(-2|x|)); half-width 2
        log_jacobian = math.log(4.0) - 2 * x.abs() - 2 * torch.log1p(torch.exp(-2 * x.abs()))
        expected = (D.Normal(loc, scale).log_prob(x) - log_jacobian - math.log(2.0)).sum(-1)
        got = d.log_prob(y)
        assert torch.isfinite(got).all() and got.min() > -200.0  # about 2 * 40 - 4 at x = 40
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
        # the same values, not that tensor: inverted through atanh of a saturated tanh, far below
        assert d.log_prob(y.clone()).max() < -1e6
        # TorchRL's joint call gives the sample and that same score at once
        torch.manual_seed(3)
        y2, lp = d.rsample_and_log_prob()
        torch.testing.assert_close(y2, y)
        torch.testing.assert_close(lp, expected, rtol=1e-9, atol=1e-9)

    def test_rsample_gradient_flows(self):
        loc = torch.zeros(5, 2, requires_grad=True)
        scale = torch.ones(5, 2, requires_grad=True)
        d = TanhNormal(loc, scale)
        s = d.rsample()
        (s.sum() + d.log_prob(s).sum()).backward()
        assert loc.grad is not None and scale.grad is not None
        assert loc.grad.abs().sum() > 0 and scale.grad.abs().sum() > 0

    def test_deterministic_sample_and_mode(self):
        loc = torch.tensor([[0.3, -2.0]])
        d = TanhNormal(loc, torch.ones(1, 2), low=torch.tensor([0.0, -4.0]), high=torch.tensor([2.0, 4.0]))
        expected = torch.tensor([[1.0, 0.0]]) + torch.tensor([[1.0, 4.0]]) * torch.tanh(loc)
        torch.testing.assert_close(d.deterministic_sample, expected)
        torch.testing.assert_close(d.mode, expected)

    def test_tanh_loc_and_event_dims(self):
        loc = torch.full((2, 3), 100.0)
        d = TanhNormal(loc, torch.ones(2, 3), upscale=2.0, tanh_loc=True)
        torch.testing.assert_close(d.loc, 2.0 * torch.tanh(loc / 2.0))
        d0 = TanhNormal(torch.zeros(2, 3), torch.ones(2, 3), event_dims=0)
        assert d0.log_prob(d0.sample()).shape == (2, 3)
        d2 = TanhNormal(torch.zeros(2, 3), torch.ones(2, 3), event_dims=2)
        assert d2.log_prob(d2.sample()).shape == ()
        scalar = TanhNormal(torch.zeros(()), torch.ones(()))
        assert scalar.event_shape == () and scalar.log_prob(scalar.sample()).shape == ()

    def test_errors(self):
        with pytest.raises(ValueError, match="low must be smaller than high"):
            TanhNormal(torch.zeros(2), torch.ones(2), low=1.0, high=1.0)
        with pytest.raises(ValueError, match="low must be smaller than high everywhere"):
            TanhNormal(torch.zeros(2), torch.ones(2), low=torch.tensor([0.0, 2.0]), high=torch.tensor([1.0, 1.0]))
        with pytest.raises(ValueError, match="event_dims"):
            TanhNormal(torch.zeros(2), torch.ones(2), event_dims=2)
        with pytest.raises(ValueError):
            TanhNormal(torch.zeros(2), -torch.ones(2), validate_args=True)  # torch's argument validation: scale > 0


class TestTanhDelta:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_mode_log_prob_shapes(self, batch):
        param = torch.randn(*batch, 2)
        d = TanhDelta(param, low=-3.0, high=1.0)
        expected = -1.0 + 2.0 * torch.tanh(param)
        torch.testing.assert_close(d.mode, expected)
        torch.testing.assert_close(d.deterministic_sample, expected)
        assert d.sample((5,)).shape == (5, *batch, 2)
        lp = d.log_prob(expected)
        assert lp.shape == batch and (lp == 0).all()
        assert (d.log_prob(expected + 0.5) == -math.inf).all()

    def test_errors(self):
        with pytest.raises(ValueError, match="low must be smaller"):
            TanhDelta(torch.zeros(2), low=2.0, high=1.0)


class TestIndependentNormal:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_log_prob_is_sum_of_normals(self, batch):
        loc, scale = torch.randn(*batch, 3), torch.rand(*batch, 3) + 0.1
        d = IndependentNormal(loc, scale)
        x = d.sample((4,))
        torch.testing.assert_close(d.log_prob(x), D.Normal(loc, scale).log_prob(x).sum(-1))
        torch.testing.assert_close(d.deterministic_sample, loc)
        torch.testing.assert_close(d.mode, loc)
        assert d.batch_shape == batch

    def test_tanh_loc(self):
        d = IndependentNormal(torch.full((3,), 50.0), torch.ones(3), upscale=3.0, tanh_loc=True)
        torch.testing.assert_close(d.loc, torch.full((3,), 3.0 * math.tanh(50.0 / 3.0)))

    def test_errors(self):
        with pytest.raises(ValueError, match="event_dim"):
            IndependentNormal(torch.zeros(3), torch.ones(3), event_dim=2)


class TestMaskedCategorical:
    def _ref_log_prob(self, logits, mask, value):
        masked = logits.masked_fill(~mask, -math.inf)
        return torch.log_softmax(masked, -1).gather(-1, value.unsqueeze(-1)).squeeze(-1)

    @pytest.mark.parametrize("batch", BATCHES)
    def test_log_prob_matches_reference(self, batch):
        torch.manual_seed(0)
        logits = torch.randn(*batch, 5)
        mask = torch.rand(*batch, 5) > 0.4
        mask[..., 2] = True  # at least one allowed action per row
        d = MaskedCategorical(logits=logits, mask=mask)
        for a in range(5):
            value = torch.full(batch, a, dtype=torch.long)
            lp = d.log_prob(value)
            assert lp.shape == batch
            torch.testing.assert_close(lp, self._ref_log_prob(logits, mask, value))
            assert (lp[~mask[..., a]] == -math.inf).all()

    def test_never_samples_masked_actions(self):
        torch.manual_seed(0)
        mask = torch.tensor([[True, False, True, False, False], [False, False, False, False, True]])
        logits = torch.tensor([[0.0, 10.0, 1.0, 10.0, 10.0], [5.0, 5.0, 5.0, 5.0, -5.0]])
        d = MaskedCategorical(logits=logits, mask=mask)
        s = d.sample((20000,))
        assert mask.gather(-1, s.T).all()
        # allowed frequencies follow the renormalised probabilities: row 0 has p(2) = e / (1 + e)
        freq = (s[:, 0] == 2).float().mean().item()
        assert abs(freq - math.e / (1 + math.e)) < 0.02
        assert (s[:, 1] == 4).all()

    @settings(max_examples=30, deadline=None)
    @given(st.lists(st.booleans(), min_size=2, max_size=6), st.integers(0, 2**16))
    def test_property_samples_and_mode_are_allowed(self, mask_list, seed):
        mask = torch.tensor(mask_list)
        if not mask.any():
            mask[0] = True
        gen = torch.Generator().manual_seed(seed)
        logits = torch.randn(len(mask_list), generator=gen) * 5
        d = MaskedCategorical(logits=logits, mask=mask)
        torch.manual_seed(seed)
        s = d.sample((200,))
        assert mask[s].all()
        assert mask[d.mode] and mask[d.deterministic_sample]
        torch.testing.assert_close(d.probs.sum(), torch.tensor(1.0))
        assert (d.probs[~mask] == 0).all()

    def test_mode_entropy_probs_and_finite_neg_inf(self):
        logits = torch.tensor([3.0, 1.0, 2.0, 0.0])
        mask = torch.tensor([False, True, True, True])
        d = MaskedCategorical(logits=logits, mask=mask)
        assert d.mode.item() == 2
        p = torch.softmax(torch.tensor([1.0, 2.0, 0.0]), -1)
        torch.testing.assert_close(d.entropy(), -(p * p.log()).sum())
        finite = MaskedCategorical(logits=logits, mask=mask, neg_inf=-1e9)
        lp0 = finite.log_prob(torch.tensor(0))
        assert torch.isfinite(lp0) and lp0 < -1e8
        probs = MaskedCategorical(probs=torch.tensor([0.4, 0.1, 0.3, 0.2]), mask=mask)
        torch.testing.assert_close(probs.probs, torch.tensor([0.0, 1 / 6, 0.5, 2 / 6]))

    def test_errors(self):
        with pytest.raises(ValueError, match="exactly one of logits and probs"):
            MaskedCategorical(mask=torch.ones(3, dtype=torch.bool))
        with pytest.raises(ValueError, match="exactly one of mask .* and indices"):
            MaskedCategorical(logits=torch.zeros(3))
        with pytest.raises(ValueError, match="exactly one of mask .* and indices"):
            MaskedCategorical(logits=torch.zeros(3), mask=torch.ones(3, dtype=torch.bool), indices=torch.tensor([0]))
        with pytest.raises(ValueError, match="mask must be a bool tensor"):
            MaskedCategorical(logits=torch.zeros(3), mask=torch.ones(3))
        with pytest.raises(ValueError, match="does not broadcast"):
            MaskedCategorical(logits=torch.zeros(3), mask=torch.ones(4, dtype=torch.bool))
        with pytest.raises(ValueError, match="no allowed action"):
            MaskedCategorical(
                logits=torch.zeros(2, 3),
                mask=torch.tensor([[True, False, False], [False, False, False]]),
                validate_args=True,
            )


class TestTorchRLArguments:
    """TorchRL 0.14's arguments of the distributions; expected numbers are TorchRL 0.14.1's."""

    def test_masked_categorical_sparse_indices(self):
        logits = torch.tensor([[0.0, 1.0, 2.0, 3.0], [3.0, 2.0, 1.0, 0.0]])
        d = MaskedCategorical(logits=logits, indices=torch.tensor([[0, 2, -1], [1, 3, 2]]), padding_value=-1)
        torch.testing.assert_close(
            d.log_prob(torch.tensor([2, 3])), torch.tensor([-0.12692804634571075, -2.4076061248779297])
        )
        assert d.log_prob(torch.tensor([1, 0])).tolist() == [float("-inf"), float("-inf")]  # not listed
        assert d.mode.tolist() == [2, 1]
        torch.manual_seed(0)
        assert d.sample((5,)).tolist() == [[2, 2], [2, 1], [2, 1], [2, 1], [2, 1]]
        # TorchRL gives nan for a padded row's entropy; here the padding counts as a masked action
        torch.testing.assert_close(d.entropy(), torch.tensor([0.36533403, 0.83239555]))
        assert (d.padding_side, d.padding_value) == ("left", -1) and d.expand((3, 2)).sample().shape == (3, 2)
        with pytest.raises(ValueError, match="built from indices"):
            d.mask
        single = MaskedCategorical(logits=torch.tensor([0.0, 1.0, 2.0, 3.0]), indices=torch.tensor([0, 2]))
        torch.testing.assert_close(
            single.log_prob(torch.tensor([2, 1])), torch.tensor([-0.12692804634571075, float("-inf")])
        )
        assert int(single.mode) == 2

    def test_masked_categorical_use_cross_entropy_and_padding_side(self):
        logits = torch.tensor([[0.0, 1.0, 2.0, 3.0], [3.0, 2.0, 1.0, 0.0]])
        mask = torch.tensor([[True, False, True, True], [False, True, True, True]])
        for use_ce in (True, False):
            d = MaskedCategorical(logits=logits, mask=mask, use_cross_entropy=use_ce)
            torch.testing.assert_close(
                d.log_prob(torch.tensor([2, 0])), torch.tensor([-1.3490123748779297, float("-inf")])
            )
        with pytest.raises(ValueError, match="padding_side must be 'left' or 'right'"):
            MaskedCategorical(logits=logits, mask=mask, padding_side="top")
        with pytest.raises(ValueError, match="indices must be an integer tensor"):
            MaskedCategorical(logits=logits, indices=torch.zeros(2, 2))

    def test_tanh_delta_safe(self):
        param = torch.tensor([0.0, 100.0, -100.0])
        # TorchRL 0.14.1 with its default safe=True: tanh kept 1e-6 (float32 resolution) inside +-1
        assert TanhDelta(param).mode.tolist() == [0.0, 0.9999989867210388, -0.9999989867210388]
        assert TanhDelta(param, low=0.0, high=2.0).mode[1:].tolist() == [1.9999990463256836, 1.0132789611816406e-06]
        assert TanhDelta(param, safe=False).mode.tolist() == [0.0, 1.0, -1.0]
        with pytest.raises(TypeError, match="safe must be a bool"):
            TanhDelta(param, safe="yes")

    def test_truncated_normal_torchrl_signature(self):
        loc, scale = torch.tensor([[0.0, 30.0, -0.5]]), torch.ones(1, 3)
        d = TruncatedNormal(loc, scale, upscale=2.0, low=-1.0, high=1.0, tanh_loc=True)
        torch.testing.assert_close(d.loc, 2.0 * torch.tanh(loc / 2.0))
        value = torch.tensor([[0.2, 0.9, -0.3]])
        ref = (
            tnn_truncated(d.loc, scale).log_prob(value).sum(-1)
        )  # one event over the last dim, as TorchRL's Independent
        torch.testing.assert_close(d.log_prob(value), ref)
        assert d.log_prob(torch.tensor([[0.2, 1.5, 0.0]])).item() == float("-inf")
        torch.testing.assert_close(d.mode, torch.tensor([[0.0, 1.0, -2.0 * torch.tanh(torch.tensor(0.25)).item()]]))
        assert d.entropy().shape == (1,) and d.rsample((4,)).shape == (4, 1, 3)
        plain = TruncatedNormal(loc, scale)  # tanh_loc=False (TorchRL's default): loc kept
        torch.testing.assert_close(plain.loc, loc)
        with pytest.raises(ValueError, match="low must be smaller than high"):
            TruncatedNormal(loc, scale, low=1.0, high=-1.0)

    def test_one_hot_categorical_grad_method(self):
        from rl_objectives.modules import ReparamGradientStrategy

        logits = torch.tensor([[0.0, 1.0, 2.0]], requires_grad=True)
        torch.manual_seed(0)
        s = OneHotCategorical(logits=logits).rsample()
        assert s.tolist() == [[0.0, 0.0, 1.0]] and s.requires_grad  # TorchRL 0.14.1 draws the same with seed 0
        # pass-through: d sample / d logits is the softmax Jacobian
        (grad,) = torch.autograd.grad(s[0, 2], logits)
        p = torch.softmax(logits.detach(), -1)[0]
        torch.testing.assert_close(grad[0], p[2] * (torch.eye(3)[2] - p))
        relaxed = OneHotCategorical(logits=logits, grad_method=ReparamGradientStrategy.RelaxedOneHot)
        torch.manual_seed(0)
        r = relaxed.rsample((2,))
        assert r.tolist() == [[[0.0, 1.0, 0.0]], [[0.0, 0.0, 1.0]]] and r.requires_grad  # TorchRL's values, seed 0
        with pytest.raises(ValueError, match="grad_method must be a ReparamGradientStrategy"):
            OneHotCategorical(logits=logits, grad_method="pass")


def tnn_truncated(loc, scale):
    import tdict.nn as tnn

    return tnn.TruncatedNormal(loc, scale, -1.0, 1.0)
