"""rl-collect with a GPU: policies on CUDA, and weights sent from a CUDA learner to worker processes.

All tests here need a CUDA device (``gpu`` marker: skipped without one; benchmarks/gpu/run.sh runs them).
"""

from __future__ import annotations

import copy
import multiprocessing as mp
import time

import pytest
import torch
from rl_collect import Collector
from rl_collect.multi_sync import MultiSyncCollector
from rl_collect.weight_sync import PipeWeightSyncScheme, SharedMemWeightSyncScheme
from rl_envs import PendulumEnv
from tdict import TensorDict
from tdict.nn import TensorDictModule
from torch import nn

pytestmark = pytest.mark.gpu


def _policy() -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])


def _set_constant(policy: TensorDictModule, value: float) -> None:
    with torch.no_grad():
        policy.module.weight.zero_()
        policy.module.bias.fill_(value)


def _no_children() -> bool:
    deadline = time.monotonic() + 10
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return mp.active_children() == []


def test_collector_runs_a_cuda_policy_like_the_cpu_one():
    cpu_policy = _policy()
    gpu_policy = copy.deepcopy(cpu_policy)
    c = Collector(
        PendulumEnv, gpu_policy, frames_per_batch=16, total_frames=32, policy_device="cuda", storing_device="cuda"
    )
    c.set_seed(3)
    batches = list(c)
    ref = Collector(PendulumEnv, cpu_policy, frames_per_batch=16, total_frames=32)
    ref.set_seed(3)
    for got, want in zip(batches, list(ref), strict=True):
        assert got["action"].device.type == "cuda" and got["observation"].device.type == "cuda"
        for key in ["observation", "action", ("next", "reward"), ("next", "observation")]:
            torch.testing.assert_close(got[key].cpu(), want[key], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("scheme", [SharedMemWeightSyncScheme, PipeWeightSyncScheme])
def test_weights_from_a_cuda_learner_reach_cpu_workers(scheme):
    policy = _policy().cuda()
    _set_constant(policy, 0.25)
    with MultiSyncCollector(
        [PendulumEnv, PendulumEnv], policy, frames_per_batch=10, weight_sync_scheme=scheme(), policy_device="cpu"
    ) as c:
        it = iter(c)
        first = next(it)
        assert first["action"].device.type == "cpu"
        torch.testing.assert_close(first["action"], torch.full_like(first["action"], 0.25))
        _set_constant(policy, -0.5)  # the learner trains on the GPU
        c.update_policy_weights_()
        second = next(it)
        assert (second["collector", "policy_version"] == 1).all()
        torch.testing.assert_close(second["action"], torch.full_like(second["action"], -0.5))
        explicit = TensorDict.from_module(policy).apply(lambda t: t.detach().clone())
        explicit["module", "bias"].fill_(1.5)
        c.update_policy_weights_(explicit)
        third = next(it)
        torch.testing.assert_close(third["action"], torch.full_like(third["action"], 1.5))
    assert policy.module.bias.device.type == "cuda"  # the learner's policy stayed where it was
    assert _no_children()


def test_spawned_workers_run_the_policy_on_the_gpu():
    policy = _policy().cuda()
    _set_constant(policy, 0.25)
    with MultiSyncCollector(
        [PendulumEnv],
        policy,
        frames_per_batch=8,
        mp_start_method="spawn",
        policy_device="cuda",
        worker_timeout=120.0,
    ) as c:
        it = iter(c)
        first = next(it)
        # one worker's 8 steps, stacked over workers: [workers, T, action]
        torch.testing.assert_close(first["action"].cpu(), torch.full((1, 8, 1), 0.25))
        _set_constant(policy, -0.75)
        c.update_policy_weights_()
        second = next(it)
        torch.testing.assert_close(second["action"].cpu(), torch.full((1, 8, 1), -0.75))
    assert _no_children()


def test_a_cuda_policy_with_forked_workers_is_refused_before_any_worker_starts():
    policy = _policy().cuda()
    with pytest.raises(ValueError, match="policy is on cuda.*'fork'.*mp_start_method='spawn'.*policy_device='cpu'"):
        MultiSyncCollector([PendulumEnv], policy, frames_per_batch=8, mp_start_method="fork")
    assert _no_children()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs one GPU per rank (learner and a worker)")
def test_distributed_collector_over_nccl():
    from rl_collect.distributed import DistributedCollector

    policy = _policy()
    _set_constant(policy, 0.25)
    c = DistributedCollector(
        PendulumEnv,
        policy,
        frames_per_batch=10,
        total_frames=20,
        num_workers=1,
        backend="nccl",
        storing_device="cuda",
    )
    try:
        batches = []
        for i, batch in enumerate(c):
            batches.append(batch)
            if i == 0:
                _set_constant(policy, -0.5)
                c.update_policy_weights_()
        torch.testing.assert_close(batches[-1]["action"].cpu(), torch.full((10, 1), -0.5))
    finally:
        c.shutdown()
