"""Shared test helpers: small canonical runs built in memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from perfkit.model import make_run

ROOT = Path(__file__).resolve().parents[1]


def small_run(label: str, nranks: int, *, seed: int = 0, traffic: bool = True, **meta) -> xr.Dataset:
    """A one-run Dataset with Compute, MPI_Recv and its late-sender wait, random values."""
    rng = np.random.default_rng(seed)
    profile = rng.uniform(0, 10, (nranks, 3, 6))
    matrix = rng.uniform(0, 100, (nranks, nranks, 3)) if traffic else None
    return make_run(profile, ranks=range(nranks), functions=["Compute", "MPI_Recv", "w_MPI_Recv"],
                    calls=["Compute", "MPI_Recv", "MPI_Recv"], kinds=["compute", "transfer", "wait_late_sender"],
                    run={"label": label, "nprocs": nranks, **meta}, traffic=matrix, reader="test")


def two_small_runs() -> list[xr.Dataset]:
    """Runs 'a' (4 ranks, slt, with traffic) and 'b' (8 ranks on 2 nodes, no traffic)."""
    return [small_run("a", 4, seed=1, mode="slt"), small_run("b", 8, seed=2, traffic=False, nodes=2)]
