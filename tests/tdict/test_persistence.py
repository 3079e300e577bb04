"""Tests for tdict.persistence: memmap_/memmap/memmap_like/save/load_memmap and state dicts."""

from __future__ import annotations

import collections
import json
import math
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tdict
from tdict import MemoryMappedTensor, TensorDict
from tdict.persistence import META_NAME, MemmapLoadError, decode_payload, encode_payload, load_memmap, metadata_checksum

try:
    from tdict.non_tensor import NonTensorData
    from tdict.non_tensor_stack import NonTensorStack
except ImportError:  # pragma: no cover - module written by another engineer
    NonTensorData = NonTensorStack = None

try:
    from tdict.tensorclass import tensorclass
except ImportError:  # pragma: no cover
    tensorclass = None

needs_non_tensor = pytest.mark.skipif(NonTensorData is None, reason="tdict.non_tensor is not available yet")
needs_tensorclass = pytest.mark.skipif(tensorclass is None, reason="tdict.tensorclass is not available yet")

SRC = os.path.dirname(os.path.dirname(os.path.abspath(tdict.__file__)))


def _sample_td() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "f32": torch.randn(4, 3, generator=g),
            "f16": torch.randn(4, generator=g).half(),
            "bf16": torch.randn(4, 2, generator=g).bfloat16(),
            "f64": torch.randn(4, 1, 2, generator=g).double(),
            "i8": torch.randint(-100, 100, (4,), generator=g, dtype=torch.int8),
            "i64": torch.randint(-(10**12), 10**12, (4, 5), generator=g),
            "u8": torch.randint(0, 255, (4,), generator=g, dtype=torch.uint8),
            "b": torch.rand(4, 3, generator=g) > 0.5,
            "c64": torch.randn(4, generator=g, dtype=torch.complex64),
            "empty": torch.zeros(4, 0),
            "nested": {
                "x": torch.arange(8.0).view(4, 2),
                "deeper": {"y": torch.arange(4)},
                "a.b/c": torch.ones(4),
                "..": torch.zeros(4, dtype=torch.int32),
                "": torch.full((4,), 3.0),
                "ünï cødé": torch.arange(4) * 2,
                "k" * 300: torch.ones(4, 1),
            },
        },
        batch_size=[4],
        names=["batch"],
    )


def _assert_same(a, b):
    assert a.batch_size == b.batch_size
    assert list(a.keys(True, True)) == list(b.keys(True, True))
    for key, va in a.items(True, True):
        vb = b.get(key)
        if isinstance(va, torch.Tensor):
            assert isinstance(vb, torch.Tensor), key
            assert va.dtype == vb.dtype and va.shape == vb.shape, key
            assert torch.equal(va, vb), key
        else:
            assert type(va) is type(vb), key


def _files(root) -> set[str]:
    out = set()
    for dirpath, _, names in os.walk(root):
        for name in names:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


# --------------------------------------------------------------------------- memmap round trips


def test_memmap_roundtrip_all_dtypes_and_odd_keys(tmp_path):
    td = _sample_td()
    out = td.memmap(tmp_path)
    assert out.is_locked and not td.is_locked  # td untouched
    assert all(type(v) is torch.Tensor for v in td.values(True, True))
    assert out.is_memmap()
    for key, v in out.items(True, True):
        assert isinstance(v, MemoryMappedTensor) and v.filename.startswith(str(tmp_path)), key
    _assert_same(out, td)
    loaded = load_memmap(tmp_path)
    _assert_same(loaded, td)
    assert loaded.names == ["batch"] and loaded["nested"].batch_size == torch.Size([4])
    assert all(isinstance(v, MemoryMappedTensor) for v in loaded.values(True, True))
    # nested keys are sub-directories; odd characters are escaped; every file is named by the metadata
    meta = json.loads((tmp_path / META_NAME).read_text())
    assert meta["format"] == "tdict.memmap" and meta["version"] == 2 and len(meta["sha256"]) == 64
    assert any(f.startswith("nested/deeper/y.") for f in _files(tmp_path))
    assert not any(".." in f.split("/") for f in _files(tmp_path))


def test_keys_differing_only_in_case_get_distinct_files(tmp_path):
    td = TensorDict(
        {
            "obs": torch.zeros(2),
            "Obs": torch.ones(2),
            "OBS": {"x": torch.full((2,), 2.0)},
            "obS": {"x": torch.full((2,), 3.0)},
        },
        [2],
    )
    td.memmap(tmp_path)
    meta = json.loads((tmp_path / META_NAME).read_text())
    files = [e["file"].casefold() for _, e in _walk_entries(meta["root"])]
    assert len(set(files)) == len(files) == 4  # also safe on case-insensitive filesystems
    _assert_same(load_memmap(tmp_path), td)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.text(min_size=0, max_size=40), min_size=1, max_size=6, unique=True))
