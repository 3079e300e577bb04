"""``log_prob_key`` / ``log_prob_keys``: expected values observed on tensordict 0.14.3 and TorchRL 0.14.1
(``composite_lp_aggregate()`` off, their default).

Deliberate differences: ``log_prob_key`` disagreeing with ``log_prob_keys``, or ``log_prob_keys`` of another
length than the sample keys, raise here (tensordict silently keeps ``log_prob_keys``); the sequential's
``log_prob_key`` answers (tensordict 0.14 raises ``AttributeError`` from inside its own property).
"""

import pytest
import torch
from torch import distributions as D

from tdict import TensorDict
from tdict.nn import (
    CompositeDistribution,
    ProbabilisticTensorDictModule as ProbMod,
    ProbabilisticTensorDictSequential as ProbSeq,
    TensorDictModule,
    TensorDictSequential,
    set_interaction_type,
)

DIST_MAP = {"cont": D.Normal, ("nested", "disc"): D.Categorical}


def _net():
    return TensorDictModule(lambda x: (x, x.exp()), in_keys=["obs"], out_keys=["loc", "scale"])


def _mod(out_keys, **kwargs):
    return ProbMod(in_keys=["loc", "scale"], out_keys=out_keys, distribution_class=D.Normal, **kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"log_prob_key": None}, {"log_prob_key": None, "log_prob_keys": None}])
def test_none_means_the_default_key(kwargs):
    module = _mod(["action"], return_log_prob=True, **kwargs)
    assert module.log_prob_keys == ["action_log_prob"]
    assert module.log_prob_key == "action_log_prob"
    assert module.out_keys == ["action", "action_log_prob"]
    td = module(TensorDict(loc=torch.zeros(4, 2), scale=torch.ones(4, 2), batch_size=[4]))
    assert td["action_log_prob"].shape == torch.Size([4])


def test_default_key_follows_the_sample_key():
    nested = _mod([("agents", "action")], log_prob_key=None, return_log_prob=True)
    assert nested.log_prob_keys == [("agents", "action_log_prob")]
    assert nested.log_prob_key == ("agents", "action_log_prob")
    assert nested.out_keys == [("agents", "action"), ("agents", "action_log_prob")]
    assert _mod("action").log_prob_keys == ["action_log_prob"]
    unnamed = ProbMod(in_keys=["loc", "scale"], return_log_prob=True)  # the "_" placeholder out-key
    assert unnamed.log_prob_keys == ["__log_prob"] and unnamed.out_keys == ["_", "__log_prob"]
    assert _mod(["action"], return_log_prob=False).out_keys == ["action"]


def test_given_keys():
    given = _mod(["action"], log_prob_key="sample_log_prob", return_log_prob=True)
    assert given.log_prob_keys == ["sample_log_prob"] and given.log_prob_key == "sample_log_prob"
    assert given.out_keys == ["action", "sample_log_prob"]
    listed = _mod(["action"], log_prob_keys=["lp"], return_log_prob=True)
    assert listed.log_prob_keys == ["lp"] and listed.log_prob_key == "lp" and listed.out_keys == ["action", "lp"]
    assert _mod(["action"], log_prob_keys=["lp"], log_prob_key="lp").log_prob_keys == ["lp"]
    assert _mod(["a", "b"], log_prob_keys=["x", "y"]).log_prob_keys == ["x", "y"]


def test_several_sample_keys():
    module = _mod(["a", "b"], log_prob_key=None, return_log_prob=True)
    assert module.log_prob_keys == ["a_log_prob", "b_log_prob"]
    assert module.out_keys == ["a", "b", "a_log_prob", "b_log_prob"]
    with pytest.raises(RuntimeError, match="2 log-prob keys"):
        module.log_prob_key
    with pytest.raises(RuntimeError, match="log_prob_key='x' names one log-prob but there are 2 sample keys"):
        _mod(["a", "b"], log_prob_key="x")


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="log_prob_keys needs one key per sample key"):
        _mod(["a", "b"], log_prob_keys=["x"])
    with pytest.raises(ValueError, match="log_prob_key='x' disagrees with log_prob_keys"):
        _mod(["action"], log_prob_keys=["lp"], log_prob_key="x")
    with pytest.raises(ValueError, match="log_prob_key"):
        _mod(["action"], log_prob_key=3)


def test_composite_distribution_one_key_per_leaf():
    module = ProbMod(
        in_keys=["params"],
        distribution_class=CompositeDistribution,
        distribution_kwargs={"distribution_map": DIST_MAP},
        return_log_prob=True,
        log_prob_key=None,
    )
    assert module.log_prob_keys == ["cont_log_prob", ("nested", "disc_log_prob")]
    assert module.out_keys == ["cont", ("nested", "disc"), "cont_log_prob", ("nested", "disc_log_prob")]
    with pytest.raises(RuntimeError, match="2 log-prob keys"):
        module.log_prob_key


