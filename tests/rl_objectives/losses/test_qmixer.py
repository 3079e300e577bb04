"""QMixerLoss against a hand-written QMIX/VDN loss: targets, target networks, gradients, keys, errors,
compile, and a 2-agent matrix game."""

import copy

import pytest
import torch
from rl_objectives.losses.qmixer import QMixerLoss
from rl_objectives.losses.target_updaters import SoftUpdate
from rl_objectives.modules import QValueModule
from rl_objectives.modules.multiagent import MultiAgentMLP, QMixer, VDNMixer
from rl_objectives.value import ValueEstimators
from tdict import TensorDict
from tdict.nn import TensorDictModule, TensorDictSequential
from torch import nn

N_AGENTS, N_OBS, N_ACT, S = 2, 3, 4, 5
GAMMA = 0.99


@pytest.fixture
def one_thread():
    """Tiny tensors: one intra-op thread avoids contention with other processes on a small machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def local_net(seed=0, with_qvalue_module=True):
    torch.manual_seed(seed)
    mlp = TensorDictModule(
        MultiAgentMLP(N_OBS, N_ACT, N_AGENTS, share_params=False, depth=1, num_cells=8),
        in_keys=[("agents", "observation")],
        out_keys=[("agents", "action_value")],
    )
    if not with_qvalue_module:
        return mlp
    return TensorDictSequential(
        mlp,
        QValueModule(
            action_space="categorical",
            action_value_key=("agents", "action_value"),
            out_keys=[("agents", "action"), ("agents", "action_value"), ("agents", "chosen_action_value")],
        ),
    )


def qmixer(seed=1):
    torch.manual_seed(seed)
    return QMixer(state_shape=(S,), mixing_embed_dim=6, n_agents=N_AGENTS)


def batch(shape=(7,), space="categorical", seed=2):
    g = torch.Generator().manual_seed(seed)
    agents = lambda: TensorDict(
        observation=torch.randn(*shape, N_AGENTS, N_OBS, generator=g), batch_size=[*shape, N_AGENTS]
    )
    idx = torch.randint(N_ACT, (*shape, N_AGENTS), generator=g)
    terminated = torch.rand(shape, generator=g) < 0.3
    td = TensorDict(
        {
            "agents": agents(),
            "state": torch.randn(*shape, S, generator=g),
            "next": {
                "agents": agents(),
                "state": torch.randn(*shape, S, generator=g),
                "reward": torch.randn(shape, generator=g),
                "done": terminated.clone(),
                "terminated": terminated,
            },
        },
        batch_size=shape,
    )
    td.set(("agents", "action"), idx if space == "categorical" else nn.functional.one_hot(idx, N_ACT))
    return td, idx


def q_values(net, obs):
    """The agents' action values [*B, n_agents, n_actions] from the MultiAgentMLP inside ``net``."""
    mlp = net[0].module if isinstance(net, TensorDictSequential) else net.module
    return mlp(obs)


def reference(loss_fn, local, mixer, target_local, target_mixer, td, idx, gamma=GAMMA):
    """Q_tot(s, a) and r + gamma (1 - terminated) Q_tot'(s', greedy'), by hand."""
    with torch.no_grad():
        q_next = q_values(target_local, td["next", "agents", "observation"]).max(-1).values
        next_tot = target_mixer.mix(q_next, td["next", "state"])
        target = td["next", "reward"] + gamma * (~td["next", "terminated"]).float() * next_tot
    chosen = q_values(local, td["agents", "observation"]).gather(-1, idx.unsqueeze(-1)).squeeze(-1)
    pred = mixer.mix(chosen, td["state"])
    return pred, target


@pytest.mark.parametrize("shape", [(7,), (2, 3)], ids=str)
@pytest.mark.parametrize("space", ["categorical", "one_hot"])
@pytest.mark.parametrize("loss_function", ["l2", "smooth_l1"])
def test_loss_matches_reference(shape, space, loss_function):
    local, mixer = local_net(), qmixer()
    loss = QMixerLoss(local, mixer, loss_function=loss_function, action_space=space)
    td, idx = batch(shape, space)
    out = loss(td)
    pred, target = reference(loss_function, local, mixer, local, mixer, td, idx)
    dist = (
        (pred - target).pow(2)
        if loss_function == "l2"
        else nn.functional.smooth_l1_loss(pred, target, reduction="none")
    )
    torch.testing.assert_close(out["loss"], dist.mean())
    torch.testing.assert_close(td["td_error"], (pred - target).detach().pow(2))
    assert td["td_error"].shape == shape


