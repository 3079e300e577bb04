"""TorchRL 0.14's keyword arguments of the on-policy losses: a TorchRL-style call works and has its effect."""

import pytest
import torch
from rl_objectives import A2CLoss, ClipPPOLoss, PPOLoss, ReinforceLoss
from tdict import TensorDict
from tdict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential, TensorDictModule
from torch import distributions as D
from torch import nn

_real_vmap = torch.vmap


def _categorical_actor():
    return ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(3, 4), in_keys=["obs"], out_keys=["logits"]),
        ProbabilisticTensorDictModule(
            in_keys=["logits"], out_keys=["action"], distribution_class=D.Categorical, return_log_prob=True
        ),
    )


def _critic():
    return TensorDictModule(lambda obs: obs.sum(-1), in_keys=["obs"], out_keys=["state_value"])


def _on_policy_batch(actor, n=6, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():
        td = actor(TensorDict(obs=torch.randn(n, 3), batch_size=[n]))
    td["advantage"] = torch.linspace(-1.0, 1.5, n)
    td["value_target"] = torch.zeros(n)
    return td


def test_torchrl_style_actor_critic_and_functional_keywords():
    actor, critic = _categorical_actor(), _critic()
    td = _on_policy_batch(actor)
    for loss_cls in (ClipPPOLoss, A2CLoss, ReinforceLoss):
        ref = loss_cls(actor, critic)(td.clone())
        for functional in (True, False):
            out = loss_cls(actor=actor, critic=critic, functional=functional)(td.clone())
            for key in ref.keys():
                torch.testing.assert_close(out[key], ref[key])
    with pytest.raises(ValueError, match="actor_network or actor, not both"):
        ClipPPOLoss(actor, critic, actor=actor)
    with pytest.raises(TypeError, match="actor_network \\(or actor\\) is required"):
        A2CLoss(critic=critic)
    with pytest.raises(TypeError, match="functional must be a bool"):
        PPOLoss(actor, functional="yes")


def test_ppo_max_importance_ratio_caps_the_weight_and_keeps_a_gradient():
    # a parameter-free behaviour log-prob far below the current one: ratios 1, e, e^2, e^3 for a
    # uniform 4-way policy whose logits are a learnable zero vector
    logits = torch.zeros(4, requires_grad=True)
    actor = ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], distribution_class=D.Categorical)
    n = 4
    log_w = torch.arange(4.0)
    td = TensorDict(
        logits=logits.expand(n, 4),
        action=torch.zeros(n, dtype=torch.long),
        action_log_prob=torch.log(torch.tensor(0.25)) - log_w,
        advantage=torch.ones(n),
        batch_size=[n],
    )
    loss = PPOLoss(actor, None, entropy_bonus=False, max_importance_ratio=2.0, reduction="none")
    out = loss(td)
    capped = torch.minimum(log_w.exp(), torch.tensor(2.0))
    torch.testing.assert_close(out["loss_objective"], -capped)
    # the capped samples still carry a gradient: d(-w * A)/d logits_0 = -w * (1 - 1/4)
    (grad,) = torch.autograd.grad(out["loss_objective"].sum(), logits)
    torch.testing.assert_close(grad[0], -(capped.sum() * 0.75))
    clip = ClipPPOLoss(actor, None, entropy_bonus=False, max_importance_ratio=2.0, clip_epsilon=0.2, reduction="none")(
        td
    )
    # positive advantages: min(capped r, clip(r) * cap correction) -> 1 for r = 1, else the 1.2 clip rescaled by the cap
    expected = torch.minimum(capped, log_w.exp().clamp(0.8, 1.2) * capped / log_w.exp())
    torch.testing.assert_close(clip["loss_objective"], -expected)
    for bad in (0.0, -1.0, True):
        with pytest.raises(ValueError, match="max_importance_ratio must be a number > 0"):
            PPOLoss(actor, None, max_importance_ratio=bad)


def test_ppo_device_places_the_loss_coefficients():
    loss = ClipPPOLoss(_categorical_actor(), _critic(), device="meta", max_importance_ratio=10.0)
    assert {b.device.type for b in (loss.entropy_coeff, loss.critic_coeff, loss.max_importance_ratio)} == {"meta"}
    assert next(loss.actor_network.parameters()).device.type == "cpu"  # the networks stay where they are


