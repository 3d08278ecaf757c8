"""Collector overhead: the lab's balanced halo exchange (1 ms compute steps) with and without the collector.

Each configuration (uninstrumented; basic; --slt; --collective-wait; --matrices; all three) is run
in this one process on the same program and parameters. A launch's wall time includes mpirun's
start-up and MPI_Init, so the time of the steps is the wall time of a run with STEPS steps minus
that of a run with no steps, the configurations interleaved, the median over REPEATS rounds; the
overhead is its ratio to the uninstrumented one's. Run: ``python benchmarks/bench_collector.py [--nprocs N]``.

On the testbed (root only; skipped elsewhere): 8 nodes x 2 cores joined by 200 Mbit/s links, the lab's
exchange program on a shuffled 2-D stencil. Per configuration (uninstrumented, basic, --slt,
--collective-wait, --matrices, all) the program's own loop time, and ``MPI_Init``'s time (the slowest
rank's, from the profile's ``MPI_Init`` row; uninstrumented, from a program that times its own
``MPI_Init``); Open MPI and MPICH, configurations alternated and rotated each round, the 1-minute
load average with every run. Writes ``results/collector_testbed.json``.
``python benchmarks/bench_collector.py --testbed-only [--mpi openmpi,mpich] [--repeats 3]``.

Tracing (``--trace-only`` runs this section alone): the halo exchange with no compute (every step five MPI
calls and four messages, the most events per second the lab makes) with ``--trace`` against the same
options without it (basic, and all three), and with a 0.5 MiB buffer, flushed during the run. Measured: the
slowest rank's time from the end of ``MPI_Init`` to ``MPI_Finalize``, from the run's own profile (no launch
or start-up in it), over TRACE_REPEATS interleaved rounds; the overhead against the untraced run of the
same options (medians, and minima: the runs least disturbed by other work), the cost per event, the events
and bytes written per rank. Writes
``results/collector_trace.json``.

Scale (``--scale-only``): ``tests/collect/programs/alltoallv.c`` (MPI_Alltoallv and MPI_Alltoallw with a count per
pair, an Allgather, a ring of messages, a broadcast; rank 0 receives from every other rank, so its partners are
N - 1) at 64, 128 and 256
ranks of one MPI on this machine (MPICH by default, or Open MPI), with --matrices:
uninstrumented, under the collector, and under the collector as it was before partner tables and output
written in parallel (built from git, ``REFERENCE_COMMIT``: rank 0 gathered every rank's records and wrote the
file alone). Measured
on rank 0 by the program around its MPI_Finalize: the call's time and the growth of its peak resident memory
(VmHWM); by the collector itself (the output's trailer): its time in MPI_Finalize and rank 0's peak before and
after. The collector's output is checked against the program's truth at every size (every pair's bytes,
point to point and collective_bytes). Writes ``results/collector_scale.json``, each MPI's results beside the
other's.
``python benchmarks/bench_collector.py --scale-only [--scale-mpi mpich|openmpi] [--scale-ranks 64,128,256]``.
Open MPI yields while polling (``mpi_yield_when_idle``) and its mpirun takes a rank's exit with status 0 for
the end it is (``orte_allowed_exit_without_sync``): see docs/collector.md, *At scale*, for why.

Trace at scale (``--trace-scale-only``): ``tests/collect/programs/splits.c`` (TRACE_SCALE_DUPS duplicates of
MPI_COMM_WORLD, its halves, its parities, each half's parities, a communicator per rank, a ring on each) with
``--trace`` at the same rank counts, under the collector and under TRACE_REFERENCE_COMMIT's (rank 0 gathered every
rank's communicators, each once per member). Measured on rank 0 by the program: its peak resident memory during
MPI_Finalize (VmHWM reset just before the call) over its resident memory before it, and the call's time; the
trace's communicators and bytes matrix are checked against the program's truth. Writes
``results/collector_trace_scale.json``, each MPI's results beside the other's.
``python benchmarks/bench_collector.py --trace-scale-only [--scale-mpi mpich|openmpi] [--scale-ranks ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from perfkit.collect import lab
from perfkit.collect.build import CFLAGS, build_library, compiler, otf2_flags
from perfkit.collect.launch import with_environment
from perfkit.collect.raw import read_raw

RESULTS = Path(__file__).with_name("results")
STEPS = 2000
STEP_SECONDS = 0.001
REPEATS = 5
CONFIGS = {
    "basic": {"slt": False, "collective_wait": False, "matrices": False},
    "basic, no CPU": {"slt": False, "collective_wait": False, "matrices": False, "cpu": False},
    "slt": {"slt": True, "collective_wait": False, "matrices": False},
    "collective_wait": {"slt": False, "collective_wait": True, "matrices": False},
    "matrices": {"slt": False, "collective_wait": False, "matrices": True},
    "all": {"slt": True, "collective_wait": True, "matrices": True},
}


def _wall(nprocs: int, steps: int, options: dict | None, workdir: Path) -> float:
    """Wall time [s] of one launch (uninstrumented when ``options`` is None)."""
    if options is None:
        run = lab.run_uninstrumented("balanced", nprocs, steps=steps, step_seconds=STEP_SECONDS)
    else:
        run = lab.run("balanced", nprocs, steps=steps, step_seconds=STEP_SECONDS, workdir=workdir, **options)
    if run.returncode != 0:
        raise RuntimeError(f"lab run failed: {getattr(run, 'message', '')}")
    return run.wall_seconds


def lab_section(nprocs: int, out: Path) -> dict:
    """Steps' time of each configuration on this machine (no testbed) and its overhead [%]."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        lab.run("balanced", nprocs, steps=1, step_seconds=STEP_SECONDS, workdir=work)  # build once
        configs = {"uninstrumented": None, **CONFIGS}
        samples: dict[str, list[float]] = {name: [] for name in configs}
        for _ in range(REPEATS):  # configurations interleaved, so a change of load hits them all alike
            for name, options in configs.items():
                samples[name].append(_wall(nprocs, STEPS, options, work) - _wall(nprocs, 0, options, work))
        steps_time = {name: statistics.median(values) for name, values in samples.items()}
    reference = steps_time["uninstrumented"]
    result = {
        "program": f"lab balanced halo exchange, {nprocs} ranks, {STEPS} steps of {STEP_SECONDS * 1e3:g} ms",
        "repeats": REPEATS,
        "steps_seconds": {k: round(v, 4) for k, v in steps_time.items()},
        "overhead_percent": {k: round(100 * (v / reference - 1), 2) for k, v in steps_time.items()
                             if k != "uninstrumented"},
    }
    print(json.dumps(result, indent=2))
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


