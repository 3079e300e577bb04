"""ProbabilisticTensorDictModule / ProbabilisticTensorDictSequential against torch.distributions."""

import pytest
import torch
from torch import distributions as D, nn

from tdict import TensorDict
from tdict.nn import (
    CompositeDistribution,
    InteractionType,
    NormalParamExtractor,
    ProbabilisticTensorDictModule as ProbMod,
    ProbabilisticTensorDictSequential as ProbSeq,
    TensorDictModule,
    TensorDictSequential,
    TruncatedNormal,
    set_interaction_type,
)


def _normal_td(batch=(4,)):
    return TensorDict(loc=torch.randn(*batch, 3), scale=torch.rand(*batch, 3) + 0.5, batch_size=batch)


def test_deterministic_default_and_log_prob_shape():
    td = _normal_td()
    module = ProbMod(in_keys=["loc", "scale"], out_keys=["action"], distribution_class=D.Normal, return_log_prob=True)
    assert module.out_keys == ["action", "action_log_prob"] and module.in_keys == ["loc", "scale"]
    out = module(td)
    assert out is td
    torch.testing.assert_close(td["action"], td["loc"])
    ref = D.Normal(td["loc"], td["scale"]).log_prob(td["loc"]).sum(-1)
    assert td["action_log_prob"].shape == (4,)  # no trailing dims: the TensorDict's batch shape
    torch.testing.assert_close(td["action_log_prob"], ref)
    torch.testing.assert_close(module.log_prob(td), ref)
    # a [B, T] batch keeps [B, T]
    td2 = _normal_td((2, 5))
    assert module(td2)["action_log_prob"].shape == (2, 5)
    # Independent gives the same joint log-prob
    indep = ProbMod(
        in_keys=["loc", "scale"],
        out_keys=["action"],
        return_log_prob=True,
        log_prob_key="lp",
        distribution_class=lambda loc, scale: D.Independent(D.Normal(loc, scale), 1),
    )
    torch.testing.assert_close(indep(td.clone())["lp"], ref)


def test_log_prob_keeps_the_batch_shape_of_the_group_holding_the_sample():
    # a multi-agent rollout: root [N, T], group "agents" [N, T, n_agents], a 2-dim action per agent
    td = TensorDict(
        {"agents": TensorDict(loc=torch.randn(2, 5, 3, 2), scale=torch.rand(2, 5, 3, 2) + 0.5, batch_size=[2, 5, 3])},
        batch_size=[2, 5],
    )
    module = ProbMod(
        in_keys=[("agents", "loc"), ("agents", "scale")],
        out_keys=[("agents", "action")],
        distribution_class=D.Normal,
        return_log_prob=True,
    )
    assert module.log_prob_key == ("agents", "action_log_prob")  # derived from the action key
    with set_interaction_type(InteractionType.RANDOM):
        module(td)
    group = td["agents"]
    ref = D.Normal(group["loc"], group["scale"]).log_prob(group["action"]).sum(-1)
    assert group["action_log_prob"].shape == (2, 5, 3)  # one log-prob per agent
    torch.testing.assert_close(group["action_log_prob"], ref)
    torch.testing.assert_close(module.log_prob(td), ref)
    # a sample at the root keeps the root batch shape, as before
    flat = _normal_td((2, 5))
    assert ProbMod(in_keys=["loc", "scale"], out_keys=["action"], distribution_class=D.Normal, return_log_prob=True)(
        flat
    )["action_log_prob"].shape == (2, 5)


def test_interaction_types_switch():
    torch.manual_seed(0)
    td = _normal_td()
    module = ProbMod(in_keys=["loc", "scale"], out_keys=["action"], distribution_class=D.Normal, return_log_prob=True)
    with set_interaction_type(InteractionType.RANDOM):
        a1 = module(td)["action"].clone()
        lp1 = td["action_log_prob"].clone()
        a2 = module(td)["action"].clone()
    assert not torch.equal(a1, a2) and not torch.equal(a1, td["loc"])
    torch.testing.assert_close(lp1, D.Normal(td["loc"], td["scale"]).log_prob(a1).sum(-1))
    for itype in ("mode", "mean", "median", "deterministic"):
        with set_interaction_type(itype):
            torch.testing.assert_close(module(td)["action"], td["loc"])
    random_default = ProbMod(in_keys=["loc", "scale"], out_keys=["action"], default_interaction_type="random")
    assert not torch.equal(random_default(td)["action"], td["loc"])
    with set_interaction_type("mode"):
        torch.testing.assert_close(random_default(td)["action"], td["loc"])


