"""Actors and critics: keys, specs, shapes (batch [], [4], [2, 3]), interaction types and errors."""

import pytest
import torch
from rl_objectives.modules import (
    MLP,
    Actor,
    ActorCriticWrapper,
    ActorValueOperator,
    ProbabilisticActor,
    QValueActor,
    QValueModule,
    SafeModule,
    TanhNormal,
    ValueOperator,
)
from tdict import TensorDict
from tdict.nn import (
    InteractionType,
    NormalParamExtractor,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
    set_interaction_type,
)
from tdict.specs import Bounded, Categorical, Composite, MultiOneHot, OneHot, Unbounded
from torch import distributions as D
from torch import nn

BATCHES = [(), (4,), (2, 3)]


def _obs(batch, n=3):
    return TensorDict(observation=torch.randn(*batch, n), batch_size=batch)


class TestActor:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_defaults_and_shapes(self, batch):
        lin = nn.Linear(3, 2)
        actor = Actor(lin, spec=Bounded(-1.0, 1.0, shape=(2,)))
        assert actor.in_keys == ["observation"] and actor.out_keys == ["action"]
        assert isinstance(actor.spec, Composite) and list(actor.spec.keys()) == ["action"]
        td = actor(_obs(batch))
        assert td["action"].shape == (*batch, 2)
        torch.testing.assert_close(td["action"], lin(td["observation"]))

    @pytest.mark.parametrize("batch", BATCHES)
    def test_safe_projects_into_spec(self, batch):
        actor = Actor(lambda x: 10 * x, spec=Bounded(-1.0, 1.0, shape=(3,)), safe=True)
        td = actor(_obs(batch))
        expected = (10 * td["observation"]).clamp(-1.0, 1.0)
        torch.testing.assert_close(td["action"], expected)
        # the tensor call path is projected too
        x = torch.randn(*batch, 3)
        torch.testing.assert_close(actor(observation=x), (10 * x).clamp(-1, 1))

    def test_custom_keys_and_composite_spec(self):
        spec = Composite(act=Unbounded(shape=(2,)))
        actor = Actor(nn.Linear(3, 2), in_keys=["obs"], out_keys=["act"], spec=spec)
        assert actor.spec is spec
        assert actor(TensorDict(obs=torch.zeros(3)))["act"].shape == (2,)

    def test_errors(self):
        with pytest.raises(ValueError, match="safe=True needs a spec"):
            Actor(nn.Linear(3, 2), safe=True)
        with pytest.raises(TypeError, match="spec must be a TensorSpec"):
            Actor(nn.Linear(3, 2), spec="box")
        with pytest.raises(KeyError, match="observation"):
            Actor(nn.Linear(3, 2))(TensorDict(obs=torch.zeros(3)))

    def test_safe_module_multiple_outputs(self):
        m = SafeModule(
            lambda x: (x, 5 * x),
            in_keys=["x"],
            out_keys=["a", "b"],
            spec=Composite(b=Bounded(0.0, 1.0, shape=(2,))),
            safe=True,
        )
        td = m(TensorDict(x=torch.tensor([0.5, -0.5])))
        torch.testing.assert_close(td["a"], torch.tensor([0.5, -0.5]))
        torch.testing.assert_close(td["b"], torch.tensor([1.0, 0.0]))

    def test_torchrl_keyword_arguments(self):
        # TorchRL's SafeModule(inplace=): False writes into a new TensorDict, the input is left alone
        m = SafeModule(
            lambda x: 3 * x,
            in_keys=["x"],
            out_keys=["y"],
            spec=Bounded(-1.0, 1.0, shape=(2,)),
            safe=True,
            inplace=False,
        )
        td = TensorDict(x=torch.tensor([0.1, 0.5]))
        out = m(td)
        assert out is not td and list(td.keys()) == ["x"] and out["y"].tolist() == [0.30000001192092896, 1.0]
        with pytest.raises(ValueError, match="inplace must be True, False, None or 'empty'"):
            SafeModule(lambda x: x, in_keys=["x"], out_keys=["y"], inplace="maybe")


