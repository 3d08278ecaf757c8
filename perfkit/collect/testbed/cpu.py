"""CPU quotas of the testbed's nodes: one group of the kernel's ``cpu`` controller per node.

cgroup v2 (``cpu.max``) when the machine mounts one with the ``cpu`` controller enabled for its
children, else cgroup v1 (``cpu.cfs_quota_us``, ``cpu.cfs_period_us``). Groups are made at the top of
the controller's hierarchy and named as the namespaces are (``pktb-<owner pid>-<tag>-<node>``):
``leftovers`` finds those whose owner is gone, and nothing here reads or writes a group without that
form of name. A process joins its node's group by writing its pid to the group's ``cgroup.procs``
(the testbed's ``enter`` script does, before it execs), and everything it starts inherits the group.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from perfkit.collect.testbed.netns import OWNED, PREFIX, alive, stop

#: Shortest scheduling period of the quotas [s]. A node's share is granted afresh each period, and a
#: rank that computes after a wait first spends what is left of the current period's at full speed, so
#: short compute phases run short: spin steps of 15 ms of CPU on 4 dilated nodes × 2 cores took 0.82-0.84
#: of their dilated time with 20 ms periods, 0.89-0.97 with 5-10 ms (steps of 60 ms: 0.93-1.0 with 20 ms).
#: But shorter periods lost more to a busy machine (load 10): one dilated node took 1.7-3.4 times its
#: dilated time with 5-10 ms periods, 1.0-1.1 with 20 ms (docs/testbed.md)
PERIOD_S = 0.02
#: The kernel accepts quotas of 1 ms and more per period, periods up to 1 s
_MIN_QUOTA_S, _MAX_PERIOD_S = 1e-3, 1.0
#: The largest weight a group may have (v1 ``cpu.shares``, v2 ``cpu.weight``): a node gets its quota
#: however many other processes want this machine's cores (quotas that fit the machine leave them the rest)
_HEAVIEST = {1: ("cpu.shares", 262144), 2: ("cpu.weight", 10000)}
#: A process's weight (v1, v2)
_DEFAULT = {1: 1024, 2: 100}


@dataclass(frozen=True)
class Controller:
    """Where the ``cpu`` controller is mounted (``root``) and its cgroup ``version`` (1 or 2)."""

    root: Path
    version: int

    def group(self, name: str) -> Path:
        """The folder of group ``name``."""
        return self.root / name

    def procs(self, name: str) -> Path:
        """The file a process writes its pid to, to join group ``name``."""
        return self.group(name) / "cgroup.procs"

    def procs_from_nodes(self, name: str) -> Path:
        """``procs(name)`` as a process inside a node reaches it: through this process's root
        (``/proc/<pid>/root``), since ``ip netns exec`` mounts a sysfs of the namespace's own over
        ``/sys``, one without ``/sys/fs/cgroup``."""
        return Path(f"/proc/{os.getpid()}/root") / self.procs(name).relative_to("/")


def controller(mountinfo: str | None = None) -> Controller | None:
    """This machine's ``cpu`` controller (None without one); ``mountinfo``: the text of
    ``/proc/self/mountinfo`` (read when not given)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:  # not Linux
            return None
    v1 = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, kind = left.split(), right.split()
        if len(fields) < 5 or len(kind) < 3:
            continue
        root = Path(fields[4].replace("\\040", " "))
        if kind[0] == "cgroup2" and "cpu" in _words(root / "cgroup.subtree_control"):
            return Controller(root, 2)
        if kind[0] == "cgroup" and "cpu" in kind[2].split(",") and v1 is None:
            v1 = Controller(root, 1)
    return v1


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def why_no_quota(ctl: Controller | None) -> str | None:
    """Why nodes cannot get CPU quotas here (None when they can)."""
    if ctl is None:
        return "this machine has no cgroup cpu controller mounted (cgroup v1 'cpu' or v2 with 'cpu' enabled)"
    if not os.access(ctl.root, os.W_OK):
        return f"cannot make groups in {ctl.root} (not writable)"
    return None


def period_for(cores: float) -> float:
    """The period [s] of a quota of ``cores``: ``PERIOD_S``, longer when the quota would be under 1 ms
    (the kernel's least)."""
    return min(_MAX_PERIOD_S, max(PERIOD_S, _MIN_QUOTA_S / cores))


