"""MPInside reading speed and peak memory against pandas on the same bytes, and open_runs throughput.

Times are medians of perfkit and pandas called in turn in one process; peak memory is measured in a
fresh interpreter for each (``timing.peak_memory``) and given per byte of the file.

Run: .venv/bin/python benchmarks/bench_mpinside.py  (writes benchmarks/results/mpinside.json)
"""

from __future__ import annotations

import io
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from timing import alternating_medians, peak_memory

import perfkit
from perfkit.io.mpinside import write
from perfkit.model import make_run

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
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
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
