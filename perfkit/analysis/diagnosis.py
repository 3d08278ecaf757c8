"""Findings: what limits each run, in sentences with evidence, ranked by the time at stake.

``diagnose`` applies the MPInside inferences: large late-sender wait (``w_MPI_Recv``) or collective
wait (``b_MPI_Bcast``) means ranks arrive late, not a slow network; waits that come with matching
irregularities in compute time are load imbalance; transfer time is what a perfect interconnect
would remove. It adds the common observations of scaling studies: the communication share rising
with scale, MPI_Allreduce / MPI_Bcast dominating MPI time, and small, latency-bound messages.

Every finding has the run, a ``category``, a ``title``, a ``text`` with the numbers, ranks and
functions behind it, ``seconds`` (time at stake per rank [s]: what the cause costs the elapsed
time at most), ``share`` (seconds / elapsed) and ``severity`` (high >= 10 % of elapsed, medium
>= 3 %, else low).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.analysis.imbalance import by_node, imbalance, mpi_share, rank_values, size_summary, slow_ranks
from perfkit.analysis.waits import breakdown, call_wait_share, wait_split

COLUMNS = ["run", "category", "title", "text", "seconds", "share", "severity"]
HIGH, MEDIUM = 0.10, 0.03
#: A call whose wait share is at least this is reported as a wait problem.
WAIT_SHARE = 0.5
#: A node whose fastest rank is this much slower than the typical node's fastest is a slow node.
SLOW_NODE = 0.05
#: A rank whose compute exceeds the mean by this much is a slow rank.
SLOW_RANK = 0.10


def format_ranks(ranks: Iterable[int], limit: int = 6) -> str:
    """Ranks as contiguous ranges, e.g. ``0-3, 7, 9-12``; more than ``limit`` ranges are cut."""
    values = np.unique(np.asarray(list(ranks), dtype=np.int64))
    if values.size == 0:
        return "none"
    breaks = np.flatnonzero(np.diff(values) != 1)
    starts = values[np.r_[0, breaks + 1]]
    ends = values[np.r_[breaks, values.size - 1]]
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in zip(starts, ends)]
    more = len(parts) - limit
    return ", ".join(parts[:limit]) + (f" and {more} more ranges" if more > 0 else "")


def diagnose(ds: xr.Dataset, run: str | None = None) -> pd.DataFrame:
    """Findings for ``run`` (or every run, plus trends across runs), most time at stake first."""
    runs = [run] if run is not None else [str(r) for r in ds["run"].values]
    sub = ds.sel(run=runs)
    elapsed = _elapsed(sub)
    context = {"elapsed": elapsed, "parts": breakdown(sub), "split": wait_split(sub)}
    rows: list[dict[str, Any]] = []
    for finder in (_wait_findings, _imbalance_findings, _node_findings, _transfer_findings,
                   _share_findings, _size_findings):
        rows += finder(sub, context)
    if run is None:
        rows += _trend_findings(sub, context)
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["share"] = table["seconds"] / elapsed.sel(run=table["run"].to_numpy()).values
    table["severity"] = np.select([table["category"] == "mpi_share", table["share"] >= HIGH, table["share"] >= MEDIUM],
                                  ["info", "high", "medium"], "low")
    return table.sort_values("seconds", ascending=False, kind="stable").reset_index(drop=True)


def _elapsed(ds: xr.Dataset) -> xr.DataArray:
    """Elapsed time per run [s]: the coordinate, else the largest per-rank total time."""
    longest = ds["profile"].sel(metric="time").sum("function", skipna=True, min_count=1).max("rank")
    return ds["elapsed"].where(ds["elapsed"].notnull(), longest).reset_coords(drop=True)


def _row(run: str, category: str, title: str, text: str, seconds: float) -> dict[str, Any]:
    return {"run": run, "category": category, "title": title, "text": text, "seconds": float(seconds)}


def _wait_findings(ds: xr.Dataset, context: dict[str, Any]) -> list[dict[str, Any]]:
    """Calls whose time is mostly waiting, with the compute irregularity that explains it."""
    elapsed = context["elapsed"]
    share = call_wait_share(ds, context["split"])
    waits = context["split"]["time"].sel(part="wait")
    compute = rank_values(ds)
    rows = []
    for run in map(str, ds["run"].values):
        one = share.sel(run=run)
        big = one["mean_wait"] > 0.01 * float(elapsed.sel(run=run))
        for call in map(str, one["call"].values[(one["share"] >= WAIT_SHARE).values & big.values]):
            c = one.sel(call=call)
            kind = str(c["wait_kind"].values)
            how = "estimated from per-call time above the fastest rank" if bool(c["estimated"]) else "measured"
            name = "collective wait" if kind == "wait_collective" else "late-sender wait"
            cause = ("ranks arrive late at the collective" if kind == "wait_collective"
                     else "the matching sends are posted late")
            link = _compute_link(waits.sel(run=run, call=call), compute.sel(run=run))
            text = (f"{100 * float(c['share']):.0f}% of {call} time is {name} ({how}): {cause}, not a network "
                    f"problem; {float(c['mean_wait']):.3g} s per rank on average.{link}")
            rows.append(_row(run, kind, f"{call}: {name}", text, float(c["mean_wait"])))
    return rows


def _compute_link(wait: xr.DataArray, work: xr.DataArray) -> str:
    """Sentence relating a call's per-rank wait to compute time (the load-imbalance inference)."""
    ok = wait.notnull() & work.notnull()
    if int(ok.sum()) < 3 or float(wait.where(ok).std()) == 0 or float(work.where(ok).std()) == 0:
        return ""
    r = float(np.corrcoef(wait.where(ok, drop=True), work.where(ok, drop=True))[0, 1])
    if r > -0.5:
        return ""
    return (f" Ranks that compute more wait less (correlation {r:.2f}): the waits mirror the compute "
            f"irregularities, i.e. load imbalance.")