TRACE_STEPS = 10000
TRACE_REPEATS = 15
TRACE_CONFIGS = {
    "basic": CONFIGS["basic"],
    "basic, no CPU": CONFIGS["basic, no CPU"],
    "basic+trace": {**CONFIGS["basic"], "trace": True},
    "basic+trace, 0.5 MiB buffer": {**CONFIGS["basic"], "trace": True, "trace_buffer": 0.5},
    "all": CONFIGS["all"],
    "all+trace": {**CONFIGS["all"], "trace": True},
}
#: Each traced configuration against the untraced run of the same options; CPU measurement against none.
TRACE_REFERENCE = {"basic": "basic, no CPU", "basic+trace": "basic", "basic+trace, 0.5 MiB buffer": "basic",
                   "all+trace": "all"}


def _traced_once(nprocs: int, options: dict, work: Path) -> tuple[float, dict | None]:
    """The run's time from the end of MPI_Init to MPI_Finalize [s] (slowest rank, from its profile: no
    launch or start-up in it), and what its trace holds (None untraced)."""
    import perfkit
    from perfkit.collect import collect
    from perfkit.collect.trace import trace_summary

    launch = lab.launch_command("balanced", nprocs, steps=TRACE_STEPS, step_seconds=0.0)
    result = collect(launch, work / "trace-bench.mpinside", timeout=600, overwrite=True, **options)
    if result.returncode != 0 or result.output is None:
        raise RuntimeError(f"lab run failed: {result.message}")
    profile = perfkit.open_profile(result.output)
    time = profile["profile"].isel(run=0).sel(metric="time")
    loop = float((time.sum("function") - time.sel(function=[f for f in map(str, time["function"].values)
                                                            if f.endswith(("MPI_Init", "MPI_Init_thread"))])
                  .sum("function")).max())
    if result.trace is None:
        return loop, None
    summary = trace_summary(result.trace)
    files = sorted((result.trace / "traces").glob("*.evt"))
    return loop, {"events_per_rank": round(summary.events / summary.ranks),
                  "event_file_bytes_per_rank": round(sum(f.stat().st_size for f in files) / len(files)),
                  "buffer_flushes_per_rank": summary.flushes / summary.ranks, "events_dropped": summary.dropped}


