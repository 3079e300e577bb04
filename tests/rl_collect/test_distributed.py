"""DistributedCollector: torch.distributed (gloo, 127.0.0.1) workers spawned with multiprocessing."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
import torch.distributed as dist
from rl_collect.distributed import DistributedCollector
from rl_envs import PendulumEnv
from tdict.nn import TensorDictModule


def _policy() -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])


class _FailingEnv(PendulumEnv):
    def _step(self, td):  # raises on the 3rd step
        self._n = getattr(self, "_n", 0) + 1
        if self._n >= 3:
            raise ValueError("boom from the env")
        return super()._step(td)


class _HangingEnv(PendulumEnv):
    def _step(self, td):  # never returns from its 2nd step (within the test's time)
        self._n = getattr(self, "_n", 0) + 1
        if self._n >= 2:
            time.sleep(120)
        return super()._step(td)


def _no_leftovers(collector: DistributedCollector, procs: list) -> None:
    assert not dist.is_initialized()
    assert all(p.exitcode is not None for p in procs), [p.exitcode for p in procs]


def test_sync_frames_traj_ids_and_weights():
    policy = _policy()
    c = DistributedCollector(
        PendulumEnv, policy, frames_per_batch=20, total_frames=70, num_workers=2, max_frames_per_traj=4
    )
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
        ids1 = torch.cat([b["collector", "traj_ids"][b.numel() // 2 :] for b in batches])
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
        assert c.set_seed(7) == 9  # the worker's env 7, its collector 8
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


def test_workers_get_distinct_seeds_and_seeding_waits_for_the_requests():
    c = DistributedCollector(PendulumEnv, None, frames_per_batch=16, total_frames=16, num_workers=2)
    procs = list(c._procs)
    try:
        assert c.set_seed(0) == 4  # worker 0: env 0, collector 1; worker 1: env 2, collector 3
        (batch,) = list(c)
    finally:
        c.shutdown()
    _no_leftovers(c, procs)
    assert not torch.equal(batch["action"][:8], batch["action"][8:])
    c = DistributedCollector(PendulumEnv, None, frames_per_batch=8, total_frames=-1, num_workers=2, sync=False)
    procs = list(c._procs)
    try:
        it = iter(c)
        next(it)
        with pytest.raises(RuntimeError, match="are collecting"):
            c.set_seed(0)
    finally:
        it.close()
        c.shutdown()
    _no_leftovers(c, procs)


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


def _socket_inodes(pid: int) -> set:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:[") : -1])
    return inodes


def _listening(inodes: set) -> list:
    """(address hex, port) of the TCP sockets in LISTEN state among ``inodes`` (IPv4 and IPv6)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                address, port = fields[1].split(":")
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: TCP_LISTEN
                    out.append((address, int(port, 16)))
    return out


def test_nothing_listens_on_a_wildcard_address():
    c = DistributedCollector(PendulumEnv, None, frames_per_batch=4, total_frames=8, num_workers=2)
    procs = list(c._procs)
    try:
        next(iter(c))  # the store and every connection are up
        inodes = set().union(*(_socket_inodes(pid) for pid in [os.getpid(), *(p.pid for p in procs)]))
        listening = _listening(inodes)
    finally:
        c.shutdown()
    _no_leftovers(c, procs)
    wildcard = {"00000000", "00000000000000000000000000000000"}  # 0.0.0.0 and ::
    assert listening, "expected the rendezvous store to listen"
    assert not [a for a, _ in listening if a in wildcard], listening
    # every listener is on 127.0.0.1 (IPv4, or IPv4-mapped IPv6)
    assert {a for a, _ in listening} <= {"0100007F", "0000000000000000FFFF00000100007F"}, listening


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_hung_worker_is_the_one_named(sync):
    # rank 2 hangs; rank 1 answers at once and then waits, idle, for its next command: the error must
    # name rank 2, never the idle one (which used to time out on its own wait at the same moment)
    threads_before = len(os.listdir("/proc/self/task"))
    c = DistributedCollector(
        [PendulumEnv, _HangingEnv], None, frames_per_batch=4, total_frames=-1, sync=sync, timeout=4
    )
    procs = list(c._procs)
    hung = procs[1].pid
    start = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        for _ in c:  # in async mode the healthy worker keeps delivering: the hung one must surface anyway
            if time.monotonic() - start > 60:
                c.shutdown()
                pytest.fail("the hung worker went unnoticed for 60 s")
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert f"worker rank 2 (pid {hung})" in message and "rank 1" not in message, message
    assert "did not answer within timeout=4.0s" in message
    assert elapsed < 30
    c.shutdown()
    _no_leftovers(c, procs)
    # the error (still held here) keeps no gloo op alive: its threads are gone, so a process forked
    # later never runs their destructors (which aborted forked collector workers); on a loaded
    # machine an ending thread can take a moment to leave /proc, so give it up to 10 s
    deadline = time.monotonic() + 10
    while len(os.listdir("/proc/self/task")) > threads_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(os.listdir("/proc/self/task")) <= threads_before


