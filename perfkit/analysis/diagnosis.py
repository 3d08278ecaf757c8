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
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from perfkit.analysis.cube import metric_values, nan_sum
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


@dataclass(frozen=True)
class _Context:
    """What several finders use, computed once per ``diagnose`` call."""

    elapsed: pd.Series  #: elapsed time per run [s]
    ranks: pd.Series  #: number of ranks that exist, per run
    split: xr.Dataset  #: ``wait_split``: transfer and wait time [s] per run, rank and call
    parts: xr.Dataset  #: ``breakdown``: time [s] per run, rank and kind
    compute: xr.DataArray  #: compute time [s] per run and rank
    mpi: pd.DataFrame  #: ``mpi_share``: MPI time [s] and calls per run and call


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
    """Findings for ``run`` (or every run, plus trends across runs), most time at stake first.

    The runs diagnosed are read into memory (a lazy, dask-backed cube included), without ``traffic``.
    """
    runs = [run] if run is not None else [str(r) for r in ds["run"].values]
    sub = ds.drop_vars("traffic", errors="ignore").sel(run=runs).load()
    context = _context(sub)
    rows: list[dict[str, Any]] = []
    for finder in (_wait_findings, _imbalance_findings, _node_findings, _transfer_findings,
                   _share_findings, _size_findings):
        rows += finder(sub, context)
    if run is None:
        rows += _trend_findings(sub, context)
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["share"] = table["seconds"] / context.elapsed.loc[table["run"]].to_numpy()
    table["severity"] = np.select([table["category"] == "mpi_share", table["share"] >= HIGH, table["share"] >= MEDIUM],
                                  ["info", "high", "medium"], "low")
    return table.sort_values("seconds", ascending=False, kind="stable").reset_index(drop=True)


def _context(ds: xr.Dataset) -> _Context:
    """The shared quantities of ``ds`` (the runs being diagnosed)."""
    split = wait_split(ds)
    return _Context(elapsed=_elapsed(ds), ranks=_rank_counts(ds), split=split, parts=breakdown(ds, split),
                    compute=rank_values(ds), mpi=mpi_share(ds))


def _elapsed(ds: xr.Dataset) -> pd.Series:
    """Elapsed time per run [s]: the coordinate, else the largest per-rank total time."""
    longest = np.fmax.reduce(nan_sum(metric_values(ds, "time"), axis=2), axis=1)
    given = ds["elapsed"].values
    return pd.Series(np.where(np.isnan(given), longest, given), index=ds["run"].values)


def _rank_counts(ds: xr.Dataset) -> pd.Series:
    """Number of ranks with a time value, per run."""
    exists = ~np.isnan(metric_values(ds, "time")).all(axis=2)
    return pd.Series(exists.sum(axis=1), index=ds["run"].values)


def _row(run: str, category: str, title: str, text: str, seconds: float) -> dict[str, Any]:
    return {"run": run, "category": category, "title": title, "text": text, "seconds": float(seconds)}


def _wait_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """Calls whose time is mostly waiting, with the compute irregularity that explains it."""
    share = call_wait_share(ds, context.split)
    ratio, mean_wait, estimated = (share[name].values for name in ("share", "mean_wait", "estimated"))
    calls, kinds = share["call"].values, share["wait_kind"].values
    waits = context.split["time"].sel(part="wait").values
    compute = context.compute.values
    rows = []
    for i, run in enumerate(map(str, ds["run"].values)):
        flagged = (ratio[i] >= WAIT_SHARE) & (mean_wait[i] > 0.01 * context.elapsed[run])
        for j in np.flatnonzero(flagged):
            call, kind = str(calls[j]), str(kinds[j])
            text = (_wait_text(call, kind, ratio[i, j], mean_wait[i, j], bool(estimated[i, j]))
                    + _compute_link(waits[i, :, j], compute[i]))
            rows.append(_row(run, kind, f"{call}: {_wait_name(kind)}", text, mean_wait[i, j]))
    return rows


def _wait_name(kind: str) -> str:
    """What a wait of ``kind`` (``wait_collective`` or ``wait_late_sender``) is called in findings."""
    return "collective wait" if kind == "wait_collective" else "late-sender wait"


def _wait_text(call: str, kind: str, share: float, mean_wait: float, estimated: bool) -> str:
    """Sentence on a call's wait: its share of the call's time [0-1] and mean per rank [s]."""
    how = "estimated from per-call time above the fastest rank" if estimated else "measured"
    cause = ("ranks arrive late at the collective" if kind == "wait_collective"
             else "the matching sends are posted late")
    return (f"{100 * float(share):.0f}% of {call} time is {_wait_name(kind)} ({how}): {cause}, not a network "
            f"problem; {float(mean_wait):.3g} s per rank on average.")


def _compute_link(wait: np.ndarray, work: np.ndarray) -> str:
    """Sentence relating a call's per-rank wait to compute time (the load-imbalance inference)."""
    ok = ~np.isnan(wait) & ~np.isnan(work)
    if int(ok.sum()) < 3 or not _varies(wait, ok) or not _varies(work, ok):
        return ""
    r = float(np.corrcoef(wait[ok], work[ok])[0, 1])
    if r > -0.5:
        return ""
    return (f" Ranks that compute more wait less (correlation {r:.2f}): the waits mirror the compute "
            f"irregularities, i.e. load imbalance.")