def _param_net(n_obs=3, n_act=2, scale_mapping="biased_softplus_1.0"):
    torch.manual_seed(0)
    return TensorDictModule(
        nn.Sequential(nn.Linear(n_obs, 2 * n_act), NormalParamExtractor(scale_mapping=scale_mapping)),
        in_keys=["observation"],
        out_keys=["loc", "scale"],
    )


class TestSafeProbabilisticModule:
    def test_every_probabilistic_module_argument(self):
        from rl_objectives.modules import SafeProbabilisticModule

        spec = Bounded(-1.0, 1.0, shape=(2,))
        m = SafeProbabilisticModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            spec=spec,
            safe=True,
            log_prob_key="lp",
            return_log_prob=True,
            default_interaction_type=InteractionType.RANDOM,
            distribution_class=D.Normal,
            distribution_kwargs={"validate_args": False},
            cache_dist=True,
            n_empirical_estimate=10,
            num_samples=4,
            generator=0,
        )
        td = TensorDict(loc=torch.full((3, 2), 5.0), scale=torch.ones(3, 2), batch_size=[3])
        out = m(td)
        assert out.batch_size == (4, 3) and out["action"].shape == (4, 3, 2) and out["lp"].shape == (4, 3)
        assert bool((out["action"] == 1.0).all())  # projected into the spec before the log-prob
        torch.testing.assert_close(out["lp"], D.Normal(5.0, 1.0).log_prob(torch.ones(4, 3, 2)).sum(-1))
        assert isinstance(m._dist, D.Normal) and m.n_empirical_estimate == 10
        # the module's own seeded generator: the same draws as a fresh one seeded 0 (and the stream advances)
        free = SafeProbabilisticModule(
            in_keys=["loc", "scale"], out_keys=["action"], default_interaction_type="random", generator=0
        )
        ref = torch.Generator().manual_seed(0)
        small = TensorDict(loc=torch.zeros(3), scale=torch.ones(3), batch_size=[3])
        assert free(small.clone())["action"].tolist() == torch.randn(3, generator=ref).tolist()
        m2 = SafeProbabilisticModule(
            in_keys=["loc", "scale"], out_keys=["action"], log_prob_keys=["a_lp"], return_log_prob=True
        )
        assert m2.log_prob_keys == ["a_lp"] and m2.out_keys == ["action", "a_lp"]


