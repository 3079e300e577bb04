"""C51: the categorical projection against a loop-based reference, DistributionalDQNLoss against a
hand-written cross-entropy, DistributionalQValueActor's greedy action, priorities, compile.

Replay batches: conftest.py fixtures.
"""

import math

import pytest
import torch
from rl_objectives import DistributionalDQNLoss, SoftUpdate
from rl_objectives.functional import categorical_projection, distributional_cross_entropy
from rl_objectives.modules import (
    DistributionalDQNnet,
    DistributionalQValueActor,
    DistributionalQValueModule,
    NoisyLinear,
    QValueActor,
    reset_noise,
)
from rl_objectives.value import ValueEstimators
from tdict import TensorDict
from tdict.nn import InteractionType, TensorDictModule, TensorDictSequential, set_interaction_type
from tdict.specs import Categorical, OneHot
from torch import nn

N_OBS, N_ACT, ATOMS, B = 3, 4, 5, 7
SUPPORT = torch.linspace(-2.0, 2.0, ATOMS)  # spacing 1


# ------------------------------------------------------------------------------- references
def reference_projection(probs, reward, discount, support):
    """Bellemare et al.'s algorithm 1, one atom at a time (l == u: all the mass on that point)."""
    atoms = support.numel()
    v_min, v_max = float(support[0]), float(support[-1])
    dz = (v_max - v_min) / (atoms - 1)
    out = torch.zeros(probs.shape, dtype=torch.float64)
    for i in range(probs.shape[0]):
        for j in range(atoms):
            tz = min(max(float(reward[i]) + float(discount[i]) * float(support[j]), v_min), v_max)
            b = (tz - v_min) / dz
            lo, up = math.floor(b), math.ceil(b)
            p = float(probs[i, j])
            if lo == up:
                out[i, lo] += p
            else:
                out[i, lo] += p * (up - b)
                out[i, up] += p * (b - lo)
    return out.to(probs.dtype)


def linear_log_probs(params, obs):
    """[*B, atoms, n] log-probs of the test network (a Linear reshaped to (atoms, n), log-softmax over atoms)."""
    w, b = params["module", "0", "module", "0", "weight"], params["module", "0", "module", "0", "bias"]
    return (obs @ w.T + b).unflatten(-1, (ATOMS, N_ACT)).log_softmax(-2)


def c51_actor(space="categorical", seed=0):
    torch.manual_seed(seed)
    spec = Categorical(N_ACT) if space == "categorical" else OneHot(N_ACT)
    net = nn.Sequential(nn.Linear(N_OBS, ATOMS * N_ACT), nn.Unflatten(-1, (ATOMS, N_ACT)))
    return DistributionalQValueActor(net, support=SUPPORT.clone(), spec=spec)


def make_loss(space="categorical", seed=0, perturb=True, **kwargs):
    """The loss with a target updater (targets are read), online weights moved off the targets (not the support)."""
    kwargs.setdefault("gamma", 0.9)
    loss = DistributionalDQNLoss(c51_actor(space, seed), **kwargs)
    if loss.delay_value:
        SoftUpdate(loss, tau=0.1)
    if perturb:
        with torch.no_grad():
            for p in loss.value_network.parameters():
                p.add_(0.3 * torch.randn_like(p))
    return loss


@pytest.fixture
def batch(transition_batch):
    """``(space="categorical", n=B, seed=1) -> (td, index)``; rewards scaled to reach past the support."""

    def build(space="categorical", n=B, seed=1):
        td = transition_batch(n=n, seed=seed, action="index", n_obs=N_OBS, n_act=N_ACT)
        td["next", "reward"] = td["next", "reward"] * 2
        idx = td["action"]
        if space != "categorical":
            td["action"] = nn.functional.one_hot(idx, N_ACT)
        return td, idx

    return build


