"""ReplayBufferEnsemble: member choice, stacking, buffer ids, indexing, priority routing."""

from __future__ import annotations

import pytest
import torch
from tdict import LazyStackedTensorDict, TensorDict

from rl_replay import (
    LazyTensorStorage,
    RandomSampler,
    ReplayBuffer,
    ReplayBufferEnsemble,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)


def member(value, n=10, **kw):
    rb = ReplayBuffer(storage=LazyTensorStorage(n), **kw)
    rb.extend(TensorDict(x=torch.full((n,), float(value)), pos=torch.arange(n), batch_size=[n]))
    return rb


def test_sample_from_all_layout_and_ids():
    rbs = [member(v) for v in (0, 1, 2)]
    ens = ReplayBufferEnsemble(*rbs, sample_from_all=True, batch_size=12, generator=torch.Generator().manual_seed(0))
    batch, info = ens.sample(return_info=True)
    assert batch.batch_size == (3, 4)
    assert batch["x"].tolist() == [[0.0] * 4, [1.0] * 4, [2.0] * 4]
    assert batch["index", "buffer_ids"].tolist() == [[0] * 4, [1] * 4, [2] * 4]
    assert (batch["index", "index"] == batch["pos"]).all()  # member positions point at the items
    assert (info["index"]["index"] == batch["pos"]).all()
    assert (info["index"]["buffer_ids"] == batch["index", "buffer_ids"]).all()


def test_p_weights_member_frequencies():
    rbs = [member(v) for v in (0, 1, 2)]
    p = torch.tensor([0.2, 0.0, 0.8])
    ens = ReplayBufferEnsemble(*rbs, p=[2, 0, 8], num_buffer_sampled=5, generator=torch.Generator().manual_seed(1))
    ids = torch.cat([ens.sample(10)["index", "buffer_ids"][:, 0] for _ in range(600)])
    freq = torch.bincount(ids, minlength=3).float() / ids.numel()
    assert freq[1] == 0
    assert (freq - p).abs().max() < 0.03
    # values always come from the chosen member
    batch = ens.sample(10)
    assert (batch["x"] == batch["index", "buffer_ids"].float()).all()


def test_uniform_default_and_divisibility():
    rbs = [member(v) for v in (0, 1)]
    ens = ReplayBufferEnsemble(*rbs, num_buffer_sampled=4, batch_size=8, generator=torch.Generator().manual_seed(2))
    batch = ens.sample()
    assert batch.batch_size == (4, 2)
    assert (batch["x"] == batch["index", "buffer_ids"].float()).all()
    ids = torch.cat([ens.sample()["index", "buffer_ids"][:, 0] for _ in range(300)])
    assert abs(float(ids.float().mean()) - 0.5) < 0.06
    with pytest.raises(ValueError, match="divisible"):
        ens.sample(6)
    with pytest.raises(ValueError, match="exclusive"):
        ReplayBufferEnsemble(*rbs, p=[1, 1], sample_from_all=True)
    with pytest.raises(ValueError, match="p must"):
        ReplayBufferEnsemble(*rbs, p=[1, 1, 1])


def test_heterogeneous_members_lazy_stack_and_transforms():
    rb0 = ReplayBuffer(storage=LazyTensorStorage(5), transform=lambda td: td.set("y", td["a"] * 10))
    rb0.extend(TensorDict(a=torch.arange(5.0), b=torch.zeros(5, 2), batch_size=[5]))
    rb1 = ReplayBuffer(storage=LazyTensorStorage(5), transform=lambda td: td.set("y", -td["a"]))
    rb1.extend(TensorDict(a=torch.arange(5.0), c=torch.ones(5, 3), batch_size=[5]))
    ens = ReplayBufferEnsemble(rb0, rb1, sample_from_all=True, transform=lambda td: td.set("z", td["y"] + 1))
    batch = ens.sample(6)
    assert isinstance(batch, LazyStackedTensorDict)
    assert batch["y"].shape == (2, 3)
    torch.testing.assert_close(batch["y"][0], batch["a"][0] * 10)  # member transforms
    torch.testing.assert_close(batch["y"][1], -batch["a"][1])
    torch.testing.assert_close(batch["z"], batch["y"] + 1)  # ensemble transform
    assert batch[0]["b"].shape == (3, 2) and batch[1]["c"].shape == (3, 3)


