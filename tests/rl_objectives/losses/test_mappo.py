"""MAPPO / IPPO through ClipPPOLoss with MultiAgentMLP actors and critics (no new loss class).

The rollout has batch ``[N, T]`` and the agents' entries in a sub-TensorDict ``"agents"`` of batch
``[N, T, n_agents]``; the team reward is expanded per agent. Log-probs, entropies and advantages keep
the batch shape of the group holding the action, so the loss can run on the root rollout with its
keys under ``"agents"``, or on the agents' view of it (batch ``[N, T, n_agents]``, with the team done
flags expanded per agent and ``time_dim=1`` for GAE): both give the same numbers. A centralised
critic is MAPPO, a decentralised one IPPO.
"""

import pytest
import torch
from rl_objectives.losses.ppo import ClipPPOLoss
from rl_objectives.modules.multiagent import MultiAgentMLP
from rl_objectives.value import ValueEstimators
from tdict import TensorDict
from tdict.nn import (
    InteractionType,
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    set_interaction_type,
)
from torch import nn

N, T, A, O, D = 4, 3, 2, 3, 1
TARGET = torch.tensor([1.0, -1.0])  # agent i is rewarded for actions near TARGET[i]


@pytest.fixture
def one_thread():
    """Tiny tensors: one intra-op thread avoids contention with other processes on a small machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_actor(prefix=("agents",)):
    key = lambda name: prefix + (name,) if prefix else name
    net = nn.Sequential(
        MultiAgentMLP(O, 2 * D, A, centralized=False, share_params=False, depth=1, num_cells=16), NormalParamExtractor()
    )
    return ProbabilisticTensorDictSequential(
        TensorDictModule(net, in_keys=[key("observation")], out_keys=[key("loc"), key("scale")]),
        ProbabilisticTensorDictModule(
            in_keys={"loc": key("loc"), "scale": key("scale")},
            out_keys=[key("action")],
            distribution_class=torch.distributions.Normal,
            return_log_prob=True,
        ),
    )


def make_critic(centralized, prefix=("agents",)):
    key = lambda name: prefix + (name,) if prefix else name
    net = nn.Sequential(
        MultiAgentMLP(O, 1, A, centralized=centralized, share_params=True, depth=1, num_cells=16), nn.Flatten(-2)
    )
    return TensorDictModule(net, in_keys=[key("observation")], out_keys=[key("state_value")])


def team_reward(action):
    """``[*B, A, D]`` actions -> the shared team reward ``[*B]``."""
    return -(action.squeeze(-1) - TARGET).pow(2).sum(-1)


def rollout(seed=0, n=N, t=T):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, t + 1, A, O, generator=g)
    agents = TensorDict(observation=obs[:, :-1], batch_size=[n, t, A])
    next_agents = TensorDict(observation=obs[:, 1:], batch_size=[n, t, A])
    done = torch.zeros(n, t, dtype=torch.bool)
    done[:, -1] = True  # episodes of t steps: the last one ends (a truncation)
    return TensorDict(
        {
            "agents": agents,
            "next": {"agents": next_agents, "done": done, "terminated": torch.zeros(n, t, dtype=torch.bool)},
        },
        batch_size=[n, t],
    )


def agents_view(td):
    """The rollout as seen by the agents: batch ``[N, T, n_agents]``, team flags expanded per agent."""
    view = td.get("agents").copy()
    nxt = td.get("next")
    sub = nxt.get("agents").copy()
    for key in ("done", "terminated"):
        sub.set(key, nxt.get(key).unsqueeze(-1).expand(*nxt.batch_size, A))
    view.set("next", sub)
    return view


def collect(actor, td):
    """Act on the agents' view and write the team reward expanded per agent."""
    view = agents_view(td)
    with torch.no_grad(), set_interaction_type(InteractionType.RANDOM):  # sample, as a collector does
        view = actor(view)
    reward = team_reward(view.get("action"))
    view.get("next").set("reward", reward.unsqueeze(-1).expand_as(view.get("action_log_prob")).clone())
    return view


def make_loss(actor, critic, **kwargs):
    loss = ClipPPOLoss(actor, critic, entropy_coeff=0.0, **kwargs)
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.9, lmbda=0.9, time_dim=1)
    return loss


# ---------------------------------------------------------------------------- what works
@pytest.mark.parametrize("centralized", [True, False], ids=["MAPPO", "IPPO"])
def test_ppo_on_the_agents_view_matches_a_reference(centralized):
    torch.manual_seed(0)
    actor, critic = make_actor(prefix=()), make_critic(centralized, prefix=())
    view = collect(actor, rollout())
    assert view.batch_size == (N, T, A) and view.get("action_log_prob").shape == (N, T, A)
    loss = make_loss(actor, critic, loss_critic_type="l2")
    out = loss(view.clone())

    # reference: per-agent GAE along time (dim 1) by a plain loop, then the clipped objective
    with torch.no_grad():
        v = critic(view.copy()).get("state_value")
        v_next = critic(view.get("next").copy()).get("state_value")
    r = view.get(("next", "reward"))
    done = view.get(("next", "done")).float()
    adv = torch.zeros(N, T, A)
    running = torch.zeros(N, A)
    for t in reversed(range(T)):
        delta = r[:, t] + 0.9 * v_next[:, t] - v[:, t]  # truncation: bootstrap, but cut the trace
        running = delta + 0.9 * 0.9 * (1 - done[:, t]) * running
        adv[:, t] = running
    dist = actor.get_dist(view.copy())
    log_prob = dist.log_prob(view.get("action")).sum(-1)
    ratio = (log_prob - view.get("action_log_prob")).exp()
    objective = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
    value = critic(view.copy()).get("state_value")
    torch.testing.assert_close(out["loss_objective"], objective)
    torch.testing.assert_close(out["loss_critic"], (value - (adv + v)).pow(2).mean())
    if centralized:  # one value per step, shared by the agents
        assert torch.equal(value[..., 0], value[..., 1])