def _imbalance_findings(ds: xr.Dataset, context: dict[str, Any]) -> list[dict[str, Any]]:
    """Compute imbalance: load balance, slow ranks (as ranges) and their excess over the mean."""
    stats = imbalance(ds, by="kind").sel(kind="compute")
    rows = []
    for run in map(str, ds["run"].values):
        s = stats.sel(run=run)
        if not np.isfinite(float(s["imbalance_time"])) or float(s["imbalance_time"]) <= 0:
            continue
        slow = slow_ranks(ds, run, threshold=SLOW_RANK)
        text = (f"Compute load balance {float(s['load_balance']):.2f} (mean/max): the busiest rank "
                f"{int(s['rank_of_max'])} computes {float(s['max']):.3g} s against a mean of {float(s['mean']):.3g} s "
                f"({100 * (float(s['max_over_mean']) - 1):.0f}% above).")
        if len(slow):
            low, high = 100 * slow["excess"].min(), 100 * slow["excess"].max()
            spread = f"{high:.0f}%" if round(low) == round(high) else f"{low:.0f}-{high:.0f}%"
            text += (f" Compute time of ranks {format_ranks(slow['rank'])} is {spread} above the mean "
                     f"({len(slow)} of {int(ds['profile'].sel(run=run, metric='time').notnull().any('function').sum())}"
                     " ranks).")
        rows.append(_row(run, "load_imbalance", "Compute load imbalance", text, float(s["imbalance_time"])))
    return rows


def _node_findings(ds: xr.Dataset, context: dict[str, Any]) -> list[dict[str, Any]]:
    """Nodes whose every rank is slow (a slow node rather than slow ranks)."""
    nodes = by_node(ds)
    slow = nodes[(nodes["floor_excess"] > SLOW_NODE) & (nodes["n_ranks"] > 1)]
    rows = []
    for rec in slow.itertuples():
        ranks = format_ranks(range(int(rec.first_rank), int(rec.last_rank) + 1))
        text = (f"Node {int(rec.node)} (ranks {ranks}) is uniformly slow: even its fastest rank computes "
                f"{100 * rec.floor_excess:.0f}% more than the typical node's fastest, its mean compute is "
                f"{100 * rec.excess:+.0f}% against the mean. Check that node (clock, memory, OS noise).")
        rows.append(_row(str(rec.run), "slow_node", f"Slow node {int(rec.node)}", text,
                         rec.max - rec.max / (1 + rec.floor_excess)))
    return rows


