"""PrioritizedSliceSampler: start steps follow priorities among the steps that can start a slice."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict

from rl_replay import LazyTensorStorage, TensorDictReplayBuffer
from rl_replay.samplers.prioritized_slice import PrioritizedSliceSampler

from .test_slice import check_slices, chi2_sf, make_data, ref_trajectories


def build(lengths, slice_len, capacity=200, seed=0, **kw):
    done = torch.cat([torch.arange(n) == n - 1 for n in lengths])
    sampler = PrioritizedSliceSampler(
        capacity, alpha=kw.pop("alpha", 1.0), beta=kw.pop("beta", 0.5), slice_len=slice_len, **kw
    )
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity),
        sampler=sampler,
        batch_size=slice_len * 400,
        generator=torch.Generator().manual_seed(seed),
    )
    index = rb.extend(make_data(done))
    trajs = ref_trajectories(done.tolist(), len(done), capacity, len(done) - 1, True)
    return rb, index, trajs


def valid_starts(trajs, slice_len, strict=True):
    out = []
    for t in trajs:
        for k, row in enumerate(t):
            if (len(t) - k >= slice_len) or (not strict and k == 0):
                out.append(row)
    return out


def start_counts(rb, trajs, slice_len, rounds, strict=True):
    counts: dict = {}
    for _ in range(rounds):
        batch = rb.sample()
        trunc = batch["next", "truncated"]
        ends = (trunc.nonzero().squeeze(-1) + 1).tolist()
        lens = [b - a for a, b in zip([0] + ends[:-1], ends)]
        rows = batch["index"].tolist()
        picked = check_slices(rows, lens, trajs, slice_len if strict else None)
        for (j, k), n in zip(picked, lens):
            assert n == min(slice_len, len(trajs[j]) - k)
            counts[trajs[j][k]] = counts.get(trajs[j][k], 0) + 1
    return counts


def assert_follows(counts, priority, allowed):
    total = sum(counts.values())
    assert set(counts) <= set(allowed), f"drawn starts outside the valid ones: {set(counts) - set(allowed)}"
    mass = sum(priority[i] for i in allowed)
    expected = {i: total * priority[i] / mass for i in allowed}
    stat = sum((counts.get(i, 0) - e) ** 2 / e for i, e in expected.items())
    assert chi2_sf(stat, len(allowed) - 1) > 1e-3, stat


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_start_frequencies_follow_priorities(alpha):
    lengths, slice_len = [9, 3, 12, 6], 4
    rb, index, trajs = build(lengths, slice_len, alpha=alpha)
    prio = torch.rand(index.numel(), generator=torch.Generator().manual_seed(1)) * 4 + 0.5
    rb.update_priority(index, prio)
    q = ((prio.double() + 1e-8) ** alpha).tolist()
    counts = start_counts(rb, trajs, slice_len, 10)
    assert_follows(counts, q, valid_starts(trajs, slice_len))


def test_rejection_fallback_keeps_the_law():
    """Nearly all mass on steps that cannot start a slice: redraws fail, enumeration takes over."""
    lengths, slice_len = [8, 10], 5
    rb, index, trajs = build(lengths, slice_len)
    allowed = valid_starts(trajs, slice_len)
    prio = torch.full((index.numel(),), 1e6)
    prio[allowed] = torch.arange(1.0, len(allowed) + 1)
    rb.update_priority(index, prio)
    counts = start_counts(rb, trajs, slice_len, 5)
    assert_follows(counts, (prio.double() + 1e-8).tolist(), allowed)


def test_not_strict_short_trajectories_start_at_their_first_step():
    lengths, slice_len = [2, 7, 3], 5
    rb, index, trajs = build(lengths, slice_len, strict_length=False)
    prio = torch.rand(index.numel(), generator=torch.Generator().manual_seed(3)) + 0.2
    rb.update_priority(index, prio)
    counts = start_counts(rb, trajs, slice_len, 6, strict=False)
    allowed = valid_starts(trajs, slice_len, strict=False)
    assert {trajs[0][0], trajs[2][0]} <= set(counts)
    assert_follows(counts, (prio.double() + 1e-8).tolist(), allowed)


def test_priority_weight_and_tensordict_priority_update():
    lengths, slice_len = [10, 10, 10], 5
    rb, index, trajs = build(lengths, slice_len, beta=0.7)
    prio = torch.arange(1.0, 31.0)
    rb.update_priority(index, prio)
    batch, info = rb.sample(20, return_info=True)
    starts = batch["index"].view(4, 5)[:, 0]
    q = prio + 1e-8
    expected = ((q[starts] / q.min()) ** -0.7).repeat_interleave(5)
    torch.testing.assert_close(batch["priority_weight"], expected.float())
    # TorchRL's loop: write the new priority of every sampled step back
    batch["td_error"] = (batch["index"] == batch["index"][0]).double() * 100.0  # the step may sit in two slices
    rb.update_tensordict_priority(batch)
    assert float(rb.sampler._sum_tree[int(batch["index"][0])]) == pytest.approx(100.0 + 1e-8)


def test_wraparound_and_new_items_get_max_priority():
    capacity, slice_len = 30, 4
    sampler = PrioritizedSliceSampler(capacity, alpha=1.0, beta=1.0, slice_len=slice_len, traj_key="episode")
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity), sampler=sampler, batch_size=40, generator=torch.Generator().manual_seed(0)
    )
    stored = torch.zeros(capacity, dtype=torch.int64)
    written = 0
    for chunk in [20, 20, 7]:
        episode = torch.zeros(chunk, dtype=torch.int64)  # one id everywhere: only the cursor splits
        index = rb.extend(TensorDict(episode=episode, batch_size=[chunk]))
        stored[index] = episode
        written += chunk
        trajs = ref_trajectories(stored.tolist(), min(written, capacity), capacity, int(index[-1]), False)
        for _ in range(5):
            check_slices(rb.sample()["index"].tolist(), [slice_len] * 10, trajs, slice_len)
    rb.update_priority(torch.arange(capacity), torch.ones(capacity))
    rb.update_priority(torch.tensor([5]), torch.tensor([50.0]))
    index = rb.extend(TensorDict(episode=torch.ones(3, dtype=torch.int64), batch_size=[3]))
    assert rb.sampler._sum_tree[index].tolist() == pytest.approx([50.0] * 3)  # largest priority seen


def test_left_span_warns_and_state_dict():
    with pytest.warns(UserWarning, match="left span"):
        s = PrioritizedSliceSampler(10, alpha=1.0, beta=1.0, slice_len=3, span=True)
    assert s.span == (0, -1)
    rb, index, trajs = build([6, 9], 3, capacity=20, span=(False, True))
    rb.update_priority(index, torch.rand(15, generator=torch.Generator().manual_seed(0)) + 0.1)
    for _ in range(3):  # right span: any step starts a slice, cut at the trajectory end
        batch = rb.sample(30)
        ends = (batch["next", "truncated"].nonzero().squeeze(-1) + 1).tolist()
        lens = [b - a for a, b in zip([0] + ends[:-1], ends)]
        check_slices(batch["index"].tolist(), lens, trajs)
    state = rb.sampler.state_dict()
    other = PrioritizedSliceSampler(20, alpha=1.0, beta=0.5, slice_len=3, span=(False, True))
    other.load_state_dict(state)
    assert torch.equal(other._sum_tree[torch.arange(15)], rb.sampler._sum_tree[torch.arange(15)])
    rb.empty()
    assert float(rb.sampler._sum_tree.sum()) == 0.0
