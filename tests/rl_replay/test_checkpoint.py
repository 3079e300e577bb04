"""Replay-buffer checkpoints (rl_replay.checkpoint): exact resume, crash safety, corruption, no pickle."""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_replay import (
    LazyTensorStorage,
    ListStorage,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
    TensorStorage,
)
from rl_replay.checkpoint import (
    CheckpointError,
    dump_part,
    dump_state,
    load_part,
    load_state,
)
from tdict import TensorDict

HERE = os.path.dirname(os.path.abspath(__file__))


def _data(n: int, start: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(start)
    return TensorDict(
        {
            "obs": torch.randn(n, 4, generator=g),
            "action": torch.arange(start, start + n),
            "next": {
                "obs": torch.randn(n, 4, generator=g),
                "reward": torch.rand(n, generator=g),
                "done": torch.zeros(n, dtype=torch.bool),
            },
        },
        batch_size=[n],
    )


def _td_equal(a: TensorDict, b: TensorDict) -> bool:
    ka = sorted(map(str, a.keys(include_nested=True, leaves_only=True)))
    kb = sorted(map(str, b.keys(include_nested=True, leaves_only=True)))
    return ka == kb and all(torch.equal(a.get(k), b.get(k)) for k in a.keys(include_nested=True, leaves_only=True))


def _resume_matches(make, fill, path, steps: int = 6, batch: int = 5) -> None:
    """A buffer restored from a checkpoint samples exactly what the original samples next."""
    rb = make()
    fill(rb)
    rb.dumps(path)
    expected = [rb.sample(batch) for _ in range(steps)]
    restored = make()
    restored.loads(path)
    assert len(restored) == len(rb)
    for want in expected:
        got = restored.sample(batch)
        if isinstance(want, TensorDict):
            assert _td_equal(got, want)
        else:
            assert torch.equal(got, want)


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


# ---------------------------------------------------------------------------------- exact resume
@pytest.mark.parametrize(
    "sampler", [RandomSampler, lambda: SamplerWithoutReplacement(), lambda: SamplerWithoutReplacement(drop_last=True)]
)
def test_resume_same_samples(tmp_path, sampler):
    def make():
        return ReplayBuffer(
            storage=LazyTensorStorage(50), sampler=sampler(), batch_size=7, generator=torch.Generator().manual_seed(3)
        )

    def fill(rb):
        rb.extend(_data(30))
        rb.sample(7)  # advance the RNG / the epoch before the checkpoint
        rb.sample(7)

    _resume_matches(make, fill, tmp_path / "ck")


def test_restore_into_fresh_buffer_state(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(16), generator=torch.Generator().manual_seed(0))
    rb.extend(_data(10))
    rb.extend(_data(10, 10))  # wraps: cursor 4, write count 20
    rb.dumps(tmp_path / "ck")
    fresh = ReplayBuffer(storage=LazyTensorStorage(16), generator=torch.Generator())
    assert fresh.storage._storage is None  # lazily allocated from the checkpoint
    fresh.loads(tmp_path / "ck")
    assert fresh.writer.state_dict() == {"_cursor": 4, "_write_count": 20}
    assert len(fresh) == 16
    assert _td_equal(fresh[:], rb[:])
    # writes continue at the same place
    assert fresh.extend(_data(3, 50)).tolist() == rb.extend(_data(3, 50)).tolist() == [4, 5, 6]
    assert _td_equal(fresh[:], rb[:])


def test_generator_created_when_buffer_has_none(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(20), generator=torch.Generator().manual_seed(5))
    rb.extend(torch.arange(20.0))
    rb.dumps(tmp_path / "ck")
    fresh = ReplayBuffer(storage=LazyTensorStorage(20))
    fresh.loads(tmp_path / "ck")
    assert fresh._rng is not None and fresh.sampler._rng is fresh._rng
    assert torch.equal(fresh.sample(8), rb.sample(8))


def test_plain_tensor_and_multidim_storages(tmp_path):
    def make1():
        return ReplayBuffer(storage=LazyTensorStorage(12), generator=torch.Generator().manual_seed(1))

    _resume_matches(make1, lambda rb: rb.extend(torch.arange(24.0).view(8, 3)), tmp_path / "a")

    def make2():
        return ReplayBuffer(
            storage=LazyTensorStorage(20, ndim=2), generator=torch.Generator().manual_seed(1), dim_extend=0
        )

    _resume_matches(make2, lambda rb: rb.extend(_data(8).reshape(2, 4)), tmp_path / "b")

    def make3():  # a preallocated (non-lazy) storage
        return ReplayBuffer(storage=TensorStorage(torch.zeros(9, 2)), generator=torch.Generator().manual_seed(2))

    _resume_matches(make3, lambda rb: rb.extend(torch.ones(5, 2).cumsum(0)), tmp_path / "c")


def test_tensordict_replay_buffer(tmp_path):
    def make():
        return TensorDictReplayBuffer(
            storage=LazyTensorStorage(40), batch_size=6, generator=torch.Generator().manual_seed(9)
        )

    def fill(rb):
        rb.extend(_data(25))

    _resume_matches(make, fill, tmp_path / "ck")
    restored = make()
    restored.loads(tmp_path / "ck")
    assert restored.batch_size == 6
    assert restored[:25]["index"].tolist() == list(range(25))


def test_list_storage_objects(tmp_path):
    items = [
        torch.arange(3),
        TensorDict(a=torch.ones(2), batch_size=[2]),
        {"k": [1, 2.5, None], 3: "int key"},
        "text",
        (1, (2, "x")),
        None,
        True,
        7,
        torch.tensor(2.0, dtype=torch.float64),
    ]
    rb = ReplayBuffer(storage=ListStorage(20))
    rb.extend(items)
    rb.dumps(tmp_path / "ck")
    fresh = ReplayBuffer(storage=ListStorage(20))
    fresh.loads(tmp_path / "ck")
    got = fresh.storage._items
    assert len(fresh) == len(items)
    assert torch.equal(got[0], items[0])
    assert _td_equal(got[1], items[1])
    assert got[2:8] == items[2:8]
    assert type(got[4]) is tuple and type(got[4][1]) is tuple
    assert got[8].dtype == torch.float64 and got[8].item() == 2.0
    assert fresh.writer.state_dict() == rb.writer.state_dict()


def test_list_storage_stacked_items_roundtrip(tmp_path):
    rb = ReplayBuffer(storage=ListStorage(10), generator=torch.Generator().manual_seed(0))
    rb.extend([_data(1, i)[0] for i in range(6)])
    rb.dumps(tmp_path / "ck")
    files = [f for _, _, fs in os.walk(tmp_path / "ck" / "storage") for f in fs if f.endswith(".memmap")]
    assert len(files) == 5  # one stacked file per leaf, not one per item
    fresh = ReplayBuffer(storage=ListStorage(10), generator=torch.Generator())
    fresh.loads(tmp_path / "ck")
    assert _td_equal(fresh.sample(4), rb.sample(4))


def test_list_storage_non_jsonable_item_raises_before_writing(tmp_path):
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.extend(["a", "b", object(), "d"])
    with pytest.raises(TypeError, match="item 2"):
        rb.dumps(tmp_path / "ck")
    assert os.listdir(tmp_path) == []


def test_corrupt_checkpoint_keeps_previous_on_failed_dump(tmp_path):
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.extend([1, 2])
    rb.dumps(tmp_path / "ck")
    rb.extend([object()])
    with pytest.raises(TypeError, match="item 2"):
        rb.dumps(tmp_path / "ck")
    fresh = ReplayBuffer(storage=ListStorage(10))
    fresh.loads(tmp_path / "ck")
    assert fresh.storage._items == [1, 2]
    assert sorted(os.listdir(tmp_path)) == [".ck.lock", "ck"]  # the lock that serializes dumps stays


def test_dump_overwrites_previous(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(3.0))
    rb.dumps(tmp_path / "ck")
    rb.extend(torch.arange(4.0))
    rb.dumps(tmp_path / "ck")
    fresh = ReplayBuffer(storage=LazyTensorStorage(10))
    fresh.loads(tmp_path / "ck")
    assert fresh[:7].tolist() == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 3.0]
    assert sorted(os.listdir(tmp_path)) == [".ck.lock", "ck"]  # the lock that serializes dumps stays


