"""A per-head ``entropy_coeff`` mapping on the actor-critic losses (a composite policy's heads
weighted separately)."""

import pytest
import torch
from rl_objectives import A2CLoss
from rl_objectives.losses.ppo import ClipPPOLoss, PPOLoss
from tdict import TensorDict
from tdict.nn import (
    CompositeDistribution,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import distributions as D
from torch import nn


def _composite(seed: int = 0):
    torch.manual_seed(seed)
    net = nn.Linear(3, 7)

    def params(obs):
        out = net(obs)
        return TensorDict(
            cont=TensorDict(loc=out[..., :2], scale=out[..., 2:4].exp(), batch_size=obs.shape[:-1]),
            disc=TensorDict(logits=out[..., 4:], batch_size=obs.shape[:-1]),
            batch_size=obs.shape[:-1],
        )

    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(params, in_keys=["obs"], out_keys=["params"]),
        ProbabilisticTensorDictModule(
            in_keys=["params"],
            distribution_class=CompositeDistribution,
            return_log_prob=True,
            distribution_kwargs={"distribution_map": {"cont": D.Normal, "disc": D.Categorical}},
        ),
    )
    obs = torch.randn(6, 3)
    td = TensorDict(
        obs=obs,
        cont=torch.randn(6, 2),
        disc=torch.tensor([0, 1, 2, 0, 1, 2]),
        cont_log_prob=torch.full((6,), -2.0),
        disc_log_prob=torch.full((6,), -1.0),
        advantage=torch.linspace(-1, 1, 6),
        batch_size=[6],
    )
    p = params(obs)
    entropies = {
        "cont": D.Normal(p["cont", "loc"], p["cont", "scale"]).entropy().sum(-1),
        "disc": D.Categorical(logits=p["disc", "logits"]).entropy(),
    }
    return actor, td, entropies


@pytest.mark.parametrize("cls", [PPOLoss, ClipPPOLoss, A2CLoss])
def test_mapping_weights_each_head(cls):
    actor, td, h = _composite()
    loss = cls(actor, None, entropy_coeff={"cont_log_prob": 0.3, "disc_log_prob": 0.7})
    assert loss.entropy_coeff is None and "entropy_coeff" not in dict(loss.named_buffers())
    out = loss(td)
    expected = -(0.3 * h["cont"].mean() + 0.7 * h["disc"].mean())
    torch.testing.assert_close(out["loss_entropy"], expected)
    torch.testing.assert_close(out["entropy"], (h["cont"].mean() + h["disc"].mean()).detach())
    assert out["loss_entropy"].requires_grad and not out["entropy"].requires_grad
    # one listed head: the other gets no bonus
    only = cls(actor, None, entropy_coeff={"disc_log_prob": 0.5})(td)
    torch.testing.assert_close(only["loss_entropy"], -0.5 * h["disc"].mean())


def test_sum_reduction_and_scalar_coefficient_agree():
    actor, td, h = _composite()
    out = PPOLoss(actor, None, entropy_coeff={"cont_log_prob": 0.3}, reduction="sum")(td)
    torch.testing.assert_close(out["loss_entropy"], -0.3 * h["cont"].sum())
    scalar = PPOLoss(actor, None, entropy_coeff=0.5)
    torch.testing.assert_close(scalar._weighted_loss_entropy(torch.tensor(2.0)), torch.tensor(-1.0))


def test_weighted_loss_entropy_of_a_tensordict():
    actor, _, _ = _composite()
    coef = {("head_0", "action_log_prob"): 0.3, ("head_1", "action_log_prob"): 0.7}
    loss = PPOLoss(actor, None, entropy_coeff=coef)
    entropy = TensorDict(
        head_0=TensorDict(action_log_prob=torch.tensor(1.0)),
        head_1=TensorDict(action_log_prob=torch.tensor(2.0)),
    )
    torch.testing.assert_close(loss._weighted_loss_entropy(entropy), torch.tensor(-(0.3 + 1.4)))
    with pytest.raises(KeyError):
        PPOLoss(actor, None, entropy_coeff={"absent": 0.5})._weighted_loss_entropy(entropy)
    with pytest.raises(TypeError, match="TensorDict of per-head entropies"):
        loss._weighted_loss_entropy(torch.tensor(1.0))


def test_a_head_the_policy_lacks_raises_key_error():
    actor, td, _ = _composite()
    with pytest.raises(KeyError):
        PPOLoss(actor, None, entropy_coeff={"missing_log_prob": 0.5})(td)


def test_a_plain_policy_with_a_mapping_raises(normal_actor, rollout):
    actor, _ = normal_actor()
    loss = PPOLoss(actor, None, entropy_coeff={"action_log_prob": 0.5})
    with pytest.raises(TypeError, match="composite policy"):
        loss(rollout(actor))


@pytest.mark.parametrize(
    ("coeff", "error", "match"),
    [
        ({}, ValueError, "mapping is empty"),
        ({"a_log_prob": "x"}, TypeError, r"entropy_coeff\['a_log_prob'\] must be a number"),
        ({"a_log_prob": True}, TypeError, "must be a number"),
        ({3: 0.1}, TypeError, "string keys"),
        ("0.1", TypeError, "entropy_coeff must be a number or a mapping"),
    ],
)
def test_bad_mappings_are_refused(coeff, error, match):
    actor, _, _ = _composite()
    with pytest.raises(error, match=match):
        PPOLoss(actor, None, entropy_coeff=coeff)


def test_a_mapping_is_not_schedulable():
    actor, _, _ = _composite()
    loss = PPOLoss(actor, None, entropy_coeff={"cont_log_prob": 0.3})
    with pytest.raises(ValueError, match="entropy_coeff was None at construction"):
        loss.entropy_coeff = 0.1
