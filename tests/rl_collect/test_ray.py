"""RayCollector: actors on a local Ray that runs inside a loopback-only network namespace.

``test_ray_in_netns`` re-runs this file under ``unshare -n`` (lo up) with ``RL_COLLECT_RAY_NETNS=1``;
the inner tests only run there, so Ray never sees a non-loopback interface.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
import torch

ray = pytest.importorskip("ray", reason="Ray tests need `pip install rl-collect[ray]`")

_INNER = os.environ.get("RL_COLLECT_RAY_NETNS") == "1"
inner = pytest.mark.skipif(not _INNER, reason="runs inside the unshare -n namespace (via test_ray_in_netns)")


def _can_unshare() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "`unshare` or `ip` not found"
    res = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if res.returncode != 0:
        return f"`unshare -n` not permitted here: {res.stderr.strip()}"
    return None


@pytest.mark.skipif(_INNER, reason="outer wrapper")
def test_ray_in_netns():
    reason = _can_unshare()
    if reason is not None:
        pytest.skip(reason)
    env = {**os.environ, "RL_COLLECT_RAY_NETNS": "1"}
    cmd = f"ip link set lo up && exec {sys.executable} -m pytest -q -p no:cacheprovider -x {__file__}"
    res = subprocess.run(["unshare", "-n", "sh", "-c", cmd], env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
    assert " passed" in res.stdout and "failed" not in res.stdout, res.stdout[-3000:]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=4, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _policy():
    from tdict.nn import TensorDictModule

    torch.manual_seed(0)
    return TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])


@inner
def test_collects_exact_frames_and_weights(local_ray):
    from rl_envs import PendulumEnv

    from rl_collect.ray_collector import RayCollector

    policy = _policy()
    c = RayCollector(PendulumEnv, policy, frames_per_batch=20, total_frames=70, num_collectors=2, sync=True,
                     max_frames_per_traj=4)
    batches = []
    for i, batch in enumerate(c):
        batches.append(batch)
        if i == 0:
            with torch.no_grad():
                policy.module.weight.zero_()
                policy.module.bias.fill_(0.25)
            c.update_policy_weights_()
    c.shutdown()
    assert [b.numel() for b in batches] == [20, 20, 20, 10]
    for b in batches[1:]:  # visible in the very next (sync) batch
        assert (b["collector", "policy_version"] == 1).all()
        torch.testing.assert_close(b["action"], torch.full_like(b["action"], 0.25))
    ids = torch.cat([b["collector", "traj_ids"] for b in batches])
    workers = torch.cat([b["collector", "worker_id"] for b in batches])
    for w in (0, 1):  # one actor's ids never appear in the other's
        assert not set(ids[workers == w].tolist()) & set(ids[workers != w].tolist())
    assert [int(b["collector", "batch_id"][0]) for b in batches] == [0, 1, 2, 3]


def _wait_restarted(actor, old: str, timeout: float = 60.0) -> str:
    """Polls ``actor.ping`` until it answers from an incarnation other than ``old`` (the restart happened)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            new = ray.get(actor.ping.remote(), timeout=10)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
            new = old  # dead or restarting: ask again
        if new != old:
            return new
        time.sleep(0.05)
    raise AssertionError(f"actor was not restarted within {timeout} s")


@inner
def test_killed_actor_is_restarted(local_ray):
    from rl_envs import PendulumEnv

    from rl_collect.ray_collector import RayCollector

    c = RayCollector(PendulumEnv, None, frames_per_batch=10, total_frames=200, num_collectors=2, max_restarts=2,
                     max_frames_per_traj=4)
    it = iter(c)
    batches = [next(it) for _ in range(4)]
    old = ray.get(c._actors[0].ping.remote())
    ray.kill(c._actors[0], no_restart=False)
    new = _wait_restarted(c._actors[0], old)  # deterministic: Ray has restarted the actor before we go on
    assert new != old
    batches += list(it)  # 140+ frames left: actor 0 has a request in flight, so the new incarnation serves some
    c.shutdown()

    assert sum(b.numel() for b in batches) == 200
    batch_ids = [int(b["collector", "batch_id"][0]) for b in batches]
    assert batch_ids == list(range(len(batches)))  # unique and contiguous
    for b in batches:  # one worker and one incarnation per (async) batch
        assert b["collector", "batch_id"].unique().numel() == 1
        assert b["collector", "worker_id"].unique().numel() == 1
        assert b["collector", "incarnation"].unique().numel() == 1
    per_batch = [(int(b["collector", "worker_id"][0]), int(b["collector", "incarnation"][0])) for b in batches]
    # the restart happened and is visible: worker 0 served batches from its second life, worker 1 never restarted
    assert {life for w, life in per_batch if w == 0} == {0, 1}
    assert {life for w, life in per_batch if w == 1} == {0}
    lives0 = [life for w, life in per_batch if w == 0]
    assert lives0 == sorted(lives0)  # no batch of the old life after one of the new
    assert per_batch[:4].count((0, 1)) == 0
    # no trajectory id shared across actors or incarnations
    groups: dict[tuple[int, int], set[int]] = {}
    for b, key in zip(batches, per_batch):
        groups.setdefault(key, set()).update(b["collector", "traj_ids"].unique().tolist())
    keys = list(groups)
    for i, a in enumerate(keys):
        for k in keys[i + 1:]:
            assert not groups[a] & groups[k], (a, k)
    assert len(c._incarnations) == 3  # two first lives + one restart