def trace_section(nprocs: int, out: Path) -> dict:
    """Loop time with and without --trace (same options), the overhead [%] and cost per event [us]."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        loops: dict[str, list[float]] = {name: [] for name in TRACE_CONFIGS}
        sizes: dict[str, dict] = {}
        load = []
        for _ in range(TRACE_REPEATS):  # interleaved, so a change of load hits every configuration alike
            for name, options in TRACE_CONFIGS.items():
                loop, size = _traced_once(nprocs, options, work)
                loops[name].append(loop)
                if size:
                    sizes[name] = size
            load.append(round(os.getloadavg()[0], 1))
    med = {k: statistics.median(v) for k, v in loops.items()}
    result = {
        "program": f"lab balanced halo exchange, {nprocs} ranks, {TRACE_STEPS} steps of no compute (each step: "
                   "2 MPI_Irecv, 2 MPI_Isend, 1 MPI_Waitall)",
        "measure": "slowest rank's time from the end of MPI_Init to MPI_Finalize, from the run's profile [s]",
        "repeats": TRACE_REPEATS,
        "load_average_1min": load,
        "loop_seconds": {k: round(v, 4) for k, v in med.items()},
        "loop_seconds_min": {k: round(min(v), 4) for k, v in loops.items()},
        "trace_overhead_percent_of_minima": {k: round(100 * (min(loops[k]) / min(loops[ref]) - 1), 2)
                                             for k, ref in TRACE_REFERENCE.items()},
        "trace_overhead_percent": {k: round(100 * (med[k] / med[ref] - 1), 2) for k, ref in TRACE_REFERENCE.items()},
        "trace_us_per_event": {k: round(1e6 * (med[k] - med[ref]) / sizes[k]["events_per_rank"], 3)
                               for k, ref in TRACE_REFERENCE.items() if k in sizes},
        "cpu_us_per_call": round(1e6 * (med["basic"] - med["basic, no CPU"]) / (5 * TRACE_STEPS), 3),
        "trace": sizes,
        "samples_seconds": {k: [round(x, 4) for x in v] for k, v in loops.items()},
    }
    print(json.dumps(result, indent=2))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


# ---------- on the testbed: 8 nodes x 2 cores, 200 Mbit/s links, the shuffled 2-D halo exchange ----------

TB_NODES, TB_CORES, TB_BANDWIDTH = 8, 2, "200mbit"
TB_STEPS, TB_STEP_SECONDS, TB_BYTES = 30, 0.01, 200_000
TB_REPEATS = 3
TB_CONFIGS = {"uninstrumented": None, "basic": [], "basic, no CPU": ["--no-cpu"], "slt": ["--slt"],
              "collective_wait": ["--collective-wait"],
              "matrices": ["--matrices"], "all": ["--slt", "--collective-wait", "--matrices"]}
TB_COMPILERS = {"openmpi": "mpicc", "mpich": "mpicc.mpich"}
#: a program that times its own MPI_Init: the uninstrumented reference of the profile's MPI_Init row
INIT_TIMER_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    double t0 = now(), d, mx, sum;
    int rank, size;
    MPI_Init(&argc, &argv);
    d = now() - t0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Reduce(&d, &mx, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&d, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("init_s max %.6f mean %.6f\n", mx, sum / size);
    MPI_Finalize();
    return 0;
}
"""


def _with_mpicc(mpi: str, build):
    """``build()`` with ``$MPICC`` set to ``mpi``'s compiler wrapper."""
    old = os.environ.get("MPICC")
    os.environ["MPICC"] = TB_COMPILERS[mpi]
    try:
        return build()
    finally:
        if old is None:
            os.environ.pop("MPICC", None)
        else:
            os.environ["MPICC"] = old