def test_rsample_gradient_under_random():
    loc = torch.zeros(4, 3, requires_grad=True)
    td = TensorDict(loc=loc, scale=torch.ones(4, 3), batch_size=[4])
    module = ProbMod(in_keys=["loc", "scale"], out_keys=["action"], distribution_class=D.Normal)
    with set_interaction_type("random"):
        module(td)["action"].sum().backward()
    torch.testing.assert_close(loc.grad, torch.ones(4, 3))


def test_discrete_dict_in_keys_and_fallbacks():
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]])
    td = TensorDict({("agent", "x"): logits}, batch_size=[2])
    module = ProbMod(
        in_keys={"logits": ("agent", "x")},
        out_keys=[("agent", "action")],
        distribution_class=D.Categorical,
        return_log_prob=True,
        log_prob_key=("agent", "lp"),
    )
    module(td)  # DETERMINISTIC on a discrete support -> the mode
    assert torch.equal(td["agent", "action"], torch.tensor([1, 0]))
    torch.testing.assert_close(td["agent", "lp"], D.Categorical(logits=logits).log_prob(torch.tensor([1, 0])))
    # nested list in_keys use the last part as argument name
    nested = ProbMod(in_keys=[("agent", "logits")], out_keys=["a"], distribution_class=D.Categorical)
    td2 = TensorDict({("agent", "logits"): logits}, batch_size=[2])
    assert torch.equal(nested(td2)["a"], torch.tensor([1, 0]))
    # a continuous dist without deterministic_sample: the mean (Gamma: concentration / rate)
    gamma = ProbMod(in_keys=["concentration", "rate"], out_keys=["a"], distribution_class=D.Gamma)
    tdg = TensorDict(concentration=torch.tensor([2.0, 3.0]), rate=torch.tensor([1.0, 2.0]), batch_size=[2])
    torch.testing.assert_close(gamma(tdg)["a"], torch.tensor([2.0, 1.5]))
    with set_interaction_type("mode"):
        torch.testing.assert_close(gamma(tdg)["a"], torch.tensor([1.0, 1.0]))  # (c - 1) / r


class _NoMean(D.Normal):
    @property
    def mean(self):
        raise NotImplementedError

    @property
    def mode(self):
        raise NotImplementedError


def test_empirical_mean_fallback():
    torch.manual_seed(0)
    module = ProbMod(in_keys=["loc", "scale"], out_keys=["a"], distribution_class=_NoMean, n_empirical_estimate=20000)
    td = TensorDict(loc=torch.tensor([1.0, -2.0]), scale=torch.ones(2), batch_size=[2])
    for itype in ("mean", "mode"):
        with set_interaction_type(itype):
            torch.testing.assert_close(module(td)["a"], td["loc"], atol=0.05, rtol=0)


def test_distribution_kwargs_truncated_normal_and_cache():
    td = TensorDict(loc=torch.tensor([[0.9, 0.0]]), scale=torch.ones(1, 2), batch_size=[1])
    module = ProbMod(
        in_keys=["loc", "scale"],
        out_keys=["a"],
        distribution_class=TruncatedNormal,
        distribution_kwargs={"low": -1.0, "high": 1.0},
        return_log_prob=True,
        cache_dist=True,
    )
    module(td)
    ref = TruncatedNormal(td["loc"], td["scale"], -1.0, 1.0)
    torch.testing.assert_close(td["a"], ref.mean)  # TruncatedNormal's deterministic sample is its mean
    torch.testing.assert_close(td["a_log_prob"], ref.log_prob(ref.mean).sum(-1))
    assert isinstance(module._dist, TruncatedNormal)