def reference_loss(loss, td, idx, gamma, delay_value=True):
    """Per-sample cross-entropy, written from the parameters (and the target held constant)."""
    online = loss.params_of("value_network")
    target = loss.params_of("value_network", target=True) if delay_value else online.detach()
    log_p = linear_log_probs(online, td["observation"])
    log_p_taken = log_p[torch.arange(B), :, idx]
    with torch.no_grad():
        next_online = linear_log_probs(online, td["next", "observation"]).exp()
        a_next = (next_online * SUPPORT[:, None]).sum(-2).argmax(-1)
        next_p = linear_log_probs(target, td["next", "observation"]).exp()[torch.arange(B), :, a_next]
        discount = gamma * (~td["next", "terminated"]).float()
        m = reference_projection(next_p, td["next", "reward"], discount, SUPPORT)
    return -(m * log_p_taken).sum(-1)


# ------------------------------------------------------------------------------ projection
def test_projection_hand_checked():
    support = torch.tensor([-1.0, 0.0, 1.0])
    p = torch.tensor([[0.0, 1.0, 0.0]])
    torch.testing.assert_close(
        categorical_projection(p, torch.tensor([0.25]), 0.9, support), torch.tensor([[0.0, 0.75, 0.25]])
    )
    torch.testing.assert_close(
        categorical_projection(p, torch.tensor([5.0]), 0.9, support), torch.tensor([[0.0, 0.0, 1.0]])
    )
    torch.testing.assert_close(
        categorical_projection(p, torch.tensor([-5.0]), 0.9, support), torch.tensor([[1.0, 0.0, 0.0]])
    )


@pytest.mark.parametrize(
    "reward, discount",
    [
        ([0.0, 1.0, -1.0, 2.0, -2.0], [1.0] * 5),  # every target atom on a support point (some clamped)
        ([0.0, 1.0, -1.0, 0.5, -0.5], [0.5] * 5),  # half of them on support points
        ([10.0, -10.0, 3.0, -3.0, 2.5], [0.9] * 5),  # far outside the range: clamped to the ends
        ([0.3, -1.7, 1.2, 2.0, -2.0], [0.0] * 5),  # terminal: all the mass around the reward
        ([0.3, -1.7, 1.2, 0.0, 5.0], [0.99, 0.0, 0.5, 0.0, 1.0]),  # mixed
    ],
)
def test_projection_matches_loop_reference(reward, discount):
    g = torch.Generator().manual_seed(0)
    probs = torch.rand(5, ATOMS, generator=g).softmax(-1)
    reward, discount = torch.tensor(reward), torch.tensor(discount)
    out = categorical_projection(probs, reward, discount, SUPPORT)
    torch.testing.assert_close(out, reference_projection(probs, reward, discount, SUPPORT))
    torch.testing.assert_close(out.sum(-1), torch.ones(5))  # no mass lost


def test_projection_random_against_reference():
    g = torch.Generator().manual_seed(3)
    support = torch.linspace(-10.0, 10.0, 51)
    probs = torch.rand(64, 51, generator=g).softmax(-1)
    reward = torch.randn(64, generator=g) * 6
    discount = torch.rand(64, generator=g) * (torch.rand(64, generator=g) > 0.2)
    out = categorical_projection(probs, reward, discount, support)
    torch.testing.assert_close(out, reference_projection(probs, reward, discount, support))
    # several batch dims
    out2 = categorical_projection(probs.view(8, 8, 51), reward.view(8, 8), discount.view(8, 8), support)
    torch.testing.assert_close(out2.view(64, 51), out)