def _init_timer(mpi: str, work: Path) -> Path:
    """The MPI_Init timer compiled with ``mpi``'s ``mpicc``."""
    source, exe = work / "init_timer.c", work / f"init_timer_{mpi}"
    source.write_text(INIT_TIMER_C)
    subprocess.run([TB_COMPILERS[mpi], "-O2", "-o", str(exe), str(source)], check=True)
    return exe


def _tb_launch(mpi: str, program: list[str]) -> list[str]:
    nprocs = str(TB_NODES * TB_CORES)
    return ["mpirun", "-np", nprocs, *program] if mpi == "openmpi" else ["mpiexec.hydra", "-n", nprocs, *program]


def _tb_once(tb, mpi: str, config: str, exchange: list[str], timer: Path, work: Path) -> dict:
    """One launch on the testbed: loop time [s], MPI_Init time [s] (max and mean over ranks), wall time [s],
    the clock offsets reported, and the load average before it."""
    from perfkit.io.open import open_profile

    options = TB_CONFIGS.get(config)
    perfkit = str(Path(sys.executable).with_name("perfkit"))
    out = work / f"{mpi}-{config}.mpinside"
    out.unlink(missing_ok=True)
    if config == "init_uninstrumented":
        command = _tb_launch(mpi, [str(timer)])
    elif options is None:
        command = _tb_launch(mpi, exchange)
    else:
        command = [perfkit, "collect", *options, "-o", str(out), "--", *_tb_launch(mpi, exchange)]
    log = work / "run.log"
    load = os.getloadavg()[0]
    with open(log, "w") as fh:
        report = tb.run(["sh", "-c", 'exec "$@" 2>&1', "sh", *command], env={"MPICC": TB_COMPILERS[mpi]},
                        timeout=600, stdout=fh)
    text = log.read_text()
    if report["exit_status"] != 0:
        raise RuntimeError(f"{mpi} {config} failed (status {report['exit_status']}):\n{text[-3000:]}")
    row: dict = {"load_1min": round(load, 2), "wall_s": round(report["wall_s"], 4)}
    if config == "init_uninstrumented":
        m = re.search(r"^init_s max ([0-9.]+) mean ([0-9.]+)$", text, re.M)
        row.update(init_max_s=float(m.group(1)), init_mean_s=float(m.group(2)))
        return row
    row["loop_s"] = float(re.search(r"^exchange: loop_s ([0-9.]+)$", text, re.M).group(1))
    if options is not None:
        init = open_profile(out)["profile"].isel(run=0).sel(function="MPI_Init", metric="time").values
        row.update(init_max_s=round(float(init.max()), 6), init_mean_s=round(float(init.mean()), 6))
        clock = re.search(r"clocks: offsets between nodes measured up to (\S+) s \(each within (\S+) s of the "
                          r"truth\), drift over the run (\S+) s", text)
        if clock:
            row.update(clock_offset_s=float(clock.group(1)), clock_bound_s=float(clock.group(2)),
                       clock_drift_s=float(clock.group(3)))
    return row


def _summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4), "max": round(max(values), 4),
            "n": len(values)}


