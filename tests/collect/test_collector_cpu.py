"""The collector's CPU measurement: CPU time per call and in compute, each rank's CPU counters, on a program that
computes, against the program's own clocks and the kernel's run-queue accounting; the records it writes, read back.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import perfkit
from perfkit.collect import collect
from perfkit.collect.launch import mpirun_command
from perfkit.collect.raw import read_raw
from perfkit.collect.run import _write_atomically
from perfkit.model import CPU_STATS, CPU_TIME
from tests.collect.test_collector import PROGRAMS, _raw_file, needs_mpi


def test_cpu_records_become_the_cpu_time_metric_and_rank_cpu_and_survive_the_mpinside_file(tmp_path):
    rows = [[0, r, -1, 0, 2.0, 1, 0, 0, 0, 0, 1.0 + r] for r in range(2)]  # Compute: 2 s wall, 1 s / 2 s CPU
    rows += [[0, r, 0, 0, 0.5, 10, 80, 10, 0, 0, 0.25] for r in range(2)]  # MPI_Send: 0.5 s wall, 0.25 s CPU
    rows += [[3, r, 1, 2, 0.75 * r, 5, 100 + r, 1.5, 2, np.nan if r else 0.5] for r in range(2)]
    ds = read_raw(_raw_file(tmp_path / "raw", rows, ["h", "h"], cpu=1), label="run")
    cpu = ds["profile"].sel(metric=CPU_TIME).isel(run=0)
    assert ds["units"].sel(metric=CPU_TIME).item() == "s"
    np.testing.assert_array_equal(cpu.sel(function="Compute"), [1.0, 2.0])
    np.testing.assert_array_equal(cpu.sel(function="MPI_Send"), [0.25, 0.25])
    counters = ds["rank_cpu"].isel(run=0)
    assert list(ds["cpu_stat"].values) == list(CPU_STATS)
    np.testing.assert_array_equal(counters.sel(cpu_stat="run_delay"), [0.0, 0.75])
    np.testing.assert_array_equal(counters.sel(cpu_stat="involuntary_switches"), [100, 101])
    np.testing.assert_array_equal(counters.sel(cpu_stat="cpu_quota"), [0.5, np.nan])
    _write_atomically(ds, tmp_path / "run.mpinside")
    written = (tmp_path / "run.mpinside").read_text()
    assert ">>>> CPU time totals (s) <<<<" in written and ">>>> CPU per rank <<<<" in written
    back = perfkit.open_profile(tmp_path / "run.mpinside")
    np.testing.assert_array_equal(back["profile"].sel(metric=CPU_TIME).values, ds["profile"].sel(metric=CPU_TIME))
    np.testing.assert_array_equal(back["rank_cpu"].values, ds["rank_cpu"].values)


def test_without_cpu_measurement_there_is_no_cpu_metric_and_the_file_has_no_cpu_tables(tmp_path):
    rows = [[0, r, -1, 0, 2.0, 1, 0, 0, 0, 0] for r in range(2)]
    ds = read_raw(_raw_file(tmp_path / "raw", rows, ["h", "h"]), label="run")
    assert CPU_TIME not in ds["metric"].values and "rank_cpu" not in ds
    _write_atomically(ds, tmp_path / "run.mpinside")
    assert "CPU time" not in (tmp_path / "run.mpinside").read_text()
    assert CPU_TIME not in perfkit.open_profile(tmp_path / "run.mpinside")["metric"].values


def _busy_run(tmp_path: Path, nprocs: int, work: int, steps: int) -> tuple[xr.Dataset, np.ndarray]:
    """The busy program's profile and its own (rank, [compute CPU time, compute wall time]) [s]."""
    subprocess.run(["mpicc", "-O1", str(PROGRAMS / "busy.c"), "-o", str(tmp_path / "busy")], check=True)
    own = tmp_path / "own"
    result = collect(mpirun_command(nprocs, [str(tmp_path / "busy"), str(work), str(steps), str(own)]),
                     tmp_path / f"busy{nprocs}.mpinside", timeout=300)
    assert result.returncode == 0 and result.output is not None, result.message
    measured = [Path(f"{own}.{r}").read_text().split() for r in range(nprocs)]
    return perfkit.open_profile(result.output), np.array([[float(m[1]), float(m[3])] for m in measured])


@needs_mpi
@pytest.mark.parametrize("nprocs", [2, 4])
def test_compute_cpu_time_matches_the_programs_own_and_time_off_core_is_the_kernels_run_delay(tmp_path, nprocs):
    """2 ranks on 2 cores, then 4 ranks on 2 cores, a spin loop of fixed work: the collector's compute CPU time
    holds the program's own (the loop's thread CPU clock) plus the little code around it; a rank that computes
    is off its core only while runnable, so its wall time minus CPU time in compute and in MPI is the kernel's
    run-queue wait (schedstat), an account the collector does not make (within 10 % of the elapsed time)."""
    ds, own = _busy_run(tmp_path, nprocs, 10_000_000, 20)
    one = ds.isel(run=0)
    cpu, wall = one["profile"].sel(metric=CPU_TIME), one["profile"].sel(metric="time")
    compute_cpu = cpu.sel(function="Compute").values
    own_cpu = own[:, 0]
    assert np.all(compute_cpu >= own_cpu * 0.999) and np.all(compute_cpu <= own_cpu + 0.05 + 0.05 * own_cpu)
    counters = one["rank_cpu"]
    assert np.all(counters.sel(cpu_stat="cores_online").values == float(len(os.sched_getaffinity(0))))
    # Open MPI binds 2 ranks to a core each, 4 to none: either way the node's ranks may use every core
    assert np.all(counters.sel(cpu_stat="node_cores_allowed").values == float(len(os.sched_getaffinity(0))))
    profiled = wall.drop_sel(function="MPI_Init").sum("function").values  # MPI_Init's end to MPI_Finalize
    on_cpu = cpu.drop_sel(function="MPI_Init").sum("function").values
    delay = counters.sel(cpu_stat="run_delay").values
    np.testing.assert_allclose(profiled - on_cpu, delay, atol=0.1 * profiled.max())
    assert np.all(on_cpu <= profiled * 1.01)
