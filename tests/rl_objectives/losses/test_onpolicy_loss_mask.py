"""Loss masks in the on-policy losses (PPO family, A2C, REINFORCE): the positions the collector
padded (``("collector", "mask")``) or the n-step shift left invalid (``"shifted_valid"``) are left
out of every ``loss_*`` term and of the advantage normalisation, as if the batch held the valid
positions only."""

import pytest
import torch

from rl_objectives import A2CLoss, ClipPPOLoss, KLPENPPOLoss, PPOLoss, ReinforceLoss

MASK = torch.tensor(
    [[True, True, True, False, False], [True, True, True, True, True], [True, False, False, False, False]]
)


def build(kind, actor, critic, **kwargs):
    if kind is ReinforceLoss:
        return ReinforceLoss(actor, critic, **kwargs)
    return kind(actor, critic, entropy_coeff=0.01, **kwargs)


def losses(out):
    return {k: v for k, v in out.items() if k.startswith("loss_")}


@pytest.mark.parametrize("mask_key", [("collector", "mask"), "shifted_valid"])
@pytest.mark.parametrize("kind", [ClipPPOLoss, PPOLoss, KLPENPPOLoss, A2CLoss, ReinforceLoss])
def test_masked_positions_are_left_out(kind, mask_key, normal_actor, state_value_critic, rollout):
    actor, _ = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor, batch=tuple(MASK.shape), perturb=True)
    extra = {"normalize_advantage": True} if kind in (ClipPPOLoss, PPOLoss, KLPENPPOLoss) else {}
    masked = td.clone()
    masked.set(mask_key, MASK)
    # garbage where the collector padded: it must reach neither the losses, the advantage's
    # normalisation nor the gradients (finite garbage: a NaN in a factor of a selected-out term would
    # still give NaN * 0 in the backward pass, with any masking)
    masked["advantage"] = torch.where(MASK, masked["advantage"], torch.full_like(masked["advantage"], -1e30))
    masked["value_target"] = torch.where(MASK, masked["value_target"], torch.full_like(masked["value_target"], 1e30))
    out = losses(build(kind, actor, critic, **extra)(masked))
    reference = losses(build(kind, actor, critic, **extra)(td[MASK]))  # the valid positions alone
    assert out.keys() == reference.keys() and len(out) >= 2
    for key in out:
        torch.testing.assert_close(out[key], reference[key], rtol=1e-5, atol=1e-6, msg=key)
    total = sum(out.values())
    total.backward()
    grads = [p.grad for p in (*actor.parameters(), *critic.parameters()) if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_reduction_none_zeroes_the_masked_positions(normal_actor, state_value_critic, rollout):
    actor, _ = normal_actor()
    td = rollout(actor, batch=tuple(MASK.shape))
    td["collector", "mask"] = MASK
    out = A2CLoss(actor, state_value_critic()[0], reduction="none")(td)
    for key in ("loss_objective", "loss_critic", "loss_entropy"):
        assert out[key].shape == MASK.shape and (out[key][~MASK] == 0).all(), key
    plain = A2CLoss(actor, state_value_critic()[0], reduction="none")(td.exclude("collector"))
    torch.testing.assert_close(out["loss_objective"][MASK], plain["loss_objective"][MASK])


def test_loss_mask_key_none_reduces_every_position(normal_actor, state_value_critic, rollout):
    actor, _ = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor, batch=tuple(MASK.shape))
    loss = ClipPPOLoss(actor, critic, normalize_advantage=True)
    loss.loss_mask_key = None
    masked = td.clone()
    masked["collector", "mask"] = MASK
    for key, value in losses(loss(masked)).items():
        torch.testing.assert_close(value, losses(loss(td))[key], msg=key)