def testbed_section(mpis: list[str], repeats: int, out: Path) -> dict | None:
    """Loop time and MPI_Init time of each configuration on the testbed, the configurations (and the MPIs)
    alternated, their order rotated each round; None (with the reason printed) when no testbed can be built."""
    from perfkit.collect.lab import patterns
    from perfkit.collect.lab.build import exchange_binary
    from perfkit.collect.testbed import Testbed, why_unavailable

    why = why_unavailable()
    if why:
        print(f"testbed section skipped: {why}")
        return None
    configs = [*TB_CONFIGS, "init_uninstrumented"]
    samples: dict[str, dict[str, list[dict]]] = {m: {c: [] for c in configs} for m in mpis}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pattern = patterns.write_pattern(patterns.shuffled(patterns.stencil((4, 4), TB_BYTES), seed=1),
                                         work / "pattern.txt")
        exes = {m: _with_mpicc(m, exchange_binary) for m in mpis}
        timers = {m: _init_timer(m, work) for m in mpis}
        with Testbed(TB_NODES, TB_CORES, bandwidth=TB_BANDWIDTH) as tb:
            for m in mpis:  # build the collector for each MPI before timing anything
                _tb_once(tb, m, "basic", [str(exes[m]), str(pattern), "steps=1", "step=0"], timers[m], work)
            for r in range(repeats):
                for m in mpis:
                    for config in configs[r % len(configs):] + configs[:r % len(configs)]:
                        exchange = [str(exes[m]), str(pattern), f"steps={TB_STEPS}", f"step={TB_STEP_SECONDS}"]
                        row = _tb_once(tb, m, config, exchange, timers[m], work)
                        samples[m][config].append(row)
                        print(f"round {r} {m:8s} {config:20s} {json.dumps(row)}", flush=True)
    result: dict = {
        "program": f"lab exchange, shuffled 2-D stencil (4x4) of {TB_BYTES} B halos, {TB_STEPS} steps of "
                   f"{TB_STEP_SECONDS * 1e3:g} ms compute",
        "testbed": {"nodes": TB_NODES, "cores": TB_CORES, "bandwidth": TB_BANDWIDTH, "machine_cores": os.cpu_count()},
        "repeats": repeats, "mpis": {}}
    for m in mpis:
        loop = {c: _summary([s["loop_s"] for s in samples[m][c]]) for c in TB_CONFIGS}
        init = {c: _summary([s["init_max_s"] for s in samples[m][c]]) for c in configs if c not in
                ("uninstrumented",)}
        ref_loop, ref_init = loop["uninstrumented"]["median"], init["init_uninstrumented"]["median"]
        result["mpis"][m] = {
            "loop_s": loop,
            "loop_overhead_percent": {c: round(100 * (v["median"] / ref_loop - 1), 1) for c, v in loop.items()
                                      if c != "uninstrumented"},
            "init_max_s": init,
            "init_added_s": {c: round(v["median"] - ref_init, 3) for c, v in init.items()
                             if c != "init_uninstrumented"},
            "clock_offset_s": [s.get("clock_offset_s") for c in configs for s in samples[m][c]
                               if s.get("clock_offset_s") is not None],
            "load_1min": _summary([s["load_1min"] for c in configs for s in samples[m][c]]),
            "runs": samples[m]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({m: {k: v for k, v in r.items() if k != "runs"} for m, r in result["mpis"].items()}, indent=2))
    return result


#: The collector before partner tables and output written in parallel (the reference of the scale section).
REFERENCE_COMMIT = "f3534a0"
SCALE_RANKS = (64, 128, 256)
SCALE_PROGRAM = Path(__file__).parents[1] / "tests" / "collect" / "programs" / "alltoallv.c"
SCALE_MPIS = {"mpich": ("mpicc.mpich", "mpifort.mpich", ["mpiexec.mpich"]),
              "openmpi": ("mpicc", "mpifort", ["mpirun", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1",
                                              "--mca", "orte_allowed_exit_without_sync", "1",
                                              *(["--allow-run-as-root"] if os.geteuid() == 0 else [])])}


def _reference_library(cc: str, work: Path, commit: str = REFERENCE_COMMIT, trace: bool = False) -> Path | None:
    """The collector library of ``commit`` (its runtime and its generated wrappers; with ``trace``, its OTF2 trace
    too, built as ``build_library(trace=True)`` builds), or None without git."""
    root, ref = Path(__file__).parents[1], work / f"reference-{commit}{'-trace' if trace else ''}"
    ref.mkdir()
    archive = subprocess.run(["git", "archive", commit, "perfkit"], cwd=root, capture_output=True)
    if archive.returncode != 0:
        return None
    subprocess.run(["tar", "-x", "-C", str(ref)], input=archive.stdout, check=True)
    src = ref / "perfkit" / "collect" / "src"
    wrappers = subprocess.run([sys.executable, "-c", "from perfkit.collect.generate import c_source; "
                               "print(c_source(), end='')"], cwd=ref, env={**os.environ, "PYTHONPATH": str(ref)},
                              capture_output=True, text=True, check=True).stdout
    (src / "pk_wrappers.c").write_text(wrappers)
    cflags, ldflags = otf2_flags() if trace else ([], [])
    sources = ("pk_runtime.c", "pk_wrappers.c", *(("pk_trace.c",) if trace else ()))
    for name in sources:
        subprocess.run([cc, *CFLAGS, *(["-DPK_TRACE", *cflags] if trace else []), "-c", name, "-o",
                        name[:-2] + ".o"], cwd=src, check=True, capture_output=True)
    subprocess.run([cc, "-shared", "-o", "libreference.so", *(n[:-2] + ".o" for n in sources), *ldflags, "-lm",
                    "-lpthread"], cwd=src, check=True, capture_output=True)
    return src / "libreference.so"


