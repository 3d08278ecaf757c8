"""The worker process: results come back, crashes and hangs become exceptions, the caller survives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from perfkit.placement.worker import WorkerError, WorkerTimeout, run_isolated
from tests.placement import placement_faults as faults


def test_result_comes_back_despite_stdout_noise() -> None:
    assert run_isolated(faults.echo, {"a": [1, 2]}, timeout=60) == {"a": [1, 2]}


def test_environment_reaches_worker() -> None:
    assert run_isolated(faults.environment, "SCOTCH_PTHREAD_NUMBER", env={"SCOTCH_PTHREAD_NUMBER": "1"}) == "1"


def test_segfault_becomes_exception() -> None:
    with pytest.raises(WorkerError, match="SIGSEGV"):
        run_isolated(faults.segfault, timeout=60)
    assert run_isolated(faults.echo, 3, timeout=60) == 3  # the caller is fine and can go on


def test_killed_worker_becomes_exception() -> None:
    with pytest.raises(WorkerError, match="SIGKILL"):
        run_isolated(faults.kill_self, timeout=60)


def test_exception_in_worker_is_reported() -> None:
    with pytest.raises(WorkerError, match="ValueError: broken input"):
        run_isolated(faults.fail, "broken input", timeout=60)


def test_timeout_kills_worker() -> None:
    start = time.monotonic()
    with pytest.raises(WorkerTimeout, match="exceeded 1 s"):
        run_isolated(faults.sleep, 60, timeout=1)
    assert time.monotonic() - start < 20
    assert isinstance(WorkerTimeout("x"), TimeoutError)


def test_only_top_level_functions() -> None:
    with pytest.raises(ValueError, match="top-level function"):
        run_isolated(lambda: 1)
    with pytest.raises(ValueError, match="top-level function"):
        run_isolated(len, [1])


_MAPPING_PARENT = """
import sys
from perfkit.placement.scotch import graph_from_matrix, map_graph
from perfkit.placement.synthetic import stencil_3d
from perfkit.placement.topology import Topology
graph = graph_from_matrix(stencil_3d((64, 32, 32)))
print("mapping", flush=True)
map_graph(graph, Topology(nodes=1366, cores=48).scotch_arch(65536), timeout=600)
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_worker_dies_with_its_parent(sig: signal.Signals) -> None:
    """A kernel killed in the middle of a large Scotch map leaves no worker behind (no orphan under PID 1)."""
    parent = subprocess.Popen([sys.executable, "-c", _MAPPING_PARENT], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2])
    try:
        assert parent.stdout.readline().strip() == "mapping"
        deadline = time.monotonic() + 60
        workers: list[psutil.Process] = []
        while not workers and time.monotonic() < deadline:
            workers = psutil.Process(parent.pid).children()
            time.sleep(0.05)
        assert len(workers) == 1, "no worker process appeared"
        worker = workers[0]
        time.sleep(1.5)  # well inside the map (tens of seconds for 65,536 vertices)
        assert worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE
        os.kill(parent.pid, sig)
        parent.wait(timeout=30)
        _gone, alive = psutil.wait_procs([worker], timeout=10)
        assert not alive, f"worker {worker.pid} outlived its parent (now under pid {worker.ppid()})"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