def test_any_keys_roundtrip(tmp_path_factory, keys):
    prefix = tmp_path_factory.mktemp("keys")
    td = TensorDict({k: torch.full((2,), float(i)) for i, k in enumerate(keys)}, [2])
    td["sub"] = TensorDict({k: torch.full((2,), -float(i)) for i, k in enumerate(keys)}, [2])
    td.memmap(prefix)
    _assert_same(load_memmap(prefix), td)


def test_memmap_inplace_locks_and_writes_through(tmp_path):
    td = TensorDict({"a": torch.zeros(3), "n": {"b": torch.ones(3, 2)}}, [3])
    assert td.memmap_(tmp_path) is td
    assert td.is_locked and td["n"].is_locked and td.is_memmap()
    td["n", "b"][1] = 7.0  # writes go to the file
    assert load_memmap(tmp_path)["n", "b"][1].tolist() == [7.0, 7.0]
    with pytest.raises(RuntimeError, match="locked"):
        td["new"] = torch.zeros(3)


def test_classmethod_module_functions_and_save(tmp_path):
    td = TensorDict({"a": torch.arange(3)}, [3])
    assert td.save(tmp_path / "s") is td and not td.is_locked
    for loader in (TensorDict.load_memmap, TensorDict.load, tdict.load_memmap, tdict.load):
        assert loader(tmp_path / "s")["a"].tolist() == [0, 1, 2]
    tdict.save(td, tmp_path / "t")
    assert tdict.load(str(tmp_path / "t"))["a"].tolist() == [0, 1, 2]
    moved = tdict.load_memmap(tmp_path / "t", device="cpu")
    assert moved.device == torch.device("cpu") and moved["a"].tolist() == [0, 1, 2]
    out = TensorDict({"a": torch.zeros(3, dtype=torch.long)}, [3])
    assert TensorDict.load_memmap(tmp_path / "t", out=out) is out and out["a"].tolist() == [0, 1, 2]


def test_device_is_recorded(tmp_path):
    td = TensorDict({"a": torch.ones(2)}, [2], device="cpu")
    td.memmap(tmp_path)
    assert load_memmap(tmp_path).device == torch.device("cpu")
    TensorDict({"a": torch.ones(2)}, [2]).memmap(tmp_path)
    assert load_memmap(tmp_path).device is None


def test_memmap_anonymous_shared_memory(tmp_path):
    td = TensorDict({"a": torch.arange(4.0), "n": {"b": torch.zeros(4, dtype=torch.bool)}}, [4])
    out = td.memmap()
    assert out.is_memmap() and out.is_shared() and out.is_locked
    assert all(v.filename is None for v in out.values(True, True))
    _assert_same(out, td)
    td.memmap_()
    assert td.is_memmap() and td.is_locked


def test_memmap_like(tmp_path):
    td = TensorDict({"a": torch.randn(3, 2), "n": {"b": torch.arange(3)}}, [3])
    like = td.memmap_like(tmp_path)
    assert like.is_locked and like.is_memmap()
    assert like["a"].shape == (3, 2) and like["n", "b"].dtype == torch.int64
    assert not like["a"].any() and not like["n", "b"].any()  # new files read as zeros
    assert torch.equal(load_memmap(tmp_path)["a"], torch.zeros(3, 2))
    anon = td.memmap_like()
    assert anon["a"].shape == (3, 2) and anon["a"].filename is None


@needs_non_tensor
def test_non_tensor_payloads_roundtrip(tmp_path):
    payload = {"k": (1, 2.5, float("nan"), None, True), 3: [b"\x00bytes", "s"], "inf": -math.inf}
    td = TensorDict({"a": torch.zeros(2), "text": "hello", "p": NonTensorData(payload, batch_size=[2])}, [2])
    td["stack"] = torch.stack([NonTensorData("x"), NonTensorData("y")])
    td.memmap(tmp_path)
    loaded = load_memmap(tmp_path)
    assert loaded["text"] == "hello"
    got = loaded["p"]
    assert got["k"][:2] == (1, 2.5) and math.isnan(got["k"][2]) and got["k"][3:] == (None, True)
    assert got[3] == [b"\x00bytes", "s"] and got["inf"] == -math.inf
    assert type(loaded.get("stack")) is NonTensorStack and loaded["stack"] == ["x", "y"]
    assert loaded.get("text").batch_size == torch.Size([2])


