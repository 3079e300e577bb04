"""ValueEstimators.MAGAE: TorchRL's enum member for MultiAgentGAE, built by make_value_estimator.

In TorchRL 0.14 the on-policy losses (A2C, PPO and its clipped/KL variants, REINFORCE) accept
``MAGAE``; the off-policy ones raise ``NotImplementedError`` for it, as they do for GAE.
"""

import pytest
import torch
from rl_objectives.functional import generalized_advantage_estimate
from rl_objectives.losses.a2c import A2CLoss
from rl_objectives.losses.dqn import DQNLoss
from rl_objectives.losses.ppo import ClipPPOLoss, KLPENPPOLoss, PPOLoss
from rl_objectives.losses.reinforce import ReinforceLoss
from rl_objectives.value import GAE, MultiAgentGAE, ValueEstimators
from tdict import TensorDict
from tdict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential, TensorDictModule
from torch import distributions as D
from torch import nn

N, T, A, O = 2, 5, 3, 4  # envs, steps, agents, observation size
VALUE = ("agents", "state_value")


def networks(seed=0):
    torch.manual_seed(seed)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(O, 2), in_keys=[("agents", "obs")], out_keys=[("agents", "logits")]),
        ProbabilisticTensorDictModule(
            in_keys=[("agents", "logits")], out_keys=[("agents", "action")], distribution_class=D.Categorical
        ),
    )
    lin = nn.Linear(O, 1)
    critic = TensorDictModule(nn.Sequential(lin, nn.Flatten(-2)), in_keys=[("agents", "obs")], out_keys=[VALUE])
    return actor, critic, lin


def team_rollout(seed=1):
    """Batch ``[N, T]``: per-agent observations under ``"agents"`` (``[N, T, A]``), a team reward
    and team done flags (``[N, T]``); env 0 terminates at step 2."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(N, T + 1, A, O, generator=g)
    done = torch.zeros(N, T, dtype=torch.bool)
    done[0, 2] = True
    return TensorDict(
        {
            "agents": TensorDict(obs=obs[:, :-1], batch_size=[N, T, A]),
            "next": {
                "agents": TensorDict(obs=obs[:, 1:], batch_size=[N, T, A]),
                "reward": torch.randn(N, T, generator=g),
                "done": done,
                "terminated": done.clone(),
            },
        },
        batch_size=[N, T],
    )


def test_enum_member_has_torchrls_value():
    assert ValueEstimators.MAGAE.value == "Multi-agent generalized advantage estimate"
    assert ValueEstimators("Multi-agent generalized advantage estimate") is ValueEstimators.MAGAE
    assert ValueEstimators("MAGAE") is ValueEstimators.MAGAE


@pytest.mark.parametrize("loss_cls", [A2CLoss, PPOLoss, ClipPPOLoss, KLPENPPOLoss, ReinforceLoss])
@pytest.mark.parametrize("how", ["member", "string"])
def test_factory_builds_multi_agent_gae_equal_to_a_direct_one(loss_cls, how):
    actor, critic, lin = networks()
    loss = loss_cls(actor, critic).set_keys(value=VALUE)
    value_type = ValueEstimators.MAGAE if how == "member" else "Multi-agent generalized advantage estimate"
    assert loss.make_value_estimator(value_type, gamma=0.9, lmbda=0.8) is loss
    est = loss.value_estimator
    assert type(est) is MultiAgentGAE and loss.value_type is ValueEstimators.MAGAE
    assert (est.gamma, est.lmbda) == (0.9, 0.8)

    td = team_rollout()
    with torch.no_grad():
        out = est(td.clone())
        direct = MultiAgentGAE(gamma=0.9, lmbda=0.8, value_network=critic).set_keys(value=VALUE)(td.clone())
        # hand-written reference: the team signals broadcast over the agents, then plain GAE
        value, next_value = lin(td["agents", "obs"]).squeeze(-1), lin(td["next", "agents", "obs"]).squeeze(-1)
    per_agent = [td["next", k].unsqueeze(-1).expand(N, T, A) for k in ("reward", "done", "terminated")]
    adv, target = generalized_advantage_estimate(
        0.9, 0.8, value.unsqueeze(-1), next_value.unsqueeze(-1), *(x.unsqueeze(-1) for x in per_agent), time_dim=1
    )
    assert out["advantage"].shape == (N, T, A)
    torch.testing.assert_close(out["advantage"], direct["advantage"], rtol=0, atol=0)
    torch.testing.assert_close(out["value_target"], direct["value_target"], rtol=0, atol=0)
    torch.testing.assert_close(out["advantage"], adv.squeeze(-1))
    torch.testing.assert_close(out["value_target"], target.squeeze(-1))


def test_factory_defaults_and_extra_kwargs_reach_the_estimator():
    actor, critic, _ = networks()
    est = PPOLoss(actor, critic).make_value_estimator(ValueEstimators.MAGAE, agent_dim=-1, average_gae=True)
    est = est.value_estimator
    assert type(est) is MultiAgentGAE
    assert est.agent_dim == -1 and est.average_gae
    # the loss's defaults: gamma 0.99 and lmbda 0.95, as for GAE
    gae = PPOLoss(actor, critic).make_value_estimator(ValueEstimators.GAE).value_estimator
    assert type(gae) is GAE and (est.gamma, est.lmbda) == (gae.gamma, gae.lmbda) == (0.99, 0.95)


def test_off_policy_losses_refuse_magae_like_gae():
    qnet = TensorDictModule(nn.Linear(O, 2), in_keys=["observation"], out_keys=["action_value"])
    loss = DQNLoss(qnet, action_space="one_hot")
    for value_type in (ValueEstimators.GAE, ValueEstimators.MAGAE):
        with pytest.raises(NotImplementedError, match="not implemented for this loss"):
            loss.make_value_estimator(value_type)
