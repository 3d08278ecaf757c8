"""The worker process: results come back, crashes and hangs become exceptions, the caller survives."""

from __future__ import annotations

import time

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