def test_refuses_to_replace_a_non_checkpoint_directory(tmp_path):
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "precious.txt").write_text("x")
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(3.0))
    with pytest.raises(FileExistsError, match="not a checkpoint"):
        rb.dumps(tmp_path / "ck")
    assert (tmp_path / "ck" / "precious.txt").read_text() == "x"


def test_fsync_and_recovery_between_renames(tmp_path):
    from rl_replay.checkpoint import dump_buffer

    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(5.0))
    dump_buffer(rb, tmp_path / "ck", fsync=True)
    # a dump killed between its two renames leaves no "ck", only the renamed-away complete checkpoint
    os.rename(tmp_path / "ck", tmp_path / ".ck.old-123456")
    fresh = ReplayBuffer(storage=LazyTensorStorage(10))
    fresh.loads(tmp_path / "ck")
    assert fresh[:5].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    # an incomplete temp dir (no checkpoint.json) is never loaded; the next dump cleans everything up
    (tmp_path / ".ck.tmp-abcdef").mkdir()
    rb.extend(torch.tensor([9.0]))
    rb.dumps(tmp_path / "ck")
    assert sorted(os.listdir(tmp_path)) == [".ck.lock", "ck"]  # the lock that serializes dumps stays
    fresh.loads(tmp_path / "ck")
    assert len(fresh) == 6


