"""Run a launch command under the collector and leave one MPInside text file (and an OTF2 trace), atomically."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfkit import atomic
from perfkit.collect.build import build_library
from perfkit.collect.launch import with_environment
from perfkit.collect.raw import read_raw
from perfkit.collect.watchdog import Watchdog
from perfkit.errors import PerfkitWarning
from perfkit.io.mpinside import write
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
            matrices: bool = False, cpu: bool = True, timeout: float | None = None,
            env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None, trace: bool = False,
            trace_buffer: float = TRACE_BUFFER_MB, overwrite: bool = False) -> CollectResult:
    """Run ``launch`` (e.g. ``["mpirun", "-np", "4", "./app"]``) with the collector preloaded.

    ``output`` receives MPInside text tables (``perfkit.open_profile`` reads them) only when every rank
    reached ``MPI_Finalize``; it is written to a temporary file beside it and renamed, so it is never
    half a file. ``slt`` measures send-late time (``w_MPI_*``), ``collective_wait`` the barrier before
    each collective (``b_MPI_*``), ``matrices`` the rank-to-rank matrices and message-size histograms.
    ``cpu`` (on by default) measures each rank's CPU time in every call and in compute (metric ``cpu_time``) and
    its CPU counters (variable ``rank_cpu``: cores, time waiting for a core, context switches).
    ``timeout`` [s] kills the launch (and all it started) and reports exit status 124.
    ``trace`` also writes an OTF2 archive, ``OUTPUT.otf2/`` (``trace_path``), with the library built for
    tracing; each rank buffers at most ``trace_buffer`` MiB of events and flushes them to disk when full.

    Before the launch starts, the temporaries of an earlier collect that was killed are removed (with a
    warning) and ``output`` is refused if its folder is missing (never created, as ``convert`` and ``place``
    do not), if it is a folder, cannot be written, is a file of the launch, or exists without
    ``overwrite=True`` (so is ``OUTPUT.otf2/`` with ``trace``). A run that fails or is
    stopped leaves an earlier ``output`` as it was and says so. However collect ends (a timeout, an
    exception, a signal, SIGKILL), nothing of the launch is left running (``perfkit.collect.watchdog``).
    """
    if not launch:
        raise ValueError("nothing to launch: give the command after '--', e.g. -- mpirun -np 4 ./app")
    if trace and not trace_buffer > 0:
        raise ValueError(f"trace_buffer must be > 0 MiB, got {trace_buffer}")
    output = Path(output)
    check_outputs(output, launch, cwd=cwd, overwrite=overwrite, trace=trace, option="overwrite=True")
    removed = atomic.sweep(output.parent)
    if removed:
        warnings.warn(f"removed {len(removed)} temporary file(s) left by an earlier run that was killed: "
                      f"{', '.join(p.name for p in removed)}", PerfkitWarning, stacklevel=2)
    earlier = output.exists()
    tmp = atomic.temporary(output.absolute(), "collect")  # the next run removes it if this one is killed
    atomic.remove(tmp)
    try:
        try:  # the folder is written to before the launch, not only after the run
            tmp.mkdir()
        except OSError as exc:
            raise PermissionError(f"cannot write in the folder {output.parent} (to write {output.name} in): "
                                  f"{exc.strerror}") from None
        library = build_library(trace=trace)
        raw = tmp / "raw"
        preload = " ".join(p for p in (str(library), os.environ.get("LD_PRELOAD", "")) if p)
        variables = {"LD_PRELOAD": preload, "PERFKIT_COLLECT_OUT": str(raw),
                     "PERFKIT_COLLECT_SLT": str(int(slt)), "PERFKIT_COLLECT_COLLECTIVE_WAIT": str(int(collective_wait)),
                     "PERFKIT_COLLECT_MATRICES": str(int(matrices)), "PERFKIT_COLLECT_CPU": str(int(cpu))}
        archive = tmp / "trace"
        if trace:
            variables |= {"PERFKIT_COLLECT_TRACE": str(archive), "PERFKIT_COLLECT_TRACE_BUFFER_MB": f"{trace_buffer:g}"}
        command, extra = with_environment(launch, variables)
        start = time.perf_counter()
        returncode, timed_out, told = _run(command, {**os.environ, **(env or {}), **extra}, cwd, timeout)
        seconds = time.perf_counter() - start
        told = f"\n{told}" if told else ""  # the watchdog's line, after collect's own
        if timed_out and not raw.exists():
            return CollectResult(returncode, None, f"the launch was stopped after {timeout:g} s; "
                                                   f"{_not_written(output, earlier)}{told}", seconds)
        if not raw.exists():
            why = _exit_reason(returncode)
            return CollectResult(returncode or 1, None, f"the program did not reach MPI_Finalize on every rank "
                                                        f"({why}); {_not_written(output, earlier)}{told}", seconds)
        try:
            ds = read_raw(raw, label=output.stem)
            _write_atomically(ds, output)
        except Exception as exc:  # what became of the output, on the error's line
            exc.add_note(_not_written(output, earlier) + told)
            raise
        written = _move_trace(archive, trace_path(output)) if trace else None
    finally:
        atomic.remove(tmp)  # after the launch ended or was stopped: nothing of it writes there any more
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
    return CollectResult(returncode, output, text + told, seconds, written)


def _move_trace(archive: Path, target: Path) -> Path | None:
    """Put the archive the ranks wrote in place of ``target`` (None when it is incomplete)."""
    if not (archive / "traces.otf2").is_file() or not (archive / "traces.def").is_file():
        return None
    atomic.put_in_place(archive, target)
    return target


def launch_files(launch: Sequence[str], cwd: str | os.PathLike | None = None) -> list[Path]:
    """The words of ``launch`` that name existing files (relative ones from ``cwd``): the program, its inputs."""
    folder = Path(cwd) if cwd is not None else Path()
    return [folder / word for word in launch if (folder / word).is_file()]


def check_outputs(output: Path, launch: Sequence[str], *, cwd: str | os.PathLike | None = None, overwrite: bool,
                  trace: bool, option: str = "--force") -> None:
    """Refuse ``output`` (and its trace archive) before the launch: see ``perfkit.atomic.check_output``; the
    files of the launch are its inputs. An existing ``OUTPUT.otf2/`` is replaced only with ``overwrite``,
    and only if it is an OTF2 archive."""
    atomic.check_output(output, overwrite=overwrite, inputs=launch_files(launch, cwd), option=option)
    archive = trace_path(output)
    if not trace or not (archive.exists() or archive.is_symlink()):
        return
    if not archive.is_dir() or not (archive / "traces.otf2").is_file():
        raise FileExistsError(f"{archive} exists and is not an OTF2 archive; not replaced")
    if not overwrite:
        raise FileExistsError(f"{archive} exists; {option} replaces it")


def _not_written(output: Path, earlier: bool) -> str:
    """What a run that wrote nothing says of ``output``."""
    if earlier:
        return f"no profile written; {output} is from an earlier run, left as it was"
    return f"no profile written to {output}"


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


def _run(command: list[str], env: dict[str, str], cwd: str | os.PathLike | None,
         timeout: float | None) -> tuple[int, bool, str]:
    """Run in a session of its own, watched: a timeout, an interrupt or the end of this process, however it
    comes, stops everything the launch started (``perfkit.collect.watchdog``). Returns the exit status
    (``TIMED_OUT`` when stopped after ``timeout`` s), whether the timeout stopped it (a program may exit
    with status 124 of its own) and the watchdog's report ("" unless a process needed SIGKILL or outlived
    it); an interrupt carries the report as a note."""
    with Watchdog() as watchdog:
        try:
            proc = subprocess.Popen(command, env={**env, **watchdog.environment}, cwd=cwd, start_new_session=True)
        except OSError:  # the launch could not start: there is nothing to stop
            watchdog.ended()
            raise
        try:
            watchdog.started()
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(watchdog, proc)
            return TIMED_OUT, True, watchdog.report
        except BaseException as exc:
            _stop(watchdog, proc)
            if watchdog.report:
                exc.add_note(watchdog.report)
            raise
        watchdog.ended()
        return returncode, False, watchdog.report


def _stop(watchdog: Watchdog, proc: subprocess.Popen) -> None:
    """Stop the launch: every marked process, in whatever process group (the watchdog), then what is left of
    its own process group (a process that dropped the mark); ``proc`` is reaped."""
    watchdog.stop()
    if proc.poll() is None:
        stop_process_group(proc)


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
    meta = {"mode": one["mode"].item(), "nodes": int(one["nodes"]), "system": one["system"].item()}
    if np.isfinite(float(one["ppn"])):
        meta["ppn"] = int(one["ppn"])
    with atomic.writing(output) as tmp:
        with open(tmp, "w") as fh:
            write(ds, fh, with_calls=True, run_metadata=meta)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, output)