def _key_values(path: Path) -> dict[str, float]:
    return {k: float(v) for k, v in (line.split() for line in path.read_text().splitlines())}


def _scale_once(launch: list[str], nranks: int, exe: Path, library: Path | None, work: Path) -> dict:
    """One run: rank 0's view of MPI_Finalize, and with the collector, its output checked against the truth."""
    raw, truth_file, fin = work / "raw", work / "truth.txt", work / "finalize.txt"
    for f in (raw, truth_file, fin):
        f.unlink(missing_ok=True)
    command, extra = [*launch, "-np", str(nranks), str(exe), str(truth_file), str(fin)], {}
    if library is not None:
        command, extra = with_environment(command, {"LD_PRELOAD": str(library), "PERFKIT_COLLECT_OUT": str(raw),
                                                    "PERFKIT_COLLECT_MATRICES": "1"})
    start = time.perf_counter()
    subprocess.run(command, env={**os.environ, **extra}, check=True, timeout=1800)
    row = {"wall_s": round(time.perf_counter() - start, 2), "load_1min": os.getloadavg()[0],
           **{f"program_{k}": v for k, v in _key_values(fin).items()}}
    row["program_finalize_growth_kib"] = row["program_peak_after_kib"] - row["program_peak_before_kib"]
    if raw.exists() and raw.read_bytes().startswith(b"perfkit-collect 2"):
        ds = read_raw(raw)
        traffic = ds["traffic"].isel(run=0)
        lines = np.loadtxt(truth_file, dtype=str, ndmin=2)
        exact = True
        for kind, quantity in (("p2p", "bytes"), ("coll", "collective_bytes")):
            want = np.zeros((nranks, nranks))
            mine = lines[lines[:, 0] == kind]
            want[mine[:, 1].astype(int), mine[:, 2].astype(int)] = mine[:, 3].astype(float)
            got = traffic.sel(quantity=quantity).data
            exact &= np.array_equal(got.todense() if hasattr(got, "todense") else np.asarray(got), want)
        row |= {"matches_truth": bool(exact),
                "collector_finalize_s": ds.attrs["collect_finalize_s"],
                "collector_rank0_peak_before_kib": ds.attrs["collect_rank0_peak_before_kib"],
                "collector_rank0_peak_kib": ds.attrs["collect_rank0_peak_kib"]}
        row["collector_finalize_growth_kib"] = row["collector_rank0_peak_kib"] - row["collector_rank0_peak_before_kib"]
    return row


def _write_by_mpi(out: Path, mpi: str, result: dict) -> None:
    """Write ``result`` into ``out`` under ``mpi``, keeping the other MPIs' results the file holds."""
    kept = json.loads(out.read_text()) if out.exists() else {}
    if "mpi" in kept:  # a file of one MPI's results
        kept = {kept["mpi"]: kept}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**kept, mpi: result}, indent=2) + "\n")


def _runs_against_ranks(mpi: str, ranks: list[int], program: Path, once: Callable[..., dict],
                        libraries: Callable[[str, Path], dict[str, Path | None]]) -> dict[str, dict[str, dict]]:
    """``once(launch, n, exe, library, work)``'s row for each rank count ``n`` and each library of
    ``libraries(mpicc, work)`` (None: uninstrumented; a reference that could not be built is left out), ``program``
    compiled with ``mpi``: {library name: {ranks: row}}."""
    cc, fc, launch = SCALE_MPIS[mpi]
    os.environ["MPICC"], os.environ["MPIFORT"] = cc, fc
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        exe = work / program.stem
        subprocess.run([compiler("c")[0], "-O2", str(program), "-o", str(exe)], check=True)
        built = libraries(cc, work)
        runs: dict[str, dict[str, dict]] = {name: {} for name, lib in built.items()
                                            if lib or name == "uninstrumented"}
        for n in ranks:
            for name in runs:
                row = once(launch, n, exe, built[name], work)
                runs[name][str(n)] = row
                print(f"{mpi} {n:5d} ranks {name:15s} {json.dumps(row)}", flush=True)
    return runs