def test_projection_compiled_matches_eager():
    g = torch.Generator().manual_seed(1)
    probs = torch.rand(6, ATOMS, generator=g).softmax(-1)
    log_q = torch.randn(6, ATOMS, generator=g).log_softmax(-1)
    reward = torch.tensor([0.0, 1.0, 9.0, -9.0, 0.3, -0.7])
    discount = torch.tensor([1.0, 0.5, 0.9, 0.9, 0.0, 0.99])

    def math_of_the_loss(probs, reward, discount, support, log_q):
        return distributional_cross_entropy(categorical_projection(probs, reward, discount, support), log_q)

    torch.compiler.reset()
    try:
        compiled = torch.compile(math_of_the_loss, fullgraph=True, backend="eager")
        torch.testing.assert_close(
            compiled(probs, reward, discount, SUPPORT, log_q), math_of_the_loss(probs, reward, discount, SUPPORT, log_q)
        )
    finally:
        torch.compiler.reset()


# ------------------------------------------------------------------------------------ actor
@pytest.mark.parametrize("space", ["categorical", "one_hot"])
def test_actor_action_is_argmax_of_expected_return(space):
    actor = c51_actor(space)
    td = actor(TensorDict(observation=torch.randn(9, N_OBS), batch_size=[9]))
    p = td["action_value"].exp()
    assert td["action_value"].shape == (9, ATOMS, N_ACT)
    torch.testing.assert_close(p.sum(-2), torch.ones(9, N_ACT))  # log-softmax over the atoms
    greedy = (p * SUPPORT[:, None]).sum(-2).argmax(-1)
    action = td["action"] if space == "categorical" else td["action"].long().argmax(-1)
    assert torch.equal(action, greedy)
    assert "chosen_action_value" not in td.keys()  # TorchRL's two out-keys
    assert isinstance(actor, QValueActor) and actor.action_space == space
    assert torch.equal(actor.support, SUPPORT)


def test_actor_handles_the_atoms_dim_not_the_probability_argmax():
    # action 0 is most likely to give 0 (the mode), action 1 has the higher mean: C51 picks action 1
    support = torch.tensor([0.0, 1.0, 10.0])
    probs = torch.tensor([[0.1, 0.5], [0.9, 0.0], [0.0, 0.5]])
    module = DistributionalQValueModule("categorical", support=support)
    action, values = module(probs.clamp_min(1e-12).log())
    assert int(action) == 1


def test_actor_mask_and_errors():
    module = DistributionalQValueModule("categorical", support=SUPPORT, action_mask_key="mask")
    log_p = torch.randn(6, ATOMS, N_ACT).log_softmax(-2)
    best = (log_p.exp() * SUPPORT[:, None]).sum(-2).argmax(-1)
    mask = torch.ones(6, N_ACT, dtype=torch.bool)
    mask[torch.arange(6), best] = False
    td = module(TensorDict(action_value=log_p, mask=mask, batch_size=[6]))
    assert not bool((td["action"] == best).any())
    with pytest.raises(ValueError, match="log-probabilities"):
        DistributionalQValueModule("categorical", support=SUPPORT)(torch.ones(ATOMS, N_ACT))
    with pytest.raises(ValueError, match="atoms=5"):
        DistributionalQValueModule("categorical", support=SUPPORT)(torch.zeros(3, N_ACT))
    with pytest.raises(ValueError, match="support"):
        DistributionalQValueModule("categorical", support=torch.zeros(1))


def test_actor_on_a_tensordict_module_without_extra_log_softmax():
    net = TensorDictSequential(
        TensorDictModule(
            nn.Sequential(nn.Linear(N_OBS, ATOMS * N_ACT), nn.Unflatten(-1, (ATOMS, N_ACT))),
            in_keys=["observation"],
            out_keys=["action_value"],
        ),
        DistributionalDQNnet(),
    )
    actor = DistributionalQValueActor(net, support=SUPPORT, action_space="one_hot", make_log_softmax=False)
    assert sum(isinstance(m, DistributionalDQNnet) for m in actor.modules()) == 1
    td = actor(TensorDict(observation=torch.randn(3, N_OBS), batch_size=[3]))
    torch.testing.assert_close(td["action_value"].exp().sum(-2), torch.ones(3, N_ACT))


