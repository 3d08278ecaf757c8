"""Shared test helpers: small canonical runs built in memory; the scheduling-noise guard of timing-truth tests."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest
import xarray as xr

from perfkit.model import make_run

T = TypeVar("T")
#: The share of a timing-truth test's tolerance per step [s] that the machine's scheduling noise may
#: take: above it, late wake-ups and polls of a loaded machine, not the collector, decide the outcome.
NOISE_SHARE = 1 / 3

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


def with_noise(action: Callable[[], T], *also: Callable[[T], float]) -> tuple[T, float]:
    """``action()`` and the scheduling noise [s per step] it ran in: the largest of a probe before, a
    probe after and what each of ``also`` reads off the result (NaN: nothing to read)."""
    from perfkit.collect.lab.noise import scheduling_noise

    before = scheduling_noise()
    result = action()
    found = [before, scheduling_noise(), *(f(result) for f in also)]
    return result, max(x for x in found if not math.isnan(x))


def skip_when_noisy(noise: float, tolerance_per_step: float) -> None:
    """Skip a timing-truth test whose run had scheduling noise [s per step] above ``NOISE_SHARE`` of
    its truth tolerance [s per step]."""
    allowed = NOISE_SHARE * tolerance_per_step
    if noise > allowed:
        pytest.skip(f"scheduling noise {noise * 1e3:.2f} ms per step, above the {allowed * 1e3:.2f} ms the truth "
                    f"tolerance ({tolerance_per_step * 1e3:.1f} ms per step) allows")