def test_sequential_lists_last_step_first():
    seq = ProbSeq(_net(), _mod(["action"], log_prob_key=None, return_log_prob=True))
    assert seq.log_prob_keys == ["action_log_prob"] and seq.log_prob_key == "action_log_prob"
    two = ProbSeq(_net(), _mod(["a"]), TensorDictModule(lambda a: a, in_keys=["a"], out_keys=["loc"]), _mod(["b"]))
    assert two.log_prob_keys == ["b_log_prob", "a_log_prob"]
    with pytest.raises(RuntimeError, match="2 log-prob keys"):
        two.log_prob_key
    assert ProbSeq(_net(), ProbSeq(_net(), _mod(["a"]))).log_prob_keys == ["a_log_prob"]
    # a plain TensorDictSequential step has no log-prob keys of its own
    assert ProbSeq(TensorDictSequential(_net(), _mod(["a"])), _mod(["b"])).log_prob_keys == ["b_log_prob"]


def test_probabilistic_actor():
    modules = pytest.importorskip("rl_objectives.modules")
    actor = modules.ProbabilisticActor(_net(), in_keys=["loc", "scale"], log_prob_key=None, return_log_prob=True)
    assert actor.log_prob_keys == ["action_log_prob"] and actor.log_prob_key == "action_log_prob"
    assert actor.out_keys == ["loc", "scale", "action", "action_log_prob"]
    assert actor[-1].log_prob_key == "action_log_prob"
    with set_interaction_type("random"):
        td = actor(TensorDict(obs=torch.zeros(5, 2), batch_size=[5]))
    assert td["action_log_prob"].shape == torch.Size([5])
    listed = modules.ProbabilisticActor(_net(), in_keys=["loc", "scale"], log_prob_keys=["lp"])
    assert listed.log_prob_keys == ["lp"] and listed.log_prob_key == "lp"
    agents = modules.ProbabilisticActor(_net(), in_keys=["loc", "scale"], out_keys=[("agents", "action")])
    assert agents.log_prob_keys == [("agents", "action_log_prob")]
    assert agents.log_prob_key == ("agents", "action_log_prob")
    two = modules.ProbabilisticActor(_net(), in_keys=["loc", "scale"], out_keys=["a", "b"], log_prob_key=None)
    assert two.log_prob_keys == ["a_log_prob", "b_log_prob"]


def test_probabilistic_actor_composite_defaults_to_the_sample_keys():
    modules = pytest.importorskip("rl_objectives.modules")
    actor = modules.ProbabilisticActor(
        _net(),
        in_keys=["params"],
        distribution_class=CompositeDistribution,
        distribution_kwargs={"distribution_map": DIST_MAP},
        log_prob_key=None,
    )
    assert actor.dist_sample_keys == ["cont", ("nested", "disc")]
    assert actor.log_prob_keys == ["cont_log_prob", ("nested", "disc_log_prob")]
    named = modules.ProbabilisticActor(
        _net(),
        in_keys=["params"],
        distribution_class=CompositeDistribution,
        distribution_kwargs={"distribution_map": DIST_MAP, "name_map": {"cont": "c", ("nested", "disc"): "d"}},
    )
    assert named.dist_sample_keys == ["c", "d"] and named.log_prob_keys == ["c_log_prob", "d_log_prob"]
    with pytest.raises(KeyError, match="distribution_map"):
        modules.ProbabilisticActor(_net(), in_keys=["params"], distribution_class=CompositeDistribution)


def test_sequence_default_interaction_type_is_its_last_probabilistic_steps():
    """tensordict's rule: the last probabilistic step's ``default_interaction_type``; the sequence
    samples with it when no interaction type is set."""
    import torch
    from tdict import TensorDict
    from tdict.nn import (
        InteractionType,
        ProbabilisticTensorDictModule,
        ProbabilisticTensorDictSequential,
        TensorDictModule,
    )

    def step(out: str, itype: str) -> ProbabilisticTensorDictModule:
        return ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=[out],
            distribution_class=torch.distributions.Normal,
            default_interaction_type=itype,
        )

    params = TensorDictModule(lambda x: (x, torch.ones_like(x)), in_keys=["x"], out_keys=["loc", "scale"])
    seq = ProbabilisticTensorDictSequential(params, step("y", "random"))
    assert seq.default_interaction_type is InteractionType.RANDOM
    seq = ProbabilisticTensorDictSequential(params, step("y", "random"), step("z", "mean"))
    assert seq.default_interaction_type is InteractionType.MEAN
    out = seq(TensorDict(x=torch.arange(3.0), batch_size=[3]))
    assert torch.equal(out["z"], torch.arange(3.0))  # the mean of N(x, 1)