@needs_non_tensor
def test_non_json_payload_raises_before_writing(tmp_path):
    class Opaque:
        pass

    td = TensorDict({"a": torch.zeros(2), "obj": NonTensorData(Opaque(), batch_size=[2])}, [2])
    with pytest.raises(TypeError, match=r"'obj'.*cannot store a .*Opaque as JSON"):
        td.memmap_(tmp_path)
    assert not td.is_locked and type(td["a"]) is torch.Tensor
    assert not any(f.endswith(".memmap") for f in _files(tmp_path))
    td.memmap_()  # anonymous shared memory needs no JSON
    assert td.is_memmap()


def test_payload_encoding_is_tagged_and_strict():
    value = {"dict": 1, ("t",): [1, (2,)], b"k": None}
    assert decode_payload(encode_payload(value)) == value
    with pytest.raises(ValueError, match="not an encoded payload"):
        decode_payload({"a": 1, "b": 2})
    with pytest.raises(TypeError, match="set"):
        encode_payload({1, 2})


# --------------------------------------------------------------------------- overwriting


def test_overwrite_replaces_state_and_collects_old_files(tmp_path):
    TensorDict({"a": torch.zeros(3), "gone": torch.ones(1)}, []).memmap(tmp_path)
    first = _files(tmp_path)
    TensorDict({"a": torch.full((2,), 5.0)}, [2]).memmap(tmp_path)
    loaded = load_memmap(tmp_path)
    assert loaded["a"].tolist() == [5.0, 5.0] and "gone" not in loaded.keys()
    now = _files(tmp_path)
    leaf_files = {f for f in now if f.endswith(".memmap")}
    assert len(leaf_files) == 1 and not (leaf_files & first)
    assert not any(f.endswith(".tmp") for f in now)


def test_existsok_false(tmp_path):
    TensorDict({"a": torch.zeros(3)}, [3]).memmap(tmp_path)
    before = _files(tmp_path)
    td = TensorDict({"a": torch.ones(3)}, [3])
    with pytest.raises(FileExistsError, match="existsok"):
        td.memmap_(tmp_path, existsok=False)
    assert _files(tmp_path) == before and not td.is_locked
    assert load_memmap(tmp_path)["a"].tolist() == [0.0, 0.0, 0.0]


def test_rememmap_same_prefix_reuses_files(tmp_path):
    td = TensorDict({"a": torch.arange(3.0)}, [3]).memmap_(tmp_path)
    name = td["a"].filename
    td.memmap_(tmp_path)  # nothing to copy
    assert td["a"].filename == name and os.path.exists(name)
    loaded = load_memmap(tmp_path)
    assert loaded["a"].filename == name
    loaded.unlock_()
    loaded["b"] = torch.ones(3)
    loaded.memmap_(tmp_path)
    again = load_memmap(tmp_path)
    assert again["a"].filename == name and again["b"].tolist() == [1.0, 1.0, 1.0]
    again["a"][0] = 9.0
    assert td["a"][0].item() == 9.0  # all share one file


def test_copy_existing(tmp_path):
    td = TensorDict({"a": torch.arange(3.0)}, [3]).memmap_(tmp_path / "one")
    with pytest.raises(RuntimeError, match="copy_existing=True"):
        td.memmap(tmp_path / "two")
    assert not (tmp_path / "two" / META_NAME).exists()
    out = td.memmap(tmp_path / "two", copy_existing=True)
    assert out["a"].filename.startswith(str(tmp_path / "two")) and out["a"].tolist() == [0.0, 1.0, 2.0]