def test_gae_handles_the_agent_dim_inside_the_group():
    """GAE with ("agents", ...) keys and team done flags at the root of "next" is fine."""
    torch.manual_seed(0)
    critic = make_critic(True)
    td = rollout()
    td.set(("next", "agents", "reward"), torch.randn(N, T, 1).expand(N, T, A).clone())
    loss = ClipPPOLoss(make_actor(), critic)
    loss.set_keys(
        value=("agents", "state_value"),
        advantage=("agents", "advantage"),
        value_target=("agents", "value_target"),
        reward=("agents", "reward"),
    )
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.9, lmbda=0.9)  # time: the root's last batch dim
    loss.value_estimator(td)
    assert td.get(("agents", "advantage")).shape == (N, T, A)
    view = agents_view(td)
    view.get("next").set("reward", td.get(("next", "agents", "reward")))
    flat_critic = TensorDictModule(critic.module, in_keys=["observation"], out_keys=["state_value"])  # same weights
    ref = make_loss(make_actor(prefix=()), flat_critic).value_estimator
    ref.set_keys(advantage="adv_ref")
    ref(view)
    torch.testing.assert_close(td.get(("agents", "advantage")), view.get("adv_ref"))


@pytest.mark.parametrize("centralized", [True, False], ids=["MAPPO", "IPPO"])
def test_mappo_and_ippo_learn_each_agents_target_action(centralized, one_thread):
    torch.manual_seed(0)
    actor, critic = make_actor(prefix=()), make_critic(centralized, prefix=())
    loss = make_loss(actor, critic, normalize_advantage=True)
    opt = torch.optim.Adam(loss.parameters(), lr=2e-2)
    probe = agents_view(rollout(seed=123, n=64))
    for it in range(15):
        view = collect(actor, rollout(seed=it, n=32))
        loss.value_estimator(view)
        for _ in range(4):
            out = loss(view)
            opt.zero_grad()
            (out["loss_objective"] + out["loss_critic"]).backward()
            opt.step()
    with torch.no_grad():
        loc = actor[0](probe.copy()).get("loc").squeeze(-1)
    mean_loc = loc.mean((0, 1))
    assert (mean_loc - TARGET).abs().max() < 0.35, mean_loc


# ---------------------------------------------------------------------------- the root layout
def test_actor_writes_per_agent_log_prob_in_the_group():
    td = rollout()
    actor = make_actor()
    with torch.no_grad(), set_interaction_type(InteractionType.RANDOM):
        actor(td)
    group = td.get("agents")
    assert group.get("action_log_prob").shape == (N, T, A)
    ref = torch.distributions.Normal(group.get("loc"), group.get("scale")).log_prob(group.get("action")).sum(-1)
    torch.testing.assert_close(group.get("action_log_prob"), ref)


@pytest.mark.parametrize("centralized", [True, False], ids=["MAPPO", "IPPO"])
def test_clip_ppo_on_the_root_rollout_equals_the_agents_view(centralized):
    torch.manual_seed(0)
    actor, critic = make_actor(), make_critic(centralized)
    td = rollout()
    view = collect(make_actor(prefix=()), td)  # per-agent actions and log-probs, written back into the group
    td.set(("agents", "action"), view.get("action"))
    td.set(("agents", "action_log_prob"), view.get("action_log_prob"))
    td.set(("next", "agents", "reward"), view.get(("next", "reward")))
    loss = ClipPPOLoss(actor, critic, entropy_coeff=0.0)
    loss.set_keys(
        action=("agents", "action"),
        sample_log_prob=("agents", "action_log_prob"),
        value=("agents", "state_value"),
        advantage=("agents", "advantage"),
        value_target=("agents", "value_target"),
        reward=("agents", "reward"),
    )
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.9, lmbda=0.9)  # time: the root's last batch dim
    out = loss(td)
    (out["loss_objective"] + out["loss_critic"]).backward()
    assert all(p.grad is not None for p in actor.parameters())

    # the same networks on the agents' view give the same losses
    flat_actor = ProbabilisticTensorDictSequential(
        TensorDictModule(actor[0].module, in_keys=["observation"], out_keys=["loc", "scale"]),
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=torch.distributions.Normal,
            return_log_prob=True,
        ),
    )
    flat_critic = TensorDictModule(critic.module, in_keys=["observation"], out_keys=["state_value"])
    ref = make_loss(flat_actor, flat_critic)(view.clone())
    torch.testing.assert_close(out["loss_objective"], ref["loss_objective"])
    torch.testing.assert_close(out["loss_critic"], ref["loss_critic"])
