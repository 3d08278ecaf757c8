"""``perfkit.convert`` throughput: files/s against worker count. Writes ``benchmarks/results/convert.json``.

Sets of files, each converted to a fresh zarr store:

* ``mpip``: ``--files`` copies of the real HPCCG mpiP reports (1 to 16 ranks, a few kB each), the many-small-files
  case, each copy given its own collector PID so that each is a run of its own (copies of one report would be
  taken for reports of the same run and merged, and the merge, not the reading, would be measured);
* ``mpinside_<ranks>``: for each of ``--ranks`` (default 300 and 16,384), ``--copies`` copies
  of one synthetic MPInside run of that many ranks (no matrices).

Each (set, setup) is measured in a fresh Python process, as a user's ``perfkit convert`` runs: perfkit imported,
then ``convert`` called twice, the first call paying what a first call pays (a local pool's readers started, a
cluster's workers importing perfkit, the store writer's own first imports), the second reusing them; then
``open_runs`` (threads, everything in memory) on the same files in the same process, twice, the faster kept: the
reference. Setups: ``convert`` in this process (``workers=1``), a local process pool of 2 (``workers=2``), a
``distributed.LocalCluster`` of 1 and of 2 single-threaded process workers (started before the calls, its start
reported apart: the user starts it once for many calls; the reference is taken before it starts, since
``open_runs`` would use it), and the same clusters whose workers import perfkit's readers as they start
(``preload=perfkit.io.convert.reader_modules()``: their start then counts that import, their first call does
not). The machine is shared: read the ratios to ``open_runs`` and the speed-ups from 1 to 2 workers, with the load
average recorded beside them, not the absolute rates. ``--repeat`` processes per setup, the fastest of each time
kept.

Parallelism of the reference: ``open_runs`` reads in dask's threads, one a core, but its parsers hold the GIL, so it
runs on about one core (``open_runs_cores``: its process's CPU seconds over wall seconds, in the process kept);
``open_runs_1_thread_s`` is the same read in one thread (``num_workers=1``), measured in turn with it, and
``ratio_to_open_runs_1_thread`` the ratios against it. A cluster's single-threaded worker reads the files of a task in
as many threads as its host has cores per worker thread. Beside each call, first and second: the CPU seconds of this
process (``client_cpu``) and, on a cluster, of its workers (``workers_cpu``), one pair a process: the work of a call
against its waiting (a cold first call's workers import pandas, xarray and dask: 0.3 s of CPU each here).

Run: ``python benchmarks/bench_convert.py [--sets mpip mpinside_300 mpinside_16384] [--files 300] [--copies 100 16]``;
sets not run keep their previous results in the file. A set of other than its usual number of files (300 mpiP
reports, 100 runs of 300 ranks, 16 of 16,384) is recorded under its own key (e.g. ``mpinside_16384_100_runs``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "convert.json"
HPCCG = sorted((ROOT / "tests" / "data" / "mpip" / "real" / "HPCCG-strong").glob("*/*.mpiP"))
#: setup -> (workers, LocalCluster workers or 0, whether the cluster's workers import perfkit's readers as they start)
SETUPS = {"in_process": (1, 0, False), "process_pool_2": (2, 0, False), "localcluster_1": (None, 1, False),
          "localcluster_2": (None, 2, False), "localcluster_1_preloaded": (None, 1, True),
          "localcluster_2_preloaded": (None, 2, True)}
#: Files of each set when its results are recorded under the set's name (other counts: ``result_key``).
USUAL_FILES = {"mpip": 300, "mpinside_300": 100, "mpinside_16384": 16}


def copies(sources: list[Path], n: int, folder: Path) -> list[Path]:
    """``n`` files in ``folder``, copies of ``sources`` in turn (distinct names, hence distinct runs)."""
    folder.mkdir(parents=True)
    out = []
    for k in range(n):
        src = sources[k % len(sources)]
        out.append(folder / f"{k:05d}_{src.name}")
        shutil.copy(src, out[-1])
    return out


def distinct_runs(files: list[Path]) -> list[Path]:
    """``files`` (mpiP reports) rewritten so that each names a collector PID of its own (1000 + its position)."""
    for k, path in enumerate(files):
        text = path.read_text()
        head, sep, rest = text.partition("@ Collector PID")
        _, newline, tail = rest.partition("\n")
        path.write_text(f"{head}{sep}            : {1000 + k}{newline}{tail}")
    return files


def make_set(name: str, n: int, work: Path) -> list[Path]:
    """The files of set ``name`` (``mpip`` or ``mpinside_<ranks>``), ``n`` of them, under ``work``."""
    if name == "mpip":
        return distinct_runs(copies(HPCCG, n, work / name))
    from perfkit import synthetic
    from perfkit.io.mpinside import write

    ranks = int(name.split("_")[1])
    sim = synthetic.simulate(ranks, steps=2)
    one = write(synthetic.to_dataset(sim, "slt", matrices=False, sizes=False), work / f"{ranks}.mpinside")
    return copies([one], n, work / name)


def timed(func) -> float:  # type: ignore[no-untyped-def]
    """Wall seconds of ``func()``."""
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def cpu_seconds() -> float:
    """CPU seconds (user and system) this process has used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def result_key(name: str, files: int) -> str:
    """Key of set ``name`` of ``files`` files in the results: its name for its usual count, else with the count."""
    return name if USUAL_FILES.get(name) == files else f"{name}_{files}_runs"


