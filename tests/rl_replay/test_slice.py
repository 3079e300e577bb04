"""SliceSampler / SliceSamplerWithoutReplacement against a loop reference of the stored trajectories."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tdict import TensorDict

from rl_replay import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer
from rl_replay.samplers.slice import SliceSampler, SliceSamplerWithoutReplacement


# ---------------------------------------------------------------------- reference
def ref_trajectories(signal: list, n_valid: int, capacity: int, last_row: int, is_end: bool) -> list[list[int]]:
    """Trajectories as lists of physical rows in time order (a plain loop over the storage).

    The oldest row follows the newest written one when the storage is full; the newest row always
    ends a trajectory (what follows it physically is older data).
    """
    if n_valid == capacity:
        order = [(last_row + 1 + i) % capacity for i in range(capacity)]
    else:
        order = list(range(n_valid))
    trajs, cur = [], []
    for k, p in enumerate(order):
        cur.append(p)
        last = k == len(order) - 1
        end = bool(signal[p]) if is_end else (not last and signal[order[k + 1]] != signal[p])
        if end or last:
            trajs.append(cur)
            cur = []
    return trajs


def position_map(trajs: list[list[int]]) -> dict:
    return {row: (j, k) for j, t in enumerate(trajs) for k, row in enumerate(t)}


def check_slices(rows: list[int], lengths: list[int], trajs: list[list[int]], slice_len=None) -> list[tuple]:
    """Every slice lies in one trajectory, in consecutive time steps; returns (traj, start) per slice."""
    where = position_map(trajs)
    out, pos = [], 0
    for n in lengths:
        chunk = rows[pos : pos + n]
        pos += n
        j, k0 = where[chunk[0]]
        for i, row in enumerate(chunk):
            assert where[row] == (j, k0 + i), f"slice {chunk} leaves trajectory {trajs[j]}"
        if slice_len is not None:
            assert n == slice_len
        out.append((j, k0))
    assert pos == len(rows)
    return out


def make_data(done: torch.Tensor, **extra) -> TensorDict:
    n = done.shape[0]
    return TensorDict(step=torch.arange(n), next=TensorDict(done=done, batch_size=[n]), batch_size=[n], **extra)


def make_rb(capacity: int, sampler, batch_size: int, seed: int = 0, ndim: int = 1) -> TensorDictReplayBuffer:
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity, ndim=ndim),
        sampler=sampler,
        batch_size=batch_size,
        generator=torch.Generator().manual_seed(seed),
    )


def chi2_sf(stat: float, dof: int) -> float:
    return float(
        torch.special.gammaincc(
            torch.tensor(dof / 2.0, dtype=torch.float64), torch.tensor(stat / 2.0, dtype=torch.float64)
        )
    )


def random_done(n: int, p: float, seed: int) -> torch.Tensor:
    return torch.rand(n, generator=torch.Generator().manual_seed(seed)) < p


# ---------------------------------------------------------------------- basic contract
@pytest.mark.parametrize("mode", ["end", "traj", "auto_traj", "auto_end"])
def test_slices_within_one_trajectory(mode):
    done = random_done(300, 0.05, 1)
    episode = torch.cat([torch.zeros(1, dtype=torch.int64), done[:-1].long().cumsum(0)])
    data = make_data(done, episode=episode) if mode != "auto_end" else make_data(done)
    kw = {"end": dict(end_key=("next", "done")), "traj": dict(traj_key="episode")}.get(mode, {})
    sampler = SliceSampler(slice_len=8, **kw)
    rb = make_rb(1000, sampler, 80)
    rb.extend(data)
    trajs = ref_trajectories(done.tolist(), 300, 1000, 299, True)
    seen = set()
    for _ in range(50):
        batch = rb.sample()
        assert batch.batch_size == torch.Size([80])
        rows = batch["index"].tolist()
        assert rows == batch["step"].tolist()
        seen.update(j for j, _ in check_slices(rows, [8] * 10, trajs, 8))
    eligible = {j for j, t in enumerate(trajs) if len(t) >= 8}
    assert seen == eligible  # strict_length: exactly the long-enough trajectories show up


def test_num_slices_and_errors():
    rb = make_rb(100, SliceSampler(num_slices=4), 20)
    rb.extend(make_data(torch.arange(50) % 10 == 9))
    assert rb.sample().batch_size == torch.Size([20])
    with pytest.raises(RuntimeError, match="divisible by num_slices"):
        rb.sample(22)
    with pytest.raises(TypeError, match="exactly one of num_slices and slice_len"):
        SliceSampler(num_slices=2, slice_len=3)
    with pytest.raises(TypeError, match="exactly one"):
        SliceSampler()
    with pytest.raises(ValueError, match="slice_len must be a positive int"):
        SliceSampler(slice_len=0)
    with pytest.raises(ValueError, match="pad_output=True is incompatible with strict_length=True"):
        SliceSampler(slice_len=3, pad_output=True)
    with pytest.raises(RuntimeError, match="cache_values=True"):
        SliceSampler(slice_len=3, ends=torch.zeros(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="span"):
        SliceSampler(slice_len=3, span=-2)
    rb = make_rb(100, SliceSampler(slice_len=4, traj_key="episode", end_key=("next", "missing")), 8)
    rb.extend(make_data(torch.zeros(10, dtype=torch.bool)))
    with pytest.raises(KeyError, match=r"none of the boundary keys .*episode.*missing.* is in the storage"):
        rb.sample()
    # a traj_key that is not stored falls back to the end flags (as TorchRL)
    rb = make_rb(100, SliceSampler(slice_len=5, traj_key="episode"), 10)
    rb.extend(make_data(torch.arange(10) % 5 == 4))
    steps = rb.sample()["step"].view(2, 5)
    assert bool(((steps % 5) == torch.arange(5)).all())
    rb = make_rb(100, SliceSampler(slice_len=20), 40)
    rb.extend(make_data(torch.arange(30) % 10 == 9))
    with pytest.raises(RuntimeError, match="no trajectory is at least 20 steps long"):
        rb.sample()
    with pytest.raises(RuntimeError, match="empty"):
        SliceSampler(slice_len=2).sample(LazyTensorStorage(10), 4)


def test_info_entries():
    n = 40
    done = torch.arange(n) % 10 == 9
    term = torch.arange(n) % 20 == 19
    data = make_data(done, is_init=torch.arange(n) % 10 == 0)
    data["next", "terminated"] = term
    rb = make_rb(100, SliceSampler(slice_len=4), 12)
    rb.extend(data)
    batch, info = rb.sample(return_info=True)
    rows = batch["index"]
    truncated = torch.zeros(12, dtype=torch.bool)
    truncated[3::4] = True
    assert torch.equal(batch["next", "truncated"], truncated)
    assert batch["next", "truncated"].shape == torch.Size([12])  # no trailing singleton dim
    assert torch.equal(batch["next", "done"], done[rows] | truncated)
    assert torch.equal(batch["next", "terminated"], term[rows])
    first = torch.zeros(12, dtype=torch.bool)
    first[0::4] = True
    assert torch.equal(info["is_init"], (rows % 10 == 0) | first)
    # without stored terminated/done: truncated alone, terminated False
    rb = make_rb(100, SliceSampler(slice_len=4, traj_key="episode"), 8)
    rb.extend(TensorDict(episode=torch.arange(20) // 10, batch_size=[20]))
    batch = rb.sample()
    assert torch.equal(batch["next", "done"], batch["next", "truncated"])
    assert not batch["next", "terminated"].any()
    # truncated_key=None: no entries
    rb = make_rb(100, SliceSampler(slice_len=4, traj_key="episode", truncated_key=None), 8)
    rb.extend(TensorDict(episode=torch.arange(20) // 10, batch_size=[20]))
    assert "next" not in rb.sample().keys()


# ---------------------------------------------------------------------- wrap-around storages
@pytest.mark.parametrize("is_end", [True, False])
def test_wraparound_never_stitches(is_end):
    capacity, slice_len = 50, 6
    rb = make_rb(capacity, SliceSampler(slice_len=slice_len, **({} if is_end else {"traj_key": "episode"})), 30, seed=3)
    gen = torch.Generator().manual_seed(7)
    stored = torch.zeros(capacity, dtype=torch.int64)
    written = 0
    for chunk in [23, 23, 23, 17, 40, 1, 1, 9]:
        if is_end:  # sparse ends: long trajectories cross the physical end and reach the cursor
            signal = torch.rand(chunk, generator=gen) < 0.04
            data = make_data(signal)
        else:  # the same id everywhere: only the cursor separates newest from oldest
            signal = torch.zeros(chunk, dtype=torch.int64)
            data = make_data(torch.zeros(chunk, dtype=torch.bool), episode=signal)
        index = rb.extend(data)
        stored[index] = signal.long()
        written += chunk
        last_row = int(index[-1])
        n_valid = min(written, capacity)
        trajs = ref_trajectories(stored.tolist(), n_valid, capacity, last_row, is_end)
        for _ in range(10):
            batch = rb.sample()
            check_slices(batch["index"].tolist(), [slice_len] * 5, trajs, slice_len)
        if n_valid == capacity:
            newest, oldest = last_row, (last_row + 1) % capacity
            for t in trajs:  # the newest row ends its trajectory: the oldest never follows it
                assert newest not in t[:-1] and (oldest not in t or t[0] == oldest)


def test_trajectory_crossing_physical_end_is_followed():
    capacity = 20
    rb = make_rb(capacity, SliceSampler(slice_len=6), 60, seed=0)
    rb.extend(make_data(torch.zeros(15, dtype=torch.bool)))
    rb.extend(make_data(torch.tensor([False] * 7 + [True] + [False] * 2)))  # rows 15..19, 0..4
    trajs = ref_trajectories((torch.arange(20) == 2).tolist(), 20, 20, 4, True)
    assert trajs == [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 0, 1, 2], [3, 4]]
    crossing = False
    for _ in range(20):
        rows = rb.sample()["index"].tolist()
        check_slices(rows, [6] * 10, trajs, 6)
        crossing |= any(rows[i] == 19 and rows[i + 1] == 0 for i in range(len(rows) - 1))
    assert crossing


@settings(max_examples=40)
@given(
    capacity=st.integers(5, 40),
    chunks=st.lists(st.tuples(st.integers(1, 60), st.integers(0, 2**16)), min_size=1, max_size=8),
    traj_mode=st.booleans(),
    empty_at=st.integers(-1, 7),
    sync_every=st.booleans(),
)
def test_incremental_index_matches_reference(capacity, chunks, traj_mode, empty_at, sync_every):
    """The boundary index kept from extend() equals the loop reference after any write sequence."""
    sampler = SliceSampler(slice_len=1, **({"traj_key": "episode"} if traj_mode else {}))
    rb = make_rb(capacity, sampler, 1)
    stored = torch.zeros(capacity, dtype=torch.int64)
    written, last_row = 0, -1
    for i, (size, seed) in enumerate(chunks):
        if i == empty_at:
            rb.empty()
            written = 0
        gen = torch.Generator().manual_seed(seed)
        if traj_mode:
            signal = (torch.rand(size, generator=gen) < 0.3).long().cumsum(0) % 3
            data = make_data(torch.zeros(size, dtype=torch.bool), episode=signal)
        else:
            signal = (torch.rand(size, generator=gen) < 0.3).long()
            data = make_data(signal.bool())
        index = rb.extend(data)
        stored[index] = signal[-index.numel() :]
        written += size
        last_row = int(index[-1])
        if not sync_every and i < len(chunks) - 1:
            continue  # several writes (maybe more than the capacity) before the index catches up
        index_ = sampler._sync(rb.storage)
        start, length, _ = index_.trajectories()
        got = [
            [(t + index_.phase) % capacity for t in range(s, s + n)] for s, n in zip(start.tolist(), length.tolist())
        ]
        expected = ref_trajectories(stored.tolist(), min(written, capacity), capacity, last_row, not traj_mode)
        assert got == expected


def test_unnotified_writes_and_state_dict():
    storage = LazyTensorStorage(30)
    done = torch.arange(30) % 10 == 9
    storage.set(torch.arange(30), make_data(done))
    sampler = SliceSampler(slice_len=5)
    sampler._rng = torch.Generator().manual_seed(0)
    index, info = sampler.sample(storage, 10)  # no extend hook: rebuilt from the storage
    check_slices(index.tolist(), [5, 5], ref_trajectories(done.tolist(), 30, 30, 29, True), 5)
    # a storage written by another buffer in a new layout: rebuilt on the length change
    rb = make_rb(30, sampler, 10)
    rb.extend(make_data(torch.arange(12) % 4 == 3))
    with pytest.raises(RuntimeError, match="no trajectory is at least 5"):
        rb.sample()
    # state_dict is JSON-able; a fresh sampler loaded with it samples the same slices
    rb = make_rb(30, SliceSampler(slice_len=3), 9, seed=5)
    rb.extend(make_data(random_done(40, 0.2, 3)))
    state = json.loads(json.dumps(rb.state_dict()["_sampler"]))
    rb2 = TensorDictReplayBuffer(
        storage=rb.storage, sampler=SliceSampler(slice_len=3), batch_size=9, generator=torch.Generator().manual_seed(5)
    )
    rb2.sampler.load_state_dict(state)
    assert torch.equal(rb.sample()["index"], rb2.sample()["index"])


def test_static_ends_and_trajectories():
    ends = torch.zeros(20, dtype=torch.bool)
    ends[[4, 12]] = True  # the run after row 12 wraps to rows 0..4
    storage = LazyTensorStorage(20)
    storage.set(torch.arange(20), TensorDict(x=torch.arange(20), batch_size=[20]))
    for kw in (dict(ends=ends), dict(trajectories=torch.tensor([0] * 5 + [1] * 8 + [0] * 7))):
        sampler = SliceSampler(slice_len=6, cache_values=True, **kw)
        sampler._rng = torch.Generator().manual_seed(1)
        trajs = [[13, 14, 15, 16, 17, 18, 19, 0, 1, 2, 3, 4], [5, 6, 7, 8, 9, 10, 11, 12]]
        for _ in range(10):
            index, _ = sampler.sample(storage, 30)
            check_slices(index.tolist(), [6] * 5, trajs, 6)


# ---------------------------------------------------------------------- short slices, padding, span
def test_not_strict_short_slices_and_padding():
    lengths = [2, 10, 3, 12]
    done = torch.cat([torch.arange(n) == n - 1 for n in lengths])
    trajs = ref_trajectories(done.tolist(), len(done), 100, len(done) - 1, True)
    rb = make_rb(100, SliceSampler(slice_len=5, strict_length=False), 40, seed=2)
    rb.extend(make_data(done))
    seen = set()
    for _ in range(30):
        batch = rb.sample()
        trunc = batch["next", "truncated"]
        ends = (trunc.nonzero().squeeze(-1) + 1).tolist()
        slice_lengths = [b - a for a, b in zip([0] + ends[:-1], ends)]
        assert len(slice_lengths) == 8 and sum(slice_lengths) == batch.batch_size[0]
        picked = check_slices(batch["index"].tolist(), slice_lengths, trajs)
        for (j, _), n in zip(picked, slice_lengths):
            assert n == min(len(trajs[j]), 5)
            seen.add(j)
    assert seen == {0, 1, 2, 3}
    rb = make_rb(100, SliceSampler(slice_len=5, strict_length=False, pad_output=True), 40, seed=2)
    rb.extend(make_data(done))
    for _ in range(20):
        batch = rb.sample()
        assert batch.batch_size == torch.Size([40])
        mask = batch["collector", "mask"].view(8, 5)
        rows = batch["index"].view(8, 5)
        real = mask.sum(1)
        for r, m, n in zip(rows.tolist(), mask.tolist(), real.tolist()):
            assert m == [True] * n + [False] * (5 - n)
            assert r[n:] == [r[n - 1]] * (5 - n)  # padding repeats the last real step
            check_slices(r[:n], [n], trajs)
        trunc = batch["next", "truncated"].view(8, 5)
        assert torch.equal(trunc.nonzero()[:, 1], real - 1)


@pytest.mark.parametrize("span,min_inside", [(True, 1), (2, 4), ((True, False), 1), ((False, 3), 3)])
def test_span(span, min_inside):
    slice_len = 6
    lengths = [8, 9, 15]
    done = torch.cat([torch.arange(n) == n - 1 for n in lengths])
    trajs = ref_trajectories(done.tolist(), len(done), 100, len(done) - 1, True)
    rb = make_rb(100, SliceSampler(slice_len=slice_len, span=span), 60, seed=4)
    rb.extend(make_data(done))
    left, right = span if isinstance(span, tuple) else (span, span)
    got_short_left = got_short_right = False
    for _ in range(40):
        batch = rb.sample()
        trunc = batch["next", "truncated"]
        ends = (trunc.nonzero().squeeze(-1) + 1).tolist()
        slice_lengths = [b - a for a, b in zip([0] + ends[:-1], ends)]
        picked = check_slices(batch["index"].tolist(), slice_lengths, trajs)
        for (j, k0), n in zip(picked, slice_lengths):
            assert min_inside <= n <= slice_len
            if n < slice_len:
                at_start, at_end = k0 == 0, k0 + n == len(trajs[j])
                assert (at_start and left) or (at_end and right)
                got_short_left |= at_start and not at_end
                got_short_right |= at_end and not at_start
    assert got_short_left == bool(left) and got_short_right == bool(right)


# ---------------------------------------------------------------------- distribution, ndim=2
def test_distribution_uniform_trajectory_then_start():
    """TorchRL's law: a trajectory uniformly among the eligible ones, then a uniform start in it."""
    lengths = [4, 7, 12, 5, 9]
    slice_len = 4
    done = torch.cat([torch.arange(n) == n - 1 for n in lengths])
    trajs = ref_trajectories(done.tolist(), len(done), 100, len(done) - 1, True)
    rb = make_rb(100, SliceSampler(slice_len=slice_len), 4 * 500, seed=11)
    rb.extend(make_data(done))
    counts: dict = {}
    for _ in range(8):
        for pair in check_slices(rb.sample()["index"].tolist(), [4] * 500, trajs, 4):
            counts[pair] = counts.get(pair, 0) + 1
    total = sum(counts.values())
    cells = [(j, k) for j, t in enumerate(trajs) for k in range(len(t) - slice_len + 1)]
    assert set(counts) <= set(cells)
    expected = {(j, k): total / len(trajs) / (len(trajs[j]) - slice_len + 1) for j, k in cells}
    stat = sum((counts.get(c, 0) - e) ** 2 / e for c, e in expected.items())
    assert chi2_sf(stat, len(cells) - 1) > 1e-3


