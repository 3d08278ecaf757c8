"""The watchdog stops every process carrying the launch's mark, in whatever process group or session, when its
owner ends without saying the launch ended (SIGKILL included), and nothing else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perfkit.collect.watchdog import MARK, Stopped, Watchdog, marked, told

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="the watchdog reads /proc")

#: A launch whose processes leave its process group and its session: a child in a group of its own, a
#: grandchild in a session of its own, one that ignores SIGTERM; each writes its pid to a file.
TREE = textwrap.dedent("""
    sleep 300 & echo $! > {tmp}/a
    setsid sh -c 'echo $$ > {tmp}/b; exec sleep 300' &
    sh -c 'trap "" TERM; echo $$ > {tmp}/c; while :; do sleep 0.1; done' &
    perl -e 'setpgrp(0, 0); open(F, ">{tmp}/d"); print F $$; close F; sleep 300' &
    wait
""")

#: An owner of a watchdog: starts TREE marked, says it started, prints the token, then waits to be killed.
OWNER = textwrap.dedent("""
    import subprocess, sys, time
    from perfkit.collect.watchdog import Watchdog
    dog = Watchdog(grace=1.0)
    proc = subprocess.Popen(["sh", "-c", sys.argv[1]], env={"PATH": "/usr/bin:/bin", **dog.environment},
                            start_new_session=True)
    dog.started()
    print(dog.token, flush=True)
    time.sleep(300)
