"""MPInside reading speed and peak memory against pandas on the same bytes, and open_runs throughput.

Times are medians of perfkit and pandas called in turn in one process; peak memory is measured in a
fresh interpreter for each (``timing.peak_memory``) and given per byte of the file.

Files with per-rank size tables (``perfkit.synthetic`` runs of 3,072 to 100,000 ranks: two tables a
rank, then the matrices) are read against pandas parsing all of the file's rows in one call, and
written against pandas formatting the same tables, one frame each (``write_reference``).

Run: .venv/bin/python benchmarks/bench_mpinside.py [--sizes 3072 16384 100000] [--only sizes]
(writes benchmarks/results/mpinside.json; ``--only sizes`` keeps the file's other entries)
"""

from __future__ import annotations

import argparse
import io
import json
import re
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from timing import alternating_medians, peak_memory

import perfkit
from perfkit import synthetic
from perfkit.io.mpinside import read, write
from perfkit.io.mpinside.writer import MATRICES, SIZE_TABLES, TABLES
from perfkit.model import SIZE_STATS, make_run

RESULTS = Path(__file__).parent / "results" / "mpinside.json"
CALLS = ["Recv", "Send", "Isend", "Irecv", "Waitall", "Wait", "Bcast", "Allreduce", "Barrier", "Alltoall",
         "Allgather", "Reduce", "Gather", "Scatter", "Sendrecv", "Test", "Testall", "Probe", "Iprobe",
         "Alltoallv", "Allgatherv", "Gatherv", "Scatterv", "Reduce_scatter", "Ibcast", "Iallreduce",
         "Waitany", "Waitsome", "Ssend", "Rsend", "Bsend", "Issend", "Scan", "Exscan", "Comm_split",
         "Comm_dup", "Init", "Finalize"]


def big_run(nranks: int, ncols: int, seed: int = 0):
    """A run of ``nranks`` x ``ncols`` columns (Compute, a late-sender wait and MPI calls)."""
    rng = np.random.default_rng(seed)
    functions = ["Compute", "w_MPI_Recv", *(f"MPI_{c}" for c in CALLS[: ncols - 2])]
    calls = ["Compute", "MPI_Recv", *functions[2:]]
    kinds = ["compute", "wait_late_sender", *(perfkit.model.default_kind(c) for c in calls[2:])]
    profile = np.empty((nranks, ncols, 5))
    profile[..., 0] = np.round(rng.uniform(0, 1000, (nranks, ncols)), 6)
    profile[..., 1:] = rng.integers(0, 10**9, (nranks, ncols, 4))
    profile[:, 0, 1:] = np.nan
    return make_run(profile, ranks=range(nranks), functions=functions, calls=calls, kinds=kinds,
                    metrics=["time", "bytes_sent", "calls_sent", "bytes_recv", "calls_recv"], run={"label": "b"})


def pandas_reference(path: Path) -> None:
    """pandas parsing every table's bytes (header line included) with sep=r"\\s+"."""
    text = path.read_bytes()
    for block in text.split(b">>>>")[1:]:
        body = block.split(b"\n", 1)[1]
        pd.read_csv(io.BytesIO(body), sep=r"\s+", na_values=["-----"])


def rows_reference(path: Path) -> None:
    """pandas parsing every row of the file (titles and column lines dropped) in one call, padded to the widest."""
    rows = re.sub(rb"(?m)^>>>>.*\n.*\n", b"", path.read_bytes())
    width = max(len(line.split()) for line in rows[:1 << 20].splitlines()[:2000])
    pd.read_csv(io.BytesIO(rows), sep=" ", header=None, names=range(width), na_values=["-----"])


def write_reference(run) -> None:
    """pandas formatting the run's tables (each rank table, all ranks' size rows per statistic, each matrix's
    non-zeros) with the writer's number formats, one ``to_csv`` each."""
    one = run.isel(run=0)
    out = io.StringIO()
    for metric, _, fmt in TABLES[:-1]:
        pd.DataFrame(one["profile"].sel(metric=metric).values).to_csv(out, sep=" ", header=False, float_format=fmt)
    sizes = one["sizes"].transpose("rank", "size_bin", "function", "stat").values
    used = ~np.all(np.isnan(sizes), axis=(0, 1, 3))
    for stat, _, fmt in SIZE_TABLES:
        values = sizes[:, :, used, SIZE_STATS.index(stat)].reshape(-1, int(used.sum()))
        pd.DataFrame(values).to_csv(out, sep=" ", header=False, na_rep="-----", float_format=fmt)
    for _, quantity, fmt in MATRICES:
        if quantity in one["quantity"].values:
            m = one["traffic"].sel(quantity=quantity).data
            pd.DataFrame({"i": m.coords[0], "j": m.coords[1], "v": m.data}).to_csv(
                out, sep=" ", header=False, index=False, float_format=fmt)


