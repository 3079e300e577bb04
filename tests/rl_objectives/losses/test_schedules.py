"""Scheduled hyper-parameters: assigning a coefficient after construction takes effect at the next call.

``loss.clip_epsilon = 0.1`` (RL-zoo's annealed PPO clip range), ``loss.entropy_coeff = ...``, SAC's
fixed temperature and entropy target, TD3's target noise, a value estimator's discount: each
assignment must give the losses of a loss built with that value (TorchRL 0.14's schedulable
buffers: a number is written into the buffer in place). Networks and batches: conftest.py fixtures.
"""

import math

import pytest
import torch
from rl_objectives import DQNLoss, SACLoss, TD3Loss
from rl_objectives.losses.a2c import A2CLoss
from rl_objectives.losses.ppo import ClipPPOLoss, KLPENPPOLoss, PPOLoss
from rl_objectives.modules import QValueActor
from rl_objectives.value import GAE
from tdict.specs import Bounded, Categorical
from torch import nn


def _assert_same_outputs(a, b):
    assert set(a.keys()) == set(b.keys())
    for key in a.keys():
        torch.testing.assert_close(a[key], b[key], msg=lambda m, key=key: f"{key}: {m}")


@pytest.fixture
def rollout(rollout):
    """Rollouts whose stored log-probs are shifted by -0.2 to 0.2: PPO's log-ratios spread over
    that range before any update, so clip ranges of 0.02 to 0.3 clip some of them, not all."""

    def build(actor, **kw):
        td = rollout(actor, **kw)
        td["action_log_prob"] = td["action_log_prob"] + torch.linspace(-0.2, 0.2, td.numel()).reshape(td.batch_size)
        return td

    return build


# ------------------------------------------------------------------------------ on-policy
@pytest.mark.parametrize("as_tensor", [False, True], ids=["float", "tensor"])
def test_clip_epsilon_assigned_after_construction_is_the_one_used(
    as_tensor, normal_actor, state_value_critic, rollout, normal_dist
):
    actor, lin = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.3)
    loss.clip_epsilon = torch.tensor(0.05) if as_tensor else 0.05
    out = loss(td)
    _assert_same_outputs(out, ClipPPOLoss(actor, critic, clip_epsilon=0.05)(td))
    # by hand: the ratios are clipped to [0.95, 1.05]
    with torch.no_grad():
        log_w = normal_dist(lin, td["obs"]).log_prob(td["action"]).sum(-1) - td["action_log_prob"]
    ratio, adv = log_w.exp(), td["advantage"]
    torch.testing.assert_close(out["clip_fraction"], ((ratio < 0.95) | (ratio > 1.05)).float().mean())
    torch.testing.assert_close(
        out["loss_objective"].detach(), -torch.minimum(ratio * adv, ratio.clamp(0.95, 1.05) * adv).mean()
    )
    assert 0 < float(out["clip_fraction"]) < 1


def test_a_float_is_written_into_the_buffer_in_place(categorical_actor, state_value_critic):
    actor, _ = categorical_actor()
    loss = ClipPPOLoss(
        actor, state_value_critic()[0], entropy_coeff=0.01, critic_coeff=0.5, clip_value=0.2, device="cpu"
    )
    buffers = {name: getattr(loss, name) for name in ("clip_epsilon", "entropy_coeff", "critic_coeff", "clip_value")}
    loss.clip_epsilon, loss.entropy_coeff, loss.critic_coeff, loss.clip_value = 0.1, 0.002, 2, 0.4
    for name, value in (("clip_epsilon", 0.1), ("entropy_coeff", 0.002), ("critic_coeff", 2.0), ("clip_value", 0.4)):
        assert getattr(loss, name) is buffers[name], name  # same tensor (device, dtype, compiled graphs keep it)
        assert getattr(loss, name).dtype == torch.float32 and float(getattr(loss, name)) == pytest.approx(value), name
    assert float(loss.state_dict()["clip_epsilon"]) == pytest.approx(0.1)


@pytest.mark.parametrize("route", ["assign", "fill_", "load_state_dict", "new tensor"])
def test_clip_epsilon_changed_after_a_call_is_used_by_the_next(route, normal_actor, state_value_critic, rollout):
    # the loss reads its clip bounds as numbers, again whenever the buffer changed
    actor, _ = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.3)
    assert float(loss(td)["clip_fraction"]) < 1.0
    if route == "assign":
        loss.clip_epsilon = 0.02
    elif route == "fill_":
        with torch.no_grad():
            loss.clip_epsilon.fill_(0.02)
    elif route == "load_state_dict":
        loss.load_state_dict(ClipPPOLoss(actor, critic, clip_epsilon=0.02).state_dict())
    else:
        loss._buffers["clip_epsilon"] = torch.tensor(0.02)  # what Module.to / _apply do
    _assert_same_outputs(loss(td), ClipPPOLoss(actor, critic, clip_epsilon=0.02)(td))