# ------------------------------------------------------------------------------------- loss
@pytest.mark.parametrize("space", ["categorical", "one_hot"])
@pytest.mark.parametrize("delay_value", [True, False])
def test_loss_is_cross_entropy_against_projected_target(space, delay_value, batch):
    loss = make_loss(space, delay_value=delay_value)
    td, idx = batch(space)
    assert td["next", "terminated"].any() and not td["next", "terminated"].all()
    expected = reference_loss(loss, td, idx, 0.9, delay_value)
    out = loss(td)
    torch.testing.assert_close(out["loss"], expected.mean())
    torch.testing.assert_close(td["td_error"], expected.detach())


@pytest.mark.parametrize("delay_value", [True, False])
def test_gradients_reach_only_the_online_network(delay_value, batch, has_grads):
    loss = make_loss(delay_value=delay_value)
    td, idx = batch()
    loss(td.clone())["loss"].backward()
    grads = [p.grad.clone() for p in loss.value_network.parameters()]
    assert all(has_grads(loss.value_network))
    if delay_value:
        assert all(
            not t.requires_grad and t.grad is None
            for t in loss.params_of("value_network", target=True).values(True, True)
        )
    # the same gradient as the cross-entropy whose target is a constant: nothing flows through s'
    loss.zero_grad()
    reference_loss(loss, td, idx, 0.9, delay_value).mean().backward()
    for g, p in zip(grads, loss.value_network.parameters()):
        torch.testing.assert_close(g, p.grad)


def test_priority_weights_and_reductions(batch):
    loss = make_loss(reduction="none")
    td, idx = batch()
    per_sample = loss(td.clone())["loss"]
    assert per_sample.shape == (B,)
    w = torch.rand(B) + 0.1
    td["priority_weight"] = w
    torch.testing.assert_close(loss(td.clone())["loss"], w * per_sample)
    loss.reduction = "mean"
    torch.testing.assert_close(loss(td.clone())["loss"], (w * per_sample).sum() / w.sum())
    loss.reduction = "sum"
    torch.testing.assert_close(loss(td.clone())["loss"], (w * per_sample).sum())
    unweighted = make_loss(perturb=False, use_prioritized_weights=False)
    unweighted.value_network_params.update_(loss.value_network_params.detach())
    unweighted.target_value_network_params.update_(loss.target_value_network_params)
    torch.testing.assert_close(unweighted(td.clone())["loss"], per_sample.mean())


def test_writes_only_td_error_with_custom_keys(batch, assert_writes_only_td_error):
    loss = make_loss()
    td, _ = batch()
    assert_writes_only_td_error(loss, td)
    loss.set_keys(priority="prio")
    loss(td)
    torch.testing.assert_close(td["prio"], td["td_error"])


def test_discount_steps_and_schedule(batch):
    loss = make_loss()
    td, idx = batch()
    base = loss(td.clone())["loss"]
    td_n = td.clone()
    td_n["steps_to_next_obs"] = torch.full((B,), 2)
    setattr(loss, "gamma", 0.81)  # schedulable buffer: gamma ** 2 with steps 2 == 0.81 ** 1
    torch.testing.assert_close(loss(td.clone())["loss"], reference_loss(loss, td, idx, 0.81).mean())
    setattr(loss, "gamma", 0.9)
    torch.testing.assert_close(loss(td_n)["loss"], reference_loss(loss, td, idx, 0.81).mean())
    assert not torch.allclose(base, loss(td_n)["loss"])  # steps 2 discount more than 1
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.5)
    assert float(loss.gamma) == 0.5
    with pytest.raises(NotImplementedError, match="only TD"):
        loss.make_value_estimator(ValueEstimators.TDLambda)
    with pytest.raises(ValueError, match="gamma"):
        setattr(loss, "gamma", 1.5)


def test_done_is_read_when_terminated_is_missing(batch):
    loss = make_loss()
    td, idx = batch()
    expected = loss(td.clone())["loss"]
    del td["next", "terminated"]
    torch.testing.assert_close(loss(td)["loss"], expected)


