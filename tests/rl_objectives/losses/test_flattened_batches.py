"""Advantages are never estimated silently over a batch whose steps are out of time order.

Calling PPO on shuffled minibatches of a flattened collector batch without running
``loss.value_estimator(batch)`` first makes GAE recurse over unrelated steps: TorchRL computes
silently; here the estimator raises a ``ValueError`` naming the fix (a deliberate difference). It
reads the order from the collector's ``("collector", "traj_ids")``: along time, a step may only
follow a step of the same trajectory or a done step. Collected batches in order, advantages
computed first (TorchRL's flow), TD(0), and hand-built batches without trajectory ids still work.
Fixtures: conftest.py.
"""

import pytest
import torch
from rl_objectives.losses.a2c import A2CLoss
from rl_objectives.losses.ppo import ClipPPOLoss, KLPENPPOLoss, PPOLoss
from rl_objectives.losses.reinforce import ReinforceLoss
from rl_objectives.value import GAE, ValueEstimators
from torch import distributions as D

LOSSES = [A2CLoss, PPOLoss, ClipPPOLoss, KLPENPPOLoss, ReinforceLoss]


def _with_traj_ids(td):
    """Trajectory ids as a collector writes them: a new id per sub-env after every done."""
    done = td["next", "done"]
    starts = torch.zeros_like(done, dtype=torch.long)
    starts[..., 1:] = done[..., :-1].long()
    first = torch.arange(done[..., 0].numel()).reshape(done.shape[:-1]) * 100
    td["collector", "traj_ids"] = first.unsqueeze(-1) + starts.cumsum(-1)
    return td


def _minibatch(td, n=8, seed=0):
    """SB3's minibatch: the rollout flattened, then a shuffled slice of it."""
    flat = td.reshape(-1)
    return flat[torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(seed))[:n]]


@pytest.mark.parametrize("cls", LOSSES, ids=lambda c: c.__name__)
def test_shuffled_minibatch_without_advantage_raises_naming_the_fix(
    cls, categorical_actor, state_value_critic, rollout
):
    actor, _ = categorical_actor()
    critic, _ = state_value_critic()
    td = _with_traj_ids(rollout(actor, batch=(3, 8), with_adv=False))
    mb = _minibatch(td)
    keys = set(mb.keys(True, True))
    loss = cls(actor, critic)
    with pytest.raises(ValueError, match=r"not in time order.*loss\.value_estimator\(batch\)") as info:
        loss(mb)
    assert "GAE" in str(info.value) and "traj_ids" in str(info.value)
    assert set(mb.keys(True, True)) == keys  # nothing was written (REINFORCE writes its estimate back)
    loss(td)  # the collected batch itself is in order


def test_flattened_multi_env_batch_raises_but_one_env_does_not(categorical_actor, state_value_critic, rollout):
    actor, _ = categorical_actor()
    critic, _ = state_value_critic()
    td = _with_traj_ids(rollout(actor, batch=(3, 8), with_adv=False))
    loss = ClipPPOLoss(actor, critic)
    td["next", "done"][:, -1] = False  # the sub-envs' segments run on past the batch
    with pytest.raises(ValueError, match=r"step 7 belongs to trajectory \d+ and step 8 to trajectory"):
        loss(td.reshape(-1))  # env 0's last step is followed by env 1's first: no done between them
    loss(td[1].reshape(-1))  # one env's steps stay in order when flattened


def test_the_estimator_itself_refuses_and_leaves_the_batch_alone(state_value_critic, rollout, categorical_actor):
    actor, _ = categorical_actor()
    critic, _ = state_value_critic()
    mb = _minibatch(_with_traj_ids(rollout(actor, batch=(3, 8), with_adv=False)))
    gae = GAE(gamma=0.9, lmbda=0.9, value_network=critic)
    with pytest.raises(ValueError, match="not in time order"):
        gae(mb)
    assert "advantage" not in mb.keys()


