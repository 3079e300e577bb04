"""tdict.files: the crash-safe file writes every package uses."""

from __future__ import annotations

import os
import stat

import pytest

from tdict.files import atomic_write, atomic_write_to, fsync_path, fsync_tree


def test_atomic_write_replaces_the_file_whole(tmp_path):
    target = tmp_path / "sub" / "data.bin"
    assert atomic_write(target, lambda f: f.write(b"first")) == target
    atomic_write(target, lambda f: f.write(b"second"))
    assert target.read_bytes() == b"second" and sorted(p.name for p in target.parent.iterdir()) == ["data.bin"]
    atomic_write(target, lambda f: f.write("text é"), binary=False, fsync=False)
    assert target.read_text(encoding="utf-8") == "text é"


@pytest.mark.parametrize("where", ["write", "rename"])
def test_a_failed_write_leaves_the_old_file_and_no_debris(tmp_path, monkeypatch, where):
    target = tmp_path / "data.bin"
    atomic_write(target, lambda f: f.write(b"good"))

    def half(f):
        f.write(b"half")
        raise OSError("disk full")

    if where == "rename":
        monkeypatch.setattr(os, "replace", lambda src, dst: (_ for _ in ()).throw(OSError("killed")))
    with pytest.raises(OSError):
        atomic_write(target, half if where == "write" else (lambda f: f.write(b"new")))
    monkeypatch.undo()
    assert target.read_bytes() == b"good" and [p.name for p in tmp_path.iterdir()] == ["data.bin"]


def test_atomic_write_to_gives_the_writer_a_path_with_the_suffix(tmp_path):
    seen = []

    def write(tmp):
        seen.append(tmp)
        with open(tmp, "w") as f:
            f.write("frames")

    atomic_write_to(tmp_path / "clip.gif", write, suffix=".gif")
    assert seen[0].endswith(".gif") and os.path.dirname(seen[0]) == str(tmp_path)
    assert (tmp_path / "clip.gif").read_text() == "frames" and not os.path.exists(seen[0])


def test_written_files_get_the_usual_permissions(tmp_path):
    target = atomic_write(tmp_path / "log.csv", lambda f: f.write(b"x"))
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


def test_fsync_helpers_accept_files_and_folders(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_bytes(b"1")
    fsync_path(tmp_path / "a" / "b" / "f")
    fsync_path(tmp_path)
    fsync_tree(tmp_path)
    with pytest.raises(FileNotFoundError):
        fsync_path(tmp_path / "missing")
