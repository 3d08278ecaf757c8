"""Nothing of a launch outlives ``perfkit collect``, however collect ends: a watchdog process.

``collect`` marks every process of the launch with ``PERFKIT_COLLECT_RUN=<token>`` in its environment
(inherited by mpirun, its daemons and the ranks they fork, whatever process group or session they move
to) and starts this file as a process of its own, in a session of its own, holding the read end of a
pipe whose write end only collect holds. The pipe reaches its end when collect ends, whether it
returns, raises or is killed by SIGKILL. The watchdog then stops every process still carrying the mark:
SIGTERM to it and to its process group, SIGKILL to those left after ``grace`` seconds, until a look at
``/proc`` finds none. A process is recognised by the mark, never by a pid alone, so a pid or process
group number reused after the launch ended is never signalled.

What collect writes on the pipe: ``started`` once the launch runs (it carries the mark from then on;
before, a launch forked just as collect died may exec after the first look, so the watchdog keeps
looking for ``SETTLE`` s), ``ended`` once collect has reaped it (only stragglers are stopped then, and
usually there are none). Run as ``python -I -S watchdog.py TOKEN GRACE``: standard library only, so it
starts in milliseconds.

When a process of the launch outlived its SIGTERM and needed SIGKILL, or outlived even that, the
watchdog says so in one line (``told``: the pids it signalled, those it killed, those left running) on
its standard output, a pipe collect reads once the watchdog is done (``Watchdog.report``), and on its
standard error, the terminal collect ran in, when collect is gone (the pipe is broken).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

MARK = "PERFKIT_COLLECT_RUN"
#: Seconds between SIGTERM and SIGKILL to a process of the launch that is still running [s].
GRACE = 3.0
#: How long the watchdog keeps looking for a launch that may still exec when collect died before it ran [s].
SETTLE = 1.0
_POLL = 0.05  # [s]


def marked(token: str) -> dict[int, int]:
    """The processes carrying ``PERFKIT_COLLECT_RUN=token`` (zombies carry nothing): pid -> process group.
    Empty without ``/proc`` (not Linux): collect then stops the launch's own process group only."""
    found = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if name.isdigit() and _carries(int(name), token):
            try:
                found[int(name)] = os.getpgid(int(name))
            except OSError:  # ended meanwhile
                continue
    return found


def _carries(pid: int, token: str) -> bool:
    """Whether process ``pid`` carries the mark ``token`` in its environment."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return f"{MARK}={token}".encode() in fh.read().split(b"\0")
    except OSError:  # ended meanwhile, or another user's
        return False


def _signal(pid: int, group: int, token: str, sig: signal.Signals) -> None:
    """Send ``sig`` to marked process ``pid`` and its process group, through a pidfd: the process is held
    first and its mark read again, so a pid that ended and was reused since the look is never signalled."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # ended meanwhile (or a kernel without pidfds: the mark read just before must do)
        fd = None
        if not _carries(pid, token):
            return
    try:
        if fd is not None and not _carries(pid, token):
            return
        try:
            os.killpg(group, sig)
        except OSError:
            pass
        try:
            if fd is None:
                os.kill(pid, sig)
            else:
                signal.pidfd_send_signal(fd, sig)
        except OSError:  # ended meanwhile
            pass
    finally:
        if fd is not None:
            os.close(fd)


@dataclass
class Stopped:
    """What ``stop`` did: the pids sent SIGTERM, those sent SIGKILL after their grace, those still running."""

    termed: list[int] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    left: list[int] = field(default_factory=list)


def stop(token: str, grace: float = GRACE, settle: float = 0.0) -> Stopped:
    """Stop every process marked with ``token``: SIGTERM to each and its process group, SIGKILL after ``grace``
    seconds to what is left; return once none is found (and none for ``settle`` s more), or when SIGKILL has
    not ended them within ``grace`` s more. Returns what was signalled and what remains (``left`` empty: all
    ended)."""
    start = last_term = time.monotonic()
    quiet = None
    termed: dict[int, float] = {}  # pid -> when it was sent SIGTERM [s]
    killed: dict[int, None] = {}  # in the order killed
    while True:
        now = time.monotonic()
        found = marked(token)
        if not found:
            quiet = now if quiet is None else quiet
            if now - quiet >= settle:
                return Stopped(list(termed), list(killed))
        else:
            quiet = None
        if now - max(start + settle, last_term) > 2 * grace:  # the last SIGTERM's SIGKILL had its grace too
            return Stopped(list(termed), list(killed), sorted(found))
        for pid, group in found.items():
            if pid not in termed:
                sig, termed[pid] = signal.SIGTERM, now
                last_term = now
            elif pid not in killed and now - termed[pid] >= grace:
                sig = signal.SIGKILL
                killed[pid] = None
            else:
                continue
            _signal(pid, group, token, sig)
        time.sleep(_POLL)


