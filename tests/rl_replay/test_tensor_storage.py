"""Tensor storages keep the batch dims of nested groups (e.g. agents), in samples and checkpoints."""

import pytest
import torch
from tdict import TensorDict

from rl_replay import LazyMemmapStorage, LazyTensorStorage, ReplayBuffer


def multi_agent_steps(n: int = 20, agents: int = 2) -> TensorDict:
    """Transitions with an "agents" group of batch [n, agents] and a sub-group of batch [n, agents, 3]."""
    x = torch.arange(n * agents, dtype=torch.float32).reshape(n, agents)
    group = TensorDict(
        {"x": x, "parts": TensorDict(y=x[..., None].expand(n, agents, 3) * 10, batch_size=[n, agents, 3])},
        batch_size=[n, agents],
    )
    return TensorDict({"agents": group, "team": x.sum(-1)}, batch_size=[n])


@pytest.mark.parametrize("storage", [LazyTensorStorage, LazyMemmapStorage])
def test_nested_groups_keep_their_batch_dims(storage, tmp_path):
    data = multi_agent_steps()
    rb = ReplayBuffer(storage=storage(20), batch_size=6)
    rb.extend(data)
    sample = rb.sample()
    assert sample.batch_size == (6,)
    assert sample["agents"].batch_size == (6, 2) and sample["agents", "parts"].batch_size == (6, 2, 3)
    # rows stay whole: each sampled row's agent values come from one stored row
    assert torch.equal(sample["team"], sample["agents", "x"].sum(-1))
    rb.dumps(tmp_path / "ckpt")
    restored = ReplayBuffer(storage=storage(20), batch_size=6)
    restored.loads(tmp_path / "ckpt")
    everything = restored[:]
    assert everything["agents", "parts"].batch_size == (20, 2, 3)
    assert torch.equal(everything["agents", "x"], data["agents", "x"])