def child(folder: Path, setup: str, work: Path) -> dict[str, object]:
    """In a fresh process: seconds of two ``convert`` calls with ``setup`` and of ``open_runs`` (best of two, in
    dask's threads and in one thread), with the CPU seconds each used."""
    import dask

    import perfkit
    from perfkit.io import convert as convert_module

    warnings.simplefilter("ignore", perfkit.PerfkitWarning)
    files = sorted(folder.iterdir())
    workers, cluster_workers, preload = SETUPS[setup]
    stores = iter(range(10))
    cpu: dict[str, list[float]] = {"client_cpu": [], "workers_cpu": []}

    def on_workers(client: object) -> float:
        return sum(client.run(cpu_seconds).values())  # type: ignore[attr-defined]

    def convert(client: object = None) -> float:
        before, workers_before = cpu_seconds(), on_workers(client) if client is not None else 0.0
        seconds = timed(lambda: perfkit.convert(files, work / f"s{next(stores)}.zarr", progress=False,
                                                workers=workers))
        cpu["client_cpu"].append(round(cpu_seconds() - before, 3))
        if client is not None:
            cpu["workers_cpu"].append(round(on_workers(client) - workers_before, 3))
        return seconds

    def reference() -> dict[str, float]:
        """``open_runs`` in dask's threads and in one thread, in turn, the faster of two each; the cores it used."""
        threads, one, cores = [], [], []
        for _ in range(2):
            before = cpu_seconds()
            threads.append(timed(lambda: perfkit.open_runs(files, progress=False)))
            cores.append((cpu_seconds() - before) / threads[-1])
            with dask.config.set(num_workers=1):
                one.append(timed(lambda: perfkit.open_runs(files, progress=False)))
        return {"open_runs_s": min(threads), "open_runs_1_thread_s": min(one),
                "open_runs_cores": round(cores[threads.index(min(threads))], 2)}

    out: dict[str, object] = {}
    if cluster_workers:
        import distributed

        ref = reference()
        start = time.perf_counter()
        modules = convert_module.reader_modules() if preload else ()
        with distributed.LocalCluster(n_workers=cluster_workers, threads_per_worker=1, processes=True,
                                      preload=modules, dashboard_address=None) as cluster, \
                distributed.Client(cluster) as client:
            out["cluster_start_s"] = round(time.perf_counter() - start, 2)
            first, again = convert(client), convert(client)
    else:
        out["start_method"] = convert_module.start_method() if workers and workers > 1 else None  # the first call's
        first, again = convert(), convert()
        ref = reference()
    return {**out, "first_s": round(first, 3), "again_s": round(again, 3),
            **{key: round(value, 3) for key, value in ref.items()},
            **{key: values for key, values in cpu.items() if values}}


