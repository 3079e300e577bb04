"""The log-prob keys of the losses follow TorchRL 0.14: ``"action_log_prob"`` by default, read from
the actor where TorchRL reads it (PPO, A2C, SAC), lists of per-head keys for a composite policy.

The expected keys are TorchRL 0.14.1's, written literally (checked against it once)."""

import pytest
import torch
from rl_objectives import (
    A2CLoss,
    ClipPPOLoss,
    CQLLoss,
    DiscreteSACLoss,
    IQLLoss,
    KLPENPPOLoss,
    PPOLoss,
    REDQLoss,
    ReinforceLoss,
    SACLoss,
)
from tdict import TensorDict
from tdict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import distributions as D
from torch import nn


@pytest.mark.parametrize(
    "loss_cls, name, default",
    [
        (PPOLoss, "sample_log_prob", "action_log_prob"),
        (ClipPPOLoss, "sample_log_prob", "action_log_prob"),
        (KLPENPPOLoss, "sample_log_prob", "action_log_prob"),
        (A2CLoss, "sample_log_prob", "action_log_prob"),
        (ReinforceLoss, "sample_log_prob", "action_log_prob"),
        (REDQLoss, "sample_log_prob", "action_log_prob"),
        (SACLoss, "log_prob", "action_log_prob"),
        (CQLLoss, "log_prob", "_log_prob"),
        (IQLLoss, "log_prob", "_log_prob"),
        (DiscreteSACLoss, "log_prob", "log_prob"),
    ],
)
def test_default_log_prob_keys_are_torchrl_0_14s(loss_cls, name, default):
    assert loss_cls.default_keys[name] == default


def _categorical_actor(group=None, **prob_kwargs):
    key = (lambda k: (group, k)) if group else (lambda k: k)
    return ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(3, 4), in_keys=[key("obs")], out_keys=[key("logits")]),
        ProbabilisticTensorDictModule(
            in_keys={"logits": key("logits")},
            out_keys=[key("action")],
            distribution_class=D.Categorical,
            return_log_prob=True,
            **prob_kwargs,
        ),
    )


def _critic(group=None):
    key = (lambda k: (group, k)) if group else (lambda k: k)
    return TensorDictModule(lambda obs: obs.sum(-1), in_keys=[key("obs")], out_keys=[key("state_value")])


def test_ppo_and_a2c_read_the_keys_from_the_actor_reinforce_does_not():
    for loss_cls in (ClipPPOLoss, A2CLoss):
        loss = loss_cls(_categorical_actor("agents"), _critic("agents"))
        assert loss.tensor_keys.sample_log_prob == ("agents", "action_log_prob")
        assert loss.tensor_keys.action == ("agents", "action")
    loss = ReinforceLoss(_categorical_actor("agents"), _critic("agents"))
    assert (loss.tensor_keys.sample_log_prob, loss.tensor_keys.action) == ("action_log_prob", "action")


def test_an_actor_writing_the_old_name_gets_a_loss_reading_it():
    torch.manual_seed(0)
    actor = _categorical_actor(log_prob_key="sample_log_prob")
    loss = ClipPPOLoss(actor, None, entropy_bonus=False)
    assert loss.tensor_keys.sample_log_prob == "sample_log_prob"
    with torch.no_grad():
        td = actor(TensorDict(obs=torch.randn(5, 3), batch_size=[5]))
    td["advantage"] = torch.arange(5.0)
    # on-policy data: every ratio is 1, so the objective is -mean(advantage)
    torch.testing.assert_close(loss(td)["loss_objective"], torch.tensor(-2.0))


def test_a_missing_log_prob_names_the_key_and_the_old_name_when_present():
    torch.manual_seed(0)
    actor = _categorical_actor()
    with torch.no_grad():
        td = actor(TensorDict(obs=torch.randn(4, 3), batch_size=[4]))
    td["advantage"] = torch.zeros(4)
    old = td.clone()
    old["sample_log_prob"] = old.pop("action_log_prob")
    loss = ClipPPOLoss(actor, None)
    with pytest.raises(
        KeyError,
        match=r"misses the behaviour log-prob 'action_log_prob'.*holds 'sample_log_prob'.*set_keys\(sample_log_prob='sample_log_prob'\)",
    ):
        loss(old)
    with pytest.raises(KeyError, match=r"misses the behaviour log-prob 'action_log_prob'") as info:
        loss(td.exclude("action_log_prob"))
    assert "older versions" not in str(info.value)


def test_composite_policy_per_head_keys_are_summed(composite_policy):
    # two heads (a 2-dim Normal and a Categorical): TorchRL's PPO reads one log-prob key per head
    actor, td, params = composite_policy()
    loss = PPOLoss(actor, None, entropy_bonus=False)
    assert loss.tensor_keys.sample_log_prob == ["cont_log_prob", "disc_log_prob"]
    assert loss.tensor_keys.action == ["cont", "disc"]
    out = loss(td)
    p = params(td["obs"])
    log_pi = D.Normal(p["cont", "loc"], p["cont", "scale"]).log_prob(td["cont"]).sum(-1) + D.Categorical(
        logits=p["disc", "logits"]
    ).log_prob(td["disc"])
    expected = -((log_pi - (-3.0)).exp() * td["advantage"]).mean()
    torch.testing.assert_close(out["loss_objective"], expected)
    # a list of keys set by hand works the same way
    loss.set_keys(sample_log_prob=["cont_log_prob", "disc_log_prob"])
    torch.testing.assert_close(loss(td)["loss_objective"], expected)
    with pytest.raises(ValueError, match=r"sample_log_prob=\[\]"):
        loss.set_keys(sample_log_prob=[])


def test_sac_reads_the_log_prob_key_from_the_actor():
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(3, 2), in_keys=["observation"], out_keys=["loc"]),
        ProbabilisticTensorDictModule(
            in_keys=["loc"],
            out_keys=["action"],
            distribution_class=D.Normal,
            distribution_kwargs={"scale": 1.0},
            return_log_prob=True,
            log_prob_key="lp",
        ),
    )
    qnet = TensorDictModule(
        lambda o, a: o.sum(-1) + a.sum(-1), in_keys=["observation", "action"], out_keys=["state_action_value"]
    )
    loss = SACLoss(actor, qnet)
    assert loss.tensor_keys.log_prob == "lp" and loss.tensor_keys.action == "action"
    assert SACLoss(_normal_actor(), qnet).tensor_keys.log_prob == "action_log_prob"


def _normal_actor():
    return ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(3, 2), in_keys=["observation"], out_keys=["loc"]),
        ProbabilisticTensorDictModule(
            in_keys=["loc"],
            out_keys=["action"],
            distribution_class=D.Normal,
            distribution_kwargs={"scale": 1.0},
            return_log_prob=True,
        ),
    )