def test_constructor_errors():
    net = TensorDictModule(nn.Linear(N_OBS, N_ACT), in_keys=["observation"], out_keys=["action_value"])
    with pytest.raises(ValueError, match="support"):
        DistributionalDQNLoss(net, gamma=0.9)
    uneven = DistributionalQValueActor(
        nn.Linear(N_OBS, 3 * 2), support=torch.tensor([0.0, 1.0, 3.0]), action_space="categorical"
    )
    with pytest.raises(ValueError, match="evenly spaced"):
        DistributionalDQNLoss(uneven, gamma=0.9)
    with pytest.raises(TypeError):
        DistributionalDQNLoss(c51_actor())  # pyright: ignore[reportCallIssue]  # gamma is required, as in TorchRL
    with pytest.raises(ValueError, match="reduction"):
        DistributionalDQNLoss(c51_actor(), gamma=0.9, reduction="max")


def test_compiled_forward_matches_eager(batch, assert_compiled_matches_eager):
    loss = make_loss()
    td, _ = batch()
    td["priority_weight"] = torch.rand(B) + 0.1
    assert_compiled_matches_eager(loss, td)


def test_learns_a_two_armed_bandit():
    """One state, two actions, terminal rewards 1.0 and -1.0 (noisy): the greedy action becomes 0 and the
    expected returns approach the rewards."""
    torch.manual_seed(0)
    support = torch.linspace(-2, 2, 9)
    actor = DistributionalQValueActor(
        nn.Sequential(nn.Linear(1, 9 * 2), nn.Unflatten(-1, (9, 2))), support=support, action_space="categorical"
    )
    loss = DistributionalDQNLoss(actor, gamma=0.99)
    updater = SoftUpdate(loss, tau=0.1)
    opt = torch.optim.Adam(loss.parameters(), lr=0.05)
    n = 64
    for _ in range(150):
        action = torch.randint(2, (n,))
        reward = torch.where(action == 0, 1.0, -1.0) + 0.25 * torch.randn(n)
        td = TensorDict(
            {
                "observation": torch.ones(n, 1),
                "action": action,
                "next": {
                    "observation": torch.ones(n, 1),
                    "reward": reward,
                    "done": torch.ones(n, dtype=torch.bool),
                    "terminated": torch.ones(n, dtype=torch.bool),
                },
            },
            batch_size=[n],
        )
        opt.zero_grad()
        loss(td)["loss"].backward()
        opt.step()
        updater.step()
    out = actor(TensorDict(observation=torch.ones(1, 1), batch_size=[1]))
    expected = (out["action_value"].exp() * support[:, None]).sum(-2)[0]
    assert int(out["action"][0]) == 0
    torch.testing.assert_close(expected, torch.tensor([1.0, -1.0]), atol=0.15, rtol=0)


def test_noisy_network_noise_reaches_the_loss(batch):
    """Rainbow's pieces together: a noisy C51 network; reset_noise on the loss's network changes the
    online distribution the loss uses (its parameters are the network's own tensors)."""
    noisy = NoisyLinear(N_OBS, ATOMS * N_ACT)
    net = nn.Sequential(noisy, nn.Unflatten(-1, (ATOMS, N_ACT)))
    loss = DistributionalDQNLoss(
        DistributionalQValueActor(net, support=SUPPORT, action_space="categorical"), gamma=0.9, delay_value=False
    )
    td, _ = batch()
    with set_interaction_type(InteractionType.RANDOM):
        first = loss(td.clone())["loss"]
        torch.testing.assert_close(loss(td.clone())["loss"], first)  # fixed noise between resets
        reset_noise(loss.value_network)
        second = loss(td.clone())["loss"]
    assert not torch.allclose(first, second)
    second.backward()
    grad = noisy.weight_sigma.grad
    assert grad is not None and grad.abs().sum() > 0
