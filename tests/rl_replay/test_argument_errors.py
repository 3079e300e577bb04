"""Bad arguments raise errors naming the argument, what was expected and what arrived, before any change."""

from __future__ import annotations

import pytest
import torch
from rl_replay import (
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from tdict import TensorDict


def _filled(n: int = 5) -> ReplayBuffer:
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10), sampler=SamplerWithoutReplacement(), generator=torch.Generator().manual_seed(0)
    )
    rb.extend(torch.arange(float(n)))
    rb.sample(2)
    return rb


def _state(rb: ReplayBuffer) -> tuple:
    return len(rb), rb[:].tolist(), rb.sampler.state_dict(), rb.writer.state_dict(), rb._rng.get_state().tolist()


@pytest.mark.parametrize("bad", [-1, -10, 2.5, True, "3"])
def test_sample_rejects_a_bad_batch_size(bad):
    rb = _filled()
    before = _state(rb)
    with pytest.raises(
        ValueError, match=r"ReplayBuffer.sample: batch_size must be an int >= 0 .*got " + repr(bad).replace(".", r"\.")
    ):
        rb.sample(bad)
    assert _state(rb) == before


def test_sample_takes_int_like_batch_sizes():
    rb = _filled()
    assert rb.sample(torch.tensor(2)).shape == torch.Size([2])
    assert rb.sample(0).shape == torch.Size([0])


@pytest.mark.parametrize(
    "data, got",
    [(torch.zeros(3), r"a tensor of shape \[3\]"), ([1, 2], "a list of int"), ("abc", "str"), (None, "NoneType")],
)
def test_tensordict_buffer_extend_names_the_argument(data, got):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(TensorDict(x=torch.zeros(2), batch_size=[2]))
    with pytest.raises(
        TypeError,
        match=r"TensorDictReplayBuffer.extend: data must be a TensorDict of items \(or a list of dicts, one per item\), got "
        + got,
    ):
        rb.extend(data)
    assert len(rb) == 2 and rb.writer.state_dict() == {"_cursor": 2, "_write_count": 2}


def test_tensordict_buffer_add_names_the_argument():
    rb = TensorDictReplayBuffer(storage=ListStorage(10))
    with pytest.raises(
        TypeError,
        match=r"TensorDictReplayBuffer.add: data must be a TensorDict \(or a dict\), got a tensor of shape \[2\]",
    ):
        rb.add(torch.zeros(2))
    assert len(rb) == 0


@pytest.mark.parametrize(
    "writer, match",
    [
        (
            {"_cursor": "x", "_write_count": 3},
            r"state\['_writer'\] is not a valid RoundRobinWriter state: .*state\['_cursor'\] must be an int >= 0, got 'x'",
        ),
        (
            {"write_count": 3},
            r"state\['_writer'\].*state\['_cursor'\] must be an int >= 0, got no such entry \(keys: \['_write_count'\]\)",
        ),
        ({"_cursor": 1, "_write_count": -2}, r"state\['_write_count'\] must be an int >= 0, got -2"),
        ({"_cursor": 10, "_write_count": 10}, r"state\['_cursor'\] must be < the capacity 10, got 10"),
        (None, r"state\['_writer'\].*state must be a dict with \['_cursor', '_write_count'\], got NoneType"),
    ],
)
def test_load_state_dict_bad_writer_state_changes_nothing(writer, match):
    source = _filled(8)
    source.sample(3)
    state = source.state_dict()
    state["_writer"] = writer
    rb = _filled()
    before = _state(rb)
    with pytest.raises(ValueError, match=match):
        rb.load_state_dict(state)
    assert _state(rb) == before


def test_load_state_dict_bad_storage_or_sampler_or_rng_state_changes_nothing():
    source = _filled(8)
    rb = _filled()
    before = _state(rb)
    for part, value, match in [
        ("_storage", {"len": 11}, r"state\['len'\] must be an int in \[0, 10\], got 11"),
        (
            "_sampler",
            {"order": [0, 1], "pos": 0},
            r"state\['_sampler'\] is not a valid SamplerWithoutReplacement state",
        ),
        ("_rng", torch.zeros(3, dtype=torch.uint8), r"state\['_rng'\] is not a generator state"),
    ]:
        state = source.state_dict()
        state[part] = value
        with pytest.raises(ValueError, match=match):
            rb.load_state_dict(state)
        assert _state(rb) == before
    with pytest.raises(
        ValueError, match=r"state must be a dict with '_storage', '_sampler' and '_writer' entries, got \['storage'\]"
    ):
        rb.load_state_dict({"storage": {"len": 1}})
    rb.load_state_dict(source.state_dict())  # a good state still loads
    assert rb.writer.state_dict() == source.writer.state_dict() and len(rb) == 8
