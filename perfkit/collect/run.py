"""Run a launch command under the collector and leave one MPInside text file (and an OTF2 trace), atomically."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfkit.collect.build import build_library
from perfkit.collect.launch import with_environment
from perfkit.collect.raw import read_raw
from perfkit.io.mpinside_writer import write
from perfkit.model import read_warnings

TIMED_OUT = 124  # exit status reported when the launch was killed after `timeout`


@dataclass(frozen=True)
class CollectResult:
    """What a collection left: the launch's exit status, the profile written (or None) and what happened."""

    returncode: int
    output: Path | None
    message: str
    seconds: float  # wall time of the launch [s]
    trace: Path | None = None  # the OTF2 archive (folder holding traces.otf2), with trace=True


#: Default buffer of the trace per rank [MiB]: flushed to disk when full.
TRACE_BUFFER_MB = 64.0


def trace_path(output: str | os.PathLike) -> Path:
    """Where ``collect(..., trace=True)`` writes the OTF2 archive of profile ``output``: ``OUTPUT.otf2/``."""
    output = Path(output)
    return output.with_name(output.name + ".otf2")


def collect(launch: Sequence[str], output: str | os.PathLike, *, slt: bool = False, collective_wait: bool = False,
            matrices: bool = False, timeout: float | None = None, env: Mapping[str, str] | None = None,
            cwd: str | os.PathLike | None = None, trace: bool = False,
            trace_buffer: float = TRACE_BUFFER_MB) -> CollectResult:
    """Run ``launch`` (e.g. ``["mpirun", "-np", "4", "./app"]``) with the collector preloaded.

    ``output`` receives MPInside text tables (``perfkit.open_profile`` reads them) only when every rank
    reached ``MPI_Finalize``; it is written to a temporary file beside it and renamed, so it is never
    half a file. ``slt`` measures send-late time (``w_MPI_*``), ``collective_wait`` the barrier before
    each collective (``b_MPI_*``), ``matrices`` the rank-to-rank matrices and message-size histograms.
    ``timeout`` [s] kills the launch (and all it started) and reports exit status 124.
    ``trace`` also writes an OTF2 archive, ``OUTPUT.otf2/`` (``trace_path``), with the library built for
    tracing; each rank buffers at most ``trace_buffer`` MiB of events and flushes them to disk when full.
    """
    if not launch:
        raise ValueError("nothing to launch: give the command after '--', e.g. -- mpirun -np 4 ./app")
    if trace and not trace_buffer > 0:
        raise ValueError(f"trace_buffer must be > 0 MiB, got {trace_buffer}")
    library = build_library(trace=trace)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".perfkit-collect-", dir=output.parent) as tmp:
        raw = Path(tmp) / "raw"
        preload = " ".join(p for p in (str(library), os.environ.get("LD_PRELOAD", "")) if p)
        variables = {"LD_PRELOAD": preload, "PERFKIT_COLLECT_OUT": str(raw),
                     "PERFKIT_COLLECT_SLT": str(int(slt)), "PERFKIT_COLLECT_COLLECTIVE_WAIT": str(int(collective_wait)),
                     "PERFKIT_COLLECT_MATRICES": str(int(matrices))}
        archive = Path(tmp) / "trace"
        if trace:
            variables |= {"PERFKIT_COLLECT_TRACE": str(archive), "PERFKIT_COLLECT_TRACE_BUFFER_MB": f"{trace_buffer:g}"}
        command, extra = with_environment(launch, variables)
        start = time.perf_counter()
        returncode = _run(command, {**os.environ, **(env or {}), **extra}, cwd, timeout)
        seconds = time.perf_counter() - start
        if returncode == TIMED_OUT and not raw.exists():
            return CollectResult(returncode, None, f"the launch was stopped after {timeout:g} s; no profile written",
                                 seconds)
        if not raw.exists():
            why = _exit_reason(returncode)
            return CollectResult(returncode or 1, None, f"the program did not reach MPI_Finalize on every rank "
                                                        f"({why}); no profile written to {output}", seconds)
        ds = read_raw(raw, label=output.stem)
        _write_atomically(ds, output)
        written = _move_trace(archive, trace_path(output)) if trace else None
    one = ds.isel(run=0)
    text = (f"wrote {output}: {int(one['nprocs'])} ranks on {int(one['nodes'])} node(s), mode {one['mode'].item()}, "
            f"{float(one['elapsed']):.3f} s per rank at most")
    clock = _clock_text(ds, int(one["nodes"]), slt or collective_wait)
    if clock:
        text += f"\n{clock}"
    for warning in read_warnings(ds):
        text += f"\nwarning: {warning}"
    if trace:
        text += f"\n{_trace_text(written)}"
    if returncode:
        text += f"\nthe program exited with status {returncode}"
    return CollectResult(returncode, output, text, seconds, written)


def _move_trace(archive: Path, target: Path) -> Path | None:
    """Put the archive the ranks wrote in place of ``target`` (None when it is incomplete)."""
    if not (archive / "traces.otf2").is_file() or not (archive / "traces.def").is_file():
        return None
    if target.exists():
        shutil.rmtree(target)
    os.replace(archive, target)
    return target


def _trace_text(archive: Path | None) -> str:
    """What the trace holds: events, buffer flushes and events dropped per rank (from its definitions)."""
    if archive is None:
        return "warning: no trace written (the ranks did not complete the OTF2 archive)"
    from perfkit.collect.trace import trace_summary

    summary = trace_summary(archive)
    text = (f"trace {archive}: {summary.events} events of {summary.ranks} ranks, "
            f"{summary.flushes} buffer flushes")
    if summary.dropped:
        text += f"\nwarning: {summary.dropped} trace events were dropped (perfkit::events_dropped in the trace)"
    return text


def _clock_text(ds, nodes: int, synchronised: bool) -> str:
    """What the clock alignment between nodes measured (empty on one node or without SLT or collective wait)."""
    if nodes < 2 or not synchronised:
        return ""
    offset, bound, drift = (ds.attrs.get(f"collect_clock_{k}_s", float("nan")) for k in ("offset", "offset_bound",
                                                                                         "drift"))
    return (f"clocks: offsets between nodes measured up to {offset:.3g} s (each within {bound:.3g} s of the "
            f"truth), drift over the run {drift:.3g} s")


def _run(command: list[str], env: dict[str, str], cwd: str | os.PathLike | None, timeout: float | None) -> int:
    """Run in a process group of its own, so a timeout or an interrupt stops everything it started."""
    proc = subprocess.Popen(command, env=env, cwd=cwd, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_process_group(proc)
        return TIMED_OUT
    except BaseException:
        stop_process_group(proc)
        raise


def stop_process_group(proc: subprocess.Popen, term_grace: float = 5.0) -> None:
    """Stop ``proc`` and everything it started (its own process group): TERM, then KILL after
    ``term_grace`` seconds [s]."""
    for sig, grace in ((signal.SIGTERM, term_grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _exit_reason(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    if returncode > 128:  # a shell's or mpirun's report of a process killed by a signal
        try:
            return f"exit status {returncode}: a rank was killed by {signal.Signals(returncode - 128).name}"
        except ValueError:
            pass
    return f"exit status {returncode}"


def _write_atomically(ds, output: Path) -> None:
    one = ds.isel(run=0)
    meta = {"mode": one["mode"].item(), "nodes": int(one["nodes"]), "system": one["system"].item(),
}
    if np.isfinite(float(one["ppn"])):
        meta["ppn"] = int(one["ppn"])
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as fh:
            write(ds, fh, with_calls=True, run_metadata=meta)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