def test_missing_key_errors():
    module = ProbMod(in_keys=["loc", "scale"], out_keys=["action"])
    td = TensorDict(loc=torch.zeros(2, 1), batch_size=[2])
    with pytest.raises(KeyError, match="in-key 'scale'.*holds"):
        module(td)
    td.set("scale", torch.ones(2, 1))
    with pytest.raises(KeyError, match="sample key 'action'"):
        module.log_prob(td)
    with pytest.raises(ValueError, match="in_keys"):
        ProbMod(in_keys=[1], out_keys=["a"])


def test_composite_in_module():
    torch.manual_seed(0)
    params = TensorDict(
        cont=TensorDict(loc=torch.randn(4, 2), scale=torch.ones(4, 2), batch_size=[4]),
        disc=TensorDict(logits=torch.randn(4, 3), batch_size=[4]),
        batch_size=[4],
    )
    td = TensorDict(params=params, batch_size=[4])
    module = ProbMod(
        in_keys=["params"],
        out_keys=["cont", "disc"],
        distribution_class=CompositeDistribution,
        distribution_kwargs={"distribution_map": {"cont": D.Normal, "disc": D.Categorical}},
        return_log_prob=True,
    )
    assert module.log_prob_keys == ["cont_log_prob", "disc_log_prob"]
    assert module.out_keys == ["cont", "disc", "cont_log_prob", "disc_log_prob"]
    with set_interaction_type("random"):
        module(td)
    # one log-prob per leaf (tensordict 0.14's default), each with the batch shape
    cont = D.Normal(params["cont", "loc"], 1.0).log_prob(td["cont"]).sum(-1)
    disc = D.Categorical(logits=params["disc", "logits"]).log_prob(td["disc"])
    assert "sample_log_prob" not in td.keys()
    torch.testing.assert_close(td["cont_log_prob"], cont)
    torch.testing.assert_close(td["disc_log_prob"], disc)
    lp = module.log_prob(td)
    assert sorted(lp.keys()) == ["cont_log_prob", "disc_log_prob"]
    torch.testing.assert_close(lp["cont_log_prob"], cont)
    torch.testing.assert_close(lp["disc_log_prob"], disc)
    module(td)
    torch.testing.assert_close(td["cont"], params["cont", "loc"])
    assert torch.equal(td["disc"], params["disc", "logits"].argmax(-1))


def test_log_prob_keys_follow_tensordict():
    # out_keys=None with a CompositeDistribution: the heads are the sample keys (name_map wins)
    kwargs = {"distribution_map": {"cont": D.Normal, ("group", "disc"): D.Categorical}}
    module = ProbMod(
        in_keys=["params"], distribution_class=CompositeDistribution, distribution_kwargs=kwargs, return_log_prob=True
    )
    assert module.dist_sample_keys == ["cont", ("group", "disc")]
    assert module.log_prob_keys == ["cont_log_prob", ("group", "disc_log_prob")]
    with pytest.raises(RuntimeError, match="log_prob_keys"):
        module.log_prob_key
    renamed = ProbMod(
        in_keys=["params"],
        distribution_class=CompositeDistribution,
        return_log_prob=True,
        distribution_kwargs={**kwargs, "name_map": {"cont": "a", ("group", "disc"): "b"}},
    )
    assert renamed.dist_sample_keys == ["a", "b"] and renamed.log_prob_keys == ["a_log_prob", "b_log_prob"]
    # explicit keys: the old name still works when asked for, and log_prob_keys renames per leaf
    old = ProbMod(in_keys=["loc", "scale"], out_keys=["action"], return_log_prob=True, log_prob_key="sample_log_prob")
    assert old.out_keys == ["action", "sample_log_prob"] and old.log_prob_keys == ["sample_log_prob"]
    params = TensorDict(
        cont=TensorDict(loc=torch.zeros(2, 3), scale=torch.ones(2, 3), batch_size=[2]),
        group=TensorDict(disc=TensorDict(logits=torch.zeros(2, 4), batch_size=[2]), batch_size=[2]),
        batch_size=[2],
    )
    custom = ProbMod(
        in_keys=["params"],
        out_keys=["cont", ("group", "disc")],
        distribution_class=CompositeDistribution,
        distribution_kwargs=kwargs,
        return_log_prob=True,
        log_prob_keys=["lp_c", ("group", "lp_d")],
    )
    td = custom(TensorDict(params=params, batch_size=[2]))
    torch.testing.assert_close(td["lp_c"], torch.full((2,), 3 * D.Normal(0.0, 1.0).log_prob(torch.tensor(0.0)).item()))
    torch.testing.assert_close(td["group", "lp_d"], torch.full((2,), -torch.log(torch.tensor(4.0)).item()))
    assert "cont_log_prob" not in td.keys()
    # the log-prob keys follow return_log_prob when it is switched later (TorchRL's losses do)
    late = ProbMod(in_keys=["loc", "scale"], out_keys=["action"])
    assert late.out_keys == ["action"] and late.log_prob_key == "action_log_prob"
    late.return_log_prob = True
    assert late.out_keys == ["action", "action_log_prob"]


