"""PromptGroupSampler, StalenessAwareSampler and RemoteTensorDictReplayBuffer driven over RPC on
loopback."""

from __future__ import annotations

import socket
import warnings

import pytest
import torch
from tdict import NonTensorStack, TensorDict

from rl_replay import (
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    PromptGroupSampler,
    RemoteTensorDictReplayBuffer,
    ReplayBuffer,
    StalenessAwareSampler,
    TensorDictReplayBuffer,
)


def _groups(sampler: PromptGroupSampler, batch_size: int, **data) -> ReplayBuffer:
    rb = ReplayBuffer(storage=LazyStackStorage(100), sampler=sampler, batch_size=batch_size)
    n = len(next(iter(data.values())))
    rb.extend(TensorDict(data, batch_size=[n]))
    return rb


def test_batches_are_whole_groups():
    torch.manual_seed(0)
    rb = _groups(PromptGroupSampler(num_groups=2, group_key="prompt"), 8, prompt=torch.arange(12) // 4)
    prompts = rb.sample()["prompt"].view(2, 4)
    assert prompts.unique().numel() == 2 and bool((prompts == prompts[:, :1]).all())
    rb = _groups(PromptGroupSampler(samples_per_group=3, group_key="q"), 6, q=NonTensorStack(*"aaabbbccc"))
    q = rb.sample()["q"]
    assert len(set(q)) == 2 and q[0] == q[1] == q[2]


def test_group_strategies():
    recency = _groups(
        PromptGroupSampler(samples_per_group=2, group_key="p", strategy="recency"),
        2,
        p=torch.zeros(4),
        id=torch.arange(4),
    )
    assert sorted(recency.sample()["id"].tolist()) == [2, 3]
    reward = _groups(
        PromptGroupSampler(samples_per_group=2, group_key="p", strategy="reward", reward_key="r"),
        4,
        p=torch.tensor([0, 0, 0, 1, 1, 1]),
        r=torch.tensor([1.0, 2.0, 3.0, 9.0, 8.0, 7.0]),
    )
    assert sorted(reward.sample()["r"].tolist()) == [2.0, 3.0, 8.0, 9.0]
    variance = _groups(
        PromptGroupSampler(num_groups=1, group_key="p", strategy="variance", reward_key="r"),
        3,
        p=torch.zeros(4),
        r=torch.tensor([2.0, -7.0, 10.0, 1.0]),
    )
    assert sorted(variance.sample()["r"].tolist()) == [-7.0, 2.0, 10.0]  # max variance, then max total


def test_group_index_follows_writes_and_errors():
    rb = _groups(PromptGroupSampler(num_groups=1, group_key="p"), 2, p=torch.tensor([7, 7]))
    rb.sample()
    rb.extend(TensorDict(p=torch.tensor([9, 9]), batch_size=[2]))
    assert {v for _ in range(20) for v in rb.sample()["p"].tolist()} == {7, 9}
    small = _groups(PromptGroupSampler(samples_per_group=4, group_key="p"), 4, p=torch.tensor([3, 3]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert small.sample().shape == (4,)
    assert any("with replacement" in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="divisible"):
        _groups(PromptGroupSampler(num_groups=3, group_key="p"), 8, p=torch.arange(6)).sample()
    listed = ReplayBuffer(storage=ListStorage(4), sampler=PromptGroupSampler(num_groups=1, group_key="p"), batch_size=2)
    listed.extend(TensorDict(p=torch.tensor([0, 0]), batch_size=[2]))
    with pytest.raises(TypeError, match="Plain ListStorage is not supported"):
        listed.sample()
    for bad in ({}, {"num_groups": 1, "samples_per_group": 1}, {"num_groups": 0}, {"num_groups": 1, "strategy": "x"}):
        with pytest.raises((TypeError, ValueError)):
            PromptGroupSampler(**bad)


def test_staleness_weights_and_gate():
    sampler = StalenessAwareSampler(max_staleness=1)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler, batch_size=4000)
    rb.extend(TensorDict(policy_version=torch.tensor([0, 0, 1, 2]), batch_size=[4]))
    sampler.consumer_version = 2
    sample = rb.sample()
    versions = sample["policy_version"]
    assert set(versions.tolist()) == {1, 2}  # version 0 is 2 versions old: gated out
    share = (versions == 2).float().mean().item()
    assert abs(share - 2 / 3) < 0.05  # weights 1 / (staleness + 1): 1 and 1/2
    assert torch.equal(sample["staleness"], 2.0 - versions.float())
    sampler.consumer_version = 10
    with pytest.raises(RuntimeError, match="exceed max_staleness"):
        rb.sample()
    assert sampler.state_dict() == {"consumer_version": 10, "max_staleness": 1}


def test_remote_buffer_over_rpc_on_loopback(monkeypatch):
    rpc = pytest.importorskip("torch.distributed.rpc")
    if not rpc.is_available():
        pytest.skip("torch was built without RPC")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("TP_SOCKET_IFNAME", "lo")  # loopback only
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}", _transports=["uv"])
    rpc.init_rpc("owner", rank=0, world_size=1, rpc_backend_options=options)
    try:
        rref = rpc.remote(
            "owner", RemoteTensorDictReplayBuffer, kwargs={"storage": LazyTensorStorage(10), "batch_size": 2}
        )
        data = TensorDict(obs=torch.arange(4.0), batch_size=[4])
        index = rpc.rpc_sync("owner", RemoteTensorDictReplayBuffer.extend, args=(rref, data))
        sample = rpc.rpc_sync("owner", RemoteTensorDictReplayBuffer.sample, args=(rref,))
        assert index.tolist() == [0, 1, 2, 3] and sample["obs"].shape == (2,)
        assert len(rref.local_value()) == 4
    finally:
        rpc.shutdown()
    local = RemoteTensorDictReplayBuffer(storage=LazyTensorStorage(4), batch_size=2)  # used directly it is a buffer
    local.extend(TensorDict(obs=torch.arange(3.0), batch_size=[3]))
    assert local.sample()["obs"].shape == (2,)
