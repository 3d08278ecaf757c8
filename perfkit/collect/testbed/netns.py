"""Linux network namespaces, veth links, bridges and ``tc`` shaping, driven through ``ip`` and ``tc``.

Every name this module makes starts with ``pktb-<owner pid>-<tag>``; ``leftovers`` finds those whose
owner is gone, so that a run killed with SIGKILL is cleaned up by the next one. Nothing here creates
an interface or an address in the machine's own namespace: veth pairs are made inside the switch
namespace with their peer moved straight into the node's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

PREFIX = "pktb-"
OWNED = re.compile(rf"^{PREFIX}(\d+)-([0-9a-f]+)-")


def run(args: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``ip``/``tc`` quietly; a failure raises ``RuntimeError`` with the command and its message."""
    proc = subprocess.run(list(args), capture_output=True, text=True)
    if check and proc.returncode:
        raise RuntimeError(f"testbed: '{' '.join(args)}' failed: {proc.stderr.strip() or proc.returncode}")
    return proc


def why_unavailable() -> str | None:
    """Why this machine cannot build a testbed (None when it can): root, ``ip``, ``tc``, ``unshare``."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "the testbed needs root (network and UTS namespaces, veth links, tc shaping)"
    for tool in ("ip", "tc", "unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"the testbed needs '{tool}' (Debian: apt install iproute2 util-linux)"
    return None


def namespaces() -> list[str]:
    """Names of the network namespaces ``ip netns`` knows."""
    out = run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def leftovers(owner_alive=alive) -> tuple[list[str], list[Path]]:
    """Namespaces and state folders of testbeds whose owning process is gone."""
    spaces = [n for n in namespaces() if (m := OWNED.match(n)) and not owner_alive(int(m.group(1)))]
    folders = [p for p in Path(tempfile.gettempdir()).glob(f"{PREFIX}*")
               if (m := OWNED.match(p.name + "-")) and not owner_alive(int(m.group(1)))]
    return spaces, folders


def pids_in(namespace: str) -> list[int]:
    """Processes living in ``namespace``."""
    out = run(["ip", "netns", "pids", namespace], check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def kill_all(spaces: Iterable[str], grace: float = 2.0) -> None:
    """TERM every process in ``spaces``, then KILL what is left after ``grace`` seconds."""
    spaces = list(spaces)
    stop(lambda: [p for ns in spaces for p in pids_in(ns)], grace)


def stop(pids_of: Callable[[], list[int]], grace: float = 2.0) -> None:
    """TERM the processes ``pids_of()`` lists, then KILL what is left after ``grace`` seconds (waiting up to 5 s
    for them to go)."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        pids = pids_of()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and pids_of():
            time.sleep(0.05)


def remove(spaces: Iterable[str], folders: Iterable[Path] = ()) -> None:
    """Kill what runs in ``spaces``, delete them (their veths go with them) and the state ``folders``."""
    spaces = list(spaces)
    kill_all(spaces)
    for ns in spaces:
        run(["ip", "netns", "del", ns], check=False)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def add(namespace: str) -> None:
    """A new network namespace with its loopback up."""
    run(["ip", "netns", "add", namespace])
    run(["ip", "-n", namespace, "link", "set", "lo", "up"])


def bridge(namespace: str, name: str = "br0") -> None:
    """A bridge (a switch) inside ``namespace``."""
    run(["ip", "-n", namespace, "link", "add", name, "type", "bridge"])
    run(["ip", "-n", namespace, "link", "set", name, "up"])


def link(switch_ns: str, port: str, other_ns: str, other_name: str, *, mtu: int) -> None:
    """A veth pair made inside ``switch_ns`` (``port``, a bridge port) with its peer moved into
    ``other_ns`` (as ``other_name``), both up."""
    run(["ip", "-n", switch_ns, "link", "add", port, "mtu", str(mtu), "type", "veth",
         "peer", "name", other_name, "mtu", str(mtu), "netns", other_ns])
    run(["ip", "-n", switch_ns, "link", "set", port, "master", "br0", "up"])
    run(["ip", "-n", other_ns, "link", "set", other_name, "up"])


def shape(namespace: str, device: str, rate: float, delay: float) -> None:
    """Shape ``device``'s egress: netem ``delay`` [s] above a token bucket at ``rate`` [bit/s].

    The bucket holds two jumbo frames or 0.5 ms at the rate, whichever is more (the kernel splits
    larger offloaded segments; a bigger bucket would let each burst after an idle spell pass faster
    than the rate); its queue holds 100 ms at the rate (at least 256 KiB) before dropping.
    """
    burst = max(2 * 9216 + 1024, int(rate / 8 * 0.5e-3))
    limit = max(256 * 1024, int(rate / 8 * 0.1))
    tc = ["tc", "-n", namespace, "qdisc", "add", "dev", device]
    if delay > 0:
        if not netem_available():
            raise RuntimeError("this kernel has no netem queueing discipline (CONFIG_NET_SCH_NETEM), so a link "
                               "latency cannot be emulated; leave --latency at 0 (rate shaping works)")
        run([*tc, "root", "handle", "1:", "netem", "delay", f"{delay * 1e6:.0f}us", "limit", "100000"])
        run([*tc, "parent", "1:1", "handle", "10:", "tbf", "rate", f"{rate:.0f}bit", "burst", str(burst),
             "limit", str(limit)])
    else:
        run([*tc, "root", "handle", "1:", "tbf", "rate", f"{rate:.0f}bit", "burst", str(burst),
             "limit", str(limit)])


def netem_available() -> bool:
    """Whether this kernel can delay packets (``tc`` netem): probed in a namespace made and removed here."""
    probe = f"{PREFIX}{os.getpid()}-0-netem-probe"
    add(probe)
    try:
        return run(["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1us"],
                   check=False).returncode == 0
    finally:
        run(["ip", "netns", "del", probe], check=False)


def address(namespace: str, device: str, cidr: str) -> None:
    """Give ``device`` in ``namespace`` the address ``cidr``."""
    run(["ip", "-n", namespace, "addr", "add", cidr, "dev", device])


def counters(namespace: str, device: str = "eth0") -> dict[str, int]:
    """The kernel's counters of ``device``: ``tx_bytes``, ``rx_bytes``, ``tx_packets``, ``rx_packets``."""
    info = json.loads(run(["ip", "-j", "-s", "-n", namespace, "link", "show", "dev", device]).stdout)[0]
    stats = info.get("stats64") or info["stats"]
    return {"tx_bytes": int(stats["tx"]["bytes"]), "rx_bytes": int(stats["rx"]["bytes"]),
            "tx_packets": int(stats["tx"]["packets"]), "rx_packets": int(stats["rx"]["packets"])}