class TestProbabilisticActor:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_deterministic_gives_the_mode(self, batch):
        actor = ProbabilisticActor(
            _param_net(),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
            distribution_kwargs={"low": -2.0, "high": 2.0},
            return_log_prob=True,
        )
        with set_interaction_type(InteractionType.DETERMINISTIC):
            td = actor(_obs(batch))
        torch.testing.assert_close(td["action"], 2.0 * torch.tanh(td["loc"]))
        assert td["action_log_prob"].shape == batch
        ref = TanhNormal(td["loc"], td["scale"], low=-2.0, high=2.0).log_prob(td["action"])
        torch.testing.assert_close(td["action_log_prob"], ref)
        # no interaction type set: default_interaction_type (deterministic)
        td2 = actor(td.exclude("action", "action_log_prob"))
        torch.testing.assert_close(td2["action"], td["action"])

    @pytest.mark.parametrize("batch", BATCHES)
    def test_random_samples_projected_into_spec(self, batch):
        # a Normal far outside the box: every raw sample is out of bounds, safe=True projects them
        net = TensorDictModule(
            lambda obs: (obs * 0 + 5.0, torch.ones_like(obs)), in_keys=["observation"], out_keys=["loc", "scale"]
        )
        spec = Bounded(-1.0, 1.0, shape=(3,))
        actor = ProbabilisticActor(
            net, in_keys=["loc", "scale"], spec=spec, safe=True, distribution_class=D.Normal, return_log_prob=True
        )
        with set_interaction_type("random"):
            td = actor(_obs(batch))
        assert td["action"].shape == (*batch, 3)
        assert spec.is_in(td["action"])
        # the log-prob describes the written (projected) action, summed to the batch shape
        torch.testing.assert_close(
            td["action_log_prob"], D.Normal(td["loc"], td["scale"]).log_prob(td["action"]).sum(-1)
        )
        # unsafe: raw samples escape the box
        raw = ProbabilisticActor(net, in_keys=["loc", "scale"], spec=spec, distribution_class=D.Normal)
        with set_interaction_type("random"):
            assert not spec.is_in(raw(_obs((50,)))["action"])

    def test_safe_nested_action_keeps_one_log_prob_per_agent(self):
        # safe=True on an action under a [B, n_agents] group: the log-prob key follows the action key
        # and keeps the group's batch shape (it used to be summed down to the root batch)
        loc = torch.full((4, 3, 2), 5.0)
        net = TensorDictModule(
            lambda obs: (obs * 0 + loc, torch.ones_like(obs)),
            in_keys=[("agents", "observation")],
            out_keys=[("agents", "loc"), ("agents", "scale")],
        )
        spec = Composite({("agents", "action"): Bounded(-1.0, 1.0, shape=(4, 3, 2))})
        actor = ProbabilisticActor(
            net,
            in_keys={"loc": ("agents", "loc"), "scale": ("agents", "scale")},
            out_keys=[("agents", "action")],
            spec=spec,
            safe=True,
            distribution_class=D.Normal,
            return_log_prob=True,
        )
        assert actor.log_prob_key == ("agents", "action_log_prob")
        td = TensorDict(agents=TensorDict(observation=torch.zeros(4, 3, 2), batch_size=[4, 3]), batch_size=[4])
        with set_interaction_type("random"):
            actor(td)
        assert torch.equal(td["agents", "action"], torch.ones(4, 3, 2))  # every draw projected onto the bound
        lp = td["agents", "action_log_prob"]
        assert lp.shape == (4, 3)
        torch.testing.assert_close(lp, D.Normal(loc, 1.0).log_prob(torch.ones(4, 3, 2)).sum(-1))

    def test_random_varies_and_in_bounds_with_tanh(self):
        actor = ProbabilisticActor(
            _param_net(), in_keys=["loc", "scale"], distribution_class=TanhNormal, spec=Bounded(-1.0, 1.0, shape=(2,))
        )
        with set_interaction_type("random"):
            a1 = actor(_obs((200,)))["action"]
        assert ((a1 > -1) & (a1 < 1)).all()
        with set_interaction_type("deterministic"):
            d = actor(_obs((200,)))
        assert not torch.allclose(a1, d["action"])

    def test_get_dist_and_log_prob(self):
        actor = ProbabilisticActor(_param_net(), in_keys=["loc", "scale"], distribution_class=TanhNormal)
        td = actor(_obs((5,)))
        dist = actor.get_dist(td)
        assert isinstance(dist, TanhNormal)
        torch.testing.assert_close(actor.log_prob(td), dist.log_prob(td["action"]))
        assert isinstance(actor, ProbabilisticTensorDictSequential)
        assert actor.spec is None

    def test_errors(self):
        with pytest.raises(TypeError, match="module must be a TensorDict module"):
            ProbabilisticActor(nn.Linear(3, 4), in_keys=["loc", "scale"])
        with pytest.raises(ValueError, match="safe=True needs a spec"):
            ProbabilisticActor(_param_net(), in_keys=["loc", "scale"], safe=True)


class TestValueOperator:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_squeezes_one_wide_head(self, batch):
        lin = nn.Linear(3, 1)
        critic = ValueOperator(lin)
        assert critic.out_keys == ["state_value"]
        td = critic(_obs(batch))
        assert td["state_value"].shape == batch
        torch.testing.assert_close(td["state_value"], lin(td["observation"]).squeeze(-1))

    @pytest.mark.parametrize("batch", BATCHES)
    def test_state_action_value_and_wide_head(self, batch):
        q = ValueOperator(MLP(in_features=5, out_features=1, num_cells=[4]), in_keys=["observation", "action"])
        assert q.out_keys == ["state_action_value"]
        td = _obs(batch).set("action", torch.randn(*batch, 2))
        assert q(td)["state_action_value"].shape == batch
        wide = ValueOperator(nn.Linear(3, 2), out_keys=["values"])
        assert wide(_obs(batch))["values"].shape == (*batch, 2)

    def test_batch_dim_of_size_one_is_not_squeezed(self):
        # a module that already returns the batch shape: with batch [1] nothing must be squeezed
        critic = ValueOperator(lambda obs: obs.sum(-1))
        assert critic(_obs((1,)))["state_value"].shape == (1,)
        assert ValueOperator(nn.Linear(3, 1))(_obs((1,)))["state_value"].shape == (1,)

    def test_tensor_call(self):
        critic = ValueOperator(nn.Linear(3, 1))
        assert critic(observation=torch.randn(6, 3)).shape == (6,)