def told(stopped: Stopped, grace: float) -> str:
    """One line saying what ``stop`` did when a process outlived its SIGTERM ("" when SIGTERM was enough)."""
    if not stopped.killed and not stopped.left:
        return ""
    text = (f"watchdog: sent SIGTERM to {_processes(stopped.termed)} of the launch; "
            f"{_processes(stopped.killed)} outlived it by {grace:g} s and {_were(stopped.killed)} sent SIGKILL")
    if stopped.left:
        text += f"; {_processes(stopped.left)} still running after SIGKILL: stop {_them(stopped.left)} by hand"
    return text


def _processes(pids: list[int], shown: int = 8) -> str:
    """``1 process (pid 7)``, ``3 processes (pids 7, 8, 9)``, the first ``shown`` pids and how many more."""
    more = f" and {len(pids) - shown} more" if len(pids) > shown else ""
    listed = ", ".join(map(str, pids[:shown])) + more
    return f"1 process (pid {listed})" if len(pids) == 1 else f"{len(pids)} processes (pids {listed})"


def _were(pids: list[int]) -> str:
    return "was" if len(pids) == 1 else "were"


def _them(pids: list[int]) -> str:
    return "it" if len(pids) == 1 else "them"


class Watchdog:
    """The watchdog of one launch, seen from collect: ``environment`` marks the launch; ``started()`` once it runs,
    ``ended()`` once reaped; ``stop()`` (or leaving the ``with`` block without ``ended()``) stops the launch and
    returns once nothing of it is left."""

    def __init__(self, grace: float = GRACE) -> None:
        import secrets

        self.token = secrets.token_hex(16)
        self.grace = grace
        #: What the watchdog said it did, once it is done (``told``; "" when SIGTERM was enough).
        self.report = ""
        read, self._pipe = os.pipe()
        env = {name: value for name, value in os.environ.items() if name != MARK}
        try:
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", str(Path(__file__)), self.token, f"{grace:g}"],
                                         stdin=read, stdout=subprocess.PIPE, env=env, start_new_session=True)
        except BaseException:
            os.close(self._pipe)
            raise
        finally:
            os.close(read)

    @property
    def environment(self) -> dict[str, str]:
        """The variable that marks the launch's processes."""
        return {MARK: self.token}

    def _say(self, word: str) -> None:
        if self._pipe >= 0:
            try:
                os.write(self._pipe, word.encode() + b"\n")
            except BrokenPipeError:  # the watchdog is gone (killed): the launch is still collect's to stop
                os.close(self._pipe)
                self._pipe = -1

    def started(self) -> None:
        """The launch runs: from now on it carries the mark."""
        self._say("started")

    def ended(self) -> None:
        """The launch ended and was reaped; the watchdog stops only what it left running, then exits."""
        self._say("ended")
        self._close()

    def stop(self) -> None:
        """Stop the launch now (the watchdog does; as it would if collect had been killed) and wait till it is done."""
        self._close()

    def _close(self) -> None:
        if self._pipe >= 0:
            os.close(self._pipe)
            self._pipe = -1
        if self.proc.stdout is None or self.proc.stdout.closed:  # closed before: its report was read then
            return
        try:
            said, _ = self.proc.communicate(timeout=2 * self.grace + SETTLE + 5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            said, _ = self.proc.communicate()
        self.report = said.decode(errors="replace").strip()

    def __enter__(self) -> Watchdog:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()


def _watch(token: str, grace: float) -> int:
    """In the watchdog process: wait for the pipe on stdin to end, then stop what collect left running."""
    # not this process's to stop (a Ctrl-C, a hang-up, `pkill -f perfkit`): collect ends it by closing the pipe
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    said = set()
    for line in sys.stdin.buffer:
        said.add(line.strip().decode(errors="replace"))
    stopped = stop(token, grace, settle=0.0 if "ended" in said else 0.1 if "started" in said else SETTLE)
    _tell(told(stopped, grace))
    return 1 if stopped.left else 0


def _tell(text: str) -> None:
    """``text`` to collect (standard output, a pipe it reads), or to the terminal when collect is gone."""
    if not text:
        return
    line = (text + "\n").encode()
    try:
        os.write(1, line)
    except OSError:  # the pipe is broken: collect ended (killed) before the watchdog was done
        try:
            os.write(2, b"perfkit collect: " + line)
        except OSError:  # no terminal either: nobody is left to tell
            pass


if __name__ == "__main__":
    sys.exit(_watch(sys.argv[1], float(sys.argv[2])))
