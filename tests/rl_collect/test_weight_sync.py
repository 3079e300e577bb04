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
