"""Shared by the testbed tests (and ``benchmarks/bench_dilation.py``): why they skip, the exchange program's
report of where ranks ran, a program that computes (``spin.c``) and a TCP transfer between two nodes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from perfkit.collect.testbed import Testbed, why_unavailable

WHY_NO_TESTBED = why_unavailable()
WHY_NO_OPENMPI = None if shutil.which("mpicc") and shutil.which("mpirun") else "Open MPI (mpicc, mpirun) not found"
WHY_NO_MPICH = (None if shutil.which("mpicc.mpich") and shutil.which("mpiexec.hydra")
                else "MPICH (mpicc.mpich, mpiexec.hydra) not found; Debian: apt install mpich")


def hosts_reported(stdout: str) -> dict[int, str]:
    """``exchange: host R NAME`` lines: where each rank ran, by its own ``gethostname``."""
    return {int(r): name for r, name in re.findall(r"^exchange: host (\d+) (\S+)$", stdout, re.M)}


SPIN_SOURCE = Path(__file__).with_name("spin.c")

_RECEIVE = """
import socket, sys, time
server = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
conn, _ = server.accept()
got, first, start = 0, 0, None
while chunk := conn.recv(1 << 16):
    if start is None:
        start, first = time.perf_counter(), len(chunk)
    got += len(chunk)
print(got, got - first, time.perf_counter() - start)
"""
_SEND = """
import socket, sys, time
for attempt in range(100):
    try:
        conn = socket.create_connection((sys.argv[1], int(sys.argv[2])))
        break
    except OSError:
        time.sleep(0.1)
conn.sendall(bytes(int(sys.argv[3])))
conn.close()
"""


def build_spin(folder: Path) -> Path:
    """``spin.c`` built with ``mpicc`` in ``folder``."""
    exe = folder / "spin"
    subprocess.run(["mpicc", "-O2", "-o", str(exe), str(SPIN_SOURCE)], check=True)
    return exe


def spin_times(stdout: str) -> list[tuple[float, float]]:
    """Per rank, ``spin``'s compute time by the wall clock and by its CPU clock [s]."""
    return [(float(w), float(c)) for w, c in re.findall(r"^spin: rank \d+ compute_s (\S+) cpu_s (\S+)$", stdout, re.M)]


def transfer(tb: Testbed, nbytes: int, source: str = "node000", sink: str = "node001", port: int = 5201) -> float:
    """Send ``nbytes`` over TCP from node ``source`` to node ``sink``; the rate the receiver saw from its
    first chunk to the end [bit/s of payload]."""
    receiver = subprocess.Popen(tb.command_on(sink, [sys.executable, "-c", _RECEIVE, str(port)]),
                                stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout.readline().strip() == "ready"
        subprocess.run(tb.command_on(source, [sys.executable, "-c", _SEND, sink, str(port), str(nbytes)]),
                       check=True, timeout=300)
        out, _ = receiver.communicate(timeout=60)
    finally:
        receiver.kill()
    got, timed, seconds = out.split()
    assert int(got) == nbytes
    return int(timed) * 8 / float(seconds)
