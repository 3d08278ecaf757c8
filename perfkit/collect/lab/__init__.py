"""The lab: small real MPI programs with known performance causes, run under the collector.

``run(scenario, nprocs, ...)`` builds the program (cached), runs it under ``perfkit.collect`` and
returns the profile read back with ``perfkit.open_profile`` beside its ground truth (``truth.py``,
saved as ``<profile>.truth.nc``). ``scenarios()`` lists what there is; ``run_uninstrumented`` runs
the same program without the collector (for overhead measurements).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xarray as xr

from perfkit.collect.lab.build import LabBuildError, binary, missing_tools
from perfkit.collect.lab.compare import deviation, measured
from perfkit.collect.lab.scenarios import SCENARIOS, Scenario
from perfkit.collect.lab.truth import get_scenario, load_truth, read_record, save_truth, truth, truth_path
from perfkit.collect.launch import mpirun_command
from perfkit.collect.run import TRACE_BUFFER_MB, CollectResult, stop_process_group

__all__ = [
    "LabBuildError",
    "LabRun",
    "UninstrumentedRun",
    "deviation",
    "launch_command",
    "load_truth",
    "measured",
    "missing_tools",
    "read_record",
    "run",
    "run_uninstrumented",
    "save_truth",
    "scenarios",
    "truth",
    "truth_path",
]


@dataclass(frozen=True)
class LabRun:
    """One lab program run under the collector.

    ``truth`` follows from the parameters; ``realised`` is the truth of this very run, from the compute
    intervals the ranks actually had (None when they could not record them: a failed run).
    ``profile`` is None when the program did not reach ``MPI_Finalize`` (then ``message`` says what
    happened); ``wall_seconds`` [s] is the whole launch, mpirun start-up included. ``trace`` is the OTF2
    archive of a run with ``trace=True`` (None otherwise).
    """

    scenario: str
    nprocs: int
    params: Mapping[str, Any]
    path: Path | None
    profile: xr.Dataset | None
    truth: xr.Dataset
    realised: xr.Dataset | None
    returncode: int
    message: str
    wall_seconds: float
    trace: Path | None = None


@dataclass(frozen=True)
class UninstrumentedRun:
    """The same program run without the collector: exit status and wall time [s] of the launch."""

    launch: list[str]
    returncode: int
    wall_seconds: float
    output: str


def scenarios() -> dict[str, str]:
    """Scenario name -> one-line description."""
    return {name: sc.description for name, sc in SCENARIOS.items()}


def launch_command(scenario: str, nprocs: int, *, record: str | Path | None = None, launcher: str = "mpirun",
                   **params: Any) -> list[str]:
    """The launch command of ``scenario`` (compiling the program if needed, with ``$MPICC`` / ``$MPIFORT``);
    ``record``: where the ranks write their realised compute intervals (``<record>.<rank>``); ``launcher``:
    e.g. ``mpiexec.mpich`` for a program built with MPICH's wrappers."""
    sc = get_scenario(scenario)
    p = sc.params(**params)
    exe = binary(sc.language, p.get("interface", "use_mpi"))
    return mpirun_command(nprocs, [str(exe), *sc.argv(p, str(record) if record else None)], launcher=launcher)


def _params(sc: Scenario, steps: int | None, step_seconds: float | None, params: dict[str, Any]) -> dict[str, Any]:
    return sc.params(steps=steps, step_seconds=step_seconds, **params)


def run(
    scenario: str,
    nprocs: int,
    *,
    steps: int | None = None,
    step_seconds: float | None = None,
    slt: bool = True,
    collective_wait: bool = True,
    matrices: bool = True,
    cpu: bool = True,
    workdir: str | Path | None = None,
    timeout: float | None = 120,
    env: Mapping[str, str] | None = None,
    trace: bool = False,
    trace_buffer: float = TRACE_BUFFER_MB,
    launcher: str = "mpirun",
    collector: Callable[..., CollectResult] | None = None,
    clock_offsets: Mapping[str, float] | None = None,
    **params: Any,
) -> LabRun:
    """Run ``scenario`` on ``nprocs`` ranks under the collector; see ``scenarios.py`` for ``params``.
    ``slt``, ``collective_wait``, ``matrices``, ``cpu``: the collector's options (``perfkit.collect.collect``).

    The profile is written to ``<workdir>/<scenario>-np<nprocs>.mpinside`` (a new temporary
    directory when ``workdir`` is None), its truth beside it (``.truth.nc``) and the realised truth
    too (``.realised.truth.nc``); with ``trace`` the OTF2 archive too (``.mpinside.otf2/``), each rank
    buffering ``trace_buffer`` MiB of events. ``collector``: what runs the launch under the collector,
    with :func:`perfkit.collect.collect`'s parameters (that function when None; e.g.
    ``perfkit.collect.testbed.collector.collect_on(tb)`` to run across a testbed's nodes).
    ``clock_offsets``: per host name, how far its monotonic clock reads ahead [s] (a testbed's
    ``clock_offsets()``); the ranks' recorded compute intervals are put on one clock with them before
    the realised truth is computed from them (without them, every rank must share one clock).
    """
    from perfkit import open_profile
    from perfkit.collect import collect

    sc = get_scenario(scenario)
    p = _params(sc, steps, step_seconds, params)
    expected = truth(scenario, nprocs, **p)
    wd = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="perfkit-lab-"))
    wd.mkdir(parents=True, exist_ok=True)
    output = wd / f"{scenario}-np{nprocs}.mpinside"
    record = wd / f"{scenario}-np{nprocs}.compute"
    launch = launch_command(scenario, nprocs, record=None if sc.fails else record, launcher=launcher, **p)
    save_truth(expected, output)
    t0 = time.perf_counter()
    res = (collector or collect)(launch, output, slt=slt, collective_wait=collective_wait, matrices=matrices,
                                 cpu=cpu, timeout=timeout, env=env, cwd=wd, trace=trace, trace_buffer=trace_buffer,
                                 overwrite=True)
    wall = time.perf_counter() - t0
    profile = open_profile(res.output) if res.output is not None else None
    intervals = read_record(record, nprocs) if res.output is not None else None
    if intervals is not None and clock_offsets:
        hosts = [str(h) for h in profile["host"].isel(run=0).values]
        intervals = [[(a - clock_offsets[h], b - clock_offsets[h]) for a, b in rank]
                     for rank, h in zip(intervals, hosts)]
    realised = truth(scenario, nprocs, realised=intervals, **p) if intervals is not None else None
    if realised is not None:
        save_truth(realised, output.with_name(output.name + ".realised"))
    return LabRun(scenario, nprocs, p, res.output, profile, expected, realised, res.returncode, res.message, wall,
                  res.trace)


def run_uninstrumented(
    scenario: str,
    nprocs: int,
    *,
    steps: int | None = None,
    step_seconds: float | None = None,
    timeout: float | None = 120,
    env: Mapping[str, str] | None = None,
    **params: Any,
) -> UninstrumentedRun:
    """Run ``scenario`` without the collector; wall time [s] of the whole launch."""
    sc = get_scenario(scenario)
    launch = launch_command(scenario, nprocs, **_params(sc, steps, step_seconds, params))
    t0 = time.perf_counter()
    proc = subprocess.Popen(launch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_process_group(proc)
        out, _ = proc.communicate()
        return UninstrumentedRun(launch, -1, time.perf_counter() - t0, f"{out}\ntimed out after {timeout} s")
    return UninstrumentedRun(launch, proc.returncode, time.perf_counter() - t0, out)
