"""CompactTensorStorage: every read equals what a LazyTensorStorage fed the same writes returns
(streams with episode ends, wrap-around, out-of-order writes, [time, env] rows), the side table stays
small and does not leak, bad writes change nothing, and the memory saving is real."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_replay import (
    CompactTensorStorage,
    LazyTensorStorage,
    ReplayBuffer,
    RoundRobinWriter,
)
from tdict import TensorDict


def _stream(
    T: int, env: int | None = None, seed: int = 0, ep_len: float = 7.0, obs_shape=(3,), high: int = 4
) -> TensorDict:
    """Transitions of one stream (or ``env`` streams as [T, env]): next obs of t is obs of t+1 unless done."""
    g = torch.Generator().manual_seed(seed)
    shape = (T,) if env is None else (T, env)
    # few distinct values by default: coincidental equalities (linked by value) get exercised too
    obs = torch.randint(0, high, (*shape, *obs_shape), generator=g).float()
    final = torch.randint(0, high, (*shape, *obs_shape), generator=g).float()
    done = torch.rand(shape, generator=g) < 1.0 / ep_len
    nobs = final.clone()
    feat = (1,) * len(obs_shape)
    nobs[:-1] = torch.where(done[:-1].view(*done[:-1].shape, *feat), final[:-1], obs[1:])
    step = torch.arange(T).view(T, *([1] * (len(shape) - 1))).expand(shape).clone()
    return TensorDict(
        {
            "observation": obs,
            "step": step,
            "done": torch.zeros(shape, dtype=torch.bool),
            "next": {"observation": nobs, "done": done, "reward": torch.randn(shape, generator=g)},
        },
        batch_size=list(shape),
    )


def _assert_td_equal(a: TensorDict, b: TensorDict) -> None:
    assert a.batch_size == b.batch_size
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key, value in b.items(True, True):
        got = a.get(key)
        assert got.dtype == value.dtype, key
        assert torch.equal(got, value), key


def _replay(ndim: int, env: int | None, seed: int, chunks: list, random_writes: list, rows: int = 37) -> None:
    """Feeds the same writes to both storages and compares every stored item after each one."""
    data = _stream(sum(chunks), env, seed)
    per_row = env if ndim == 2 else 1
    compact, ref = CompactTensorStorage(rows * per_row, ndim=ndim), LazyTensorStorage(rows * per_row, ndim=ndim)
    wc, wr = RoundRobinWriter(), RoundRobinWriter()
    wc.register_storage(compact)
    wr.register_storage(ref)
    g = torch.Generator().manual_seed(seed + 1)
    t = 0
    for i, k in enumerate(chunks):
        chunk = data[t : t + k]
        if i > 0 and random_writes[i % len(random_writes)]:
            index = torch.randperm(rows, generator=g)[: min(k, rows)]
            chunk = chunk[: index.shape[0]]
            compact.set(index, chunk.clone())
            ref.set(index, chunk.clone())
        else:
            wc.extend(chunk.clone())
            wr.extend(chunk.clone())
        t += k
        assert len(compact) == len(ref)
        every = torch.arange(int(ref._len_t))
        _assert_td_equal(compact.get(every), ref.get(every))
        assert compact.side_table_size <= compact._side_capacity


@pytest.mark.parametrize("ndim,env", [(1, None), (2, 3), (1, 2)])
@pytest.mark.parametrize("seed", range(4))
def test_reads_equal_a_reference_storage(ndim, env, seed):
    g = torch.Generator().manual_seed(seed)
    chunks = torch.randint(1, 30, (12,), generator=g).tolist()
    _replay(ndim, env, seed, chunks, random_writes=[False, False, False, True])


@settings(max_examples=25)
@given(
    chunks=st.lists(st.integers(1, 45), min_size=1, max_size=10),
    random_writes=st.lists(st.booleans(), min_size=1, max_size=4),
    seed=st.integers(0, 1000),
)
def test_property_reads_equal_a_reference_storage(chunks, random_writes, seed):
    _replay(1, None, seed, chunks, random_writes, rows=23)


def test_sampled_batches_equal_reference_ndim2():
    data = _stream(60, 4, seed=3)
    rb_c = ReplayBuffer(
        storage=CompactTensorStorage(80, ndim=2),
        batch_size=50,
        generator=torch.Generator().manual_seed(0),
        dim_extend=0,  # the data is [time, env] already
    )
    rb_r = ReplayBuffer(
        storage=LazyTensorStorage(80, ndim=2), batch_size=50, generator=torch.Generator().manual_seed(0), dim_extend=0
    )
    for start in range(0, 60, 9):
        rb_c.extend(data[start : start + 9])
        rb_r.extend(data[start : start + 9])
    for _ in range(4):
        _assert_td_equal(rb_c.sample(), rb_r.sample())
    _assert_td_equal(rb_c.storage.get((3, 1)), rb_r.storage.get((3, 1)))
    _assert_td_equal(rb_c.storage.get(slice(2, 5)), rb_r.storage.get(slice(2, 5)))


def test_side_table_holds_episode_ends_plus_the_newest_item_and_does_not_leak():
    data = _stream(1000, seed=5, ep_len=20.0, obs_shape=(6,), high=10**6)  # no coincidental equalities
    s = CompactTensorStorage(100)
    rb = ReplayBuffer(storage=s)
    for start in range(0, 1000, 13):  # ten wraps around the storage
        rb.extend(data[start : start + 13])
        stored = s.get(torch.arange(len(s)))
        newest = rb.writer._cursor - 1
        done = stored["next", "done"].clone()
        done[newest] = True  # the newest item's successor is not written yet
        assert s.side_table_size == int(done.sum())
    assert s._side_capacity <= 64  # bounded by the episode ends in the storage, not by the writes
    _assert_td_equal(s.get(torch.arange(100)), _reference(data, 100))


def _reference(data: TensorDict, capacity: int) -> TensorDict:
    ref = LazyTensorStorage(capacity)
    rb = ReplayBuffer(storage=ref)
    for start in range(0, data.shape[0], 13):
        rb.extend(data[start : start + 13])
    return ref.get(torch.arange(capacity))


def test_single_item_adds_and_explicit_obs_keys():
    data = _stream(30, seed=2)
    s = CompactTensorStorage(10, obs_keys=["observation"])
    rb = ReplayBuffer(storage=s)
    for i in range(30):
        rb.add(data[i])
    assert s.obs_keys == [("observation",)]
    assert ("next", "done") in s._storage.keys(True, True)  # not deduplicated: not in obs_keys
    _assert_td_equal(s.get(torch.arange(10)), _reference_add(data, 10))
    _assert_td_equal(s.get(4), _reference_add(data, 10)[4])


def _reference_add(data: TensorDict, capacity: int) -> TensorDict:
    rb = ReplayBuffer(storage=LazyTensorStorage(capacity))
    for i in range(data.shape[0]):  # (LazyTensorStorage cannot take add() as its first write)
        rb.extend(data[i : i + 1])
    return rb.storage.get(torch.arange(capacity))


def test_obs_keys_must_exist():
    with pytest.raises(KeyError, match="pixels"):
        CompactTensorStorage(10, obs_keys=["pixels"]).set(torch.arange(3), _stream(3))


def test_nan_and_negative_zero_are_rebuilt_bit_exactly():
    obs = torch.tensor([[float("nan")], [0.0], [-0.0], [1.0]])
    data = TensorDict(
        {"observation": obs[:3], "next": {"observation": torch.tensor([[float("nan")], [-0.0], [0.0]])}}, batch_size=[3]
    )
    s = CompactTensorStorage(5)
    s.set(torch.arange(3), data)
    out = s.get(torch.arange(3))["next", "observation"]
    assert torch.equal(out.view(torch.int32), data["next", "observation"].view(torch.int32))


@pytest.mark.parametrize(
    "bad",
    [
        lambda d: d.exclude(("next", "observation")),  # missing key
        lambda d: d.exclude("step"),
        lambda d: d.set("observation", torch.zeros(d.shape[0], 4)),  # wrong shape
        lambda d: d.set(("next", "observation"), torch.zeros(d.shape[0], 1)),  # broadcastable, still wrong
    ],
)
def test_bad_extend_raises_before_writing(bad):
    data = _stream(40, seed=1)
    rb = ReplayBuffer(storage=CompactTensorStorage(20))
    rb.extend(data[:15])
    s = rb.storage
    before = s.get(torch.arange(20))
    state = (s._linked.clone(), s._side_slot.clone(), s.side_table_size)
    with pytest.raises((KeyError, ValueError)) as err:
        rb.extend(bad(data[15:25].clone()))
    assert "CompactTensorStorage.set" in str(err.value)
    assert len(rb) == 15 and rb.writer._cursor == 15
    _assert_td_equal(s.get(torch.arange(20)), before)
    assert torch.equal(s._linked, state[0]) and torch.equal(s._side_slot, state[1]) and s.side_table_size == state[2]


def test_repeated_rows_refused():
    s = CompactTensorStorage(10)
    with pytest.raises(ValueError, match="repeated"):
        s.set(torch.tensor([1, 1]), _stream(2))


def test_empty_then_reuse():
    data = _stream(30, seed=4)
    rb = ReplayBuffer(storage=CompactTensorStorage(12))
    rb.extend(data[:20])
    rb.empty()
    assert len(rb) == 0 and rb.storage.side_table_size == 0
    rb.extend(data[20:])
    _assert_td_equal(rb.storage.get(torch.arange(10)), data[20:])


def test_share_memory_refused():
    with pytest.raises(NotImplementedError, match="LazyMemmapStorage"):
        ReplayBuffer(storage=CompactTensorStorage(4)).share_memory_()


def _nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    return sum(_nbytes(v) for v in obj.values(True, True))


def test_memory_saving_for_pixel_observations():
    T, cap = 400, 256
    g = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (T + 1, 3, 32, 32), dtype=torch.uint8, generator=g)
    done = torch.zeros(T, dtype=torch.bool)
    done[49::50] = True  # episodes of 50 steps; the final frame differs from the next reset frame
    nxt = pixels[1:].clone()
    nxt[done] = torch.randint(0, 256, (int(done.sum()), 3, 32, 32), dtype=torch.uint8, generator=g)
    data = TensorDict(
        {
            "pixels": pixels[:T],
            "action": torch.zeros(T, 4),
            "next": {"pixels": nxt, "done": done, "reward": torch.zeros(T)},
        },
        batch_size=[T],
    )
    compact, ref = ReplayBuffer(storage=CompactTensorStorage(cap)), ReplayBuffer(storage=LazyTensorStorage(cap))
    for start in range(0, T, 40):
        compact.extend(data[start : start + 40])
        ref.extend(data[start : start + 40])
    _assert_td_equal(compact.storage.get(torch.arange(cap)), ref.storage.get(torch.arange(cap)))
    s = compact.storage
    used = _nbytes(s._storage) + _nbytes(s._side) + _nbytes(s._linked) + _nbytes(s._side_slot) + _nbytes(s._free)
    full = _nbytes(ref.storage._storage)
    assert used < 0.6 * full  # one frame per item instead of two, plus a few side entries


def test_checkpoint_round_trip(tmp_path):
    data = _stream(90, seed=8)
    rb = ReplayBuffer(storage=CompactTensorStorage(32), generator=torch.Generator().manual_seed(0))
    for start in range(0, 55, 11):
        rb.extend(data[start : start + 11])
    rb.dumps(tmp_path / "ckpt")
    restored = ReplayBuffer(storage=CompactTensorStorage(32), generator=torch.Generator())
    restored.loads(tmp_path / "ckpt")
    assert len(restored) == len(rb) and restored.storage.side_table_size == rb.storage.side_table_size
    _assert_td_equal(restored.sample(40), rb.sample(40))
    for start in range(55, 90, 11):  # both keep going identically (links, side table, free slots)
        rb.extend(data[start : start + 11])
        restored.extend(data[start : start + 11])
    _assert_td_equal(restored.storage.get(torch.arange(32)), rb.storage.get(torch.arange(32)))
    _assert_td_equal(rb.storage.get(torch.arange(32)), _reference_chunks(data, 32, 11))


def _reference_chunks(data: TensorDict, capacity: int, chunk: int) -> TensorDict:
    rb = ReplayBuffer(storage=LazyTensorStorage(capacity))
    for start in range(0, data.shape[0], chunk):
        rb.extend(data[start : start + chunk])
    return rb.storage.get(torch.arange(capacity))