@pytest.mark.parametrize("cls", [A2CLoss, PPOLoss, ClipPPOLoss])
def test_entropy_critic_coefficients_and_value_clip_take_effect(cls, normal_actor, state_value_critic, rollout):
    actor, _ = normal_actor()
    critic, clin = state_value_critic()
    td = rollout(actor)
    with torch.no_grad():
        td["state_value"] = clin(td["obs"]).squeeze(-1) + 0.3 * torch.randn(td.batch_size)
    loss = cls(actor, critic, entropy_coeff=0.01, critic_coeff=1.0, clip_value=0.5)
    first = loss(td)
    loss.entropy_coeff, loss.critic_coeff, loss.clip_value = 0.2, 3.0, 0.1
    out = loss(td)
    _assert_same_outputs(out, cls(actor, critic, entropy_coeff=0.2, critic_coeff=3.0, clip_value=0.1)(td))
    torch.testing.assert_close(out["loss_entropy"], -0.2 * out["entropy"])
    assert not torch.allclose(out["loss_critic"], first["loss_critic"])


def test_ppo_max_importance_ratio_and_klpen_beta_take_effect(normal_actor, state_value_critic, rollout):
    actor, _ = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor)
    loss = PPOLoss(actor, critic, max_importance_ratio=5.0)
    loss.max_importance_ratio = 1.01
    _assert_same_outputs(loss(td), PPOLoss(actor, critic, max_importance_ratio=1.01)(td))
    kl = KLPENPPOLoss(actor, critic, beta=1.0)
    kl.beta = 3.0
    _assert_same_outputs(kl(td), KLPENPPOLoss(actor, critic, beta=3.0)(td))


def test_bad_scheduled_values_raise_naming_the_argument_and_change_nothing(categorical_actor, state_value_critic):
    actor, _ = categorical_actor()
    critic = state_value_critic()[0]
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, clip_value=0.3, max_importance_ratio=2.0)
    for name, bad, error in (
        ("clip_epsilon", 1.5, ValueError),
        ("clip_epsilon", 0.0, ValueError),
        ("clip_value", -1.0, ValueError),
        ("max_importance_ratio", 0.0, ValueError),
        ("entropy_coeff", float("nan"), ValueError),
        ("entropy_coeff", "0.1", TypeError),
        ("critic_coeff", True, TypeError),
    ):
        before = float(getattr(loss, name))
        with pytest.raises(error, match=name):
            setattr(loss, name, bad)
        assert float(getattr(loss, name)) == before, name
    with pytest.raises(ValueError, match="beta"):
        KLPENPPOLoss(actor, critic).beta = -1.0
    # a term switched off at construction has nothing to schedule
    with pytest.raises(ValueError, match="critic_coeff was None at construction"):
        ClipPPOLoss(actor, critic, critic_coeff=None).critic_coeff = 1.0


def test_compiled_loss_reads_the_scheduled_clip_epsilon_without_recompiling(normal_actor, state_value_critic, rollout):
    from torch._dynamo.testing import CompileCounter

    actor, _ = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.3)
    validate = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)  # argument checks do not trace
    torch.compiler.reset()
    try:
        counter = CompileCounter()
        compiled = torch.compile(loss, backend=counter, fullgraph=True)
        for eps in (0.3, 0.1, 0.02):
            loss.clip_epsilon = eps
            _assert_same_outputs(compiled(td.clone()), ClipPPOLoss(actor, critic, clip_epsilon=eps)(td.clone()))
        assert counter.frame_count == 1
    finally:
        torch.distributions.Distribution.set_default_validate_args(validate)
        torch.compiler.reset()