def test_log_prob_key_errors():
    with pytest.raises(RuntimeError, match=r"log_prob_key='lp'.*2 sample keys.*log_prob_keys"):
        ProbMod(in_keys=["loc"], out_keys=["a", "b"], log_prob_key="lp")
    with pytest.raises(ValueError, match=r"log_prob_keys needs one key per sample key \['a', 'b'\], got \['x'\]"):
        ProbMod(in_keys=["loc"], out_keys=["a", "b"], log_prob_keys=["x"])
    with pytest.raises(ValueError, match="disagrees"):
        ProbMod(in_keys=["loc"], out_keys=["a"], log_prob_keys=["x"], log_prob_key="y")
    two = ProbMod(in_keys=["loc"], out_keys=["a", "b"])
    assert two.log_prob_keys == ["a_log_prob", "b_log_prob"]


def _actor(return_log_prob=True):
    return ProbSeq(
        TensorDictModule(
            nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()), in_keys=["obs"], out_keys=["loc", "scale"]
        ),
        ProbMod(
            in_keys=["loc", "scale"], out_keys=["action"], distribution_class=D.Normal, return_log_prob=return_log_prob
        ),
    )


def test_sequential_get_dist_log_prob_and_sampling():
    torch.manual_seed(0)
    actor = _actor()
    assert actor.in_keys == ["obs"] and actor.out_keys == ["loc", "scale", "action", "action_log_prob"]
    obs = torch.randn(5, 3)
    lin = actor[0].module[0]
    loc, scale = NormalParamExtractor()(lin(obs))
    td = TensorDict(obs=obs, batch_size=[5])
    dist = actor.get_dist(td)
    torch.testing.assert_close(dist.loc, loc)
    torch.testing.assert_close(dist.scale, scale)
    assert "loc" in td  # the deterministic part wrote its outputs
    dist2 = actor.build_dist_from_params(TensorDict(loc=loc, scale=scale, batch_size=[5]))
    torch.testing.assert_close(dist2.loc, loc)
    with set_interaction_type("random"):
        actor(td)
    torch.testing.assert_close(td["action_log_prob"], D.Normal(loc, scale).log_prob(td["action"]).sum(-1))
    torch.testing.assert_close(actor.log_prob(td), td["action_log_prob"])
    assert actor.log_prob_key == "action_log_prob" and actor.log_prob_keys == ["action_log_prob"]
    assert actor.dist_sample_keys == ["action"] and actor.dist_params_keys == ["loc", "scale"]
    assert actor.log_prob(td).shape == (5,)
    actor(td)
    torch.testing.assert_close(td["action"], loc)
    assert isinstance(actor[:1], TensorDictSequential) and not isinstance(actor[:1], ProbSeq)
    assert isinstance(actor[:], ProbSeq)
    # tensordict 0.14: a sequence ending in a deterministic step is allowed, as a composite (return_composite
    # defaults to True then); return_composite=False needs a probabilistic last step
    with pytest.raises(TypeError, match="last module must be a ProbabilisticTensorDictModule"):
        ProbSeq(TensorDictModule(nn.Linear(3, 3), in_keys=["obs"], out_keys=["x"]), return_composite=False)
    with pytest.raises(RuntimeError, match="no probabilistic module among the steps"):
        ProbSeq(TensorDictModule(nn.Linear(3, 3), in_keys=["obs"], out_keys=["x"])).get_dist(
            TensorDict(obs=obs, batch_size=[5])
        )
    with pytest.raises(KeyError, match="obs"):
        actor.get_dist(TensorDict(wrong=obs, batch_size=[5]))