def test_bad_arguments():
    with pytest.raises(ValueError, match="multiple of num_workers"):
        DistributedCollector(PendulumEnv, None, frames_per_batch=5, num_workers=2)
    with pytest.raises(ValueError, match="launcher"):
        DistributedCollector(PendulumEnv, None, frames_per_batch=4, launcher="slurm")


# ---------------------------------------------------------------------- torchrun launcher
_TORCHRUN_SCRIPT = r"""
import json, os, sys
import torch
import torch.distributed as dist
from rl_envs import PendulumEnv
from tdict.nn import TensorDictModule
from rl_collect.distributed import DistributedCollector, run_worker


def make_env():
    return PendulumEnv()


def main():
    with open(os.path.join(sys.argv[1], "pid." + os.environ["RANK"]), "w") as f:  # the test checks they exit
        f.write(str(os.getpid()))
    if int(os.environ["RANK"]) != 0:
        run_worker()  # config, env factory and policy come from rank 0
        assert not dist.is_initialized()
        return
    torch.manual_seed(0)
    policy = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
    c = DistributedCollector(make_env, policy, frames_per_batch=20, total_frames=70, launcher="torchrun",
                             timeout=20, max_frames_per_traj=4)
    out = {"num_workers": c.num_workers, "numels": [], "versions": [], "all_025": [], "ids0": [], "ids1": []}
    try:
        c.set_seed(7)
        for i, b in enumerate(c):
            n = b.numel()
            out["numels"].append(n)
            out["versions"].append(sorted(set(b["collector", "policy_version"].reshape(-1).tolist())))
            out["all_025"].append(bool((b["action"] == 0.25).all()))
            out["ids0"] += b["collector", "traj_ids"][: n // 2].tolist()
            out["ids1"] += b["collector", "traj_ids"][n // 2:].tolist()
            if i == 0:
                out["obs0"] = b["observation"][: n // 2].tolist()
                with torch.no_grad():
                    policy.module.weight.zero_()
                    policy.module.bias.fill_(0.25)
                c.update_policy_weights_()
        out["frames"] = c.frames
    finally:
        c.shutdown()
    out["initialized_after_shutdown"] = dist.is_initialized()
    print("SUMMARY " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
"""


