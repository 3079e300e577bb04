"""CrossQLoss against a hand-written reference with batch-renormalised critics.

The critics' joint train-mode pass over ``[(s, a); (s', a')]`` (one set of batch statistics), the
target from its second half with no target networks, the actor against the critics in evaluation
mode (running statistics updated once, by the joint pass), SAC's temperature; gradients, modes,
the vmapped ensemble, compile, errors. Networks and batches: conftest.py fixtures.
"""

import functools
import math

import pytest
import torch
from rl_objectives import CrossQLoss
from rl_objectives.modules import BatchRenorm1d
from tdict import TensorDict
from tdict.nn import TensorDictModule
from torch import nn

N_OBS, N_ACT, B = 3, 2, 6  # conftest's default sizes
F = N_OBS + N_ACT
EPS = 1e-5


class NormCritic(nn.Module):
    """``Q(s, a) = Linear(BatchRenorm1d([s, a]))`` (warm-up long enough to stay plain batch norm)."""

    def __init__(self):
        super().__init__()
        self.norm = BatchRenorm1d(F, momentum=0.1, warmup_steps=1000)
        self.lin = nn.Linear(F, 1)

    def forward(self, observation, action):
        return self.lin(self.norm(torch.cat([observation, action], -1))).squeeze(-1)


