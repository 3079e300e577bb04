"""DistributedCollector: torch.distributed (gloo, 127.0.0.1) workers spawned with multiprocessing."""
from __future__ import annotations

import os
import signal
import time

import pytest
import torch
import torch.distributed as dist
from rl_envs import PendulumEnv
from tdict.nn import TensorDictModule

from rl_collect.distributed import DistributedCollector


def _policy() -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])


class _FailingEnv(PendulumEnv):
    def _step(self, td):  # noqa: D401 - raises on the 3rd step
        self._n = getattr(self, "_n", 0) + 1
        if self._n >= 3:
            raise ValueError("boom from the env")
        return super()._step(td)


def _no_leftovers(collector: DistributedCollector, procs: list) -> None:
    assert not dist.is_initialized()
    assert all(p.exitcode is not None for p in procs), [p.exitcode for p in procs]


def test_sync_frames_traj_ids_and_weights():
    policy = _policy()
    c = DistributedCollector(PendulumEnv, policy, frames_per_batch=20, total_frames=70, num_workers=2,
                             max_frames_per_traj=4)
    procs = list(c._procs)
    try:
        batches = []
        for i, batch in enumerate(c):
            batches.append(batch)
            if i == 0:
                with torch.no_grad():
                    policy.module.weight.zero_()
                    policy.module.bias.fill_(0.25)
                c.update_policy_weights_()
        assert [b.numel() for b in batches] == [20, 20, 20, 10]
        assert c.frames == 70
        # the update is visible in the very next batch
        assert (batches[0]["collector", "policy_version"] == 0).all()
        for b in batches[1:]:
            assert (b["collector", "policy_version"] == 1).all()
            torch.testing.assert_close(b["action"], torch.full_like(b["action"], 0.25))
        assert not torch.allclose(batches[0]["action"], torch.full_like(batches[0]["action"], 0.25))
        # worker 0 gives the first half of each batch, worker 1 the second; ids never collide
        ids0 = torch.cat([b["collector", "traj_ids"][: b.numel() // 2] for b in batches])
        ids1 = torch.cat([b["collector", "traj_ids"][b.numel() // 2:] for b in batches])
        assert (ids0 % 2 == 0).all() and (ids1 % 2 == 1).all()
        # max_frames_per_traj=4: each worker's 35 steps form 9 trajectories (8 of 4 steps, 1 of 3)
        assert ids0.unique().numel() == 9 and ids1.unique().numel() == 9
        counts = torch.bincount(ids0)[ids0.unique()]
        assert counts.tolist() == [4] * 8 + [3]
    finally:
        c.shutdown()
    _no_leftovers(c, procs)


def test_matches_single_process_reference():
    from rl_collect import Collector

    c = DistributedCollector([PendulumEnv], None, frames_per_batch=15, total_frames=30)
    procs = list(c._procs)
    try:
        c.set_seed(7)
        batches = list(c)
    finally:
        c.shutdown()
    _no_leftovers(c, procs)
    ref = Collector(PendulumEnv, None, frames_per_batch=15, total_frames=30)
    ref.set_seed(7)
    ref_batches = list(ref)
    for b, r in zip(batches, ref_batches, strict=True):
        torch.testing.assert_close(b["observation"], r["observation"])
        torch.testing.assert_close(b["action"], r["action"])
        torch.testing.assert_close(b["next", "reward"], r["next", "reward"])


def test_async_exact_frames_and_worker_ids():
    c = DistributedCollector(PendulumEnv, None, frames_per_batch=16, total_frames=100, num_workers=2, sync=False)
    procs = list(c._procs)
    try:
        batches = list(c)
    finally:
        c.shutdown()
    _no_leftovers(c, procs)
    assert sum(b.numel() for b in batches) == 100
    assert sorted(b.numel() for b in batches) == [4] + [16] * 6
    workers = torch.cat([b["collector", "worker_id"] for b in batches])
    assert set(workers.tolist()) == {0, 1}
    for b in batches:  # traj ids interleave by worker
        assert ((b["collector", "traj_ids"] % 2) == b["collector", "worker_id"]).all()


def test_killed_worker_surfaces_and_no_process_is_left():
    c = DistributedCollector(PendulumEnv, None, frames_per_batch=10, total_frames=-1, num_workers=2, timeout=20)
    procs = list(c._procs)
    it = iter(c)
    next(it)
    os.kill(procs[1].pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises((RuntimeError, TimeoutError), match="died|failed"):
        for _ in range(5):
            next(it)
    assert time.monotonic() - start < 15
    c.shutdown()
    _no_leftovers(c, procs)


def test_worker_exception_traceback_reaches_the_parent():
    c = DistributedCollector(_FailingEnv, None, frames_per_batch=10, total_frames=40, num_workers=2, timeout=20)
    procs = list(c._procs)
    with pytest.raises(RuntimeError, match="boom from the env") as info:
        list(c)
    assert "Traceback" in str(info.value)
    c.shutdown()
    _no_leftovers(c, procs)


def test_bad_arguments():
    with pytest.raises(ValueError, match="multiple of num_workers"):
        DistributedCollector(PendulumEnv, None, frames_per_batch=5, num_workers=2)
    with pytest.raises(ValueError, match="launcher"):
        DistributedCollector(PendulumEnv, None, frames_per_batch=4, launcher="slurm")