def test_compiled_actor_matches_eager():
    torch._dynamo.reset()
    actor = _actor()

    def run(obs):
        td = TensorDict(obs=obs, batch_size=obs.shape[:1])
        actor(td)
        return td["action"], td["action_log_prob"], actor.log_prob(td)

    compiled = torch.compile(run, fullgraph=True, backend="eager")
    obs = torch.randn(6, 3)
    # torch's distribution argument checks do not trace; the first torch.compile of a session turns them
    # off, a test that ran before may have turned them back on: off here, whatever the order
    validate = D.Distribution._validate_args
    D.Distribution.set_default_validate_args(False)
    try:
        with set_interaction_type(InteractionType.DETERMINISTIC):
            got, want = compiled(obs), run(obs)
    finally:
        D.Distribution.set_default_validate_args(validate)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert got[1].shape == (6,)


def test_delta_and_one_hot_heads():
    from tdict.nn import Delta, OneHotCategorical

    td = TensorDict(param=torch.randn(4, 2), logits=torch.tensor([[0.0, 1.0, 0.5]]).expand(4, 3), batch_size=[4])
    delta = ProbMod(in_keys=["param"], out_keys=["a"], distribution_class=Delta, return_log_prob=True)
    for itype in ("random", "deterministic", "mode"):
        with set_interaction_type(itype):
            delta(td)
        torch.testing.assert_close(td["a"], td["param"])
        assert torch.equal(td["a_log_prob"], torch.zeros(4))
    onehot = ProbMod(in_keys=["logits"], out_keys=["b"], distribution_class=OneHotCategorical, return_log_prob=True)
    onehot(td)
    assert torch.equal(td["b"], torch.tensor([[0.0, 1.0, 0.0]]).expand(4, 3))
    torch.testing.assert_close(td["b_log_prob"], D.OneHotCategorical(logits=td["logits"]).log_prob(td["b"]))


# ---------------------------------------------------------------------- tensordict 0.14 arguments
def _seeded_normal(**kwargs):
    return ProbMod(
        in_keys=["loc", "scale"],
        out_keys=["action"],
        distribution_class=D.Normal,
        default_interaction_type=InteractionType.RANDOM,
        **kwargs,
    )


def test_num_samples_expands_the_output():
    td = TensorDict(loc=torch.zeros(2), scale=torch.ones(2), batch_size=[2])
    module = _seeded_normal(num_samples=3, return_log_prob=True)
    assert module.num_samples == (3,)
    out = module(td)
    # as tensordict 0.14.3: a new [3, 2] TensorDict; the input is left as it was
    assert out is not td and out.batch_size == (3, 2) and "action" not in td.keys()
    assert out["action"].shape == (3, 2) and out["action_log_prob"].shape == (3, 2) and out["loc"].shape == (3, 2)
    torch.testing.assert_close(out["action_log_prob"], D.Normal(0.0, 1.0).log_prob(out["action"]))
    wide = _seeded_normal(num_samples=(2, 3))(TensorDict(loc=torch.zeros(4), scale=torch.ones(4), batch_size=[4]))
    assert wide["action"].shape == (2, 3, 4)
    seq = ProbSeq(TensorDictModule(lambda x: x, in_keys=["x"], out_keys=["loc"]), _seeded_normal(num_samples=5))
    assert seq.num_samples == (5,)
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(ValueError, match="num_samples must be None, an int >= 0"):
            _seeded_normal(num_samples=bad)