class TestQValueModule:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_one_hot_and_categorical_against_argmax(self, batch):
        values = torch.randn(*batch, 5)
        td = TensorDict(action_value=values, batch_size=batch)
        q = QValueModule(action_space="one_hot")
        assert q.out_keys == ["action", "action_value", "chosen_action_value"]
        out = q(td.clone())
        idx = torch.argmax(values, -1)
        assert torch.equal(out["action"], nn.functional.one_hot(idx, 5))
        assert out["action"].dtype == torch.int64
        torch.testing.assert_close(out["chosen_action_value"], values.max(-1).values)
        assert out["chosen_action_value"].shape == batch
        out = QValueModule(action_space="categorical")(td.clone())
        assert torch.equal(out["action"], idx)
        torch.testing.assert_close(out["chosen_action_value"], values.max(-1).values)

    def test_spec_gives_space_and_dtype(self):
        values = torch.randn(4, 3)
        out = QValueModule(spec=OneHot(3))(TensorDict(action_value=values, batch_size=[4]))
        assert out["action"].dtype == torch.bool and OneHot(3).is_in(out["action"])
        out = QValueModule(Categorical(3))(TensorDict(action_value=values, batch_size=[4]))
        assert torch.equal(out["action"], values.argmax(-1))

    def test_action_mask(self):
        values = torch.tensor([[5.0, 1.0, 3.0], [0.0, 9.0, 2.0]])
        mask = torch.tensor([[False, True, True], [True, False, True]])
        q = QValueModule(action_space="categorical", action_mask_key="action_mask")
        out = q(TensorDict(action_value=values, action_mask=mask, batch_size=[2]))
        assert out["action"].tolist() == [2, 2]
        assert out["chosen_action_value"].tolist() == [3.0, 2.0]

    def test_mult_one_hot(self):
        values = torch.tensor([[0.0, 1.0, 5.0, 2.0, 3.0]])
        out = QValueModule(spec=MultiOneHot([2, 3]))(TensorDict(action_value=values, batch_size=[1]))
        assert out["action"].tolist() == [[False, True, True, False, False]]
        assert out["chosen_action_value"].tolist() == [6.0]

    def test_errors(self):
        with pytest.raises(ValueError, match="neither action_space nor spec"):
            QValueModule()
        with pytest.raises(ValueError, match="action_space must be one of"):
            QValueModule(action_space="gaussian")
        with pytest.raises(NotImplementedError, match="binary"):
            QValueModule(action_space="binary")
        with pytest.raises(ValueError, match="disagrees"):
            QValueModule(action_space="one_hot", spec=Categorical(3))
        with pytest.raises(ValueError, match="var_nums"):
            QValueModule(action_space="mult_one_hot")
        with pytest.raises(KeyError, match="action_value"):
            QValueModule(action_space="one_hot")(TensorDict(q=torch.zeros(3)))

    def test_strict_shape_follows_torchrl(self):
        values = torch.tensor([[0.0, 2.0, 1.0, 0.5], [3.0, 0.0, 1.0, 0.2], [0.1, 0.2, 0.3, 0.4]])

        def action(**kwargs):
            return QValueModule(**kwargs)(TensorDict(action_value=values, batch_size=[3]))["action"]

        # TorchRL 0.14.1 on the same calls: a leaf spec has no batch dims, so a spec carrying the
        # batch (OneHot(4, shape=(3, 4))) is refused unless its Composite says so
        assert action(spec=OneHot(4)).shape == (3, 4)
        with pytest.raises(
            RuntimeError, match=r"has shape \(3, 4\), the spec expects \(3, 3, 4\).*strict_shape='auto'"
        ):
            action(spec=OneHot(4, shape=(3, 4)))
        with pytest.raises(
            RuntimeError,
            match="strict_shape='auto' cannot reshape the action 'action' from \\(3, 4\\) to \\(3, 3, 4\\)",
        ):
            action(spec=OneHot(4, shape=(3, 4)), strict_shape="auto")
        assert action(spec=OneHot(4, shape=(3, 4)), strict_shape=False).shape == (3, 4)
        assert action(spec=Composite(action=OneHot(4, shape=(3, 4)), shape=(3,))).shape == (3, 4)
        with pytest.raises(RuntimeError, match="the spec expects \\(3, 1\\)"):
            action(spec=Categorical(4, shape=(1,)))
        assert action(spec=Categorical(4, shape=(1,)), strict_shape="auto").tolist() == [[1], [0], [3]]
        with pytest.raises(RuntimeError):
            action(spec=Categorical(4, shape=(1,)), strict_shape=None)  # None behaves like True
        assert action(action_space="one_hot").shape == (3, 4)  # no spec: nothing to check
        with pytest.raises(ValueError, match="strict_shape must be True, False, None or 'auto', got 'maybe'"):
            QValueModule(spec=OneHot(4), strict_shape="maybe")
        actor = QValueActor(nn.Linear(3, 4), spec=OneHot(4, shape=(2, 4)), strict_shape=False)
        assert actor(TensorDict(observation=torch.randn(2, 3), batch_size=[2]))["action"].shape == (2, 4)
        with pytest.raises(RuntimeError, match="strict_shape"):
            QValueActor(nn.Linear(3, 4), spec=OneHot(4, shape=(2, 4)))(
                TensorDict(observation=torch.randn(2, 3), batch_size=[2])
            )


