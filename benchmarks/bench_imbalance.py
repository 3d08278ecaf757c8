"""Imbalance interaction speed at 2,000 and 100,000 ranks. Writes ``benchmarks/results/imbalance.json``.

An interaction is what the imbalance explorer recomputes when the user moves the rank-range slider:
the per-rank table and stacked plot of the new range (binned to at most 2,000 points), the
per-rank compute curve (rasterised with datashader above 2,000 ranks) and the imbalance statistics
of the range. Also timed: ``imbalance`` and ``breakdown`` of the whole run.

Run: ``python benchmarks/bench_imbalance.py [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import holoviews as hv
import numpy as np
import xarray as xr
from timing import median_seconds

from perfkit.analysis.imbalance import imbalance, rank_values
from perfkit.analysis.waits import breakdown
from perfkit.model import make_run
from perfkit.plots.imbalance import rank_curve
from perfkit.plots.profile import stacked_ranks

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "imbalance.json"
FUNCS = ["Compute", "MPI_Init", "MPI_Irecv", "MPI_Isend", "w_MPI_Waitall", "MPI_Waitall", "MPI_Send",
         "w_MPI_Recv", "MPI_Recv", "b_MPI_Bcast", "MPI_Bcast", "b_MPI_Allreduce", "MPI_Allreduce"]
KINDS = ["compute", "other", "transfer", "transfer", "wait_late_sender", "transfer", "transfer",
         "wait_late_sender", "transfer", "wait_collective", "transfer", "wait_collective", "transfer"]


def profile(nranks: int, seed: int = 0) -> xr.Dataset:
    """One run of ``nranks`` ranks with random times [s] over 13 MPInside-like functions."""
    rng = np.random.default_rng(seed)
    prof = rng.gamma(2.0, 1.0, (nranks, len(FUNCS), 6))
    calls = [f[2:] if f[:2] in ("w_", "b_") else f for f in FUNCS]
    return make_run(prof, ranks=range(nranks), functions=FUNCS, calls=calls, kinds=KINDS,
                    run={"label": "bench", "nprocs": nranks, "ppn": 48, "mode": "slt+collective_wait"})



def interaction(ds: xr.Dataset, lo: int, hi: int) -> None:
    """Recompute the views for ranks ``lo..hi``: stacked plot, compute curve, imbalance bars' data."""
    sub = ds.sel(rank=slice(lo, hi))
    hv.render(stacked_ranks(ds, "bench", ranks=(lo, hi)))
    hv.render(rank_curve(rank_values(sub).sel(run="bench")))
    imbalance(sub, by="kind").load()


def bench(nranks: int, repeats: int) -> dict[str, float]:
    ds = profile(nranks)
    rng = np.random.default_rng(1)
    ranges = [tuple(sorted(rng.integers(0, nranks, 2))) for _ in range(repeats + 1)]
    ranges = iter(ranges * 2)
    return {
        "ranks": nranks,
        "interaction_s": median_seconds(lambda: interaction(ds, *next(ranges)), repeats),
        "interaction_all_ranks_s": median_seconds(lambda: interaction(ds, 0, nranks - 1), repeats),
        "imbalance_by_function_s": median_seconds(lambda: imbalance(ds), repeats),
        "breakdown_s": median_seconds(lambda: breakdown(ds), repeats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    hv.extension("bokeh")
    results = {str(n): bench(n, args.repeats) for n in (2_000, 100_000)}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