def test_generator_argument_forms():
    td = TensorDict(loc=torch.zeros(2), scale=torch.ones(2))
    # tensordict 0.14.3's draws: an int seed makes the module's own generator (the stream advances)
    first = [1.5409960746765137, -0.293428897857666]
    second = [-2.1787893772125244, 0.5684312582015991]
    module = _seeded_normal(generator=0)
    assert module(td.clone())["action"].tolist() == first and module(td.clone())["action"].tolist() == second
    torch.manual_seed(123)
    state = torch.get_rng_state()
    gen = torch.Generator().manual_seed(0)
    assert _seeded_normal(generator=gen)(td.clone())["action"].tolist() == first
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is untouched
    # a key: a seed in the input, replaced by the next seed of its stream (JAX-style)
    keyed = _seeded_normal(generator="seed")
    data = td.clone()
    data["seed"] = torch.tensor(0)
    assert keyed(data)["action"].tolist() == first and int(data["seed"]) == 1895649597198586619
    assert (
        keyed(data)["action"].tolist() == [1.8946284055709839, 0.1361444741487503]
        and int(data["seed"]) == 3588561024410285094
    )
    data = td.clone()
    data.set_non_tensor("seed", 5)
    assert keyed(data)["action"].tolist() == [-0.4867807626724243, -0.6038215756416321]
    assert data.get_non_tensor("seed") == 3813295331020233846
    data = td.clone()
    data.set_non_tensor("seed", torch.Generator().manual_seed(0))
    assert keyed(data)["action"].tolist() == first
    assert keyed(td.clone())["action"].shape == (2,)  # no key in the input: the global RNG
    with pytest.raises(TypeError, match="generator must be a torch.Generator, an int seed, a key or None, got float"):
        _seeded_normal(generator=1.5)
    data = td.clone()
    data["seed"] = torch.tensor(0.5)
    with pytest.raises(TypeError, match="the generator key 'seed' holds Tensor"):
        keyed(data)


def _two_step(**kwargs):
    return ProbSeq(
        TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["loc"]),
        ProbMod(in_keys=["loc"], out_keys=["sample0"], distribution_class=D.Normal, distribution_kwargs={"scale": 1.0}),
        TensorDictModule(lambda s: s + 1, in_keys=["sample0"], out_keys=["loc2"]),
        ProbMod(
            in_keys={"loc": "loc2"},
            out_keys=["sample1"],
            distribution_class=D.Normal,
            distribution_kwargs={"scale": 1.0},
        ),
        **kwargs,
    )


def test_return_composite():
    composite = _two_step()
    assert composite.return_composite  # tensordict 0.14's default with two probabilistic steps
    dist = composite.get_dist(TensorDict(x=torch.ones(3)))
    assert isinstance(dist, CompositeDistribution) and sorted(dist.dists) == ["sample0", "sample1"]
    # batch [3]: log-probs have the batch shape here (tensordict writes [3] for a [] batch too)
    td = TensorDict(
        x=torch.ones(3), sample0=torch.tensor([0.5, 2.0, 3.0]), sample1=torch.tensor([1.0, 3.0, 0.0]), batch_size=[3]
    )
    lp = composite.log_prob(td)
    # tensordict 0.14.3's numbers: the intermediate step draws (deterministically: its mean 2) before loc2
    assert sorted(lp.keys()) == ["sample0_log_prob", "sample1_log_prob"]
    torch.testing.assert_close(
        lp["sample0_log_prob"], torch.tensor([-2.043938636779785, -0.9189385175704956, -1.4189385175704956])
    )
    torch.testing.assert_close(
        lp["sample1_log_prob"], torch.tensor([-2.918938636779785, -0.9189385175704956, -5.418938636779785])
    )
    last_only = _two_step(return_composite=False)
    assert isinstance(last_only.get_dist(TensorDict(x=torch.ones(3))), D.Normal)
    torch.testing.assert_close(last_only.log_prob(td), lp["sample1_log_prob"])
    assert isinstance(composite[:2], ProbSeq) and composite[:2].return_composite
    # a deterministic last step: a composite of the earlier probabilistic step
    tail = ProbSeq(
        TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["loc"]),
        ProbMod(in_keys=["loc"], out_keys=["s"], distribution_class=D.Normal, distribution_kwargs={"scale": 1.0}),
        TensorDictModule(lambda s: s * 2, in_keys=["s"], out_keys=["y"]),
    )
    assert tail.return_composite and sorted(tail(TensorDict(x=torch.ones(3))).keys()) == ["loc", "s", "x", "y"]
    assert sorted(tail.get_dist(TensorDict(x=torch.ones(3))).dists) == ["s"]
    single = ProbSeq(
        TensorDictModule(lambda x: x + 1, in_keys=["x"], out_keys=["loc"]),
        ProbMod(in_keys=["loc"], out_keys=["s"], distribution_class=D.Normal, distribution_kwargs={"scale": 1.0}),
    )
    assert not single.return_composite
    with pytest.raises(TypeError, match="return_composite must be a bool or None"):
        _two_step(return_composite="yes")