class TestQValueActor:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_wraps_network(self, batch):
        lin = nn.Linear(3, 4)
        actor = QValueActor(lin, spec=OneHot(4))
        td = actor(_obs(batch))
        values = lin(td["observation"])
        torch.testing.assert_close(td["action_value"], values)
        assert torch.equal(td["action"], nn.functional.one_hot(values.argmax(-1), 4).bool())
        assert td["chosen_action_value"].shape == batch
        assert list(actor.spec.keys()) == ["action"]

    def test_tensordict_module_and_errors(self):
        net = TensorDictModule(nn.Linear(3, 4), in_keys=["observation"], out_keys=["action_value"])
        actor = QValueActor(net, action_space="categorical")
        assert actor(_obs((2,)))["action"].shape == (2,)
        bad = TensorDictModule(nn.Linear(3, 4), in_keys=["observation"], out_keys=["q"])
        with pytest.raises(ValueError, match="action_value"):
            QValueActor(bad, action_space="categorical")

    def test_torchrl_style_output_keys(self):
        # TorchRL 0.14: QValueActor(..., action_key=, chosen_action_value_key=, action_value_key=, action_mask_key=)
        lin = nn.Linear(3, 4)
        spec = Composite({("agent", "act"): Categorical(4)})
        actor = QValueActor(
            lin,
            in_keys=["observation"],
            spec=spec,
            action_space="categorical",
            action_value_key="q",
            action_key=("agent", "act"),
            chosen_action_value_key="q_max",
            action_mask_key="mask",
        )
        assert actor[-1].out_keys == [("agent", "act"), "q", "q_max"]
        td = _obs((2,))
        td["mask"] = torch.tensor([[True, False, True, False], [False, True, False, False]])
        actor(td)
        q = lin(td["observation"])
        best = q.masked_fill(~td["mask"], float("-inf")).argmax(-1)
        assert torch.equal(td["agent", "act"], best) and "action" not in td.keys()
        torch.testing.assert_close(td["q_max"], q.gather(-1, best.unsqueeze(-1)).squeeze(-1))
        assert td["agent", "act"].dtype == torch.int64  # the spec's dtype, found under the action key


