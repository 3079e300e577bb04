"""compilable=True (TorchRL 0.14's keyword): counters in Python ints, so torch.compile traces extend/sample."""

import pickle

import pytest
import torch
from rl_replay import (
    CompressedListStorage,
    ImmutableDatasetWriter,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
    TensorStorage,
)
from tdict import TensorDict


@pytest.mark.parametrize(
    "make",
    [
        lambda c: ListStorage(5, compilable=c),
        lambda c: LazyTensorStorage(5, compilable=c),
        lambda c: TensorStorage(torch.zeros(5), compilable=c),
        lambda c: LazyMemmapStorage(5, compilable=c),
        lambda c: CompressedListStorage(5, compilable=c),
        lambda c: RoundRobinWriter(compilable=c),
        lambda c: RoundRobinWriter(c),  # positional, as TorchRL allows
        lambda c: TensorDictRoundRobinWriter(compilable=c),
        lambda c: TensorDictMaxValueWriter(compilable=c),
        lambda c: ImmutableDatasetWriter(compilable=c),
    ],
)
def test_every_part_takes_and_stores_compilable(make):
    assert make(True).compilable is True and make(True)._compilable is True
    assert make(False).compilable is False


@pytest.mark.parametrize("compilable", [None, 1, "yes"])
def test_non_bool_compilable_is_refused(compilable):
    if compilable is None:  # the buffers' default, as TorchRL's ReplayBuffer
        assert ReplayBuffer(compilable=None).compilable is False
        with pytest.raises(TypeError, match="compilable must be a bool, got None"):
            LazyTensorStorage(3, compilable=None)  # pyright: ignore[reportArgumentType]
        return
    with pytest.raises(TypeError, match=f"ListStorage: compilable must be a bool, got {compilable!r}"):
        ListStorage(3, compilable=compilable)
    with pytest.raises(TypeError, match="RoundRobinWriter: compilable must be a bool"):
        RoundRobinWriter(compilable=compilable)
    with pytest.raises(TypeError, match="ReplayBuffer: compilable must be a bool"):
        ReplayBuffer(compilable=compilable)


def test_buffers_build_compilable_default_parts():
    rb = ReplayBuffer(compilable=True)
    assert rb.compilable and rb.storage.compilable and rb.writer.compilable
    assert isinstance(rb.storage, ListStorage)
    td = TensorDictReplayBuffer(compilable=True)
    assert isinstance(td.writer, TensorDictRoundRobinWriter) and td.writer.compilable and td.storage.compilable
    prb = PrioritizedReplayBuffer(alpha=0.7, beta=0.9, compilable=True)
    assert prb.storage.compilable and prb.writer.compilable
    tdp = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.9, compilable=True)
    assert tdp.storage.compilable and tdp.writer.compilable
    # a given storage is used as it is
    assert not ReplayBuffer(storage=LazyTensorStorage(3), compilable=True).storage.compilable


def test_compilable_counters_are_python_ints_and_cannot_be_shared():
    rb = ReplayBuffer(storage=LazyTensorStorage(4, compilable=True), compilable=True)
    rb.extend(torch.arange(6))  # more than the capacity: the last 4 are kept
    assert len(rb) == 4 and rb.writer.state_dict() == {"_cursor": 2, "_write_count": 6}
    assert rb[:].tolist() == [4, 5, 2, 3]
    assert rb.storage.state_dict()["len"] == 4
    with pytest.raises(RuntimeError, match="LazyTensorStorage was built with compilable=True"):
        rb.share_memory_()
    with pytest.raises(RuntimeError, match="RoundRobinWriter was built with compilable=True"):
        rb.writer.share_memory_()
    with pytest.raises(RuntimeError, match="LazyMemmapStorage was built with compilable=True"):
        LazyMemmapStorage(3, compilable=True).share_memory_()
    copy = pickle.loads(pickle.dumps(rb))
    assert copy.writer.state_dict() == {"_cursor": 2, "_write_count": 6} and copy[:].tolist() == [4, 5, 2, 3]
    rb.empty()
    assert len(rb) == 0 and rb.writer.state_dict() == {"_cursor": 0, "_write_count": 0}


@pytest.mark.parametrize("cls", [ReplayBuffer, TensorDictReplayBuffer])
@pytest.mark.parametrize("size,capacity", [(3, 7), (5, 10), (4, 4)])
def test_compilable_writes_and_samples_match_the_default(cls, size, capacity):
    """Wrapped writes go as two slices when compilable: same storage, same indices, same samples."""
    outs = []
    for compilable in (False, True):
        torch.manual_seed(0)
        rb = cls(storage=LazyTensorStorage(capacity, compilable=compilable), batch_size=4, compilable=compilable)
        indices, samples = [], []
        for step in range(5):
            data = TensorDict(obs=torch.arange(step * size, (step + 1) * size), batch_size=[size])
            indices.append(rb.extend(data).tolist())
            if cls is TensorDictReplayBuffer:
                assert data["index"].tolist() == indices[-1]  # written back into the argument too
            samples.append(rb.sample()["obs"].tolist())
        outs.append((indices, samples, rb[:]["obs"].tolist(), rb.writer.state_dict()))
    assert outs[0] == outs[1]
    # the reference: the last `capacity` items, at position (item number % capacity)
    items = list(range(5 * size))[-capacity:]
    stored = [None] * capacity
    for i in items:
        stored[i % capacity] = i
    assert outs[1][2] == stored


def _extend_and_sample(rb, data):
    rb.extend(data)
    return rb.sample(return_info=True)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("capacity", [10, 12])  # 10: the cursor wraps on a batch boundary, 12: mid-batch
def test_compiled_extend_and_sample_equal_eager(backend, capacity):
    torch._dynamo.reset()
    data = torch.arange(5).unsqueeze(-1)
    results = []
    for compiled in (False, True):
        rb = ReplayBuffer(storage=LazyTensorStorage(capacity, compilable=True), batch_size=3, compilable=True)
        fn = torch.compile(_extend_and_sample, backend=backend) if compiled else _extend_and_sample
        torch.manual_seed(0)
        steps = []
        for step in range(6):
            sample, info = fn(rb, data + 10 * step)
            assert torch.equal(sample, rb[info["index"]])  # each sampled item is the one stored at its index
            steps.append((sample.tolist(), info["index"].tolist()))
        results.append((steps, rb[:].tolist(), len(rb), rb.writer.state_dict()))
    assert results[0] == results[1]
    _, stored, n, writer_state = results[0]
    assert n == capacity and writer_state == {"_cursor": 30 % capacity, "_write_count": 30}
    values = [10 * step + i for step in range(6) for i in range(5)]
    assert sorted(row[0] for row in stored) == values[-capacity:]


def test_compiled_extend_and_sample_have_no_graph_break():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    rb = ReplayBuffer(storage=LazyTensorStorage(10, compilable=True), batch_size=3, compilable=True)
    fn = torch.compile(_extend_and_sample, backend="eager")
    data = torch.arange(5).unsqueeze(-1)
    for _ in range(8):
        fn(rb, data)
    assert not counters["graph_break"], dict(counters["graph_break"])
    # the cursor cycles through 0 and 5 and the length stays at 10: the compiled code stops changing
    graphs = counters["stats"]["unique_graphs"]
    for _ in range(4):
        fn(rb, data)
    assert counters["stats"]["unique_graphs"] == graphs
    # without compilable=True, the tensor counters are read back with Tensor.item(): graph breaks
    torch._dynamo.reset()
    counters.clear()
    plain = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=3)
    torch.compile(_extend_and_sample, backend="eager")(plain, data)
    assert counters["graph_break"]