def test_dist_function_builds_what_get_dist_builds():
    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(3, 4), NormalParamExtractor())
    actor = ProbSeq(
        TensorDictModule(body, in_keys=["obs"], out_keys=["loc", "scale"]),
        ProbMod(in_keys={"loc": "loc", "scale": "scale"}, out_keys=["action"], distribution_class=D.Normal),
    )
    td = TensorDict(obs=torch.randn(6, 3), batch_size=[6])
    expected = actor.get_dist(td.clone())
    dist = actor.dist_function(batch_dims=1)(td["obs"])
    assert type(dist) is D.Normal and dist.batch_shape == (6, 2)
    assert torch.equal(dist.loc, expected.loc) and torch.equal(dist.scale, expected.scale)
    loc, scale = body(td["obs"])
    torch.testing.assert_close(dist.loc, loc)
    torch.testing.assert_close(dist.scale, scale)
    # a module alone: its parameters in in_keys order, constant keyword arguments added
    bounded = ProbMod(
        in_keys=["loc", "scale"],
        out_keys=["a"],
        distribution_class=TruncatedNormal,
        distribution_kwargs={"low": -1.0, "high": 1.0},
    )
    built = bounded.dist_function()(torch.zeros(2), torch.ones(2))
    reference = bounded.get_dist(TensorDict(loc=torch.zeros(2), scale=torch.ones(2)))
    assert type(built) is TruncatedNormal
    torch.testing.assert_close(built.log_prob(torch.full((2,), 0.5)), reference.log_prob(torch.full((2,), 0.5)))


def test_dist_function_is_none_when_get_dist_does_more():
    def actor(**kwargs):
        return ProbSeq(
            TensorDictModule(NormalParamExtractor(), in_keys=["x"], out_keys=["loc", "scale"]),
            ProbMod(in_keys=["loc", "scale"], out_keys=["a"], **kwargs),
        )

    assert actor().dist_function() is not None
    assert actor(cache_dist=True).dist_function() is None  # get_dist also stores the distribution
    hooked = actor()
    handle = hooked[0].register_forward_hook(lambda *args: None)
    assert hooked.dist_function() is None
    handle.remove()
    assert hooked.dist_function() is not None

    class Shifted(ProbSeq):
        def get_dist(self, tensordict):
            return super().get_dist(tensordict)

    assert Shifted(*actor()).dist_function() is None
    assert ProbSeq(actor(), return_composite=True).dist_function() is None


def test_dist_function_reads_the_settings_at_each_call():
    import copy

    module = ProbMod(in_keys=["loc", "scale"], out_keys=["a"], distribution_class=D.Normal)
    build = module.dist_function()
    assert module.dist_function() is build
    module.distribution_class = D.Laplace  # read again by the next call, as get_dist does
    assert type(build(torch.zeros(2), torch.ones(2))) is D.Laplace
    clone = copy.deepcopy(module)
    clone.distribution_class = D.Normal
    assert type(clone.dist_function()(torch.zeros(2), torch.ones(2))) is D.Normal
    assert type(module.dist_function()(torch.zeros(2), torch.ones(2))) is D.Laplace
