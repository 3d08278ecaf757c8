"""Ground truth of a lab run, from its scenario and parameters (see ``simulate`` for the model).

``truth(scenario, nprocs, **params)`` returns an ``xarray.Dataset``:

- ``compute_time`` (rank) [s]: prescribed compute (sum of the sleeps).
- ``end`` (rank) [s]: when the rank reaches ``MPI_Finalize``, from leaving the start-up barrier.
- ``send_late`` (rank, function) [s]: send-late time per receiving call (0 for other calls).
- ``collective_wait`` (rank, function) [s]: collective wait per collective (0 for other calls;
  NaN for the start-up ``MPI_Barrier``, whose wait is the ranks' start-up skew, not prescribed).
- ``calls`` (rank, function): calls per MPI function, ``MPI_Init`` and ``MPI_Finalize`` included.
- ``bytes_sent``, ``bytes_recv`` (rank) [B]: point-to-point payload (collectives excluded).
- ``traffic_bytes``, ``traffic_count`` (sender, receiver): point-to-point bytes [B] and messages.

Wall-time quantities are NaN when the scenario does not prescribe them (busy-loop compute); the attr
``unavailable`` then says why. Attrs: ``scenario``, ``cause`` (label), ``explanation`` (text),
``parameters`` (JSON), ``nprocs``, ``language``, ``model``, ``outcome``, ``basis``.

``basis="prescribed"``: compute durations as the parameters say. ``basis="realised"``: the compute
intervals one run actually had (``realised``, recorded by the program on CLOCK_MONOTONIC, which the
ranks of one node share), so MPInside's definitions applied to that run's own event times: a
loaded machine's late wake-ups and late deliveries included, the MPI calls between a compute and
the next taken as instantaneous. Times are then counted from the earliest compute start; it exists
for busy-loop compute too. Valid for ranks that share one clock: on several nodes, the intervals
must first be put on one clock (``perfkit.collect.lab.run``'s ``clock_offsets``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from perfkit.collect.lab.scenarios import SCENARIOS, Scenario, cause_of
from perfkit.collect.lab.simulate import Compute, Op, simulate

#: Suffix of the truth file written beside a profile.
SUFFIX = ".truth.nc"
MODEL = ("zero-cost MPI calls and messages, eager sends, compute exactly as prescribed (sleep), collectives "
         "complete when the last rank enters; send-late time and collective wait as MPInside defines them")
WALL_TIME = ("compute_time", "end", "send_late", "collective_wait")


def get_scenario(name: str) -> Scenario:
    """The scenario called ``name`` (a ``KeyError`` naming the known ones otherwise)."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown lab scenario {name!r}; known: {sorted(SCENARIOS)}") from None


def realise(program: list[list[Op]], realised: Sequence[Sequence[tuple[float, float]]], *,
            timeline: bool = True) -> list[list[Op]]:
    """``program`` with its Compute ops replaced, rank by rank and in order, by the ``realised``
    (start, end) intervals [s], counted from the earliest start; without ``timeline`` by their
    durations only (a rank computes again as soon as what it waits for allows)."""
    if len(realised) != len(program):
        raise ValueError(f"realised intervals for {len(realised)} ranks, the program has {len(program)}")
    starts = [s for intervals in realised for s, _ in intervals]
    origin = min(starts) if starts else 0.0
    out = []
    for rank, (ops, intervals) in enumerate(zip(program, realised)):
        n = sum(isinstance(op, Compute) for op in ops)
        if len(intervals) != n:
            raise ValueError(f"rank {rank}: {len(intervals)} realised compute intervals, the program has {n}")
        it = iter(intervals)
        new: list[Op] = []
        for op in ops:
            if isinstance(op, Compute):
                start, end = next(it)
                op = Compute(end - start, until=end - origin if timeline else None)
            new.append(op)
        out.append(new)
    return out


