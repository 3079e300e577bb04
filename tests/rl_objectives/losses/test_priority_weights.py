"""Importance weights of a prioritized buffer in the off-policy actor-critic losses.

For each loss (SAC without and with a value network, TD3, TD3+BC, DDPG, REDQ): the per-sample
losses of ``reduction="none"`` (weights ignored), weighted by hand, equal what the loss returns
when the batch holds ``"priority_weight"``: ``sum(w * l) / sum(w)`` for ``"mean"``, ``sum(w * l)``
for ``"sum"``, ``w * l`` for ``"none"``; ``use_prioritized_weights=False`` ignores them and
``set_keys(priority_weight=...)`` renames the entry. REDQ's losses are ``[K, *B]``: a sample's weight
applies to its ``K`` rows. Networks and batches: conftest.py fixtures.
"""

import functools

import pytest
import torch
from rl_objectives import DDPGLoss, REDQLoss, SACLoss, TD3BCLoss, TD3Loss
from rl_objectives.modules import ValueOperator

N_OBS, N_ACT, B = 3, 2, 6
WEIGHTS = torch.tensor([1.0, 0.5, 2.0, 3.0, 0.25, 1.5])
LOSSES = ["sac", "sac_v1", "td3", "td3_bc", "ddpg", "redq"]


@pytest.fixture
def build(normal_actor, deterministic_actor_critic, q_critic):
    """``(name, **kwargs) -> loss``: the same networks (seeded) on every call."""

    def make(name, **kwargs):
        if name in ("td3", "td3_bc", "ddpg"):
            actor, critic = deterministic_actor_critic()
            if name == "ddpg":
                return DDPGLoss(actor, critic, **kwargs)
            cls = TD3Loss if name == "td3" else TD3BCLoss
            return cls(actor, critic, bounds=(-1.0, 1.0), **kwargs)
        actor, _ = normal_actor(N_OBS, N_ACT, seed=0, obs_key="observation")
        torch.manual_seed(1)  # the ensemble's re-initialised critics
        critic = q_critic()
        kwargs.setdefault("scalar_output_mode", "exclude")
        if name == "redq":
            return REDQLoss(actor, critic, num_qvalue_nets=3, **kwargs)
        value = ValueOperator(torch.nn.Linear(N_OBS, 1), in_keys=["observation"]) if name == "sac_v1" else None
        return SACLoss(actor, critic, value, **kwargs)

    return make


@pytest.fixture
def batch(transition_batch):
    return functools.partial(transition_batch, n=B, action="uniform")


def run(loss, td, seed=5):
    torch.manual_seed(seed)  # the same draws (actions, smoothing noise, REDQ's subset) in every run
    return loss(td.clone())


def loss_keys(out):
    return [k for k in out.keys() if k.startswith("loss_")]


def weighted_mean(w, per_sample):
    """``sum(w * l) / sum(w)`` over the samples (the last dims), each of the ``K`` leading rows weighted alike."""
    rows = per_sample.numel() // w.numel()
    return (w * per_sample).sum() / (w.sum() * rows)


@pytest.mark.parametrize("name", LOSSES)
def test_weighted_mean_equals_the_hand_written_one(name, build, batch):
    td = batch()
    per_sample = run(build(name, reduction="none", use_prioritized_weights=False), td)
    td["priority_weight"] = WEIGHTS
    out = run(build(name), td)  # "auto": read when present
    keys = loss_keys(out)
    assert len(keys) >= 2
    for key in keys:
        assert per_sample[key].shape[-1] == B, key
        torch.testing.assert_close(out[key], weighted_mean(WEIGHTS, per_sample[key]), msg=lambda m, k=key: f"{k}: {m}")
    # ... and they differ from the unweighted mean (the weights are not uniform)
    unweighted = run(build(name, use_prioritized_weights=False), td)
    assert any(not torch.allclose(unweighted[k], out[k]) for k in keys)
    for key in keys:
        torch.testing.assert_close(unweighted[key], per_sample[key].mean(), msg=lambda m, k=key: f"{k}: {m}")


@pytest.mark.parametrize("name", LOSSES)
def test_sum_none_and_renamed_key(name, build, batch):
    td = batch()
    per_sample = run(build(name, reduction="none", use_prioritized_weights=False), td)
    td["priority_weight"] = WEIGHTS
    summed = run(build(name, reduction="sum", use_prioritized_weights=True), td)
    weighted = run(build(name, reduction="none"), td)
    renamed_td = td.clone()
    renamed_td["w"] = renamed_td.pop("priority_weight")
    renamed = run(build(name).set_keys(priority_weight="w"), renamed_td)
    reference = run(build(name), td)
    for key in loss_keys(summed):
        torch.testing.assert_close(summed[key], (WEIGHTS * per_sample[key]).sum(), msg=lambda m, k=key: f"{k}: {m}")
        torch.testing.assert_close(renamed[key], reference[key], msg=lambda m, k=key: f"{k}: {m}")
        torch.testing.assert_close(weighted[key], WEIGHTS * per_sample[key], msg=lambda m, k=key: f"{k}: {m}")


def test_weights_must_be_batch_shaped(build, batch):
    td = batch()
    td["priority_weight"] = WEIGHTS.unsqueeze(-1)
    with pytest.raises(ValueError, match="'priority_weight' has shape \\(6, 1\\)"):
        build("redq")(td)
    with pytest.raises(ValueError, match="use_prioritized_weights must be True, False or 'auto'"):
        build("redq", use_prioritized_weights="yes")
