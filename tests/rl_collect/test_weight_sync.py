"""Weight sync schemes: values and versions reach the worker side, once per version."""

import multiprocessing as mp

import pytest
import torch
from torch import nn
from tdict import TensorDict

from rl_collect.weight_sync import PipeWeightSyncScheme, SharedMemWeightSyncScheme


def _weights(value: float) -> TensorDict:
    module = nn.Linear(3, 2)
    return TensorDict.from_module(module).apply(lambda t: torch.full_like(t.detach(), value))


def test_shared_mem_send_receive_versions():
    scheme = SharedMemWeightSyncScheme()
    scheme.init_sender(_weights(1.0))
    receivers = [scheme.receiver(i) for i in range(2)]
    assert [r.receive() for r in receivers] == [(None, 0), (None, 0)]
    scheme.send(_weights(2.0), version=1)
    for r in receivers:
        weights, version = r.receive()
        assert version == 1
        assert torch.equal(weights["weight"], torch.full((2, 3), 2.0))
        assert torch.equal(weights["bias"], torch.full((2,), 2.0))
        assert r.receive() == (None, 1)
    # the snapshot a worker got does not change under a later send
    scheme.send(_weights(3.0), version=2)
    assert float(weights["weight"][0, 0]) == 2.0
    assert float(receivers[0].receive()[0]["bias"][0]) == 3.0
    assert scheme.weights.is_shared()


def test_shared_mem_reaches_another_process():
    scheme = SharedMemWeightSyncScheme()
    scheme.init_sender(_weights(0.0))
    receiver = scheme.receiver(0)
    scheme.send(_weights(5.0), version=7)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()

    def read(conn, rec):
        weights, version = rec.receive()
        conn.send((float(weights["weight"].sum()), version))

    proc = ctx.Process(target=read, args=(child, receiver))
    proc.start()
    assert parent.recv() == (30.0, 7)
    proc.join(5)
    assert proc.exitcode == 0


def test_pipe_scheme_orders_and_versions():
    a, b = mp.Pipe()
    scheme = PipeWeightSyncScheme()
    scheme.init_sender(_weights(0.0), [a])
    receiver = scheme.receiver(0)
    assert receiver.receive() == (None, 0)
    scheme.send(_weights(4.0), version=1)
    a.send(("collect", 10))
    message = b.recv()
    assert receiver.handle(message)
    assert not receiver.handle(b.recv())  # a command, not weights: left to the worker loop
    weights, version = receiver.receive()
    assert version == 1 and torch.equal(weights["bias"], torch.full((2,), 4.0))
    assert receiver.receive() == (None, 1)


def test_send_clones_for_pipe():
    a, b = mp.Pipe()
    scheme = PipeWeightSyncScheme()
    scheme.init_sender(None, [a])
    w = _weights(1.0)
    scheme.send(w, version=3)
    w["weight"].zero_()
    receiver = scheme.receiver(0)
    receiver.handle(b.recv())
    got, version = receiver.receive()
    assert version == 3 and float(got["weight"].sum()) == 6.0


@pytest.mark.parametrize("scheme_cls", [SharedMemWeightSyncScheme, PipeWeightSyncScheme])
def test_no_parameters_only_version(scheme_cls):
    a, b = mp.Pipe()
    scheme = scheme_cls()
    scheme.init_sender(None, [a])
    scheme.attach_pipes([a])
    receiver = scheme.receiver(0)
    scheme.send(None, version=2)
    if scheme_cls is PipeWeightSyncScheme:
        receiver.handle(b.recv())
    assert receiver.receive() == (None, 2)


# ---------------------------------------------------------------------- Ray scheme (API, with a stand-in for Ray)
# The real Ray path runs in test_ray.py (inside its network namespace, through RayCollector). Here a fake
# ``ray`` module with put/get checks the scheme's contract cheaply: one put per version, fetched lazily.
class _FakeRay:
    def __init__(self):
        self.store, self.puts, self.gets = {}, 0, 0

    def put(self, value):
        self.puts += 1
        ref = f"ref{self.puts}"
        self.store[ref] = value
        return ref

    def get(self, ref):
        self.gets += 1
        return self.store[ref]


class _FakeActor:
    """Stands for an actor handle: ``actor.handle_weights.remote(msg)`` runs on its receiver."""

    def __init__(self, receiver):
        self.receiver = receiver
        self.handle_weights = self

    def remote(self, message):
        self.receiver.handle(message)