def test_vdn_and_a_local_network_without_qvalue_module():
    local = local_net(with_qvalue_module=False)
    loss = QMixerLoss(local, VDNMixer(N_AGENTS))
    td, idx = batch()
    out = loss(td)
    q = q_values(local, td["agents", "observation"])
    with torch.no_grad():
        next_tot = q_values(local, td["next", "agents", "observation"]).max(-1).values.sum(-1)
    target = td["next", "reward"] + GAMMA * (~td["next", "terminated"]).float() * next_tot
    pred = q.gather(-1, idx.unsqueeze(-1)).squeeze(-1).sum(-1)
    torch.testing.assert_close(out["loss"], (pred - target).pow(2).mean())


def test_target_networks_bootstrap_and_never_get_gradients():
    local, mixer = local_net(), qmixer()
    target_local, target_mixer = copy.deepcopy(local), copy.deepcopy(mixer)
    loss = QMixerLoss(local, mixer)
    with torch.no_grad():  # move the online networks away from their targets
        for p in loss.parameters():
            p.add_(0.3 * torch.randn_like(p))
    td, idx = batch()
    out = loss(td)
    pred, target = reference("l2", local, mixer, target_local, target_mixer, td, idx)
    torch.testing.assert_close(out["loss"], (pred - target).pow(2).mean())
    out["loss"].backward()
    for name in ("local_value_network", "mixer_network"):
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in loss.params_of(name).values(True, True))
        assert all(not t.requires_grad for t in loss.params_of(name, target=True).values(True, True))
    assert sorted(loss.target_networks) == ["local_value_network", "mixer_network"]
    n_trained = sum(p.numel() for p in loss.parameters())
    assert n_trained == sum(p.numel() for p in local.parameters()) + sum(p.numel() for p in mixer.parameters())


def test_soft_update_moves_both_targets():
    loss = QMixerLoss(local_net(), qmixer())
    updater = SoftUpdate(loss, tau=0.5)  # copies the online parameters into the targets
    with torch.no_grad():
        for p in loss.parameters():
            p.add_(1.0)
    updater.step()
    for name in ("local_value_network", "mixer_network"):
        online, tgt = loss.params_of(name), loss.params_of(name, target=True)
        for key in online.keys(True, True):
            torch.testing.assert_close(tgt[key], online[key].detach() - 0.5)


def test_without_delay_value_bootstraps_from_the_online_networks():
    local, mixer = local_net(), qmixer()
    loss = QMixerLoss(local, mixer, delay_value=False)
    assert loss.target_networks == []
    td, idx = batch()
    out = loss(td)
    pred, target = reference("l2", local, mixer, local, mixer, td, idx)
    torch.testing.assert_close(out["loss"], (pred - target).pow(2).mean())


@pytest.mark.parametrize("reduction", ["sum", "none"])
def test_reduction(reduction):
    local, mixer = local_net(), qmixer()
    td, idx = batch((2, 3))
    out = QMixerLoss(local, mixer, reduction=reduction)(td)
    pred, target = reference("l2", local, mixer, local, mixer, td, idx)
    ref = (pred - target).pow(2)
    torch.testing.assert_close(out["loss"], ref.sum() if reduction == "sum" else ref)


def test_td_lambda_estimator_and_gamma():
    local, mixer = local_net(), qmixer()
    loss = QMixerLoss(local, mixer).make_value_estimator(ValueEstimators.TD0, gamma=0.5)
    td, idx = batch()
    pred, target = reference("l2", local, mixer, local, mixer, td, idx, gamma=0.5)
    torch.testing.assert_close(loss(td)["loss"], (pred - target).pow(2).mean())
    with pytest.raises(NotImplementedError, match="GAE"):
        loss.make_value_estimator(ValueEstimators.GAE)


def test_set_keys_reads_renamed_entries():
    torch.manual_seed(0)
    local = TensorDictModule(
        MultiAgentMLP(N_OBS, N_ACT, N_AGENTS, share_params=True, depth=1, num_cells=8),
        in_keys=[("team", "obs")],
        out_keys=[("team", "qs")],
    )
    mixer = QMixer(
        state_shape=(S,), mixing_embed_dim=4, n_agents=N_AGENTS, in_keys=[("team", "q"), "global"], out_keys=["q_tot"]
    )
    loss = QMixerLoss(local, mixer).set_keys(
        action=("team", "act"),
        action_value=("team", "qs"),
        local_value=("team", "q"),
        global_value="q_tot",
        reward="r",
        done="d",
        terminated="term",
        priority="prio",
    )
    td, idx = batch()
    renamed = TensorDict(
        {
            "team": TensorDict(obs=td["agents", "observation"], act=idx, batch_size=[7, N_AGENTS]),
            "global": td["state"],
            "next": {
                "team": TensorDict(obs=td["next", "agents", "observation"], batch_size=[7, N_AGENTS]),
                "global": td["next", "state"],
                "r": td["next", "reward"],
                "d": td["next", "done"],
                "term": td["next", "terminated"],
            },
        },
        batch_size=[7],
    )
    out = loss(renamed)
    with torch.no_grad():
        nxt = mixer.mix(local.module(td["next", "agents", "observation"]).max(-1).values, td["next", "state"])
    target = td["next", "reward"] + GAMMA * (~td["next", "terminated"]).float() * nxt
    pred = mixer.mix(local.module(td["agents", "observation"]).gather(-1, idx.unsqueeze(-1)).squeeze(-1), td["state"])
    torch.testing.assert_close(out["loss"], (pred - target).pow(2).mean())
    assert "prio" in renamed and set(renamed.keys(True, True)) >= {("team", "act")}
    assert ("team", "q") not in renamed.keys(True, True)  # the caller's entries are untouched


