"""rl_objectives.functional.dqn against the CleanRL-style DQN step written out here."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tdict import TensorDict
from tdict.nn import TensorDictModule, TensorDictSequential
from tdict.specs import OneHot
from torch import nn

from rl_objectives.functional.dqn import (
    chosen_action_value,
    double_dqn_next_value,
    dqn_target,
    greedy_value,
    squared_td_error,
    td_loss,
)
from rl_objectives.functional.value import td0_return_estimate
from rl_objectives.losses.dqn import DQNLoss
from rl_objectives.losses.qmixer import QMixerLoss
from rl_objectives.modules import QValueActor, QValueModule
from rl_objectives.modules.multiagent import VDNMixer

pytestmark = pytest.mark.filterwarnings("ignore:No target network updater:UserWarning")


def test_chosen_action_value_index_and_one_hot():
    q = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    action = torch.tensor([2, 0, 1])
    expected = torch.tensor([3.0, 4.0, 8.0])
    torch.testing.assert_close(chosen_action_value(q, action), expected)
    torch.testing.assert_close(chosen_action_value(q, F.one_hot(action, 3), "one_hot"), expected)
    # CleanRL: q_values.gather(1, actions).squeeze()
    torch.testing.assert_close(chosen_action_value(q, action), q.gather(1, action.unsqueeze(1)).squeeze(1))


def test_chosen_action_value_broadcasts_over_an_ensemble():
    q = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(0))
    action = torch.tensor([0, 3, 1, 1, 2])
    out = chosen_action_value(q, action)
    assert out.shape == (2, 5)
    torch.testing.assert_close(out, torch.stack([q[i, torch.arange(5), action] for i in range(2)]))


def test_greedy_and_double_dqn_next_value():
    online = torch.tensor([[1.0, 3.0, 2.0], [5.0, -1.0, 0.0]])
    target = torch.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    torch.testing.assert_close(greedy_value(target), torch.tensor([30.0, 60.0]))
    torch.testing.assert_close(double_dqn_next_value(online, target), torch.tensor([20.0, 40.0]))


def test_dqn_target_equals_cleanrl_and_td0():
    g = torch.Generator().manual_seed(1)
    reward, next_value = torch.randn(8, generator=g), torch.randn(8, generator=g)
    terminated = torch.rand(8, generator=g) < 0.3
    # CleanRL: td_target = rewards + gamma * target_max * (1 - dones)
    expected = reward + 0.99 * next_value * (1 - terminated.float())
    torch.testing.assert_close(dqn_target(reward, next_value, 0.99, terminated), expected)
    torch.testing.assert_close(
        dqn_target(reward, next_value, 0.99, terminated), td0_return_estimate(0.99, next_value, reward, terminated)
    )
    torch.testing.assert_close(
        dqn_target(torch.tensor([1.0, 1.0]), torch.tensor([2.0, 2.0]), 0.5, torch.tensor([False, True])),
        torch.tensor([2.0, 1.0]),
    )


@pytest.mark.parametrize(
    ("loss_function", "reference"),
    [("l2", F.mse_loss), ("l1", F.l1_loss), ("smooth_l1", F.smooth_l1_loss)],
)
def test_td_loss_equals_torch_losses(loss_function, reference):
    g = torch.Generator().manual_seed(2)
    q, target = torch.randn(6, generator=g) * 3, torch.randn(6, generator=g)
    torch.testing.assert_close(td_loss(q, target, loss_function), reference(q, target, reduction="none"))
    # a critic ensemble [2, B] against a shared target [B]
    qq = torch.randn(2, 6, generator=g)
    torch.testing.assert_close(
        td_loss(qq, target, loss_function), reference(qq, target.expand_as(qq), reduction="none")
    )


def test_squared_td_error_is_detached():
    q = torch.tensor([1.0, 2.0], requires_grad=True)
    out = squared_td_error(q, torch.tensor([0.0, 4.0]))
    torch.testing.assert_close(out, torch.tensor([1.0, 4.0]))
    assert not out.requires_grad


def _batch(n: int = 7, seed: int = 0, one_hot: bool = True) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    action = torch.randint(2, (n,), generator=g)
    return TensorDict(
        {
            "observation": torch.randn(n, 3, generator=g),
            "action": F.one_hot(action, 2) if one_hot else action,
            "next": {
                "observation": torch.randn(n, 3, generator=g),
                "reward": torch.randn(n, generator=g),
                "done": torch.tensor([False, True] * (n // 2) + [False] * (n % 2)),
                "terminated": torch.tensor([False, True] * (n // 2) + [False] * (n % 2)),
            },
        },
        batch_size=[n],
    )


@pytest.mark.parametrize("double_dqn", [False, True])
def test_dqn_loss_equals_functional_composition(double_dqn):
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    loss_module = DQNLoss(QValueActor(net, spec=OneHot(2)), double_dqn=double_dqn, loss_function="smooth_l1")
    td = _batch()
    out = loss_module(td)

    q = net(td["observation"])
    with torch.no_grad():  # the target parameters are a copy of the online ones at construction
        next_q = net(td["next", "observation"])
        next_value = double_dqn_next_value(next_q, next_q) if double_dqn else greedy_value(next_q)
        target = dqn_target(td["next", "reward"], next_value, 0.99, td["next", "terminated"])
    chosen = chosen_action_value(q, td["action"], "one_hot")
    torch.testing.assert_close(out["loss"], td_loss(chosen, target, "smooth_l1").mean())
    torch.testing.assert_close(td["td_error"], squared_td_error(chosen, target))


def test_qmixer_vdn_loss_equals_functional_composition():
    torch.manual_seed(0)
    net = nn.Linear(4, 3)
    local = TensorDictSequential(
        TensorDictModule(net, in_keys=[("agents", "observation")], out_keys=[("agents", "action_value")]),
        QValueModule(
            action_space="categorical",
            action_value_key=("agents", "action_value"),
            out_keys=[("agents", "action"), ("agents", "action_value"), ("agents", "chosen_action_value")],
        ),
    )
    loss_module = QMixerLoss(local, VDNMixer(n_agents=2))
    g = torch.Generator().manual_seed(3)

    def agents() -> TensorDict:
        return TensorDict(observation=torch.randn(5, 2, 4, generator=g), batch_size=[5, 2])

    terminated = torch.tensor([False, True, False, False, True])
    td = TensorDict(
        {
            "agents": agents(),
            "next": {
                "agents": agents(),
                "reward": torch.randn(5, generator=g),
                "done": terminated,
                "terminated": terminated,
            },
        },
        batch_size=[5],
    )
    td["agents", "action"] = torch.randint(3, (5, 2), generator=g)
    out = loss_module(td)

    q_tot = chosen_action_value(net(td["agents", "observation"]), td["agents", "action"]).sum(-1)  # VDN: a sum
    with torch.no_grad():
        next_q_tot = greedy_value(net(td["next", "agents", "observation"])).sum(-1)
        target = dqn_target(td["next", "reward"], next_q_tot, 0.99, terminated)
    torch.testing.assert_close(out["loss"], td_loss(q_tot, target).mean())
    torch.testing.assert_close(td["td_error"], squared_td_error(q_tot, target))