def test_tensor_members_and_indexing():
    r0 = ReplayBuffer(storage=LazyTensorStorage(10))
    r0.extend(torch.arange(10))
    r1 = ReplayBuffer(storage=LazyTensorStorage(10))
    r1.extend(-torch.arange(10) - 1)
    ens = ReplayBufferEnsemble(r0, r1, sample_from_all=True, batch_size=6)
    batch, info = ens.sample(return_info=True)
    assert batch.shape == (2, 3)
    assert (batch[0] == info["index"]["index"][0]).all() and (batch[1] == -info["index"]["index"][1] - 1).all()
    assert ens[0] is r0 and ens[1] is r1 and ens[:] is ens
    assert ens[1, 2].item() == -3
    assert ens[0, torch.tensor([1, 4])].tolist() == [1, 4]
    assert ens[:, 3].tolist() == [3, -4]
    assert len(ens) == 20
    with pytest.raises(RuntimeError, match="member"):
        ens.extend(torch.zeros(3))


def test_built_from_storages_and_samplers():
    storages = [LazyTensorStorage(4), LazyTensorStorage(4)]
    ens = ReplayBufferEnsemble(
        storages=storages, samplers=[SamplerWithoutReplacement(), RandomSampler()], sample_from_all=True, batch_size=6
    )
    ens[0].extend(TensorDict(x=torch.arange(4), batch_size=[4]))
    ens[1].extend(TensorDict(x=torch.arange(4) + 100, batch_size=[4]))
    # member 0 has 4 items without replacement: 3 per batch → epochs roll over inside one draw
    seen = torch.cat([ens.sample()["x"][0] for _ in range(4)])
    assert sorted(seen.tolist()) == sorted(list(range(4)) * 3)
    assert (ens.sample()["x"][1] >= 100).all()


def test_generator_makes_sampling_reproducible():
    def make():
        return ReplayBufferEnsemble(
            *[member(v) for v in (0, 1, 2)],
            p=[1, 2, 3],
            num_buffer_sampled=2,
            batch_size=8,
            generator=torch.Generator().manual_seed(7),
        )

    a, b = make(), make()
    for _ in range(5):
        sa, sb = a.sample(), b.sample()
        assert (sa["index", "buffer_ids"] == sb["index", "buffer_ids"]).all()
        assert (sa["pos"] == sb["pos"]).all()


class RecordingSampler(RandomSampler):
    def __init__(self):
        super().__init__()
        self.updates = []

    def update_priority(self, index, priority):
        self.updates.append((index.clone(), priority.clone()))


def test_update_priority_routed_to_members():
    samplers = [RecordingSampler(), RecordingSampler()]
    rbs = [member(v, sampler=s) for v, s in zip((0, 1), samplers)]
    ens = ReplayBufferEnsemble(*rbs, num_buffer_sampled=3, generator=torch.Generator().manual_seed(3))
    batch, info = ens.sample(9, return_info=True)
    priority = torch.arange(9.0).view(3, 3)
    ens.update_priority(info["index"], priority)
    ids, local = info["index"]["buffer_ids"].reshape(-1), info["index"]["index"].reshape(-1)
    for m, sampler in enumerate(samplers):  # loop reference
        want_idx = [int(local[i]) for i in range(9) if int(ids[i]) == m]
        want_p = [float(priority.reshape(-1)[i]) for i in range(9) if int(ids[i]) == m]
        got = [(i.tolist(), p.tolist()) for i, p in sampler.updates]
        assert got == ([(want_idx, want_p)] if want_idx else [])


def test_tensordict_members_and_state_dict():
    rbs = [TensorDictReplayBuffer(storage=LazyTensorStorage(6)) for _ in range(2)]
    for i, rb in enumerate(rbs):
        rb.extend(TensorDict(x=torch.full((6,), float(i)), batch_size=[6]))
    ens = ReplayBufferEnsemble(*rbs, sample_from_all=True)
    batch = ens.sample(4)
    assert batch["index", "buffer_ids"].tolist() == [[0, 0], [1, 1]]  # the nested index replaces the writer's
    state = ens.state_dict()
    assert len(state["buffers"]) == 2
    ens.load_state_dict(state)
    ens.empty()
    assert len(ens) == 0