def size_tables(ranks: int, tmp: Path) -> dict[str, float]:
    """Read and write times of a synthetic run of ``ranks`` ranks with size tables and matrices, with ratios."""
    run, _ = synthetic.generate_run(ranks, "slt", steps=2)
    path = write(run, tmp / f"sizes{ranks}.mpinside")
    repeats = 3 if ranks <= 20_000 else 1
    t = alternating_medians({"read": lambda: read(path), "pandas_read": lambda: rows_reference(path),
                             "write": lambda: write(run, path), "pandas_write": lambda: write_reference(run)},
                            repeats)
    out = {"ranks": ranks, "tables": 2 * ranks, "file_MB": round(path.stat().st_size / 1e6, 1),
           **{f"{k}_s": round(v, 3) for k, v in t.items()},
           "read_ratio": round(t["read"] / t["pandas_read"], 2),
           "write_ratio": round(t["write"] / t["pandas_write"], 2),
           "read_ms_per_rank": round(1e3 * t["read"] / ranks, 4),
           "write_ms_per_rank": round(1e3 * t["write"] / ranks, 4)}
    print(f"{ranks:,} ranks with size tables ({out['file_MB']} MB): read {t['read']:.2f} s "
          f"({out['read_ratio']}x pandas' one-call parse of its rows), write {t['write']:.2f} s "
          f"({out['write_ratio']}x pandas formatting its tables)", flush=True)
    return out


def memory(path: Path, small: Path) -> dict[str, float]:
    """Peak memory of perfkit and of the pandas reference on ``path``, each in a fresh interpreter, / file size.

    Both first read ``small`` (what they import on first use is part of the import baseline).
    """
    size = path.stat().st_size
    setup = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import sparse, perfkit, "
             f"perfkit.io.mpinside; from bench_mpinside import pandas_reference; from pathlib import Path; "
             f"path, small = Path({str(path)!r}), Path({str(small)!r}); "
             "perfkit.open_profile(small, format='mpinside'); pandas_reference(small)")
    runs = {"perfkit": "perfkit.open_profile(path, format='mpinside')", "pandas": "pandas_reference(path)"}
    return {f"{who}_{kind}_per_file": round(peak / size, 2)
            for who, statement in runs.items() for kind, peak in peak_memory(setup, statement).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[3072, 16384, 100_000])
    parser.add_argument("--only", choices=["sizes"])
    args = parser.parse_args()
    out: dict[str, object] = json.loads(RESULTS.read_text()) if args.only and RESULTS.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        write(synthetic.generate_run(48, "slt", steps=2)[0], Path(tmp) / "warm.mpinside")  # compiled on first use
        out["size_tables"] = [size_tables(n, Path(tmp)) for n in args.sizes]
        if args.only:
            RESULTS.write_text(json.dumps(out, indent=2) + "\n")
            return
        path = write(big_run(16384, 40), Path(tmp) / "big.txt")
        size_mb = path.stat().st_size / 1e6
        t = alternating_medians({"perfkit": lambda: perfkit.open_profile(path, format="mpinside"),
                                 "pandas": lambda: pandas_reference(path)}, 7)
        mem = memory(path, write(big_run(4, 40), Path(tmp) / "small.txt"))
        out["read_16384x40"] = {"file_MB": round(size_mb, 1), "perfkit_s": round(t["perfkit"], 4),
                                "pandas_s": round(t["pandas"], 4), "ratio": round(t["perfkit"] / t["pandas"], 2),
                                **mem}
        print(f"16,384 ranks x 40 columns, 5 tables ({size_mb:.1f} MB): perfkit {t['perfkit']:.3f} s, "
              f"pandas read_csv {t['pandas']:.3f} s, ratio {t['perfkit'] / t['pandas']:.2f} (target <= 1.5); "
              f"peak memory / file size: perfkit {mem['perfkit_rss_per_file']} (RSS), "
              f"{mem['perfkit_traced_per_file']} (tracemalloc), pandas {mem['pandas_rss_per_file']} (RSS) "
              "(target <= 3)")
        for k in range(200):
            write(big_run(int(32 * (1 + k % 8)), 12, seed=k), Path(tmp) / f"run{k:03d}.txt")
        start = time.perf_counter()
        ds = perfkit.open_runs(str(Path(tmp) / "run*.txt"), progress=False)
        elapsed = time.perf_counter() - start
        out["open_runs_200"] = {"files": 200, "seconds": round(elapsed, 2), "files_per_s": round(200 / elapsed, 1),
                                "ranks_max": int(ds.sizes["rank"])}
        print(f"open_runs over 200 files (32-256 ranks x 12 columns): {elapsed:.2f} s, {200 / elapsed:.0f} files/s")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