def test_ndim2_storage_columns_are_separate_sequences():
    T, E, slice_len = 30, 3, 4
    gen = torch.Generator().manual_seed(0)
    done = torch.rand(T, E, generator=gen) < 0.15
    data = TensorDict(
        step=torch.arange(T * E).view(T, E), next=TensorDict(done=done, batch_size=[T, E]), batch_size=[T, E]
    )
    for kind in ("end", "traj"):
        if kind == "traj":
            data["traj"] = done.long().cumsum(0) - done.long() + 100 * torch.arange(E)
            sampler = SliceSampler(slice_len=slice_len, traj_key="traj")
        else:
            sampler = SliceSampler(slice_len=slice_len)
        storage = LazyTensorStorage(20 * E, ndim=2)  # 20 rows: 30 written steps wrap around
        rb = TensorDictReplayBuffer(
            storage=storage, sampler=sampler, batch_size=40, generator=torch.Generator().manual_seed(1), dim_extend=0
        )
        rb.extend(data[:12])
        rb.extend(data[12:])
        last_row = (T - 1) % 20
        col_trajs = []
        for e in range(E):
            stored = [None] * 20
            for t in range(T):
                stored[t % 20] = bool(done[t, e])
            col_trajs += [[(r, e) for r in tr] for tr in ref_trajectories(stored, 20, 20, last_row, True)]
        eligible = {j for j, t in enumerate(col_trajs) if len(t) >= slice_len}
        seen = set()
        for _ in range(20):
            batch, info = rb.sample(return_info=True)
            rows, cols = info["index"]
            pairs = list(zip(rows.tolist(), cols.tolist()))
            assert torch.equal(
                batch["step"],
                data["step"][torch.tensor([(T - 20 + (r - last_row - 1) % 20) for r in rows.tolist()]), cols],
            )
            where = {p: (j, k) for j, t in enumerate(col_trajs) for k, p in enumerate(t)}
            for s in range(10):
                chunk = pairs[s * 4 : s * 4 + 4]
                j, k0 = where[chunk[0]]
                assert [where[p] for p in chunk] == [(j, k0 + i) for i in range(4)]
                seen.add(j)
        assert seen == eligible


