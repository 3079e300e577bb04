"""ReplayBuffer(prefetch=...): 0/None off, n > 0 draws n batches ahead in one background thread."""

import gc
import threading

import pytest
import torch
from rl_replay import ListStorage, ReplayBuffer, TensorDictReplayBuffer


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "rl_replay_prefetch"]


def _wait_gone(timeout=5.0):
    for t in _prefetch_threads():
        t.join(timeout)
    return not _prefetch_threads()


@pytest.fixture(autouse=True)
def no_leftover_threads():
    yield
    gc.collect()
    assert _wait_gone(), "a prefetching thread outlived its buffer"


def _buffer(prefetch, seed=0, **kwargs):
    rb = ReplayBuffer(
        storage=ListStorage(20),
        batch_size=3,
        prefetch=prefetch,
        generator=torch.Generator().manual_seed(seed),
        **kwargs,
    )
    rb.extend(torch.arange(20))
    return rb


@pytest.mark.parametrize("prefetch", [0, None])
def test_zero_and_none_mean_no_prefetching(prefetch):
    rb = _buffer(prefetch)
    rb.sample()
    assert rb._prefetch_queue == [] and not _prefetch_threads()


@pytest.mark.parametrize("prefetch", [1, 3])
def test_prefetched_batches_equal_the_unprefetched_sequence(prefetch):
    plain, ahead = _buffer(None), _buffer(prefetch)
    for _ in range(6):
        (a, ia), (b, ib) = plain.sample(return_info=True), ahead.sample(return_info=True)
        assert torch.equal(a, b) and torch.equal(ia["index"], ib["index"])
        assert torch.equal(b, ib["index"])  # item i holds the value i
        assert len(ahead._prefetch_queue) == prefetch  # as TorchRL: `prefetch` batches on the way
    ahead.close()
    assert ahead._prefetch_queue == [] and _wait_gone(0)


def test_bad_prefetch_arguments_raise_before_anything_is_built():
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match=f"prefetch must be an int >= 0 or None .*got {bad!r}"):
            ReplayBuffer(batch_size=2, prefetch=bad)  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match="prefetch=2 needs a batch_size at construction"):
        ReplayBuffer(prefetch=2)
    with pytest.raises(ValueError, match="prefetch_timeout must be a number of seconds > 0 or None, got 0"):
        ReplayBuffer(batch_size=2, prefetch=1, prefetch_timeout=0)
    assert not _prefetch_threads()
    rb = _buffer(2)
    with pytest.raises(ValueError, match="batch_size 5 differs from the buffer's 3"):
        rb.sample(5)


def test_an_error_in_the_thread_is_raised_by_sample_and_the_queue_recovers():
    rb = ReplayBuffer(storage=ListStorage(10), batch_size=2, prefetch=2)
    with pytest.raises(RuntimeError, match="ListStorage is empty: nothing to sample"):
        rb.sample()
    assert rb._prefetch_queue == []  # the batches queued behind it were dropped (stale)
    rb.extend(torch.arange(4))
    assert rb.sample().shape == (2,)

    calls = []

    def collate(items):
        calls.append(len(items))
        if len(calls) == 2:
            raise ValueError("bad batch")
        return torch.stack(items)

    rb = _buffer(2, collate_fn=collate)
    assert rb.sample().shape == (3,)
    with pytest.raises(ValueError, match="bad batch"):
        rb.sample()
    assert rb.sample().shape == (3,)
    rb.close()


def test_a_hung_thread_raises_timeout_and_is_left_behind():
    release = threading.Event()

    def collate(items):
        release.wait(10)
        return torch.stack(items)

    rb = _buffer(1, collate_fn=collate, prefetch_timeout=0.2)
    with pytest.raises(TimeoutError, match=r"gave no batch within prefetch_timeout=0.2s"):
        rb.sample()
    assert rb._prefetch_queue == [] and rb._prefetcher is None
    release.set()  # the stuck thread finishes its batch and stops
    assert _wait_gone()
    assert rb.sample().shape == (3,)  # a new thread
    rb.close(timeout=5)


def test_close_and_delete_stop_the_thread():
    rb = _buffer(2)
    rb.sample()
    assert len(_prefetch_threads()) == 1
    rb.close(timeout=5)
    assert not _prefetch_threads()
    assert rb.sample().shape == (3,)  # usable after close
    del rb
    gc.collect()
    assert _wait_gone()


def test_tensordict_buffer_prefetches_too():
    from tdict import TensorDict

    rb = TensorDictReplayBuffer(
        storage=ListStorage(8), batch_size=2, prefetch=1, generator=torch.Generator().manual_seed(0)
    )
    rb.extend(TensorDict(obs=torch.arange(8.0), batch_size=[8]))
    for _ in range(3):
        sample = rb.sample()
        assert torch.equal(sample["obs"], sample["index"].float())
    rb.close()


_EXIT_SCRIPT = """
import sys, time, torch
from rl_replay import ListStorage, ReplayBuffer

log = open(sys.argv[1], "a")

def slow_transform(batch):
    log.write("start\\n"); log.flush()
    time.sleep(0.3)
    out = torch.stack([torch.as_tensor(x) for x in batch]).float().matmul(torch.ones(1, 4))
    log.write("end\\n"); log.flush()
    return out

kept = ReplayBuffer(storage=ListStorage(20), batch_size=4, prefetch=2, transform=slow_transform)
dropped = ReplayBuffer(storage=ListStorage(20), batch_size=4, prefetch=2, transform=slow_transform)
for rb in (kept, dropped):
    rb.extend([torch.tensor([float(i)]) for i in range(20)])
    rb.sample()
del dropped  # its thread is still drawing the queued batches
"""


def test_interpreter_exit_waits_for_running_batches_and_drops_queued_ones(tmp_path):
    # a thread left inside a torch op while the interpreter finalizes aborts the process
    # ("terminate called without an active exception"): exit joins every prefetching thread,
    # also that of a deleted buffer, after the batch it is drawing
    import subprocess
    import sys

    log = tmp_path / "log.txt"
    proc = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, str(log)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = log.read_text().split()
    assert lines.count("start") == lines.count("end")  # no batch cut off mid-way
    assert lines.count("start") < 2 * (1 + 2)  # the queued batches were not all drawn at exit