@pytest.fixture
def fake_ray(monkeypatch):
    import sys

    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    return fake


def test_ray_scheme_one_put_per_version_lazy_fetch(fake_ray):
    import pickle

    from rl_collect.weight_sync import RayWeightReceiver, RayWeightSyncScheme

    scheme = RayWeightSyncScheme()
    receivers = [pickle.loads(pickle.dumps(scheme.receiver(i))) for i in range(3)]  # they travel to actors
    actors = [_FakeActor(r) for r in receivers]
    scheme.init_sender(None, actors)
    assert [r.receive() for r in receivers] == [(None, 0)] * 3
    scheme.send(_weights(2.0), version=1)
    assert fake_ray.puts == 1 and fake_ray.gets == 0  # once for all actors; nothing fetched yet
    weights, version = receivers[0].receive()
    assert version == 1 and torch.equal(weights["weight"], torch.full((2, 3), 2.0))
    assert receivers[0].receive() == (None, 1) and fake_ray.gets == 1
    scheme.send(_weights(3.0), version=2)
    scheme.send(_weights(4.0), version=3)
    assert fake_ray.puts == 3
    weights, version = receivers[1].receive()  # skipped versions are never fetched
    assert version == 3 and float(weights["bias"][0]) == 4.0 and fake_ray.gets == 2
    # a restarted actor (fresh receiver) gets the latest weights again from resend
    fresh = RayWeightReceiver()
    actors[2] = _FakeActor(fresh)
    scheme.attach_pipes(actors)
    scheme.resend(2)
    weights, version = fresh.receive()
    assert version == 3 and float(weights["weight"].sum()) == 24.0


def test_ray_scheme_send_clones_and_versions_only(fake_ray):
    from rl_collect.weight_sync import RayWeightSyncScheme

    scheme = RayWeightSyncScheme()
    receiver = scheme.receiver(0)
    scheme.init_sender(None, [_FakeActor(receiver)])
    scheme.send(None, version=5)  # a policy without parameters: only the version moves
    assert receiver.receive() == (None, 5) and fake_ray.puts == 0
    w = _weights(1.0)
    scheme.send(w, version=6)
    w["weight"].zero_()
    got, version = receiver.receive()
    assert version == 6 and float(got["weight"].sum()) == 6.0


# ---------------------------------------------------------------------- torch.distributed scheme (gloo, 2 ranks)
def _dist_worker(port, receiver, conn, n_messages):
    import datetime

    import torch.distributed as dist

    from rl_collect.weight_sync import DIST_COMMAND_LEN

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=1, world_size=2, timeout=datetime.timedelta(seconds=30)
    )
    try:
        header = torch.zeros(DIST_COMMAND_LEN, dtype=torch.int64)
        for _ in range(n_messages):
            dist.recv(header, src=0)
            message = tuple(int(x) for x in header.tolist())
            assert receiver.handle(message)
            weights, version = receiver.receive()
            conn.send(
                (version, message[3], None if weights is None else float(weights["weight"].sum()), receiver.receive())
            )
    finally:
        dist.destroy_process_group()


def test_distributed_scheme_broadcast_send_and_deferred_flush():
    import datetime
    import socket

    import torch.distributed as dist

    from rl_collect.weight_sync import DistributedWeightSyncScheme

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    scheme = DistributedWeightSyncScheme()
    scheme.init_sender(_weights(0.0), pipes=[1])
    receiver = scheme.receiver(1)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_dist_worker, args=(port, receiver, child, 2), daemon=True)
    proc.start()
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=2, timeout=datetime.timedelta(seconds=30)
    )
    try:
        scheme.send(_weights(1.0), version=1)  # the worker is idle and the whole group: one broadcast
        assert parent.poll(20)
        assert parent.recv() == (1, 1, 6.0, (None, 1))
        scheme.set_busy(1, True)
        scheme.send(_weights(2.0), version=2)  # busy: deferred
        scheme.send(_weights(3.0), version=3)
        assert not parent.poll(0.2)
        scheme.flush(1)  # only the latest version travels, point to point
        scheme.flush(1)  # nothing new: no-op
        assert parent.poll(20)
        assert parent.recv() == (3, 0, 18.0, (None, 3))
    finally:
        dist.destroy_process_group()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 0
