"""tdict.nn distributions and parameter helpers, checked against torch.distributions and closed forms."""

import math

import pytest
import torch
from torch import distributions as D

from tdict import TensorDict
from tdict.nn import (
    AddStateIndependentNormalScale,
    CompositeDistribution,
    Delta,
    NormalParamExtractor,
    OneHotCategorical,
    TruncatedNormal,
)
from tdict.nn.distributions import mappings


def test_mappings():
    x = torch.linspace(-3, 3, 7)
    for bias in (0.5, 1.0, 2.0):
        assert mappings(f"biased_softplus_{bias}")(torch.zeros(())).item() == pytest.approx(bias, abs=1e-5)
    f = mappings("biased_softplus_1.0_0.1")
    assert f(torch.zeros(())).item() == pytest.approx(1.0, abs=1e-5)
    assert (f(torch.full((), -50.0)) >= 0.1).all()
    torch.testing.assert_close(mappings("exp")(x), x.exp())
    torch.testing.assert_close(mappings("relu")(x), x.relu())
    torch.testing.assert_close(mappings("softplus")(x), torch.nn.functional.softplus(x))
    expln = mappings("expln")(x)
    torch.testing.assert_close(expln, torch.where(x <= 0, x.exp(), x.log1p() + 1))
    with pytest.raises(NotImplementedError, match="nope"):
        mappings("nope")
    with pytest.raises(ValueError, match="biased_softplus_x"):
        mappings("biased_softplus_x")


def test_normal_param_extractor():
    x = torch.randn(5, 6)
    other = torch.ones(2)
    loc, scale, passed = NormalParamExtractor()(x, other)
    torch.testing.assert_close(loc, x[:, :3])
    shift = math.log(math.expm1(1.0 - 0.01))
    torch.testing.assert_close(scale, torch.nn.functional.softplus(x[:, 3:] + shift) + 0.01)
    assert passed is other
    loc, scale = NormalParamExtractor(scale_mapping="relu", scale_lb=1e-3)(torch.tensor([1.0, -2.0]))
    assert loc.item() == 1.0 and scale.item() == pytest.approx(1e-3)  # relu gives 0, the lower bound is the eps
    loc, scale = NormalParamExtractor(scale_mapping="exp")(torch.tensor([1.0, 0.5]))
    assert scale.item() == pytest.approx(math.exp(0.5))
    with pytest.raises(ValueError, match="even"):
        NormalParamExtractor()(torch.zeros(3))


def test_add_state_independent_normal_scale():
    module = AddStateIndependentNormalScale(3, init_value=0.5)
    loc_in = torch.randn(4, 3)
    loc, scale = module(loc_in)
    assert loc is loc_in
    torch.testing.assert_close(scale, torch.full((4, 3), math.exp(0.5)))
    scale.sum().backward()
    assert module.state_independent_scale.grad.shape == (3,)
    _, scale = AddStateIndependentNormalScale((3,), scale_mapping="biased_softplus_2.0")(loc_in)
    torch.testing.assert_close(scale, torch.full((4, 3), 2.0))
    buf = AddStateIndependentNormalScale(3, make_param=False)
    assert not list(buf.parameters()) and "state_independent_scale" in dict(buf.named_buffers())
    with pytest.raises(RuntimeError, match="scale_shape"):
        module(torch.zeros(4, 2))


def test_delta():
    param = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    d = Delta(param, event_shape=())
    assert d.batch_shape == (2, 2) and d.event_shape == ()
    assert d.sample((3,)).shape == (3, 2, 2)
    assert torch.equal(d.rsample(), param)
    for value in (d.mode, d.mean, d.deterministic_sample):
        assert torch.equal(value, param)
    lp = d.log_prob(torch.tensor([[1.0, 0.0], [3.0 + 1e-8, 4.0]]))
    assert torch.equal(lp, torch.tensor([[0.0, -math.inf], [0.0, 0.0]]))
    for d2 in (Delta(param), Delta(param, event_shape=(2,)), Delta(param, batch_shape=(2,), event_shape=(2,))):
        assert d2.batch_shape == (2,) and d2.event_shape == (2,)  # default: the last dim is the event (0.14)
        assert torch.equal(d2.log_prob(torch.tensor([[1.0, 2.0], [3.0, 0.0]])), torch.tensor([0.0, -math.inf]))
        assert torch.equal(d2.entropy(), torch.zeros(2))
    assert torch.equal(d.entropy(), torch.zeros(2, 2))


