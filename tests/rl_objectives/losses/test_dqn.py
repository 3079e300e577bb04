"""DQNLoss against a hand-written reference: targets, double DQN, gradients, keys, errors, learning.

Replay batches and the learning loop: conftest.py fixtures.
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from rl_objectives import SoftUpdate
from rl_objectives.losses.dqn import DQNLoss
from rl_objectives.losses.utils import distance_loss
from rl_objectives.value import ValueEstimators
from tdict import TensorDict
from tdict.nn import TensorDictModule, TensorDictSequential
from torch import nn

N_OBS, N_ACT, B = 3, 4, 7


class GreedyHead(nn.Module):
    """action values -> (greedy action, its value), as a Q-value actor's last step."""

    def __init__(self, space):
        super().__init__()
        self.space = space

    def forward(self, action_value):
        idx = action_value.argmax(-1)
        chosen = action_value.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
        action = idx if self.space == "categorical" else nn.functional.one_hot(idx, action_value.shape[-1])
        return action, chosen


def q_actor(space="one_hot", seed=0):
    torch.manual_seed(seed)
    return TensorDictSequential(
        TensorDictModule(nn.Linear(N_OBS, N_ACT), in_keys=["observation"], out_keys=["action_value"]),
        TensorDictModule(GreedyHead(space), in_keys=["action_value"], out_keys=["action", "chosen_action_value"]),
    )


@pytest.fixture
def batch(transition_batch):
    """``(space="one_hot", n=7, seed=1) -> (td, index)``: a replay batch whose action is an index
    (``"categorical"``) or its one-hot vector."""

    def build(space="one_hot", n=B, seed=1):
        td = transition_batch(n=n, seed=seed, action="index", n_act=N_ACT)
        idx = td["action"]
        if space != "categorical":
            td["action"] = nn.functional.one_hot(idx, N_ACT)
        return td, idx

    return build


def linear_q(weights, obs):
    return obs @ weights["module", "0", "module", "weight"].T + weights["module", "0", "module", "bias"]


@pytest.mark.parametrize("space", ["one_hot", "categorical"])
@pytest.mark.parametrize("double_dqn", [False, True])
@pytest.mark.parametrize("loss_function", ["l2", "smooth_l1"])
def test_loss_matches_reference(space, double_dqn, loss_function, batch, perturb):
    loss = DQNLoss(q_actor(space), double_dqn=double_dqn, loss_function=loss_function)
    loss.make_value_estimator(gamma=0.9)
    perturb(loss.params_of("value_network"))
    td, idx = batch(space)
    online = loss.params_of("value_network").detach()
    target = loss.params_of("value_network", target=True)
    q = linear_q(online, td["observation"])
    pred = q[torch.arange(B), idx]
    q_next_target = linear_q(target, td["next", "observation"])
    if double_dqn:
        a_next = linear_q(online, td["next", "observation"]).argmax(-1)
        v_next = q_next_target[torch.arange(B), a_next]
    else:
        v_next = q_next_target.max(-1).values
    y = td["next", "reward"] + 0.9 * (~td["next", "terminated"]).float() * v_next
    if loss_function == "l2":
        expected = (pred - y).pow(2).mean()
    else:
        err = (pred - y).abs()
        expected = torch.where(err < 1, 0.5 * err**2, err - 0.5).mean()
    out = loss(td)
    assert out.batch_size == torch.Size([]) and list(out.keys()) == ["loss"]
    assert torch.allclose(out["loss"], expected, atol=1e-5)
    assert torch.allclose(td["td_error"], (pred - y).pow(2), atol=1e-5)
    assert not td["td_error"].requires_grad


def test_double_dqn_differs_when_online_and_target_disagree(batch, perturb):
    loss_a, loss_b = DQNLoss(q_actor()), DQNLoss(q_actor(), double_dqn=True)
    loss_b.load_state_dict(loss_a.state_dict())
    torch.manual_seed(5)
    perturb(loss_a.params_of("value_network"))
    loss_b.load_state_dict(loss_a.state_dict())
    td, _ = batch(n=64)
    assert not torch.allclose(loss_a(td.clone())["loss"], loss_b(td.clone())["loss"])


def test_caller_entries_untouched_except_td_error(batch, assert_writes_only_td_error):
    assert_writes_only_td_error(DQNLoss(q_actor()), batch()[0])


