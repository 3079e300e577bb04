"""HERReplayBuffer: relabelled goals and rewards against a loop reference of episode boundaries."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict

from rl_replay import HERReplayBuffer, LazyTensorStorage


def steps(pos0, n, done, traj=None):
    """n steps with global positions pos0.., achieved goal [pos, 0], desired goal [-1, -1]."""
    pos = torch.arange(pos0, pos0 + n)
    entries = {
        "pos": pos,
        "desired_goal": torch.full((n, 2), -1.0),
        "next": {
            "achieved_goal": torch.stack([pos.float(), torch.zeros(n)], -1),
            "desired_goal": torch.full((n, 2), -1.0),
            "reward": torch.full((n,), -5.0),
            "done": torch.as_tensor(done, dtype=torch.bool),
        },
    }
    if traj is not None:
        entries["traj"] = torch.as_tensor(traj)
    return TensorDict(entries, batch_size=[n])


def td_reward(td):
    return (td["next", "achieved_goal"] == td["desired_goal"]).all(-1).float()


def gym_reward(achieved, desired, info):
    return (achieved == desired).all(-1).float()


def reference_ranges(done_flags, traj_ids, written, cap):
    """Loop reference: for each global position, (episode start clamped to the oldest stored step, episode end)."""
    episode = []
    e = 0
    for p in range(written):
        if p > 0 and (done_flags[p - 1] or (traj_ids is not None and traj_ids[p] != traj_ids[p - 1])):
            e += 1
        episode.append(e)
    ranges = {}
    oldest = max(written - cap, 0)
    for p in range(oldest, written):
        members = [q for q in range(written) if episode[q] == episode[p]]
        ranges[p] = (max(members[0], oldest), members[-1])
    return ranges


def fill(rb, total, chunk_sizes, p_done=0.12, seed=0, with_traj=False):
    g = torch.Generator().manual_seed(seed)
    done = (torch.rand(total, generator=g) < p_done).tolist()
    traj = None
    if with_traj:  # trajectory ids change at random points, independent of done
        traj = torch.cumsum((torch.rand(total, generator=g) < 0.1).long(), 0).tolist()
    pos, i = 0, 0
    while pos < total:
        n = min(chunk_sizes[i % len(chunk_sizes)], total - pos)
        rb.extend(steps(pos, n, done[pos : pos + n], None if traj is None else traj[pos : pos + n]))
        pos += n
        i += 1
    return done, traj


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
@pytest.mark.parametrize("cap,total", [(500, 137), (40, 173)])
def test_relabelled_goals_within_episode(strategy, cap, total):
    rb = HERReplayBuffer(
        td_reward,
        strategy=strategy,
        her_ratio=0.75,
        storage=LazyTensorStorage(cap),
        batch_size=64,
        generator=torch.Generator().manual_seed(1),
    )
    done, _ = fill(rb, total, [7, 1, 30, 3])
    ref = reference_ranges(done, None, total, cap)
    for _ in range(5):
        batch = rb.sample()
        n_her = int(64 * 0.75)
        pos = batch["pos"].tolist()
        goal = batch["desired_goal"][:, 0].long().tolist()
        for i in range(64):
            if i >= n_her:  # untouched
                assert goal[i] == -1 and float(batch["next", "reward"][i]) == -5.0
                continue
            start, end = ref[pos[i]]
            if strategy == "final":
                assert goal[i] == end
            elif strategy == "future":
                assert pos[i] <= goal[i] <= end
            else:
                assert start <= goal[i] <= end
            assert batch["desired_goal"][i].tolist() == batch["next", "desired_goal"][i].tolist()
            assert float(batch["next", "reward"][i]) == float(goal[i] == pos[i])  # loop reward


def test_traj_key_boundaries():
    cap, total = 60, 150
    rb = HERReplayBuffer(
        gym_reward,
        strategy="episode",
        her_ratio=1.0,
        storage=LazyTensorStorage(cap),
        batch_size=128,
        traj_key="traj",
        generator=torch.Generator().manual_seed(2),
    )
    done, traj = fill(rb, total, [9, 4, 22], with_traj=True)
    ref = reference_ranges(done, traj, total, cap)
    batch = rb.sample()
    for p, gl, r in zip(
        batch["pos"].tolist(), batch["desired_goal"][:, 0].long().tolist(), batch["next", "reward"].tolist()
    ):
        start, end = ref[p]
        assert start <= gl <= end
        assert r == float(gl == p)


def test_goal_distribution_is_uniform():
    # one open episode of 6 steps: "episode" picks each step 1/6 of the time, "future" from step 2 each of 2..5 1/4
    for strategy, expected_support in [("episode", range(0, 6)), ("future", range(2, 6))]:
        rb = HERReplayBuffer(
            td_reward,
            strategy=strategy,
            her_ratio=1.0,
            storage=LazyTensorStorage(10),
            generator=torch.Generator().manual_seed(3),
        )
        rb.extend(steps(0, 6, [False] * 6))
        goals = []
        for _ in range(40):
            batch = rb.sample(200)
            keep = batch["pos"] == 2
            goals.append(batch["desired_goal"][keep, 0].long())
        goals = torch.cat(goals)
        counts = torch.bincount(goals, minlength=6)
        support = list(expected_support)
        assert counts.nonzero().flatten().tolist() == support
        freq = counts[support].float() / goals.numel()
        assert (freq - 1 / len(support)).abs().max() < 0.05


def test_open_episode_closed_by_later_write_and_add():
    rb = HERReplayBuffer(
        td_reward,
        strategy="final",
        her_ratio=1.0,
        storage=LazyTensorStorage(20),
        generator=torch.Generator().manual_seed(4),
    )
    rb.extend(steps(0, 4, [False] * 4))
    assert (rb.sample(16)["desired_goal"][:, 0] == 3).all()  # open episode: last step written so far
    for p in range(4, 7):
        rb.add(steps(p, 1, [p == 6])[0])
    rb.extend(steps(7, 3, [False, False, True]))
    batch = rb.sample(64)
    expected = torch.where(batch["pos"] <= 6, 6, 9)
    assert (batch["desired_goal"][:, 0].long() == expected).all()


def test_reward_shape_mismatch_and_bad_input_raise_before_writing():
    def bad(td):
        return td_reward(td).unsqueeze(-1)

    rb = HERReplayBuffer(bad, her_ratio=1.0, storage=LazyTensorStorage(10))
    rb.extend(steps(0, 3, [False, False, True]))
    with pytest.raises(ValueError, match="trailing singleton"):
        rb.sample(4)
    rb = HERReplayBuffer(td_reward, storage=LazyTensorStorage(10))
    data = steps(0, 3, [False] * 3).exclude(("next", "achieved_goal"))
    with pytest.raises(KeyError, match="achieved_goal"):
        rb.extend(data)
    data = steps(0, 3, [False] * 3)
    data.set(("next", "done"), torch.zeros(3, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="end_key"):
        rb.extend(data)
    assert len(rb) == 0
    with pytest.raises(ValueError, match="her_ratio"):
        HERReplayBuffer(td_reward, her_ratio=1.5, storage=LazyTensorStorage(10))
    with pytest.raises(ValueError, match="strategy"):
        HERReplayBuffer(td_reward, strategy="random", storage=LazyTensorStorage(10))


def test_state_dict_round_trip_and_empty():
    def make():
        return HERReplayBuffer(
            td_reward, storage=LazyTensorStorage(30), batch_size=16, generator=torch.Generator().manual_seed(5)
        )

    a = make()
    fill(a, 45, [8, 5])
    b = make()
    fill(b, 45, [8, 5])  # same items in b's storage
    b.load_state_dict(a.state_dict())
    assert (a._ep_end == b._ep_end).all() and (a._ep_start == b._ep_start).all()
    for _ in range(3):
        sa, sb = a.sample(), b.sample()
        assert (sa["desired_goal"] == sb["desired_goal"]).all()
    a.empty()
    assert len(a) == 0 and a._open_start == -1 and (a._ep_end == -1).all()


@pytest.mark.parametrize("total", [25, 77])  # not full / wrapped around
def test_bookkeeping_rebuilt_from_storage_equals_incremental(total):
    rb = HERReplayBuffer(
        td_reward,
        storage=LazyTensorStorage(30),
        traj_key="traj",
        batch_size=16,
        generator=torch.Generator().manual_seed(6),
    )
    fill(rb, total, [8, 5, 1], with_traj=True)
    state = rb.state_dict()
    del state["her"]  # e.g. a checkpoint that holds only items, sampler and writer
    rebuilt = HERReplayBuffer(
        td_reward,
        storage=LazyTensorStorage(30),
        traj_key="traj",
        batch_size=16,
        generator=torch.Generator().manual_seed(6),
    )
    fill(rebuilt, total, [8, 5, 1], with_traj=True)  # same items
    rebuilt._ep_start.fill_(12345)  # bookkeeping lost: load_state_dict without "her" rebuilds it
    rebuilt._ep_end.fill_(-7)
    rebuilt._open_start, rebuilt._last_traj = 3, None
    rebuilt.load_state_dict(state)
    cap, oldest = 30, max(total - 30, 0)
    slots = torch.arange(oldest, total) % cap
    assert (rebuilt._ep_end[slots] == rb._ep_end[slots]).all()
    assert (rebuilt._ep_start[slots].clamp_min(oldest) == rb._ep_start[slots].clamp_min(oldest)).all()
    assert rebuilt._last_traj == rb._last_traj
    assert (rebuilt.sample()["desired_goal"] == rb.sample()["desired_goal"]).all()


def test_dumps_loads_restore_same_samples(tmp_path):
    def make():
        return HERReplayBuffer(
            td_reward, storage=LazyTensorStorage(30), batch_size=16, generator=torch.Generator().manual_seed(8)
        )

    a = make()
    fill(a, 45, [8, 5])
    a.dumps(tmp_path / "her_ckpt")
    b = make()
    b.loads(tmp_path / "her_ckpt")
    for _ in range(3):
        assert (a.sample()["desired_goal"] == b.sample()["desired_goal"]).all()