# ---------------------------------------------------------------------------------- mismatches, corruption
def _saved(tmp_path) -> tuple:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(30), generator=torch.Generator().manual_seed(0))
    rb.extend(_data(12))
    path = tmp_path / "ck"
    rb.dumps(path)
    return rb, path


def _fresh() -> ReplayBuffer:
    return TensorDictReplayBuffer(storage=LazyTensorStorage(30), generator=torch.Generator())


def test_mismatched_buffer_raises_and_changes_nothing(tmp_path):
    _, path = _saved(tmp_path)
    other = TensorDictReplayBuffer(storage=LazyTensorStorage(31))
    with pytest.raises(CheckpointError, match="max_size 30"):
        other.loads(path)
    assert len(other) == 0 and other.storage._storage is None
    other = TensorDictReplayBuffer(storage=LazyTensorStorage(30), sampler=SamplerWithoutReplacement())
    with pytest.raises(CheckpointError, match="RandomSampler"):
        other.loads(path)
    # an allocated storage with another structure
    other = TensorDictReplayBuffer(storage=LazyTensorStorage(30))
    other.extend(TensorDict(x=torch.zeros(2), batch_size=[2]))
    with pytest.raises(CheckpointError, match="keys"):
        other.loads(path)
    assert len(other) == 2 and other.writer.state_dict()["_cursor"] == 2


def test_missing_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        _fresh().loads(tmp_path / "nothing")


@pytest.mark.parametrize(
    "damage", ["no_marker", "no_part", "bad_json", "version", "format", "truncated", "missing_tensor", "tdict_meta"]
)
def test_corrupt_checkpoint_raises_clear_error(tmp_path, damage):
    _, path = _saved(tmp_path)
    storage_dir = path / "storage"
    memmaps = sorted(p for p in storage_dir.rglob("*.memmap"))
    if damage == "no_marker":
        (path / "checkpoint.json").unlink()
        match = "checkpoint.json.*missing"
    elif damage == "no_part":
        (path / "sampler" / "part.json").unlink()
        match = "part.json.*missing"
    elif damage == "bad_json":
        (path / "writer" / "part.json").write_text('{"format": "rl_replay.part", "vers')
        match = "not valid JSON"
    elif damage in ("version", "format"):
        head = json.loads((path / "checkpoint.json").read_text())
        head[damage] = 99 if damage == "version" else "something-else"
        (path / "checkpoint.json").write_text(json.dumps(head))
        match = "version 99 is not supported" if damage == "version" else "format 'something-else'"
    elif damage == "truncated":
        with open(memmaps[0], "r+b") as f:
            f.truncate(os.path.getsize(memmaps[0]) - 4)
        match = "missing or corrupt"
    elif damage == "missing_tensor":
        memmaps[-1].unlink()
        match = "missing or corrupt"
    else:
        (storage_dir / "tensors" / "tdict_meta.json").write_text("{broken")
        match = "missing or corrupt"
    fresh = _fresh()
    with pytest.raises(CheckpointError, match=match):
        fresh.loads(path)
    assert len(fresh) == 0 and fresh.storage._storage is None