def test_lr_scheduler_annealed_clip_range_and_entropy_coefficient_act_at_every_step(
    normal_actor, state_value_critic, rollout, normal_dist
):
    """An RL-zoo style PPO schedule: torch's LR scheduler, a linearly annealed clip range and
    entropy coefficient, each one checked against its value at every step."""
    actor, lin = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor, batch=(4, 8))
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.3, entropy_coeff=0.05)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda k: 1.0 - k / 10)
    steps = 5
    for k in range(steps):
        eps, coeff = 0.3 - 0.05 * k, 0.05 * (1 - k / steps)
        loss.clip_epsilon, loss.entropy_coeff = eps, coeff
        assert optim.param_groups[0]["lr"] == pytest.approx(1e-2 * (1 - k / 10))
        out = loss(td)
        with torch.no_grad():  # the current policy, by hand
            dist = normal_dist(lin, td["obs"])
            ratio = (dist.log_prob(td["action"]).sum(-1) - td["action_log_prob"]).exp()
            entropy = dist.entropy().sum(-1).mean()
        low, high = 1 - eps, 1 + eps
        torch.testing.assert_close(out["clip_fraction"], ((ratio < low) | (ratio > high)).float().mean())
        torch.testing.assert_close(out["loss_entropy"].detach(), torch.tensor(-coeff) * entropy)
        optim.zero_grad()
        (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()
        optim.step()
        sched.step()
    assert optim.param_groups[0]["lr"] == pytest.approx(1e-2 * (1 - steps / 10))


# ------------------------------------------------------------------------------ off-policy
def test_sac_fixed_temperature_and_target_entropy_take_effect(normal_actor, q_critic, transition_batch):
    def build(**kw):
        actor, _ = normal_actor(obs_key="observation")
        return SACLoss(actor, q_critic(), fixed_alpha=True, **kw)

    td = transition_batch(action="normal")
    torch.manual_seed(0)
    loss = build(alpha_init=1.0, target_entropy=-1.0)
    torch.manual_seed(0)
    reference = build(alpha_init=0.2, target_entropy=-3.0)
    loss.log_alpha = math.log(0.2)
    loss.target_entropy = -3.0
    assert loss.target_entropy == -3.0
    torch.manual_seed(1)
    out = loss(td.clone())
    torch.manual_seed(1)
    _assert_same_outputs(out, reference(td.clone()))
    torch.testing.assert_close(out["alpha"], torch.tensor(0.2))
    with pytest.raises(ValueError, match="target_entropy"):
        loss.target_entropy = "auto"
    # a learnt temperature is a parameter: the optimizer owns it (TorchRL refuses the assignment too)
    learnt = SACLoss(normal_actor(obs_key="observation")[0], q_critic())
    with pytest.raises(TypeError):
        learnt.log_alpha = 0.0


def test_td3_target_noise_assigned_after_construction_is_used(deterministic_actor_critic, transition_batch):
    spec = Bounded(-1.0, 1.0, shape=(2,))
    td = transition_batch()
    loss = TD3Loss(*deterministic_actor_critic(), action_spec=spec, policy_noise=0.4, noise_clip=0.5)
    reference = TD3Loss(*deterministic_actor_critic(), action_spec=spec, policy_noise=0.1, noise_clip=0.05)
    loss.policy_noise, loss.noise_clip = 0.1, 0.05
    torch.manual_seed(3)
    out = loss(td.clone())
    torch.manual_seed(3)
    _assert_same_outputs(out, reference(td.clone()))


@pytest.mark.parametrize("device", [None, "cpu"], ids=["float", "buffer"])
def test_dqn_discount_scheduled_on_the_value_estimator(device, transition_batch):
    td = transition_batch(action="index", n_act=4)
    torch.manual_seed(0)
    net = nn.Linear(3, 4)
    loss = DQNLoss(QValueActor(net, spec=Categorical(4)), delay_value=False)
    loss.make_value_estimator(gamma=0.99, device=device)
    loss.value_estimator.gamma = 0.5
    loss(td)
    with torch.no_grad():  # by hand: r + 0.5 * (1 - terminated) * max_a Q(s', a)
        pred = net(td["observation"]).gather(-1, td["action"].unsqueeze(-1)).squeeze(-1)
        target = (
            td["next", "reward"]
            + 0.5 * (~td["next", "terminated"]).float() * net(td["next", "observation"]).max(-1).values
        )
    torch.testing.assert_close(td["td_error"], (pred - target).pow(2))
    with pytest.raises(ValueError, match="gamma"):
        loss.value_estimator.gamma = 1.5
    assert float(loss.value_estimator.gamma) == 0.5


def test_gae_lambda_scheduled_in_place_on_a_device_buffer():
    est = GAE(gamma=0.9, lmbda=0.95, value_network=None, device="cpu")
    buffer = est.lmbda
    est.lmbda = 0.5
    assert est.lmbda is buffer and float(buffer) == 0.5