def scale_section(mpi: str, ranks: list[int], out: Path) -> dict:
    """MPI_Finalize's time and rank 0's memory growth in it, against ranks (see the module's docstring)."""
    runs = _runs_against_ranks(mpi, ranks, SCALE_PROGRAM, _scale_once, lambda cc, work: {
        "uninstrumented": None, "collector": build_library(), "reference": _reference_library(cc, work)})
    base = runs["uninstrumented"]
    result = {
        "program": "tests/collect/programs/alltoallv.c: 3 MPI_Alltoallv with 1-11 ints per pair, an Alltoallw, "
                   "an Allgather on a split communicator, a ring of Sendrecv, one Bcast; rank 0 receives from "
                   "every other rank (N - 1 partners)",
        "mpi": mpi, "machine_cores": os.cpu_count(), "reference_commit": REFERENCE_COMMIT,
        "finalize_added_s": {name: {n: round(r["program_finalize_seconds"] - base[n]["program_finalize_seconds"], 3)
                                    for n, r in rows.items()} for name, rows in runs.items()
                             if name != "uninstrumented"},
        "rank0_finalize_growth_kib": {name: {n: r["program_finalize_growth_kib"] for n, r in rows.items()}
                                      for name, rows in runs.items()},
        "runs": runs}
    _write_by_mpi(out, mpi, result)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    return result


#: The collector before communicators were defined by their leaders (rank 0 gathered every rank's communicators).
TRACE_REFERENCE_COMMIT = "5bc4170"
TRACE_SCALE_PROGRAM = SCALE_PROGRAM.with_name("splits.c")
TRACE_SCALE_DUPS = 16


def _trace_truth(path: Path, nranks: int) -> tuple[list[list[int]], np.ndarray]:
    """programs/splits.c's communicators of more than one member and its bytes sender -> receiver."""
    comms, size = [], np.zeros((nranks, nranks))
    for line in path.read_text().splitlines():
        kind, *values = line.split()
        if kind == "comm":
            comms.append([int(v) for v in values])
        else:
            size[int(values[0]), int(values[1])] = float(values[2])
    return comms, size


def _trace_matches(archive: Path, truth_file: Path, nranks: int) -> bool:
    """The trace's communicators (members in rank order) and bytes matrix are the program's."""
    import otf2

    import perfkit

    with otf2.reader.open(str(archive / "traces.otf2")) as trace:
        groups = [[int(m) if not hasattr(m, "_ref") else m._ref for m in c.group.members]
                  for c in trace.definitions.comms if str(c.name).startswith("MPI communicator")]
    comms, size = _trace_truth(truth_file, nranks)
    got = perfkit.open_profile(archive)["traffic"].isel(run=0).sel(quantity="bytes").data
    got = got.todense() if hasattr(got, "todense") else np.asarray(got)
    return sorted(g for g in groups if len(g) > 1) == sorted(comms) and np.array_equal(got, size)


def _trace_scale_once(launch: list[str], nranks: int, exe: Path, library: Path, work: Path) -> dict:
    """One traced run of programs/splits.c: rank 0's view of MPI_Finalize, the trace checked against the truth."""
    truth_file, fin, archive = work / "truth.txt", work / "finalize.txt", work / "trace"
    for f in (truth_file, fin):
        f.unlink(missing_ok=True)
    if archive.exists():
        subprocess.run(["rm", "-rf", str(archive)], check=True)
    command = [*launch, "-np", str(nranks), str(exe), str(truth_file), str(fin), str(TRACE_SCALE_DUPS)]
    command, extra = with_environment(command, {"LD_PRELOAD": str(library), "PERFKIT_COLLECT_OUT": str(work / "raw"),
                                                "PERFKIT_COLLECT_TRACE": str(archive),
                                                "PERFKIT_COLLECT_TRACE_BUFFER_MB": "2"})
    start = time.perf_counter()
    subprocess.run(command, env={**os.environ, **extra}, check=True, timeout=1800)
    values = _key_values(fin)
    return {"wall_s": round(time.perf_counter() - start, 2), "load_1min": round(os.getloadavg()[0], 1),
            "finalize_s": round(values["finalize_seconds"], 3), "rank0_rss_before_kib": values["rss_before_kib"],
            "rank0_peak_kib": values["peak_kib"],
            "rank0_finalize_growth_kib": values["peak_kib"] - values["rss_before_kib"],
            "matches_truth": _trace_matches(archive, truth_file, nranks)}


