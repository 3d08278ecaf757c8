"""``perfkit collect --trace``: the OTF2 archive the collector writes, checked against known truths.

* a ping-pong with known message sizes and counts: the trace's bytes matrix and message counts are the
  program's exactly (Open MPI and MPICH; a buffer far smaller than the trace, flushed, loses nothing);
* every lab scenario at 4 and 8 ranks: the wait states read from the trace (late sender, late receiver,
  wait at collective) against the lab's truth within 10 % or 2 ms per step, calls and matrices exact,
  and the per-function times against the collector's own profile of the same run within 1 % or 1 ms;
* ``perfkit.diagnose`` on the trace names dynamic imbalance (and the late rank of each step) and
  serialisation where the profile alone cannot tell;
* ``otf2-print`` (the OTF2 library's own tool) accepts the archive and counts the events the OTF2 Python
  reader counts, and the number each rank's definitions state.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import perfkit
from perfkit.collect import collect, lab
from perfkit.collect.build import build_library
from perfkit.collect.lab.build import missing_tools
from perfkit.collect.lab.noise import exchange_delay
from perfkit.collect.launch import mpirun_command
from perfkit.collect.trace import trace_summary
from perfkit.model import read_warnings
from tests.collect.test_lab_measured import CONFIG, TIMING_UNKNOWN
from tests.helpers import skip_when_noisy, with_noise

PROGRAMS = Path(__file__).parent / "programs"
NO_MPI = next((f"{tool} not on PATH" for tool in ("mpicc", "mpirun", "mpifort") if shutil.which(tool) is None), None)
NO_OTF2 = None if shutil.which("otf2-config") else "otf2-config not on PATH (Debian: apt install libotf2-trace-dev)"
NO_MPICH = next((f"{tool} not on PATH (Debian: apt install mpich libmpich-dev)"
                 for tool in ("mpicc.mpich", "mpifort.mpich", "mpiexec.mpich") if shutil.which(tool) is None), None)
pytestmark = [
    pytest.mark.skipif(NO_MPI is not None, reason=f"MPI: {NO_MPI} (Debian: apt install openmpi-bin libopenmpi-dev "
                                                  "gfortran)"),
    pytest.mark.skipif(NO_OTF2 is not None, reason=f"OTF2: {NO_OTF2}"),
    pytest.mark.timeout(300),
]

#: Message sizes of programs/pingpong.c [B]; each is sent REPS times each way.
SIZES = (0, 8, 1000, 65536)
REPS = 25
WAIT_REL = 0.10
WAIT_FLOOR_PER_STEP = 0.002  # [s]
TIME_REL, TIME_FLOOR = 0.01, 0.001  # trace against profile, per rank and function [-, s]
#: Calls a profile holds beside the truth's (start-up, shut-down; MPICH's MPI_Init enters through
#: MPI_Init_thread) or a trace beside the profile's.
OPTIONAL_CALLS = {"MPI_Init", "MPI_Init_thread", "MPI_Finalize"}


def _pingpong(tmp: Path, cc: str, launcher: str, nprocs: int, **options) -> tuple[Path, Path]:
    exe = tmp / "pingpong"
    subprocess.run([cc, "-O2", str(PROGRAMS / "pingpong.c"), "-o", str(exe)], check=True)
    result = collect(mpirun_command(nprocs, [str(exe), str(REPS)], launcher=launcher), tmp / "pingpong.mpinside",
                     matrices=True, timeout=240, trace=True, **options)
    assert result.returncode == 0 and result.trace is not None, result.message
    return result.output, result.trace


def _pingpong_truth(nprocs: int) -> tuple[np.ndarray, np.ndarray]:
    """Bytes and messages sender -> receiver of programs/pingpong.c."""
    size, count = np.zeros((nprocs, nprocs)), np.zeros((nprocs, nprocs))
    size[0, 1] = size[1, 0] = REPS * sum(SIZES)
    count[0, 1] = count[1, 0] = REPS * len(SIZES)
    return size, count


def _traffic(ds, quantity: str) -> np.ndarray:
    tr = ds["traffic"].isel(run=0).sel(quantity=quantity)
    return np.asarray(tr.data.todense() if hasattr(tr.data, "todense") else tr.values)


def _otf2_print_events(anchor: Path) -> int:
    """Events otf2-print lists (one line each, after the events header)."""
    done = subprocess.run(["otf2-print", str(anchor)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"otf2-print {anchor} exited {done.returncode}: {done.stderr[-2000:]}"
    body = done.stdout.split("=== Events", 1)[1].split("\n")[3:]
    return sum(1 for line in body if re.match(r"^[A-Z_]+\s+\d+\s+\d+", line))


def _python_events(anchor: Path) -> int:
    """Events the OTF2 Python bindings (the library perfkit's reader builds on) read."""
    import otf2

    with otf2.reader.open(str(anchor)) as trace:
        return sum(1 for _ in trace.events)


def _times_by_call(ds) -> dict[tuple[int, str], float]:
    """Time [s] per (rank, call) with its waits added back (w_, r_, b_ rows into their call); Compute as is."""
    prof = ds["profile"].isel(run=0).sel(metric="time")
    table = prof.fillna(0.0).groupby(prof["call"]).sum().transpose("rank", "call")
    return {(int(r), str(c)): float(table.sel(rank=r, call=c)) for r in table["rank"].values
            for c in table["call"].values}


def _time_problems(trace_ds, profile_ds) -> list[str]:
    """(rank, call) whose trace time is off the profile's by more than 1 % or 1 ms."""
    got, want = _times_by_call(trace_ds), _times_by_call(profile_ds)
    out = []
    for key in sorted(set(got) | set(want)):
        if key[1] == "MPI_Finalize":
            continue  # MPI_Finalize: the profile stops at its start, the trace holds it
        a, b = got.get(key, 0.0), want.get(key, 0.0)
        if abs(a - b) > max(TIME_REL * abs(b), TIME_FLOOR):
            out.append(f"rank {key[0]} {key[1]}: trace {a:.6f} s, profile {b:.6f} s")
    return out


# ---------- ping-pong: exact bytes and counts ----------

@pytest.fixture(scope="module")
def openmpi_pingpong(tmp_path_factory) -> tuple[Path, Path]:
    return _pingpong(tmp_path_factory.mktemp("pingpong"), "mpicc", "mpirun", 3)


def test_pingpong_bytes_and_counts_are_the_programs(openmpi_pingpong):
    _, archive = openmpi_pingpong
    ds = perfkit.open_profile(archive)
    size, count = _pingpong_truth(3)
    np.testing.assert_array_equal(_traffic(ds, "bytes"), size)
    np.testing.assert_array_equal(_traffic(ds, "count"), count)
    calls = ds["profile"].isel(run=0).sel(metric="calls")
    assert float(calls.sel(rank=0, function="MPI_Send")) == REPS * len(SIZES)
    assert float(calls.sel(rank=1, function="MPI_Isend")) == REPS * len(SIZES)
    assert float(calls.sel(rank=1, function="MPI_Wait")) == 2 * REPS * len(SIZES)
    assert float(calls.sel(rank=2, function="MPI_Allreduce")) == 1
    sent = ds["profile"].isel(run=0).sel(metric="bytes_sent", function="MPI_Allreduce").values
    np.testing.assert_array_equal(sent, [8, 8, 8])  # one double each way, from MpiCollectiveEnd
    assert read_warnings(ds) == []


def test_pingpong_trace_times_agree_with_the_profile(openmpi_pingpong):
    output, archive = openmpi_pingpong
    bad = _time_problems(perfkit.open_profile(archive), perfkit.open_profile(output))
    assert not bad, bad


def test_otf2_print_reads_every_event(openmpi_pingpong):
    _, archive = openmpi_pingpong
    if shutil.which("otf2-print") is None:
        pytest.skip("otf2-print not on PATH (Debian: apt install otf2-tools)")
    anchor = archive / "traces.otf2"
    summary = trace_summary(archive)
    assert summary.ranks == 3 and summary.dropped == 0
    assert _otf2_print_events(anchor) == _python_events(anchor) == summary.events
    # Enter and Leave of the 4 x REPS sends and receives and waits, the messages, and more
    assert summary.events > 3 * 2 * REPS * len(SIZES) * 2


def test_small_buffer_is_flushed_and_loses_nothing(tmp_path):
    """A buffer of 0.5 MiB per rank (two 256 KiB chunks) for 1-2 MB of events per rank: each rank flushes at
    least once per buffer its events file holds, and nothing is dropped."""
    exe = tmp_path / "pingpong"
    subprocess.run(["mpicc", "-O2", str(PROGRAMS / "pingpong.c"), "-o", str(exe)], check=True)
    reps = 3000
    result = collect(mpirun_command(2, [str(exe), str(reps)]), tmp_path / "pp.mpinside", timeout=240, trace=True,
                     trace_buffer=0.5)
    assert result.returncode == 0 and result.trace is not None, result.message
    summary = trace_summary(result.trace)
    assert summary.dropped == 0, result.message
    written = np.array([(result.trace / "traces" / f"{r}.evt").stat().st_size for r in range(2)])
    assert (written > 2**19).all()  # more than the buffer
    assert (summary.flushes_per_rank >= written // 2**19).all(), (summary.flushes_per_rank, written)
    assert "buffer flushes" in result.message
    ds = perfkit.open_profile(result.trace)
    np.testing.assert_array_equal(_traffic(ds, "count"), [[0, reps * len(SIZES)], [reps * len(SIZES), 0]])
    np.testing.assert_array_equal(_traffic(ds, "bytes"), [[0, reps * sum(SIZES)], [reps * sum(SIZES), 0]])


@pytest.mark.skipif(NO_MPICH is not None, reason=f"MPICH: {NO_MPICH}")
def test_mpich_pingpong(tmp_path, monkeypatch):
    monkeypatch.setenv("MPICC", "mpicc.mpich")
    monkeypatch.setenv("MPIFORT", "mpifort.mpich")
    output, archive = _pingpong(tmp_path, "mpicc.mpich", "mpiexec.mpich", 3)
    ds = perfkit.open_profile(archive)
    size, count = _pingpong_truth(3)
    np.testing.assert_array_equal(_traffic(ds, "bytes"), size)
    np.testing.assert_array_equal(_traffic(ds, "count"), count)
    assert not _time_problems(ds, perfkit.open_profile(output))
    if shutil.which("otf2-print"):
        assert _otf2_print_events(archive / "traces.otf2") == trace_summary(archive).events


def test_without_trace_the_library_does_not_link_otf2():
    def needed(library: Path) -> str:
        return subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout

    if shutil.which("readelf") is None:
        pytest.skip("readelf not on PATH (Debian: apt install binutils)")
    plain, traced = build_library(), build_library(trace=True)
    assert plain != traced
    otf2 = re.compile(r"\[lib(otf2|open-trace-format2)\.so")  # Debian names the library open-trace-format2
    assert not otf2.search(needed(plain))
    assert otf2.search(needed(traced))


def test_coverage_program_communicators_and_persistent_requests(tmp_path):
    """programs/coverage.c (persistent, non-blocking, probed and any-source messages, collectives, a
    split communicator): the trace's matrices and per-call bytes are the profile's (checked against the
    program in test_collector.py), and the split's two pairs are two communicators, in world ranks."""
    exe = tmp_path / "coverage"
    subprocess.run(["mpicc", "-O2", str(PROGRAMS / "coverage.c"), "-o", str(exe)], check=True)
    result = collect(mpirun_command(4, [str(exe)]), tmp_path / "coverage.mpinside", slt=True, collective_wait=True,
                     matrices=True, timeout=120, trace=True)
    assert result.returncode == 0 and result.trace is not None, result.message
    trace, profile = perfkit.open_profile(result.trace), perfkit.open_profile(result.output)
    assert read_warnings(trace) == []
    for q in ("bytes", "count"):
        np.testing.assert_array_equal(_traffic(trace, q), _traffic(profile, q))
    for metric in ("bytes_sent", "bytes_recv"):  # collectives' bytes included (messages: the matrices above)
        # per rank: the profile counts a persistent send under its *_init call and a receive under the call
        # that posted it, the trace where the message event is (MPI_Start, the completing Wait)
        totals = [ds["profile"].isel(run=0).sel(metric=metric).fillna(0).sum("function").values
                  for ds in (trace, profile)]
        np.testing.assert_array_equal(*totals, err_msg=metric)
    assert not _time_problems(trace, profile)
    import otf2

    with otf2.reader.open(str(result.trace / "traces.otf2")) as archive:
        groups = {str(c.name): sorted(int(m) if not hasattr(m, "_ref") else m._ref for m in c.group.members)
                  for c in archive.definitions.comms}
    assert groups["MPI_COMM_WORLD"] == [0, 1, 2, 3]
    assert sorted(v for k, v in groups.items() if k.startswith("MPI communicator")) == [[0, 1], [2, 3]]


def _splits_truth(path: Path, nranks: int) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """programs/splits.c's communicators of more than one member (world ranks in their rank order) and its
    bytes and messages sender -> receiver (one message per ring edge and communicator)."""
    comms, size, count = [], np.zeros((nranks, nranks)), np.zeros((nranks, nranks))
    for line in path.read_text().splitlines():
        kind, *values = line.split()
        if kind == "comm":
            members = [int(v) for v in values]
            comms.append(members)
            np.add.at(count, (members, np.roll(members, -1)), 1)
        else:
            size[int(values[0]), int(values[1])] = float(values[2])
    return comms, size, count


def _trace_comms(archive: Path) -> tuple[list[list[int]], int]:
    """The archive's communicators beyond MPI_COMM_WORLD and MPI_COMM_SELF (world ranks in their rank order,
    those of more than one member) and how many it defines (one per rank alone included)."""
    import otf2

    with otf2.reader.open(str(archive / "traces.otf2")) as trace:
        groups = [[int(m) if not hasattr(m, "_ref") else m._ref for m in c.group.members]
                  for c in trace.definitions.comms if str(c.name).startswith("MPI communicator")]
    return [g for g in groups if len(g) > 1], len(groups)


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_split_communicators_are_defined_once_with_their_members(mpi, tmp_path, monkeypatch):
    """programs/splits.c on 13 ranks (odd: halves of 6 and 7): duplicates of the world, its halves in reversed
    order (each half's leader its highest world rank), parities, a split of a split, a communicator per rank.
    Each communicator is defined once with its members in its rank order, and every message of its rings is
    mapped back to the world ranks the program says (bytes and counts exact)."""
    if mpi == "mpich":
        if NO_MPICH is not None:
            pytest.skip(f"MPICH: {NO_MPICH}")
        monkeypatch.setenv("MPICC", "mpicc.mpich")
        monkeypatch.setenv("MPIFORT", "mpifort.mpich")
    cc, launcher, nranks = ("mpicc", "mpirun", 13) if mpi == "openmpi" else ("mpicc.mpich", "mpiexec.mpich", 13)
    exe, truth_file = tmp_path / "splits", tmp_path / "truth.txt"
    subprocess.run([cc, "-O2", str(PROGRAMS / "splits.c"), "-o", str(exe)], check=True)
    launch = mpirun_command(nranks, [str(exe), str(truth_file), "-", "3"], launcher=launcher)
    result = collect(launch, tmp_path / "splits.mpinside", timeout=240, trace=True)
    assert result.returncode == 0 and result.trace is not None, result.message
    comms, size, count = _splits_truth(truth_file, nranks)
    got, defined = _trace_comms(result.trace)
    assert sorted(got) == sorted(comms)
    assert defined == len(comms) + nranks  # and one per rank alone
    ds = perfkit.open_profile(result.trace)
    np.testing.assert_array_equal(_traffic(ds, "bytes"), size)
    np.testing.assert_array_equal(_traffic(ds, "count"), count)
    assert read_warnings(ds) == []


# ---------- the lab: wait states against the truth ----------

LAB_CASES = [(s, n) for s in CONFIG for n in (4, 8)]
_RUNS: dict[tuple, tuple[lab.LabRun, float]] = {}


@pytest.fixture
def traced_run(request, tmp_path_factory):
    """The lab run of one case under --trace (slt, collective wait and matrices on), its trace read back and
    the scheduling noise it ran in [s per step]."""
    scenario, nprocs = request.param
    if missing_tools("fortran"):
        pytest.skip(f"MPI tools: {missing_tools('fortran')}")
    key = (scenario, nprocs)
    if key not in _RUNS:
        workdir = tmp_path_factory.mktemp(f"trace-{scenario}-np{nprocs}")
        _RUNS[key] = with_noise(lambda: lab.run(scenario, nprocs, workdir=workdir, timeout=120, trace=True,
                                                **CONFIG[scenario]), exchange_delay)
    run, noise = _RUNS[key]
    assert run.trace is not None and run.profile is not None, f"{scenario} at {nprocs} ranks: {run.message}"
    return run, perfkit.open_profile(run.trace), noise


def _timed(run: lab.LabRun, noise: float) -> None:
    if run.scenario in TIMING_UNKNOWN:
        pytest.skip(TIMING_UNKNOWN[run.scenario])
    skip_when_noisy(noise, WAIT_FLOOR_PER_STEP)


def _wait_off(run: lab.LabRun, measured, name: str, truth_ds) -> list[str]:
    truth = truth_ds[name]
    floor = WAIT_FLOOR_PER_STEP * int(run.params["steps"])
    out = []
    for f in sorted(set(map(str, truth["function"].values)) | set(map(str, measured[name]["function"].values))):
        t = truth.sel(function=f).values if f in truth["function"] else np.zeros(run.nprocs)
        got = measured[name].sel(function=f).values if f in measured[name]["function"] else np.zeros(run.nprocs)
        for r in range(run.nprocs):
            if not math.isnan(t[r]) and lab.deviation(float(got[r]), float(t[r]), WAIT_REL, floor) > 0:
                out.append(f"{name} {f} rank {r}: trace {got[r]:.4f} s, truth {t[r]:.4f} s")
    return out


def _wait_problems(run: lab.LabRun, measured, name: str) -> list[str]:
    """Off both the realised truth and the prescribed one (see tests/collect/test_lab_measured.py)."""
    realised = _wait_off(run, measured, name, run.realised)
    return [p for p in realised if p.split(":")[0] in {q.split(":")[0] for q in _wait_off(run, measured, name,
                                                                                           run.truth)}]


IDS = [f"{s}-np{n}" for s, n in LAB_CASES]


@pytest.mark.parametrize("traced_run", LAB_CASES, ids=IDS, indirect=True)
def test_late_sender_from_the_trace(traced_run):
    run, ds, noise = traced_run
    _timed(run, noise)
    bad = _wait_problems(run, lab.measured(ds), "send_late")
    assert not bad, f"{run.scenario} at {run.nprocs} ranks: {bad}"


@pytest.mark.parametrize("traced_run", LAB_CASES, ids=IDS, indirect=True)
def test_collective_wait_from_the_trace(traced_run):
    run, ds, noise = traced_run
    _timed(run, noise)
    bad = _wait_problems(run, lab.measured(ds), "collective_wait")
    assert not bad, f"{run.scenario} at {run.nprocs} ranks: {bad}"


@pytest.mark.parametrize("traced_run", LAB_CASES, ids=IDS, indirect=True)
def test_no_late_receiver_in_the_lab(traced_run):
    """No lab program sends to a rank that has not posted its receive (its sends are eager or non-blocking)."""
    run, ds, noise = traced_run
    _timed(run, noise)
    late = ds["wait_states"].isel(run=0).sel(state="late_receiver").values
    assert (late <= WAIT_FLOOR_PER_STEP * int(run.params["steps"])).all(), late


@pytest.mark.parametrize("traced_run", LAB_CASES, ids=IDS, indirect=True)
def test_calls_and_matrices_exact(traced_run):
    run, ds, _ = traced_run
    m = lab.measured(ds)
    truth = run.truth["calls"]
    have = set(map(str, m["calls"]["function"].values)) - OPTIONAL_CALLS
    assert have <= set(map(str, truth["function"].values)), have
    for f in sorted(have):
        np.testing.assert_array_equal(m["calls"].sel(function=f).values, truth.sel(function=f).values,
                                      err_msg=f"{run.scenario} at {run.nprocs} ranks: calls of {f}")
    for q in ("bytes", "count"):
        np.testing.assert_array_equal(m[f"traffic_{q}"].values, run.truth[f"traffic_{q}"].values,
                                      err_msg=f"{run.scenario} at {run.nprocs} ranks: traffic {q}")


@pytest.mark.parametrize("traced_run", LAB_CASES, ids=IDS, indirect=True)
def test_trace_times_agree_with_the_profile_of_the_run(traced_run):
    run, ds, _ = traced_run
    bad = _time_problems(ds, run.profile)
    assert not bad, f"{run.scenario} at {run.nprocs} ranks: {bad}"


# ---------- diagnosis: what the profile cannot tell, the trace names ----------

def _cannot_tell(table) -> bool:
    return bool(table["text"].str.contains("cannot tell").any() or table["title"].str.contains("cannot tell").any())


@pytest.mark.parametrize("traced_run", [("dynamic_imbalance", 4), ("dynamic_imbalance", 8)],
                         ids=["np4", "np8"], indirect=True)
def test_diagnose_names_dynamic_imbalance_and_the_late_rank_of_each_step(traced_run):
    run, ds, noise = traced_run
    _timed(run, noise)
    steps = int(run.params["steps"])
    late = ds["phases"].isel(run=0).sel(phase_stat="late_rank").to_pandas()
    waitall = late[late.index.str.startswith("MPI_Waitall#")]
    assert waitall.astype(int).tolist() == [k % run.nprocs for k in range(steps)]
    table = perfkit.diagnose(ds)
    assert "dynamic_imbalance" in set(table["category"])
    (text,) = table.loc[table["category"] == "dynamic_imbalance", "text"]
    assert "MPI_Waitall#0: rank 0, #1: rank 1, #2: rank 2, #3: rank 3" in text
    assert "dynamic imbalance" in table.loc[table["category"] == "efficiency", "title"].item()
    assert not _cannot_tell(table)
    assert _cannot_tell(perfkit.diagnose(run.profile))


@pytest.mark.parametrize("traced_run", [("pipeline", 4), ("pipeline", 8)], ids=["np4", "np8"], indirect=True)
def test_diagnose_names_serialisation_in_the_pipeline(traced_run):
    run, ds, noise = traced_run
    _timed(run, noise)
    table = perfkit.diagnose(ds)
    assert "the trace shows serialisation" in table.loc[table["category"] == "efficiency", "title"].item()
    (text,) = table.loc[table["category"] == "serialisation", "text"]
    assert " -> ".join(map(str, [*range(run.nprocs), 0])) in text
    assert not _cannot_tell(table)
    assert _cannot_tell(perfkit.diagnose(run.profile))


# ---------- MPICH, C and Fortran ----------

@pytest.mark.skipif(NO_MPICH is not None, reason=f"MPICH: {NO_MPICH}")
@pytest.mark.parametrize("scenario", ["static_imbalance", "fortran_halo"])
def test_mpich_lab_trace(scenario, tmp_path, monkeypatch):
    """MPICH-built lab programs (C and Fortran) under --trace: calls and matrices exact, waits against the truth."""
    monkeypatch.setenv("MPICC", "mpicc.mpich")
    monkeypatch.setenv("MPIFORT", "mpifort.mpich")
    run, noise = with_noise(lambda: lab.run(scenario, 4, workdir=tmp_path, timeout=120, trace=True,
                                            launcher="mpiexec.mpich", **CONFIG[scenario]), exchange_delay)
    assert run.trace is not None and run.profile is not None, run.message
    ds = perfkit.open_profile(run.trace)
    m = lab.measured(ds)
    truth = run.truth["calls"]
    for f in sorted(set(map(str, m["calls"]["function"].values)) - OPTIONAL_CALLS):
        np.testing.assert_array_equal(m["calls"].sel(function=f).values, truth.sel(function=f).values, err_msg=f)
    for q in ("bytes", "count"):
        np.testing.assert_array_equal(m[f"traffic_{q}"].values, run.truth[f"traffic_{q}"].values)
    assert not _time_problems(ds, run.profile)
    if shutil.which("otf2-print"):
        assert _otf2_print_events(run.trace / "traces.otf2") == trace_summary(run.trace).events
    skip_when_noisy(noise, WAIT_FLOOR_PER_STEP)
    bad = _wait_problems(run, m, "send_late") + _wait_problems(run, m, "collective_wait")
    assert not bad, bad
