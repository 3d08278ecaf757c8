"""``perfkit collect --trace`` with CPU measurement: the metric ``cpu_time`` at every Enter and Leave of the trace,
read back per rank and function equal to the collector's own profile of the same run (both come from the same
readings of the thread's CPU clock), shown by ``otf2-print``; without CPU measurement the trace has no metric.

The busy program (``programs/busy.c``) computes a fixed spin loop between a ring exchange and an allreduce each
step, on this machine's cores (2 here): 4 ranks share them, 2 ranks fill them (with a buffer small enough to be
flushed between a metric and its event).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import perfkit
from perfkit.collect import collect
from perfkit.collect.launch import mpirun_command
from perfkit.collect.trace import trace_summary
from perfkit.model import CPU_TIME, read_warnings
from tests.collect.test_trace import NO_MPI, NO_OTF2, PROGRAMS

pytestmark = [
    pytest.mark.skipif(NO_MPI is not None, reason=f"MPI: {NO_MPI} (Debian: apt install openmpi-bin libopenmpi-dev "
                                                  "gfortran)"),
    pytest.mark.skipif(NO_OTF2 is not None, reason=f"OTF2: {NO_OTF2}"),
    pytest.mark.timeout(300),
]
#: The profile file prints CPU seconds with 6 decimals; the trace rounds each reading to the nanosecond.
PRINTED, PER_READING = 1e-6, 1e-9
NO_OTF2_PRINT = None if shutil.which("otf2-print") else "otf2-print not on PATH (Debian: apt install otf2-tools)"


def _busy(tmp: Path, nprocs: int, work: int, steps: int, **options) -> tuple[xr.Dataset, xr.Dataset, Path]:
    """The profile and the trace (as read, and the archive) of one traced run of the busy program."""
    exe = tmp / "busy"
    subprocess.run(["mpicc", "-O1", str(PROGRAMS / "busy.c"), "-o", str(exe)], check=True)
    result = collect(mpirun_command(nprocs, [str(exe), str(work), str(steps), str(tmp / "own")]),
                     tmp / "busy.mpinside", timeout=240, trace=True, **options)
    assert result.returncode == 0 and result.output is not None and result.trace is not None, result.message
    return perfkit.open_profile(result.output), perfkit.open_profile(result.trace), result.trace


@pytest.fixture(scope="module", params=[(4, 2_000_000, 20, 64), (2, 20_000, 4000, 0.5)],
                ids=["4-ranks-sharing-the-cores", "2-ranks-small-buffer"])
def busy_run(request, tmp_path_factory) -> tuple[xr.Dataset, xr.Dataset, Path]:
    nprocs, work, steps, buffer = request.param
    return _busy(tmp_path_factory.mktemp("busy"), nprocs, work, steps, trace_buffer=buffer)


def test_the_traces_cpu_time_is_the_profiles(busy_run):
    """Per rank and function (Compute the time between calls), within the profile file's printing and a
    nanosecond per reading; MPI_Finalize, which the profile stops at, holds CPU time of its own."""
    profile, trace, archive = busy_run
    want = profile["profile"].isel(run=0).sel(metric=CPU_TIME)
    got = trace["profile"].isel(run=0).sel(metric=CPU_TIME)
    calls = profile["profile"].isel(run=0).sel(metric="calls").fillna(1)
    assert trace["units"].sel(metric=CPU_TIME).item() == "s" and read_warnings(trace) == []
    assert (want.sel(function="Compute") > 0).all()
    off = abs(got.sel(function=want["function"]) - want)
    bound = PRINTED + 2 * PER_READING * calls
    assert (off <= bound).all(), off.where(off > bound, drop=True).to_pandas()
    assert np.isfinite(got.sel(function="MPI_Finalize")).all() and (got.sel(function="MPI_Finalize") >= 0).all()
    if profile.sizes["rank"] == 2:
        assert trace_summary(archive).flushes > 0  # a flush may fall between a metric and its event


@pytest.mark.skipif(NO_OTF2_PRINT is not None, reason=NO_OTF2_PRINT or "")
def test_otf2_print_shows_a_metric_before_every_enter_and_leave(busy_run):
    _, _, archive = busy_run
    anchor = archive / "traces.otf2"
    shown = subprocess.run(["otf2-print", str(anchor)], capture_output=True, text=True, timeout=120, check=True)
    lines = [line.split() for line in shown.stdout.splitlines() if re.match(r"^[A-Z_]+\s+\d+\s+\d+", line)]
    kinds = [line[0] for line in lines]
    marks = [i for i, kind in enumerate(kinds) if kind in ("ENTER", "LEAVE")]
    assert kinds.count("METRIC") == len(marks) > 0
    # per location, each Enter and Leave comes right after its metric (a buffer flush may come between), at its
    # timestamp
    last: dict[str, list[str]] = {}
    for line in lines:
        if line[0] in ("ENTER", "LEAVE"):
            assert last[line[1]][0] == "METRIC" and last[line[1]][2] == line[2], (last[line[1]], line)
        if line[0] != "BUFFER_FLUSH":
            last[line[1]] = line
    definitions = subprocess.run(["otf2-print", "-G", str(anchor)], capture_output=True, text=True, timeout=120,
                                 check=True).stdout
    assert re.search(r'METRIC_MEMBER .*"cpu_time".*Mode: ACCUMULATED_START.*Exponent: -9, Unit: "s"', definitions)
    assert re.search(r"METRIC_CLASS .*Occurrence: SYNCHRONOUS_STRICT", definitions)


def test_without_cpu_measurement_the_trace_has_no_metric(tmp_path):
    profile, trace, archive = _busy(tmp_path, 2, 200_000, 10, cpu=False)
    assert CPU_TIME not in profile["metric"].values and CPU_TIME not in trace["metric"].values
    assert read_warnings(trace) == []
    if NO_OTF2_PRINT is None:
        shown = subprocess.run(["otf2-print", str(archive / "traces.otf2")], capture_output=True, text=True,
                               timeout=120, check=True).stdout
        assert "METRIC" not in shown