def test_torchrun_launcher(tmp_path):
    """rank 0 builds the collector, ranks 1..2 call run_worker(); all on 127.0.0.1 (static rendezvous:
    ``--standalone`` would replace any endpoint given with ``localhost:0``)."""
    import json
    import socket
    import subprocess
    import sys

    from rl_collect import Collector

    script = tmp_path / "torchrun_collect.py"
    script.write_text(_TORCHRUN_SCRIPT)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--node-rank=0",
        "--nproc-per-node=3",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
        "--max-restarts=0",
        str(script),
        str(tmp_path),
    ]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )

    def rank_pids() -> list:
        return [int(f.read_text()) for f in sorted(tmp_path.glob("pid.*")) if f.read_text()]

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    try:
        output, _ = proc.communicate(timeout=25)
    except subprocess.TimeoutExpired:
        proc.terminate()  # torchrun stops its ranks on SIGTERM
        try:
            output, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        for pid in rank_pids():  # each rank runs in its own session
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        pytest.fail(f"torchrun did not finish within 25 s:\n{output[-4000:]}")
    assert proc.returncode == 0, output[-4000:]
    # no process of the job is left: torchrun's group and every rank (own sessions) are gone
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
    pids = rank_pids()
    assert len(pids) == 3
    deadline = time.monotonic() + 2.0
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)]
    lines = [line for line in output.splitlines() if line.startswith("SUMMARY ")]
    assert len(lines) == 1, output[-4000:]
    out = json.loads(lines[0].removeprefix("SUMMARY "))

    assert out["num_workers"] == 2 and out["frames"] == 70
    assert out["numels"] == [20, 20, 20, 10]
    # the weight update is visible in the very next batch
    assert out["versions"] == [[0], [1], [1], [1]]
    assert out["all_025"] == [False, True, True, True]
    # ids interleave by worker, never collide; 35 steps per worker with max 4 -> 8 trajs of 4 and 1 of 3
    ids0, ids1 = torch.tensor(out["ids0"]), torch.tensor(out["ids1"])
    assert ids0.tolist() == [2 * (i // 4) for i in range(35)]
    assert ids1.tolist() == [2 * (i // 4) + 1 for i in range(35)]
    assert out["initialized_after_shutdown"] is False
    # worker 0 (seed 7) matches a single-process collector with the same seed and policy
    torch.manual_seed(0)
    policy = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
    ref = Collector(PendulumEnv, policy, frames_per_batch=10, total_frames=10, max_frames_per_traj=4)
    ref.set_seed(7)
    (ref_batch,) = list(ref)
    torch.testing.assert_close(torch.tensor(out["obs0"]), ref_batch["observation"])


def test_state_dict_resumes_frames_version_and_weights():
    policy = _policy()
    kwargs = {"frames_per_batch": 20, "total_frames": 70, "num_workers": 2, "max_frames_per_traj": 4}
    c = DistributedCollector(PendulumEnv, policy, **kwargs)
    procs = list(c._procs)
    try:
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
    finally:
        c.shutdown()
    _no_leftovers(c, procs)
    assert state["frames"] == 40 and state["policy_version"] == 1
    assert isinstance(state["policy_state_dict"], dict)
    torch.testing.assert_close(state["policy_state_dict"]["module.bias"], torch.tensor([0.25]))

    fresh = _policy()  # the initial weights again: the state brings the trained ones back
    c = DistributedCollector(PendulumEnv, fresh, **kwargs)
    procs = list(c._procs)
    try:
        c.load_state_dict(state)
        assert c.frames == 40 and c.policy_version == 1
        torch.testing.assert_close(fresh.module.bias, torch.tensor([0.25]))
        rest = []
        for i, batch in enumerate(c):
            rest.append(batch)
            if i == 0:  # versions continue from the restored one
                with torch.no_grad():
                    fresh.module.bias.fill_(-0.5)
                c.update_policy_weights_()
        assert c.frames == 70
    finally:
        c.shutdown()
    _no_leftovers(c, procs)
    assert [b.numel() for b in first] == [20, 20] and [b.numel() for b in rest] == [20, 10]
    assert (first[0]["collector", "policy_version"] == 0).all()
    assert (first[1]["collector", "policy_version"] == 1).all()
    # the restored weights act in the very first batch after loading, with the restored version
    assert (rest[0]["collector", "policy_version"] == 1).all()
    torch.testing.assert_close(rest[0]["action"], torch.full_like(rest[0]["action"], 0.25))
    assert (rest[1]["collector", "policy_version"] == 2).all()
    torch.testing.assert_close(rest[1]["action"], torch.full_like(rest[1]["action"], -0.5))
    # trajectory ids of the resumed run neither collide with the earlier ones nor lose the worker parity
    before = set(torch.cat([b["collector", "traj_ids"] for b in first]).tolist())
    after = torch.cat([b["collector", "traj_ids"] for b in rest])
    assert not before & set(after.tolist())
    for b in rest:
        half = b.numel() // 2
        assert (b["collector", "traj_ids"][:half] % 2 == 0).all() and (b["collector", "traj_ids"][half:] % 2 == 1).all()


_PARENT_SCRIPT = """
import sys, time
from rl_envs import PendulumEnv
from rl_collect.distributed import DistributedCollector


class Sleepy(PendulumEnv):
    def _step(self, td):  # marks the moment it is inside its step, then sleeps two minutes
        open(sys.argv[1], "w").close()
        time.sleep(120)
        return super()._step(td)


if __name__ == "__main__":
    c = DistributedCollector([PendulumEnv, Sleepy], None, frames_per_batch=4, total_frames=-1, timeout=300)
    print(*[p.pid for p in c._procs], flush=True)
    for _ in c:
        pass
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_workers_busy_in_a_step_die_with_a_killed_learner(tmp_path):
    import subprocess
    import sys

    script, marker = tmp_path / "learner.py", tmp_path / "inside_step"
    script.write_text(_PARENT_SCRIPT)  # a file: spawned workers re-import the main module to find Sleepy
    learner = subprocess.Popen(
        [sys.executable, str(script), str(marker)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    pids: list = []
    try:
        pids += [int(p) for p in learner.stdout.readline().split()]
        assert len(pids) == 2, learner.stderr.read()
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "worker rank 2 never entered its step"
        learner.kill()  # SIGKILL: no atexit, no finalizer runs in the learner
        learner.wait(timeout=10)
        deadline = time.monotonic() + 10  # generous: the kernel kills them at once on Linux
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in pids if _alive(pid)], "a worker outlived the learner"
    finally:
        learner.kill()
        learner.wait(timeout=10)
        for pid in pids:  # never leave a process behind, even when the test fails
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