class TestActorValueOperator:
    def _parts(self):
        torch.manual_seed(0)
        common = TensorDictModule(nn.Linear(3, 8), in_keys=["observation"], out_keys=["hidden"])
        policy = ProbabilisticActor(
            TensorDictModule(
                nn.Sequential(nn.Linear(8, 4), NormalParamExtractor()), in_keys=["hidden"], out_keys=["loc", "scale"]
            ),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
            return_log_prob=True,
        )
        value = ValueOperator(nn.Linear(8, 1), in_keys=["hidden"])
        return common, policy, value

    @pytest.mark.parametrize("batch", BATCHES)
    def test_operators_match_full_run(self, batch):
        op = ActorValueOperator(*self._parts())
        td = op(_obs(batch))
        assert td["action"].shape == (*batch, 2) and td["state_value"].shape == batch
        policy_op = op.get_policy_operator()
        assert isinstance(policy_op, ProbabilisticTensorDictSequential)
        p = policy_op(td.select("observation"))
        torch.testing.assert_close(p["action"], td["action"])
        torch.testing.assert_close(policy_op.log_prob(p), td["action_log_prob"])
        v = op.get_value_operator()(td.select("observation"))
        torch.testing.assert_close(v["state_value"], td["state_value"])
        assert "action" not in v
        # the operators share parameters with the full module
        assert op.get_value_operator()[0] is op[0] and op.get_value_head() is op[2] and op.get_policy_head() is op[1]

    def test_deterministic_policy_head_and_errors(self):
        common = TensorDictModule(nn.Linear(3, 8), in_keys=["observation"], out_keys=["hidden"])
        op = ActorValueOperator(
            common, Actor(nn.Linear(8, 2), in_keys=["hidden"]), ValueOperator(nn.Linear(8, 1), in_keys=["hidden"])
        )
        assert type(op.get_policy_operator()) is TensorDictSequential
        with pytest.raises(TypeError, match="value_operator"):
            ActorValueOperator(common, Actor(nn.Linear(8, 2), in_keys=["hidden"]), nn.Linear(8, 1))


class TestActorCriticWrapper:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_run_and_getters(self, batch):
        policy, critic = Actor(nn.Linear(3, 2)), ValueOperator(nn.Linear(3, 1))
        ac = ActorCriticWrapper(policy, critic)
        td = ac(_obs(batch))
        assert td["action"].shape == (*batch, 2) and td["state_value"].shape == batch
        assert ac.get_policy_operator() is policy and ac.get_value_operator() is critic
        with pytest.raises(TypeError, match="policy_operator"):
            ActorCriticWrapper(nn.Linear(3, 2), critic)


def test_compiled_matches_eager():
    """Actor (safe), ValueOperator and QValueActor trace with fullgraph=True and match eager."""
    validate = D.Distribution._validate_args  # compiling switches torch's default argument validation off
    torch._dynamo.reset()
    td = _obs((4,))
    modules = [
        Actor(nn.Linear(3, 2), spec=Bounded(-0.1, 0.1, shape=(2,)), safe=True),
        ValueOperator(nn.Linear(3, 1)),
        QValueActor(nn.Linear(3, 4), spec=OneHot(4)),
    ]
    try:
        for module in modules:
            compiled = torch.compile(module, fullgraph=True)
            out, ref = compiled(td.clone()), module(td.clone())
            for key in module.out_keys:
                torch.testing.assert_close(out[key], ref[key])
    finally:
        D.Distribution.set_default_validate_args(validate)


@pytest.mark.parametrize("in_keys", [["observation"], ["observation", "action"]])
def test_value_operator_tensor_function_squeezes_like_its_call(in_keys):
    net = MLP(in_features=3 * len(in_keys), out_features=1, num_cells=[4])
    critic = ValueOperator(net, in_keys=in_keys)
    td = TensorDict({key: torch.randn(2, 5, 3) for key in in_keys}, batch_size=[2, 5])
    (value,) = critic.tensor_function(td.batch_dims)(*(td[key] for key in in_keys))
    assert value.shape == (2, 5)
    assert torch.equal(value, critic(td.clone())[critic.out_keys[0]])
    # a batch dim of size 1 is not squeezed
    one = TensorDict({key: torch.randn(4, 1, 3) for key in in_keys}, batch_size=[4, 1])
    (value,) = critic.tensor_function(2)(*(one[key] for key in in_keys))
    assert value.shape == (4, 1) and torch.equal(value, critic(one.clone())[critic.out_keys[0]])

    class Shifted(ValueOperator):  # its own forward: no tensor function unless it gives one
        def forward(self, tensordict):
            return super().forward(tensordict).apply(lambda t: t + 1)

    assert Shifted(net, in_keys=in_keys).tensor_function(2) is None