def test_gradients_reach_online_params_only_and_target_is_used(batch):
    loss = DQNLoss(q_actor())
    td, _ = batch()
    target_before = loss.params_of("value_network", target=True).clone()
    out = loss(td.clone())
    out["loss"].backward()
    for p in loss.params_of("value_network").values(True, True):
        assert p.grad is not None and p.grad.abs().sum() > 0
    for t in loss.params_of("value_network", target=True).values(True, True):
        assert not t.requires_grad and t.grad is None
    # an optimizer step moves the online params, never the targets
    opt = torch.optim.SGD(loss.parameters(), lr=0.1)
    opt.step()
    assert (loss.params_of("value_network", target=True) == target_before).all()


def test_without_delay_value_bootstraps_from_the_online_network(batch):
    loss = DQNLoss(q_actor(), delay_value=False)
    loss.make_value_estimator(gamma=0.5)
    assert loss.target_networks == []
    td, idx = batch()
    w = loss.params_of("value_network").detach()
    pred = linear_q(w, td["observation"])[torch.arange(B), idx]
    y = (
        td["next", "reward"]
        + 0.5 * (~td["next", "terminated"]).float() * linear_q(w, td["next", "observation"]).max(-1).values
    )
    assert torch.allclose(loss(td)["loss"], (pred - y).pow(2).mean(), atol=1e-5)