def create(ctl: Controller, name: str, cores: float, *, slots: int, heavy: bool) -> None:
    """Group ``name`` whose processes together run at most ``cores`` cores' worth [cores] per period;
    ``heavy``: they run before the machine's other processes while under it (the heaviest weight), for
    quotas that together fit the machine; else the group weighs as ``slots`` busy processes (a node as
    its ranks would outside it)."""
    period = period_for(cores)
    period_us, quota_us = round(period * 1e6), max(1000, round(cores * period * 1e6))
    folder = ctl.group(name)
    folder.mkdir()
    if ctl.version == 2:
        (folder / "cpu.max").write_text(f"{quota_us} {period_us}\n")
    else:
        (folder / "cpu.cfs_period_us").write_text(f"{period_us}\n")
        (folder / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
    weight, heaviest = _HEAVIEST[ctl.version]
    (folder / weight).write_text(f"{heaviest if heavy else min(heaviest, slots * _DEFAULT[ctl.version])}\n")


def quota(ctl: Controller, name: str) -> tuple[float, float]:
    """Group ``name``'s quota and period [s]."""
    folder = ctl.group(name)
    if ctl.version == 2:
        q, p = (folder / "cpu.max").read_text().split()
    else:
        q, p = (folder / "cpu.cfs_quota_us").read_text(), (folder / "cpu.cfs_period_us").read_text()
    return int(q) / 1e6, int(p) / 1e6


def throttling(ctl: Controller, name: str) -> dict[str, float]:
    """Group ``name``'s counters since it was made: ``periods`` (periods in which it ran), ``throttled``
    (periods in which it used up its quota and waited) and ``throttled_s`` (the time it waited) [s]."""
    stat = dict(line.split() for line in (ctl.group(name) / "cpu.stat").read_text().splitlines() if " " in line)
    waited = int(stat["throttled_usec"]) / 1e6 if "throttled_usec" in stat else int(stat["throttled_time"]) / 1e9
    return {"periods": int(stat["nr_periods"]), "throttled": int(stat["nr_throttled"]), "throttled_s": waited}


def pids_in(ctl: Controller, name: str) -> list[int]:
    """Processes in group ``name``."""
    try:
        return [int(p) for p in ctl.procs(name).read_text().split()]
    except FileNotFoundError:
        return []


def remove(ctl: Controller, names: Iterable[str], grace: float = 2.0) -> None:
    """Stop every process in groups ``names`` (TERM, then KILL after ``grace`` s) and delete the groups."""
    names = [n for n in names if OWNED.match(n) and ctl.group(n).is_dir()]
    stop(lambda: [p for n in names for p in pids_in(ctl, n)], grace)
    for name in names:
        _rmdir(ctl.group(name))


def _rmdir(folder: Path, wait: float = 5.0) -> None:
    """Delete a group's folder, waiting up to ``wait`` s while the kernel still counts exiting processes."""
    deadline = time.monotonic() + wait
    while True:
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise RuntimeError(f"testbed: cannot remove CPU group {folder}: {exc.strerror}") from None
            time.sleep(0.05)


def leftovers(ctl: Controller, owner_alive: Callable[[int], bool] = alive) -> list[str]:
    """Groups of testbeds whose owning process is gone."""
    return sorted(p.name for p in ctl.root.glob(f"{PREFIX}*")
                  if p.is_dir() and (m := OWNED.match(p.name)) and not owner_alive(int(m.group(1))))


def held_by_others(ctl: Controller, own: str, owner_alive: Callable[[int], bool] = alive) -> float:
    """Cores of this machine that other running testbeds' groups may use (their quotas summed) [cores];
    ``own``: this testbed's prefix, whose groups are left out."""
    held = 0.0
    for p in ctl.root.glob(f"{PREFIX}*"):
        if p.is_dir() and not p.name.startswith(own) and (m := OWNED.match(p.name)) and owner_alive(int(m.group(1))):
            try:
                q, period = quota(ctl, p.name)
            except (OSError, ValueError):  # removed meanwhile, or no quota
                continue
            held += q / period if q > 0 else 0.0
    return held