def test_torchrl_flow_advantage_first_then_minibatches(categorical_actor, state_value_critic, rollout, gae_reference):
    actor, lin = categorical_actor()
    critic, clin = state_value_critic()
    td = _with_traj_ids(rollout(actor, batch=(3, 8), with_adv=False))
    loss = ClipPPOLoss(actor, critic, entropy_bonus=False)
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.9, lmbda=0.8)
    loss.value_estimator(td)  # on the whole rollout, before flattening
    with torch.no_grad():
        value, next_value = clin(td["obs"]).squeeze(-1), clin(td["next", "obs"]).squeeze(-1)
    adv, target = gae_reference(
        value, next_value, td["next", "reward"], td["next", "done"], td["next", "terminated"], 0.9, 0.8
    )
    torch.testing.assert_close(td["advantage"], adv)
    idx = torch.randperm(24, generator=torch.Generator().manual_seed(0))[:8]
    mb = td.reshape(-1)[idx]
    out = loss(mb)
    ratio = (D.Categorical(logits=lin(mb["obs"])).log_prob(mb["action"]) - mb["action_log_prob"]).exp()
    a = adv.reshape(-1)[idx]
    torch.testing.assert_close(out["loss_objective"], -torch.minimum(ratio * a, ratio.clamp(0.8, 1.2) * a).mean())
    torch.testing.assert_close(
        out["loss_critic"], torch.nn.functional.smooth_l1_loss(clin(mb["obs"]).squeeze(-1), target.reshape(-1)[idx])
    )


def test_td0_needs_no_time_order(categorical_actor, state_value_critic, rollout):
    actor, _ = categorical_actor()
    critic, clin = state_value_critic()
    td = _with_traj_ids(rollout(actor, batch=(3, 8), with_adv=False))
    # TD(0) looks one step ahead only: a shuffled minibatch gives the right targets
    loss = A2CLoss(actor, critic, entropy_bonus=False).make_value_estimator(ValueEstimators.TD0, gamma=0.5)
    mb = _minibatch(td)
    out = loss(mb)
    with torch.no_grad():
        target = mb["next", "reward"] + 0.5 * (~mb["next", "terminated"]).float() * clin(mb["next", "obs"]).squeeze(-1)
    torch.testing.assert_close(
        out["loss_critic"], torch.nn.functional.smooth_l1_loss(clin(mb["obs"]).squeeze(-1), target)
    )


def test_hand_built_batches_without_trajectory_ids_are_trusted(
    categorical_actor, state_value_critic, rollout, gae_reference
):
    # TorchRL-style code builds rollouts by hand, unnamed: the order cannot be checked, so it is trusted
    actor, _ = categorical_actor()
    critic, clin = state_value_critic()
    td = rollout(actor, batch=(3, 8), with_adv=False)
    td.names = [None, None]
    loss = A2CLoss(actor, critic, entropy_bonus=False).make_value_estimator(ValueEstimators.GAE, gamma=0.9, lmbda=0.8)
    out = loss(td)
    with torch.no_grad():
        value, next_value = clin(td["obs"]).squeeze(-1), clin(td["next", "obs"]).squeeze(-1)
    _, target = gae_reference(
        value, next_value, td["next", "reward"], td["next", "done"], td["next", "terminated"], 0.9, 0.8
    )
    torch.testing.assert_close(
        out["loss_critic"], torch.nn.functional.smooth_l1_loss(clin(td["obs"]).squeeze(-1), target)
    )


def test_a_minibatch_that_carries_its_advantage_is_never_refused(categorical_actor, rollout):
    actor, _ = categorical_actor()
    td = _with_traj_ids(rollout(actor, batch=(3, 8)))  # with "advantage" and "value_target"
    out = PPOLoss(actor, None)(_minibatch(td))
    assert torch.isfinite(out["loss_objective"])


def test_a_real_collector_batch_passes_and_its_shuffle_does_not():
    rl_collect = pytest.importorskip("rl_collect")
    rl_envs = pytest.importorskip("rl_envs")
    from rl_objectives.modules import MLP, ValueOperator

    env = rl_envs.TransformedEnv(rl_envs.CartPoleEnv(batch_size=[4]), rl_envs.StepCounter(10))
    collector = rl_collect.Collector(env, None, frames_per_batch=4 * 32, total_frames=4 * 32)
    batch = next(iter(collector))
    collector.shutdown()
    critic = ValueOperator(MLP(in_features=4, out_features=1, num_cells=[8]), in_keys=["observation"])
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    assert bool(batch["next", "done"].any())  # episodes of 10 steps end inside the batch
    gae(batch.clone())  # in order, with resets inside: accepted
    with pytest.raises(ValueError, match="not in time order"):
        gae(_minibatch(batch, n=64))