def test_n_step_transitions_of_a_multistep_buffer_bootstrap_with_gamma_to_the_steps():
    """A replay buffer with rl_replay's MultiStepTransform stores 3-step returns and
    "steps_to_next_obs"; the loss bootstraps each with gamma ** steps (fewer than 3 where the episode
    ended): the target equals a hand loop over the raw trajectory."""
    from rl_replay import LazyTensorStorage, MultiStepTransform, ReplayBuffer

    gamma, n, T = 0.5, 3, 10
    g = torch.Generator().manual_seed(3)
    obs = torch.randn(T + 1, N_OBS, generator=g)
    reward = torch.randn(T, generator=g)
    done = torch.zeros(T, dtype=torch.bool)
    done[4] = True  # a truncation: the 3-step windows reaching it stop there and bootstrap
    traj = TensorDict(
        observation=obs[:-1],
        action=torch.randint(0, N_ACT, (T,), generator=g),
        next=TensorDict(
            observation=obs[1:], reward=reward, done=done, terminated=torch.zeros(T, dtype=torch.bool), batch_size=[T]
        ),
        batch_size=[T],
    )
    rb = ReplayBuffer(storage=LazyTensorStorage(T), transform=MultiStepTransform(n_steps=n, gamma=gamma))
    rb.extend(traj)
    stored = rb[: len(rb)]
    loss = DQNLoss(q_actor("categorical"), action_space="categorical", delay_value=False, reduction="none")
    loss.make_value_estimator(gamma=gamma)
    w = loss.params_of("value_network").detach()
    expected = []
    for t in range(len(stored)):
        ret, k = 0.0, 0
        while k < n and t + k < T:
            ret += gamma**k * float(reward[t + k])
            k += 1
            if done[t + k - 1]:
                break
        bootstrap = linear_q(w, obs[t + k]).max(-1).values
        pred = linear_q(w, obs[t])[traj["action"][t]]
        expected.append((pred - (ret + gamma**k * bootstrap)) ** 2)
    assert stored["steps_to_next_obs"].tolist() == [3, 3, 3, 2, 1, 3, 3]
    torch.testing.assert_close(loss(stored)["loss"], torch.stack(expected).detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_reduction(reduction, batch):
    loss = DQNLoss(q_actor(), reduction=reduction)
    td, _ = batch()
    per_sample = DQNLoss(q_actor(), reduction="none")(td.clone())["loss"]
    assert per_sample.shape == (B,)
    out = loss(td)["loss"]
    assert torch.allclose(out, per_sample if reduction == "none" else per_sample.sum(), atol=1e-6)


def test_value_estimators(batch):
    td, _ = batch()
    loss = DQNLoss(q_actor())
    assert loss.value_estimator.gamma == pytest.approx(0.99)
    loss.make_value_estimator(ValueEstimators.TDLambda, gamma=0.9, lmbda=0.5)
    assert type(loss.value_estimator).__name__ == "TDLambdaEstimator"
    assert loss(td)["loss"].isfinite()
    with pytest.raises(NotImplementedError, match="GAE"):
        loss.make_value_estimator(ValueEstimators.GAE)
    with pytest.raises(ValueError, match="unknown value_type"):
        loss.make_value_estimator("bogus")


def test_set_keys_reads_renamed_entries(batch):
    loss = DQNLoss(q_actor()).set_keys(reward="r", done="d", terminated="t", priority="prio")
    td, _ = batch()
    renamed = td.clone()
    for old, new in (("reward", "r"), ("done", "d"), ("terminated", "t")):
        renamed["next"].set(new, renamed["next"].pop(old))
    expected = DQNLoss(q_actor())(td)["loss"]
    assert torch.allclose(loss(renamed)["loss"], expected)
    assert "prio" in renamed.keys() and "td_error" not in renamed.keys()
    assert loss.value_estimator.tensor_keys.reward == "r"


def test_action_space_inference(batch):
    # from a QValueModule's action_space attribute
    from rl_objectives.modules import QValueActor
    from tdict.specs import Categorical, OneHot

    assert DQNLoss(QValueActor(nn.Linear(N_OBS, N_ACT), spec=OneHot(N_ACT))).action_space == "one_hot"
    assert DQNLoss(QValueActor(nn.Linear(N_OBS, N_ACT), spec=Categorical(N_ACT))).action_space == "categorical"
    # nothing on the network: decided per call from the action's shape
    loss = DQNLoss(q_actor("categorical"))
    assert loss.action_space is None
    td_cat, _ = batch("categorical")
    td_hot, _ = batch("one_hot")
    assert torch.allclose(loss(td_cat)["loss"], loss(td_hot)["loss"])
    assert DQNLoss(q_actor(), action_space=OneHot(N_ACT)).action_space == "one_hot"


def test_qvalue_actor_end_to_end(batch):
    from rl_objectives.modules import QValueActor
    from tdict.specs import OneHot

    torch.manual_seed(0)
    actor = QValueActor(nn.Linear(N_OBS, N_ACT), spec=OneHot(N_ACT))
    loss = DQNLoss(actor, double_dqn=True)
    td, idx = batch()
    w = loss.params_of("value_network").detach()
    q, qn = linear_q(w, td["observation"]), linear_q(w, td["next", "observation"])
    y = td["next", "reward"] + 0.99 * (~td["next", "terminated"]).float() * qn.max(-1).values
    assert torch.allclose(loss(td)["loss"], (q[torch.arange(B), idx] - y).pow(2).mean(), atol=1e-5)


def test_errors(batch):
    with pytest.raises(ValueError, match="loss_function must be one of"):
        DQNLoss(q_actor(), loss_function="l3")
    with pytest.raises(ValueError, match="reduction must be one of"):
        DQNLoss(q_actor(), reduction="avg")
    with pytest.raises(ValueError, match="action_space must be one of"):
        DQNLoss(q_actor(), action_space="continuous")
    loss = DQNLoss(q_actor(), action_space="categorical")
    td, _ = batch("one_hot")
    with pytest.raises(ValueError, match=r"'action' has shape \(7, 4\)"):
        loss(td)
    td, _ = batch("categorical")
    td["next"].set("reward", td["next", "reward"].unsqueeze(-1))
    with pytest.raises(ValueError, match="reward"):
        loss(td)
    td, _ = batch("categorical")
    del td["action"]
    with pytest.raises(KeyError, match="misses .*action"):
        loss(td)
    td, _ = batch("categorical")
    td["next"].set("done", td["next", "done"].float())
    with pytest.raises(TypeError, match="bool"):
        loss(td)
    assert "td_error" not in td.keys()  # nothing written before the error


def test_learns_the_best_arm_of_a_bandit(train_on_bandit):
    torch.manual_seed(0)
    actor = q_actor("categorical")
    loss = DQNLoss(actor, action_space="categorical")
    rewards = torch.tensor([0.0, 1.0, 0.2, 0.5])
    train_on_bandit(
        loss, lambda n: torch.randint(N_ACT, (n,)), lambda a: rewards[a], steps=200, n=32, lr=0.05, n_obs=N_OBS
    )
    q = actor(TensorDict(observation=torch.ones(1, N_OBS), batch_size=[1]))
    assert int(q["action"]) == 1
    assert torch.allclose(q["action_value"][0], rewards, atol=0.05)


def test_compiled_forward_matches_eager(batch, assert_compiled_matches_eager):
    loss = DQNLoss(q_actor(), double_dqn=True)
    loss.make_value_estimator(gamma=0.9)
    td, _ = batch()
    assert_compiled_matches_eager(loss, td)


def test_distance_loss():
    a, b = torch.tensor([0.0, 3.0]), torch.tensor([0.5, 0.0])
    assert torch.allclose(distance_loss(a, b, "l1"), torch.tensor([0.5, 3.0]))
    assert torch.allclose(distance_loss(a, b, "l2"), torch.tensor([0.25, 9.0]))
    assert torch.allclose(distance_loss(a, b, "smooth_l1"), torch.tensor([0.125, 2.5]))
    with pytest.raises(ValueError, match="must match"):
        distance_loss(a, b.unsqueeze(-1))
    assert distance_loss(a, b.unsqueeze(-1), "smooth_l1", strict_shape=False).shape == (2, 2)


@given(
    st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=1, max_size=8),
    st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=1, max_size=8),
    st.sampled_from(["l1", "l2", "smooth_l1"]),
)
def test_distance_loss_matches_torch_reference(xs, ys, loss_function):
    n = min(len(xs), len(ys))
    a, b = torch.tensor(xs[:n]), torch.tensor(ys[:n])
    reference = {
        "l1": lambda: nn.functional.l1_loss(a, b, reduction="none"),
        "l2": lambda: nn.functional.mse_loss(a, b, reduction="none"),
        "smooth_l1": lambda: nn.functional.smooth_l1_loss(a, b, reduction="none"),
    }[loss_function]()
    assert torch.allclose(distance_loss(a, b, loss_function), reference, atol=1e-6)