def test_loading_never_unpickles(tmp_path, monkeypatch):
    rb, path = _saved(tmp_path)

    def forbidden(*args, **kwargs):
        raise AssertionError("unpickling during loads")

    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    fresh = _fresh()
    fresh.loads(path)
    assert _td_equal(fresh[:12], rb[:12])


# ---------------------------------------------------------------------------------- parts and state trees
def test_dump_part_load_part(tmp_path):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10), sampler=SamplerWithoutReplacement(), generator=torch.Generator().manual_seed(0)
    )
    rb.extend(_data(7))
    rb.sample(3)
    dump_part(rb.storage, tmp_path / "s")
    dump_part(rb.sampler, tmp_path / "p")
    dump_part(rb.writer, tmp_path / "w")
    storage, sampler, writer = LazyTensorStorage(10), SamplerWithoutReplacement(), RoundRobinWriter()
    load_part(storage, tmp_path / "s")
    load_part(sampler, tmp_path / "p")
    load_part(writer, tmp_path / "w")
    assert _td_equal(storage[:7], rb.storage[:7]) and len(storage) == 7
    assert sampler.state_dict() == rb.sampler.state_dict()
    assert writer.state_dict() == {"_cursor": 7, "_write_count": 7}
    with pytest.raises(CheckpointError, match="RoundRobinWriter"):
        load_part(RandomSampler(), tmp_path / "w")


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.floats(allow_nan=False), st.text(max_size=5)
)
_tensors = st.builds(
    lambda n, dt: torch.arange(n).to(dt),
    st.integers(0, 5),
    st.sampled_from([torch.float32, torch.int64, torch.bool, torch.uint8]),
)
_trees = st.recursive(
    st.one_of(_scalars, _tensors),
    lambda kids: st.one_of(
        st.lists(kids, max_size=3),
        st.tuples(kids, kids),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(0, 9)), kids, max_size=3),
    ),
    max_leaves=8,
)


def _tree_equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_tree_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_tree_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=30)
@given(tree=_trees)
def test_state_tree_roundtrip(tmp_path_factory, tree):
    path = tmp_path_factory.mktemp("ckpt_tree") / "state"
    dump_state({"x": tree, "dtype": torch.float16, "size": torch.Size([2, 3])}, path)
    back = load_state(path)
    assert _tree_equal(back["x"], tree)
    assert back["dtype"] is torch.float16 and back["size"] == torch.Size([2, 3])


# ---------------------------------------------------------------------------------- other helpers' parts
@pytest.mark.skipif(not _has("rl_replay.samplers.prioritized"), reason="rl_replay.samplers.prioritized not written yet")
def test_prioritized_sampler_resume(tmp_path):
    from rl_replay import PrioritizedSampler

    def make():
        return ReplayBuffer(
            storage=LazyTensorStorage(64),
            sampler=PrioritizedSampler(64, alpha=0.7, beta=0.5),
            generator=torch.Generator().manual_seed(4),
        )

    def fill(rb):
        rb.extend(_data(40))
        rb.update_priority(torch.arange(40), torch.linspace(0.1, 4.0, 40))

    rb = make()
    fill(rb)
    rb.dumps(tmp_path / "ck")
    want = [rb.sample(16, return_info=True) for _ in range(4)]
    restored = make()
    restored.loads(tmp_path / "ck")
    for data, info in want:
        got, got_info = restored.sample(16, return_info=True)
        assert _td_equal(got, data)
        assert torch.equal(torch.as_tensor(got_info["index"]), torch.as_tensor(info["index"]))
        if "priority_weight" in info:
            assert torch.allclose(got_info["priority_weight"], info["priority_weight"])