def test_one_hot_categorical():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0]])
    d = OneHotCategorical(logits=logits)
    ref = D.OneHotCategorical(logits=logits)
    expected = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert torch.equal(d.mode, expected) and torch.equal(d.deterministic_sample, expected)
    s = d.sample((7,))
    assert s.shape == (7, 2, 3) and torch.equal(s.sum(-1), torch.ones(7, 2))
    torch.testing.assert_close(d.log_prob(s), ref.log_prob(s))
    torch.testing.assert_close(d.entropy(), ref.entropy())


def test_one_hot_categorical_without_validation_matches_torch_and_skips_every_check():
    torch.manual_seed(0)
    logits = torch.randn(5, 4)
    ref = D.OneHotCategorical(logits=logits, validate_args=False)
    d = OneHotCategorical(logits=logits, validate_args=False)
    assert d.batch_shape == ref.batch_shape == (5,) and d.event_shape == ref.event_shape == (4,)
    # logits normalised by log_softmax (torch: minus logsumexp): equal to rounding
    torch.testing.assert_close(d.logits, ref.logits)
    torch.testing.assert_close(d.probs, ref.probs)
    torch.testing.assert_close(d.entropy(), ref.entropy())
    value = torch.nn.functional.one_hot(torch.tensor([3, 0, 1, 2, 3]), 4).float()
    torch.testing.assert_close(d.log_prob(value), ref.log_prob(value))  # the gather path
    torch.testing.assert_close(d.log_prob(value.long()), ref.log_prob(value.long()))
    sampled = d.sample((3,))  # a leading sample dim broadcasts through torch's own path
    torch.testing.assert_close(d.log_prob(sampled), ref.log_prob(sampled))
    assert d.expand((2, 5)).batch_shape == (2, 5)
    one = OneHotCategorical(logits=torch.zeros(3), validate_args=False)  # no batch dims
    assert one.batch_shape == () and one.event_shape == (3,)
    logits.requires_grad_(True)  # gradients through the normalisation: those of torch's
    grad = torch.autograd.grad(OneHotCategorical(logits=logits, validate_args=False).log_prob(value).sum(), logits)
    expected = torch.autograd.grad(D.OneHotCategorical(logits=logits).log_prob(value).sum(), logits)
    torch.testing.assert_close(grad, expected)
    torch.manual_seed(1)
    a = d.sample()
    torch.manual_seed(1)
    assert torch.equal(a, ref.sample())  # the same draws for the same seed
    # torch's own class validates its inner Categorical whatever validate_args says: NaN logits raise
    nan_logits = torch.tensor([[float("nan"), 0.0]])
    with pytest.raises(ValueError):
        D.OneHotCategorical(logits=nan_logits, validate_args=False)
    assert OneHotCategorical(logits=nan_logits, validate_args=False).batch_shape == (1,)
    with pytest.raises(ValueError):
        OneHotCategorical(logits=nan_logits)  # default validation is kept


def _trunc_reference(loc, scale, low, high):
    n = D.Normal(loc, scale)
    return n, (n.cdf(high) - n.cdf(low))


