"""Memmapped directories: the metadata checksum, malformed metadata, non-tensor roots, locking."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from tdict import LazyStackedTensorDict, MemoryMappedTensor, NonTensorData, NonTensorStack, TensorDict, lazy_stack
from tdict.persistence import META_NAME, MemmapLoadError, load_memmap, metadata_checksum


def _sample() -> TensorDict:
    members = [TensorDict({"x": torch.full((2,), float(i))}) for i in range(2)]
    return TensorDict(
        {
            "obs": torch.arange(6.0).view(3, 2),
            "next": {"reward": torch.ones(3), "text": "txt"},
            "lazy": lazy_stack([lazy_stack(members)] * 3),
        },
        [3],
    )


def _same(a, b) -> bool:
    return list(a.keys(True)) == list(b.keys(True)) and bool((a == b).all())


def _signed(meta: dict) -> str:
    body = {k: v for k, v in meta.items() if k != "sha256"}
    return json.dumps(dict(body, sha256=metadata_checksum(body)))


# --------------------------------------------------------------------------- R5: byte flips


def test_every_byte_flip_of_the_metadata_is_refused_or_harmless(tmp_path):
    _sample().memmap(tmp_path)
    reference = load_memmap(tmp_path)
    path = tmp_path / META_NAME
    original = path.read_bytes()
    outcomes = {"refused": 0, "identical": 0}
    try:
        for i in range(len(original)):
            for mask in (0x01, 0x20):  # digits to digits, letters to letters, case changes
                damaged = bytearray(original)
                damaged[i] ^= mask
                path.write_bytes(bytes(damaged))
                try:
                    loaded = load_memmap(tmp_path)
                except MemmapLoadError:  # nothing else may escape
                    outcomes["refused"] += 1
                    continue
                assert _same(loaded, reference), f"byte {i} ^ {mask:#x} loaded different data"
                outcomes["identical"] += 1
    finally:
        path.write_bytes(original)
    assert outcomes["refused"] == 2 * len(original), outcomes  # with the checksum no flip goes unnoticed
    assert _same(load_memmap(tmp_path), reference)


def test_a_renamed_key_with_a_stale_checksum_is_refused(tmp_path):
    TensorDict({"obs": torch.zeros(2)}, [2]).memmap(tmp_path)
    text = (tmp_path / META_NAME).read_text()
    assert text.count('"obs"') == 1
    (tmp_path / META_NAME).write_text(text.replace('"obs"', '"obt"'))
    with pytest.raises(MemmapLoadError, match="integrity check"):
        load_memmap(tmp_path)


# --------------------------------------------------------------------------- R5: malformed metadata


def _paths(node, prefix=()):
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return
    for key, value in items:
        yield prefix + (key,)
        yield from _paths(value, prefix + (key,))


_REPLACEMENTS = [None, True, -1, 2**70, 1.5, "x", [], [-1], ["a"], {}, {"type": "TensorDict"}]


@pytest.mark.parametrize("root", ["tensordict", "non_tensor_stack"])
def test_malformed_metadata_raises_memmap_load_error(tmp_path, root):
    """Every field deleted or replaced by a value of another type, with a matching checksum (a
    crafted file): loading raises MemmapLoadError or succeeds, never KeyError/TypeError/..."""
    data = _sample() if root == "tensordict" else torch.stack([NonTensorStack.from_list([0, 1])] * 3)
    data.memmap(tmp_path)
    meta = json.loads((tmp_path / META_NAME).read_text())
    tried = 0
    for path in list(_paths(meta)):
        if path == ("sha256",):
            continue
        for replacement in [_MISSING_FIELD, *_REPLACEMENTS]:
            edited = copy.deepcopy(meta)
            parent = edited
            for part in path[:-1]:
                parent = parent[part]
            if replacement is _MISSING_FIELD:
                parent.pop(path[-1])
            else:
                parent[path[-1]] = copy.deepcopy(replacement)
            (tmp_path / META_NAME).write_text(_signed(edited))
            try:
                load_memmap(tmp_path)
            except MemmapLoadError:
                pass
            tried += 1
    assert tried > 100


_MISSING_FIELD = object()


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda m: m["root"].pop("device"), "malformed device"),
        (lambda m: m["root"].pop("names"), "malformed names"),
        (lambda m: dict(m["root"]["entries"])["obs"].update(dtype=["float32"]), "unknown dtype"),
        (lambda m: dict(m["root"]["entries"])["lazy"].pop("stack_dim_name"), "malformed lazy stack"),
        (lambda m: m.update(extra=1), "has fields"),
        (lambda m: m.update(token=3), "malformed token"),
        (lambda m: m.update(version="2"), "format version '2'"),
    ],
)
def test_malformed_fields_are_named(tmp_path, edit, match):
    _sample().memmap(tmp_path)
    meta = json.loads((tmp_path / META_NAME).read_text())
    edit(meta)
    (tmp_path / META_NAME).write_text(_signed(meta))
    with pytest.raises(MemmapLoadError, match=match):
        load_memmap(tmp_path)


def test_version_1_files_without_a_checksum_still_load(tmp_path):
    td = _sample()
    td.memmap(tmp_path)
    meta = json.loads((tmp_path / META_NAME).read_text())
    assert meta["version"] == 2 and meta["sha256"] == metadata_checksum(
        {k: v for k, v in meta.items() if k != "sha256"}
    )
    del meta["sha256"]
    meta["version"] = 1
    (tmp_path / META_NAME).write_text(json.dumps(meta))
    assert _same(load_memmap(tmp_path), td)
    # a version 1 file may not carry a checksum field (a damaged version 2 file would)
    meta["sha256"] = "0" * 64
    (tmp_path / META_NAME).write_text(json.dumps(meta))
    with pytest.raises(MemmapLoadError, match="has fields"):
        load_memmap(tmp_path)


# --------------------------------------------------------------------------- non-tensor roots


def test_nested_non_tensor_stack_of_ints_roundtrips(tmp_path):
    # tensordict 0.14: torch.stack([torch.stack([NonTensorData(0), NonTensorData(1)])] * 3) memmaps and
    # reloads as a NonTensorStack with tolist() == [[0, 1], [0, 1], [0, 1]] (tdict gave [[{}, {}], ...])
    data = torch.stack([torch.stack([NonTensorData(data=0), NonTensorData(data=1)], 0)] * 3)
    assert type(data) is NonTensorStack
    mapped = data.memmap(tmp_path)
    assert type(mapped) is NonTensorStack and mapped.tolist() == [[0, 1], [0, 1], [0, 1]] and mapped.is_locked
    loaded = load_memmap(tmp_path)
    assert type(loaded) is NonTensorStack
    assert loaded.batch_size == torch.Size([3, 2])
    assert loaded.tolist() == [[0, 1], [0, 1], [0, 1]]
    assert data.tolist() == [[0, 1], [0, 1], [0, 1]]  # the source is untouched


def test_non_tensor_data_root_roundtrips(tmp_path):
    NonTensorData(data={"a": (1, 2)}, batch_size=[2]).memmap(tmp_path)
    loaded = load_memmap(tmp_path)
    assert type(loaded) is NonTensorData and loaded.data == {"a": (1, 2)} and loaded.batch_size == torch.Size([2])


# --------------------------------------------------------------------------- locking


def test_lock_context_on_a_memmapped_tensordict_keeps_it_locked(tmp_path):
    td = TensorDict({"a": torch.zeros(2)}, [2]).memmap_(tmp_path)
    assert td.is_locked  # memmap_ locks
    with td.lock_():
        assert td.is_locked
    assert td.is_locked  # tensordict 0.14: still locked after the block
    with td.unlock_():
        assert not td.is_locked
    assert td.is_locked
    plain = TensorDict({"a": torch.zeros(2)}, [2])
    with plain.lock_():
        assert plain.is_locked
    assert not plain.is_locked
    with plain.unlock_():  # already unlocked: stays so
        assert not plain.is_locked
    assert not plain.is_locked


def test_memmap_like_of_a_lazy_stack_is_memory_mapped(tmp_path):
    stack = lazy_stack([TensorDict({"a": torch.zeros(2)}), TensorDict({"a": torch.ones(2)})])
    for prefix in (None, tmp_path):
        like = stack.memmap_like(prefix)
        assert type(like) is LazyStackedTensorDict and like.is_locked
        assert all(type(m.get("a")) is MemoryMappedTensor for m in like.tensordicts)
        assert like.is_memmap()  # tensordict 0.14: True
        assert like.get("a").shape == torch.Size([2, 2])
