"""RayCollector: actors on a local Ray that runs inside a loopback-only network namespace.

``test_ray_in_netns`` re-runs this file under ``unshare -n`` (lo up) with ``RL_COLLECT_RAY_NETNS=1``;
the inner tests only run there, so Ray never sees a non-loopback interface.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

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


def _policy():
    from tdict.nn import TensorDictModule

    torch.manual_seed(0)
    return TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])


# ----------------------------------------------------------------------------- a Ray started by the user
# Defined before the tests that use ``local_ray``: this one needs a test process not yet connected to any Ray.


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _session_procs(sid: int, marker: str) -> list[str]:
    """Live (non-zombie) processes of the head's session ``sid`` or naming its temp dir ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            if state != "Z" and (os.getsid(pid) == sid or marker in cmd):
                found.append(f"{pid}: {cmd[:120]}")
        except (OSError, IndexError):  # the process ended meanwhile
            continue
    return found


@pytest.fixture
def user_ray_head(monkeypatch):
    """A Ray head started with the CLI (``ray start --head``), as a user would; yields ``(address, sid, temp_dir)``.

    Token auth is disabled explicitly (loopback-only namespace) so that the result does not depend on whether
    ``~/.ray/auth_token`` exists. The head runs in its own session: teardown kills exactly that session.
    """
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    port = _free_port()
    temp_dir = f"/tmp/rlc_rayhead_{uuid.uuid4().hex[:8]}"  # short: Ray's unix socket paths live under it
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the driver (this process) and the CLI calls below
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    start = subprocess.Popen(
        [
            ray_cli,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    sid = start.pid  # every process of the head inherits this session (ray start exits once they run)
    try:
        out, _ = start.communicate(timeout=60)
        assert start.returncode == 0, out[-3000:]
        yield f"127.0.0.1:{port}", sid, temp_dir
    finally:
        _kill_session(sid, temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _kill_session(sid: int, marker: str, timeout: float = 15.0) -> None:
    """Stops this head only (``ray stop`` would stop every Ray on the machine): SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, timeout)):
        try:
            os.killpg(sid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + wait
        while _session_procs(sid, marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _session_procs(sid, marker):
            return


@inner
def test_user_given_address(user_ray_head):
    from rl_collect import Collector
    from rl_collect.ray_collector import RayCollector
    from rl_envs import PendulumEnv

    address, sid, temp_dir = user_ray_head
    assert not ray.is_initialized()
    c = RayCollector(
        PendulumEnv,
        _policy(),
        frames_per_batch=10,
        total_frames=34,
        num_collectors=2,
        sync=True,
        max_frames_per_traj=4,
        address=address,
    )
    # connected to the user's head, not to a Ray of its own
    assert ray.is_initialized() and ray.get_runtime_context().gcs_address == address
    assert ray.cluster_resources()["CPU"] == 2
    next_seed = c.set_seed(0)
    batches = list(c)
    actors = [p for p in _session_procs(sid, temp_dir) if "_CollectorActor" in p]
    c.shutdown()

    assert len(actors) == 2, actors  # the actors ran as workers of the user's head
    assert [b.numel() for b in batches] == [10, 10, 10, 4]
    assert [int(b["collector", "batch_id"].unique()) for b in batches] == [0, 1, 2, 3]
    # same data as two single-process collectors seeded in turn (the actors' seeds: 0, then what actor 0 returned)
    refs = []
    seed = 0
    for _ in range(2):
        ref = Collector(PendulumEnv, _policy(), frames_per_batch=5, total_frames=17, max_frames_per_traj=4)
        seed = ref.set_seed(seed)
        refs.append(list(ref))
        ref.shutdown()
    assert seed == next_seed == 4  # two streams per actor: its env's and its collector's
    for b, r0, r1 in zip(batches, *refs):
        for key in ("observation", "action", ("next", "observation"), ("next", "reward")):
            torch.testing.assert_close(b[key], torch.cat([r0[key], r1[key]]))

    # the collector disconnected from the user's Ray but did not stop it
    assert not ray.is_initialized()
    assert len(_session_procs(sid, temp_dir)) > 0
    cli = os.path.join(os.path.dirname(sys.executable), "ray")
    res = subprocess.run(
        [cli, "status", f"--address={address}"], capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    ray.init(address=address, log_to_driver=False)
    try:
        assert ray.get(ray.remote(lambda: 7).remote(), timeout=30) == 7  # the head still runs tasks
        deadline = time.monotonic() + 20
        while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ray.available_resources().get("CPU", 0) == 2  # the collector's actors are gone
    finally:
        ray.shutdown()

    # the user stops their head: nothing of it is left
    _kill_session(sid, temp_dir)
    assert _session_procs(sid, temp_dir) == []


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=4, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@inner
def test_collects_exact_frames_and_weights(local_ray):
    from rl_envs import PendulumEnv

    from rl_collect.ray_collector import RayCollector

    policy = _policy()
    c = RayCollector(
        PendulumEnv, policy, frames_per_batch=20, total_frames=70, num_collectors=2, sync=True, max_frames_per_traj=4
    )
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


@inner
def test_remote_helpers_stats_and_remote_configs(local_ray):
    from rl_envs import PendulumEnv

    from rl_collect.ray_collector import RayCollector

    c = RayCollector(
        [PendulumEnv, PendulumEnv],
        None,
        frames_per_batch=8,
        total_frames=16,
        remote_configs={"num_cpus": 1, "num_gpus": 0},
    )
    try:
        assert c.get_distant_attr("worker_idx") == [0, 1]
        assert c.map_fn("get_distant_attr", list_of_args=[("worker_idx",), ("frames_per_batch",)]) == [0, 8]
        with pytest.raises(ValueError, match="Expected 2 argument entries"):
            c.map_fn("get_distant_attr", list_of_args=[("worker_idx",)])
        with pytest.raises(ValueError, match="workers must be one of"):
            c.stats(workers="bogus")
        assert sum(b.numel() for b in c) == 16
        stats = c.stats(timeout=30.0)
        assert (stats["frames"], stats["batches"], stats["completed"]) == (16, 2, True)
        assert (stats["workers"], stats["workers_alive"], stats["requested_frames_per_batch"]) == (2, 2, 8)
        assert stats["worker_frames"] == 16  # every request was collected
        per_worker = c.stats(workers="per_worker")
        assert "frames" not in per_worker
        assert per_worker["worker_0/frames"] + per_worker["worker_1/frames"] == 16
    finally:
        c.shutdown()


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

    c = RayCollector(
        PendulumEnv,
        None,
        frames_per_batch=10,
        total_frames=200,
        num_collectors=2,
        max_restarts=2,
        max_frames_per_traj=4,
    )
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
        for k in keys[i + 1 :]:
            assert not groups[a] & groups[k], (a, k)
    assert len(c._incarnations) == 3  # two first lives + one restart


@inner
def test_state_dict_resumes_frames_version_batch_ids_and_weights(local_ray):
    from rl_collect.ray_collector import RayCollector
    from rl_envs import PendulumEnv

    policy = _policy()
    kwargs = {"frames_per_batch": 20, "total_frames": 70, "num_collectors": 2, "sync": True, "max_frames_per_traj": 4}
    c = RayCollector(PendulumEnv, policy, **kwargs)
    first = []
    for i, batch in enumerate(c):
        first.append(batch)
        if i == 0:  # version 1: constant action 0.25
            with torch.no_grad():
                policy.module.weight.zero_()
                policy.module.bias.fill_(0.25)
            c.update_policy_weights_()
        if i == 1:
            break
    state = c.state_dict()
    c.shutdown()
    assert state["frames"] == 40 and state["policy_version"] == 1 and state["batch_id"] == 2
    torch.testing.assert_close(state["policy_state_dict"]["module.bias"], torch.tensor([0.25]))

    fresh = _policy()  # the initial weights again: the state brings the trained ones back
    c = RayCollector(PendulumEnv, fresh, **kwargs)
    c.load_state_dict(state)
    assert c.frames == 40 and c.policy_version == 1
    rest = []
    for i, batch in enumerate(c):
        rest.append(batch)
        if i == 0:  # versions continue from the restored one
            with torch.no_grad():
                fresh.module.bias.fill_(-0.5)
            c.update_policy_weights_()
    c.shutdown()
    assert c.frames == 70
    assert [b.numel() for b in first] == [20, 20] and [b.numel() for b in rest] == [20, 10]
    assert [int(b["collector", "batch_id"].unique()) for b in first + rest] == [0, 1, 2, 3]
    assert [int(b["collector", "policy_version"].unique()) for b in first + rest] == [0, 1, 1, 2]
    # the restored weights act in the very first batch after loading
    torch.testing.assert_close(rest[0]["action"], torch.full_like(rest[0]["action"], 0.25))
    torch.testing.assert_close(rest[1]["action"], torch.full_like(rest[1]["action"], -0.5))
    # the resumed run's trajectory ids do not collide with the earlier run's
    before = set(torch.cat([b["collector", "traj_ids"] for b in first]).tolist())
    assert not before & set(torch.cat([b["collector", "traj_ids"] for b in rest]).tolist())