""")


def _pids(tmp: Path, names: str = "abcd", timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while not all((tmp / n).exists() and (tmp / n).read_text().strip() for n in names):
        assert time.monotonic() < deadline, "the launch did not start"
        time.sleep(0.02)
    return [int((tmp / n).read_text()) for n in names]


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v setsid perl"], capture_output=True).returncode,
                    reason="setsid or perl not on PATH")
def test_sigkill_of_the_owner_stops_the_launch_in_every_group_and_session(tmp_path):
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)  # unmarked: left alone
    owner = subprocess.Popen([sys.executable, "-c", OWNER, TREE.format(tmp=tmp_path)], stdout=subprocess.PIPE,
                             text=True)
    try:
        token = owner.stdout.readline().strip()
        pids = _pids(tmp_path)
        assert set(pids) <= set(marked(token))
        groups = {os.getpgid(pid) for pid in pids}
        sessions = {os.getsid(pid) for pid in pids}
        assert len(groups) >= 3 and len(sessions) >= 2  # as mpirun's daemons and ranks may be
        owner.kill()
        owner.wait()
        start = time.monotonic()
        assert _wait_gone(pids, 5.0) == [], "processes of the launch outlived its owner by 5 s"
        print(f"all {len(pids)} marked processes gone {time.monotonic() - start:.2f} s after SIGKILL "
              f"(one ignores SIGTERM: killed after the 1 s grace)")
        assert marked(token) == {}
        assert bystander.poll() is None
    finally:
        owner.kill()
        bystander.kill()
        bystander.wait()


def test_a_launch_that_ended_is_not_waited_for_and_unmarked_processes_are_left_alone(tmp_path):
    bystander = subprocess.Popen(["sleep", "300"])  # this process's group, but not marked
    try:
        start = time.monotonic()
        with Watchdog() as dog:
            proc = subprocess.Popen(["sh", "-c", "exit 0"], env={**os.environ, **dog.environment})
            dog.started()
            proc.wait()
            dog.ended()
        assert dog.proc.returncode == 0 and time.monotonic() - start < 5
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_stop_ends_what_the_launch_left_and_the_watchdog_itself(tmp_path):
    with Watchdog(grace=1.0) as dog:
        proc = subprocess.Popen(["sh", "-c", f"sleep 300 & echo $! > {tmp_path}/a; wait"],
                                env={**os.environ, **dog.environment}, start_new_session=True)
        dog.started()
        pids = _pids(tmp_path, "a")
        dog.stop()
    assert dog.proc.returncode == 0  # nothing marked was left
    assert proc.wait(timeout=5) == -signal.SIGTERM
    assert _wait_gone(pids, 1.0) == []


def test_the_mark_is_not_given_to_the_watchdog(monkeypatch):
    monkeypatch.setenv(MARK, "outer")
    with Watchdog() as dog:
        environ = Path(f"/proc/{dog.proc.pid}/environ").read_bytes().split(b"\0")
        dog.ended()
    assert not [entry for entry in environ if entry.startswith(MARK.encode())]


def test_the_watchdog_outlives_a_sigterm_and_a_killed_watchdog_costs_collect_nothing(tmp_path):
    """``pkill -f perfkit`` reaches the watchdog too: it ignores SIGTERM (its pipe ends it). If it was killed
    anyway, saying the launch ended must not raise (collect would lose the finished run's data)."""
    dog = Watchdog(grace=1.0)
    dog.started()
    status = Path(f"/proc/{dog.proc.pid}/status")
    deadline = time.monotonic() + 30
    while not int(next(line for line in status.read_text().splitlines() if line.startswith("SigIgn:")).split()[1],
                  16) & (1 << (signal.SIGTERM - 1)):  # its Python has started and set its signals
        assert time.monotonic() < deadline, "the watchdog did not start"
        time.sleep(0.01)
    dog.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert dog.proc.poll() is None  # still watching
    dog.proc.kill()
    dog.proc.wait()
    dog.ended()  # a broken pipe: nothing to say to, nothing raised


#: A process of a launch that ignores SIGTERM; it writes its pid to {tmp}/a.
STUBBORN = "trap '' TERM; echo $$ > {tmp}/a; exec sleep 300"  # SIGTERM stays ignored across exec


def test_a_process_that_outlives_sigterm_is_reported_and_one_that_does_not_is_not(tmp_path):
    """The owner is told which processes needed SIGKILL (``Watchdog.report``); SIGTERM enough: nothing to say."""
    with Watchdog(grace=0.5) as dog:
        proc = subprocess.Popen(["sh", "-c", STUBBORN.format(tmp=tmp_path)], env={**os.environ, **dog.environment},
                                start_new_session=True)
        dog.started()
        pid = _pids(tmp_path, "a")[0]
        dog.stop()
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert dog.report == (f"watchdog: sent SIGTERM to 1 process (pid {pid}) of the launch; 1 process (pid {pid}) "
                          "outlived it by 0.5 s and was sent SIGKILL")
    (tmp_path / "a").unlink()
    with Watchdog(grace=0.5) as dog:
        subprocess.Popen(["sh", "-c", f"sleep 300 & echo $! > {tmp_path}/a; wait"],
                         env={**os.environ, **dog.environment}, start_new_session=True)
        dog.started()
        _pids(tmp_path, "a")
        dog.stop()
    assert dog.proc.returncode == 0 and dog.report == ""


def test_with_its_owner_killed_the_watchdog_tells_the_terminal(tmp_path):
    """Nobody is left to read the pipe: the report goes to the standard error the owner had."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER, STUBBORN.format(tmp=tmp_path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        owner.stdout.readline()
        pid = _pids(tmp_path, "a")[0]
        owner.kill()
        _, err = owner.communicate(timeout=30)  # at its end once the watchdog, which shares it, is done
    finally:
        owner.kill()
    assert f"perfkit collect: watchdog: sent SIGTERM to 1 process (pid {pid}) of the launch; 1 process (pid {pid}) " \
           "outlived it by 1 s and was sent SIGKILL\n" in err
    assert not _alive(pid)


def test_what_outlived_sigkill_too_is_named():
    stopped = Stopped(termed=list(range(100, 112)), killed=[103, 105], left=[105])
    assert told(stopped, 3.0) == (
        "watchdog: sent SIGTERM to 12 processes (pids 100, 101, 102, 103, 104, 105, 106, 107 and 4 more) of the "
        "launch; 2 processes (pids 103, 105) outlived it by 3 s and were sent SIGKILL; 1 process (pid 105) still "
        "running after SIGKILL: stop it by hand")
    assert told(Stopped(termed=[1, 2]), 3.0) == ""
