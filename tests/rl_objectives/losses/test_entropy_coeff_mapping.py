"""A per-head ``entropy_coeff`` mapping on the actor-critic losses (a composite policy's heads
weighted separately)."""

import pytest
import torch
from rl_objectives import A2CLoss
from rl_objectives.losses.ppo import ClipPPOLoss, PPOLoss
from tdict import TensorDict
from torch import distributions as D


@pytest.fixture
def composite(composite_policy):
    """``() -> (actor, td, entropies)``: the shared two-head policy and batch, and each head's entropy."""

    def build(seed: int = 0):
        actor, td, params = composite_policy(seed)
        p = params(td["obs"])
        entropies = {
            "cont": D.Normal(p["cont", "loc"], p["cont", "scale"]).entropy().sum(-1),
            "disc": D.Categorical(logits=p["disc", "logits"]).entropy(),
        }
        return actor, td, entropies

    return build


@pytest.mark.parametrize("cls", [PPOLoss, ClipPPOLoss, A2CLoss])
def test_mapping_weights_each_head(cls, composite):
    actor, td, h = composite()
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


def test_sum_reduction_and_scalar_coefficient_agree(composite):
    actor, td, h = composite()
    out = PPOLoss(actor, None, entropy_coeff={"cont_log_prob": 0.3}, reduction="sum")(td)
    torch.testing.assert_close(out["loss_entropy"], -0.3 * h["cont"].sum())
    scalar = PPOLoss(actor, None, entropy_coeff=0.5)
    torch.testing.assert_close(scalar._weighted_loss_entropy(torch.tensor(2.0)), torch.tensor(-1.0))


def test_weighted_loss_entropy_of_a_tensordict(composite):
    actor, _, _ = composite()
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


def test_a_head_the_policy_lacks_raises_key_error(composite):
    actor, td, _ = composite()
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
def test_bad_mappings_are_refused(coeff, error, match, composite):
    actor, _, _ = composite()
    with pytest.raises(error, match=match):
        PPOLoss(actor, None, entropy_coeff=coeff)


def test_a_mapping_is_not_schedulable(composite):
    actor, _, _ = composite()
    loss = PPOLoss(actor, None, entropy_coeff={"cont_log_prob": 0.3})
    with pytest.raises(ValueError, match="entropy_coeff was None at construction"):
        loss.entropy_coeff = 0.1