def test_truncated_normal_log_prob_and_moments():
    torch.manual_seed(0)
    loc = torch.tensor([0.0, 0.5, -2.0, 0.3], dtype=torch.float64)
    scale = torch.tensor([1.0, 0.3, 1.0, 2.0], dtype=torch.float64)
    low, high = torch.tensor(-1.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64)
    d = TruncatedNormal(loc, scale, low, high)
    n, Z = _trunc_reference(loc, scale, low, high)
    x = torch.tensor([0.2, -0.9, 0.99, -0.1], dtype=torch.float64)
    torch.testing.assert_close(d.log_prob(x), n.log_prob(x) - Z.log())
    assert torch.isneginf(d.log_prob(torch.tensor([1.5, -1.01, 2.0, 0.0], dtype=torch.float64))[:3]).all()
    # moments and entropy against numerical integration of the density on [low, high]
    grid = torch.linspace(-1, 1, 20001, dtype=torch.float64).unsqueeze(-1)
    pdf = d.log_prob(grid.expand(-1, 4)).exp()
    mean = torch.trapezoid(pdf * grid, grid.squeeze(-1), dim=0)
    var = torch.trapezoid(pdf * (grid - mean) ** 2, grid.squeeze(-1), dim=0)
    ent = torch.trapezoid(-pdf * pdf.log(), grid.squeeze(-1), dim=0)
    torch.testing.assert_close(torch.trapezoid(pdf, grid.squeeze(-1), dim=0), torch.ones(4, dtype=torch.float64))
    torch.testing.assert_close(d.mean, mean, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(d.variance, var, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(d.entropy(), ent, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(d.mode, loc.clamp(-1, 1))
    torch.testing.assert_close(d.deterministic_sample, d.mean)
    u = torch.tensor([0.1, 0.5, 0.7, 0.95], dtype=torch.float64)
    torch.testing.assert_close(d.cdf(d.icdf(u)), u)


def test_truncated_normal_sampling():
    torch.manual_seed(0)
    loc = torch.tensor([0.0, 0.8, 3.0], requires_grad=True)
    scale = torch.tensor([1.0, 0.5, 1.0])
    d = TruncatedNormal(loc, scale, low=-1.0, high=torch.tensor([1.0, 1.0, 2.0]))
    s = d.rsample((20000,))
    assert s.shape == (20000, 3)
    assert ((s >= -1) & (s <= torch.tensor([1.0, 1.0, 2.0]))).all()
    torch.testing.assert_close(s.mean(0), d.mean.detach(), atol=0.02, rtol=0)
    s.mean().backward()
    assert loc.grad is not None and torch.isfinite(loc.grad).all()
    assert not d.sample().requires_grad


def _params(batch=(4,)):
    return TensorDict(
        cont=TensorDict(loc=torch.randn(*batch, 2), scale=torch.rand(*batch, 2) + 0.5, batch_size=batch),
        disc=TensorDict(logits=torch.randn(*batch, 3), batch_size=batch),
        batch_size=batch,
    )


def test_composite_distribution_sample_and_log_prob():
    torch.manual_seed(0)
    params = _params()
    dist = CompositeDistribution(
        params,
        distribution_map={"cont": D.Normal, "disc": D.Categorical},
        name_map={"cont": ("agent", "action"), "disc": "choice"},
    )
    normal = D.Normal(params["cont", "loc"], params["cont", "scale"])
    cat = D.Categorical(logits=params["disc", "logits"])
    sample = dist.sample()
    assert sample.batch_size == (4,)
    assert sample["agent", "action"].shape == (4, 2) and sample["choice"].shape == (4,)
    joint = dist.log_prob(sample, aggregate_probabilities=True)
    expected = normal.log_prob(sample["agent", "action"]).sum(-1) + cat.log_prob(sample["choice"])
    assert joint.shape == (4,)
    torch.testing.assert_close(joint, expected)
    per_head = dist.log_prob(sample)
    # each leaf summed to the batch shape of its holder (design rule: no feature dims on log-probs)
    assert per_head["agent", "action_log_prob"].shape == (4,)
    torch.testing.assert_close(per_head["agent", "action_log_prob"], normal.log_prob(sample["agent", "action"]).sum(-1))
    torch.testing.assert_close(per_head["choice_log_prob"], cat.log_prob(sample["choice"]))
    ent = dist.entropy(aggregate_probabilities=True)
    torch.testing.assert_close(ent, normal.entropy().sum(-1) + cat.entropy())
    torch.testing.assert_close(dist.entropy()["choice_entropy"], cat.entropy())
    torch.testing.assert_close(dist.entropy()["agent", "action_entropy"], normal.entropy().sum(-1))
    torch.testing.assert_close(dist.mode["agent", "action"], params["cont", "loc"])
    torch.testing.assert_close(dist.mean["agent", "action"], params["cont", "loc"])
    det = dist.deterministic_sample
    torch.testing.assert_close(det["choice"], params["disc", "logits"].argmax(-1))  # discrete: the mode
    torch.testing.assert_close(det["agent", "action"], params["cont", "loc"])
    assert dist.sample((5,)).batch_size == (5, 4)
    assert dist.rsample()["agent", "action"].shape == (4, 2)
    composite = dist.log_prob_composite(sample, include_sum=True)
    torch.testing.assert_close(composite["sample_log_prob"], expected)
    torch.testing.assert_close(composite["choice_log_prob"], cat.log_prob(sample["choice"]))
    assert composite is not sample and "choice_log_prob" not in sample.keys()
    assert "sample_log_prob" not in dist.log_prob_composite(sample).keys()  # include_sum follows the aggregate


def test_composite_per_leaf_log_prob_keeps_the_batch_shape_of_the_group_holding_the_leaf():
    # a per-agent head under a [B, n_agents] group: one log-prob (and entropy) per agent, as the
    # design's no-trailing-dim rule asks; the aggregate sums everything down to the root batch
    loc, scale, logits = torch.randn(4, 3, 2), torch.rand(4, 3, 2) + 0.5, torch.randn(4, 5)
    params = TensorDict(
        {
            ("agents", "action"): TensorDict(loc=loc, scale=scale, batch_size=[4, 3]),
            "disc": TensorDict(logits=logits, batch_size=[4]),
        },
        batch_size=[4],
    )
    dist = CompositeDistribution(params, distribution_map={("agents", "action"): D.Normal, "disc": D.Categorical})
    action, disc = torch.randn(4, 3, 2), torch.tensor([0, 1, 2, 4])
    sample = TensorDict(agents=TensorDict(action=action, batch_size=[4, 3]), disc=disc, batch_size=[4])
    lp = dist.log_prob(sample)
    assert sorted(lp.keys(True, True), key=str) == [("agents", "action_log_prob"), "disc_log_prob"]
    assert lp["agents"].batch_size == (4, 3)
    torch.testing.assert_close(lp["agents", "action_log_prob"], D.Normal(loc, scale).log_prob(action).sum(-1))
    torch.testing.assert_close(lp["disc_log_prob"], D.Categorical(logits=logits).log_prob(disc))
    total = dist.log_prob(sample, aggregate_probabilities=True)
    torch.testing.assert_close(
        total, D.Normal(loc, scale).log_prob(action).sum((-2, -1)) + D.Categorical(logits=logits).log_prob(disc)
    )
    ent = dist.entropy()
    assert ent["agents", "action_entropy"].shape == (4, 3)
    torch.testing.assert_close(ent["agents", "action_entropy"], D.Normal(loc, scale).entropy().sum(-1))


def test_composite_distribution_defaults_and_errors():
    params = TensorDict(act=TensorDict(loc=torch.zeros(3, 2), batch_size=[3]), batch_size=[3])
    dist = CompositeDistribution(
        params, distribution_map={"act": D.Normal}, extra_kwargs={"act": {"scale": 2.0}}, aggregate_probabilities=True
    )
    sample = dist.sample()
    torch.testing.assert_close(dist.log_prob(sample), D.Normal(torch.zeros(3, 2), 2.0).log_prob(sample["act"]).sum(-1))
    with pytest.raises(KeyError, match=r"head .*other.* missing"):
        CompositeDistribution(params, distribution_map={"other": D.Normal})
    with pytest.raises(KeyError, match=r"sample misses .*act"):
        dist.log_prob(TensorDict(wrong=torch.zeros(3, 2), batch_size=[3]))
    # None keys mean the defaults (tensordict 0.14 reads them so); has_rsample: every head has it
    dist = CompositeDistribution(params, {"act": D.Normal}, extra_kwargs={"act": {"scale": 2.0}}, log_prob_key=None)
    assert dist.log_prob_key == "sample_log_prob" and dist.entropy_key == "entropy" and dist.has_rsample
    both = TensorDict(
        act=TensorDict(loc=torch.zeros(3, 2), batch_size=[3]),
        pick=TensorDict(logits=torch.zeros(3, 4), batch_size=[3]),
        batch_size=[3],
    )
    mixed = CompositeDistribution(both, {"act": D.Normal, "pick": D.Categorical}, extra_kwargs={"act": {"scale": 1.0}})
    assert not mixed.has_rsample


def test_add_state_independent_normal_scale_device():
    module = AddStateIndependentNormalScale(3, device="meta")
    assert module.state_independent_scale.device.type == "meta"
    assert AddStateIndependentNormalScale(3, device="cpu").state_independent_scale.device.type == "cpu"


def test_truncated_normal_a_b_are_the_bounds():
    loc, scale = torch.zeros(3), torch.ones(3)
    d = TruncatedNormal(loc, scale, a=-0.5, b=torch.tensor([0.5, 1.0, 2.0]))  # tensordict 0.14's names
    ref = TruncatedNormal(loc, scale, low=-0.5, high=torch.tensor([0.5, 1.0, 2.0]))
    value = torch.tensor([0.1, 0.7, 1.5])
    torch.testing.assert_close(d.log_prob(value), ref.log_prob(value))
    torch.testing.assert_close(
        TruncatedNormal(loc, scale, -0.5, 2.0).mean, TruncatedNormal(loc, scale, a=-0.5, b=2.0).mean
    )
    with pytest.raises(ValueError, match="pass low or its tensordict name a, not both"):
        TruncatedNormal(loc, scale, low=-1.0, a=-1.0)