# ---------------------------------------------------------------------- without replacement
def test_without_replacement_each_trajectory_once_per_epoch():
    lengths = [3, 8, 10, 6, 9, 2, 7]
    done = torch.cat([torch.arange(n) == n - 1 for n in lengths])
    trajs = ref_trajectories(done.tolist(), len(done), 200, len(done) - 1, True)
    eligible = sorted(j for j, t in enumerate(trajs) if len(t) >= 5)
    sampler = SliceSamplerWithoutReplacement(slice_len=5)
    rb = make_rb(200, sampler, 10, seed=0)
    rb.extend(make_data(done))
    for _ in range(3):  # epochs
        picked = []
        batches = list(rb)
        assert [b.batch_size[0] for b in batches] == [10, 10, 5]
        for b in batches:
            picked += [j for j, _ in check_slices(b["index"].tolist(), [5] * (b.batch_size[0] // 5), trajs, 5)]
        assert sorted(picked) == eligible
    sampler = SliceSamplerWithoutReplacement(slice_len=5, drop_last=True, shuffle=False)
    rb = make_rb(200, sampler, 10)
    rb.extend(make_data(done))
    batches = list(rb)
    assert len(batches) == 2 and all(b.batch_size[0] == 10 for b in batches)
    # a write starts a new epoch
    rb.sample()
    rb.extend(make_data(torch.tensor([False] * 5 + [True])))
    assert not sampler.ran_out
    state = json.loads(json.dumps(sampler.state_dict()))
    assert set(state) >= {"order", "pos", "ran_out"}


def test_plain_replay_buffer_and_list_of_info():
    rb = ReplayBuffer(storage=LazyTensorStorage(50), sampler=SliceSampler(slice_len=5), batch_size=10)
    rb.extend(make_data(torch.arange(20) % 10 == 9))
    batch, info = rb.sample(return_info=True)
    assert batch.batch_size == torch.Size([10])
    assert info[("next", "truncated")].tolist() == [False] * 4 + [True] + [False] * 4 + [True]


def test_seeded_sampling_is_reproducible():
    done = random_done(500, 0.03, 0)
    outs = []
    for _ in range(2):
        rb = make_rb(300, SliceSampler(slice_len=7), 70, seed=42)
        rb.extend(make_data(done))
        outs.append(torch.cat([rb.sample()["index"] for _ in range(3)]))
    assert torch.equal(*outs)
