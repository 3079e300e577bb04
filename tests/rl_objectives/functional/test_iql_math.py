"""rl_objectives.functional.iql against the IQL update written out here (CleanRL / the paper's code)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tdict import TensorDict
from tdict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import nn

from rl_objectives.functional.dqn import dqn_target, squared_td_error, td_loss
from rl_objectives.functional.iql import expectile_loss, iql_actor_loss, iql_actor_weights, iql_value_loss
from rl_objectives.losses.iql import IQLLoss
from rl_objectives.modules import ValueOperator

pytestmark = pytest.mark.filterwarnings("ignore:No target network updater:UserWarning")


def test_expectile_loss_equals_the_papers_formula():
    g = torch.Generator().manual_seed(0)
    diff = torch.randn(10, generator=g)
    tau = 0.7
    # the paper's code: weight = |tau - (u < 0)|; loss = weight * u**2
    expected = torch.abs(tau - (diff < 0).float()) * diff**2
    torch.testing.assert_close(expectile_loss(diff, tau), expected)
    torch.testing.assert_close(expectile_loss(torch.tensor([2.0, -2.0, 0.0]), 0.9), torch.tensor([3.6, 0.4, 0.0]))
    torch.testing.assert_close(iql_value_loss(diff + 1.0, torch.ones(10), tau), expected)


def test_expectile_one_half_is_half_the_squared_error():
    diff = torch.tensor([-3.0, 0.5, 2.0])
    torch.testing.assert_close(expectile_loss(diff, 0.5), 0.5 * diff**2)


def test_actor_weights_and_loss():
    adv = torch.tensor([-1.0, 0.0, 1.0, 10.0])
    weights = iql_actor_weights(adv, 3.0)
    torch.testing.assert_close(
        weights, torch.tensor([torch.exp(torch.tensor(-3.0)).item(), 1.0, torch.exp(torch.tensor(3.0)).item(), 100.0])
    )
    torch.testing.assert_close(iql_actor_weights(adv, 3.0, max_weight=5.0)[-2:], torch.tensor([5.0, 5.0]))
    log_prob = torch.tensor([-1.0, -2.0, -0.5, -0.1], requires_grad=True)
    loss = iql_actor_loss(log_prob, adv, 3.0)
    torch.testing.assert_close(loss, -torch.minimum(torch.exp(3.0 * adv), torch.tensor(100.0)) * log_prob)
    loss.sum().backward()
    torch.testing.assert_close(log_prob.grad, -weights)


class _Critic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(5, 1)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, action], -1)).squeeze(-1)


def test_iql_loss_equals_functional_composition():
    torch.manual_seed(0)
    actor_net = nn.Sequential(nn.Linear(3, 4), NormalParamExtractor())
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"], out_keys=["action"], distribution_class=torch.distributions.Normal
        ),
    )
    critic = _Critic()
    value_net = nn.Linear(3, 1)
    loss_module = IQLLoss(
        actor,
        TensorDictModule(critic, in_keys=["observation", "action"], out_keys=["state_action_value"]),
        ValueOperator(value_net, in_keys=["observation"]),
        num_qvalue_nets=1,  # one critic: its set is the module's own parameters
        expectile=0.7,
        temperature=2.0,
        loss_function="l2",
    )
    g = torch.Generator().manual_seed(1)
    terminated = torch.tensor([False, True, False, False, False, True])
    td = TensorDict(
        {
            "observation": torch.randn(6, 3, generator=g),
            "action": torch.randn(6, 2, generator=g),
            "next": {
                "observation": torch.randn(6, 3, generator=g),
                "reward": torch.randn(6, generator=g),
                "done": terminated,
                "terminated": terminated,
            },
        },
        batch_size=[6],
    )
    out = loss_module(td)

    obs, action = td["observation"], td["action"]
    q = critic(obs, action)
    value = value_net(obs).squeeze(-1)
    with torch.no_grad():
        target = dqn_target(td["next", "reward"], value_net(td["next", "observation"]).squeeze(-1), 0.99, terminated)
    loc, scale = actor_net(obs)
    log_prob = torch.distributions.Normal(loc, scale).log_prob(action).sum(-1)
    torch.testing.assert_close(out["loss_value"], iql_value_loss(q.detach(), value, 0.7).mean())
    torch.testing.assert_close(out["loss_qvalue"], td_loss(q, target).mean())
    torch.testing.assert_close(out["loss_qvalue"], F.mse_loss(q, target))
    torch.testing.assert_close(out["loss_actor"], iql_actor_loss(log_prob, (q - value).detach(), 2.0).mean())
    torch.testing.assert_close(td["td_error"], squared_td_error(q, target))