def test_one_transition_and_keyword_tensors():
    # a batch-less transition (batch size []) and TorchRL's keyword spelling of the same call
    loss = DQNLoss(q_actor("categorical"), action_space="categorical")
    loss.make_value_estimator(gamma=0.5)
    SoftUpdate(loss, tau=0.1)
    assert loss.in_keys == [
        "action",
        "observation",
        ("next", "observation"),
        ("next", "reward"),
        ("next", "done"),
        ("next", "terminated"),
    ]
    torch.manual_seed(2)
    kwargs = {
        "observation": torch.randn(N_OBS),
        "action": torch.tensor(1),
        "next_observation": torch.randn(N_OBS),
        "next_reward": torch.tensor(0.3),
        "next_done": torch.tensor(False),
        "next_terminated": torch.tensor(False),
    }
    value = loss(**kwargs)  # one out key: the tensor itself
    w = loss.params_of("value_network").detach()
    y = 0.3 + 0.5 * linear_q(w, kwargs["next_observation"]).max()
    torch.testing.assert_close(value, (linear_q(w, kwargs["observation"])[1] - y).pow(2))
    td = TensorDict(kwargs).unflatten_keys("_")
    torch.testing.assert_close(loss(td)["loss"], value)
    assert td["td_error"].shape == ()


def test_the_collectors_mask_leaves_padded_transitions_out(batch):
    td, _ = batch("categorical")
    loss = DQNLoss(q_actor(), action_space="categorical", delay_value=False, reduction="none")
    per_sample = loss(td.clone())["loss"]
    valid = torch.tensor([True, False] * (B // 2) + [True] * (B % 2))
    masked = td.clone()
    masked["collector", "mask"] = valid
    masked["next", "observation"][~valid] = float("nan")  # padding garbage must not leak
    for reduction, expected in (
        ("mean", per_sample[valid].mean()),
        ("sum", per_sample[valid].sum()),
        ("none", torch.where(valid, per_sample, 0.0)),
    ):
        loss.reduction = reduction
        out = loss(masked.clone())["loss"]
        torch.testing.assert_close(out, expected)
    # with a prioritized buffer's weights: the weighted mean over the valid transitions
    weights = torch.linspace(0.5, 2.0, B)
    masked["priority_weight"] = weights
    loss.reduction = "mean"
    expected = (per_sample * weights)[valid].sum() / weights[valid].sum()
    torch.testing.assert_close(loss(masked.clone())["loss"], expected)