def measure(name: str, files: list[Path], work: Path, repeat: int) -> dict[str, object]:
    """Each setup on ``files`` in ``repeat`` fresh processes (the fastest of each time kept): files/s, ratios to
    ``open_runs``, speed-ups from 1 to 2 workers."""
    runs: dict[str, dict[str, object]] = {}
    for setup in SETUPS:
        for _ in range(repeat):
            out = work / f"out_{setup}"
            out.mkdir()
            done = subprocess.run([sys.executable, __file__, "--child", str(files[0].parent), setup, str(out)],
                                  check=True, capture_output=True, text=True)
            shutil.rmtree(out)
            run = json.loads(done.stdout.splitlines()[-1])
            print(name, setup, run, file=sys.stderr, flush=True)
            times = {key: value for key, value in run.items() if key.endswith("_s")}
            best = runs.setdefault(setup, {**times, "start_method": run.get("start_method"), "each_process": [],
                                           "load_average_after": []})
            best.update({key: min(value, best[key]) for key, value in times.items()})
            best["each_process"].append({key: value for key, value in run.items()  # type: ignore[union-attr]
                                         if key in ("open_runs_cores", "client_cpu", "workers_cpu")})
            best["load_average_after"].append(round(os.getloadavg()[0], 1))  # type: ignore[attr-defined]
    n = len(files)

    def ratios(reference: str) -> dict[str, float]:
        return {f"{setup}_{call}": round(float(r[reference]) / float(r[f"{call}_s"]), 2)  # type: ignore[arg-type]
                for setup, r in runs.items() for call in ("first", "again")}

    ratio = ratios("open_runs_s")
    return {
        "files": n, "files_mb": round(sum(f.stat().st_size for f in files) / 1e6, 1),
        "runs": runs,
        "files_per_s": {f"{setup}_{call}": round(n / float(r[f"{call}_s"]), 1)  # type: ignore[arg-type]
                        for setup, r in runs.items() for call in ("first", "again")}
        | {f"open_runs_beside_{setup}": round(n / float(r["open_runs_s"]), 1)  # type: ignore[arg-type]
           for setup, r in runs.items()},
        "ratio_to_open_runs": ratio,
        "ratio_to_open_runs_1_thread": ratios("open_runs_1_thread_s"),
        "speedup_1_to_2_workers": {
            "local (in process -> pool of 2), first call": round(ratio["process_pool_2_first"]
                                                                 / ratio["in_process_first"], 2),
            "local, second call": round(ratio["process_pool_2_again"] / ratio["in_process_again"], 2),
            "localcluster, first call": round(ratio["localcluster_2_first"] / ratio["localcluster_1_first"], 2),
            "localcluster, second call": round(ratio["localcluster_2_again"] / ratio["localcluster_1_again"], 2),
            "localcluster preloaded, first call": round(ratio["localcluster_2_preloaded_first"]
                                                        / ratio["localcluster_1_preloaded_first"], 2),
            "localcluster preloaded, second call": round(ratio["localcluster_2_preloaded_again"]
                                                         / ratio["localcluster_1_preloaded_again"], 2)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["mpip", "mpinside_300", "mpinside_16384"],
                        help="mpip and/or mpinside_<ranks>")
    parser.add_argument("--files", type=int, default=300, help="mpiP files")
    parser.add_argument("--copies", type=int, nargs="+", default=[100, 16],
                        help="files of each mpinside set, in --sets order")
    parser.add_argument("--repeat", type=int, default=2, help="processes per setup (the fastest of each time kept)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child[0]), args.child[1], Path(args.child[2]))))
        return
    mpinside = [s for s in args.sets if s != "mpip"]
    if len(args.copies) < len(mpinside):
        parser.error("--copies needs one count per mpinside set")
    counts = dict(zip(mpinside, args.copies)) | {"mpip": args.files}
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results = {name: value for name, value in results.items() if isinstance(value, dict) and "runs" in value}
    results["machine_note"] = (f"2 cores shared with other jobs; each setup in {args.repeat} fresh process(es), one "
                               "first and one second convert call and open_runs (best of 2, in dask's threads and in "
                               "one) in each, the fastest kept")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.sets:
            before = [round(x, 1) for x in os.getloadavg()]
            files = make_set(name, counts[name], work)
            key = result_key(name, counts[name])
            results[key] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_average_before": before,
                            **measure(name, files, work, args.repeat),
                            "load_average_after": [round(x, 1) for x in os.getloadavg()]}
            shutil.rmtree(files[0].parent)
            RESULTS.write_text(json.dumps(results, indent=1) + "\n")
            print(json.dumps({key: results[key]}, indent=1))


if __name__ == "__main__":
    main()
