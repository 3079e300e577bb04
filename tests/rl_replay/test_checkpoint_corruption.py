"""Loading a damaged checkpoint either raises CheckpointError with the buffer unchanged, or loads a
usable buffer: byte flips at every position of the checkpoint's JSON files, and every entry removed
or renamed."""

from __future__ import annotations

import json
import os

import pytest
import torch
from rl_replay import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from rl_replay.checkpoint import CheckpointError
from tdict import TensorDict, is_tensor_collection


def _steps(n: int, start: int) -> TensorDict:
    g = torch.Generator().manual_seed(start)
    return TensorDict(
        {
            "obs": torch.randn(n, 3, generator=g),
            "action": torch.arange(start, start + n),
            "next": {"reward": torch.rand(n, generator=g), "done": torch.zeros(n, dtype=torch.bool)},
        },
        batch_size=[n],
    )


def _td_buffer() -> ReplayBuffer:
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(30),
        sampler=SamplerWithoutReplacement(),
        generator=torch.Generator().manual_seed(1),
        batch_size=4,
    )


def _list_buffer() -> ReplayBuffer:
    return ReplayBuffer(
        storage=ListStorage(20),
        sampler=RandomSampler(),
        collate_fn=list,
        generator=torch.Generator().manual_seed(1),
        batch_size=3,
    )


def _prioritized_buffer() -> ReplayBuffer:
    return ReplayBuffer(
        storage=LazyMemmapStorage(16),
        sampler=PrioritizedSampler(16, alpha=0.7, beta=0.5),
        generator=torch.Generator().manual_seed(1),
        batch_size=3,
    )


CONFIGS = {
    # (make, data of the checkpoint, data of the buffer it is loaded into)
    "tensordict": (_td_buffer, lambda: _steps(12, 0), lambda: _steps(5, 100)),
    "list": (_list_buffer, lambda: [1, "a", {"k": [1, 2]}, None, 2.5, [True]], lambda: ["x", "y"]),
    "prioritized": (_prioritized_buffer, lambda: torch.arange(10.0), lambda: torch.arange(4.0) + 50),
}


def _filled(config: str, which: int) -> ReplayBuffer:
    make, saved, target = CONFIGS[config]
    rb = make()
    rb.extend(saved() if which == 0 else target())
    rb.sample()
    if config == "prioritized":
        rb.update_priority(torch.tensor([0, 2]), torch.tensor([3.0, 0.5]))
    return rb


def _snapshot(rb: ReplayBuffer) -> tuple:
    storage = rb.storage
    data = getattr(storage, "_storage", None)
    return (
        len(rb),
        None if data is None else data.clone(),
        list(getattr(storage, "_items", [])),
        rb.sampler.state_dict(),
        rb.writer.state_dict(),
        rb._rng.get_state(),
        rb._batch_size,
        getattr(rb, "_dict_items", False),
    )


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or is_tensor_collection(a):
        if type(a) is not type(b):
            return False
        if is_tensor_collection(a):
            keys = sorted(map(str, a.keys(True, True)))
            return keys == sorted(map(str, b.keys(True, True))) and all(
                torch.equal(a.get(k), b.get(k)) for k in a.keys(True, True)
            )
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


class _Target:
    """The buffer a damaged checkpoint is loaded into, rebuilt after each successful load."""

    def __init__(self, config: str) -> None:
        self.config = config
        self.rebuild()

    def rebuild(self) -> None:
        self.rb = _filled(self.config, 1)
        self.before = _snapshot(self.rb)

    def load(self, path, what: str) -> str:
        try:
            self.rb.loads(path)
        except CheckpointError:
            assert _same(_snapshot(self.rb), self.before), f"{what}: CheckpointError, but the buffer changed"
            return "error"
        # any other exception propagates and fails the test
        batch = self.rb.sample()
        assert len(batch) == self.rb.batch_size, what
        self.rebuild()
        return "loaded"


def _json_files(path) -> list:
    out = []
    for root, _, files in os.walk(path):
        out += [os.path.join(root, f) for f in files if f.endswith(".json")]
    return sorted(out)


