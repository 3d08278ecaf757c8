"""perfkit.atomic: temporaries beside the target, atomic replacement, checks before work, sweeping."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from perfkit import atomic


def dead_pid() -> int:
    """The pid of a process that has ended (and been waited for)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def store(path, value: str) -> None:
    """A folder shaped like a perfkit zarr store (root attributes with perfkit_version), one data file."""
    path.mkdir()
    (path / ".zattrs").write_text(json.dumps({"perfkit_version": "x"}))
    (path / "data").write_text(value)


def test_temporary_names_carry_the_host_and_pid_beside_the_target(tmp_path):
    host = socket.gethostname()
    assert atomic.temporary(tmp_path / "a.zarr") == tmp_path / f".a.zarr.perfkit-tmp-{host}-{os.getpid()}"
    assert atomic.temporary(tmp_path / "a.zarr", "parts").name == f".a.zarr.parts.perfkit-tmp-{host}-{os.getpid()}"


def test_write_text_replaces_or_leaves_the_file(tmp_path, monkeypatch):
    target = tmp_path / "rankfile"
    target.write_text("old\n")
    atomic.write_text(target, "new\n")
    assert target.read_text() == "new\n" and not atomic.sweep(tmp_path) and len(list(tmp_path.iterdir())) == 1

    def fail(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        atomic.write_text(target, "newer\n")
    assert target.read_text() == "new\n" and list(tmp_path.iterdir()) == [target]  # temporary removed


@pytest.mark.parametrize("exchange", [True, False])
def test_a_store_replaces_a_store(tmp_path, monkeypatch, exchange):
    """By renameat2 RENAME_EXCHANGE, or, where the file system lacks it, by two renames."""
    if not exchange:
        monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    target, temp = tmp_path / "s.zarr", atomic.temporary(tmp_path / "s.zarr")
    store(target, "old")
    store(temp, "new")
    atomic.put_in_place(temp, target)
    assert (target / "data").read_text() == "new" and list(tmp_path.iterdir()) == [target]


def test_sweep_removes_what_dead_writers_left_and_restores_a_store_moved_aside(tmp_path):
    dead, host = dead_pid(), atomic.HOST
    store(tmp_path / f".a.zarr.perfkit-tmp-{host}-{dead}", "half")
    (tmp_path / f".a.zarr.parts.perfkit-tmp-{host}-{dead}").mkdir()
    (tmp_path / f".rankfile.perfkit-tmp-{dead}").write_text("half")  # a name from before names carried the host
    store(tmp_path / f".b.zarr.perfkit-tmp-{host}-{dead}.old", "b's old store")  # died between the two renames
    live = [atomic.temporary(tmp_path / "c.zarr"), tmp_path / f".d.zarr.perfkit-tmp-{host}-{os.getppid()}"]
    for path in live:
        path.mkdir()
    (tmp_path / ".e.zarr.perfkit-tmp-x").mkdir()  # not a pid: not perfkit's
    # another node writing into a shared folder: its pid means nothing here, so its work is never removed
    elsewhere = tmp_path / f".f.zarr.perfkit-tmp-{host}x.other-node-{dead}"
    elsewhere.mkdir()
    removed = atomic.sweep(tmp_path)
    assert len(removed) == 4
    kept = ["b.zarr", ".e.zarr.perfkit-tmp-x", elsewhere.name, *(p.name for p in live)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)
    assert (tmp_path / "b.zarr" / "data").read_text() == "b's old store"


def test_checks_before_work(tmp_path):
    source = tmp_path / "run.mpiP"
    source.write_text("x")
    with pytest.raises(FileNotFoundError, match="no such folder"):
        atomic.check_output(tmp_path / "nowhere" / "a.zarr", overwrite=False, store=True)
    with pytest.raises(ValueError, match="also an input"):
        atomic.check_output(source, overwrite=True, inputs=[source])
    with pytest.raises(ValueError, match="also an input"):
        atomic.check_output(tmp_path / "." / "run.mpiP", overwrite=True, inputs=[source])
    with pytest.raises(FileExistsError, match="--force replaces it"):
        atomic.check_output(source, overwrite=False)
    assert atomic.check_output(source, overwrite=True) == source
    with pytest.raises(IsADirectoryError):
        atomic.check_output(tmp_path, overwrite=True)


def test_a_folder_perfkit_did_not_write_is_never_replaced(tmp_path):
    mine, theirs = tmp_path / "mine.zarr", tmp_path / "theirs.zarr"
    store(mine, "x")
    theirs.mkdir()
    (theirs / "notes.txt").write_text("keep")
    assert atomic.check_output(mine, overwrite=True, store=True) == mine
    with pytest.raises(FileExistsError, match="perfkit did not write"):
        atomic.check_output(theirs, overwrite=True, store=True)
    inside = mine / "run.mpiP"
    inside.write_text("x")
    with pytest.raises(ValueError, match="also an input"):  # an input inside the store to replace
        atomic.check_output(mine, overwrite=True, store=True, inputs=[inside])


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in any folder")
def test_a_folder_without_write_permission_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    with pytest.raises(PermissionError, match="cannot write"):
        atomic.check_output(locked / "a.nc", overwrite=False)