@pytest.mark.skipif(not _has("rl_replay.samplers.slice"), reason="rl_replay.samplers.slice not written yet")
def test_slice_sampler_resume(tmp_path):
    from rl_replay import SliceSampler

    def make():
        return ReplayBuffer(
            storage=LazyTensorStorage(200),
            sampler=SliceSampler(slice_len=4, traj_key="episode"),
            generator=torch.Generator().manual_seed(6),
        )

    def fill(rb):
        data = _data(120)
        data["episode"] = torch.arange(120) // 15
        rb.extend(data)

    _resume_matches(make, fill, tmp_path / "ck", batch=16)


@pytest.mark.skipif(not _has("rl_replay.max_value_writer"), reason="max_value_writer missing")
def test_max_value_writer_resume(tmp_path):
    from rl_replay import TensorDictMaxValueWriter

    def make():
        return TensorDictReplayBuffer(
            storage=LazyTensorStorage(8),
            writer=TensorDictMaxValueWriter(rank_key="score"),
            generator=torch.Generator().manual_seed(0),
        )

    rb = make()
    rb.extend(TensorDict(score=torch.arange(10.0), batch_size=[10]))
    rb.dumps(tmp_path / "ck")
    fresh = make()
    fresh.loads(tmp_path / "ck")
    batch = TensorDict(score=torch.tensor([0.5, 9.5, 3.0, 1.5]), batch_size=[4])
    assert fresh.extend(batch.clone()).tolist() == rb.extend(batch.clone()).tolist()
    assert _td_equal(fresh[:], rb[:])


@pytest.mark.parametrize("kind", ["memmap", "compressed", "compact"])
def test_other_storages_resume(tmp_path, kind):
    module = {
        "memmap": "rl_replay.storages.memmap",
        "compressed": "rl_replay.storages.compressed",
        "compact": "rl_replay.storages.compact",
    }[kind]
    if not _has(module):
        pytest.skip(f"{module} not written yet")
    import rl_replay

    def make():
        if kind == "memmap":
            storage = rl_replay.LazyMemmapStorage(48)
        elif kind == "compressed":
            storage = rl_replay.CompressedListStorage(48)
        else:
            storage = rl_replay.CompactTensorStorage(48)
        return ReplayBuffer(storage=storage, generator=torch.Generator().manual_seed(8))

    def fill(rb):
        data = _data(30)
        data["next", "obs"][:-1] = data["obs"][1:]  # consecutive steps share observations (compact layout)
        rb.extend(data)
        rb.extend(_data(30, 30))  # wraps around

    _resume_matches(make, fill, tmp_path / "ck")
    if kind == "compressed":  # the compressed blobs are packed into one file, not one per item
        files = [f for _, _, fs in os.walk(tmp_path / "ck" / "storage") for f in fs if f.endswith(".memmap")]
        assert len(files) <= 3, files


# ---------------------------------------------------------------------------------- crash safety
def test_kill_during_dumps_leaves_old_or_new(tmp_path):
    """SIGKILL before every filesystem call of a dump, and at random moments of repeated dumps:
    loading afterwards always gives exactly the previous or the new state."""
    script = os.path.join(HERE, "_replay_ckpt_crash.py")
    # ~70 kill points, each a killed process plus two dumps: on tmpfs when there is one (the
    # same POSIX rename semantics, without the disk's latency), else under tmp_path
    shm = "/dev/shm"
    root = tempfile.mkdtemp(prefix="rl_replay_ckpt_crash_", dir=shm if os.access(shm, os.W_OK) else str(tmp_path))
    try:
        proc = subprocess.run([sys.executable, script, root], capture_output=True, text=True, timeout=120, check=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    systematic = result["systematic"]
    errors = [r for r in systematic if isinstance(r, str) or r[2] not in ("A", "B")]
    assert not errors, errors[:5]
    killed = [r for r in systematic if r[1]]
    assert len(killed) >= 20  # every step of a dump was a kill point
    assert not systematic[-1][1] and systematic[-1][2] == "B"  # the dump that ran to the end
    outcomes = {r[2] for r in killed}
    assert outcomes == {"A", "B"}  # killed before the commit: old state; after it: new state
    # once the new state is committed, later kills (cleanup) keep it
    first_b = next(i for i, r in enumerate(killed) if r[2] == "B")
    assert all(r[2] == "B" for r in killed[first_b:])
    assert set(result["random"]) <= {"A", "B"}, result["random"]
    assert result["leftovers"] == []