def test_failed_write_leaves_old_state_and_no_debris(tmp_path, monkeypatch):
    TensorDict({"a": torch.zeros(3), "b": torch.zeros(3)}, [3]).memmap(tmp_path)
    before = _files(tmp_path)
    real = MemoryMappedTensor.from_tensor.__func__
    calls = []

    def flaky(cls, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(MemoryMappedTensor, "from_tensor", classmethod(flaky))
    td = TensorDict({"a": torch.ones(3), "b": torch.ones(3)}, [3])
    with pytest.raises(OSError, match="No space"):
        td.memmap_(tmp_path)
    assert not td.is_locked and type(td["a"]) is torch.Tensor
    assert _files(tmp_path) == before
    assert load_memmap(tmp_path)["a"].tolist() == [0.0, 0.0, 0.0]


def test_next_write_collects_debris_of_an_interrupted_one(tmp_path):
    TensorDict({"a": torch.zeros(3)}, [3]).memmap(tmp_path)
    (tmp_path / "a.0123456789abcdef.memmap").write_bytes(b"x" * 12)  # an interrupted write's file
    (tmp_path / f".{META_NAME}.0123456789abcdef.tmp").write_text("{")
    (tmp_path / "user_notes.txt").write_text("not ours")
    assert load_memmap(tmp_path)["a"].tolist() == [0.0, 0.0, 0.0]  # debris is ignored
    TensorDict({"a": torch.ones(3)}, [3]).memmap(tmp_path)
    names = _files(tmp_path)
    assert "a.0123456789abcdef.memmap" not in names
    assert f".{META_NAME}.0123456789abcdef.tmp" not in names
    assert "user_notes.txt" in names


# --------------------------------------------------------------------------- corrupt directories


def _saved(tmp_path):
    TensorDict({"a": torch.arange(4.0), "n": {"b": torch.ones(2, 2)}}, []).memmap(tmp_path)
    return json.loads((tmp_path / META_NAME).read_text())


def _write_meta(prefix, meta):
    """Write edited metadata with a matching checksum: what a crafted (not corrupted) file looks like."""
    body = {k: v for k, v in meta.items() if k != "sha256"}
    (prefix / META_NAME).write_text(json.dumps(dict(body, sha256=metadata_checksum(body))))


def _leaf_file(tmp_path, meta, key="a"):
    entry = dict(meta["root"]["entries"])[key]
    return tmp_path / entry["file"]


def test_missing_prefix_and_missing_metadata(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_memmap(tmp_path / "nowhere")
    (tmp_path / "d").mkdir()
    with pytest.raises(MemmapLoadError, match=r"tdict_meta.json is missing.*interrupted"):
        load_memmap(tmp_path / "d")
    (tmp_path / "d" / "meta.json").write_text("{}")  # tensordict's layout
    with pytest.raises(MemmapLoadError, match="tensordict"):
        load_memmap(tmp_path / "d")


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", "not valid JSON"),
        (b'{"format": "tdict.memmap", "vers', "not valid JSON"),
        (b"\xff\xfe garbage", "not valid JSON"),
        (b"[1, 2]", "expected an object"),
        (b'{"format": "other", "version": 1}', "format 'other'"),
        (b'{"format": "tdict.memmap", "version": 99, "root": {}}', "version 99"),
        (
            b'{"format": "tdict.memmap", "version": 1, "token": "t", "root": {"type": "TensorDict"}}',
            "malformed batch_size",
        ),
        (b'{"format": "tdict.memmap", "version": 1, "root": NaN}', "not valid JSON"),
    ],
)
def test_bad_metadata(tmp_path, content, match):
    _saved(tmp_path)
    (tmp_path / META_NAME).write_bytes(content)
    with pytest.raises(MemmapLoadError, match=match) as info:
        load_memmap(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_missing_and_short_leaf_files(tmp_path):
    meta = _saved(tmp_path)
    leaf = _leaf_file(tmp_path, meta)
    data = leaf.read_bytes()
    leaf.write_bytes(data[:-1])
    with pytest.raises(MemmapLoadError, match=r"\('a',\).*has 15 bytes, expected 16"):
        load_memmap(tmp_path)
    leaf.unlink()
    with pytest.raises(MemmapLoadError, match=r"\('a',\).*missing"):
        load_memmap(tmp_path)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("file", "../outside.memmap", "bad file name"),
        ("file", "/etc/passwd", "bad file name"),
        ("dtype", "object", "unknown dtype"),
        ("dtype", "__class__", "unknown dtype"),
        ("nbytes", 17, "nbytes 17 does not match"),
        ("shape", [-1], "malformed shape"),
    ],
)
def test_tampered_leaf_entries(tmp_path, field, value, match):
    meta = _saved(tmp_path)
    dict(meta["root"]["entries"])["a"][field] = value
    _write_meta(tmp_path, meta)
    with pytest.raises(MemmapLoadError, match=match):
        load_memmap(tmp_path)


def test_symlink_out_of_prefix_is_refused(tmp_path):
    meta = _saved(tmp_path / "p")
    outside = tmp_path / "secret"
    outside.write_bytes(b"\x00" * 16)
    leaf = _leaf_file(tmp_path / "p", meta)
    leaf.unlink()
    leaf.symlink_to(outside)
    with pytest.raises(MemmapLoadError, match="outside the prefix"):
        load_memmap(tmp_path / "p")


