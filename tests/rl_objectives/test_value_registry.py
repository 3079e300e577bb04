"""The value-estimator registry: one place that maps each kind of estimator to its class and
defaults, used by every loss's ``make_value_estimator`` and by TorchRL's registry functions."""

import enum

import pytest
import torch
from torch import nn

from rl_objectives import A2CLoss, default_value_kwargs
from rl_objectives.value import (
    GAE,
    MultiAgentGAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimators,
    VTrace,
)
from rl_objectives.value.registry import (
    VALUE_ESTIMATOR_REGISTRY,
    build_value_estimator,
    dispatch_value_estimator,
    get_value_estimator_entry,
    register_value_estimator,
)
from tdict import TensorDict
from tdict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

BUILT_IN = {
    ValueEstimators.TD0: (TD0Estimator, {"gamma": 0.99}),
    ValueEstimators.TD1: (TD1Estimator, {"gamma": 0.99}),
    ValueEstimators.TDLambda: (TDLambdaEstimator, {"gamma": 0.99, "lmbda": 0.95}),
    ValueEstimators.GAE: (GAE, {"gamma": 0.99, "lmbda": 0.95}),
    ValueEstimators.MAGAE: (MultiAgentGAE, {"gamma": 0.99, "lmbda": 0.95}),
    ValueEstimators.VTrace: (VTrace, {"gamma": 0.99}),
}


def critic():
    # one value per step, no trailing dim
    return TensorDictModule(nn.Sequential(nn.Linear(3, 1), nn.Flatten(-2)), in_keys=["obs"], out_keys=["state_value"])


def actor():
    return ProbabilisticTensorDictSequential(
        TensorDictModule(
            nn.Sequential(nn.Linear(3, 2), NormalParamExtractor()), in_keys=["obs"], out_keys=["loc", "scale"]
        ),
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=torch.distributions.Normal,
            return_log_prob=True,
        ),
    )


class Kinds(enum.Enum):
    SLOW = "slow GAE"


@pytest.fixture
def slow_gae():
    @register_value_estimator(Kinds.SLOW, default_kwargs={"gamma": 0.5, "lmbda": 0.25})
    class SlowGAE(GAE):
        pass

    yield SlowGAE
    VALUE_ESTIMATOR_REGISTRY.pop(Kinds.SLOW)


@pytest.mark.parametrize("kind", list(ValueEstimators))
def test_every_kind_is_registered_with_its_class_and_defaults(kind):
    cls, defaults = BUILT_IN[kind]
    entry = get_value_estimator_entry(kind)
    assert entry.cls is cls and entry.default_kwargs == defaults
    assert get_value_estimator_entry(kind.name.lower()) is entry  # by name, for configuration files
    assert get_value_estimator_entry(kind.value) is entry
    assert default_value_kwargs(kind) == defaults and default_value_kwargs(kind) is not entry.default_kwargs


def test_lookup_errors():
    with pytest.raises(KeyError, match=r"Unknown value estimator alias 'nope'; known: \[.*'gae'"):
        get_value_estimator_entry("nope")
    with pytest.raises(TypeError, match="value_type must be a registered enum value or a string alias, got int"):
        get_value_estimator_entry(42)

    class Unregistered(enum.Enum):
        X = "x"

    with pytest.raises(NotImplementedError, match="No value estimator is registered for <Unregistered.X"):
        get_value_estimator_entry(Unregistered.X)
    with pytest.raises(TypeError, match="must be an Enum member"):
        register_value_estimator("gae")


def test_a_registered_kind_is_built_with_its_defaults(slow_gae):
    net = critic()
    entry = get_value_estimator_entry("slow")
    assert entry is get_value_estimator_entry(Kinds.SLOW) and entry.cls is slow_gae
    built = build_value_estimator(object(), Kinds.SLOW, value_network=net, lmbda=0.5)
    assert type(built) is slow_gae and built.value_network is net
    assert (float(built.gamma), float(built.lmbda)) == (0.5, 0.5)  # a default, then the caller's value


def test_build_takes_the_networks_of_the_loss():
    loss = A2CLoss(actor(), critic())
    gae = build_value_estimator(loss, "gae")
    assert gae.value_network is loss.critic_network
    vtrace = build_value_estimator(loss, ValueEstimators.VTrace)
    assert vtrace.value_network is loss.critic_network and vtrace.actor_network is loss.actor_network
    other_critic, other_actor = critic(), actor()
    explicit = build_value_estimator(object(), "vtrace", value_network=other_critic, actor_network=other_actor)
    assert explicit.value_network is other_critic and explicit.actor_network is other_actor


def test_dispatch_checks_the_supported_kinds_and_installs_the_estimator():
    loss = A2CLoss(actor(), critic())
    with pytest.raises(
        NotImplementedError,
        match=r"Value type GAE is not implemented for loss A2CLoss\. Supported value types: \['TD0'\]",
    ):
        dispatch_value_estimator(loss, ValueEstimators.GAE, supported=(ValueEstimators.TD0,))
    estimator = dispatch_value_estimator(
        loss, "tdlambda", supported=list(ValueEstimators), tensor_keys={"value": "v"}, lmbda=0.5
    )
    assert loss.value_estimator is estimator and loss.value_type is ValueEstimators.TDLambda
    assert isinstance(estimator, TDLambdaEstimator) and float(estimator.lmbda) == 0.5
    assert estimator.tensor_keys.value == "v"  # the caller's keys, given after the loss's
    assert estimator.tensor_keys.reward == loss.tensor_keys.reward


def test_losses_build_from_the_registry(slow_gae):
    """Replacing the class registered for a kind changes what every loss builds: one factory."""
    original = VALUE_ESTIMATOR_REGISTRY[ValueEstimators.GAE]
    VALUE_ESTIMATOR_REGISTRY[ValueEstimators.GAE] = type(original)(slow_gae, dict(original.default_kwargs))
    try:
        loss = A2CLoss(actor(), critic())
        loss.make_value_estimator(ValueEstimators.GAE, gamma=0.9)
        assert type(loss.value_estimator) is slow_gae
        assert (float(loss.value_estimator.gamma), float(loss.value_estimator.lmbda)) == (0.9, 0.95)
        td = TensorDict(
            obs=torch.randn(4, 3),
            next=TensorDict(
                obs=torch.randn(4, 3),
                reward=torch.ones(4),
                done=torch.zeros(4, dtype=torch.bool),
                terminated=torch.zeros(4, dtype=torch.bool),
                batch_size=[4],
            ),
            batch_size=[4],
        )
        reference = GAE(gamma=0.9, lmbda=0.95, value_network=loss.critic_network)(td.clone())
        torch.testing.assert_close(loss.value_estimator(td)["advantage"], reference["advantage"])
    finally:
        VALUE_ESTIMATOR_REGISTRY[ValueEstimators.GAE] = original