def test_deactivate_vmap_runs_the_q_ensemble_in_a_loop_with_the_same_numbers(monkeypatch):
    from rl_objectives import SACLoss

    torch.manual_seed(0)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(3, 2), in_keys=["observation"], out_keys=["loc"]),
        ProbabilisticTensorDictModule(
            in_keys=["loc"],
            out_keys=["action"],
            distribution_class=D.Normal,
            distribution_kwargs={"scale": 1.0},
            return_log_prob=True,
        ),
    )

    class Q(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(5, 1)

        def forward(self, observation, action):
            return self.lin(torch.cat([observation, action], -1)).squeeze(-1)

    qnet = TensorDictModule(Q(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    td = TensorDict(
        {
            "observation": torch.randn(6, 3),
            "action": torch.randn(6, 2),
            "next": {
                "observation": torch.randn(6, 3),
                "reward": torch.randn(6),
                "done": torch.zeros(6, dtype=torch.bool),
                "terminated": torch.zeros(6, dtype=torch.bool),
            },
        },
        [6],
    )
    losses = {}
    for deactivate in (False, True):
        torch.manual_seed(1)
        loss = SACLoss(actor, qnet, num_qvalue_nets=6, deactivate_vmap=deactivate)  # 6 sets: vmapped unless deactivated
        calls = []
        monkeypatch.setattr(torch, "vmap", lambda *a, **k: calls.append(1) or _real_vmap(*a, **k))
        torch.manual_seed(2)
        losses[deactivate] = loss(td.clone())
        monkeypatch.undo()
        assert bool(calls) is not deactivate
    for key in ("loss_actor", "loss_qvalue", "loss_alpha"):
        torch.testing.assert_close(losses[True][key], losses[False][key])
    with pytest.raises(TypeError, match="deactivate_vmap must be a bool"):
        SACLoss(actor, qnet, deactivate_vmap="no")


def _with_prox_offset(loss, offset):
    """Move the proximal (target) actor away from the online one: its logits' bias + ``offset``."""
    with torch.no_grad():
        loss.params_of("actor_network", target=True)["module", "0", "module", "bias"].add_(offset)


def test_ppo_delay_actor_uses_the_target_actor_as_proximal_policy():
    from rl_objectives import KLPENPPOLoss, SoftUpdate

    actor = _categorical_actor()
    td = _on_policy_batch(actor)
    with torch.no_grad():  # a behaviour policy away from the current one
        td["action_log_prob"] = td["action_log_prob"] - torch.linspace(0.0, 0.6, 6)
    loss = ClipPPOLoss(actor, None, entropy_bonus=False, delay_actor=True, reduction="none", clip_epsilon=0.2)
    assert loss.target_networks == ["actor_network"]
    SoftUpdate(loss, eps=0.9)  # TorchRL's PPO-EWMA pairing: the updater finds the target actor
    offset = torch.tensor([0.3, -0.2, 0.0, 0.5])
    _with_prox_offset(loss, offset)
    out = loss(td.clone())
    with torch.no_grad():
        lin = actor[0].module
        logits = lin(td["obs"])
        logp = torch.log_softmax(logits, -1).gather(-1, td["action"].unsqueeze(-1)).squeeze(-1)
        prox = torch.log_softmax(logits + offset, -1).gather(-1, td["action"].unsqueeze(-1)).squeeze(-1)
    r, w, adv = (logp - prox).exp(), (prox - td["action_log_prob"]).exp(), td["advantage"]
    # Hilton et al.'s decoupled objective: -(pi_prox / pi_behav) * min(r A, clip(r) A), r = pi / pi_prox
    torch.testing.assert_close(out["loss_objective"], -w * torch.minimum(r * adv, r.clamp(0.8, 1.2) * adv))
    torch.testing.assert_close(out["kl_approx"], (prox - logp).mean())
    # PPOLoss: the surrogate is weighted by the behaviour ratio only
    plain = PPOLoss(actor, None, entropy_bonus=False, delay_actor=True, reduction="none")
    _with_prox_offset(plain, offset)
    torch.testing.assert_close(plain(td.clone())["loss_objective"], -(r * w) * adv)
    # KLPENPPOLoss: the penalty is the KL to the proximal policy
    kl = KLPENPPOLoss(actor, None, entropy_bonus=False, delay_actor=True, beta=1.0)
    _with_prox_offset(kl, offset)
    with torch.no_grad():
        expected_kl = D.kl_divergence(D.Categorical(logits=logits + offset), D.Categorical(logits=logits)).mean()
    torch.testing.assert_close(kl(td.clone())["kl"], expected_kl)
    with pytest.raises(ValueError, match="delay_actor=True needs functional=True"):
        PPOLoss(actor, None, delay_actor=True, functional=False)


class _HalfScale(nn.Module):
    """A value normaliser (TorchRL's ValueNorm interface) whose scale is the last target's max."""

    def __init__(self):
        super().__init__()
        self.register_buffer("last", torch.tensor(2.0))
        self.updates = 0

    def update(self, value_target):
        self.updates += 1
        self.last.copy_(value_target.abs().max())

    def scale(self):
        return self.last


def test_advantage_norm_divides_the_advantage():
    actor, critic = _categorical_actor(), _critic()
    td = _on_policy_batch(actor)
    for cls in (A2CLoss, ClipPPOLoss):
        norm = _HalfScale()
        loss = cls(actor, critic, advantage_norm=norm, entropy_bonus=False, critic_coeff=None)
        ref = cls(actor, critic, entropy_bonus=False, critic_coeff=None)
        halved = td.clone()
        halved["advantage"] = td["advantage"] / 2.0
        torch.testing.assert_close(loss(td.clone())["loss_objective"], ref(halved)["loss_objective"])
        assert norm.updates == 0  # a precomputed advantage: the caller updates the statistics
        # the loss estimates the advantage: the normaliser sees the fresh value targets first
        fresh = TensorDict(
            {
                "obs": td["obs"],
                "action": td["action"],
                "action_log_prob": td["action_log_prob"],
                "next": {"obs": td["obs"] + 1, "reward": torch.ones(6), "done": torch.zeros(6, dtype=torch.bool)},
            },
            [6],
        )
        loss(fresh.clone())
        assert norm.updates == 1
        loss.eval()
        loss(fresh.clone())
        assert norm.updates == 1  # no update outside training mode, as in TorchRL
    with pytest.raises(ValueError, match="normalize_advantage=True and advantage_norm exclude each other"):
        PPOLoss(actor, critic, advantage_norm=_HalfScale(), normalize_advantage=True)
    with pytest.raises(TypeError, match="advantage_norm must be a value normaliser"):
        A2CLoss(actor, critic, advantage_norm=2.0)