class _Evil:
    """Unpickling this creates the marker file (the attack we must never run)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_crafted_pickles_are_never_unpickled(tmp_path):
    marker = tmp_path / "PWNED"
    blob = pickle.dumps(_Evil(str(marker)), protocol=2)
    assert not marker.exists()
    meta = _saved(tmp_path / "p")
    # 1. a pickle where the metadata goes
    (tmp_path / "p" / META_NAME).write_bytes(blob)
    with pytest.raises(MemmapLoadError, match="not valid JSON"):
        load_memmap(tmp_path / "p")
    assert not marker.exists()
    # 2. a pickle as a leaf's data file: wrong size -> clear error ...
    _write_meta(tmp_path / "p", meta)
    leaf = _leaf_file(tmp_path / "p", meta)
    leaf.write_bytes(blob)
    with pytest.raises(MemmapLoadError, match="bytes, expected 16"):
        load_memmap(tmp_path / "p")
    # ... and with metadata that matches its size, it is read as raw bytes, never executed
    entry = dict(meta["root"]["entries"])["a"]
    entry.update(dtype="uint8", shape=[len(blob)], nbytes=len(blob))
    _write_meta(tmp_path / "p", meta)
    loaded = load_memmap(tmp_path / "p")
    assert bytes(loaded["a"].tolist()) == blob
    assert not marker.exists()


def test_load_never_calls_pickle(tmp_path, monkeypatch):
    _saved(tmp_path)

    def forbidden(*args, **kwargs):
        raise AssertionError("pickle used while loading")

    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    assert load_memmap(tmp_path)["a"].tolist() == [0.0, 1.0, 2.0, 3.0]


# --------------------------------------------------------------------------- kill -9 while writing

_KILL_SCRIPT = textwrap.dedent(
    """
    import json, os, random, select, signal, sys, time
    import torch
    torch.set_num_threads(1)  # before any op: the workers are forked
    from tdict import TensorDict
    from tdict.persistence import MemmapLoadError, load_memmap

    prefix, seed, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    DTYPES = [torch.float32, torch.int64, torch.int16, torch.float16, torch.uint8, torch.bool]
    base = TensorDict(batch_size=[256])
    for i in range(48):  # ~90 MB over 48 leaves, nested
        dtype = DTYPES[i % len(DTYPES)]
        base["g%d" % (i % 4), "k%d" % i] = torch.zeros(256, 2048 // dtype.itemsize * 4, dtype=dtype)

    def expected(it, dtype):
        return it % 2 if dtype == torch.bool else it % 251

    def writer(start, commits):
        it = start
        while True:
            for key, leaf in base.items(True, True):
                leaf.fill_(expected(it, leaf.dtype))
            base["it"] = torch.full((256,), it)
            base.memmap(prefix)
            os.write(commits, b"c")  # one byte per commit
            it += 1

    results = []
    write_s = None  # how long one write takes on this machine now: the kill delays scale with it
    for r in range(rounds):
        commits_r, commits_w = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(commits_r)
                writer(1000 * (r + 1), commits_w)
            finally:
                os._exit(1)
        os.close(commits_w)
        first = write_s is None
        if first:  # the first kill waits for a first commit: every kill then has a state to keep
            ready = select.select([commits_r], [], [], 120)[0]
            if not ready or os.read(commits_r, 1) != b"c":
                sys.exit(f"the writer made no first commit within 120 s (ready={bool(ready)})")
            write_s = time.monotonic() - start
        delay = rng.uniform(0.0, 1.5) * write_s
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        if not first and not os.read(commits_r, 4096):  # no write finished within the delay: writes got slower
            write_s = max(write_s, delay)
        os.close(commits_r)
        try:
            td = load_memmap(prefix)
        except (MemmapLoadError, FileNotFoundError) as err:
            results.append(["error", type(err).__name__, str(err)])
            continue
        it = int(td["it"][0])
        if not bool((td["it"] == it).all()):
            results.append(["loaded", it, ["it"], True])
            continue
        bad = [str(k) for k, v in td.items(True, True) if k != "it" and not bool((v == expected(it, v.dtype)).all())]
        shapes_ok = all(td.get(k).shape == v.shape for k, v in base.items(True, True))
        results.append(["loaded", it, bad, shapes_ok])
    print(json.dumps(results))
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the writer processes are forked")
def test_kill_9_during_memmap_never_loads_partial_data(tmp_path):
    """A writer loops ``td.memmap(prefix)`` (~90 MB over 48 leaves, every leaf filled with the
    iteration number) and is SIGKILLed at random moments, 7 times; after each kill the directory
    must load with one complete, consistent iteration.

    The first kill comes after the first commit, and the kill delays scale with how long one write
    takes (a loaded machine writes slower): every kill lands before, during or after some write.
    """
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    prefix = tmp_path / "td"
    proc = subprocess.run(
        [sys.executable, "-c", _KILL_SCRIPT, str(prefix), "0", "7"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 7, results
    last = -1
    for entry in results:
        assert entry[0] == "loaded", entry  # a commit came before the first kill: there is always a state
        _, it, bad, shapes_ok = entry
        assert bad == [] and shapes_ok, entry  # never a mix of two writes, never partial data
        assert it >= last  # a kill never brings back an older state
        last = it
    # the debris of the killed writes is removed by the next successful write
    td = load_memmap(prefix)
    td.unlock_()
    td.memmap(prefix)
    meta = json.loads((prefix / META_NAME).read_text())
    named = {e["file"] for _, e in _walk_entries(meta["root"])}
    on_disk = {f for f in _files(prefix) if f.endswith(".memmap")}
    assert on_disk == named


def _walk_entries(node):
    for key, entry in node["entries"]:
        if entry["type"] == "tensor":
            yield key, entry
        elif entry["type"] in ("TensorDict", "tensorclass"):
            yield from _walk_entries(entry)


# --------------------------------------------------------------------------- tensorclass


@needs_tensorclass
def test_tensorclass_roundtrip(tmp_path):
    data = _TC(x=torch.arange(3.0), y=torch.ones(3, 2), batch_size=[3])
    td = TensorDict({"tc": data, "z": torch.zeros(3)}, [3])
    td.memmap(tmp_path)
    loaded = load_memmap(tmp_path)
    assert type(loaded["tc"]) is _TC
    assert torch.equal(loaded["tc"].x, data.x) and torch.equal(loaded["tc"].y, data.y)


@needs_tensorclass
def test_tensorclass_root_inplace_and_non_tensor_field(tmp_path):
    data = _TC(x=torch.arange(3.0), y=torch.ones(3, 2), label="train", batch_size=[3])
    assert data.memmap_(tmp_path) is data
    assert data.is_locked and isinstance(data.x, MemoryMappedTensor)
    loaded = load_memmap(tmp_path)
    assert type(loaded) is _TC and loaded.label == "train" and loaded.y.shape == (3, 2)
    assert type(_TC.load_memmap(tmp_path)) is _TC


@needs_tensorclass
@pytest.mark.parametrize(
    "path, match",
    [
        ("no_such_module_xyz:Thing", "is not imported"),
        ("os:system", "does not name a tensorclass"),
        ("os:path", "does not name a tensorclass"),
    ],
)
def test_tensorclass_class_path_is_never_imported_or_called(tmp_path, path, match):
    _TC(x=torch.zeros(2), y=torch.zeros(2), batch_size=[2]).memmap(tmp_path)
    meta = json.loads((tmp_path / META_NAME).read_text())
    assert meta["root"]["class"].endswith(":_TC")
    meta["root"]["class"] = path
    _write_meta(tmp_path, meta)
    with pytest.raises(MemmapLoadError, match=match):
        load_memmap(tmp_path)
    assert "no_such_module_xyz" not in sys.modules


@needs_tensorclass
def test_local_tensorclass_saves_and_loads_while_defined(tmp_path):
    @tensorclass
    class Local:
        x: torch.Tensor

    Local(x=torch.arange(2.0), batch_size=[2]).memmap(tmp_path)
    loaded = load_memmap(tmp_path)
    assert type(loaded) is Local and loaded.x.tolist() == [0.0, 1.0]
    assert json.loads((tmp_path / META_NAME).read_text())["root"]["class"].endswith("<locals>.Local")


if tensorclass is not None:

    @tensorclass
    class _TC:
        x: torch.Tensor
        y: torch.Tensor
        label: str | None = None


# --------------------------------------------------------------------------- lazy stacks


def test_lazy_stack_roundtrip(tmp_path):
    from tdict import lazy_stack

    a = TensorDict(obs=torch.zeros(3, 2), batch_size=[3])
    b = TensorDict(obs=torch.ones(3, 4), extra=torch.ones(3), batch_size=[3])
    td = TensorDict({"s": lazy_stack([a, b], 1), "x": torch.arange(3)}, [3])
    td.memmap_(tmp_path)
    assert isinstance(a["obs"], MemoryMappedTensor) and a.is_locked  # members memmapped in place
    loaded = load_memmap(tmp_path)
    s = loaded["s"]
    assert type(s).__name__ == "LazyStackedTensorDict" and s.stack_dim == 1 and s.batch_size == (3, 2)
    assert s.tensordicts[0]["obs"].shape == (3, 2) and s.tensordicts[1]["extra"].tolist() == [1.0, 1.0, 1.0]
    root = lazy_stack([a.clone(), b.clone()]).memmap(tmp_path / "root")
    again = load_memmap(tmp_path / "root")
    assert again.batch_size == root.batch_size == (2, 3)


# --------------------------------------------------------------------------- state dicts


def _sd_td():
    return TensorDict(
        {"a": torch.arange(3.0), "n": {"b": torch.ones(3, 2, dtype=torch.int8), "m": {"c": torch.zeros(3, 4)}}}, [3]
    )


@pytest.mark.parametrize("flatten", [False, True])
def test_state_dict_roundtrip_weights_only(tmp_path, flatten):
    td = _sd_td()
    sd = td.state_dict(flatten=flatten)
    three = {"batch_size": torch.Size([3]), "device": None}
    if flatten:  # tensordict 0.14's layout: dotted keys, the metadata per level in sd._metadata
        assert list(sd) == ["a", "n.b", "n.m.c"]
        assert dict(sd._metadata) == {"": three, "n": three, "n.m": three}
    else:
        assert list(sd) == ["a", "n"] and list(sd["n"]) == ["b", "m"] and list(sd["n"]["m"]) == ["c"]
        assert dict(sd._metadata) == {"": three} and dict(sd["n"]["m"]._metadata) == {"": three}
    torch.save(sd, tmp_path / "sd.pt")
    back = torch.load(tmp_path / "sd.pt", weights_only=True)
    assert dict(back._metadata)[""] == three  # the metadata survives torch.save
    target = td.clone().zero_()
    assert target.load_state_dict(back) is target
    _assert_same(target, td)
    grown = TensorDict({}, [])  # the batch sizes come from the metadata
    grown.load_state_dict(back, strict=False)
    assert grown.batch_size == (3,) and grown["n", "m"].batch_size == (3,)
    _assert_same(grown, td)


def test_state_dict_loads_into_a_module():
    net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    params = TensorDict.from_module(net).clone().apply(lambda x: x.detach() + 1)
    net.load_state_dict(params.state_dict())  # flat "0.weight" keys, as nn.Module's own
    assert torch.equal(net[0].weight, params["0", "weight"])


def test_load_state_dict_of_the_legacy_layout():
    td = _sd_td()
    legacy = {
        "a": torch.full((3,), 7.0),
        "n": {
            "b": torch.ones(3, 2, dtype=torch.int8),
            "m": {"c": torch.ones(3, 4), "__batch_size": torch.Size([3]), "__device": None},
            "__batch_size": torch.Size([3]),
            "__device": None,
        },
        "__batch_size": torch.Size([3]),
        "__device": None,
    }
    target = td.clone().zero_()
    target.load_state_dict(legacy)
    assert target["a"].tolist() == [7.0] * 3 and target["n", "m", "c"].sum().item() == 12.0


def test_state_dict_prefix_destination_keep_vars():
    w = torch.ones(2, requires_grad=True)
    td = TensorDict({"w": w}, [2])
    assert td.state_dict()["w"].requires_grad is False
    assert td.state_dict(keep_vars=True)["w"] is w
    dest = {"other": 1}
    out = td.state_dict(destination=dest, prefix="p.")
    assert out is dest and set(dest) == {"other", "p.w"}  # a plain dict takes no _metadata
    ordered = collections.OrderedDict(other=1)
    td.state_dict(destination=ordered, prefix="p.")
    assert ordered._metadata["p"] == {"batch_size": torch.Size([2]), "device": None}


def test_state_dict_of_memmap_saves_values(tmp_path):
    td = _sd_td().memmap_(tmp_path / "mm")
    sd = td.state_dict()
    assert type(sd["a"]) is torch.Tensor
    torch.save(sd, tmp_path / "sd.pt")
    assert torch.equal(torch.load(tmp_path / "sd.pt", weights_only=True)["a"], td["a"])


def test_load_state_dict_checks_everything_before_writing():
    td = _sd_td()
    sd = td.state_dict()
    sd["a"] = torch.full((3,), 5.0)
    sd["n.b"] = torch.ones(3, 3, dtype=torch.int8)  # wrong shape
    target = td.clone()
    with pytest.raises(RuntimeError, match=r"\('n', 'b'\).*\[3, 3\].*\[3, 2\]"):
        target.load_state_dict(sd)
    assert target["a"].tolist() == [0.0, 1.0, 2.0]  # untouched
    sd = td.state_dict()
    sd["extra"] = torch.zeros(3)
    with pytest.raises(RuntimeError, match="only in the state dict.*extra"):
        target.load_state_dict(sd)
    target.load_state_dict(sd, strict=False)
    assert target["extra"].tolist() == [0.0, 0.0, 0.0]
    del sd["a"]
    with pytest.raises(RuntimeError, match="only in the collection.*'a'"):
        target.load_state_dict(sd)


def test_load_state_dict_assign_and_batch_size():
    src = TensorDict({"a": torch.arange(6.0).view(2, 3), "n": {"b": torch.ones(2, 3, 1)}}, [2, 3])
    dst = TensorDict({"a": torch.zeros(5), "n": {"b": torch.zeros(5, 1)}}, [5])
    sd = src.state_dict()
    dst.load_state_dict(sd, assign=True)
    assert dst.batch_size == torch.Size([2, 3]) and dst["n"].batch_size == torch.Size([2, 3])
    assert dst["a"] is sd["a"]  # assigned, not copied
    inplace = src.clone().zero_()
    keep = inplace["a"]
    inplace.load_state_dict(sd)
    assert inplace["a"] is keep and torch.equal(keep, src["a"])


@needs_non_tensor
def test_state_dict_non_tensor_payloads(tmp_path):
    td = TensorDict({"a": torch.zeros(2), "text": "hello"}, [2])
    sd = td.state_dict()
    assert "text" not in sd and sd._metadata[""]["_non_tensor"] == {"text": "hello"}
    torch.save(sd, tmp_path / "sd.pt")
    target = TensorDict({"a": torch.ones(2), "text": "bye"}, [2])
    target.load_state_dict(torch.load(tmp_path / "sd.pt", weights_only=True))
    assert target["text"] == "hello" and target["a"].tolist() == [0.0, 0.0]

    class Opaque:
        pass

    with pytest.raises(TypeError, match="'obj'"):
        TensorDict({"obj": Opaque()}, []).state_dict()


def test_state_dict_reserved_and_dotted_keys():
    with pytest.raises(KeyError, match="reserved"):
        TensorDict({"__batch_size": torch.zeros(1)}, []).state_dict()
    with pytest.raises(KeyError, match="separator"):
        TensorDict({"a.b": torch.zeros(1)}, []).state_dict(flatten=True)


@pytest.mark.gpu
def test_memmap_of_a_cuda_td(tmp_path):  # pragma: no cover - needs a GPU
    td = TensorDict({"a": torch.arange(3.0, device="cuda")}, [3], device="cuda")
    out = td.memmap(tmp_path)
    assert out.device == torch.device("cpu") and out["a"].device.type == "cpu"
    assert load_memmap(tmp_path, device="cuda")["a"].is_cuda
    with pytest.raises(RuntimeError, match="CPU"):
        td.memmap_(tmp_path)
    assert td["a"].is_cuda and not td.is_locked


def test_load_state_dict_of_tensordict_014_layout(tmp_path):
    # tensordict 0.14: flat keys, batch sizes in the OrderedDict's _metadata attribute
    import collections

    sd = collections.OrderedDict([("a", torch.arange(6.0).view(2, 3)), ("n.b", torch.ones(2, 3, 4))])
    sd._metadata = collections.OrderedDict(
        [
            ("", {"batch_size": torch.Size([2, 3]), "device": None}),
            ("n", {"batch_size": torch.Size([2, 3]), "device": None}),
        ]
    )
    torch.save(sd, tmp_path / "sd.pt")
    target = TensorDict({"a": torch.zeros(2), "n": {"b": torch.zeros(2, 7)}}, [2])
    target.load_state_dict(torch.load(tmp_path / "sd.pt", weights_only=True), assign=True)
    assert target.batch_size == (2, 3) and target["n"].batch_size == (2, 3)
    assert torch.equal(target["a"], sd["a"]) and target["n", "b"].shape == (2, 3, 4)


def test_fsync_is_opt_in_and_covers_data_dirs_and_metadata(tmp_path, monkeypatch):
    import os as _os

    calls = []
    real = _os.fsync
    monkeypatch.setattr(_os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    td = TensorDict({"a": torch.arange(4.0), "n": {"b": torch.ones(4)}}, [4])
    td.memmap(tmp_path / "fast")
    assert calls == []
    td.memmap(tmp_path / "durable", fsync=True)
    # two leaf files + the metadata temp file + the prefix and the sub-directory, at least
    assert len(calls) >= 5
    assert torch.equal(TensorDict.load_memmap(tmp_path / "durable")["n", "b"], torch.ones(4))