def _saved(tmp_path, config: str):
    path = tmp_path / "ck"
    _filled(config, 0).dumps(path)
    return path


@pytest.mark.parametrize("config", CONFIGS)
def test_byte_flips_raise_checkpoint_error_or_load(tmp_path, config):
    path = _saved(tmp_path, config)
    target = _Target(config)
    outcomes = {"error": 0, "loaded": 0}
    for name in _json_files(path):
        original = open(name, "rb").read()
        # every byte of rl_replay's own files; every third of tdict's (larger, and checked by tdict)
        step = 3 if name.endswith("tdict_meta.json") else 1
        try:
            for i in range(0, len(original), step):
                damaged = bytearray(original)
                damaged[i] ^= 0x01  # digits to digits, letters to letters, quotes and brackets to other characters
                with open(name, "wb") as f:
                    f.write(damaged)
                outcomes[target.load(path, f"{os.path.relpath(name, path)} byte {i}")] += 1
        finally:
            with open(name, "wb") as f:
                f.write(original)
    assert outcomes["error"] > 100 and outcomes["loaded"] > 0, outcomes
    assert target.load(path, "undamaged") == "loaded"


def _entry_paths(node, prefix=()):
    """Paths to every key of every JSON object in ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from _entry_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _entry_paths(value, (*prefix, i))


def _edited(node, path, rename: bool):
    parent = node
    for key in path[:-1]:
        parent = parent[key]
    value = parent.pop(path[-1])
    if rename:
        parent[path[-1] + "_"] = value
    return node


@pytest.mark.parametrize("config", CONFIGS)
def test_removed_or_renamed_entries_raise_checkpoint_error_or_load(tmp_path, config):
    path = _saved(tmp_path, config)
    target = _Target(config)
    count = 0
    for name in _json_files(path):
        original = open(name, "rb").read()
        try:
            for entry in list(_entry_paths(json.loads(original))):
                for rename in (False, True):
                    with open(name, "w") as f:
                        json.dump(_edited(json.loads(original), entry, rename), f)
                    target.load(path, f"{os.path.relpath(name, path)} {'renamed' if rename else 'removed'} {entry}")
                    count += 1
        finally:
            with open(name, "wb") as f:
                f.write(original)
    assert count > 40


def _rewrite(file, edit) -> None:
    meta = json.loads(file.read_text())
    edit(meta)
    file.write_text(json.dumps(meta))


def test_bad_sampler_state_leaves_the_stored_rows(tmp_path):
    path = _saved(tmp_path, "tensordict")
    _rewrite(path / "sampler" / "part.json", lambda m: m["state"]["data"].update(order=[0, 0, 1]))
    rb = _filled("tensordict", 1)
    before = _snapshot(rb)
    with pytest.raises(CheckpointError, match=r"sampler.*permutation of range\(3\)"):
        rb.loads(path)
    assert _same(_snapshot(rb), before) and rb[:]["action"].tolist() == [100, 101, 102, 103, 104]


def test_missing_rng_state_leaves_the_length(tmp_path):
    path = _saved(tmp_path, "tensordict")
    _rewrite(path / "buffer" / "part.json", lambda m: m["state"]["rng"].pop("state"))
    rb = _filled("tensordict", 1)
    before = _snapshot(rb)
    with pytest.raises(CheckpointError, match=r"buffer: the entry 'state' is missing"):
        rb.loads(path)
    assert _same(_snapshot(rb), before) and len(rb) == 5


def test_bad_writer_state_raises_checkpoint_error_naming_the_part(tmp_path):
    path = _saved(tmp_path, "tensordict")
    _rewrite(path / "writer" / "part.json", lambda m: m["state"]["data"].update(_cursor="12"))
    rb = _filled("tensordict", 1)
    before = _snapshot(rb)
    with pytest.raises(CheckpointError, match=r"writer.*state\['_cursor'\] must be an int >= 0, got '12'"):
        rb.loads(path)
    assert _same(_snapshot(rb), before)