@pytest.fixture
def networks(normal_actor):
    """``(seed=0) -> (actor, critic)``: a Normal policy on ``"observation"`` and :class:`NormCritic`."""

    def build(seed=0):
        actor, _ = normal_actor(N_OBS, N_ACT, seed=seed, obs_key="observation")
        critic = TensorDictModule(NormCritic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
        return actor, critic

    return build


@pytest.fixture
def batch(transition_batch):
    return functools.partial(transition_batch, action="normal")


def same(a, b):
    """Every leaf of two TensorDicts equal."""
    return all(torch.equal(a.get(k), b.get(k)) for k in a.keys(True, True))


def q_of(p, x, mean, var):
    """The critics of stacked parameters ``p`` on ``x`` ``[n, F]`` normalised with ``mean`` / ``var``: ``[N, n]``."""
    y = (x - mean) / (var + EPS).sqrt()
    y = y * p["module", "norm", "weight"].unsqueeze(1) + p["module", "norm", "bias"].unsqueeze(1)  # [N, n, F]
    return (y @ p["module", "lin", "weight"].transpose(-1, -2)).squeeze(-1) + p["module", "lin", "bias"]


@pytest.mark.parametrize("alpha_init", [1.0, 0.3])
def test_losses_match_reference(alpha_init, networks, batch, normal_dist):
    actor, critic = networks()
    lin = actor[0].module[0]
    loss = CrossQLoss(actor, critic, alpha_init=alpha_init, loss_function="l2", target_entropy=-1.5)
    loss.make_value_estimator(gamma=0.9)
    with torch.no_grad():  # the parameters only: the running statistics stay at 0 / 1
        for p in loss.qvalue_network_params.parameters():
            p.add_(0.3 * torch.randn_like(p))
    td = batch()
    q_p = loss.params_of("qvalue_network").detach().clone()
    with torch.no_grad():
        dist_next, dist = normal_dist(lin, td["next", "observation"]), normal_dist(lin, td["observation"])
    torch.manual_seed(7)
    a_next, a = dist_next.rsample(), dist.rsample()  # in this order: critic loss, then actor loss
    logp_next, logp = dist_next.log_prob(a_next).sum(-1), dist.log_prob(a).sum(-1)

    # the joint pass: one set of batch statistics over the current and next halves
    joint = torch.cat(
        [torch.cat([td["observation"], td["action"]], -1), torch.cat([td["next", "observation"], a_next], -1)]
    )
    q_joint = q_of(q_p, joint, joint.mean(0), joint.var(0, unbiased=False))
    pred, next_q = q_joint[:, :B], q_joint[:, B:]
    y = td["next", "reward"] + 0.9 * (~td["next", "terminated"]).float() * (
        next_q.min(0).values - alpha_init * logp_next
    )
    running_mean, running_var = 0.1 * joint.mean(0), 0.9 + 0.1 * joint.var(0, unbiased=True)
    # the actor: critics in evaluation mode, i.e. on the running statistics the joint pass just updated
    q_actor = q_of(q_p, torch.cat([td["observation"], a], -1), running_mean, running_var).min(0).values

    torch.manual_seed(7)
    out = loss(td)
    assert sorted(out.keys()) == ["alpha", "entropy", "log_prob", "loss_actor", "loss_alpha", "loss_qvalue", "td_error"]
    torch.testing.assert_close(out["loss_qvalue"], (pred - y).pow(2).sum(0).mean())
    torch.testing.assert_close(out["loss_actor"], (alpha_init * logp - q_actor).mean())
    torch.testing.assert_close(out["loss_alpha"], (-math.log(alpha_init) * (logp - 1.5)).mean())
    torch.testing.assert_close(out["td_error"], (pred - y).abs().max(0).values)
    torch.testing.assert_close(td["td_error"], out["td_error"])
    torch.testing.assert_close(out["log_prob"], logp)
    torch.testing.assert_close(out["entropy"], -logp.mean())
    torch.testing.assert_close(out["alpha"], torch.tensor(alpha_init))
    stats = loss.params_of("qvalue_network")
    for i in range(2):  # each critic keeps its own statistics; both saw the same joint batch
        torch.testing.assert_close(stats["module", "norm", "running_mean"][i], running_mean)
        torch.testing.assert_close(stats["module", "norm", "running_var"][i], running_var)
    assert stats["module", "norm", "num_batches_tracked"].tolist() == [1, 1]


def test_no_target_networks_and_gradient_routing(networks, batch):
    loss = CrossQLoss(*networks())
    assert loss.target_networks == []
    assert not [n for n, _ in loss.named_buffers() if n.startswith("target_")]
    out = loss(batch())
    groups = {
        "actor": list(loss.params_of("actor_network").values(True, True)),
        "critics": list(loss.params_of("qvalue_network").values(True, True)),
        "alpha": [loss.log_alpha],
    }
    trains = {"loss_actor": "actor", "loss_qvalue": "critics", "loss_alpha": "alpha"}
    for term, owner in trains.items():
        for name, params in groups.items():
            trainable = [p for p in params if p.requires_grad]
            grads = torch.autograd.grad(out[term], trainable, allow_unused=True, retain_graph=True)
            if name == owner:
                assert all(g is not None and g.abs().sum() > 0 for g in grads), (term, name)
            else:
                assert all(g is None for g in grads), (term, name)
    # the running statistics are buffers, never trained
    assert not any("running" in n for n, _ in loss.named_parameters())


def test_modes(networks, batch):
    loss = CrossQLoss(*networks())
    critic = loss.qvalue_network
    assert all(m.training for m in critic.modules())
    loss(batch())
    assert all(m.training for m in critic.modules())  # flags put back after the actor's eval pass
    stats = loss.params_of("qvalue_network")
    before = stats.clone()
    loss.eval()  # evaluation: the critic loss runs on the running statistics, nothing is updated
    loss(batch(seed=3))
    assert same(loss.params_of("qvalue_network"), before)
    loss.train()
    loss(batch(seed=3))
    assert stats["module", "norm", "num_batches_tracked"].tolist() == [2, 2]


def test_vmapped_ensemble_matches_the_loop(networks, batch):
    outs, stats = [], []
    for deactivate_vmap in (False, True):  # 5 critics: above the loop threshold, so torch.vmap runs
        torch.manual_seed(0)
        loss = CrossQLoss(*networks(), num_qvalue_nets=5, deactivate_vmap=deactivate_vmap)
        torch.manual_seed(1)
        outs.append(loss(batch()))
        stats.append(loss.params_of("qvalue_network").select(("module", "norm")).clone())
    for key in ("loss_actor", "loss_qvalue", "loss_alpha", "td_error"):
        torch.testing.assert_close(outs[0][key], outs[1][key])
    assert same(stats[0], stats[1])


def test_reduction_none_and_two_batch_dims(networks, batch):
    loss = CrossQLoss(*networks(), reduction="none", scalar_output_mode="exclude")
    out = loss(batch())
    assert out.batch_size == (B,) and out["loss_qvalue"].shape == (B,) and "alpha" not in out.keys()
    loss = CrossQLoss(*networks())
    td = batch(n=6).reshape(2, 3)
    assert loss(td)["loss_qvalue"].shape == () and td["td_error"].shape == (2, 3)


def test_compiled_forward_matches_eager(networks, batch, assert_compiled_matches_eager):
    losses = []
    for _ in range(2):  # the forward updates running statistics: each side gets its own copy
        torch.manual_seed(0)
        losses.append(CrossQLoss(*networks()).make_value_estimator())  # built outside the compiled call
    assert_compiled_matches_eager(losses[0], batch(), compiled_loss=losses[1], seed=4)
    stats = [loss.params_of("qvalue_network").select(("module", "norm")) for loss in losses]
    torch.testing.assert_close(stats[0]["module", "norm", "running_var"], stats[1]["module", "norm", "running_var"])


def test_errors(networks, batch):
    actor, critic = networks()
    with pytest.raises(TypeError, match="get_dist"):
        CrossQLoss(critic, critic)
    with pytest.raises(TypeError, match="must declare its in_keys"):
        CrossQLoss(actor, NormCritic())
    with pytest.raises(ValueError, match="num_qvalue_nets"):
        CrossQLoss(actor, critic, num_qvalue_nets=0)
    with pytest.raises(ValueError, match="loss_function"):
        CrossQLoss(actor, critic, loss_function="huber")
    with pytest.raises(ValueError, match="min_alpha"):
        CrossQLoss(actor, critic, min_alpha=2.0, max_alpha=1.0)
    loss = CrossQLoss(*networks())
    with pytest.raises(ValueError, match="needs a batch dim"):
        loss(batch()[0])
    td = batch()
    del td["next", "observation"]
    with pytest.raises(KeyError, match="'observation' is missing"):  # the actor's own message on s'
        loss(td)
    with pytest.raises(KeyError, match="CrossQLoss: the input misses"):
        loss(TensorDict(observation=torch.zeros(B, N_OBS), batch_size=[B]))
    with pytest.warns(DeprecationWarning, match="priority_key"):
        renamed = CrossQLoss(*networks(), priority_key="prio")
    td = batch()
    renamed(td)
    assert "prio" in td.keys()