def trace_scale_section(mpi: str, ranks: list[int], out: Path) -> dict:
    """Rank 0's peak memory and time in MPI_Finalize with --trace, against ranks, the collector against
    TRACE_REFERENCE_COMMIT's (see the module's docstring)."""
    runs = _runs_against_ranks(mpi, ranks, TRACE_SCALE_PROGRAM, _trace_scale_once, lambda cc, work: {
        "collector": build_library(trace=True),
        "reference": _reference_library(cc, work, TRACE_REFERENCE_COMMIT, trace=True)})
    result = {
        "program": f"tests/collect/programs/splits.c with {TRACE_SCALE_DUPS} duplicates of MPI_COMM_WORLD, its halves "
                   "in reversed order, its parities, each half's parities, a communicator per rank; a ring on each",
        "measure": "rank 0 around MPI_Finalize: its peak resident memory during the call (VmHWM, reset just "
                   "before it) minus its resident memory before; the collector with --trace (no other option)",
        "mpi": mpi, "machine_cores": os.cpu_count(), "reference_commit": TRACE_REFERENCE_COMMIT,
        "rank0_finalize_growth_kib": {name: {n: r["rank0_finalize_growth_kib"] for n, r in rows.items()}
                                      for name, rows in runs.items()},
        "finalize_s": {name: {n: r["finalize_s"] for n, r in rows.items()} for name, rows in runs.items()},
        "matches_truth": {name: {n: r["matches_truth"] for n, r in rows.items()} for name, rows in runs.items()},
        "runs": runs}
    _write_by_mpi(out, mpi, result)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS / "collector.json"))
    parser.add_argument("--testbed-only", action="store_true", help="skip the section without the testbed")
    parser.add_argument("--mpi", default="openmpi,mpich", help="MPIs on the testbed, comma-separated")
    parser.add_argument("--repeats", type=int, default=TB_REPEATS, help="rounds on the testbed")
    parser.add_argument("--testbed-out", default=str(RESULTS / "collector_testbed.json"))
    parser.add_argument("--trace-only", action="store_true", help="run only the section on --trace")
    parser.add_argument("--trace-out", default=str(RESULTS / "collector_trace.json"))
    parser.add_argument("--scale-only", action="store_true", help="run only the section on MPI_Finalize at scale")
    parser.add_argument("--scale-mpi", default="mpich", choices=sorted(SCALE_MPIS))
    parser.add_argument("--scale-ranks", default=",".join(map(str, SCALE_RANKS)))
    parser.add_argument("--scale-out", default=str(RESULTS / "collector_scale.json"))
    parser.add_argument("--trace-scale-only", action="store_true",
                        help="run only the section on MPI_Finalize at scale with --trace")
    parser.add_argument("--trace-scale-out", default=str(RESULTS / "collector_trace_scale.json"))
    args = parser.parse_args()
    if args.trace_scale_only:
        trace_scale_section(args.scale_mpi, [int(n) for n in args.scale_ranks.split(",")], Path(args.trace_scale_out))
        return
    if args.scale_only:
        scale_section(args.scale_mpi, [int(n) for n in args.scale_ranks.split(",")], Path(args.scale_out))
        return
    if args.trace_only:
        trace_section(args.nprocs, Path(args.trace_out))
        return
    if not args.testbed_only:
        lab_section(args.nprocs, Path(args.out))
        trace_section(args.nprocs, Path(args.trace_out))
    testbed_section(args.mpi.split(","), args.repeats, Path(args.testbed_out))


if __name__ == "__main__":
    main()