def test_caller_entries_untouched_except_td_error():
    td, _ = batch()
    before = td.clone()
    QMixerLoss(local_net(), qmixer())(td)
    assert sorted(map(str, td.keys(True, True))) == sorted(map(str, list(before.keys(True, True)) + ["td_error"]))
    for key in before.keys(True, True):
        assert torch.equal(td[key], before[key])


def test_errors():
    with pytest.raises(ValueError, match="loss_function"):
        QMixerLoss(local_net(), qmixer(), loss_function="l3")
    with pytest.raises(ValueError, match="action_space"):
        QMixerLoss(local_net(), qmixer(), action_space="binary")
    with pytest.raises(TypeError, match="mixer_network must be a TensorDict module"):
        QMixerLoss(local_net(), nn.Linear(2, 1))
    loss = QMixerLoss(local_net(with_qvalue_module=False), qmixer())
    td, _ = batch()
    td.set(("agents", "action"), torch.zeros(7, N_AGENTS, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"expected \(7, 2\) \(indices\) or \(7, 2, 4\)"):
        loss(td)
    td, _ = batch()
    del td["next", "reward"]
    with pytest.raises(KeyError, match="reward"):
        loss(td)
    td, _ = batch()
    td.set(("agents", "action"), td["agents", "action"].float())
    with pytest.raises(ValueError, match="integer indices"):
        QMixerLoss(local_net(), qmixer(), action_space="categorical")(td)


def test_compiled_forward_matches_eager():
    torch.compiler.reset()
    loss = QMixerLoss(local_net(), qmixer())
    td, _ = batch()
    eager = loss(td.clone())["loss"]
    compiled = torch.compile(loss, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(td.clone())["loss"], eager)
    torch.compiler.reset()


def test_qmix_learns_a_two_agent_matrix_game(one_thread):
    """One-step cooperative game, team reward R[a1, a2]: the best joint action is (2, 2)."""
    payoff = torch.tensor([[0.0, 1.0, 2.0], [1.0, 2.0, 3.0], [2.0, 3.0, 6.0]])
    n_act = 3
    torch.manual_seed(0)
    local = TensorDictSequential(
        TensorDictModule(
            MultiAgentMLP(1, n_act, 2, share_params=False, depth=1, num_cells=16),
            in_keys=[("agents", "observation")],
            out_keys=[("agents", "action_value")],
        ),
        QValueModule(
            action_space="categorical",
            action_value_key=("agents", "action_value"),
            out_keys=[("agents", "action"), ("agents", "action_value"), ("agents", "chosen_action_value")],
        ),
    )
    loss = QMixerLoss(local, QMixer(state_shape=(1,), mixing_embed_dim=8, n_agents=2), delay_value=False)
    opt = torch.optim.Adam(loss.parameters(), lr=3e-2)
    a = torch.cartesian_prod(torch.arange(n_act), torch.arange(n_act))  # every joint action once
    n = a.shape[0]
    ones = lambda: TensorDict(observation=torch.ones(n, 2, 1), batch_size=[n, 2])
    td = TensorDict(
        {
            "agents": ones(),
            "state": torch.ones(n, 1),
            "next": {
                "agents": ones(),
                "state": torch.ones(n, 1),
                "reward": payoff[a[:, 0], a[:, 1]],
                "done": torch.ones(n, dtype=torch.bool),
                "terminated": torch.ones(n, dtype=torch.bool),
            },
        },
        batch_size=[n],
    )
    td.set(("agents", "action"), a)
    first = None
    for _ in range(80):
        out = loss(td)
        first = out["loss"].item() if first is None else first
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    assert out["loss"].item() < 0.1 * first
    greedy = local(
        TensorDict({"agents": TensorDict(observation=torch.ones(1, 2, 1), batch_size=[1, 2])}, batch_size=[1])
    )
    assert greedy["agents", "action"].tolist() == [[2, 2]]


def test_qmixer_without_a_state_is_refused():
    mixer = QMixer(state_shape=(3,), mixing_embed_dim=6, n_agents=N_AGENTS)
    with pytest.raises(ValueError, match="QMIX conditions on the global state; got state=None"):
        mixer.mix(torch.zeros(4, N_AGENTS), None)
