"""rl_objectives.functional.td3 against the CleanRL-style DDPG / TD3 / TD3+BC step written out here, and
the loss modules (DDPGLoss, TD3Loss, TD3BCLoss) against the functional composition."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tdict import TensorDict
from tdict.nn import TensorDictModule
from torch import nn

from rl_objectives import DDPGLoss, TD3BCLoss, TD3Loss
from rl_objectives.functional.td3 import (
    clipped_double_q,
    ddpg_actor_loss,
    ddpg_q_target,
    ddpg_value_loss,
    td3_bc_actor_loss,
    td3_q_target,
    td3_qvalue_loss,
    td3_target_action,
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
        "target": torch.randn(n, generator=g),
        "next_action": torch.rand(n, 2, generator=g) * 2 - 1,
        "noise": torch.randn(n, 2, generator=g) * 0.4,
        "data_action": torch.rand(n, 2, generator=g) * 2 - 1,
    }


def test_target_action_equals_cleanrl():
    b = _batch()
    # CleanRL td3_continuous_action.py: clipped_noise = (randn * policy_noise).clamp(-noise_clip, noise_clip)
    # * action_scale; next_state_actions = (target_actor(s') + clipped_noise).clamp(low, high)
    expected = (b["next_action"] + b["noise"].clamp(-0.5, 0.5)).clamp(-1.0, 1.0)
    action = td3_target_action(b["next_action"], b["noise"], 0.5, -1.0, 1.0)
    torch.testing.assert_close(action, expected)
    assert action.shape == (8, 2)
    # tensor bounds (the module's buffers), per action dim
    low, high = torch.tensor([-1.0, -0.2]), torch.tensor([1.0, 0.3])
    expected = torch.max(torch.min(b["next_action"] + b["noise"].clamp(-0.5, 0.5), high), low)
    torch.testing.assert_close(td3_target_action(b["next_action"], b["noise"], 0.5, low, high), expected)
    # small values: the noise clip, then the bound
    torch.testing.assert_close(
        td3_target_action(torch.tensor([0.0, 0.0, 0.8]), torch.tensor([0.2, -0.9, 0.4]), 0.5, -1.0, 1.0),
        torch.tensor([0.2, -0.5, 1.0]),
    )


def test_q_targets_equal_cleanrl():
    b = _batch()
    gamma = 0.9
    not_done = 1 - b["terminated"].float()
    # CleanRL: next_q_value = r + (1 - done) * gamma * min(qf1_next_target, qf2_next_target)
    expected = b["reward"] + not_done * gamma * torch.min(b["next_q"][0], b["next_q"][1])
    torch.testing.assert_close(clipped_double_q(b["next_q"]), torch.min(b["next_q"][0], b["next_q"][1]))
    torch.testing.assert_close(td3_q_target(b["reward"], b["next_q"], gamma, b["terminated"]), expected)
    # DDPG: one critic
    expected = b["reward"] + not_done * gamma * b["next_q"][0]
    torch.testing.assert_close(ddpg_q_target(b["reward"], b["next_q"][0], gamma, b["terminated"]), expected)
    # a terminated step's next value is dropped, even when it is not finite
    torch.testing.assert_close(
        ddpg_q_target(torch.ones(2), torch.tensor([float("nan"), 2.0]), 0.5, torch.tensor([True, False])),
        torch.tensor([1.0, 2.0]),
    )


@pytest.mark.parametrize("loss_type", ["l1", "l2", "smooth_l1"])
def test_critic_losses(loss_type):
    b = _batch(n_critics=3)
    d = DISTANCES[loss_type]
    q = b["q"].clone().requires_grad_(True)
    loss, td_error = td3_qvalue_loss(q, b["target"], loss_type)
    torch.testing.assert_close(loss, sum(d(b["q"][i], b["target"], reduction="none") for i in range(3)))
    torch.testing.assert_close(td_error, ((b["q"] - b["target"]) ** 2).max(0).values)
    assert loss.shape == (8,) and not td_error.requires_grad
    loss, td_error = ddpg_value_loss(b["q"][0], b["target"], loss_type)
    torch.testing.assert_close(loss, d(b["q"][0], b["target"], reduction="none"))
    torch.testing.assert_close(td_error, (b["q"][0] - b["target"]) ** 2)


def test_actor_losses():
    q = torch.tensor([1.0, -2.0], requires_grad=True)
    torch.testing.assert_close(ddpg_actor_loss(q), torch.tensor([-1.0, 2.0]))
    torch.testing.assert_close(ddpg_actor_loss(q), torch.tensor([-1.0, 2.0]))
    ddpg_actor_loss(q).sum().backward()
    torch.testing.assert_close(q.grad, torch.tensor([-1.0, -1.0]))


def test_td3_bc_actor_loss_equals_the_reference():
    b = _batch()
    q = b["q"][0].clone().requires_grad_(True)
    policy_action = b["next_action"].clone().requires_grad_(True)
    alpha = 2.5
    # the TD3+BC paper's (and TorchRL's) actor loss, batch-averaged:
    # lmbda = alpha / Q.abs().mean().detach(); loss = -lmbda * Q.mean() + F.mse_loss(pi, a)
    lmbda = alpha / b["q"][0].abs().mean()
    expected_mean = -lmbda * b["q"][0].mean() + F.mse_loss(b["next_action"], b["data_action"])
    loss, bc, lmbd = td3_bc_actor_loss(q, policy_action, b["data_action"], alpha)
    assert loss.shape == (8,) and bc.shape == (8,) and lmbd.shape == ()
    torch.testing.assert_close(loss.mean(), expected_mean)
    torch.testing.assert_close(bc, ((b["next_action"] - b["data_action"]) ** 2).mean(-1))
    torch.testing.assert_close(lmbd, lmbda)
    loss.mean().backward()
    torch.testing.assert_close(q.grad, torch.full((8,), -lmbda.item() / 8))  # lambda is a constant
    torch.testing.assert_close(policy_action.grad, 2 * (b["next_action"] - b["data_action"]) / 16)


# --- the modules against the functional composition ---------------------------------------------


class Critic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(5, 1)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([observation, action], -1)).squeeze(-1)


def _q(params, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """The :class:`Critic` from its (possibly stacked) parameters: ``[B]`` or ``[N, B]``."""
    w, b = params["module", "net", "weight"], params["module", "net", "bias"]
    return (torch.cat([obs, action], -1) @ w.transpose(-1, -2) + b.unsqueeze(-2)).squeeze(-1)


def _actor(params, obs: torch.Tensor) -> torch.Tensor:
    return torch.tanh(obs @ params["module", "0", "weight"].T + params["module", "0", "bias"])


def _networks():
    torch.manual_seed(0)
    actor = TensorDictModule(nn.Sequential(nn.Linear(3, 2), nn.Tanh()), in_keys=["observation"], out_keys=["action"])
    critic = TensorDictModule(Critic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    return actor, critic


def _transitions(n: int = 6) -> TensorDict:
    g = torch.Generator().manual_seed(1)
    terminated = torch.rand(n, generator=g) < 0.3
    return TensorDict(
        {
            "observation": torch.randn(n, 3, generator=g),
            "action": torch.rand(n, 2, generator=g) * 2 - 1,
            "next": {
                "observation": torch.randn(n, 3, generator=g),
                "reward": torch.randn(n, generator=g),
                "done": terminated.clone(),
                "terminated": terminated,
            },
        },
        batch_size=[n],
    )


def _perturb(*params) -> None:
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for tree in params:
            for p in tree.values(True, True):
                p.add_(torch.randn(p.shape, generator=g) * 0.3)


@pytest.mark.parametrize("cls", [TD3Loss, TD3BCLoss])
def test_td3_modules_equal_the_functional_composition(cls):
    actor, critic = _networks()
    loss = cls(actor, critic, bounds=(-0.8, 0.8), loss_function="l2")
    loss.make_value_estimator(gamma=0.9)
    _perturb(loss.params_of("qvalue_network"), loss.params_of("actor_network"))  # online != target
    td = _transitions()
    q_params = loss.params_of("qvalue_network").detach()
    q_target = loss.params_of("qvalue_network", target=True)
    pi_params = loss.params_of("actor_network").detach()
    pi_target = loss.params_of("actor_network", target=True)

    torch.manual_seed(7)  # the module draws the noise first
    noise = torch.randn(6, 2) * 0.2
    next_action = td3_target_action(_actor(pi_target, td["next", "observation"]), noise, 0.5, -0.8, 0.8)
    next_q = _q(q_target, td["next", "observation"], next_action)
    y = td3_q_target(td["next", "reward"], next_q, 0.9, td["next", "terminated"])
    loss_q, td_error = td3_qvalue_loss(_q(q_params, td["observation"], td["action"]), y, "l2")
    policy_action = _actor(pi_params, td["observation"])
    q1 = _q(q_params[0], td["observation"], policy_action)
    if cls is TD3Loss:
        loss_actor = ddpg_actor_loss(q1)
    else:
        loss_actor, bc, lmbd = td3_bc_actor_loss(q1, policy_action, td["action"], 2.5)

    torch.manual_seed(7)
    out = loss(td)
    torch.testing.assert_close(out["loss_qvalue"], loss_q.mean())
    torch.testing.assert_close(out["loss_actor"], loss_actor.mean())
    torch.testing.assert_close(out["next_state_value"], clipped_double_q(next_q).mean())
    torch.testing.assert_close(out["target_value"], y.mean())
    torch.testing.assert_close(td["td_error"], td_error)
    if cls is TD3BCLoss:
        torch.testing.assert_close(out["bc_loss"], bc.mean())
        torch.testing.assert_close(out["lmbd"], lmbd)


def test_ddpg_module_equals_the_functional_composition():
    actor, critic = _networks()
    loss = DDPGLoss(actor, critic, loss_function="smooth_l1", delay_actor=True)
    loss.make_value_estimator(gamma=0.9)
    _perturb(loss.params_of("value_network"), loss.params_of("actor_network"))
    td = _transitions()
    q_params = loss.params_of("value_network").detach()
    q_target = loss.params_of("value_network", target=True)
    pi_params = loss.params_of("actor_network").detach()
    pi_target = loss.params_of("actor_network", target=True)

    next_q = _q(q_target, td["next", "observation"], _actor(pi_target, td["next", "observation"]))
    y = ddpg_q_target(td["next", "reward"], next_q, 0.9, td["next", "terminated"])
    loss_value, td_error = ddpg_value_loss(_q(q_params, td["observation"], td["action"]), y, "smooth_l1")
    loss_actor = ddpg_actor_loss(_q(q_params, td["observation"], _actor(pi_params, td["observation"])))

    out = loss(td)
    torch.testing.assert_close(out["loss_value"], loss_value.mean())
    torch.testing.assert_close(out["loss_actor"], loss_actor.mean())
    torch.testing.assert_close(out["target_value"], y.mean())
    torch.testing.assert_close(td["td_error"], td_error)
