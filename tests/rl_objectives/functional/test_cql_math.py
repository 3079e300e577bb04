"""rl_objectives.functional.cql against the CQL penalty written out here (the paper's code, step by step)."""

from __future__ import annotations

import math

import pytest
import torch
from tdict import TensorDict
from tdict.specs import OneHot
from torch import nn

from rl_objectives.functional.sac import temperature_loss
from rl_objectives.functional.cql import (
    cql_actor_bc_loss,
    cql_actor_loss,
    cql_alpha_prime,
    cql_alpha_prime_loss,
    cql_lagrange_penalty,
    cql_logsumexp_penalty,
    discrete_cql_penalty,
    uniform_log_density,
)
from rl_objectives.functional.dqn import chosen_action_value, dqn_target, greedy_value, squared_td_error, td_loss
from rl_objectives.losses.cql import DiscreteCQLLoss
from rl_objectives.modules import QValueActor

pytestmark = pytest.mark.filterwarnings("ignore:No target network updater:UserWarning")


def test_discrete_penalty_equals_log_of_sum_of_exp():
    q = torch.tensor([[0.0, 0.0], [1.0, 3.0], [-1.0, 2.0]])
    data_q = torch.tensor([0.0, 3.0, -1.0])
    expected = torch.log(torch.exp(q).sum(-1)) - data_q
    torch.testing.assert_close(discrete_cql_penalty(q, data_q), expected)
    torch.testing.assert_close(discrete_cql_penalty(q, data_q)[0], torch.tensor(math.log(2.0)))


def test_uniform_log_density():
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 4.0])
    torch.testing.assert_close(uniform_log_density(low, high, (2,)), torch.tensor(-math.log(2.0 * 4.0)))
    torch.testing.assert_close(
        uniform_log_density(torch.tensor(-1.0), torch.tensor(1.0), (3,)), torch.tensor(-3 * math.log(2.0))
    )


def test_logsumexp_penalty_equals_the_importance_sampled_estimate():
    g = torch.Generator().manual_seed(0)
    n_critics, n_proposals, batch = 2, 6, 4
    q = torch.randn(n_critics, n_proposals, batch, generator=g)
    log_density = torch.randn(n_proposals, batch, generator=g)
    data_q = torch.randn(n_critics, batch, generator=g)
    temperature, weight = 0.5, 5.0
    out = cql_logsumexp_penalty(q, log_density, data_q, temperature, weight, dim=1)
    assert out.shape == (n_critics, batch)
    for i in range(n_critics):
        for b in range(batch):
            terms = [(q[i, j, b] - log_density[j, b]) / temperature for j in range(n_proposals)]
            lse = temperature * torch.log(torch.stack([torch.exp(t) for t in terms]).sum())
            torch.testing.assert_close(out[i, b], weight * (lse - data_q[i, b]))


def test_lagrange_terms():
    penalty = torch.tensor([[1.0, 3.0], [0.0, 2.0]], requires_grad=True)  # [critics, batch]
    log_alpha_prime = torch.tensor(math.log(2.0), requires_grad=True)
    alpha_prime = cql_alpha_prime(log_alpha_prime)
    torch.testing.assert_close(alpha_prime, torch.tensor(2.0))
    torch.testing.assert_close(cql_alpha_prime(torch.tensor(50.0)), torch.tensor(1e6))
    critic_loss = cql_lagrange_penalty(penalty, alpha_prime)
    torch.testing.assert_close(critic_loss, torch.tensor([2.0, 10.0]))
    # per critic: mean over the batch minus the threshold, summed: (2 - 0.5) + (1 - 0.5) = 2
    multiplier_loss = cql_alpha_prime_loss(penalty, alpha_prime, 0.5)
    torch.testing.assert_close(multiplier_loss, torch.tensor(-0.5 * 2.0 * 2.0))
    # each loss trains only its own side
    (critic_loss.sum() + multiplier_loss).backward()
    torch.testing.assert_close(penalty.grad, torch.full((2, 2), 2.0))
    torch.testing.assert_close(log_alpha_prime.grad, torch.tensor(-0.5 * 2.0 * 2.0))


def test_sac_terms():
    log_prob, q, data_log_prob = torch.tensor([-1.0, 0.5]), torch.tensor([2.0, 1.0]), torch.tensor([-3.0, -1.0])
    torch.testing.assert_close(cql_actor_loss(log_prob, q, 0.2), torch.tensor([-2.2, -0.9]))
    torch.testing.assert_close(cql_actor_bc_loss(log_prob, data_log_prob, 0.2), torch.tensor([2.8, 1.1]))
    log_alpha = torch.tensor(0.5, requires_grad=True)
    lp = log_prob.clone().requires_grad_()
    loss = temperature_loss(log_alpha, lp, -1.0)
    torch.testing.assert_close(loss, -0.5 * (log_prob - 1.0))
    loss.sum().backward()
    assert lp.grad is None
    torch.testing.assert_close(log_alpha.grad, -(log_prob - 1.0).sum())


def test_discrete_cql_loss_equals_functional_composition():
    torch.manual_seed(0)
    net = nn.Linear(3, 4)
    loss_module = DiscreteCQLLoss(QValueActor(net, spec=OneHot(4)), action_space="categorical")
    g = torch.Generator().manual_seed(1)
    terminated = torch.tensor([False, True, False, False, True])
    td = TensorDict(
        {
            "observation": torch.randn(5, 3, generator=g),
            "action": torch.randint(4, (5,), generator=g),
            "next": {
                "observation": torch.randn(5, 3, generator=g),
                "reward": torch.randn(5, generator=g),
                "done": terminated,
                "terminated": terminated,
            },
        },
        batch_size=[5],
    )
    out = loss_module(td)
    q = net(td["observation"])
    chosen = chosen_action_value(q, td["action"])
    with torch.no_grad():
        target = dqn_target(td["next", "reward"], greedy_value(net(td["next", "observation"])), 0.99, terminated)
    torch.testing.assert_close(out["loss_qvalue"], td_loss(chosen, target).mean())
    torch.testing.assert_close(out["loss_cql"], discrete_cql_penalty(q, chosen).mean())
    torch.testing.assert_close(td["td_error"], squared_td_error(chosen, target))
