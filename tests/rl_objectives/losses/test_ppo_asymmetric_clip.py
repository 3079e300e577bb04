"""ClipPPOLoss with a (low, high) clip_epsilon pair: DAPO's asymmetric "clip-higher" range."""

import copy
import functools
import math

import pytest
import torch
from rl_objectives.functional import asymmetric_clipped_surrogate_loss, clipped_surrogate_loss
from rl_objectives.losses.ppo import ClipPPOLoss


@pytest.fixture
def rollout(rollout):
    """Rollouts whose actor moves after collection: the behaviour policy differs from the current one."""
    return functools.partial(rollout, perturb=True)


def test_functional_clamps_to_the_two_bounds():
    log_weight = torch.tensor([2.0, 0.5, 1.1, 0.9]).log()
    advantage = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, fraction = asymmetric_clipped_surrogate_loss(log_weight, advantage, 0.2, 0.28)
    # ratio 2 -> 1.28 (A > 0), ratio 0.5 -> 0.8 (A < 0: the pessimistic -0.8 * -1), 1.1 and 0.9 unclipped
    torch.testing.assert_close(loss, torch.tensor([-1.28, 0.8, -1.1, 0.9]))
    torch.testing.assert_close(fraction, torch.tensor(0.5))
    # equal bounds are the symmetric clip
    sym, sym_fraction = clipped_surrogate_loss(log_weight, advantage, 0.2)
    eq, eq_fraction = asymmetric_clipped_surrogate_loss(log_weight, advantage, 0.2, 0.2)
    torch.testing.assert_close(eq, sym)
    torch.testing.assert_close(eq_fraction, sym_fraction)


def test_pair_matches_a_hand_written_reference(normal_actor, state_value_critic, rollout, normal_dist):
    actor, lin = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor)
    out = ClipPPOLoss(actor, critic, clip_epsilon=(0.05, 0.3))(td)
    dist = normal_dist(lin, td["obs"])
    ratio = (dist.log_prob(td["action"]).sum(-1) - td["action_log_prob"]).exp()
    adv = td["advantage"]
    gain = torch.minimum(ratio * adv, ratio.clamp(0.95, 1.3) * adv)
    torch.testing.assert_close(out["loss_objective"], -gain.mean())
    torch.testing.assert_close(out["clip_fraction"], ((ratio < 0.95) | (ratio > 1.3)).float().mean())


def test_equal_pair_gives_the_symmetric_loss(normal_actor, state_value_critic, rollout):
    actor, _ = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor)
    sym = ClipPPOLoss(actor, critic, clip_epsilon=0.1)(td)
    eq = ClipPPOLoss(actor, critic, clip_epsilon=(0.1, 0.1))(td)
    for key in ("loss_objective", "clip_fraction", "loss_critic", "loss_entropy"):
        torch.testing.assert_close(eq[key], sym[key])


def test_buffers_bounds_and_scheduling(categorical_actor, state_value_critic):
    actor, _ = categorical_actor()
    critic, _ = state_value_critic()
    sym = ClipPPOLoss(actor, critic, clip_epsilon=0.2)
    asym = ClipPPOLoss(actor, critic, clip_epsilon=(0.2, 0.28))
    sym_buffers, asym_buffers = dict(sym.named_buffers()), dict(asym.named_buffers())
    assert "clip_epsilon" in sym_buffers and "clip_epsilon_low" not in sym_buffers
    assert "clip_epsilon" not in asym_buffers
    assert float(asym_buffers["clip_epsilon_low"]) == pytest.approx(0.2)
    assert float(asym_buffers["clip_epsilon_high"]) == pytest.approx(0.28)
    low, high = asym._clip_bounds
    torch.testing.assert_close(low, torch.tensor(math.log(0.8)))
    torch.testing.assert_close(high, torch.tensor(math.log(1.28)))
    low, high = sym._clip_bounds
    torch.testing.assert_close(low, torch.tensor(math.log(0.8)))
    torch.testing.assert_close(high, torch.tensor(math.log(1.2)))
    assert "clip_epsilon=(0.2" in repr(asym)

    buffer = asym.clip_epsilon_high
    asym.clip_epsilon_high = 0.5  # written in place
    assert asym.clip_epsilon_high is buffer and float(buffer) == 0.5
    with pytest.raises(ValueError, match="clip_epsilon_low"):
        asym.clip_epsilon_low = 1.0
    assert float(asym.clip_epsilon_low) == pytest.approx(0.2)
    with pytest.raises(AttributeError, match="asymmetric"):
        asym.clip_epsilon = 0.1
    with pytest.raises(AttributeError, match="symmetric"):
        sym.clip_epsilon_low = 0.1
    assert "clip_epsilon" not in asym._buffers and "clip_epsilon_low" not in sym._buffers


def test_state_dict_and_deepcopy_keep_the_pair(normal_actor, state_value_critic, rollout):
    actor, _ = normal_actor()
    critic, _ = state_value_critic()
    td = rollout(actor)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=(0.05, 0.3))
    state = loss.state_dict()
    assert {"clip_epsilon_low", "clip_epsilon_high"} <= set(state)
    other = ClipPPOLoss(actor, critic, clip_epsilon=(0.1, 0.1))
    other.load_state_dict(state)
    torch.testing.assert_close(other(td)["loss_objective"], loss(td)["loss_objective"])
    clone = copy.deepcopy(loss)
    clone.clip_epsilon_high = 0.01  # the copy clips with its own buffers
    assert float(loss.clip_epsilon_high) == pytest.approx(0.3)
    clipped = ClipPPOLoss(actor, critic, clip_epsilon=(0.05, 0.01))(td)["loss_objective"]
    torch.testing.assert_close(clone(td)["loss_objective"], clipped)


@pytest.mark.parametrize(
    ("clip_epsilon", "kwargs", "match"),
    [
        ((0.1, 0.2, 0.3), {}, "length 2"),
        ((-0.1, 0.2), {}, "non-negative"),
        ((0.1, -0.2), {}, "clip_epsilon_high must be non-negative"),
        ((1.0, 0.2), {}, "must be < 1"),
        (("a", 0.2), {}, "two numbers"),
        ((0.2, 0.28), {"clip_value": True}, "clip_value=True"),
    ],
)
def test_bad_pairs_are_refused(categorical_actor, state_value_critic, clip_epsilon, kwargs, match):
    actor, _ = categorical_actor()
    critic, _ = state_value_critic()
    with pytest.raises(ValueError, match=match):
        ClipPPOLoss(actor, critic, clip_epsilon=clip_epsilon, **kwargs)


def test_pair_with_a_numeric_clip_value(categorical_actor, state_value_critic):
    actor, _ = categorical_actor()
    critic, _ = state_value_critic()
    loss = ClipPPOLoss(actor, critic, clip_epsilon=(0.2, 0.28), clip_value=0.5)
    assert float(loss.clip_value) == pytest.approx(0.5)
    assert ClipPPOLoss(actor, critic, clip_epsilon=(0.2, 0.28), clip_value=False).clip_value is None