def _varies(values: np.ndarray, ok: np.ndarray) -> bool:
    """Whether ``values`` differ over the ranks in ``ok`` (standard deviation above 0)."""
    return float(np.nanstd(np.where(ok, values, np.nan))) != 0


def _imbalance_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """Compute imbalance: load balance, slow ranks (as ranges) and their excess over the mean."""
    stats = imbalance(ds, by="kind").sel(kind="compute")
    columns = {name: stats[name].values for name in stats.data_vars}
    rows = []
    for i, run in enumerate(map(str, ds["run"].values)):
        s = {name: float(values[i]) for name, values in columns.items()}
        if not np.isfinite(s["imbalance_time"]) or s["imbalance_time"] <= 0:
            continue
        text = (f"Compute load balance {s['load_balance']:.2f} (mean/max): the busiest rank "
                f"{int(s['rank_of_max'])} computes {s['max']:.3g} s against a mean of {s['mean']:.3g} s "
                f"({100 * (s['max_over_mean'] - 1):.0f}% above).")
        slow = slow_ranks(ds, run, threshold=SLOW_RANK, values=context.compute)
        if len(slow):
            text += _slow_rank_text(slow, int(context.ranks[run]))
        rows.append(_row(run, "load_imbalance", "Compute load imbalance", text, s["imbalance_time"]))
    return rows


def _slow_rank_text(slow: pd.DataFrame, n_ranks: int) -> str:
    """Sentence naming the slow ranks (``slow_ranks`` table) of a run of ``n_ranks`` ranks."""
    low, high = 100 * slow["excess"].min(), 100 * slow["excess"].max()
    spread = f"{high:.0f}%" if round(low) == round(high) else f"{low:.0f}-{high:.0f}%"
    return (f" Compute time of ranks {format_ranks(slow['rank'])} is {spread} above the mean "
            f"({len(slow)} of {n_ranks} ranks).")


def _node_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """Nodes whose every rank is slow (a slow node rather than slow ranks)."""
    nodes = by_node(ds, values=context.compute)
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


def _transfer_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """Transfer time: the most a perfect interconnect could remove."""
    transfer = context.parts["time"].sel(kind="transfer").values
    estimated, ranks = context.parts["estimated"].values, context.parts["rank"].values
    rows = []
    for i, run in enumerate(map(str, ds["run"].values)):
        t = transfer[i]
        most = float(np.fmax.reduce(t))
        if not np.isfinite(most) or most <= 0:
            continue
        how = " (waits partly estimated)" if estimated[i] else ""
        text = (f"Data transfer (including MPI overhead) takes {float(np.nanmean(t)):.3g} s per rank on average "
                f"(at most {most:.3g} s, rank {int(ranks[np.nanargmax(t)])}){how}: a perfect interconnect would "
                f"remove at most that; waits would remain.")
        rows.append(_row(run, "transfer", "Network transfer time", text, np.fmin.reduce(t)))
    return rows


def _share_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """MPI share of the time and which calls dominate it (Allreduce/Bcast dominance)."""
    rows = []
    for run, calls in context.mpi.groupby("run", sort=False):
        top = calls.head(2)
        mpi_time = calls["time"].sum() / context.ranks[run]
        names = " and ".join(f"{c} ({100 * s:.0f}%)" for c, s in zip(top["call"], top["time_share"]))
        text = (f"MPI takes {100 * calls['elapsed_share'].sum():.0f}% of the time ({mpi_time:.3g} s per rank); "
                f"{names} account for {100 * top['time_share'].sum():.0f}% of it.")
        collective = top["call"].isin(["MPI_Allreduce", "MPI_Bcast"]).any()
        if collective:
            text += " Collective time like this is usually waiting for the slowest rank, see the wait findings."
        rows.append(_row(str(run), "mpi_share", "Where MPI time goes", text, mpi_time))
    return rows


def _size_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """Small messages: latency-bound traffic."""
    sizes = size_summary(ds)
    if sizes.empty:
        return []
    rows = []
    for run, table in sizes.groupby("run", sort=False):
        small = (table["small_share"] * table["messages"]).sum() / table["messages"].sum()
        if small < 0.5:
            continue
        text = (f"{100 * small:.0f}% of the {int(table['messages'].sum()):,} messages are below 1 KiB: "
                f"latency, not bandwidth, sets their cost; {table['small_time'].sum() / context.ranks[run]:.3g} s per "
                "rank is spent in calls with small messages (waits included).")
        transfer = float(context.parts["time"].sel(run=run, kind="transfer").mean())
        rows.append(_row(str(run), "small_messages", "Small messages", text, transfer * small))
    return rows


def _trend_findings(ds: xr.Dataset, context: _Context) -> list[dict[str, Any]]:
    """Communication share rising with the process count across runs."""
    nprocs = ds["nprocs"].to_pandas()
    if nprocs.nunique() < 2:
        return []
    table = context.mpi.groupby("run")["elapsed_share"].sum()
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
    seconds = float(per_n.iloc[-1] - per_n.iloc[0]) * float(context.elapsed[last])
    return [_row(str(last), "scaling", "Communication share rises with scale", text, seconds)]
