"""tdict.folders: crash-safe folder replacement (checkpoints, converted datasets)."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import sys
import textwrap

import pytest
from tdict.folders import atomic_dir, committed_dir, reading_dir


def _writer(value: str, marker: str = "done"):
    def write(folder: str) -> None:
        with open(os.path.join(folder, "a.txt"), "w") as f:
            f.write(value)
        with open(os.path.join(folder, "b.txt"), "w") as f:
            f.write(value)
        with open(os.path.join(folder, marker), "w") as f:
            f.write("")

    return write


def _read(folder: str) -> tuple[str, str]:
    with open(os.path.join(folder, "a.txt")) as f, open(os.path.join(folder, "b.txt")) as g:
        return f.read(), g.read()


def test_commit_replaces_the_folder_and_leaves_only_the_lock(tmp_path):
    target = tmp_path / "ckpt"
    assert atomic_dir(target, _writer("1"), marker="done") is True
    assert atomic_dir(target, _writer("2"), marker="done", fsync=False) is True
    assert _read(str(target)) == ("2", "2")
    assert sorted(os.listdir(tmp_path)) == [".ckpt.lock", "ckpt"]
    with reading_dir(target):
        assert committed_dir(target, "done") == str(target)


def test_a_failing_writer_leaves_the_old_folder_and_no_debris(tmp_path):
    target = tmp_path / "ckpt"
    atomic_dir(target, _writer("old"), marker="done")

    def broken(folder: str) -> None:
        _writer("new")(folder)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_dir(target, broken, marker="done")
    assert _read(str(target)) == ("old", "old")
    assert sorted(os.listdir(tmp_path)) == [".ckpt.lock", "ckpt"]


def test_a_writer_that_forgets_the_marker_is_refused(tmp_path):
    target = tmp_path / "ckpt"
    atomic_dir(target, _writer("old"), marker="done")
    with pytest.raises(RuntimeError, match="did not create the marker 'done'"):
        atomic_dir(target, _writer("new", marker="other"), marker="done")
    assert _read(str(target)) == ("old", "old")
    assert sorted(os.listdir(tmp_path)) == [".ckpt.lock", "ckpt"]


def test_foreign_data_and_files_are_never_replaced(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "precious.txt").write_text("x")
    with pytest.raises(FileExistsError, match="no done"):
        atomic_dir(tmp_path / "mine", _writer("1"), marker="done")
    assert (tmp_path / "mine" / "precious.txt").read_text() == "x"
    (tmp_path / "file").write_text("y")
    with pytest.raises(NotADirectoryError, match="not a folder"):
        atomic_dir(tmp_path / "file", _writer("1"), marker="done")
    with pytest.raises(NotADirectoryError, match="is a file"):
        committed_dir(tmp_path / "file", "done")
    with pytest.raises(FileNotFoundError, match="nothing committed"):
        committed_dir(tmp_path / "absent", "done")
    (tmp_path / "empty").mkdir()  # an empty folder holds nothing to lose
    assert atomic_dir(tmp_path / "empty", _writer("1"), marker="done")


def test_overwrite_false_keeps_a_complete_folder(tmp_path):
    target = tmp_path / "data"
    assert atomic_dir(target, _writer("first"), marker="done", overwrite=False) is True
    assert atomic_dir(target, _writer("second"), marker="done", overwrite=False) is False
    assert _read(str(target)) == ("first", "first")
    assert sorted(os.listdir(tmp_path)) == [".data.lock", "data"]


def test_a_swap_killed_between_its_renames_is_recovered(tmp_path):
    target = tmp_path / "ckpt"
    atomic_dir(target, _writer("1"), marker="done")
    # what a kill between the renames leaves: the old folder renamed away, the new one still temporary
    os.rename(target, tmp_path / ".ckpt.old-aaaa")
    os.mkdir(tmp_path / ".ckpt.tmp-bbbb")
    _writer("2")(str(tmp_path / ".ckpt.tmp-bbbb"))
    with reading_dir(target):
        assert _read(committed_dir(target, "done")) == ("2", "2")  # the newer complete state
    os.mkdir(tmp_path / ".ckpt.tmp-cccc")  # an incomplete folder of a dead writer
    atomic_dir(target, _writer("3"), marker="done")
    assert _read(str(target)) == ("3", "3")
    assert sorted(os.listdir(tmp_path)) == [".ckpt.lock", "ckpt"]


def test_a_live_writers_folder_is_not_deleted_by_another_commit(tmp_path):
    target = tmp_path / "ckpt"
    live = tmp_path / ".ckpt.tmp-live"
    live.mkdir()
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a running atomic_dir holds on its own folder
        atomic_dir(target, _writer("1"), marker="done")
        assert live.is_dir()
    finally:
        os.close(fd)
    atomic_dir(target, _writer("2"), marker="done")  # its writer is gone now: cleaned up
    assert not live.exists()


_CHILD = textwrap.dedent(
    """
    import os, sys
    from tdict.folders import atomic_dir
    target = sys.argv[1]
    i = 0
    while True:
        i += 1
        def write(folder, v=str(i)):
            for name in ("a.txt", "b.txt"):
                with open(os.path.join(folder, name), "w") as f:
                    f.write(v * 2000)
            open(os.path.join(folder, "done"), "w").close()
        atomic_dir(target, write, marker="done", fsync=False)
        print(i, flush=True)
    """
)


def test_kill_9_at_any_moment_leaves_a_complete_folder(tmp_path):
    rng = random.Random(0)
    target = str(tmp_path / "ckpt")
    for _ in range(6):
        child = subprocess.Popen([sys.executable, "-c", _CHILD, target], stdout=subprocess.PIPE, text=True)
        try:
            # kill after a random number of finished commits (the child reports each one), so that
            # kills land at every phase whatever the machine's load
            for _ in range(rng.randint(1, 20)):
                assert child.stdout is not None and child.stdout.readline()
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=60)
            if child.stdout is not None:
                child.stdout.close()
        with reading_dir(target):
            a, b = _read(committed_dir(target, "done"))
        assert a == b and len(a) == len(b) > 0