def _transfer_findings(ds: xr.Dataset, context: dict[str, Any]) -> list[dict[str, Any]]:
    """Transfer time: the most a perfect interconnect could remove."""
    parts = context["parts"]
    transfer = parts["time"].sel(kind="transfer")
    rows = []
    for run in map(str, ds["run"].values):
        t = transfer.sel(run=run)
        if not np.isfinite(float(t.max())) or float(t.max()) <= 0:
            continue
        how = " (waits partly estimated)" if bool(parts["estimated"].sel(run=run)) else ""
        text = (f"Data transfer (including MPI overhead) takes {float(t.mean()):.3g} s per rank on average "
                f"(at most {float(t.max()):.3g} s, rank {int(t.idxmax())}){how}: a perfect interconnect would "
                f"remove at most that; waits would remain.")
        rows.append(_row(run, "transfer", "Network transfer time", text, float(t.min())))
    return rows


def _share_findings(ds: xr.Dataset, context: dict[str, Any]) -> list[dict[str, Any]]:
    """MPI share of the time and which calls dominate it (Allreduce/Bcast dominance)."""
    table = mpi_share(ds)
    ranks = ds["profile"].sel(metric="time").notnull().any("function").sum("rank").to_pandas()
    rows = []
    for run, calls in table.groupby("run", sort=False):
        top = calls.head(2)
        mpi_time = calls["time"].sum() / ranks[run]
        names = " and ".join(f"{c} ({100 * s:.0f}%)" for c, s in zip(top["call"], top["time_share"]))
        text = (f"MPI takes {100 * calls['elapsed_share'].sum():.0f}% of the time ({mpi_time:.3g} s per rank); "
                f"{names} account for {100 * top['time_share'].sum():.0f}% of it.")
        collective = top["call"].isin(["MPI_Allreduce", "MPI_Bcast"]).any()
        if collective:
            text += " Collective time like this is usually waiting for the slowest rank, see the wait findings."
        rows.append(_row(str(run), "mpi_share", "Where MPI time goes", text, mpi_time))
    return rows


def _size_findings(ds: xr.Dataset, context: dict[str, Any]) -> list[dict[str, Any]]:
    """Small messages: latency-bound traffic."""
    sizes = size_summary(ds)
    if sizes.empty:
        return []
    ranks = ds["profile"].sel(metric="time").notnull().any("function").sum("rank").to_pandas()
    rows = []
    for run, table in sizes.groupby("run", sort=False):
        small = (table["small_share"] * table["messages"]).sum() / table["messages"].sum()
        if small < 0.5:
            continue
        text = (f"{100 * small:.0f}% of the {int(table['messages'].sum()):,} messages are below 1 KiB: "
                f"latency, not bandwidth, sets their cost; {table['small_time'].sum() / ranks[run]:.3g} s per "
                "rank is spent in calls with small messages (waits included).")
        transfer = float(context["parts"]["time"].sel(run=run, kind="transfer").mean())
        rows.append(_row(str(run), "small_messages", "Small messages", text, transfer * small))
    return rows


def _trend_findings(ds: xr.Dataset, context: dict[str, Any]) -> list[dict[str, Any]]:
    """Communication share rising with the process count across runs."""
    nprocs = ds["nprocs"].to_pandas()
    if nprocs.nunique() < 2:
        return []
    table = mpi_share(ds).groupby("run")["elapsed_share"].sum()
    runs = pd.DataFrame({"nprocs": nprocs, "share": table}).dropna()
    if runs["nprocs"].nunique() < 2:
        return []
    per_n = runs.groupby("nprocs")["share"].mean().sort_index()
    if per_n.iloc[-1] <= per_n.iloc[0] + 0.05:
        return []
    last = runs[runs["nprocs"] == per_n.index[-1]].index[0]
    steps = ", ".join(f"{100 * s:.0f}% at {int(n)}" for n, s in per_n.items())
    text = (f"The MPI share of the time rises with scale: {steps} ranks. Communication and waiting, not "
            "compute, limit strong scaling beyond the smaller runs.")
    seconds = float(per_n.iloc[-1] - per_n.iloc[0]) * float(context["elapsed"].sel(run=last))
    return [_row(str(last), "scaling", "Communication share rises with scale", text, seconds)]
