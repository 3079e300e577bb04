"""rl_objectives.functional.sac against the CleanRL-style SAC / discrete SAC / REDQ step written out here,
and the loss modules (SACLoss, DiscreteSACLoss, REDQLoss, CrossQLoss) against the functional composition."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tdict import TensorDict
from tdict.nn import (
    NormalParamExtractor,
    OneHotCategorical,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import nn

from rl_objectives import CrossQLoss, DiscreteSACLoss, REDQLoss, SACLoss
from rl_objectives.functional.sac import (
    discrete_expected_log_prob,
    discrete_sac_actor_loss,
    discrete_soft_state_value,
    redq_actor_loss,
    redq_qvalue_loss,
    redq_temperature_loss,
    sac_actor_loss,
    sac_q_target,
    sac_qvalue_loss,
    sac_v1_qvalue_loss,
    sac_value_loss,
    soft_state_value,
    temperature_loss,
)

# the module tests read the target parameters without a target updater: they stay at their copy
pytestmark = pytest.mark.filterwarnings("ignore:No target network updater:UserWarning")

DISTANCES = {"l1": F.l1_loss, "l2": F.mse_loss, "smooth_l1": F.smooth_l1_loss}


def _batch(n: int = 8, n_critics: int = 2, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "reward": torch.randn(n, generator=g),
        "terminated": torch.rand(n, generator=g) < 0.3,
        "q": torch.randn(n_critics, n, generator=g),
        "next_q": torch.randn(n_critics, n, generator=g),
        "log_prob": torch.randn(n, generator=g) - 1.0,
        "next_log_prob": torch.randn(n, generator=g) - 1.0,
        "target": torch.randn(n, generator=g),
        "value": torch.randn(n, generator=g),
    }


def test_soft_state_value_and_q_target_equal_cleanrl():
    b = _batch()
    alpha, gamma = 0.2, 0.9
    # CleanRL sac_continuous_action.py
    qf1_next_target, qf2_next_target = b["next_q"][0], b["next_q"][1]
    min_qf_next_target = torch.min(qf1_next_target, qf2_next_target) - alpha * b["next_log_prob"]
    next_q_value = b["reward"] + (1 - b["terminated"].float()) * gamma * min_qf_next_target

    value = soft_state_value(b["next_q"], b["next_log_prob"], alpha)
    target = sac_q_target(b["reward"], b["next_q"], b["next_log_prob"], alpha, gamma, b["terminated"])
    assert value.shape == (8,) and target.shape == (8,)
    torch.testing.assert_close(value, min_qf_next_target)
    torch.testing.assert_close(target, next_q_value)
    # a tensor temperature (the module's detached alpha) gives the same numbers
    torch.testing.assert_close(soft_state_value(b["next_q"], b["next_log_prob"], torch.tensor(alpha)), value)


def test_q_target_of_a_terminated_step_is_the_reward_even_for_an_infinite_next_value():
    next_q = torch.tensor([[float("inf"), 1.0]])
    target = sac_q_target(torch.tensor([2.0, 2.0]), next_q, torch.zeros(2), 0.5, 0.5, torch.tensor([True, False]))
    torch.testing.assert_close(target, torch.tensor([2.0, 2.5]))


@pytest.mark.parametrize("loss_type", ["l1", "l2", "smooth_l1"])
def test_sac_qvalue_loss_equals_the_sum_of_the_critics_losses(loss_type):
    b = _batch(n_critics=3)
    d = DISTANCES[loss_type]
    q = b["q"].clone().requires_grad_(True)
    loss, td_error = sac_qvalue_loss(q, b["target"], loss_type)
    expected = sum(d(q[i], b["target"], reduction="none") for i in range(3))
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(td_error, (b["q"] - b["target"]).abs().max(0).values)
    assert loss.shape == (8,) and td_error.shape == (8,) and not td_error.requires_grad
    loss.sum().backward()
    if loss_type == "l2":
        torch.testing.assert_close(q.grad, 2 * (b["q"] - b["target"]))


def test_sac_qvalue_loss_small_values():
    q = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
    loss, td_error = sac_qvalue_loss(q, torch.tensor([2.0, 0.5]), "l2")
    torch.testing.assert_close(loss, torch.tensor([1.0 + 1.0, 2.25 + 0.25]))
    torch.testing.assert_close(td_error, torch.tensor([1.0, 1.5]))


def test_sac_actor_loss_equals_cleanrl_and_routes_gradients():
    b = _batch()
    alpha = 0.3
    log_prob = b["log_prob"].clone().requires_grad_(True)
    q = b["q"].clone().requires_grad_(True)
    # CleanRL: actor_loss = ((alpha * log_pi) - min_qf_pi).mean()
    expected = alpha * b["log_prob"] - torch.min(b["q"][0], b["q"][1])
    loss = sac_actor_loss(log_prob, q, alpha)
    torch.testing.assert_close(loss, expected)
    loss.sum().backward()
    torch.testing.assert_close(log_prob.grad, torch.full((8,), alpha))
    # -1 on the smaller critic of each sample, 0 on the other
    argmin = b["q"].argmin(0)
    torch.testing.assert_close(q.grad, -F.one_hot(argmin, 2).T.float())


def test_temperature_loss_value_and_gradient():
    b = _batch()
    log_alpha = torch.tensor(0.4, requires_grad=True)
    log_prob = b["log_prob"].clone().requires_grad_(True)
    loss = temperature_loss(log_alpha, log_prob, -2.0)
    torch.testing.assert_close(loss, -0.4 * (b["log_prob"] - 2.0))
    loss.mean().backward()
    torch.testing.assert_close(log_alpha.grad, -(b["log_prob"] - 2.0).mean())
    assert log_prob.grad is None  # the log-prob is detached: only the temperature learns
    torch.testing.assert_close(
        temperature_loss(torch.tensor(0.0), torch.tensor([1.0, -3.0]), -2.0), torch.tensor([0.0, 0.0])
    )


@pytest.mark.parametrize("loss_type", ["l1", "l2", "smooth_l1"])
def test_sac_v1_value_and_critic_losses(loss_type):
    b = _batch()
    d = DISTANCES[loss_type]
    value = b["value"].clone().requires_grad_(True)
    q = b["q"].clone().requires_grad_(True)
    v_target = torch.min(b["q"][0], b["q"][1]) - 0.5 * b["log_prob"]
    loss = sac_value_loss(value, q, b["log_prob"], 0.5, loss_type)
    torch.testing.assert_close(loss, d(b["value"], v_target, reduction="none"))
    loss.sum().backward()
    assert value.grad is not None and q.grad is None  # the target is detached

    loss, td_error = sac_v1_qvalue_loss(b["q"][0], b["target"], loss_type)
    torch.testing.assert_close(loss, d(b["q"][0], b["target"], reduction="none"))
    torch.testing.assert_close(td_error, (b["q"][0] - b["target"]) ** 2)


def _discrete_batch(n: int = 5, n_actions: int = 4, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, n_actions, generator=g)
    return {
        "probs": logits.softmax(-1),
        "log_probs": logits.log_softmax(-1),
        "q": torch.randn(2, n, n_actions, generator=g),
    }


def test_discrete_sac_equals_cleanrl():
    b = _discrete_batch()
    probs, log_probs, q, alpha = b["probs"], b["log_probs"], b["q"], 0.2
    # CleanRL sac_atari.py
    min_q = torch.min(q[0], q[1])
    next_value = (probs * (min_q - alpha * log_probs)).sum(dim=1)
    actor_loss = (probs * ((alpha * log_probs) - min_q)).sum(dim=1)
    entropy = -(probs * log_probs).sum(dim=1)

    torch.testing.assert_close(discrete_soft_state_value(probs, q, log_probs, alpha), next_value)
    torch.testing.assert_close(discrete_sac_actor_loss(probs, log_probs, q, alpha), actor_loss)
    torch.testing.assert_close(discrete_expected_log_prob(probs, log_probs), -entropy)
    assert discrete_soft_state_value(probs, q, log_probs, alpha).shape == (5,)
    # the temperature's log-prob for discrete actions is the expected one
    torch.testing.assert_close(
        temperature_loss(torch.tensor(0.1), discrete_expected_log_prob(probs, log_probs), 1.2), -0.1 * (1.2 - entropy)
    )


def test_discrete_small_values():
    probs = torch.tensor([[0.5, 0.5]])
    q = torch.tensor([[[1.0, 3.0]], [[2.0, 2.0]]])  # min over the critics: [1, 2]
    ln2 = torch.tensor(2.0).log()
    torch.testing.assert_close(discrete_soft_state_value(probs, q, probs.log(), 1.0), (1.5 + ln2).reshape(1))
    torch.testing.assert_close(discrete_sac_actor_loss(probs, probs.log(), q, 1.0), -(1.5 + ln2).reshape(1))


def test_redq_functions():
    b = _batch(n_critics=4)
    alpha = 0.5
    loss, td_error = redq_qvalue_loss(b["q"], b["target"], "l2")
    torch.testing.assert_close(loss, (b["q"] - b["target"]) ** 2)
    torch.testing.assert_close(td_error, ((b["q"] - b["target"]) ** 2).max(0).values)
    assert loss.shape == (4, 8)
    actor = redq_actor_loss(b["log_prob"], b["q"], alpha)
    assert actor.shape == (4, 8)
    # its mean over the ensemble is alpha * log pi - mean_i Q_i
    torch.testing.assert_close(actor.mean(0), alpha * b["log_prob"] - b["q"].mean(0))
    log_alpha = torch.tensor(0.3, requires_grad=True)
    log_pi = torch.stack([b["log_prob"], b["next_log_prob"]], 0)
    temp = redq_temperature_loss(log_alpha, log_pi, -2.0)
    torch.testing.assert_close(temp, -torch.tensor(0.3).exp() * (log_pi - 2.0))
    temp.mean().backward()
    torch.testing.assert_close(log_alpha.grad, -torch.tensor(0.3).exp() * (log_pi - 2.0).mean())


# --- the modules against the functional composition ---------------------------------------------


class Critic(nn.Module):
    def __init__(self, n_in: int = 5) -> None:
        super().__init__()
        self.net = nn.Linear(n_in, 1)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([observation, action], -1)).squeeze(-1)


def _q(params, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """The :class:`Critic` ensemble from its stacked parameters: ``[N, B]``."""
    w, b = params["module", "net", "weight"], params["module", "net", "bias"]
    return (torch.cat([obs, action], -1) @ w.transpose(-1, -2) + b.unsqueeze(-2)).squeeze(-1)


def _gaussian_actor_and_critic():
    torch.manual_seed(0)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(
            nn.Sequential(nn.Linear(3, 4), NormalParamExtractor()), in_keys=["observation"], out_keys=["loc", "scale"]
        ),
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"], out_keys=["action"], distribution_class=torch.distributions.Normal
        ),
    )
    critic = TensorDictModule(Critic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    return actor, critic


def _transitions(n: int = 6, action: torch.Tensor | None = None) -> TensorDict:
    g = torch.Generator().manual_seed(1)
    terminated = torch.rand(n, generator=g) < 0.3
    return TensorDict(
        {
            "observation": torch.randn(n, 3, generator=g),
            "action": torch.randn(n, 2, generator=g) if action is None else action,
            "next": {
                "observation": torch.randn(n, 3, generator=g),
                "reward": torch.randn(n, generator=g),
                "done": terminated.clone(),
                "terminated": terminated,
            },
        },
        batch_size=[n],
    )


def _perturb(params) -> None:
    """Different values per critic (the ensemble's copies start equal)."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in params.values(True, True):
            p.add_(torch.randn(p.shape, generator=g) * 0.3)


def test_sac_module_equals_the_functional_composition():
    actor, critic = _gaussian_actor_and_critic()
    loss = SACLoss(actor, critic, alpha_init=0.5, loss_function="l2")
    loss.make_value_estimator(gamma=0.9)
    _perturb(loss.params_of("qvalue_network"))
    td = _transitions()
    q_params = loss.params_of("qvalue_network").detach()
    target_params = loss.params_of("qvalue_network", target=True)
    with torch.no_grad():
        dist_next = actor.get_dist(td["next"].copy())
        dist = actor.get_dist(td.copy())
    torch.manual_seed(7)  # the module draws the next action first, then the current one
    a_next, a = dist_next.rsample(), dist.rsample()
    log_prob_next, log_prob = dist_next.log_prob(a_next).sum(-1), dist.log_prob(a).sum(-1)
    next_q = _q(target_params, td["next", "observation"], a_next)
    y = sac_q_target(td["next", "reward"], next_q, log_prob_next, 0.5, 0.9, td["next", "terminated"])
    loss_q, td_error = sac_qvalue_loss(_q(q_params, td["observation"], td["action"]), y, "l2")
    loss_actor = sac_actor_loss(log_prob, _q(q_params, td["observation"], a), 0.5)
    loss_alpha = temperature_loss(loss.log_alpha, log_prob, -2.0)

    torch.manual_seed(7)
    out = loss(td)
    torch.testing.assert_close(out["loss_qvalue"], loss_q.mean())
    torch.testing.assert_close(out["loss_actor"], loss_actor.mean())
    torch.testing.assert_close(out["loss_alpha"], loss_alpha.mean())
    torch.testing.assert_close(out["entropy"], -log_prob.mean())
    torch.testing.assert_close(td["td_error"], td_error)


def test_crossq_module_equals_the_functional_composition():
    # a critic without batch normalisation: the joint pass is then two plain evaluations
    actor, critic = _gaussian_actor_and_critic()
    loss = CrossQLoss(actor, critic, alpha_init=0.5, loss_function="l2")
    loss.make_value_estimator(gamma=0.9)
    _perturb(loss.params_of("qvalue_network"))
    td = _transitions()
    q_params = loss.params_of("qvalue_network").detach()
    with torch.no_grad():
        dist_next = actor.get_dist(td["next"].copy())
        dist = actor.get_dist(td.copy())
    torch.manual_seed(7)
    a_next, a = dist_next.rsample(), dist.rsample()
    log_prob_next, log_prob = dist_next.log_prob(a_next).sum(-1), dist.log_prob(a).sum(-1)
    next_q = _q(q_params, td["next", "observation"], a_next)  # no target copies
    y = sac_q_target(td["next", "reward"], next_q, log_prob_next, 0.5, 0.9, td["next", "terminated"])
    loss_q, td_error = sac_qvalue_loss(_q(q_params, td["observation"], td["action"]), y, "l2")

    torch.manual_seed(7)
    out = loss(td)
    torch.testing.assert_close(out["loss_qvalue"], loss_q.mean())
    torch.testing.assert_close(
        out["loss_actor"], sac_actor_loss(log_prob, _q(q_params, td["observation"], a), 0.5).mean()
    )
    torch.testing.assert_close(out["loss_alpha"], temperature_loss(loss.log_alpha, log_prob, -2.0).mean())
    torch.testing.assert_close(out["td_error"], td_error)


def test_redq_module_equals_the_functional_composition():
    actor, critic = _gaussian_actor_and_critic()
    loss = REDQLoss(actor, critic, num_qvalue_nets=4, sub_sample_len=2, loss_function="l2")
    loss.make_value_estimator(gamma=0.9)
    _perturb(loss.params_of("qvalue_network"))
    td = _transitions()
    q_params = loss.params_of("qvalue_network").detach()
    target_params = loss.params_of("qvalue_network", target=True)
    with torch.no_grad():
        dist_next = actor.get_dist(td["next"].copy())
        dist = actor.get_dist(td.copy())
    alpha = loss.log_alpha.detach().clamp(loss.min_log_alpha, loss.max_log_alpha).exp()
    torch.manual_seed(7)  # the module draws the subset, then the current action, then the next one
    subset = torch.randperm(4)[:2].sort().values
    a, a_next = dist.rsample(), dist_next.rsample()
    log_prob, log_prob_next = dist.log_prob(a).sum(-1), dist_next.log_prob(a_next).sum(-1)
    next_q = _q(target_params[subset], td["next", "observation"], a_next)
    y = sac_q_target(td["next", "reward"], next_q, log_prob_next, alpha, 0.9, td["next", "terminated"])
    loss_q, td_error = redq_qvalue_loss(_q(q_params, td["observation"], td["action"]), y, "l2")
    loss_actor = redq_actor_loss(log_prob, _q(q_params, td["observation"], a), alpha)
    loss_alpha = redq_temperature_loss(loss.log_alpha, torch.stack([log_prob, log_prob_next]), -2.0)

    torch.manual_seed(7)
    out = loss(td)
    torch.testing.assert_close(out["loss_qvalue"], loss_q.mean())
    torch.testing.assert_close(out["loss_actor"], loss_actor.mean())
    torch.testing.assert_close(out["loss_alpha"], loss_alpha.mean())
    torch.testing.assert_close(td["td_error"], td_error)


def test_discrete_sac_module_equals_the_functional_composition():
    torch.manual_seed(0)
    policy = nn.Linear(3, 4)
    q_net = nn.Linear(3, 4)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(policy, in_keys=["observation"], out_keys=["logits"]),
        ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], distribution_class=OneHotCategorical),
    )
    qvalue = TensorDictModule(q_net, in_keys=["observation"], out_keys=["action_value"])
    loss = DiscreteSACLoss(actor, qvalue, action_space="one_hot", num_actions=4, alpha_init=0.5, loss_function="l2")
    loss.make_value_estimator(gamma=0.9)
    _perturb(loss.params_of("qvalue_network"))
    action = F.one_hot(torch.tensor([0, 1, 2, 3, 1, 0]), 4)
    td = _transitions(action=action)
    online = loss.params_of("qvalue_network").detach()
    target = loss.params_of("qvalue_network", target=True)

    def q_all(obs, p=online):  # [N, B, A]
        return obs @ p["module", "weight"].transpose(-1, -2) + p["module", "bias"].unsqueeze(-2)

    def pi(obs):
        logits = policy(obs)
        return logits.softmax(-1), logits.log_softmax(-1)

    with torch.no_grad():
        next_probs, next_log_probs = pi(td["next", "observation"])
        next_v = discrete_soft_state_value(next_probs, q_all(td["next", "observation"], target), next_log_probs, 0.5)
        next_v = next_v.masked_fill(td["next", "terminated"], 0.0)
        y = td["next", "reward"] + 0.9 * next_v
    pred = (q_all(td["observation"]) * action).sum(-1)
    loss_q, td_error = sac_qvalue_loss(pred, y, "l2")
    probs, log_probs = pi(td["observation"])
    loss_actor = discrete_sac_actor_loss(probs, log_probs, q_all(td["observation"]), 0.5)
    neg_entropy = discrete_expected_log_prob(probs, log_probs)
    target_entropy = 0.98 * torch.tensor(4.0).log()
    loss_alpha = temperature_loss(loss.log_alpha, neg_entropy, target_entropy)

    out = loss(td)
    torch.testing.assert_close(out["loss_qvalue"], loss_q.mean())
    torch.testing.assert_close(out["loss_actor"], loss_actor.mean())
    torch.testing.assert_close(out["loss_alpha"], loss_alpha.mean())
    torch.testing.assert_close(out["entropy"], -neg_entropy.mean())
    torch.testing.assert_close(td["td_error"], td_error)