def truth(scenario: str, nprocs: int, *, realised: Sequence[Sequence[tuple[float, float]]] | None = None,
          ideal_network: bool = False, **params: Any) -> xr.Dataset:
    """The ground truth of ``scenario`` on ``nprocs`` ranks with ``params`` (defaults filled in);
    ``realised``: per rank, the (start, end) [s] of each compute a run actually had, in program order.
    ``ideal_network`` (with ``realised``): the run's compute durations only, not when they ended, so
    that every delay between them other than waiting for a partner's compute is gone: the run
    replayed on an ideal network (its ``end`` is the ideal-network elapsed time POP defines)."""
    sc = get_scenario(scenario)
    p = sc.params(**params)
    program = sc.program(nprocs, p)
    if realised is not None:
        program = realise(program, realised, timeline=not ideal_network)
    tr = simulate(program)
    ranks = np.arange(nprocs)
    funcs = tr.functions

    def per_function(d: dict[tuple[int, str], float]) -> np.ndarray:
        return np.array([[d.get((r, f), 0.0) for f in funcs] for r in ranks], dtype=float)

    ds = xr.Dataset(
        {
            "compute_time": ("rank", tr.compute.astype(float), {"units": "s"}),
            "end": ("rank", tr.end.astype(float), {"units": "s"}),
            "send_late": (("rank", "function"), per_function(tr.send_late), {"units": "s"}),
            "collective_wait": (("rank", "function"), per_function(tr.collective_wait), {"units": "s"}),
            "calls": (("rank", "function"), per_function(tr.calls), {"units": "1"}),
            "bytes_sent": ("rank", tr.traffic_bytes.sum(axis=1), {"units": "B"}),
            "bytes_recv": ("rank", tr.traffic_bytes.sum(axis=0), {"units": "B"}),
            "traffic_bytes": (("sender", "receiver"), tr.traffic_bytes, {"units": "B"}),
            "traffic_count": (("sender", "receiver"), tr.traffic_count, {"units": "1"}),
        },
        coords={"rank": ranks, "function": funcs, "sender": ranks, "receiver": ranks},
    )
    unavailable = ""
    if not sc.wall_time_prescribed and realised is None:
        unavailable = ("compute is a busy loop sharing too few cores: its wall time, and every wait it causes, "
                       "is not prescribed by the parameters")
        for name in WALL_TIME:
            ds[name] = xr.full_like(ds[name], math.nan)
    outcome = "reaches MPI_Finalize"
    if sc.fails:
        outcome = (f"rank {int(p['fail_rank'])} fails ({sc.cause}) at step {int(p['fail_step'])}: no rank reaches "
                   "MPI_Finalize; the quantities cover the steps completed before the failure")
    ds.attrs = {
        "scenario": sc.name,
        "cause": cause_of(sc, p),
        "explanation": sc.explain(nprocs, p),
        "parameters": json.dumps(p, sort_keys=True),
        "nprocs": nprocs,
        "language": sc.language,
        "model": MODEL,
        "unavailable": unavailable,
        "outcome": outcome,
        "basis": "prescribed" if realised is None else "realised, ideal network" if ideal_network else "realised",
    }
    return ds


def truth_path(profile: str | Path) -> Path:
    """Where the truth of ``profile`` lives: ``<profile>.truth.nc``."""
    return Path(str(profile) + SUFFIX)


def save_truth(ds: xr.Dataset, profile: str | Path) -> Path:
    """Write ``ds`` beside ``profile`` as netCDF; return the path."""
    path = truth_path(profile)
    ds.to_netcdf(path, engine="h5netcdf")
    return path


def load_truth(path: str | Path) -> xr.Dataset:
    """Read a truth file (a profile path is accepted too: its ``.truth.nc`` is read)."""
    p = Path(path)
    if not str(p).endswith(SUFFIX):
        p = truth_path(p)
    with xr.open_dataset(p, engine="h5netcdf") as ds:
        return ds.load()


def read_record(path: str | Path, nprocs: int) -> list[list[tuple[float, float]]] | None:
    """The realised compute (start, end) intervals [s] the ranks wrote to ``<path>.<rank>``; None if
    one file is missing."""
    out = []
    for rank in range(nprocs):
        f = Path(f"{path}.{rank}")
        if not f.is_file():
            return None
        rows = [line.split() for line in f.read_text().splitlines() if line.strip()]
        out.append([(float(a), float(b)) for a, b in rows])
    return out
